"""Keras/TensorFlow training-performance toolkit: how fast is my step, and why not faster.

The public API is the list below. Names are imported on first use (PEP 562), so that
``import toolkit`` and the report tools (``toolkit.report``, ``python -m toolkit compare``) do
not load TensorFlow, which takes seconds; the callbacks load it (and Keras) when first touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from toolkit._version import __version__

if TYPE_CHECKING:
    from toolkit.profiling.memory_watch import MemoryWatch
    from toolkit.profiling.session import Profile, TrainingInterrupted, profile
    from toolkit.profiling.stats import StepStats, summarize
    from toolkit.profiling.step_timer import StepTimer, infer_batch_size
    from toolkit.profiling.trace_window import TraceWindow
    from toolkit.report import Comparison, ReportError, RunReport, capture_environment, compare
    from toolkit.train import RunResult, Task, TrainConfig, run

_EXPORTS = {
    "StepTimer": "toolkit.profiling.step_timer",
    "infer_batch_size": "toolkit.profiling.step_timer",
    "TraceWindow": "toolkit.profiling.trace_window",
    "MemoryWatch": "toolkit.profiling.memory_watch",
    "StepStats": "toolkit.profiling.stats",
    "summarize": "toolkit.profiling.stats",
    "Profile": "toolkit.profiling.session",
    "profile": "toolkit.profiling.session",
    "TrainingInterrupted": "toolkit.profiling.session",
    "RunReport": "toolkit.report",
    "Comparison": "toolkit.report",
    "ReportError": "toolkit.report",
    "compare": "toolkit.report",
    "capture_environment": "toolkit.report",
    "Task": "toolkit.train",
    "TrainConfig": "toolkit.train",
    "RunResult": "toolkit.train",
    "run": "toolkit.train",
}

__all__ = [
    "Comparison",
    "MemoryWatch",
    "Profile",
    "ReportError",
    "RunReport",
    "RunResult",
    "StepStats",
    "StepTimer",
    "Task",
    "TraceWindow",
    "TrainConfig",
    "TrainingInterrupted",
    "__version__",
    "capture_environment",
    "compare",
    "infer_batch_size",
    "profile",
    "run",
    "summarize",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
