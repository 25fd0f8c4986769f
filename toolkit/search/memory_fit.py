"""The largest batch that fits: ``toolkit.fits(model, data, limit=...)`` and the memory verb.

Trying a batch risks the process, so each try runs in a fresh process (``workload.peak_at``). A
short fit's peak is measured at two or three batch sizes, a :class:`PeakLine` fitted through them,
and the largest batch under the limit read off and run to check it. A check over the limit or
:data:`MISS` off the line refits once (on a CPU the peak grows in steps). A process past
:data:`HOST_CAP` of the host's RAM is stopped."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core.stats import format_mb
from toolkit.core.terminal import Block, Table

__all__ = ["BatchFit", "fits"]

# A prediction this far past the largest batch measured is a reach, approached first (_toward).
FAR = 8
REACH_RUNS = 3
STEPS = 4  # a peak run's training steps, after its first call (which allocates and compiles)
SCALE = (1, 2, 4)  # the batch sizes measured by default, times the run's own
# ... and where the peak did not grow measurably, two more (_further)
FURTHER, FURTHER_SCALE, FURTHER_MOST = 4.0, 256, 2048
# The least growth a line is read from: on a CPU two processes at one batch differ by tens of MB.
NOISE_MB = 16.0
MISS = 0.05  # a check further than this from the line (or over the limit) refits it...
REFITS = 1  # ... this many times at most
CHILD_TIMEOUT_S = 900.0  # one peak run at most (a large batch on a CPU is slow)
HOST = "host"  # a peak of the process's resident memory (a CPU), not of a device
HOST_SHARE = 0.8  # of the RAM available, the default limit on a CPU: the rest is the machine's
HOST_CAP = 0.9  # of the RAM available when a fresh process starts: past it, it is stopped
SHIPPED = "TOOLKIT_FITS_SHIPPED"
SHIPPED_FN = "toolkit.search.memory_fit:shipped"
# Binary units either way: the toolkit prints MiB as "MB", so a figure copied from a screen holds.
_UNITS = {"": 1.0, "m": 1.0, "mb": 1.0, "mib": 1.0, "g": 1024.0, "gb": 1024.0, "gib": 1024.0,
          "t": 1024.0**2, "tb": 1024.0**2, "tib": 1024.0**2}  # fmt: skip
LIMIT = "--memory_limit (limit)"  # how a message names the limit: flag, then argument
SIZES = "--batch_sizes (batch_sizes)"
STEPS_NAME = "--steps (steps)"


def _per_example(value: float) -> str:
    """What one example adds: ``0.94 MB``, or under a tenth of one in KB, not rounded away."""
    return format_mb(value) if abs(value) >= 0.1 else f"{value * 1024:.1f} KB"


@dataclasses.dataclass(frozen=True)
class MemoryPeak(fields.Record):
    """One fresh process's `peak_mb` of `memory` (:data:`HOST` or a device) at `batch_size`, or
    its `error` (`out_of_memory` where an allocation failed or the OOM killer struck)."""

    batch_size: int
    peak_mb: float | None = None
    memory: str = HOST
    limit_mb: float | None = None
    error: str | None = None
    out_of_memory: bool = False
    synthetic: bool = False  # measured on random batches of the data's shapes (too few examples)
    examples: int | None = None  # the examples your data holds (None: unknown, or a recipe's)

    @property
    def ok(self) -> bool:
        return self.peak_mb is not None

    def words(self) -> str:
        """``out of memory at batch 512 (killed by SIGKILL...)``, or the failure, in one line."""
        if self.out_of_memory:
            return f"out of memory at {_at(self.batch_size)} ({self.error})"
        return f"{_at(self.batch_size)} failed in a fresh process: {self.error}"

    @classmethod
    def of(cls, batch_size: int | None, got: Any) -> MemoryPeak:
        """The peak a ``_processes.ChildResult`` answered; SIGKILL (the OOM killer's) or an
        out-of-memory error is out of memory at `batch_size`; else its failure."""
        if got.ok:
            try:
                return cls.from_dict(got.answer)
            except (KeyError, TypeError, ValueError) as e:
                return cls(batch_size or 0, error=f"a malformed answer ({e})")
        if got.signal == "SIGKILL":
            said = "killed by SIGKILL, as the kernel's out-of-memory killer ends a process"
            return cls(batch_size or 0, error=said, out_of_memory=True)
        from toolkit.search._model_fit import out_of_memory

        error = got.error or "no result"
        return cls(batch_size or 0, error=error, out_of_memory=out_of_memory(RuntimeError(error)))


def _at(batch: int) -> str:
    """``batch 256``; 0 (died before reading your pipeline): "your data's batch"."""
    return f"batch {batch:,}" if batch else "your data's batch"


@dataclasses.dataclass(frozen=True)
class PeakLine(fields.Record):
    """peak ≈ `base_mb` + `per_example_mb` × batch, by least squares; `r2` (None with two
    points, which fit exactly) and `worst_pct` (the farthest peak off it, in %) say the fit."""

    base_mb: float
    per_example_mb: float
    points: int
    r2: float | None
    worst_pct: float
    span: int = 0  # the largest batch measured less the smallest
    worst_mb: float = 0.0  # the farthest a measured peak lies from the line, in MiB

    @classmethod
    def through(cls, measured: Sequence[tuple[int, float]]) -> PeakLine:
        """The least-squares line through ``(batch, peak MiB)`` pairs of two batch sizes or more."""
        xs, ys = [float(b) for b, _ in measured], [p for _, p in measured]
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        if n < 2 or sxx == 0:
            raise ValueError(f"{SIZES}: a line needs two different batch sizes measured")
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        base = my - slope * mx
        residuals = [y - (base + slope * x) for x, y in zip(xs, ys, strict=True)]
        total = sum((y - my) ** 2 for y in ys)
        r2 = None if n < 3 else (1.0 - sum(r * r for r in residuals) / total if total else 1.0)
        worst = max(abs(r) / y * 100 for r, y in zip(residuals, ys, strict=True) if y > 0)
        span = int(max(xs) - min(xs))
        return cls(base, slope, n, r2, worst, span, max(abs(r) for r in residuals))

    def at(self, batch: float) -> float:
        """The peak the line puts at `batch`, in MiB."""
        return self.base_mb + self.per_example_mb * batch

    @property
    def growth_mb(self) -> float:
        """How much the peak grows over the batch sizes measured, on the line."""
        return self.per_example_mb * self.span

    @property
    def grows(self) -> bool:
        """Whether the peak grows beyond the noise, which would put the largest batch anywhere."""
        return self.growth_mb > max(NOISE_MB, 2 * self.worst_mb)

    def largest_under(self, limit_mb: float) -> int | None:
        """The largest batch under `limit_mb` (below 1: none fits; None: no measurable growth)."""
        if not self.grows:
            return None
        return math.floor((limit_mb - self.base_mb) / self.per_example_mb)

    def words(self) -> str:
        """``peak ≈ 776 MB + 1.12 MB × batch (3 points: R² 0.9998, each within 0.3%)``."""
        fit = f"R² {self.r2:.4f}, " if self.r2 is not None else "exact through two, untested; "
        return (
            f"peak ≈ {format_mb(self.base_mb)} + {_per_example(self.per_example_mb)} × batch "
            f"({self.points} points: {fit}each within {self.worst_pct:.1f}%)"
        )


@dataclasses.dataclass(frozen=True)
class BatchFit(fields.Record):
    """What :func:`fits` found: the points, line and limit, the largest batch predicted under it
    (`batch_size`; None: `why` says why), and `check`, that batch run."""

    EXTRA = ("ratio", "under_limit")

    target: str
    backend: str
    memory: str
    steps: int
    points: tuple[MemoryPeak, ...]
    line: PeakLine | None
    limit_mb: float | None
    limit_from: str
    batch_size: int | None
    predicted_mb: float | None
    check: MemoryPeak | None
    why: str = ""

    @property
    def examples(self) -> int | None:
        """The examples your data holds, as a measured point read them (None: unknown)."""
        return next((p.examples for p in self.points if p.examples), None)

    @property
    def ratio(self) -> float | None:
        """The predicted peak over the measured one at :attr:`batch_size` (None: not checked)."""
        if self.check is None or not self.check.ok or not self.predicted_mb:
            return None
        return self.predicted_mb / float(self.check.peak_mb or 1.0)

    @property
    def under_limit(self) -> bool | None:
        """Whether the checked batch's measured peak stayed under the limit (None: unknown)."""
        if self.check is None or self.limit_mb is None:
            return None
        return self.check.ok and float(self.check.peak_mb or 0.0) <= self.limit_mb

    def screen(self) -> list[Block]:
        """What the memory verb prints: the peaks' table, the line, limit, prediction, check."""
        whose = "resident host memory" if self.memory == HOST else f"{self.memory} memory"
        out: list[Block] = [
            f"memory: {self.target} on {self.backend}: peak {whose} of {_steps(self.steps)}, "
            "each batch size in a fresh process",
            _table(self),
        ]
        if any(p.synthetic for p in (*self.points, self.check) if p is not None):
            out.append(
                "synthetic: batches larger than the training data, measured on random batches "
                "of its shapes (--use_synthetic_data; the data's own memory left out)"
            )
        if self.line is not None:
            out.append(f"line: {self.line.words()}")
        if self.limit_mb is not None:
            out.append(f"limit: {format_mb(self.limit_mb)} ({self.limit_from})")
        if self.batch_size is None:
            return [*out, f"largest batch: not predicted ({self.why})"]
        if self.under_limit is False:
            out.append(
                f"largest batch: none found under the limit: the predicted {self.batch_size:,} "
                f"(the line's peak there {format_mb(self.predicted_mb)}) did not stay under it "
                "when run; measure smaller --batch_sizes, or give a larger --memory_limit"
            )
            return [*out, _check_words(self)]
        out.append(
            f"largest batch predicted to fit: {self.batch_size:,} (the line's peak there "
            f"{format_mb(self.predicted_mb)})" + (f"; {self.why}" if self.why else "")
        )
        return [*out, *_reach_words(self), _check_words(self)]


def _steps(n: int) -> str:
    return f"{n} step" + ("" if n == 1 else "s")


def _table(found: BatchFit) -> Table:
    rows = []
    for p in (*found.points, *((found.check,) if found.check is not None else ())):
        line = None if found.line is None else format_mb(found.line.at(p.batch_size))
        notes = [] if p.ok else ["out of memory" if p.out_of_memory else "failed"]
        notes += ["synthetic"] if p.synthetic else []
        notes += ["checked"] if p is found.check else []
        rows.append((f"{p.batch_size:,}", format_mb(p.peak_mb), line, ": ".join(notes)))
    return Table.of(("batch", "measured peak", "the line's", ""), rows, right=(0, 1, 2))


def _reach_words(found: BatchFit) -> list[str]:
    """Where the prediction reaches past the data or, unchecked, far past the batches measured."""
    out = []
    measured = max((p.batch_size for p in found.points if p.ok), default=None)
    examples = found.examples
    batch = found.batch_size or 0
    if examples and batch > examples:
        out.append(
            f"data: your data holds {examples:,} examples, fewer than the batch: a batch past "
            "that repeats them, and your data never makes one so large: memory does not "
            "bound its batch here"
        )
    if found.check is None and measured and batch > FAR * measured:
        check = "" if _far_past_the_data(found) else ", or let it check"
        out.append(
            f"reach: {batch / measured:,.0f}× the largest batch measured ({measured:,}), read "
            f"off the line and not run (measure --batch_sizes nearer it{check})"
        )
    return out


def _check_words(found: BatchFit) -> str:
    check = found.check
    if check is None:
        return "check: not run"
    if not check.ok:
        return f"check: {check.words()}"
    room = float(found.limit_mb or 0.0) - float(check.peak_mb or 0.0)
    if room >= 0:
        under = f"{format_mb(room)} under the limit"
    else:
        under = f"OVER the limit by {format_mb(-room)}"
    return (
        f"check: batch {check.batch_size:,} measured at {format_mb(check.peak_mb)}, predicted vs "
        f"measured {found.ratio:.2f}×, {under}"
    )


# ---------------------------------------------------------------------------- the user's input


def parse_limit(value: Any) -> float | None:
    """A memory limit in MiB from a number (MiB) or a size (``4GB``, binary); None: none given.

    Raises:
        ConfigError: anything else, or a limit not above 0."""
    from toolkit.core.checks import ConfigError

    if value is None:
        return None
    number = value
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", value)
        unit = _UNITS.get(m.group(2).lower()) if m else None
        number = float(m.group(1)) * unit if m and unit else None
    real = isinstance(number, int | float) and not isinstance(number, bool)
    if not (real and math.isfinite(number) and number > 0):
        raise ConfigError(
            f"{LIMIT} must be a size above 0 in MiB (4096) or with its unit (4GB, 512MB), "
            f"got {value!r}"
        )
    return float(number)


def check_sizes(sizes: Any) -> tuple[int, ...] | None:
    """The batch sizes to measure, smallest first (None: the defaults, :data:`SCALE`).

    Raises:
        ConfigError: not two different integers >= 1."""
    from toolkit.core.checks import ConfigError, check_number

    if sizes is None:
        return None
    sizes = tuple(sizes)
    for size in sizes:
        check_number(SIZES, size, integer=True, least=1)
    if len(set(sizes)) < 2:
        said = ",".join(str(s) for s in sizes)
        raise ConfigError(f"{SIZES} must be two different integers >= 1 or more, got {said}")
    return tuple(sorted({int(s) for s in sizes}))


def check_steps(steps: Any) -> int:
    """`steps` as a count of training steps, or ConfigError naming the flag and argument."""
    from toolkit.core.checks import check_number

    check_number(STEPS_NAME, steps, integer=True, least=1)
    return int(steps)


# ---------------------------------------------------------------------------- the search


def fits(
    model: Any,
    data: Any = None,
    *,
    limit: float | str | None = None,
    batch_sizes: Sequence[int] | None = None,
    config: Any = None,
    steps: int = STEPS,
    check: bool = True,
    progress: Callable[[str], Any] | None = None,
    timeout_s: float = CHILD_TIMEOUT_S,
) -> BatchFit:
    """The largest batch that fits in memory, predicted from peaks measured in fresh processes
    and checked. On a GPU, call it before your own process fills the device.

    Args:
        model: your compiled Keras model (with `data`); or a function returning ``(model, data)``,
            ``"module:function"``, a recipe's name, or a Target.
        data: with a model, its training data: arrays or a ``tf.data`` pipeline.
        limit: MiB, or a size (``"12GB"``); default: the device's memory, or :data:`HOST_SHARE` of
            available RAM.
        batch_sizes: two or more sizes to measure (default: :data:`SCALE` times the run's batch).
        config: a ``TrainConfig`` for the runs.
        steps: training steps in each run.
        check: run the predicted batch and measure its peak.
        progress: called with a line per run.
        timeout_s: one run at most, in seconds.

    Returns:
        A :class:`BatchFit`: ``found.batch_size``, ``found.ratio`` (predicted / measured peak).

    Raises:
        ValueError: a bad argument, or a limit below what one batch needs.
        toolkit.runner.task.SetupError: a run that failed other than by running out of memory."""
    limit_mb, sizes, steps = parse_limit(limit), check_sizes(batch_sizes), check_steps(steps)
    with _handed_over(model, data, config) as (target, env, words, batch):
        runs = _Runs(target, env, steps, timeout_s, progress)
        first = () if sizes or batch else runs.measure((None,))  # your data's batch
        batch = batch or (first[0].batch_size if first else 0)  # 0: unread, sizes given
        more = () if first and not first[0].ok else SCALE[len(first) :]
        points = (*first, *runs.measure(sizes or tuple(sorted({batch * k for k in more}))))
        found = _predicted(words, runs, points, *_limit(limit_mb, points))
        if not sizes and _flat(found):
            points += runs.measure(_further(found, batch))
            found = _predicted(words, runs, points, *_limit(limit_mb, points))
        if check and _far_past_the_data(found):
            return dataclasses.replace(found, why="; ".join(w for w in (found.why, UNRUN) if w))
        return _checked(_toward(found, runs), runs) if check else found


# A prediction far past the data is not run: its check would hold the host's RAM for minutes.
UNRUN = f"not run: over {FAR}× the examples your data holds, a batch it never makes"


def _far_past_the_data(found: BatchFit) -> bool:
    """Whether the prediction lies over :data:`FAR` times past the data's examples: not run."""
    examples = found.examples
    return bool(examples and found.batch_size and found.batch_size > FAR * examples)


def _toward(found: BatchFit, runs: Any) -> BatchFit:
    """`found` predicted again from a batch at the geometric mean where over :data:`FAR` times
    past the largest measured: a slope read over small batches can be far off at a large one."""
    first, on_the_way = found.batch_size, []
    for _ in range(REACH_RUNS):
        largest = max((p.batch_size for p in found.points if p.ok), default=None)
        if found.batch_size is None or largest is None or found.batch_size <= FAR * largest:
            break
        on_the_way.append(max(2 * largest, round(math.sqrt(largest * found.batch_size))))
        points = (*found.points, *runs.measure(on_the_way[-1:]))
        found = _predicted(found.target, runs, points, found.limit_mb, found.limit_from)
    if not on_the_way:
        return found
    sizes = " and ".join(f"{b:,}" for b in on_the_way)
    said = f"{first:,} first predicted: measured batch {sizes} on the way"
    return dataclasses.replace(found, why="; ".join(w for w in (found.why, said) if w))


def _further(found: BatchFit, batch: int) -> tuple[int, int]:
    """Two batch sizes where the peak should rise :data:`FURTHER` × the noise, within
    :data:`FURTHER_SCALE` to :data:`FURTHER_MOST` times the run's batch (large ones are slow)."""
    slope = found.line.per_example_mb if found.line is not None else 0.0
    at = math.ceil(FURTHER * NOISE_MB / slope) if slope > 0 else batch * FURTHER_SCALE
    at = max(batch * FURTHER_SCALE, min(at, batch * FURTHER_MOST))
    return at, 2 * at


def _flat(found: BatchFit) -> bool:
    """Whether the peak grew within the noise, none out of memory: larger batches would tell."""
    return (found.line is not None and not found.line.grows
            and not any(p.out_of_memory for p in found.points))  # fmt: skip


def measure_peak(
    model: Any,
    data: Any = None,
    *,
    batch_size: int,
    config: Any = None,
    steps: int = STEPS,
    progress: Callable[[str], Any] | None = None,
    timeout_s: float = CHILD_TIMEOUT_S,
) -> MemoryPeak:
    """One batch size's peak, measured in a fresh process; arguments as :func:`fits` takes them.

    Raises:
        ValueError: a bad argument."""
    from toolkit.core.checks import argument, check_number

    check_number(argument("measure_peak", "batch_size"), batch_size, integer=True, least=1)
    with _handed_over(model, data, config) as (target, env, _words, _batch):
        return _Runs(target, env, check_steps(steps), timeout_s, progress).peak(int(batch_size))


class _Runs:
    """One :func:`fits`'s ``peak`` jobs, one after the other (two at once would share memory)."""

    def __init__(
        self,
        target: Any,
        env: dict[str, str],
        steps: int,
        timeout_s: float,
        progress: Callable[[str], Any] | None,
    ) -> None:
        from toolkit import backend
        from toolkit.core import progress as progress_mod

        self.target, self.env, self.steps, self.timeout_s = target, env, steps, timeout_s
        self.say = progress or progress_mod.say
        self.backend = backend.name()

    def peak(self, batch: int | None, what: str = "measuring") -> MemoryPeak:
        """One fresh process's :class:`MemoryPeak` at `batch` (None: your pipeline's own)."""
        from toolkit.search._processes import ChildSpec, run_child

        config = {k: v for k, v in self.target.config.items() if k != "batch_size"}
        on = dataclasses.replace(self.target, config={**config, "batch_size": batch} if batch
                                 else config)  # fmt: skip
        device = str(on.config.get("device") or "auto")
        self.say(f"memory: {_at(batch or 0)}, {what} (a fresh process, {_steps(self.steps)})")
        spec = ChildSpec("peak", self.backend, device, on, steps=self.steps)
        import psutil

        cap = HOST_CAP * psutil.virtual_memory().available / 2**20
        got = MemoryPeak.of(batch, run_child(spec, self.env, self.timeout_s, host_cap_mb=cap))
        failed = "out of memory" if got.out_of_memory else "failed"
        self.say(f"memory: {_at(got.batch_size)}: {format_mb(got.peak_mb) if got.ok else failed}")
        return got

    def measure(self, sizes: Sequence[int | None]) -> tuple[MemoryPeak, ...]:
        """Each of `sizes` until one runs out of memory; SetupError where one fails otherwise."""
        from toolkit.runner.task import SetupError

        points: list[MemoryPeak] = []
        for size in sizes:
            points.append(self.peak(size))
            if points[-1].out_of_memory:
                break
            if not points[-1].ok:
                raise SetupError(f"fits: {points[-1].words()}{_shipped_hint(self.target)}")
        return tuple(points)


def _shipped_hint(target: Any) -> str:
    """What to do where your in-memory model could not be rebuilt from its ``.keras`` file."""
    if target.model_fn != SHIPPED_FN:
        return ""
    return (
        " (your model was handed over as a .keras file: a custom layer or loss must be "
        "registered, keras.saving.register_keras_serializable; or give fits a function at "
        "the top of a module that builds your model and data)"
    )


def _predicted(
    words: str, runs: _Runs, points: tuple[MemoryPeak, ...], limit_mb: float | None, limit_from: str
) -> BatchFit:
    """The line through `points` and the largest batch under `limit_mb` and below any out of
    memory, unchecked; ValueError for a limit below what one batch needs."""
    good = sorted((p for p in points if p.ok), key=lambda p: p.batch_size)
    found = BatchFit(words, runs.backend, good[0].memory if good else HOST, runs.steps, points,
                     None, limit_mb, limit_from, None, None, None)  # fmt: skip
    oom = min((p.batch_size for p in points if p.out_of_memory), default=None)
    if len({p.batch_size for p in good}) < 2:
        said = next((p.words() for p in points if p.out_of_memory), "fewer than two measured")
        return dataclasses.replace(found, why=f"{said}: measure smaller --batch_sizes")
    line = PeakLine.through([(p.batch_size, float(p.peak_mb or 0.0)) for p in good])
    found = dataclasses.replace(found, line=line)
    if limit_mb is None:
        return dataclasses.replace(found, why=limit_from)
    smallest = float(good[0].peak_mb or 0.0)
    if line.at(1) > limit_mb or (not line.grows and smallest > limit_mb):
        raise ValueError(
            f"{LIMIT}: {format_mb(limit_mb)} ({limit_from}) is below what one batch needs: the "
            f"smallest measured peak is {format_mb(smallest)} at batch "
            f"{good[0].batch_size:,}, and the line puts batch 1 at {format_mb(line.at(1))}"
        )
    largest = line.largest_under(limit_mb)
    if largest is None:
        sizes = f"{good[0].batch_size:,} to {good[-1].batch_size:,}"
        why = (
            f"the peak grows {format_mb(line.growth_mb)} from batch {sizes}, within the noise "
            "of measuring it: measure larger --batch_sizes"
        )
        return dataclasses.replace(found, why=why)
    why = ""
    if oom is not None and largest >= oom:
        largest, why = oom - 1, f"below batch {oom:,}, which ran out of memory"
    return dataclasses.replace(found, batch_size=largest, predicted_mb=line.at(largest), why=why)


def _checked(found: BatchFit, runs: _Runs) -> BatchFit:
    """`found`'s prediction run; a miss refits and checks again (:data:`REFITS`), as far out a
    small slope error is a large batch error; then :func:`_backed_off` once, then :func:`_under`."""
    backed_off = False
    for refit in range(REFITS + 2):
        if found.batch_size is None or found.batch_size < 1:
            return found
        got = runs.peak(found.batch_size, "checking the prediction")
        found = dataclasses.replace(found, check=got)
        ratio = found.ratio
        close = found.under_limit and abs((ratio or 1.0) - 1.0) <= MISS
        if not got.ok or close or backed_off:
            return _under(found)
        if refit >= REFITS:
            if found.under_limit is not False:
                return _under(found)
            found, backed_off = _backed_off(found), True
            if found.check is not None:  # nothing to back off to
                return _under(found)
            continue
        again = _predicted(found.target, runs, (*found.points, got), found.limit_mb,
                           found.limit_from)  # fmt: skip
        said = f"refitted with batch {got.batch_size:,} (measured {format_mb(got.peak_mb)})"
        found = dataclasses.replace(again, why="; ".join(w for w in (again.why, said) if w))
    return found


def _backed_off(found: BatchFit) -> BatchFit:
    """`found`, its check over the limit, predicted again under the limit less the miss: a small
    overrun would otherwise fall back to a far smaller batch (:func:`_under`)."""
    got, limit = found.check, found.limit_mb
    if got is None or limit is None:
        return found
    good = [p for p in (*found.points, got) if p.ok]
    line = PeakLine.through([(p.batch_size, float(p.peak_mb or 0.0)) for p in good])
    miss = max(NOISE_MB, float(got.peak_mb or 0.0) - line.at(got.batch_size))
    largest = line.largest_under(limit - miss)
    under = [p.batch_size for p in good if float(p.peak_mb or 0.0) <= limit]
    if largest is None or largest >= got.batch_size or largest <= max(under, default=0):
        return found
    over = float(got.peak_mb or 0.0) - limit
    said = (f"the prediction {got.batch_size:,} ran {format_mb(over)} over the limit when run "
            f"({format_mb(got.peak_mb)}): backed off by {format_mb(miss)}")  # fmt: skip
    return dataclasses.replace(
        found, points=(*found.points, got), line=line, check=None, batch_size=largest,
        predicted_mb=line.at(largest), why="; ".join(w for w in (found.why, said) if w),
    )  # fmt: skip


def _under(found: BatchFit) -> BatchFit:
    """`found`, or where its last check ran over the limit, the largest batch measured under it
    (none: `found`): an answer never exceeds the limit by its own measurement."""
    if found.under_limit is not False or found.limit_mb is None or found.line is None:
        return found
    limit = found.limit_mb
    under = [p for p in found.points if p.ok and float(p.peak_mb or 0.0) <= limit]
    if not under:
        return found
    best = max(under, key=lambda p: p.batch_size)
    peak = float(found.check.peak_mb or 0.0) if found.check else limit
    said = (f"the prediction {found.batch_size:,} ran {format_mb(peak - limit)} over the limit "
            f"when run ({format_mb(peak)}): the largest batch measured under it")  # fmt: skip
    return dataclasses.replace(found, batch_size=best.batch_size, check=best,
                               predicted_mb=found.line.at(best.batch_size),
                               points=tuple(p for p in found.points if p is not best)
                               + ((found.check,) if found.check else ()),
                               why="; ".join(w for w in (found.why, said) if w))  # fmt: skip


def _limit(given: float | None, points: Sequence[MemoryPeak]) -> tuple[float | None, str]:
    """``(limit in MiB, its source)``: given, the device's memory, else :data:`HOST_SHARE`."""
    if given is not None:
        if any(p.ok and p.memory == HOST for p in points):
            import psutil

            total = psutil.virtual_memory().total / 2**20
            if given > total:
                return given, (f"given; more than this host's {format_mb(total)} of RAM: "
                               "a batch under it may not fit here")  # fmt: skip
        return given, "given"
    good = [p for p in points if p.ok]
    device = next((p for p in good if p.memory != HOST and p.limit_mb), None)
    if device is not None:
        return device.limit_mb, f"{device.memory}'s memory, as the backend says it"
    if good and good[0].memory != HOST:
        return None, f"{good[0].memory}'s memory is not known: give a limit"
    import psutil

    available = psutil.virtual_memory().available / 2**20
    return HOST_SHARE * available, (f"{HOST_SHARE:.0%} of this host's available RAM, "
                                    f"{format_mb(available)} (psutil)")  # fmt: skip


# ---------------------------------------------------------------------------- the target


@contextlib.contextmanager
def _handed_over(model: Any, data: Any, config: Any) -> Iterator[tuple[Any, dict, str, int]]:
    """``(Target, env, words, batch size)``; a model in memory is saved with its data in a
    temporary folder the fresh processes load (:func:`shipped`)."""
    from toolkit.search.standings import Target

    settings = config.to_dict() if hasattr(config, "to_dict") else dict(config or {})
    if not hasattr(model, "fit"):
        if not (isinstance(model, str | Target) or callable(model)):
            raise ValueError(
                "fits: give your compiled Keras model and its data, a function returning "
                f"(compiled model, data), 'module:function' or a recipe's name, not a "
                f"{type(model).__name__}"
            )
        if data is not None:
            raise ValueError("fits: data goes with a compiled model; a function makes its own")
        target = Target.of(model, config=settings)
        if not target.config and settings:
            target = dataclasses.replace(target, config=settings)
        # no batch size given: your pipeline's own, read by the first fresh process
        yield target, dict(os.environ), target.label(), target.config.get("batch_size")
        return
    from toolkit.core import children

    with children.temporary_directory("toolkit-fits-") as folder:
        batch = _ship(model, data, folder, settings.get("batch_size"))
        target = Target(None, SHIPPED_FN, {}, settings)
        env = {**os.environ, SHIPPED: folder}
        yield target, env, f"your model {getattr(model, 'name', '')!r}", batch


def _ship(model: Any, data: Any, folder: str, batch_size: int | None) -> int:
    """Saves `model` and `data` as arrays into `folder`; returns the batch size. ValueError: no
    data, or data that makes its own batches."""
    import pickle

    if data is None:
        raise ValueError("fits(model, data): give the data your model trains on")
    if not (callable(getattr(model, "fit", None)) and callable(getattr(model, "compile", None))):
        raise ValueError(
            f"fits(model, data): a {type(model).__name__} is not a Keras model: give your "
            "compiled keras.Model and its data (or a function returning both)"
        )
    if not (getattr(model, "compiled", False) or getattr(model, "_is_compiled", False)):
        raise ValueError(  # Keras 3 says `compiled`, tf_keras `_is_compiled`
            f"fits(model, data): compile {type(model).__name__} first (model.compile): its "
            "optimizer's slots and gradients are part of what a step holds"
        )
    if hasattr(data, "element_spec"):
        from toolkit.data.builder import infer_batch_size

        batch = batch_size or infer_batch_size(data) or 32
        n = batch * max(SCALE)
        data = next(data.unbatch().take(n).batch(n).as_numpy_iterator())
    else:
        batch = batch_size or 32
        data = _arrays(data)
    _save(model, os.path.join(folder, "model.keras"))
    with open(os.path.join(folder, "data.pkl"), "wb") as f:
        pickle.dump(data, f)
    return int(batch)


def _save(model: Any, path: str) -> None:
    """Saves `model` as ``.keras`` (unbuilt is fine: each process builds it, as ``fit`` does);
    ValueError with the first sentence of Keras's page-long reason where it cannot."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not yet been built", category=UserWarning)
            model.save(path)
    except (NotImplementedError, TypeError, ValueError, AttributeError) as e:
        said = " ".join(str(e).strip().split("\n\n")[0].split())  # its first paragraph
        first = said.split(". ")[0].rstrip(".")  # and of that, its first sentence
        reason = f" ({first})" if first else ""
        raise ValueError(
            f"fits(model, data): Keras cannot save your {type(model).__name__} for the fresh "
            f"processes that measure it{reason}: give fits a function at the top of a module "
            "that builds your compiled model and data (fits(build)), or make it serializable "
            "(get_config, keras.saving.register_keras_serializable)"
        ) from None


def _arrays(data: Any) -> Any:
    """`data` as NumPy arrays in its own structure (a tuple, a dict, an array)."""
    import numpy as np

    if isinstance(data, dict):
        return {k: _arrays(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return tuple(_arrays(v) for v in data)
    if hasattr(data, "shape"):
        return data.detach().cpu().numpy() if hasattr(data, "detach") else np.asarray(data)
    raise ValueError(
        f"fits(model, data): your {type(data).__name__} makes its own batches: give arrays or "
        "a tf.data pipeline, or a function that builds your model and data (fits(build))"
    )


def shipped() -> tuple[Any, Any]:
    """``(your compiled model, your data)`` loaded from the folder :data:`SHIPPED` names."""
    import pickle

    from toolkit.core import compat

    folder = os.environ[SHIPPED]
    model = compat.keras().models.load_model(os.path.join(folder, "model.keras"))
    with open(os.path.join(folder, "data.pkl"), "rb") as f:
        data = pickle.load(f)
    return model, data
