"""Step-time statistics from plain durations. Pure Python: no TensorFlow, no NumPy.

A *sample* is one timed execution: with ``steps_per_execution = n`` Keras runs ``n`` steps per
batch hook, so a sample carries its duration and step count. Every figure is *per step*:
``mean_s`` is time-weighted (what throughput sees); percentiles, min, max and jitter are over
each sample's ``duration / steps``; jitter is ``1.4826 * MAD``, the standard deviation for
Gaussian noise but robust to a few slow outliers. Nothing here reads a clock."""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from toolkit.core import _fields as fields

__all__ = [
    "DEFAULT_WARMUP_STEPS",
    "StepStats",
    "speedup_line",
    "summarize",
    "summarize_calls",
]


MAD_TO_SIGMA = 1.4826
# Steps after the first execution that StepTimer leaves out of the statistics by default.
DEFAULT_WARMUP_STEPS = 5

# What a recorded execution counts as.
FIRST, WARMUP, EXCLUDED, TIMED = "first", "warmup", "excluded", "timed"
# A later execution that compiled again (a new input shape: JAX's ragged last batch): counted
# as the first execution is, never timed.
COMPILED = "compiled"
# Of a recorded execution (seconds, steps, epoch, kind): its seconds and its steps.
SECONDS_OF, STEPS_OF = operator.itemgetter(0), operator.itemgetter(1)


def whole_calls(steps: int, per_call: int) -> int:
    """`steps` rounded up to whole calls of `per_call` steps: Keras runs a compiled call whole."""
    per_call = max(1, int(per_call))
    return -(-int(steps) // per_call) * per_call


def warmed_calls(
    timed: Callable[[int], float], window_s: float, warm_s: float, most: int = 2000
) -> int:
    """How many calls make a timed run of about `window_s`, for `timed(n)` (seconds for n calls,
    device waited for), after a first call (the compile) and `warm_s` of warm-up: a compiled
    graph's first calls run slower (TF's kernels set up caches; 4.5 ms, then 3.0, then 2.5)."""
    timed(1)
    n, spent = 4, 0.0
    while True:
        took = timed(n)
        spent += took
        if spent >= warm_s or n >= most:
            break
        n = min(most, n * 2)
    return max(2, min(most, round(window_s / max(took / n, 1e-7))))


def whole_percents(values: Sequence[float], total: float) -> list[int]:
    """Each of `values` as a whole percent of `total`, adding up to what their sum rounds to
    (Hamilton's largest remainders), so a screen's shares add up."""
    if total <= 0:
        return [0 for _ in values]
    exact = [max(0.0, v) * 100.0 / total for v in values]
    out = [math.floor(x) for x in exact]
    left = round(sum(exact)) - sum(out)
    for i in sorted(range(len(exact)), key=lambda i: exact[i] - out[i], reverse=True)[:left]:
        out[i] += 1
    return out


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (NumPy's default method) of already sorted values.

    Args:
        sorted_values: values in ascending order; must not be empty.
        q: percentile in [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def median(values: Sequence[float]) -> float:
    return percentile(sorted(values), 50.0)


def median_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median of `values`: the order statistics
    ``x(k)`` and ``x(n+1-k)`` with the largest ``k`` whose binomial coverage is at least `level`.
    No shape is assumed: a benchmark's paired ratios are skewed (noise only adds time) and carry
    outliers, which a mean's ``t`` interval would take as signal. ``(-inf, inf)`` where `values`
    are too few for any pair to cover `level` (fewer than 6 at 95 %): nothing is settled.

    Args:
        values: independent samples; must not be empty.
        level: the coverage wanted, in (0, 1)."""
    if not values:
        raise ValueError("median_interval of an empty sequence")
    if not 0.0 < level < 1.0:
        raise ValueError(f"median_interval level must be in (0, 1), got {level}")
    xs, n = sorted(values), len(values)
    # P(fewer than k of n samples fall below the median) = the binomial(n, 1/2) cdf at k-1;
    # the interval [x(k), x(n+1-k)] misses the median with twice that probability. Each term
    # is summed from its logarithm: 2**n overflows a float past n = 1023 (a within-fit
    # comparison's thousands of pairs), and a term too small for a float adds nothing anyway.
    log_all = math.lgamma(n + 1) - n * math.log(2.0)
    below, k = 0.0, 0
    while k < n // 2:
        below += math.exp(log_all - math.lgamma(k + 1) - math.lgamma(n - k + 1))
        if 2 * below > 1.0 - level:
            break
        k += 1
    if k == 0:
        return -math.inf, math.inf
    return xs[k - 1], xs[n - k]


def jitter(values: Sequence[float]) -> float:
    """Robust spread: ``1.4826 * median(|x - median(x)|)``."""
    if not values:
        raise ValueError("jitter of an empty sequence")
    m = median(values)
    return MAD_TO_SIGMA * median(list(map(abs, map(operator.sub, values, itertools.repeat(m)))))


@dataclasses.dataclass(frozen=True)
class StepStats(fields.Record):
    """Summary of a run's step times. All times in seconds, all figures per step.

    Attributes:
        timed_steps: steps that entered the statistics.
        samples: executions those steps came in (``timed_steps`` at steps_per_execution 1).
        total_s: seconds spent in the timed steps.
        mean_s: time-weighted mean seconds per step (``total_s / timed_steps``).
        p50_s, p90_s, p99_s, min_s, max_s: over the per-step time of each sample.
        jitter_s: ``1.4826 * MAD`` of the per-step times.
        first_step_s: the first execution (tracing / compilation included), reported apart.
        first_step_steps: steps that first execution covered.
        warmup_steps: steps after the first execution excluded as warm-up.
        excluded_steps: other steps left out of the statistics (e.g. inside a profiler trace).
        compiled_steps: later steps that compiled again (a new input shape), counted, not timed.
        batch_size: examples per step, when known.
        examples_per_sec: ``batch_size / mean_s``, when the batch size is known.
        steps_per_execution: the largest number of steps seen in one execution."""

    # report.json's ``steps``, plus the derived fields for readers of the JSON.
    WHERE = "steps"
    EXTRA = ("total_steps", "steps_per_sec")

    timed_steps: int
    samples: int
    total_s: float
    mean_s: float | None
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None
    min_s: float | None
    max_s: float | None
    jitter_s: float | None
    first_step_s: float | None = None
    first_step_steps: int = 0
    warmup_steps: int = 0
    excluded_steps: int = 0
    batch_size: int | None = None
    examples_per_sec: float | None = None
    steps_per_execution: int = 1
    compiled_steps: int = 0

    @property
    def steps_per_sec(self) -> float | None:
        return 1.0 / self.mean_s if self.mean_s else None

    @property
    def total_steps(self) -> int:
        """All steps seen: first execution, warm-up, excluded, compiled again and timed."""
        return (
            self.first_step_steps + self.warmup_steps + self.excluded_steps
            + self.compiled_steps + self.timed_steps
        )  # fmt: skip

    def lines(self, compile_cache: bool = False) -> list[str]:
        """Human-readable summary, one figure per line. `compile_cache`: the first step may have
        read its program from ``--compile_cache`` rather than compiled."""
        out = []
        if self.timed_steps == 0:
            out.append(
                f"no timed steps: all {self.total_steps} steps were the first execution, "
                "warm-up or excluded; run more steps or lower warmup_steps"
            )
        else:
            spe = (
                f" (samples: {self.samples} executions of up to {self.steps_per_execution} steps)"
                if self.steps_per_execution > 1
                else ""
            )
            out.append(f"timed steps: {self.timed_steps}{spe}")
            out.append(
                f"step time: mean {format_ms(self.mean_s)}, p50 {format_ms(self.p50_s)}, "
                f"p90 {format_ms(self.p90_s)}, p99 {format_ms(self.p99_s)}"
            )
            out.append(
                f"           min {format_ms(self.min_s)}, max {format_ms(self.max_s)}, "
                f"jitter (1.4826·MAD) {format_ms(self.jitter_s)}"
            )
            if self.examples_per_sec is not None:
                out.append(
                    f"throughput: {format_rate(self.examples_per_sec)} examples/s "
                    f"(batch {self.batch_size}), {format_rate(self.steps_per_sec)} steps/s"
                )
            else:
                out.append(
                    f"throughput: {format_rate(self.steps_per_sec)} steps/s "
                    "(batch size unknown: pass batch_size for examples/s)"
                )
        if self.first_step_s is not None:
            out.append(
                f"first step: {format_duration(self.first_step_s)} over "
                f"{self.first_step_steps} step(s) "
                "(tracing/compilation"
                + ("; compile cache on: may be a read" if compile_cache else "")
                + ", not in the statistics)"
            )
        excluded = [f"warm-up {self.warmup_steps}"]
        profiler = f"profiler {self.excluded_steps}" if self.excluded_steps else ""
        if profiler:  # a trace slows what it covers: those steps are counted, not timed
            excluded.append(profiler + " (a trace ran in them, or started or stopped)")
        compiled = f"compiled again {self.compiled_steps}" if self.compiled_steps else ""
        if compiled:  # a compile is not a step: counted as the first step is
            excluded.append(compiled + " (a new input shape)")
        out.append("excluded steps: " + ", ".join(excluded))
        # The kinds add up to every step run, checkable at a glance.
        parts = [
            f"first {self.first_step_steps}",
            excluded[0],
            profiler,
            compiled,
            f"timed {self.timed_steps}",
        ]
        out.append(f"steps run: {self.total_steps} = " + " + ".join(p for p in parts if p))
        return out

    def __str__(self) -> str:
        """The lines, folded to stdout's terminal width (``print(timer.summary())``)."""
        from toolkit.core import terminal

        return terminal.fit("\n".join(self.lines()), terminal.width())


def format_ms(seconds: float | None) -> str:
    """Seconds as ``"1.234 ms"``, or ``"n/a"``."""
    return "n/a" if seconds is None else f"{seconds * 1e3:.3f} ms"


def format_s(seconds: float | None) -> str:
    """Seconds as screens write them: ``0.042 s``, ``1.23 s``, ``12.3 s``, ``1,234 s``; ``—``."""
    if seconds is None:
        return "—"
    a = abs(seconds)
    if a >= 100:
        return f"{seconds:,.0f} s"
    if a >= 10:
        return f"{seconds:.1f} s"
    if a >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds:.3f} s"


def format_mb(mib: float | None, signed: bool = False) -> str:
    """MiB as every screen writes them: ``9.84 MB``, ``815 MB``, ``1.39 GB`` (binary units, as the
    kernel and allocators count); ``+`` before a growth with `signed`; ``—`` for None."""
    if mib is None:
        return "—"
    sign = "+" if signed and mib > 0 else ""
    a = abs(mib)
    if a >= 1024:
        return f"{sign}{mib / 1024:.2f} GB"
    if a >= 100:
        return f"{sign}{mib:.0f} MB"
    if a >= 10:
        return f"{sign}{mib:.1f} MB"
    return f"{sign}{mib:.2f} MB"


def format_duration(seconds: float | None) -> str:
    """A step or a compile: :func:`format_ms` under a second, else :func:`format_s` (never
    ``1544.080 ms``)."""
    if seconds is None or abs(seconds) < 1.0:
        return format_ms(seconds)
    return format_s(seconds)


def format_rate(per_second: float | None) -> str:
    """A rate as the summary prints it, ``"22,221.5"`` (``"n/a"`` for None): never ``2.2e+04``."""
    return "n/a" if per_second is None else f"{per_second:,.1f}"


def format_metric(value: float | None) -> str:
    """A metric as the summary's ``final:`` line prints it: 4 significant digits kept even as zeros
    (``3.000``), large values grouped, never an exponent; ``n/a`` for None."""
    if value is None:
        return "n/a"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e4:
        return f"{value:,.1f}"
    return f"{value:#.4g}" if value else "0"


def format_figure(key: str, value: float | None) -> str:
    """``key value`` for an epoch's log entry as the summary writes it (``p50 0.956 ms/step``,
    ``22,221.5 examples/s``, ``loss 0.04868``)."""
    if key.startswith("step_ms_") and value is not None:
        return f"{key[len('step_ms_') :]} {format_ms(value / 1e3)}/step"
    if key == "examples_per_sec":
        return f"{format_rate(value)} examples/s"
    return f"{key} {format_metric(value)}"


def summarize(
    durations: Sequence[float],
    steps: Sequence[int] | None = None,
    *,
    batch_size: int | None = None,
    first_step_s: float | None = None,
    first_step_steps: int = 0,
    warmup_steps: int = 0,
    excluded_steps: int = 0,
    compiled_steps: int = 0,
) -> StepStats:
    """Builds :class:`StepStats` from the timed executions.

    Args:
        durations: seconds of each timed execution (warm-up and first execution already removed).
        steps: steps in each execution; all ones when omitted.
        batch_size: examples per step, for examples/sec; None: unknown.
        first_step_s: duration of the first execution, reported apart.
        first_step_steps: steps in that first execution.
        warmup_steps: number of steps excluded as warm-up (counted, not timed).
        excluded_steps: other steps left out (e.g. while a profiler trace was running).
        compiled_steps: later steps in which the backend compiled again (counted, not timed).

    Raises:
        ValueError: lengths differ, a duration is negative or not finite, or a step count < 1."""
    if steps is None:
        steps = [1] * len(durations)
    if len(steps) != len(durations):
        raise ValueError(
            f"durations and steps must have the same length, got {len(durations)} and {len(steps)}"
        )
    # C-level passes: every fit's thousands of executions are summarized as the fit ends.
    if not all(map(math.isfinite, durations)) or min(durations, default=0.0) < 0:
        bad = next(d for d in durations if not math.isfinite(d) or d < 0)
        raise ValueError(f"durations must be finite and >= 0, got {bad!r}")
    if min(steps, default=1) < 1:
        bad = next(n for n in steps if n < 1)
        raise ValueError(f"steps per execution must be >= 1, got {bad!r}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")

    timed_steps = int(sum(steps))
    total = float(sum(durations))
    spe = max(steps, default=1)
    common = dict(
        first_step_s=first_step_s,
        first_step_steps=first_step_steps,
        warmup_steps=warmup_steps,
        excluded_steps=excluded_steps,
        compiled_steps=compiled_steps,
        batch_size=batch_size,
        steps_per_execution=max(spe, first_step_steps or 1),
    )
    if not durations:
        return StepStats(0, 0, 0.0, None, None, None, None, None, None, None, **common)

    per_step = sorted(map(operator.truediv, durations, steps))  # lengths checked above
    mean = total / timed_steps
    return StepStats(
        timed_steps=timed_steps,
        samples=len(durations),
        total_s=total,
        mean_s=mean,
        p50_s=percentile(per_step, 50),
        p90_s=percentile(per_step, 90),
        p99_s=percentile(per_step, 99),
        min_s=per_step[0],
        max_s=per_step[-1],
        jitter_s=jitter(per_step),
        examples_per_sec=(batch_size / mean) if (batch_size and mean > 0) else None,
        **common,
    )


def summarize_calls(calls: Sequence[Sequence[Any]], batch_size: int | None = None) -> StepStats:
    """StepStats from recorded executions ``(seconds, steps, epoch, kind)``, as StepTimer and a
    report's timeline summarize: only ``"timed"`` kinds enter the statistics, the others
    (``"first"``, ``"warmup"``, ``"excluded"``, ``"compiled"``) are counted."""
    timed = [c for c in calls if c[3] == TIMED]
    first = next((c for c in calls if c[3] == FIRST), None)
    return summarize(
        list(map(SECONDS_OF, timed)),
        list(map(STEPS_OF, timed)),
        batch_size=batch_size,
        first_step_s=first[0] if first else None,
        first_step_steps=first[1] if first else 0,
        warmup_steps=sum(c[1] for c in calls if c[3] == WARMUP),
        excluded_steps=sum(c[1] for c in calls if c[3] == EXCLUDED),
        compiled_steps=sum(c[1] for c in calls if c[3] == COMPILED),
    )


def epoch_figures(
    calls: Sequence[Sequence[Any]], batch_size: int | None = None
) -> dict[str, float]:
    """An epoch's ``step_ms_p50``/``_p90``/``_mean`` and ``examples_per_sec`` for Keras's logs,
    from its executions in one pass (empty before any timed step)."""
    timed = [c for c in calls if c[3] == TIMED and c[1] > 0]
    if not timed:
        return {}
    durations, steps = list(map(SECONDS_OF, timed)), list(map(STEPS_OF, timed))
    per_step = sorted(map(operator.truediv, durations, steps))
    out = {
        "step_ms_p50": percentile(per_step, 50) * 1e3,
        "step_ms_p90": percentile(per_step, 90) * 1e3,
    }
    seconds, count = sum(durations), sum(steps)
    out["step_ms_mean"] = seconds / count * 1e3  # MFU's, as examples/s
    if batch_size and seconds > 0:
        out["examples_per_sec"] = batch_size * count / seconds
    return out


def utilization(
    flops_per_step: float | None, step_seconds: float | None, peak_flops: float | None
) -> dict[str, float | None]:
    """``{"achieved_flops_per_s", "mfu"}`` from FLOPs per step, the mean step time (as
    examples/s, so the two agree) and the peak; None where an input is missing."""
    achieved = None
    if flops_per_step and step_seconds and step_seconds > 0:
        achieved = flops_per_step / step_seconds
    mfu = achieved / peak_flops if achieved is not None and peak_flops else None
    return {"achieved_flops_per_s": achieved, "mfu": mfu}


class MatmulRun(NamedTuple):
    """What a backend measured of chained matmuls (``calibrated_peak``): the best run's FLOP/s,
    how much slower the median run was than it (``spread_pct``), and the runs timed."""

    flops_per_s: float
    spread_pct: float
    runs: int


# A peak whose median run was this much slower than its best was measured on a busy machine.
RELIABLE_SPREAD_PCT = 25.0


def reliable_peak(spread_pct: float | None) -> bool:
    """Whether a peak measured at `spread_pct` may give MFU (None: a given peak, trusted)."""
    return spread_pct is None or float(spread_pct) <= RELIABLE_SPREAD_PCT


def format_flops(value: float | None, per_second: bool = False) -> str:
    """``1.23 GFLOP`` / ``45.6 GFLOP/s``; ``n/a`` for None."""
    if value is None:
        return "n/a"
    unit = "FLOP/s" if per_second else "FLOP"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale * 0.9995:  # what 3 figures round up to 1000 is the next prefix
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def speedup_line(name: str, baseline_s: float, toolkit_s: float) -> str:
    """Every benchmark's ratio line, ``name: X.XX× (baseline A s, toolkit B s)``; X > 1: faster."""
    return (
        f"{name}: {baseline_s / toolkit_s:.2f}× "
        f"(baseline {baseline_s:.3f} s, toolkit {toolkit_s:.3f} s)"
    )


def speedup_pct(base: float | None, new: float | None) -> float | None:
    """How much faster time `new` is than `base`, in %; None if either is missing."""
    if base is None or new is None or new <= 0:
        return None
    return (base / new - 1.0) * 100.0
