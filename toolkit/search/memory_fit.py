"""The largest batch that fits: ``toolkit.fits(model, data, limit=...)`` and ``python -m
toolkit memory --recipe R``.

"Will batch 256 fit?" is answered today by trying it, and an out-of-memory error is the
answer: a lost process, and on a GPU often a lost notebook. Here each try is a fresh process
(``python -m toolkit._child``, the search's one entry point, its ``peak`` job:
``workload.peak_at``), so an allocation that fails, or the kernel's out-of-memory killer,
ends that process only, and is said as ``out of memory at batch N``:

* the peak memory of a short fit (:data:`STEPS` steps after its first call, whose trace and
  compile no batch size changes) is measured at two or three batch sizes: on an accelerator
  the device's own peak (the backend's ``device_memory``), on a CPU the process's peak
  resident memory;
* a line is fitted through them by least squares (:class:`PeakLine`: peak ≈ base +
  per example × batch; what the model, the framework and the data hold, then what each
  example adds), and how well it fits is said;
* the largest batch under the limit is read off the line: the limit you give, else the
  device's memory (the backend's ``device_memory_limit``), else on a CPU
  :data:`HOST_SHARE` of the RAM this host has available (the rest left to the machine);
* the prediction is checked by running it, in one more fresh process, and the predicted peak
  is set against the measured one (:attr:`BatchFit.ratio`). A check over the limit, or more
  than :data:`MISS` off the line, joins the points and the line predicts again, checked once
  more: on a CPU the peak grows in steps (TensorFlow's allocator takes memory in regions),
  and 4× past the batch sizes measured the line put peaks 3–9 % low
  (``benchmarks/memory.py``). A fresh process whose resident memory passes
  :data:`HOST_CAP` of the RAM available when it starts is stopped, as out of memory at its
  batch (``_processes._HostCap``): the check of a prediction far past the measured sizes
  must not take the host's memory.

Your model in memory is handed to the fresh processes as a ``.keras`` file and its data as
arrays (a ``tf.data`` pipeline: its first examples, repeated); a function that builds your
model and data (``fits(build)``, ``--model_fn``) or a recipe is built again in each.
"""

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

# A prediction this many times the largest batch measured, unchecked, is said as a reach;
# before a check, a batch between them is measured, up to REACH_RUNS times (_toward).
FAR = 8
REACH_RUNS = 3
STEPS = 4  # a peak run's training steps, after its first call (which allocates and compiles)
SCALE = (1, 2, 4)  # the batch sizes measured by default: the run's own, twice and four times it
# ... and where the peak did not grow measurably over those, two more where it should grow by
# FURTHER times the noise (at least FURTHER_SCALE, at most FURTHER_MOST times the run's batch:
# the digits MLP's peak grew 2.5 MB from batch 32 to 1,024, within the noise)
FURTHER, FURTHER_SCALE, FURTHER_MOST = 4.0, 256, 2048
# The least growth of the peak over the batch sizes measured that a line is read from: two
# processes at one batch size differ by up to tens of MB on a CPU (the C allocator's arenas).
NOISE_MB = 16.0
MISS = 0.05  # a check further than this from the line's peak (or over the limit) refits it...
REFITS = 1  # ... this many times at most
CHILD_TIMEOUT_S = 900.0  # one peak run at most (a large batch on a CPU is slow)
HOST = "host"  # a peak of the process's resident memory (a CPU), not of a device
HOST_SHARE = 0.8  # of the RAM available, the default limit on a CPU: the rest is the machine's
HOST_CAP = 0.9  # of the RAM available when a fresh process starts: past it, it is stopped
# The folder a fresh process loads your in-memory model and data from (shipped()).
SHIPPED = "TOOLKIT_FITS_SHIPPED"
SHIPPED_FN = "toolkit.search.memory_fit:shipped"
# Binary units, spelled either way: the toolkit prints MiB as "MB" (``stats.format_mb``), so a
# figure copied from a screen means what it said.
_UNITS = {"": 1.0, "m": 1.0, "mb": 1.0, "mib": 1.0, "g": 1024.0, "gb": 1024.0, "gib": 1024.0,
          "t": 1024.0**2, "tb": 1024.0**2, "tib": 1024.0**2}  # fmt: skip
LIMIT = "--memory_limit (limit)"  # how a message names the limit: the flag, then the argument
SIZES = "--batch_sizes (batch_sizes)"
STEPS_NAME = "--steps (steps)"


def _per_example(value: float) -> str:
    """What one example adds, as the line says it: ``format_mb``'s ``0.94 MB``, and under a
    tenth of one in KB (``12.3 KB``), which ``0.01 MB`` would round away."""
    return format_mb(value) if abs(value) >= 0.1 else f"{value * 1024:.1f} KB"


@dataclasses.dataclass(frozen=True)
class MemoryPeak(fields.Record):
    """One fresh process's peak memory over a short fit at `batch_size`: `peak_mb` (None:
    none measured) of `memory` (:data:`HOST`: the process's peak resident memory; else the
    device, ``GPU:0``, its allocator's peak), the device's memory where the backend says it
    (`limit_mb`), and why there is no peak: `error`, with `out_of_memory` where an allocation
    failed or the kernel's out-of-memory killer ended the process."""

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
        """The peak a fresh process answered (a ``_processes.ChildResult``): its answer; a
        process SIGKILL ended (what the kernel's out-of-memory killer sends) or that answered
        an out-of-memory error, as out of memory at `batch_size`; else its failure."""
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
    """``batch 256``; 0 (a process that died before it read your pipeline): its batch."""
    return f"batch {batch:,}" if batch else "your data's batch"


@dataclasses.dataclass(frozen=True)
class PeakLine(fields.Record):
    """peak ≈ `base_mb` + `per_example_mb` × batch, fitted by least squares through `points`
    measured peaks: what the model, the framework and the data hold, then what each example
    adds (its activations, their gradients). How well it fits: `r2` (None with two points, a
    line through which fits them exactly and so says nothing) and `worst_pct`, the farthest a
    measured peak lies from the line, in % of it."""

    base_mb: float
    per_example_mb: float
    points: int
    r2: float | None
    worst_pct: float
    span: int = 0  # the largest batch measured less the smallest
    worst_mb: float = 0.0  # the farthest a measured peak lies from the line, in MiB

    @classmethod
    def through(cls, measured: Sequence[tuple[int, float]]) -> PeakLine:
        """The least-squares line through ``(batch, peak MiB)`` pairs of two batch sizes or
        more."""
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
        """Whether the peak grows with the batch beyond the noise of measuring it: by more
        than :data:`NOISE_MB` and twice the farthest point from the line. A growth within the
        noise would put the largest batch anywhere."""
        return self.growth_mb > max(NOISE_MB, 2 * self.worst_mb)

    def largest_under(self, limit_mb: float) -> int | None:
        """The largest batch whose peak on the line stays under `limit_mb` (may be below 1:
        not even one example fits); None where the peak does not grow measurably."""
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
    """What :func:`fits` found: the peaks measured (`points`, each in a fresh process, of
    `steps` steps on `backend`; `memory` says whose: :data:`HOST` or a device), the line
    through them, the limit and where it came from, the largest batch predicted to fit under
    it (`batch_size`; None: no prediction, `why` says why) with the line's peak there
    (`predicted_mb`), and `check`: that batch run in one more fresh process, its peak
    measured."""

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
        """The predicted peak over the measured one at :attr:`batch_size` (None: not
        checked)."""
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
        """What the memory verb prints: the peaks as a table (the check's last), the line,
        the limit, the prediction and its check. ``terminal.show`` renders it."""
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
    """What the prediction stands on, where it reaches past it: a batch larger than the data
    (its batches repeat examples: the data never makes one so large), and one far past the
    largest batch measured that no run checked."""
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
    """A memory limit in MiB: a number (MiB), or a size with its unit (``4GB``, ``512MB``;
    binary units either way, as the toolkit prints them); None: none given.

    Raises:
        ConfigError: anything else, or a limit not above 0 (one line naming the flag and the
            argument).
    """
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
    """The batch sizes to measure, smallest first (None: the defaults, :data:`SCALE` times the
    run's batch).

    Raises:
        ConfigError: not two different integers >= 1 (one line naming the flag and argument).
    """
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
    """The largest batch that fits in memory, predicted from peaks measured in fresh
    processes and checked by running it (see the module's docstring).

    Your process never runs a batch: an out-of-memory error ends a fresh process, and is
    said as ``out of memory at batch N`` in the result. A check whose peak misses the line
    (over the limit, or by more than 5 %) adds its point to the line, and the new prediction
    is checked once more. On a GPU, call it before your own process has filled the device
    (TensorFlow takes most of a GPU at its first op).

    Args:
        model: your compiled Keras model (with `data`); or a function at the top of a module
            returning ``(compiled model, data)``, ``"module:function"``, a recipe's name, or
            a ``standings.Target``: built again in each fresh process.
        data: with a model, its training data: arrays (``(x, y)``) or a ``tf.data``
            pipeline (its first examples are handed to the fresh processes, repeated).
        limit: the memory to fit in: MiB, or a size with its unit (``"12GB"``). Defaults
            to the device's memory, or on a CPU 80 % of the RAM this host has available now.
        batch_sizes: two or more batch sizes to measure. Defaults to the run's batch size
            (`config`'s, your pipeline's), twice and four times it, and where the peak does
            not grow measurably over those (a small model), two larger sizes where the line
            should rise clear of the noise (256 to 4,096 times it).
        config: a ``TrainConfig`` for the runs (device, precision, a recipe's batch size).
        steps: training steps in each run. Defaults to `4`.
        check: run the predicted batch and measure its peak. Defaults to `True`.
        progress: called with a line per run. Defaults to ``toolkit.core.progress.say``.
        timeout_s: one run at most, in seconds. Defaults to `900`.

    Returns:
        A :class:`BatchFit`.

    Raises:
        ValueError: a bad argument, or a limit below what one batch needs (one line, with the
            smallest peak measured).
        toolkit.runner.task.SetupError: a run that failed other than by running out of memory.

    Example:
        >>> found = toolkit.fits(model, (x, y), limit="8GB")
        >>> found.batch_size, found.ratio  # the largest batch, predicted / measured peak
    """
    limit_mb, sizes, steps = parse_limit(limit), check_sizes(batch_sizes), check_steps(steps)
    with _handed_over(model, data, config) as (target, env, words, batch):
        runs = _Runs(target, env, steps, timeout_s, progress)
        first = () if sizes or batch else runs.measure((None,))  # your data's batch
        batch = batch or (first[0].batch_size if first else 0)  # 0: unread, sizes given
        more = () if first and not first[0].ok else SCALE[len(first) :]
        points = (*first, *runs.measure(sizes or tuple(sorted({batch * k for k in more}))))
        found = _predicted(words, runs, points, *_limit(limit_mb, points))
        if not sizes and _flat(found):  # the defaults too close to tell: measured further
            points += runs.measure(_further(found, batch))
            found = _predicted(words, runs, points, *_limit(limit_mb, points))
        if check and _far_past_the_data(found):
            return dataclasses.replace(found, why="; ".join(w for w in (found.why, UNRUN) if w))
        return _checked(_toward(found, runs), runs) if check else found


# Why a prediction far past the data is not run: on a CPU the limit is most of the host's RAM,
# and a 512-example autoencoder's check of batch 24,190 held 15.9 GB for over four minutes.
UNRUN = f"not run: over {FAR}× the examples your data holds, a batch it never makes"


def _far_past_the_data(found: BatchFit) -> bool:
    """Whether `found`'s prediction lies more than :data:`FAR` times past the examples your
    data holds: neither measured on the way nor checked (a batch past them repeats them, so
    a sample answers for the whole data nearer them; memory does not bound this data's)."""
    examples = found.examples
    return bool(examples and found.batch_size and found.batch_size > FAR * examples)


def _toward(found: BatchFit, runs: Any) -> BatchFit:
    """`found` predicted again from a batch measured between it and the batches measured,
    where it lies more than :data:`FAR` times past the largest of them: their geometric
    mean (at least twice the largest), up to :data:`REACH_RUNS` times, each refitting the
    line. A slope read over small batches can be far off at a large one: keras.io's
    Distiller peaked at 887 and 913 MB at batches 64 and 256, whose line put the answer at
    159,715; its check ran to the host's cap and the answer fell back to 256. A run out of
    memory on the way bounds the answer below it (:func:`_predicted`)."""
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
    """Two batch sizes past the defaults where the peak should grow clearly beyond the noise:
    where the flat line still slopes up, the batch it puts :data:`FURTHER` × the noise above
    the first peak, and twice it; else :data:`FURTHER_SCALE` times the run's batch. At most
    :data:`FURTHER_MOST` times the run's batch (a large batch takes time to run)."""
    slope = found.line.per_example_mb if found.line is not None else 0.0
    at = math.ceil(FURTHER * NOISE_MB / slope) if slope > 0 else batch * FURTHER_SCALE
    at = max(batch * FURTHER_SCALE, min(at, batch * FURTHER_MOST))
    return at, 2 * at


def _flat(found: BatchFit) -> bool:
    """Whether the peak grew within the noise over every batch size measured, none out of
    memory: a line that cannot be read, where larger batches would tell."""
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
    """One batch size's peak, measured in a fresh process: "will batch 256 fit?" asked
    without risking your process. `model`, `data` and the rest as :func:`fits` takes them.

    Raises:
        ValueError: a bad argument.
    """
    from toolkit.core.checks import argument, check_number

    check_number(argument("measure_peak", "batch_size"), batch_size, integer=True, least=1)
    with _handed_over(model, data, config) as (target, env, _words, _batch):
        return _Runs(target, env, check_steps(steps), timeout_s, progress).peak(int(batch_size))


class _Runs:
    """The fresh processes of one :func:`fits`: each a ``peak`` job of `target` at one batch
    size, in `env`, one after the other (two at once would share the memory measured)."""

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
        """One fresh process's :class:`MemoryPeak` at `batch` (None: the batch your function's
        pipeline makes, which the answer names)."""
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
        """Each of `sizes`, smallest first, until one runs out of memory (a larger one
        would too). A run that fails otherwise ends the search: the target is broken.

        Raises:
            SetupError: that failure, in one line.
        """
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
    """The line through the measured `points` and the largest batch under `limit_mb` on it,
    below any batch that ran out of memory; unchecked.

    Raises:
        ValueError: a limit below what one batch needs.
    """
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
    """`found`'s prediction run in a fresh process; where its peak misses the line (over the
    limit, or by more than :data:`MISS` either way) the line is fitted again with that point
    and the new prediction checked once more (:data:`REFITS`): far from the measured batch
    sizes, a line's small error in the slope is a large one in the batch. A last check over
    the limit is backed off once (:func:`_backed_off`) before the answer falls back to a
    batch measured under it."""
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
            if found.check is not None:  # nothing to back off to: the answer falls back
                return _under(found)
            continue
        again = _predicted(found.target, runs, (*found.points, got), found.limit_mb,
                           found.limit_from)  # fmt: skip
        said = f"refitted with batch {got.batch_size:,} (measured {format_mb(got.peak_mb)})"
        found = dataclasses.replace(again, why="; ".join(w for w in (again.why, said) if w))
    return found


def _backed_off(found: BatchFit) -> BatchFit:
    """`found`, whose check ran over the limit, predicted again below it, unchecked: the line
    refitted with that check, under the limit less the check's miss (its peak over the
    line's there, at least :data:`NOISE_MB`, one reading's noise). keras.io's VAE's check of
    1,108 ran 5.81 MB over a 1.2 GB limit, and the answer fell back to 372, the largest
    batch measured under it, where about 1,090 fit. `found` as it is where the new
    prediction is no larger than a batch already measured under the limit."""
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
    """`found`, or where its last check ran over the limit, the largest batch measured under
    it (an earlier check, or a measured point above the first sizes): an answer never exceeds
    the limit by its own measurement. `found` as it is where none was."""
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
    """``(the limit in MiB, where it came from)``: the one given; the device's memory as its
    backend says it; on a CPU, :data:`HOST_SHARE` of the RAM this host has available now
    (psutil): a batch that fills all of it leaves nothing to the machine it runs on."""
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
    """``(the Target each fresh process builds, its environment, the target in words, the
    run's batch size)``: a function, ``module:function``, a recipe or a Target as it is
    (`config` its settings); your model in memory saved as a ``.keras`` file with its data as
    arrays, in a private folder the fresh processes load (:func:`shipped`), removed after."""
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
        # no batch size given: your function's pipeline's own, read by the first fresh process
        yield target, dict(os.environ), target.label(), target.config.get("batch_size")
        return
    from toolkit.core import children

    with children.temporary_directory("toolkit-fits-") as folder:
        batch = _ship(model, data, folder, settings.get("batch_size"))
        target = Target(None, SHIPPED_FN, {}, settings)
        env = {**os.environ, SHIPPED: folder}
        yield target, env, f"your model {getattr(model, 'name', '')!r}", batch


def _ship(model: Any, data: Any, folder: str, batch_size: int | None) -> int:
    """Saves `model` (``model.keras``: its layers, weights and compile) and `data` as arrays
    (``data.pkl``) into `folder`; returns the run's batch size (`batch_size`, your pipeline's,
    else fit's 32). A pipeline hands over its first examples: enough for four batches.

    Raises:
        ValueError: no data, or data that makes its own batches (a PyDataset, a generator).
    """
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
    """Saves `model` as a ``.keras`` file for the fresh processes, or says in one line why it
    cannot go (keras.io's VAE takes its encoder and decoder in ``__init__`` and has no
    ``get_config``: Keras raises ``NotImplementedError`` with a page of example code).
    A subclassed model never called yet is saved unbuilt: each process builds it on its
    first batch, as ``fit`` does, so Keras's warning that it is unbuilt is not shown.

    Raises:
        ValueError: Keras could not save it, with the first sentence of Keras's reason.
    """
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
    """``(your compiled model, your data)`` as :func:`fits` handed them to this fresh
    process: loaded from the folder named by :data:`SHIPPED`."""
    import pickle

    from toolkit.core import compat

    folder = os.environ[SHIPPED]
    model = compat.keras().models.load_model(os.path.join(folder, "model.keras"))
    with open(os.path.join(folder, "data.pkl"), "rb") as f:
        data = pickle.load(f)
    return model, data
