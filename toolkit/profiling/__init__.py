"""The measure layer: the callbacks (StepTimer, TraceWindow, the fit progress bar),
the TensorBoard scalars, FLOPs and MFU (``flops``) and inference timing. They import Keras, not
TensorFlow (the backend seam, ``toolkit.backend``, calls the framework). Import the submodules
directly."""
