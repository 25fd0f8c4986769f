"""tune's claim is what a fresh process gets (issue 44, item 5), and a pick its own run can
time (item 4): the fresh-process rounds with injected runs, then once with real child
processes on your own model (``--model_fn``), and the run shape that bounds the loops."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from toolkit.core._gain import FRESH, THIS_PROCESS, Gain
from toolkit.search import engine as en
from toolkit.search import fresh as fr
from toolkit.search._processes import ChildResult
from toolkit.search.standings import Figures, Target


class Clock:
    """A clock that moves only when a run says it took time: no real sleeping."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


DEFAULTS = en.Candidate()
PICK = en.Candidate(steps_per_execution=8)


def runs(ratios):
    """A runner whose pick runs `ratios[r]` times the defaults' 1000 examples/s in round r."""
    seen = []

    def runner(candidate, r):
        seen.append((candidate, r))
        return Figures(examples_per_sec=1000.0 * (ratios[r] if candidate == PICK else 1.0))

    return runner, seen


def confirmed(runner, **kw):
    return fr.confirm_fresh(
        Target("mlp"), DEFAULTS, PICK, backend="tensorflow", device="cpu", steps=48,
        runner=runner, **kw,
    )  # fmt: skip


def test_a_gain_is_said_with_its_range_and_rounds_and_one_round_is_not_confirmed():
    gain = Gain.of([1.22, 1.31, 1.27], FRESH)
    # The median; the range: one-sided 95 % bounds of the geometric mean (t, 2 df).
    assert gain.ratio == 1.27 and gain.low == pytest.approx(1.192, abs=1e-3)
    assert gain.high == pytest.approx(1.345, abs=1e-3)
    assert gain.noise == pytest.approx(0.036, abs=1e-3)  # ±3.6 % a round
    assert gain.words() == "1.27× (1.19–1.34, 3 rounds in fresh processes)" and gain.confirmed
    one = Gain.of([1.76], THIS_PROCESS)
    assert one.words() == "1.76× (1 round in this process: not confirmed)" and not one.confirmed
    # Why no fresh process checked it, with the fix, in the gain's own line (a script that
    # prints only ``result.gain.words()`` learns it), kept through the cache's JSON.
    why = "fresh processes cannot import build: ...; move it to a module (mytrain.py)"
    said = dataclasses.replace(one, why=why)
    assert said.words() == f"1.76× (1 round in this process: {why})"
    assert Gain.from_dict(said.to_dict()) == said
    two = dataclasses.replace(Gain.of([1.5, 1.9], THIS_PROCESS), why=why)
    assert two.words().endswith(f"2 rounds in this process: {why})")
    # Fresh rounds that did not confirm it say so; the why is for this process's alone.
    wide = dataclasses.replace(Gain.of([0.8, 1.6], FRESH), why=why)
    assert wide.words().endswith("2 rounds in fresh processes: not confirmed)")
    assert Gain.from_dict(gain.to_dict()) == gain
    assert Gain.from_dict({"ratio": "fast"}) is None and Gain.of([], FRESH) is None
    old = {"ratio": 1.2, "low": 1.1, "high": 1.3, "rounds": 3, "where": FRESH}  # no noise
    assert Gain.from_dict(old) == Gain(1.2, 1.1, 1.3, 3, FRESH)


def test_the_range_answers_or_says_what_the_noise_lets_the_rounds_confirm():
    # Two rounds far apart: the range spans 1, the question is open.
    wide = Gain.of([0.49, 1.20], FRESH)
    assert not wide.answered and wide.low < 1 < wide.high
    # Three that agree: confirmed; three at the defaults' speed: refused.
    assert Gain.of([1.25, 1.19, 1.22], FRESH).confirmed
    assert Gain.of([0.97, 0.98, 0.99], FRESH).refused
    # A large gain needs two rounds only; a small one is not confirmed by two.
    assert Gain.of([2.3, 2.8], FRESH).confirmed
    assert not Gain.of([1.05, 1.10], FRESH).answered
    # The smallest gain a machine of ±12 % noise could confirm in 3 rounds.
    noisy = Gain(1.0, 0.9, 1.1, 3, FRESH, noise=0.12)
    assert noisy.resolvable() == pytest.approx(1.211, abs=1e-3)
    assert noisy.resolvable(8) < noisy.resolvable()  # more rounds: finer
    assert fr.noise_words(noisy, 30.0) == (
        "on this machine's noise (±12%) a gain under 1.21× cannot be confirmed in 30 s"
    )
    assert fr.noise_words(Gain.of([1.3], FRESH), 30.0) == ""
    # Two rounds that both won, far apart: what more rounds would confirm is said too.
    apart = Gain.of([6.0, 2.7], FRESH)
    assert not apart.answered and fr.noise_words(apart, 30.0) == (
        "on this machine's noise (±76%) a gain under 12.44× cannot be confirmed in 30 s; "
        "3 rounds, about 50 s, would confirm the 4.35× measured at this noise"
    )
    assert apart.resolvable(3) < apart.ratio < apart.resolvable()


def test_a_pick_that_wins_every_fresh_round_stands_with_the_fresh_gain():
    runner, seen = runs([1.25, 1.20, 1.22, 1.5])
    found = confirmed(runner)
    assert found.pick == PICK and found.gain.where == FRESH and found.gain.trusted
    assert found.gain.rounds == 2 and found.gain.ratio == pytest.approx(1.225)
    assert [r for _, r in seen] == [0, 0, 1, 1]  # interleaved, each round both
    assert [c for c, _ in seen] == [DEFAULTS, PICK, PICK, DEFAULTS]  # the order rotates
    assert set(found.rounds[0]) == {DEFAULTS.label(), PICK.label()}
    assert found.words == ()  # the gain says it all


def test_rounds_far_apart_go_on_until_the_range_answers():
    """1.15× then 1.60×: both faster, but two ratios that far apart leave the range open,
    so rounds go on; the third closes it above 1."""
    runner, seen = runs([1.15, 1.60, 1.30, 1.25, 1.35])
    found = confirmed(runner)
    assert found.pick == PICK and len(found.rounds) == 3 and len(seen) == 6
    assert found.gain.rounds == 3 and found.gain.ratio == pytest.approx(1.30)
    assert found.gain.low > 1.0


def test_a_lost_round_does_not_end_the_rounds_the_range_decides():
    """Measured: a setting fresh rounds found 1.23× faster was refused on two rounds of
    0.49× and 1.20×. The range of those two spans 1: more rounds, and they confirm it."""
    runner, _seen = runs([0.49, 1.20, 1.23, 1.24, 1.22, 1.23, 1.25, 1.21])
    found = confirmed(runner)
    assert len(found.rounds) > 2 and found.gain.rounds == len(found.rounds)
    assert found.pick == PICK and found.gain.confirmed  # the 0.49 round was noise


def test_a_gain_the_fresh_processes_do_not_show_leaves_the_defaults():
    runner, _ = runs([1.01, 0.97, 1.0, 0.98, 0.99, 1.0, 0.98, 0.99])  # the search said 1.74×
    found = confirmed(runner)
    assert found.pick == DEFAULTS and found.gain.refused and found.gain.ratio < 1.0
    assert found.words == ("not faster than the defaults in fresh processes: the defaults stay",)


def test_the_rounds_end_at_the_deadline_and_say_what_they_could_not_tell():
    """Rounds of 10 s on an injected clock, 25 s given: two rounds, then no third that would
    end past the deadline; an open range leaves the defaults, with the rounds it had."""
    clock = Clock()
    runner, _seen = runs([1.05, 1.30, 1.2, 1.2])

    def slow(candidate, r):
        clock.t += 5.0
        return runner(candidate, r)

    timing = fr.Timing(25.0, clock, {DEFAULTS: 5.0, PICK: 5.0})
    found = confirmed(slow, timing=timing)
    assert len(found.rounds) == 2 and clock.t <= 25.0 and found.out_of_time
    assert found.pick == DEFAULTS and not found.gain.answered
    assert found.words == ("not confirmed in 2 fresh round(s): the defaults stay",)
    # Not even one round fits: nothing runs.
    clock.t = 0.0
    found = confirmed(slow, timing=fr.Timing(8.0, clock, {DEFAULTS: 5.0, PICK: 5.0}))
    assert found.rounds == [] and found.out_of_time and clock.t == 0.0


@pytest.mark.parametrize(
    "failed", [ChildResult(error="out of memory"), Figures(examples_per_sec=float("nan"))]
)
def test_a_pick_whose_fresh_runs_fail_is_not_handed_back(failed):
    seen = []

    def runner(candidate, r):
        seen.append(candidate)
        return failed if candidate == PICK else Figures(examples_per_sec=1.0)

    found = confirmed(runner)
    assert found.pick == DEFAULTS and found.gain is None
    assert "could not be measured" in found.words[0] and found.words[-1] == "the defaults stay"
    assert len(found.rounds) == 1 and len(seen) == 2  # it cannot be confirmed: no more rounds


def test_a_pick_stopped_by_the_time_left_is_unconfirmed_not_failed():
    """Two rounds won by 2.6×, then the pick's third run stopped as the time ran out (a
    keras.io FeatureSpace model under a 20 s budget): the defaults stand, but the words say
    the time ran out after two rounds, never that the pick failed."""

    def runner(candidate, r):
        if candidate == PICK and r == 2:
            return ChildResult(
                error="stopped after 13 s, past the time it had", interrupted=True, overran_s=13.0
            )
        return Figures(examples_per_sec=1000.0 * ((3.2, 1.96)[r] if candidate == PICK else 1.0))

    found = confirmed(runner, rounds=3)  # 2.58× (0.53-11.8): two rounds do not answer
    assert found.pick == DEFAULTS and found.gain.rounds == 2 and found.gain.ratio > 2
    assert found.words == (
        "not confirmed in 2 fresh round(s): round 3's run of it was stopped, out of time: the "
        "defaults stay",
    ), found.words
    assert found.overran_s == 13.0


def test_fresh_runs_a_signal_ended_are_named_for_the_cache_to_leave_out():
    """The OOM killer ended the pick's run: "the defaults stay" is not the pick's answer, so
    its label is handed back and tune does not cache the search."""

    def runner(candidate, r):
        if candidate == PICK and r == 0:
            return ChildResult(error="killed by SIGKILL", interrupted=True)
        return Figures(examples_per_sec=1000.0 * (1.3 if candidate == PICK else 1.0))

    lost: list[str] = []
    confirmed(runner, interrupted=lost)
    assert lost == [PICK.label()]


def test_each_fresh_run_is_sized_at_its_own_rate():
    """A 2× pick sized at the defaults' rate timed half the window (where one second moves by
    ±15 %): each candidate gets steps for FRESH_WINDOW_S at its own rate."""
    defaults, pick = fr.fresh_steps(DEFAULTS, 1000.0, 10, 48), fr.fresh_steps(PICK, 2000.0, 10, 48)
    assert pick == 2 * defaults == 2 * round(fr.FRESH_WINDOW_S * 100)
    assert fr.fresh_steps(PICK, None, 10, 48) == 48  # no rate: the steps asked for
    assert fr.fresh_steps(DEFAULTS, 1000.0, 10, 48, window=1.5) == 150  # a short budget's
    assert fr.fresh_steps(en.Candidate(fused_steps=32), 1.0, 10, 48) == 160  # 5 calls at least


def test_a_run_shape_allows_only_loops_its_run_can_time():
    # The case found: 256 steps a call for a run whose epoch has 160 steps.
    one_epoch = en.RunShape(epochs=1, steps_per_epoch=160)
    assert not one_epoch.allows(en.Candidate(steps_per_execution=8, fused_steps=32))
    assert "more than an epoch's 5 batches" in one_epoch.why_not(
        en.Candidate(steps_per_execution=8, fused_steps=32)
    )
    # Even over many epochs, a call Keras would cut at the epoch's end is not a pick.
    assert not en.RunShape(epochs=10, steps_per_epoch=160).allows(
        en.Candidate(steps_per_execution=256)
    )
    # A run too short for any loop still takes its own settings (a cached defaults pick).
    assert en.RunShape(epochs=1, steps_per_epoch=8).allows(DEFAULTS)
    assert "0 timed call(s)" in en.RunShape(epochs=1, steps_per_epoch=16).why_not(
        en.Candidate(fused_steps=8)
    )
    assert one_epoch.allows(en.Candidate(steps_per_execution=8, fused_steps=1))  # 20 calls
    # --train_steps=30: fused steps must divide the epoch, and fit in it.
    thirty = en.RunShape(epochs=5, steps_per_epoch=30)
    assert not thirty.allows(en.Candidate(fused_steps=32))
    assert "not a multiple of 8" in thirty.why_not(en.Candidate(fused_steps=8))
    # A one-pass epoch: its batches depend on the candidate's batch size.
    digits = en.RunShape(epochs=20, examples=1437, batch_size=32)
    assert digits.timed_calls(en.Candidate(fused_steps=32)) == 20 - 1 - 1
    assert not en.RunShape(epochs=1, examples=1437, batch_size=32).allows(
        en.Candidate(fused_steps=32)
    )
    assert en.RunShape(epochs=1).timed_calls(PICK) is None  # an endless pipeline: no bound


def test_the_search_never_measures_a_loop_the_run_cannot_time():
    space = en.Space(
        jit_compile=(False, True), steps_per_execution=(1, 8, 32), fused_steps=(1, 8, 32),
        run=en.RunShape(epochs=1, steps_per_epoch=160),
    )  # fmt: skip
    measured = []

    def rate(c):
        measured.append(c)
        return 1000.0 / (1.0 + 10.0 / c.per_call)  # longer loops always faster

    trials, _ = en.search(rate, space, budget_s=1e9)
    assert all(space.run.allows(c) for c in measured[1:])
    best = en.choose(trials)
    assert space.run.timed_calls(best) >= en.MIN_TIMED_CALLS and best.per_call > 1


MODEL_FN = """
import numpy as np
import tensorflow as tf
from toolkit.core import compat

def make():
    keras = compat.keras()
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(True))
    x = np.random.default_rng(0).normal(size=(4096, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(16).prefetch(2)
"""


@pytest.mark.long
def test_fresh_processes_run_your_model_with_each_candidate_s_settings(tmp_path, monkeypatch):
    (tmp_path / "freshtrain.py").write_text(MODEL_FN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.chdir(tmp_path)
    seen = []
    from toolkit.search import _processes

    real = _processes.run_child

    def watched(spec, env, timeout, *args, **kwargs):  # the real child, its spec and result
        got = real(spec, env, timeout, *args, **kwargs)
        seen.append((spec, got))
        return got

    monkeypatch.setattr(_processes, "run_child", watched)
    steps = {DEFAULTS: 24, PICK: 48}  # each candidate's own length (tune: its own rate)
    found = fr.confirm_fresh(
        Target.of("freshtrain:make"), DEFAULTS, PICK, backend="tensorflow", device="cpu",
        steps=steps, rounds=2,
    )  # fmt: skip
    rounds, gain = found.rounds, found.gain
    assert len(rounds) == 2 and all(set(r) == {DEFAULTS.label(), PICK.label()} for r in rounds)
    assert gain is not None and gain.rounds == 2 and gain.where == FRESH
    assert found.pick in (DEFAULTS, PICK)
    # Each fresh process ran its candidate's settings on your model, for its own steps: the
    # calls it timed held that many steps.
    assert sorted(spec.steps for spec, _ in seen) == [24, 24, 48, 48]
    for spec, got in seen:
        candidate = PICK if spec.candidate == PICK else DEFAULTS
        figures = got.figures()
        assert spec.steps == steps[candidate], (spec, got)
        assert not spec.target.config.get("count_flops", True)  # only its rate is read
        assert figures.steps_per_call == candidate.steps_per_execution, figures
        assert figures.timed_steps > 0 and figures.examples_per_sec > 0
    assert sys.modules.get("freshtrain") is None  # built only in the children


def test_a_generator_is_read_once_before_tune_measures_so_no_candidate_pays_it_alone():
    from toolkit.data._fit_input import Replay

    made = []

    def batches():
        for i in range(100):
            made.append(i)
            yield i

    replay = Replay(batches(), hold=40)
    replay.fill(30)
    assert made == list(range(30))
    first = list(zip(range(30), replay, strict=False))
    second = list(zip(range(30), replay, strict=False))
    assert first == second and len(made) == 30  # both passes replayed, none read on
    replay.fill(500)  # never past what it holds at most
    assert len(made) == 40


def test_run_timeout_is_the_time_left_then_a_multiple_of_the_first_run():
    """A fresh run's limit: what the call has left (and a grace), never a fixed 600 s once
    anything bounds it; after a first run measured one here, ``OVERRUN`` times that (or the
    run's own estimate, where its compile is longer), whichever bounds it first."""
    assert fr.run_timeout(None, [], None) == fr.FRESH_TIMEOUT_S  # nothing bounds it
    assert fr.run_timeout(40.0, [], 5.0) == 40.0 + fr.GRACE_S
    assert fr.run_timeout(-3.0, [], None) == 1.0  # past the deadline: stopped at once
    assert fr.run_timeout(400.0, [8.0], None) == fr.OVERRUN * 8.0 + fr.GRACE_S
    assert fr.run_timeout(400.0, [8.0], 20.0) == fr.OVERRUN * 20.0 + fr.GRACE_S
    assert fr.run_timeout(10.0, [8.0], None) == 10.0 + fr.GRACE_S
    assert fr.run_timeout(None, [8.0], None) == fr.OVERRUN * 8.0 + fr.GRACE_S


SLOW_AFTER_FIRST = (
    MODEL_FN
    + """
import os, time

def slow_after_first():  # the first build here is quick; every later one hangs
    path = os.environ["BUILD_COUNT"]
    n = int(open(path).read()) if os.path.exists(path) else 0
    with open(path, "w") as f:
        f.write(str(n + 1))
    if n >= 1:
        time.sleep(600)
    return make()
"""
)


@pytest.mark.long
def test_a_fresh_run_that_overruns_is_stopped_said_and_never_silent(tmp_path, monkeypatch):
    """tune(build)'s fresh rounds where `build` turns slow in a fresh process: the run past
    ``OVERRUN`` times the first one's time is stopped (not left to a fixed 600 s), a line
    says it still runs at least every ``HEARTBEAT_S`` while it works unheard, and the
    defaults stay; a run stopped at the time left is said with the budget that holds such
    runs, one stopped by the first run's multiple without one."""
    import types

    from toolkit.search import _processes
    from toolkit.search import tune as tn

    (tmp_path / "freshslow.py").write_text(SLOW_AFTER_FIRST)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("BUILD_COUNT", str(tmp_path / "count"))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.chdir(tmp_path)
    said = []
    timing = fr.Timing(deadline=fr.time.perf_counter() + 500.0)  # far: the first run bounds
    found = fr.confirm_fresh(
        Target.of("freshslow:slow_after_first"), DEFAULTS, PICK, backend="tensorflow",
        device="cpu", steps=24, rounds=2, progress=said.append, timing=timing,
    )  # fmt: skip
    assert found.pick == DEFAULTS, (found, said)
    # Stopped by the first run's multiple, not by the time left: said as such, and no budget
    # is offered for it (a larger one would stop it again).
    assert found.overran_s is None and "the defaults stay" in found.words, found
    assert f"over {fr.OVERRUN:.0f}× the first fresh run" in " ".join(found.words), found
    still = [line for line in said if "still running" in line and PICK.label() in line]
    assert still, said  # never a silent stretch: a line at least every HEARTBEAT_S
    seconds = [int(line.rsplit("(", 1)[1].split()[0]) for line in still]
    assert seconds == sorted(seconds) and seconds[0] <= 2 * _processes.HEARTBEAT_S, still
    plan = tn.Plan.of(30.0, True, start_s=5.0)
    tuning = types.SimpleNamespace(defaults=DEFAULTS, plan=plan)
    assert not any("budget holds" in w for w in tn._Tuning.fresh_words(tuning, found))
    # Stopped at the time left: the budget that holds such runs, priced from the longest run
    # (the stopped one's seconds are only a floor): 30 + 2 × 3 × 61 s.
    short = dataclasses.replace(found, overran_s=16.0, longest_s=61.0)
    assert tn._Tuning.fresh_words(tuning, short) == [
        "a fresh run was stopped after 16 s, past the time left; a 400 s budget holds 3 "
        "rounds of such runs"
    ]
