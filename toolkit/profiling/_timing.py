"""StepTimer's stateless helpers and the records of what they timed; no framework imported."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core import compat


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def never() -> bool:
    return False


def profiler_probe() -> Callable[[], bool]:
    """The backend's check for anyone's running profiler, once per fit; never one that raises."""
    from toolkit import backend

    try:
        probe = backend.get().profiler_probe()
        probe()
    except Exception:  # noqa: BLE001 - no probe: only the toolkit's own traces are seen
        return never
    return probe


def floats(logs: compat.Logs) -> dict[str, float]:
    """Epoch-level logs as floats (once per epoch; Keras has already synced them by then)."""
    out = {}
    for k, v in (logs or {}).items():
        with contextlib.suppress(TypeError, ValueError):
            out[str(k)] = float(v)
    return out


def settled(
    end: tuple[Any, ...],
    following: tuple[Any, ...] | None,
    edges: list[tuple[int, tuple[bool, float]]],
    same_clock: bool,
) -> tuple[float, tuple[bool, int]]:
    """A step's end stamp ``(time, profiler state)``, unless a device-synced trace edge came after
    it was dispatched: it had ended by then, outside what that edge started or stopped."""
    at, mark = end[1], (end[2], end[3])
    if following is not None:
        for generation, (before, synced_at) in edges:
            if following[3] < generation <= mark[1]:
                if same_clock:
                    at = min(at, synced_at)
                return at, (before, generation - 1)
    return at, mark


def metrics_of(value: Any, where: str) -> dict[str, float]:
    """An epoch's metrics as Keras logs them (null where not finite)."""
    metrics = fields.mapping(where, value)
    for key, metric in metrics.items():
        fields.metric(f"{where}.{key}", metric)
    return {str(k): v for k, v in metrics.items()}


@dataclasses.dataclass(frozen=True)
class Epoch(fields.Record):
    """One epoch as StepTimer saw it: `seconds` begin to end, its `steps`, `step_seconds` inside
    its executions, and its final `metrics`. `epoch` counts from 0."""

    WHERE = "epochs[0]"

    epoch: int
    seconds: float = fields.field(missing=0.0)
    steps: int
    step_seconds: float = fields.field(missing=0.0)
    metrics: Mapping[str, float] = fields.field(default_factory=dict, read=metrics_of)


def _steps(value: Any, field: str) -> tuple[int, int] | None:
    """A [first, last] pair of steps, or None."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise fields.bad(field, value, "a [first, last] pair of steps or null")
    return (
        fields.number(f"{field}[0]", value[0], counts=True),
        fields.number(f"{field}[1]", value[1], counts=True),
    )


def _files(files: Any, where: str) -> tuple[str, ...]:
    if files is not None and not (
        isinstance(files, list) and all(isinstance(f, str) for f in files)
    ):
        raise fields.bad(where, files, "a list of file names")
    return tuple(files or ())


@dataclasses.dataclass(frozen=True)
class Traced(fields.Record):
    """What a TraceWindow did: steps asked for and traced, files, markers, error (``trace``)."""

    WHERE = "trace"

    logdir: str = fields.field(missing="")
    requested_steps: tuple[int, int] = fields.field(read=lambda v, at: _steps(v, at) or (0, 0))
    traced_steps: tuple[int, int] | None = fields.field(None, read=_steps)
    files: tuple[str, ...] = fields.field((), read=_files)
    marked_steps: int = 0
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class FitCall(fields.Record):
    """report.json's ``fit_call``: :func:`fit_call_parts`, from `counted_from`."""

    WHERE = "fit_call"
    LENIENT = True  # a view of the run: one this version cannot read is None

    whole_s: float
    start_up_s: float
    steps_s: float
    exit_s: float | None = None
    counted_from: str = fields.field("fit call", key="from", missing="train begin")

    @property
    def timed(self) -> bool:
        """Whether the call itself was timed (``profile().fit``, the runner)."""
        return self.counted_from == "fit call"


def fit_call_parts(
    begin: float | None,
    first: float | None,
    end: float | None,
    called: float | None = None,
    returned: float | None = None,
) -> FitCall | None:
    """The ``fit`` call in parts that add up: ``start_up_s`` (called -> first batch begins),
    ``steps_s`` (-> train end), ``exit_s`` (-> returned; the input iterator is destroyed): wall
    time every user pays that no step shows. `called`/`returned` bracket a wrapped call (else
    start-up counts from `begin`, no exit; a pair not holding this fit is ignored). None: no fit."""
    if called is None or returned is None or begin is None or not called <= begin <= returned:
        called = returned = None
    elif end is not None and end > returned:
        end = None
    start = called if called is not None else begin
    if start is None:
        return None
    stop = returned if returned is not None else end
    if stop is None:
        return None
    last = end if end is not None else stop  # a fit that raised ends where it returned
    first = first if first is not None else last  # no batch began: all of it was start-up
    return FitCall(
        whole_s=stop - start,
        start_up_s=first - start,
        steps_s=last - first,
        exit_s=stop - last if returned is not None and end is not None else None,
        counted_from="fit call" if called is not None else "train begin",
    )


# Stages the runner marks (profile(): LAUNCH, and BEFORE_FIT on; ``Profile.mark`` names more).
LAUNCH, SET_UP, MODEL, BEFORE_FIT, FIT_CALL, AFTER_FIT, IN_PROFILE = (
    "launch",
    "set-up",
    "model",
    "before fit",
    "fit call",
    "after fit",
    "in profile()",
)


def process_start() -> float | None:
    """When this process started, on ``time.perf_counter``'s clock (None: unknown). Linux: its
    ``/proc/self/stat`` ticks vs ``CLOCK_BOOTTIME`` (psutil's is whole seconds); else psutil."""
    try:
        with open("/proc/self/stat", "rb") as f:
            after_name = f.read().rsplit(b")", 1)[1].split()  # the name may hold spaces
        ticks = int(after_name[19])  # field 22: starttime; field 3 (state) is after_name[0]
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.perf_counter() - age
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil

        return time.perf_counter() - (time.time() - psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - unknown: the report has no process account
        return None


@dataclasses.dataclass(frozen=True)
class Stage(fields.Record):
    """A process stage: name, seconds, and of them the backend's compiling (None: not watched)."""

    name: str
    seconds: float
    compile_s: float | None = None


@dataclasses.dataclass(frozen=True)
class ProcessTime(fields.Record):
    """The process, start to report, in `stages` adding up to :attr:`whole_s`: a user waits for
    the process (imports, data, the model's build), not just the fit."""

    WHERE = "process"

    stages: tuple[Stage, ...]

    @property
    def whole_s(self) -> float:
        return sum(s.seconds for s in self.stages)

    def merged(self) -> tuple[Stage, ...]:
        """The stages with one name (two fits' ``fit call``) as one, where it first came."""
        merged: dict[str, Stage] = {}
        for s in self.stages:
            was = merged.get(s.name)
            if was is not None:
                both = [c for c in (was.compile_s, s.compile_s) if c is not None]
                s = Stage(s.name, was.seconds + s.seconds, sum(both) if both else None)
            merged[s.name] = s
        return tuple(merged.values())

    @classmethod
    def of(
        cls, started: float | None, marks: Sequence[tuple[str, float, float | None]]
    ) -> ProcessTime | None:
        """The stages ending at `marks` ``(name, time, compile seconds)``, the first from
        `started`; a stage marked twice ends at 0 s. None: the start is unknown."""
        if started is None or not marks:
            return None
        out, last = [], started
        for name, at, compile_s in marks:
            at = max(at, last)
            out.append(Stage(name, at - last, compile_s))
            last = at
        return cls(tuple(out))

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> ProcessTime | None:
        """report.json's ``process`` (None: an older report), each value checked.

        Raises:
            ReportError: a value not of its kind, naming it (``process.stages[1].seconds``)."""
        return None if d is None else super().from_dict(d, where)
