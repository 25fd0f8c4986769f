"""Step-time profiling: pure statistics (``stats``), the StepTimer / TraceWindow / MemoryWatch
callbacks, and ``profile()``, which ties them to a RunReport. Import the submodules directly;
``stats`` imports no TensorFlow."""
