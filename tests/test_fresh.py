"""tune's claim is what a fresh process gets (issue 44, item 5), and a pick its own run can
time (item 4): the fresh-process rounds with injected runs, then once with real child
processes on your own model (``--model_fn``), and the run shape that bounds the loops."""

from __future__ import annotations

import sys

import pytest

from toolkit.search import engine as en
from toolkit.search import fresh as fr
from toolkit.search.standings import Target

DEFAULTS = en.Candidate()
PICK = en.Candidate(steps_per_execution=8)


def runs(ratios):
    """A runner whose pick runs `ratios[r]` times the defaults' 1000 examples/s in round r."""
    seen = []

    def runner(candidate, r):
        seen.append((candidate, r))
        return {"examples_per_sec": 1000.0 * (ratios[r] if candidate == PICK else 1.0)}

    return runner, seen


def test_a_gain_is_said_with_its_spread_and_rounds_and_one_round_is_not_confirmed():
    gain = fr.Gain.of([1.22, 1.31, 1.27], fr.FRESH)
    assert gain.words() == "1.27× (1.22–1.31, 3 rounds in fresh processes)" and gain.confirmed
    one = fr.Gain.of([1.76], fr.THIS_PROCESS)
    assert one.words() == "1.76× (1 round in this process: not confirmed)" and not one.confirmed
    assert fr.Gain.from_dict(gain.to_dict()) == gain
    assert fr.Gain.from_dict({"ratio": "fast"}) is None and fr.Gain.of([], fr.FRESH) is None


def test_a_pick_that_wins_every_fresh_round_stands_with_the_fresh_gain():
    runner, seen = runs([1.25, 1.20, 1.22, 1.5])
    pick, gain, rounds, why = fr.confirm_fresh(
        Target("mlp"), DEFAULTS, PICK, backend="tensorflow", device="cpu", steps=48,
        runner=runner,
    )  # fmt: skip
    assert pick == PICK and gain.where == fr.FRESH
    assert gain.rounds == 3 and (gain.low, gain.high) == (1.20, 1.25)  # three agreeing rounds
    assert [r for _, r in seen] == [0, 0, 1, 1, 2, 2]  # interleaved, each round both
    assert [c for c, _ in seen][:4] == [DEFAULTS, PICK, PICK, DEFAULTS]  # the order rotates
    assert set(rounds[0]) == {DEFAULTS.label(), PICK.label()}
    assert why.startswith("confirmed in fresh processes: 1.22×")


def test_two_rounds_far_apart_get_more_until_the_claim_is_known_and_it_is_their_median():
    """1.15× then 1.60×: both faster, but a median of two ratios that far apart is no better
    than either, so rounds go on; these never get within ±5 %, so all five are run and the
    claim carries them."""
    runner, seen = runs([1.15, 1.60, 1.30, 1.25, 1.35])
    pick, gain, rounds, why = fr.confirm_fresh(
        Target("mlp"), DEFAULTS, PICK, backend="tensorflow", device="cpu", steps=48,
        runner=runner,
    )  # fmt: skip
    assert pick == PICK and len(rounds) == fr.FRESH_ROUNDS == 5 and len(seen) == 10
    assert gain.rounds == 5 and gain.ratio == pytest.approx(1.30)
    assert (gain.low, gain.high) == (1.15, 1.60)
    assert why == "confirmed in fresh processes: 1.30× (1.15–1.60, 5 rounds in fresh processes)"


def test_rounds_end_once_the_claim_is_known_to_about_five_percent():
    # Two rounds, however close, say little of the spread: a third at least.
    assert not fr.known([1.25, 1.24]) and fr.known([1.25, 1.19, 1.22])
    # 1.20 and 1.30: 1.25 settles it (2.3 %), 1.45 does not.
    assert not fr.known([1.20, 1.30]) and fr.known([1.20, 1.30, 1.25])
    assert not fr.known([1.20, 1.30, 1.45])
    # A pick that lost a round cannot be confirmed: nothing more to learn.
    assert fr.known([1.40, 0.98])
    # Both sides of the noise line (1 + MIN_GAIN) is not settled, however close.
    assert not fr.known([1.01, 1.03, 1.03]) and fr.known([1.03, 1.04, 1.035])
    assert not fr.known([1.3])
    runner, seen = runs([1.20, 1.30, 1.25, 9.0, 9.0])
    pick, gain, _, _ = fr.confirm_fresh(
        Target("mlp"), DEFAULTS, PICK, backend="tensorflow", device="cpu", steps=48,
        runner=runner,
    )  # fmt: skip
    assert pick == PICK and gain.rounds == 3 and len(seen) == 6 and gain.ratio == 1.25


def test_a_gain_the_fresh_processes_do_not_show_leaves_the_defaults():
    runner, _ = runs([1.01, 0.97, 1.0])  # the search said 1.74×; a new process says ~1.0
    pick, gain, _, why = fr.confirm_fresh(
        Target("mlp"), DEFAULTS, PICK, backend="tensorflow", device="cpu", steps=48,
        runner=runner,
    )  # fmt: skip
    assert pick == DEFAULTS and gain.ratio == pytest.approx(0.99) and gain.rounds == 2
    assert "not confirmed in fresh processes" in why and "the defaults stay" in why


@pytest.mark.parametrize("failed", [{"error": "out of memory"}, {"examples_per_sec": float("nan")}])
def test_a_pick_whose_fresh_runs_fail_is_not_handed_back(failed):
    seen = []

    def runner(candidate, r):
        seen.append(candidate)
        return failed if candidate == PICK else {"examples_per_sec": 1.0}

    pick, gain, rounds, why = fr.confirm_fresh(
        Target("mlp"), DEFAULTS, PICK, backend="tensorflow", device="cpu", steps=48,
        runner=runner,
    )  # fmt: skip
    assert pick == DEFAULTS and gain is None and "could not be measured" in why
    assert len(rounds) == 1 and len(seen) == 2  # it cannot be confirmed: no more rounds


def test_fresh_runs_a_signal_ended_are_named_for_the_cache_to_leave_out():
    """The OOM killer ended the pick's run: "the defaults stay" is not the pick's answer, so
    its label is handed back and tune does not cache the search."""

    def runner(candidate, r):
        if candidate == PICK and r == 0:
            return {"error": "killed by SIGKILL", "interrupted": True}
        return {"examples_per_sec": 1000.0 * (1.3 if candidate == PICK else 1.0)}

    lost: list[str] = []
    fr.confirm_fresh(
        Target("mlp"), DEFAULTS, PICK, backend="tensorflow", device="cpu", steps=48,
        runner=runner, interrupted=lost,
    )  # fmt: skip
    assert lost == [PICK.label()]


def test_each_fresh_run_is_sized_at_its_own_rate():
    """A 2× pick sized at the defaults' rate timed half the window (where one second moves by
    ±15 %): each candidate gets steps for FRESH_WINDOW_S at its own rate."""
    defaults, pick = fr.fresh_steps(DEFAULTS, 1000.0, 10, 48), fr.fresh_steps(PICK, 2000.0, 10, 48)
    assert pick == 2 * defaults == 2 * round(fr.FRESH_WINDOW_S * 100)
    assert fr.fresh_steps(PICK, None, 10, 48) == 48  # no rate: the steps asked for
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


def test_fresh_processes_run_your_model_with_each_candidate_s_settings(tmp_path, monkeypatch):
    (tmp_path / "freshtrain.py").write_text(MODEL_FN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.chdir(tmp_path)
    seen = []
    from toolkit.search import _processes

    real = _processes.run_child

    def watched(spec, env, timeout):  # the real child process, its spec and figures kept
        got = real(spec, env, timeout)
        seen.append((spec, got))
        return got

    monkeypatch.setattr(_processes, "run_child", watched)
    steps = {DEFAULTS: 24, PICK: 48}  # each candidate's own length (tune: its own rate)
    pick, gain, rounds, _why = fr.confirm_fresh(
        Target.of("freshtrain:make"), DEFAULTS, PICK, backend="tensorflow", device="cpu",
        steps=steps, rounds=2,
    )  # fmt: skip
    assert len(rounds) == 2 and all(set(r) == {DEFAULTS.label(), PICK.label()} for r in rounds)
    assert gain is not None and gain.rounds == 2 and gain.where == fr.FRESH
    assert pick in (DEFAULTS, PICK)
    # Each fresh process ran its candidate's settings on your model, for its own steps: the
    # calls it timed held that many steps.
    assert sorted(spec.steps for spec, _ in seen) == [24, 24, 48, 48]
    for spec, figures in seen:
        candidate = PICK if spec.candidate == PICK.to_dict() else DEFAULTS
        assert spec.steps == steps[candidate], (spec, figures)
        assert figures["steps_per_call"] == candidate.steps_per_execution, figures
        assert figures["timed_steps"] > 0 and figures["examples_per_sec"] > 0
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
