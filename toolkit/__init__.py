"""Keras training-performance toolkit: how fast is my step, why not faster, which settings are
faster here. The public API is :data:`_EXPORTS` (``__all__`` derives from it): measuring tools
here, the rest modules. Names load on first use (PEP 562), so ``import toolkit`` and the report
tools load no framework; the callbacks load Keras when first touched."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from toolkit.core.version import __version__

if TYPE_CHECKING:
    from toolkit.core._anatomy import Anatomy
    from toolkit.core.interrupts import TrainingInterrupted
    from toolkit.core.machine import capture_environment
    from toolkit.core.stats import StepStats, summarize
    from toolkit.data.builder import infer_batch_size
    from toolkit.profiling.step_timer import StepTimer
    from toolkit.profiling.trace_window import TraceWindow
    from toolkit.report import Comparison, ReportError, RunContext, RunReport, compare
    from toolkit.runner.config import TrainConfig
    from toolkit.runner.session import Profile, profile
    from toolkit.runner.task import Task
    from toolkit.runner.train import RunResult, run
    from toolkit.search.anatomy import anatomy
    from toolkit.search.diagnose import Diagnosis, diagnose
    from toolkit.search.memory_fit import BatchFit, fits
    from toolkit.search.tune import TuneResult, autotune, tune

_EXPORTS = {  # public name -> the module that defines it (the one place each lives)
    "StepTimer": "toolkit.profiling.step_timer",
    "TraceWindow": "toolkit.profiling.trace_window",
    "StepStats": "toolkit.core.stats",
    "summarize": "toolkit.core.stats",
    "Profile": "toolkit.runner.session",
    "profile": "toolkit.runner.session",
    "TrainingInterrupted": "toolkit.core.interrupts",
    "infer_batch_size": "toolkit.data.builder",
    "RunReport": "toolkit.report.run_report",
    "ReportError": "toolkit.core.files",
    "RunContext": "toolkit.report.context",
    "Comparison": "toolkit.report.comparison",
    "compare": "toolkit.report.comparison",
    "capture_environment": "toolkit.core.machine",
    "TrainConfig": "toolkit.runner.config",
    "Task": "toolkit.runner.task",
    "RunResult": "toolkit.runner.train",
    "run": "toolkit.runner.train",
    "Anatomy": "toolkit.core._anatomy",
    "anatomy": "toolkit.search.anatomy",
    "Diagnosis": "toolkit.search.diagnose",
    "diagnose": "toolkit.search.diagnose",
    "TuneResult": "toolkit.search.tune",
    "tune": "toolkit.search.tune",
    "autotune": "toolkit.search.tune",
    "BatchFit": "toolkit.search.memory_fit",
    "fits": "toolkit.search.memory_fit",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _start() -> None:
    """Holds Ctrl-C and SIGTERM from the first import until ``toolkit.cli.main`` says them."""
    from toolkit.core import interrupts

    if interrupts.starting("toolkit"):
        interrupts.install(early=True)


_start()
