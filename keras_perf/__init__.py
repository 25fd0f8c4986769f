"""Keras training-performance toolkit: how fast is my step, why not faster, which settings are
faster here.

The public API is :data:`_EXPORTS` below; ``__all__`` is derived from it, so the two cannot
drift. The measuring tools are functions here (``keras_perf.diagnose``, ``keras_perf.tune``); the
rest are modules (``keras_perf.devices``, ``keras_perf.data``). Names are imported on first use (PEP
562), so that ``import keras_perf`` and the report tools (``keras_perf.report``, ``python -m
keras_perf compare``) load no framework; the callbacks load Keras when first touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from keras_perf.core.version import __version__

if TYPE_CHECKING:
    from keras_perf.core.machine import capture_environment
    from keras_perf.core.stats import StepStats, summarize
    from keras_perf.data.builder import infer_batch_size
    from keras_perf.profiling.memory_watch import MemoryWatch
    from keras_perf.profiling.step_timer import StepTimer
    from keras_perf.profiling.stop_on_signal import TrainingInterrupted
    from keras_perf.profiling.trace_window import TraceWindow
    from keras_perf.report import Comparison, ReportError, RunContext, RunReport, compare
    from keras_perf.runner.config import TrainConfig
    from keras_perf.runner.session import Profile, profile
    from keras_perf.runner.train import RunResult, Task, run
    from keras_perf.search.diagnose import Diagnosis, diagnose
    from keras_perf.search.tune import TuneResult, autotune, tune

# Public name -> the module that defines it (the one place each lives).
_EXPORTS = {
    "StepTimer": "keras_perf.profiling.step_timer",
    "TraceWindow": "keras_perf.profiling.trace_window",
    "MemoryWatch": "keras_perf.profiling.memory_watch",
    "StepStats": "keras_perf.core.stats",
    "summarize": "keras_perf.core.stats",
    "Profile": "keras_perf.runner.session",
    "profile": "keras_perf.runner.session",
    "TrainingInterrupted": "keras_perf.profiling.stop_on_signal",
    "infer_batch_size": "keras_perf.data.builder",
    "RunReport": "keras_perf.report.run_report",
    "ReportError": "keras_perf.core.files",
    "RunContext": "keras_perf.report.context",
    "Comparison": "keras_perf.report.comparison",
    "compare": "keras_perf.report.comparison",
    "capture_environment": "keras_perf.core.machine",
    "TrainConfig": "keras_perf.runner.config",
    "Task": "keras_perf.runner.train",
    "RunResult": "keras_perf.runner.train",
    "run": "keras_perf.runner.train",
    "Diagnosis": "keras_perf.search.diagnose",
    "diagnose": "keras_perf.search.diagnose",
    "TuneResult": "keras_perf.search.tune",
    "tune": "keras_perf.search.tune",
    "autotune": "keras_perf.search.tune",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_perf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
