"""Step-time profiling: pure statistics (``stats``) and the callbacks' shared state (``events``),
the StepTimer / TraceWindow / MemoryWatch callbacks, FLOPs and MFU (``flops``), and
``profile()`` (``session``), which ties them to a RunReport. Import the submodules directly;
none imports TensorFlow at import time (the backend seam, ``toolkit.backend``, calls it)."""
