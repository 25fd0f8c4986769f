"""toolkit.core.stats with injected durations (no clocks, no sleeps, no TensorFlow)."""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest

from toolkit.core import stats
from toolkit.core.stats import (
    StepStats,
    epoch_figures,
    percentile,
    summarize,
    summarize_calls,
)


@pytest.mark.parametrize("q", [0, 1, 10, 50, 90, 99, 100])
def test_percentile_matches_numpy_linear(q):
    values = sorted(np.random.default_rng(1).exponential(size=101).tolist())
    assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_percentile_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        percentile([1.0], 101)


def test_jitter_is_scaled_mad_and_robust_to_outliers():
    values = [1.0, 2.0, 3.0, 4.0, 100.0]
    # median 3, |x-3| = 2,1,0,1,97 -> MAD 1
    assert stats.jitter(values) == pytest.approx(1.4826)
    gaussian = np.random.default_rng(2).normal(10.0, 0.5, size=20_000).tolist()
    assert stats.jitter(gaussian) == pytest.approx(0.5, rel=0.03)


def test_median_interval_is_the_binomial_order_statistics():
    # The textbook pairs at 95 %: n=6 -> x(1), x(6); n=40 -> x(14), x(27); below 6, none.
    assert stats.median_interval(range(1, 7)) == (1, 6)
    assert stats.median_interval(range(1, 41)) == (14, 27)
    assert stats.median_interval([3.0, 1.0, 2.0, 5.0, 4.0]) == (-np.inf, np.inf)
    # Distribution-free: a skewed sample's median is covered at least as often as promised.
    rng = np.random.default_rng(3)
    samples = rng.exponential(size=(2000, 40))
    bounds = np.array([stats.median_interval(row.tolist()) for row in samples])
    covered = (bounds[:, 0] <= np.log(2)) & (np.log(2) <= bounds[:, 1])
    assert covered.mean() >= 0.94  # exact coverage 0.96; 2000 draws: +-0.01


def test_median_interval_holds_past_a_floats_range():
    # 2**n overflows a float past n = 1023; a within-fit comparison has thousands of pairs. The
    # order statistics match exact integer arithmetic there, and at every small n.
    def exact_k(n: int) -> int:
        below, k = 0, 0
        while k < n // 2:
            below += math.comb(n, k)
            if 2 * below * 20 > 2**n:  # twice the tail over 5 %
                break
            k += 1
        return k

    for n in [*range(6, 120), 1023, 1024, 3001]:
        lo, hi = stats.median_interval(range(1, n + 1))
        assert (lo, hi) == (exact_k(n), n + 1 - exact_k(n)), n


def test_median_interval_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        stats.median_interval([])
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        stats.median_interval([1.0] * 10, level=1.0)


def test_summarize_one_step_per_execution():
    durations = [0.010, 0.012, 0.011, 0.013, 0.030]
    s = summarize(durations, batch_size=64, first_step_s=1.5, first_step_steps=1, warmup_steps=3)
    assert s.timed_steps == 5 and s.samples == 5
    assert s.total_s == pytest.approx(sum(durations))
    assert s.mean_s == pytest.approx(sum(durations) / 5)
    assert s.p50_s == pytest.approx(0.012)
    assert s.min_s == pytest.approx(0.010) and s.max_s == pytest.approx(0.030)
    assert s.p90_s == pytest.approx(np.percentile(durations, 90))
    assert s.examples_per_sec == pytest.approx(64 / s.mean_s)
    assert s.steps_per_sec == pytest.approx(1 / s.mean_s)
    assert s.total_steps == 1 + 3 + 5
    assert s.first_step_s == 1.5


def test_summarize_is_per_step_with_steps_per_execution():
    # Four executions of 4 steps each at 2 ms/step, and a last partial one of 2 steps at 3 ms/step.
    durations = [0.008, 0.008, 0.008, 0.008, 0.006]
    steps = [4, 4, 4, 4, 2]
    s = summarize(durations, steps, batch_size=10)
    assert s.timed_steps == 18 and s.samples == 5
    assert s.steps_per_execution == 4
    assert s.mean_s == pytest.approx(0.038 / 18)  # time-weighted
    assert s.p50_s == pytest.approx(0.002)  # per-step, not per-call (0.008)
    assert s.max_s == pytest.approx(0.003)
    assert s.examples_per_sec == pytest.approx(10 * 18 / 0.038)


def test_summarize_without_timed_steps_reports_why():
    s = summarize([], first_step_s=0.5, first_step_steps=1, warmup_steps=4)
    assert s.timed_steps == 0 and s.mean_s is None and s.examples_per_sec is None
    assert "no timed steps" in str(s) and "5 steps" in str(s)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(durations=[0.1, 0.2], steps=[1]), "same length"),
        (dict(durations=[-0.1]), "finite and >= 0"),
        (dict(durations=[float("nan")]), "finite"),
        (dict(durations=[0.1], steps=[0]), ">= 1"),
        (dict(durations=[0.1], batch_size=0), "batch_size"),
    ],
)
def test_summarize_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        summarize(**kwargs)


def test_summarize_calls_classifies_kinds():
    calls = [
        (1.0, 1, 0, "first"),
        (0.02, 1, 0, "warmup"),
        (0.02, 1, 0, "warmup"),
        (0.01, 1, 0, "timed"),
        (0.50, 1, 0, "excluded"),
        (0.01, 1, 1, "timed"),
    ]
    s = summarize_calls(calls, batch_size=4)
    assert (s.first_step_s, s.warmup_steps, s.excluded_steps, s.timed_steps) == (1.0, 2, 1, 2)
    assert s.max_s == pytest.approx(0.01)


@pytest.mark.parametrize("batch_size", [None, 16])
def test_epoch_figures_are_the_summary_s(batch_size):
    """What StepTimer puts in Keras's logs and TensorBoard at an epoch's end is the report's
    arithmetic, computed in one pass."""
    rng = np.random.default_rng(1)
    calls = [(1.0, 4, 0, "first"), (0.5, 4, 0, "excluded")]
    steps = [4] * 100 + [3]
    calls += [(float(d) * n, n, 0, "timed") for d, n in zip(rng.random(101), steps, strict=True)]
    calls.insert(5, (0.02, 4, 0, "warmup"))
    s = summarize_calls(calls, batch_size)
    figures = epoch_figures(calls, batch_size)
    assert figures["step_ms_p50"] == pytest.approx(s.p50_s * 1e3)
    assert figures["step_ms_p90"] == pytest.approx(s.p90_s * 1e3)
    if batch_size:
        assert figures["examples_per_sec"] == pytest.approx(s.examples_per_sec)
    else:
        assert "examples_per_sec" not in figures
    assert epoch_figures(calls[:2], batch_size) == {}  # nothing timed yet


def test_stepstats_dict_roundtrip_and_lines(monkeypatch):
    s = summarize([0.001] * 10, batch_size=32, first_step_s=0.2, first_step_steps=1)
    assert StepStats.from_dict(s.to_dict()) == s
    text = str(s)
    assert "p50 1.000 ms" in text and "32,000.0 examples/s" in text and "first step" in text
    assert max(map(len, s.lines(compile_cache=True))) > 80  # the first step's line, whole
    # print(timer.summary()) on an 80-column terminal: folded to it (was 98 columns)
    monkeypatch.setattr(sys, "stdout", types.SimpleNamespace(isatty=lambda: True))
    monkeypatch.setenv("COLUMNS", "80")
    assert max(map(len, str(s).splitlines())) <= 80
    assert " ".join(str(s).split()) == " ".join(text.split())  # folded, nothing lost


def test_format_flops_rounds_up_into_the_next_prefix():
    # 9.99999e11 at three figures is 1000 G: written 1 T, never 1e+03 G.
    assert stats.format_flops(9.99999e11, per_second=True) == "1 TFLOP/s"
    assert stats.format_flops(999.4e9) == "999 GFLOP"
    assert stats.format_flops(999.7) == "1 kFLOP"


def test_warmed_calls_warms_past_the_compile_then_sizes_a_run_to_its_window():
    calls = []

    def timed(n):  # 1 ms a call, the first (the compile) 1 s
        calls.append(n)
        return (1.0 if len(calls) == 1 else 0.0) + n * 0.001

    n = stats.warmed_calls(timed, window_s=0.05, warm_s=0.02)
    assert calls[0] == 1  # the compile, alone
    assert sum(calls[1:]) * 0.001 >= 0.02  # at least warm_s of calls after it
    assert n == 50  # a 0.05 s run of 1 ms calls
    assert stats.warmed_calls(lambda n: 0.0, window_s=1.0, warm_s=1.0, most=64) == 64


def test_whole_percents_add_up_as_their_parts_do():
    # 33.3 + 33.3 + 33.3: plain rounding says 99
    assert stats.whole_percents([1.0, 1.0, 1.0], 3.0) == [34, 33, 33]
    parts = [45.2, 40.3, 8.7, 4.9, 0.45, 0.45]  # two under 1 %: together 1 point
    got = stats.whole_percents(parts, 100.0)
    assert sum(got) == 100 and got == [45, 40, 9, 5, 1, 0]
    assert sum(stats.whole_percents([30.0, 30.0], 100.0)) == 60  # a part of the whole
    assert stats.whole_percents([1.0], 0.0) == [0]
