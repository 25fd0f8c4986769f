"""The settings search: bookkeeping with injected measurements (budget, failures, the
never-slower rule, the cache and its invalidation), then one real tiny search."""

from __future__ import annotations

import json

import numpy as np
import pytest

from toolkit import train
from toolkit import tune as tn
from toolkit.config import TrainConfig

SPACE = tn.Space(
    precision=("float32", "mixed_bfloat16"),
    jit_compile=(False, True),
    steps_per_execution=(1, 8),
    fused_steps=(1, 8),
)


def fake_rates(c: tn.Candidate) -> float:
    rate = 100.0
    rate *= 1.5 if c.jit_compile else 1.0
    rate *= 2.0 if c.steps_per_execution == 8 else 1.0
    rate *= 0.5 if c.precision == "mixed_bfloat16" else 1.0
    return rate


class Clock:
    def __init__(self, step=1.0):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def test_search_starts_from_defaults_and_finds_the_best_with_fewer_trials_than_the_grid():
    trials, exhausted = tn.search(fake_rates, SPACE, budget_s=1e9)
    assert trials[0].candidate == tn.Candidate() and not exhausted
    best = tn.choose(trials)
    assert best == tn.Candidate(jit_compile=True, steps_per_execution=8)
    assert len(trials) < len(SPACE.grid()) == 16
    assert len({t.candidate for t in trials}) == len(trials)  # nothing measured twice


def test_the_search_goes_to_the_loops_corner_first_then_each_knob_then_shorter_loops():
    space = tn.Space(
        jit_compile=(False, True), steps_per_execution=(1, 8, 32), fused_steps=(1, 8, 32)
    )
    assert len(space.grid()) == 16  # 18 less the two calls of 1024 steps (the cap)
    assert all(c.steps_per_execution * c.fused_steps <= 256 for c in space.grid())

    def overhead(c):  # examples/s of a 1 ms step with 10 ms of fixed cost a call
        return 1000.0 / (1.0 + 10.0 / (c.steps_per_execution * c.fused_steps))

    trials, _ = tn.search(lambda c: overhead(c) * (1.5 if c.jit_compile else 1.0), space)
    order = [(t.candidate.jit_compile, t.candidate.steps_per_execution, t.candidate.fused_steps)
             for t in trials]  # fmt: skip
    # Defaults; the corner (fused steps longest, then steps per execution as the cap allows);
    # XLA there; then fused steps one value shorter, which loses. Steps per execution one
    # shorter is not measured: the defaults and the corner put the call's overhead at 10 ms,
    # so 32 steps a call would lose ~39 % (only noise could make it win).
    assert order == [(False, 1, 1), (False, 8, 32), (True, 8, 32), (True, 8, 8)]
    assert tn.choose(trials) == tn.Candidate(jit_compile=True, steps_per_execution=8,
                                             fused_steps=32)  # fmt: skip

    # Where a longer loop does not help, the shorter one is taken, not a coin flip.
    flat, _ = tn.search(lambda c: 100.0 + 10.0 * (c.fused_steps > 1), space)
    assert (tn.choose(flat).steps_per_execution, tn.choose(flat).fused_steps) == (1, 8)
    # A peak below the longest loop (8 fused steps: 32 spill out of a cache, say) is found.
    peaked, _ = tn.search(lambda c: {1: 100.0, 8: 300.0, 32: 150.0}[c.fused_steps] +
                          c.steps_per_execution, space)  # fmt: skip
    assert tn.choose(peaked).fused_steps == 8 and len(peaked) < len(space.grid())


def test_the_knobs_interact_so_their_order_does_not_decide():
    """bfloat16 wins without XLA and loses with it (an emulated dtype XLA cannot fuse): the
    first knob set must not lock in what the next one overturns."""
    space = tn.Space(
        precision=("float32", "mixed_bfloat16"), jit_compile=(False, True),
        steps_per_execution=(1, 8), fused_steps=(1, 8),
    )  # fmt: skip

    def rate(c):
        xla, bf16 = c.jit_compile, c.precision == "mixed_bfloat16"
        base = {(False, False): 100.0, (False, True): 120.0, (True, False): 300.0}
        return base.get((xla, bf16), 200.0) * (1 + 0.5 * (c.fused_steps > 1))

    trials, _ = tn.search(rate, space)
    best = tn.choose(trials)
    assert (best.precision, best.jit_compile, best.fused_steps) == ("float32", True, 8)
    # bf16 with XLA is measured, loses, and float32 with XLA stays: no second pass needed.
    seen = {(t.candidate.precision, t.candidate.jit_compile) for t in trials}
    assert ("mixed_bfloat16", True) in seen and len(trials) < len(space.grid())

    # When precision is set after XLA and changes the best, XLA is tried again at it.
    def rate2(c):
        xla, bf16 = c.jit_compile, c.precision == "mixed_bfloat16"
        return {(False, False): 100.0, (True, False): 150.0, (True, True): 180.0}.get(
            (xla, bf16), 400.0
        )

    trials, _ = tn.search(rate2, space)
    best = tn.choose(trials)
    assert (best.precision, best.jit_compile) == ("mixed_bfloat16", False)


def test_a_shorter_steps_per_execution_is_measured_only_where_it_could_win():
    space = tn.Space(jit_compile=(False,), steps_per_execution=(1, 8, 32), fused_steps=(1,))

    def calls(overhead_ms):  # a 1 ms step and a call's fixed cost
        return lambda c: 1000.0 / (1.0 + overhead_ms / c.steps_per_execution)

    heavy, _ = tn.search(calls(5.0), space)  # 32 -> 8 steps a call: ~11 % slower
    assert [t.candidate.steps_per_execution for t in heavy] == [1, 32]
    assert tn.choose(heavy).steps_per_execution == 32
    light, _ = tn.search(calls(0.05), space)  # 0.5 % slower, within the noise: measured
    assert [t.candidate.steps_per_execution for t in light] == [1, 32, 8]
    assert tn.call_overhead(light[0], light[1]) == pytest.approx(0.05e-3, rel=1e-6)  # seconds


def test_a_failing_candidate_is_recorded_and_skipped():
    def measure(c):
        if c.jit_compile:
            raise RuntimeError("XLA is not available on this device\nmore detail")
        return fake_rates(c)

    trials, _ = tn.search(measure, SPACE, budget_s=1e9)
    failed = [t for t in trials if t.error]
    assert failed and failed[0].error == "RuntimeError: XLA is not available on this device"
    assert failed[0].examples_per_sec is None
    assert tn.choose(trials).jit_compile is False
    result = tn.TuneResult(tn.choose(trials), trials, "k", False, 1.0)
    assert "failed: RuntimeError: XLA is not available" in result.table()


def test_the_budget_stops_the_search_but_the_defaults_are_always_measured():
    trials, exhausted = tn.search(fake_rates, SPACE, budget_s=2.5, clock=Clock())
    assert exhausted and trials[0].candidate == tn.Candidate() and len(trials) <= 3
    trials, exhausted = tn.search(fake_rates, SPACE, budget_s=0.0, clock=Clock())
    assert exhausted and [t.candidate for t in trials] == [tn.Candidate()]


def test_never_slower_than_the_defaults():
    d = tn.Trial(tn.Candidate(), 100.0, 1.0)
    slower = tn.Trial(tn.Candidate(jit_compile=True), 90.0, 1.0)
    noise = tn.Trial(tn.Candidate(steps_per_execution=8), 101.5, 1.0)
    faster = tn.Trial(tn.Candidate(fused_steps=8), 130.0, 1.0)
    assert tn.choose([d, slower]) == tn.Candidate()
    assert tn.choose([d, slower, noise]) == tn.Candidate()  # within 2 %: keep the defaults
    assert tn.choose([d, slower, noise, faster]) == tn.Candidate(fused_steps=8)
    failed_defaults = tn.Trial(tn.Candidate(), None, 1.0, "boom")
    assert tn.choose([failed_defaults, slower]) == slower.candidate


def _noisy(true_rates, lucky):
    """Measurements of `true_rates` (label -> examples/s) where each candidate in `lucky` gets
    one window 40 % too fast (its first: the search's), as a busy neighbour can give."""
    seen = {}

    def measure(c):
        seen[c] = seen.get(c, 0) + 1
        rate = true_rates.get(c, 100.0)
        return rate * (1.4 if c in lucky and seen[c] == 1 else 1.0)

    return measure


def test_a_lucky_window_does_not_win_the_head_to_head():
    lucky = tn.Candidate(fused_steps=8)  # really 2 % slower, but its one window was +40 %
    measure = _noisy({tn.Candidate(): 100.0, lucky: 98.0}, {lucky})
    trials, _ = tn.search(measure, SPACE, budget_s=1e9)
    assert tn.choose(trials) == lucky  # one window each: fooled
    pick, rounds, why, exhausted = tn.confirm(measure, trials, budget_s=1e9)
    assert pick == tn.Candidate() and rounds and not exhausted  # head to head: not fooled
    assert "defaults stay" in why
    defaults = trials[0]
    assert len(defaults.rates) == 1 + len(rounds) and defaults.spread() == "±0%"
    lucky_trial = next(t for t in trials if t.candidate == lucky)
    assert lucky_trial.spread() and lucky_trial.examples_per_sec == pytest.approx(98.0)


def test_a_real_gain_is_confirmed_and_its_spread_reported():
    modest = tn.Candidate(jit_compile=True)
    measure = _noisy({tn.Candidate(): 100.0, modest: 110.0}, set())
    trials, _ = tn.search(measure, SPACE, budget_s=1e9)
    pick, rounds, why, _ = tn.confirm(measure, trials, budget_s=1e9)
    assert pick == modest
    assert 2 <= len(rounds) <= tn.MAX_ROUNDS and "won 2 of 2" in why  # +10 %: two rounds
    # A large gain, in the search and again head to head, needs one round only.
    measure = _noisy({tn.Candidate(): 100.0, modest: 150.0}, set())
    big, _ = tn.search(measure, SPACE, budget_s=1e9)
    pick, one, why_big, _ = tn.confirm(measure, big, budget_s=1e9)
    assert pick == modest and len(one) == 1 and "one round" in why_big
    result = tn.TuneResult(pick, trials, "k", False, 1.0, False, rounds, why)
    table = result.table()
    assert "| spread | runs |" in table and "head-to-head round(s)" in table
    again = tn.TuneResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.confirm_rounds == rounds and again.trials[0].rates == trials[0].rates


def test_one_round_is_enough_only_when_the_search_and_the_round_agree_on_the_order():
    a, b = tn.Candidate(fused_steps=8), tn.Candidate(jit_compile=True, fused_steps=8)
    # b's search window is the fastest, its first round window the slowest: two windows
    # that disagree on a and b are no verdict, however far both are ahead of the defaults.
    sequences = {tn.Candidate(): [100.0] * 9, a: [300.0] * 9, b: [310.0, 200.0] + [290.0] * 7}

    def measure(c):
        return sequences.get(c, [50.0] * 9).pop(0)

    space = tn.Space(jit_compile=(False, True), steps_per_execution=(1,), fused_steps=(1, 8))
    trials, _ = tn.search(measure, space, budget_s=1e9)
    pick, rounds, why, _ = tn.confirm(measure, trials, budget_s=1e9)
    assert len(rounds) >= 2 and "one round" not in why and pick == a


def test_the_budget_is_a_promise_not_a_start_deadline():
    clock = Clock(step=0.0)

    def measure(c):
        clock.t += 4.0  # every candidate takes 4 s
        return fake_rates(c)

    space = tn.Space(
        precision=("float32", "mixed_bfloat16"), steps_per_execution=(1, 8), fused_steps=(1, 8)
    )
    trials, exhausted = tn.search(measure, space, budget_s=13.0, clock=clock)
    assert exhausted and len(trials) == 3 and clock.t <= 13.0  # a 4th would end at 16 s
    pick, rounds, _, out = tn.confirm(measure, trials, budget_s=13.0, clock=clock, spent_s=clock.t)
    assert out and not rounds and clock.t <= 13.0
    # Nothing confirmed: only a gain beyond UNCONFIRMED_GAIN in one window is taken.
    assert pick == tn.choose(trials, tn.UNCONFIRMED_GAIN)


def test_the_first_xla_candidate_is_expected_to_cost_more_and_then_what_xla_cost():
    """XLA's compile is not known until an XLA candidate ran: the first is expected to cost
    XLA_FIRST_COST times the slowest candidate so far, and is not started where that would
    end past the budget; after one ran, XLA candidates are expected to cost what XLA did."""
    clock = Clock(step=0.0)
    cost = {False: 3.0, True: 12.0}  # a CNN here: graph trials 3 s, its XLA trial far more

    def measure(c):
        clock.t += cost[c.jit_compile]
        return fake_rates(c)

    # 6 s spent; the first XLA candidate is expected at 3 × 3 s: past a 14 s budget, so
    # it is not started, while the graph candidates after it (3 s) still are.
    trials, exhausted = tn.search(measure, SPACE, budget_s=14.0, clock=clock)
    assert exhausted and clock.t <= 14.0 and len(trials) >= 3
    assert not any(t.candidate.jit_compile for t in trials)
    # With room for it, it runs (and wins); the next XLA candidate is then expected to take
    # 12 s too, and is not started past the budget.
    clock.t = 0.0
    trials, exhausted = tn.search(measure, SPACE, budget_s=25.0, clock=clock)
    assert exhausted and clock.t == 18.0
    assert [t.candidate.jit_compile for t in trials] == [False, False, True]
    assert tn._expected_cost(tn.Candidate(jit_compile=True), trials) == 12.0


def test_space_follows_the_step_time(keras):
    from toolkit import devices

    cpu = devices.select("cpu")
    assert tn.default_space(cpu, step_s=0.0005).fused_steps == (1, 8, 32)
    assert tn.default_space(cpu, step_s=0.02).steps_per_execution == (1, 4)
    assert tn.default_space(cpu, step_s=0.2).fused_steps == (1,)
    assert tn.default_space(cpu, batch_sizes=(64,)).batch_size == (None, 64)


def test_window_steps_time_at_least_three_whole_calls():
    warmup, total = tn.window_steps(tn.Candidate(steps_per_execution=8, fused_steps=4), 48)
    assert warmup == 32 and total % 32 == 0 and total - 2 * 32 >= 3 * 32
    # A call as long as the window: its first call is warm-up enough.
    warmup, total = tn.window_steps(tn.Candidate(steps_per_execution=8, fused_steps=32), 48, 1)
    assert warmup == 0 and total == 2 * 256


def _task(keras, features=6):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, features)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    return train.Task(
        name="tiny",
        build_model=lambda: keras.Sequential(
            [
                keras.Input((features,)),
                keras.layers.Dense(8, activation="relu"),
                keras.layers.Dense(2),
            ]
        ),
        train=(x, y),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        num_classes=2,
    )


def test_model_signature_ignores_layer_names_but_not_the_architecture(keras):
    a, b = _task(keras).build_model(), _task(keras).build_model()  # dense_N vs dense_N+2
    assert [layer.name for layer in a.layers] != [layer.name for layer in b.layers]
    assert tn.model_signature(a) == tn.model_signature(b)
    assert tn.model_signature(a) != tn.model_signature(_task(keras, features=7).build_model())


def test_cache_hit_miss_and_invalidation_when_tensorflow_or_the_backend_changes(
    keras, tmp_path, monkeypatch
):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    measured = []

    def fake_measure(self, candidate, calls=3):
        measured.append(candidate)
        return fake_rates(candidate)

    monkeypatch.setattr(tn.TaskMeasure, "__call__", fake_measure)
    config = TrainConfig(batch_size=16, report_dir=None)
    space = tn.Space(jit_compile=(False, True), steps_per_execution=(1, 8), fused_steps=(1,))
    first = tn.tune(_task(keras), config, space=space, progress=lambda line: None)
    assert not first.cache_hit and measured and first.best.steps_per_execution == 8
    n = len(measured)
    again = tn.tune(_task(keras), config, space=space, progress=lambda line: None)
    assert again.cache_hit and len(measured) == n and again.best == first.best
    stored = json.loads((tmp_path / tn.CACHE_FILE).read_text())
    assert stored[first.key]["facts"]["machine"]["tensorflow"]
    # Another model is another key.
    other = tn.tune(_task(keras, features=7), config, space=space, progress=lambda line: None)
    assert not other.cache_hit and other.key != first.key
    # A new TensorFlow version invalidates: the same model and input miss the cache.
    facts = tn._machine_facts()
    monkeypatch.setattr(tn, "_machine_facts", lambda: {**facts, "tensorflow": "9.99"})
    upgraded = tn.tune(_task(keras), config, space=space, progress=lambda line: None)
    assert not upgraded.cache_hit and upgraded.key != first.key
    monkeypatch.setattr(tn, "_machine_facts", lambda: facts)
    assert tn.tune(_task(keras), config, space=space, progress=lambda line: None).cache_hit
    # Another Keras backend is another key: one backend's winner is no answer for another.
    other_backend = "jax" if stored[first.key]["facts"]["backend"] != "jax" else "tensorflow"
    monkeypatch.setattr(tn.backend, "name", lambda: other_backend)
    moved = tn.tune(_task(keras), config, space=space, progress=lambda line: None)
    assert not moved.cache_hit and moved.key != first.key


def test_kept_finalists_are_measured_again_without_a_rebuild_or_a_retrace(keras, monkeypatch):
    task = _task(keras)
    built, traces = [], []
    build_model = task.build_model

    def counted():
        model = build_model()
        built.append(model)
        original = model.train_step

        def counting_train_step(data):
            traces.append(1)  # Python runs this only while tracing
            return original(data)

        model.train_step = counting_train_step
        return model

    task.build_model = counted
    measure = tn.TaskMeasure(task, TrainConfig(batch_size=16, report_dir=None), 12, keep=1)
    assert measure.task.validation is None  # a window times training steps only
    defaults, loop = tn.Candidate(), tn.Candidate(steps_per_execution=4)
    fused = tn.Candidate(fused_steps=2)
    for c in (defaults, loop, fused):
        assert measure(c) > 0
    assert len(built) == 3
    fastest = loop if measure.rates[loop] >= measure.rates[fused] else fused
    assert set(measure.live) == {defaults, fastest}  # the first, and the `keep` fastest
    model = measure.live[fastest][0]
    steps_before, traced = int(model.optimizer.iterations.numpy()), len(traces)
    assert measure(fastest) > 0 and measure(defaults) > 0
    assert len(built) == 3 and len(traces) == traced  # no rebuild, no retrace
    assert int(model.optimizer.iterations.numpy()) > steps_before  # the same model trained on
    measure.close()
    assert not measure.live


def test_a_candidate_that_cannot_win_is_stopped_with_the_rate_it_showed(keras, monkeypatch):
    """Once a run has taken HOPELESS times what the best so far needed for its whole window
    (here at once: the floor off, and a best no real run comes near), it stops after its
    second call and keeps the rate it showed after the first (the compile)."""
    monkeypatch.setattr(tn, "HOPELESS_FLOOR_S", 0.0)
    config = TrainConfig(batch_size=16, report_dir=None)
    slow = tn.Candidate(steps_per_execution=2)

    first = tn.TaskMeasure(_task(keras), config, 40, keep=1)
    assert first(slow) > 0  # the first candidate has no best to lose to: its whole window
    _warmup, total = tn.window_steps(slow, 40)
    assert int(first.live[slow][0].optimizer.iterations.numpy()) == total
    first.close()

    measure = tn.TaskMeasure(_task(keras), config, 400, keep=1)
    unbeatable = tn.Candidate(fused_steps=8)
    measure.first, measure.rates[unbeatable] = unbeatable, 1e12
    rate = measure(slow)
    assert 0 < rate < 1e9
    model = measure.live[slow][0]  # kept (the fastest really measured), so its steps show
    assert int(model.optimizer.iterations.numpy()) == 4  # 2 calls of 2 steps, not 400+
    measure.close()


def test_a_run_past_the_deadline_stops_after_its_current_call(keras):
    config = TrainConfig(batch_size=16, report_dir=None)
    c = tn.Candidate(steps_per_execution=2)
    measure = tn.TaskMeasure(_task(keras), config, 400, keep=1)
    measure.deadline = 0.0  # long past: its first call ends after it
    with pytest.raises(RuntimeError, match="budget ended in its first call"):
        measure(c)
    measure.deadline = None
    assert measure(c) > 0  # no deadline: the whole window
    measure.close()


def test_a_real_tiny_search_on_the_cpu(keras, tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    lines = []
    config = TrainConfig(batch_size=16, report_dir=None, device="cpu")
    space = tn.Space(jit_compile=(False, True), steps_per_execution=(1, 4), fused_steps=(1, 2))
    result = tn.tune(_task(keras), config, space=space, steps=12, progress=lines.append)
    assert result.trials[0].candidate == tn.Candidate()
    assert all(t.examples_per_sec and t.examples_per_sec > 0 for t in result.trials)
    assert result.best_rate >= result.defaults_rate  # never slower on the measured window
    runs = len(result.trials) + sum(len(r) for r in result.confirm_rounds)
    assert len(lines) == runs and "examples/s" in lines[0]
    if result.best != tn.Candidate():  # a pick is confirmed head to head, never one window
        assert result.confirm_rounds and "head to head" in result.why
    tuned, cached = tn.autotune(_task(keras), config, space=space, progress=lines.append)
    assert cached.cache_hit and tuned.fused_steps == result.best.fused_steps
    assert "| settings | examples/s |" in result.table() and "--precision=" in result.best.flags()


def test_tune_cli_then_a_recipe_with_autotune_reads_the_cache(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TOOLKIT_CACHE_DIR": str(tmp_path)}

    def python(*args):
        return subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, timeout=300, env=env
        )

    out = python("-m", "toolkit", "tune", "--recipe", "mlp", "--tune_budget=8")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "tune: recipe mlp, batch 32 (searched in" in out.stdout
    assert "best: --precision=" in out.stdout
    reports = tmp_path / "runs"
    out = python("-m", "recipes.mlp", "--smoke", "--autotune", f"--report_dir={reports}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "cached result" in out.stderr and "autotune: --precision=" in out.stdout
    (run_dir,) = list(reports.iterdir())
    tuned = json.loads((run_dir / "report.json").read_text())["tune"]
    assert tuned["cache_hit"] is True and tuned["best_label"]
    bad = python("-m", "toolkit", "tune", "--recipe", "mlp", "--dataset=nope")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: ")


def test_tune_your_own_compiled_model_on_your_pipeline(keras, tmp_path, monkeypatch):
    import tensorflow as tf

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(2)])
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(2)
    before = [w.copy() for w in model.get_weights()]
    space = tn.Space(jit_compile=(False,), steps_per_execution=(1, 4), fused_steps=(1,))
    result = tn.tune(model, ds, space=space, steps=16, progress=lambda line: None)
    assert [t.candidate.steps_per_execution for t in result.trials] == [1, 4]
    assert all(t.examples_per_sec for t in result.trials)
    assert result.best.compile_kwargs()["steps_per_execution"] in (1, 4)
    # The model is as it was: its compile settings, weights and optimizer state.
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    assert int(model.optimizer.iterations.numpy()) == 0
    assert train.steps_per_execution(model) == 1
    history = model.fit(ds, epochs=1, verbose=0)  # still compiled with its own loss and metrics
    assert "accuracy" in history.history
    again = tn.tune(model, ds, space=space, steps=16, progress=lambda line: None)
    assert again.cache_hit and again.best == result.best


@pytest.mark.parametrize(
    ("name", "jit", "loops", "fused"),
    [("tensorflow", (False, True), (1, 8, 32), (1, 8, 32)),
     ("jax", (True,), (1, 8, 32), (1, 8, 32)), ("torch", (False,), (1,), (1,))],
)  # fmt: skip
def test_the_search_space_is_what_the_backend_runs(monkeypatch, name, jit, loops, fused):
    from toolkit import backend
    from toolkit.devices import DeviceInfo

    monkeypatch.setattr(backend, "name", lambda: name)
    space = tn.default_space(DeviceInfo("cpu", "cpu", 0, "a CPU"), step_s=0.001)
    assert space.jit_compile == jit and space.defaults().jit_compile is jit[0]
    assert space.steps_per_execution == loops and space.fused_steps == fused
