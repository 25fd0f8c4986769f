"""StepTimer's helpers that need none of its state: where its log lines go, the profiler probe,
epoch logs as floats, a late batch-end stamp settled against a trace edge, when the process
started; and the records of what they timed: an epoch, a trace window, the whole ``fit`` call
(start-up, steps, exit), the whole process in stages.

Imports no framework at import time (the probe asks the backend seam when it is called).
"""

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
    """The backend's check for a running profiler (any: the toolkit's, Keras's
    ``TensorBoard(profile_batch=...)``, a user's), read once per fit; never one that raises."""
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
    """A step's end stamp, ``(time, profiler state)``, as its batch-end hook wrote it, unless
    a trace edge that waited for the device (``PROFILER.synced``) came after the step was
    dispatched (before the next batch begin): the step had ended by then, whenever the
    callback thread got to its hook, so it ran outside what that edge started or stopped.
    `same_clock`: the edges' times are on the timer's clock (``time.perf_counter``)."""
    at, mark = end[1], (end[2], end[3])
    if following is not None:
        for generation, (before, synced_at) in edges:
            if following[3] < generation <= mark[1]:
                if same_clock:
                    at = min(at, synced_at)
                return at, (before, generation - 1)
    return at, mark


def metrics_of(value: Any, where: str) -> dict[str, float]:
    """An epoch's metrics: any number each (a loss may be NaN, an R² negative; null where it
    was not finite), as Keras logs them."""
    metrics = fields.mapping(where, value)
    for key, metric in metrics.items():
        fields.metric(f"{where}.{key}", metric)
    return {str(k): v for k, v in metrics.items()}


@dataclasses.dataclass(frozen=True)
class Epoch(fields.Record):
    """One epoch as StepTimer saw it: `seconds` from its begin to its end, the `steps` it
    ran, `step_seconds` of them inside its executions, and its final `metrics` (Keras's
    logs as floats). `epoch` counts from 0, as Keras's callbacks do. One entry of
    report.json's ``epochs``."""

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
    """What a TraceWindow did: the steps asked for and those it traced (None: not reached),
    the trace files it left under `logdir`, the step markers it wrote, and why it failed.
    report.json's ``trace``, less what the report adds (``view``, ``analysis``)."""

    WHERE = "trace"

    logdir: str = fields.field(missing="")
    requested_steps: tuple[int, int] = fields.field(read=lambda v, at: _steps(v, at) or (0, 0))
    traced_steps: tuple[int, int] | None = fields.field(None, read=_steps)
    files: tuple[str, ...] = fields.field((), read=_files)
    marked_steps: int = 0
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class FitCall(fields.Record):
    """The whole ``fit`` call in three parts that add up to `whole_s`: start-up (fit called
    -> its first batch begins), steps (-> train end) and exit (-> fit returned; None where the
    call was not timed around, or raised). `counted_from`: ``"fit call"``, or ``"train
    begin"`` where nothing timed the call itself (then the start-up counts from train
    begin). report.json's ``fit_call``."""

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
    """The whole ``fit`` call in three parts that add up: ``start_up_s`` (fit called -> the
    first batch begins: data adapter, build, callbacks' train begin, the iterator), ``steps_s``
    (the first batch begins -> train end: steps, validation, epoch ends) and ``exit_s`` (train
    end -> fit returned: the end of fit, where the input iterator is destroyed).

    Why apart: a StepTimer sees train begin to train end; what fit costs before and after is
    wall time every user pays that no step shows (a tf.data iterator's teardown took seconds).
    `begin`, `first` and `end` are StepTimer's clock at train begin, the first batch begin and
    train end; `called` and `returned` bracket the fit call where something wrapped it
    (``profile().fit``, the runner), on the same clock. Without them the start-up is counted
    from train begin (``"from": "train begin"``) and the exit is None. A pair that does not
    hold this fit's train begin (one timed around an earlier fit) is ignored; a train end after
    the call returned is a fit that raised, whose timer was stopped later. None: no fit.
    """
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


# The stages of a process as the runner marks them, in order; profile() marks LAUNCH (to
# its block) and those from BEFORE_FIT on, IN_PROFILE where no fit was timed (a custom
# loop), and a user's own ``Profile.mark`` names more.
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
    """When this process started, on ``time.perf_counter``'s clock (None: not known). On Linux
    from the kernel's own count, to its clock tick (10 ms): ``/proc/self/stat``'s start time,
    in ticks since boot, against ``CLOCK_BOOTTIME``. psutil's ``create_time`` adds a boot time
    that ``/proc/stat`` gives in whole seconds, so it can be up to a second off; it is read
    elsewhere (macOS gives it to the microsecond)."""
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
    """One stage of the process: its name, its seconds, and of them the seconds the backend
    timed compiling (`compile_s`; None: not watched, or a backend that times no compile
    outside a fit: JAX's monitoring events do, so a model's build shows its initializers')."""

    name: str
    seconds: float
    compile_s: float | None = None


@dataclasses.dataclass(frozen=True)
class ProcessTime(fields.Record):
    """The process that ran the fit, from its start to its report, in `stages` that follow
    one another and so add up to :attr:`whole_s`.

    Why: a user waits for the process, not the fit: the interpreter and its imports
    (TensorFlow's alone takes seconds), the data, the model's build (on JAX each weight's
    initializer compiles), what ran after the fit. The first stage counts from the kernel's
    start of the process (:func:`process_start`), each later one from the one before it.
    """

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
        """The stages that end at `marks` (``(name, time, compile seconds)``, the time on
        `started`'s clock, in the order they ran), the first from `started`. A mark before the
        one ahead of it (a stage marked twice) ends its stage there, at 0 s. None: the start
        is unknown."""
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
        """report.json's ``process`` (None: a report written before it was measured), each
        value checked.

        Raises:
            ReportError: a value not of its kind, naming it (``process.stages[1].seconds``).
        """
        return None if d is None else super().from_dict(d, where)
