"""The settings search: bookkeeping with injected measurements (budget, failures, the
never-slower rule, the cache and its invalidation), then one real tiny search."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import pathlib
import re
import subprocess
import sys
import types

import numpy as np
import pytest

from tests.helpers import fake_rates
from toolkit.core.compat import steps_per_execution
from toolkit.runner import train
from toolkit.runner.config import TrainConfig
from toolkit.search import engine as en
from toolkit.search import tune as tn
from toolkit.search import workload as wl

ROOT = str(pathlib.Path(__file__).resolve().parent.parent)


def test_space_follows_the_step_time(keras):
    from toolkit import devices

    cpu = devices.select("cpu")
    assert tn.default_space(cpu, step_s=0.0005).fused_steps == (1, 8, 32)
    assert tn.default_space(cpu, step_s=0.02).steps_per_execution == (1, 4)
    assert tn.default_space(cpu, step_s=0.2).fused_steps == (1,)
    assert tn.default_space(cpu, batch_sizes=(64,)).batch_size == (None, 64)


def test_each_backend_searches_the_loops_it_runs_with_this_keras():
    """Steps per execution and fused steps, per backend, Keras and input: tune's space knows
    no built model yet, so JAX keeps both (where fused steps step aside for a built model:
    tests/test_fused_unroll.py); PyTorch searches steps per execution where its Keras takes
    it, never fused steps."""
    from toolkit.backend import _torch
    from toolkit.runner.config import SEARCHED_SETTINGS, SearchContext

    rule = dict(SEARCHED_SETTINGS)
    spe, fused = (rule[name].values for name in ("steps_per_execution", "fused_steps"))

    def ctx(backend: str, loader: str = "") -> SearchContext:
        return SearchContext(None, 0.0005, backend, (), loader)

    assert spe(ctx("tensorflow")) == fused(ctx("tensorflow")) == (1, 8, 32)
    assert spe(ctx("jax", "grain")) == fused(ctx("jax", "grain")) == (1, 8, 32)
    assert spe(ctx("jax", "tf_data")) == (1, 8, 32)
    assert fused(ctx("jax", "tf_data")) == (1, 8, 32)
    assert spe(ctx("torch")) == ((1, 8, 32) if _torch.keras_loops_steps() else (1,))
    assert fused(ctx("torch")) == (1,)
    assert spe(SearchContext(None, 0.2, "jax", (), "tf_data")) == (1,)  # a slow step: none


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


class _measure(wl.TaskWorkload):
    """tune's measure of a Task: its data made once, `keep` finalists kept built; called with a
    candidate, the rate of a window of at least `steps` steps."""

    def __init__(self, task, config, steps, keep=0):
        super().__init__(task, config, resident=True, keep=keep)
        self.steps = steps

    def __call__(self, candidate, calls=3):
        return self.rate(candidate, self.steps, calls)


def test_model_signature_ignores_layer_names_but_not_the_architecture(keras):
    a, b = _task(keras).build_model(), _task(keras).build_model()  # dense_N vs dense_N+2
    assert [layer.name for layer in a.layers] != [layer.name for layer in b.layers]
    assert wl.model_signature(a) == wl.model_signature(b)
    assert wl.model_signature(a) != wl.model_signature(_task(keras, features=7).build_model())


def test_cache_hit_miss_and_invalidation_when_tensorflow_or_the_backend_changes(
    keras, tmp_path, monkeypatch
):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    measured = []

    def fake_measure(self, candidate, steps=48, calls=3):
        measured.append(candidate)
        return fake_rates(candidate)

    monkeypatch.setattr(wl.TaskWorkload, "rate", fake_measure)
    config = TrainConfig(batch_size=16, epochs=10, report_dir=None)
    space = en.Space(jit_compile=(False, True), steps_per_execution=(1, 8), fused_steps=(1,))
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
    # A cached pick is applied only where its run times steps: one epoch of 16 steps cannot
    # time 8 a call, so the same key is searched again for that run (issue 44, item 4).
    lines = []
    one_epoch = dataclasses.replace(config, epochs=1)
    short = tn.tune(_task(keras), one_epoch, space=space, progress=lines.append)
    assert not short.cache_hit and short.best.steps_per_execution == 1
    assert any("does not fit this run" in line for line in lines)


def test_a_cached_search_answers_only_a_search_no_more_thorough(keras, tmp_path, monkeypatch):
    """A search that ran out of a 10 s budget does not answer a 30 s one (it searches again
    and says why); it does answer a smaller budget; the progress lines count one budget."""
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(wl.TaskWorkload, "rate", lambda self, c, steps=48, calls=3: fake_rates(c))
    config = TrainConfig(batch_size=16, epochs=10, report_dir=None)
    space = en.Space(jit_compile=(False, True), steps_per_execution=(1, 8), fused_steps=(1,))
    lines: list[str] = []
    first = tn.tune(_task(keras), config, space=space, budget_s=10, progress=lines.append)
    stages = [line.split("]")[0] for line in lines if line.startswith("[") and " s]" in line]
    assert stages and all(s.endswith("/10 s") for s in stages), lines
    path = tmp_path / tn.CACHE_FILE
    stored = json.loads(path.read_text())
    assert stored[first.key]["result"]["budget_s"] == 10
    stored[first.key]["result"]["budget_exhausted"] = True  # as a short budget ends
    path.write_text(json.dumps(stored))
    lines.clear()
    deeper = tn.tune(_task(keras), config, space=space, budget_s=30, progress=lines.append)
    assert not deeper.cache_hit
    assert "tune: the cached search ran out of 10 s: searching again" in lines
    assert tn.tune(_task(keras), config, space=space, budget_s=20, progress=print).cache_hit
    assert tn.tune(_task(keras), config, space=space, budget_s=5, progress=print).cache_hit


def test_refresh_replaces_the_cached_answer_and_an_unconfirmed_pick_answers_no_confirming_call(
    keras, tmp_path, monkeypatch
):
    """``tune --refresh`` searched again but kept the stale entry, which the next plain call
    served; and a pick an in-process ``tune(model, data)`` cached (its own rounds, never a
    fresh process) answered a call that confirms in fresh processes."""
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(wl.TaskWorkload, "rate", lambda self, c, steps=48, calls=3: fake_rates(c))
    config = TrainConfig(batch_size=16, epochs=10, report_dir=None)
    space = en.Space(jit_compile=(False, True), steps_per_execution=(1, 8), fused_steps=(1,))
    first = tn.tune(_task(keras), config, space=space, budget_s=10, progress=print)
    path = tmp_path / tn.CACHE_FILE
    stored = json.loads(path.read_text())
    stored[first.key]["result"]["why"] = "stale"
    path.write_text(json.dumps(stored))
    again = tn.tune(_task(keras), config, space=space, budget_s=10, refresh=True, progress=print)
    assert not again.cache_hit
    assert json.loads(path.read_text())[first.key]["result"]["why"] != "stale"  # replaced
    assert first.picked and not first.gain.trusted  # measured in this process only
    run = object.__new__(tn._Tuning)
    run.key, run.shape, run.budget_s, run.report = first.key, None, 10.0, print
    assert run.cached(confirms=False)[0] is not None
    hit, said = run.cached(confirms=True)
    assert hit is None and said == [
        "tune: the cached pick was not confirmed in fresh processes: searching"
    ]


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
    measure = _measure(task, TrainConfig(batch_size=16, report_dir=None), 12, keep=1)
    assert measure.task.validation is None  # a window times training steps only
    defaults, loop = en.Candidate(), en.Candidate(steps_per_execution=4)
    fused = en.Candidate(fused_steps=2)
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
    # The defaults' compile, measured first (with the process's own first one), again: a new
    # build traced anew, kept where it reads less; with no time left, not run
    import time

    first = measure.compile_s(defaults)
    assert first is not None
    assert measure.compile_again(defaults, until=time.perf_counter()) == first
    assert len(built) == 3
    again = measure.compile_again(defaults, until=time.perf_counter() + 600)
    assert len(built) == 4 and len(traces) > traced and again == min(first, again)
    assert measure.compile_s(defaults) == again
    measure.close()
    assert not measure.live


def test_the_defaults_compile_measured_again_is_said_with_the_first():
    from toolkit.search import _tune_screen as screen

    assert screen.compiled_again(6.9, 4.2) == (
        "the defaults' compile 4.20 s, measured again after this process's first (6.90 s, "
        "which held the process's own start)"
    )
    assert screen.compiled_again(6.9, 6.9) == screen.compiled_again(None, 1.0) == ""
    # measured again where another wins, or where the compile column shows another cheaper
    from toolkit.search.tune import compile_in_question

    assert compile_in_question(6.5, 3.4, [3.4])  # a winner
    assert compile_in_question(6.5, None, [3.4, None])  # no winner, spe=4's reads less
    assert not compile_in_question(6.5, None, [7.0, None])  # none reads less: it stands
    assert not compile_in_question(None, 3.4, [3.4])  # nothing measured to question


def test_a_candidate_that_cannot_win_is_stopped_with_the_rate_it_showed(keras, monkeypatch):
    """Once a run has taken HOPELESS times what the best so far needed for its whole window
    (here at once: the floor off, and a best no real run comes near), it stops after its
    second call and keeps the rate it showed after the first (the compile)."""
    monkeypatch.setattr(wl, "HOPELESS_FLOOR_S", 0.0)
    config = TrainConfig(batch_size=16, report_dir=None)
    slow = en.Candidate(steps_per_execution=2)

    first = _measure(_task(keras), config, 40, keep=1)
    assert first(slow) > 0  # the first candidate has no best to lose to: its whole window
    _warmup, total = en.window_steps(slow, 40)
    assert int(first.live[slow][0].optimizer.iterations.numpy()) == total
    first.close()

    measure = _measure(_task(keras), config, 400, keep=1)
    unbeatable = en.Candidate(fused_steps=8)
    measure.first, measure.rates[unbeatable] = unbeatable, 1e12
    rate = measure(slow)
    assert 0 < rate < 1e9
    model = measure.live[slow][0]  # kept (the fastest really measured), so its steps show
    assert int(model.optimizer.iterations.numpy()) == 4  # 2 calls of 2 steps, not 400+
    measure.close()


def test_a_run_past_the_deadline_stops_after_its_current_call(keras):
    config = TrainConfig(batch_size=16, report_dir=None)
    c = en.Candidate(steps_per_execution=2)
    measure = _measure(_task(keras), config, 400, keep=1)
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
    space = en.Space(jit_compile=(False, True), steps_per_execution=(1, 4), fused_steps=(1, 2))
    result = tn.tune(_task(keras), config, space=space, steps=12, progress=lines.append)
    assert result.trials[0].candidate == en.Candidate()
    assert all(t.examples_per_sec and t.examples_per_sec > 0 for t in result.trials)
    assert result.best_rate >= result.defaults_rate  # never slower on the measured window
    runs = len(result.trials) + sum(len(r) for r in result.confirm_rounds)
    assert len(lines) == runs and "examples/s" in lines[0]
    if result.best != en.Candidate():  # a pick is confirmed head to head, never one window
        assert result.confirm_rounds and "head to head" in result.why
    tuned, cached = tn.autotune(_task(keras), config, space=space, progress=lines.append)
    assert cached.cache_hit and tuned.fused_steps == result.best.fused_steps
    assert "| settings | examples/s |" in result.markdown()
    assert "--precision=" in result.best.flags()
    # Each candidate's compile is measured, and a recipe's run has a length: the whole run
    # ranks a pick, or its words say why not.
    assert all(t.compile_s is not None and t.compile_s >= 0 for t in result.trials)
    assert "| compile |" in result.markdown()
    if result.best != en.Candidate():
        assert result.run is not None and "whole run of" in result.why


@pytest.mark.long
def test_tune_cli_then_a_recipe_with_autotune_reads_the_cache(tmp_path):
    """`keras-perf tune` on a recipe, then the recipe with ``--autotune`` on the same budget:
    the second reads the first's pick from the cache and says so in its report.

    45-90 s on 2 cores, by what it checks: the CLI's whole way, an 8 s search, then its pick
    confirmed in paired rounds of fresh processes (each importing TensorFlow, as many rounds
    as this machine's noise asks for), then the recipe's own process."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TOOLKIT_CACHE_DIR": str(tmp_path)}

    def python(*args):
        return subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, timeout=900, env=env
        )  # a pick's fresh check: up to 5 rounds of two runs of 6 s each, on a busy machine

    # Both for a smoke run (8 steps): the pick must be one that run can time.
    out = python("-m", "toolkit", "tune", "--recipe", "mlp", "--smoke", "--tune_budget=8")
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(
        r"^tune: recipe mlp, batch 32 \(\d+\.\d s(: a search of 8 s, then up to "
        r"\d+ s confirming| of a 8 s budget(: all \d+ candidates tried|: the defaults alone)?)\)$",
        out.stdout,
        re.M,
    ), out.stdout
    assert "best: --precision=" in out.stdout
    reports = tmp_path / "runs"
    # The same budget: a search that ran out of 8 s answers a search of 8 s, not of 120 s.
    out = python(
        "-m", "recipes.mlp", "--smoke", "--autotune", "--tune_budget=8",
        f"--report_dir={reports}",
    )  # fmt: skip
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
    space = en.Space(jit_compile=(False,), steps_per_execution=(1, 4), fused_steps=(1,))
    # Your fit runs 10 epochs of the pipeline's 8 batches (one epoch: 4 steps a call would
    # leave it no timed call, so it is not searched: item 4 of issue 44).
    yours = TrainConfig(epochs=10)
    one_epoch = tn.tune(model, ds, space=space, steps=16, use_cache=False, progress=print)
    assert [t.candidate.steps_per_execution for t in one_epoch.trials] == [1]
    result = tn.tune(model, ds, config=yours, space=space, steps=16, progress=lambda line: None)
    assert [t.candidate.steps_per_execution for t in result.trials] == [1, 4]
    assert all(t.examples_per_sec for t in result.trials)
    assert result.best.compile_kwargs()["steps_per_execution"] in (1, 4)
    # The model is as it was: its compile settings, weights and optimizer state.
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    assert int(model.optimizer.iterations.numpy()) == 0
    assert steps_per_execution(model) == 1
    history = model.fit(ds, epochs=1, verbose=0)  # still compiled with its own loss and metrics
    assert "accuracy" in history.history
    again = tn.tune(model, ds, config=yours, space=space, steps=16, progress=lambda line: None)
    assert again.cache_hit and again.best == result.best


def _gan(keras):
    """A conditional-GAN-style model as Keras's examples write it: subclassed, two sub-models,
    its own ``compile`` (two optimizers) and ``train_step``; the outer model is never built."""
    import tensorflow as tf

    class GAN(keras.Model):
        def __init__(self):
            super().__init__()
            self.generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)])
            self.discriminator = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])

        def compile(self, d_optimizer, g_optimizer, loss_fn):
            super().compile()
            self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

        def train_step(self, real):
            batch = tf.shape(real)[0]
            noise = tf.random.normal((batch, 4))
            with tf.GradientTape() as tape:
                logits = self.discriminator(tf.concat([self.generator(noise), real], 0))
                labels = tf.concat([tf.zeros((batch, 1)), tf.ones((batch, 1))], 0)
                d_loss = self.loss_fn(labels, logits)
            weights = self.discriminator.trainable_weights
            self.d_optimizer.apply_gradients(
                zip(tape.gradient(d_loss, weights), weights, strict=True)
            )
            with tf.GradientTape() as tape:
                fake = self.discriminator(self.generator(noise))
                g_loss = self.loss_fn(tf.ones((batch, 1)), fake)
            weights = self.generator.trainable_weights
            self.g_optimizer.apply_gradients(
                zip(tape.gradient(g_loss, weights), weights, strict=True)
            )
            return {"d_loss": d_loss, "g_loss": g_loss}

    gan = GAN()
    gan.compile(
        keras.optimizers.SGD(0.01),
        keras.optimizers.SGD(0.01),
        keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return gan


def test_tune_a_subclassed_model_with_its_own_compile_and_train_step(keras, tmp_path, monkeypatch):
    """Nothing assumes a built model or Keras's own compile: its parameters are counted from
    its variables, and each candidate's settings are set in place (its compile takes two
    optimizers nobody else can pass), then its own put back."""
    import tensorflow as tf

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    gan = _gan(keras)
    with pytest.raises(ValueError, match="isn't built"):
        gan.count_params()  # what the cache's facts used to call
    x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices(x).batch(32)
    with wl.workload(gan, ds) as work:
        assert work.cache_facts()["params"] == (4 * 8 + 8) + (8 + 1)
    space = en.Space(jit_compile=(False,), steps_per_execution=(1, 4), fused_steps=(1,))
    result = tn.tune(
        gan, ds, config=TrainConfig(epochs=5), space=space, steps=16, progress=lambda line: None
    )
    assert [t.candidate.steps_per_execution for t in result.trials] == [1, 4]
    assert all(t.error is None and t.examples_per_sec for t in result.trials)
    assert steps_per_execution(gan) == 1 and gan.jit_compile is False  # its own, back
    assert {"d_loss", "g_loss"} <= set(gan.fit(ds, epochs=1, verbose=0).history)
    # Applied without its compile (which takes none of the settings), the next fit runs them.
    with pytest.raises(TypeError):
        gan.compile(**en.Candidate(steps_per_execution=4).compile_kwargs())
    en.Candidate(jit_compile=True, steps_per_execution=4).apply(gan)
    assert steps_per_execution(gan) == 4 and gan.jit_compile is True
    assert {"d_loss", "g_loss"} <= set(gan.fit(ds, epochs=1, verbose=0).history)


def test_an_uncompiled_model_is_one_line_before_anything_runs(keras):
    import tensorflow as tf

    from toolkit.runner.task import SetupError

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    ds = tf.data.Dataset.from_tensor_slices(np.zeros((8, 8), "float32")).batch(4)
    with pytest.raises(SetupError, match=r"compile Sequential first \(model.compile\)"):
        wl.workload(model, ds)


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


@pytest.mark.parametrize(
    ("name", "step_s", "said"),
    [("jax", 0.2, ["XLA is not searched on jax: it compiles every step with it",
                   "no loop is searched for a 200 ms step (loops cut a per-step overhead that "
                   "counts under 50 ms)"]),
     ("torch", 0.001, ["jit_compile is not searched on torch: its compile outlasts a tune "
                       "budget", "steps_per_execution does not run on torch with this input",
                       "fused_steps does not run on torch with this input"]),
     ("tensorflow", 0.001, [])],
)  # fmt: skip
def test_a_search_cut_by_design_says_why_in_one_clause(monkeypatch, name, step_s, said):
    """What the settings table's rules leave at the default alone, each with its reason;
    a search that measured only the defaults says them (on your compiled model, the settings
    only a rebuild changes too), never "only the defaults" without a why."""
    from toolkit import backend
    from toolkit.devices import DeviceInfo
    from toolkit.search import rounds

    monkeypatch.setattr(backend, "name", lambda: name)
    space = tn.default_space(DeviceInfo("cpu", "cpu", 0, "a CPU"), step_s=step_s)
    assert list(space.cut) == said
    defaults = space.defaults()
    _, _, why, _ = rounds.confirm(
        lambda c: 1.0, [en.Trial(defaults, 100.0, 1.0)], budget_s=10.0, cut=space.cut
    )
    assert why == "only the defaults were measured" + (f": {'; '.join(said)}" if said else "")
    precise = dataclasses.replace(space, precision=("float32", "mixed_bfloat16"), fused_steps=(1,))
    yours = types.SimpleNamespace(model=None)  # a model whose layers rule nothing out
    cut = wl.ModelWorkload.space(yours, precise, defaults).cut  # your compiled model's space
    assert cut[-1] == "precision: not searched on a compiled model (a rebuild sets it)"


def _tune_on_grain() -> dict:
    """Tunes a tiny compiled model on Grain pipelines as your data (this process's backend):
    the toolkit's endless one (an epoch's ``len()``) and a plain finite Grain dataset of five
    batches, whose windows outlast it (read again as fit reads its next epoch); the batch size
    of each, and of a plain Grain ``IterDataset``, inferred. Returns what the test asserts."""
    import grain

    from toolkit import backend, tune
    from toolkit.core import compat
    from toolkit.data import infer_batch_size, pipeline

    keras = compat.keras()

    def model():
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(2)])
        m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(True))
        return m

    rng = np.random.default_rng(0)
    x = rng.normal(size=(160, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    ours = pipeline((x, y), 32, loader="grain", repeat=True)
    plain = grain.MapDataset.source(list(zip(x, y, strict=True))).shuffle(seed=0)
    plain = plain.map(lambda e: (e[0], e[1])).batch(32)  # 5 batches, then it ends
    jit = (backend.jits_by_default(),)
    space = en.Space(jit_compile=jit, steps_per_execution=(1, 4), fused_steps=(1,))
    quiet = {"steps": 8, "use_cache": False, "progress": lambda line: None}
    endless = tune(model(), ours, config=TrainConfig(epochs=10), space=space, **quiet)
    finite = tune(model(), plain, config=TrainConfig(epochs=10), space=space, **quiet)
    one_epoch = tune(model(), plain, space=space, **quiet)  # 4 steps a call: no timed call

    def said(result):
        return {
            "batch": result.batch_size,
            "loops": [t.candidate.steps_per_execution for t in result.trials],
            "rates": [t.examples_per_sec for t in result.trials],
            "errors": [t.error for t in result.trials],
            "best": result.best.compile_kwargs()["steps_per_execution"],
        }

    return {
        "inferred": [infer_batch_size(d) for d in (ours, plain, plain.to_iter_dataset())],
        "endless": said(endless),
        "finite": said(finite),
        "one_epoch": said(one_epoch),
    }


@pytest.mark.long
def test_tune_your_model_on_a_grain_pipeline_on_this_backend_and_on_jax(keras, tmp_path):
    """Keras reads Grain on every backend: the search runs here and, on another backend than
    JAX, on JAX in a fresh process (the backend is fixed once Keras is imported)."""
    pytest.importorskip("grain")
    from tests.helpers import run_python
    from toolkit import backend
    from toolkit.core import compat

    if compat.keras_flavor() != "keras3":
        pytest.skip("tf_keras's fit does not read Grain datasets")
    results = {backend.name(): _tune_on_grain()}
    if backend.name() != "jax":
        out = run_python(
            "import os, json\nos.environ['KERAS_BACKEND'] = 'jax'\n"
            f"os.environ['TOOLKIT_CACHE_DIR'] = {str(tmp_path)!r}\n"
            "from tests.test_tune import _tune_on_grain\n"
            "print('RESULT', json.dumps(_tune_on_grain()))\n"
        )
        assert out.returncode == 0, out.stderr[-3000:]
        line = next(s for s in out.stdout.splitlines() if s.startswith("RESULT "))
        results["jax"] = json.loads(line.removeprefix("RESULT "))
    for name, got in results.items():
        assert got["inferred"] == [32, 32, 32], (name, got)
        for run in ("endless", "finite"):  # both loops timed over many epochs: an answer
            assert got[run]["loops"] == [1, 4] and got[run]["batch"] == 32, (name, got)
            assert all(got[run]["rates"]) and not any(got[run]["errors"]), (name, got)
            assert got[run]["best"] in (1, 4)
        # One epoch of 5 batches times no call of 4 steps: the Grain dataset's len() says so.
        assert got["one_epoch"]["loops"] == [1] and got["one_epoch"]["rates"][0], (name, got)


def test_a_pick_that_compiles_longer_than_the_run_pays_back_hands_the_defaults_back():
    """The whole run ranks where its length is known: compile, plus steps at each rate."""
    from toolkit.search.engine import Candidate, Trial
    from toolkit.search.tune import whole_run_choice

    defaults = Candidate(precision="float32", jit_compile=False, steps_per_execution=1)
    xla = Candidate(precision="float32", jit_compile=True, steps_per_execution=1)
    trials = [Trial(defaults, 1000.0, 1.0, compile_s=0.5), Trial(xla, 2000.0, 1.0, compile_s=9.5)]
    # 9 s more compile; 0.5 ms less an example: it pays for itself after 18,000 examples,
    # 563 steps of 32. A run of 100 steps is too short: the defaults come back.
    best, words, run = whole_run_choice(trials, defaults, xla, 100, 32)
    assert best == defaults and run.break_even_steps == 563 and not run.pick_wins
    assert "pays for itself after 563 steps: the defaults finish this run first" in words
    assert run.pick_s == pytest.approx(9.5 + 3200 / 2000)
    assert all(len(line) <= 80 for line in words.split("\n")), words  # short lines
    assert en.WholeRun.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    # 2,000 steps: the pick wins the run, and says where its compile paid off.
    best, words, run = whole_run_choice(trials, defaults, xla, 2000, 32)
    assert best == xla and run.pick_wins
    assert words.startswith("its compile costs 9.00 s more and pays for itself after 563 steps")
    # Unknown length, or an unmeasured compile: the steady state ranks, and says so.
    best, words, run = whole_run_choice(trials, defaults, xla, None, 32)
    assert best == xla and run is None and "the run's length is unknown" in words
    unmeasured = [Trial(defaults, 1000.0, 1.0), trials[1]]
    assert "not measured" in whole_run_choice(unmeasured, defaults, xla, 100, 32)[1]


BUILD = """
import numpy as np
import keras


def make():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    x = np.zeros((64, 4), "float32")
    return model, (x, np.zeros((64, 2), "float32"))
"""


def test_tune_of_your_build_function_is_confirmed_where_fresh_processes_can_call_it(
    tmp_path, monkeypatch
):
    """``tune(build)``: the function is called here, and fresh processes call it again by
    name; one they cannot import (nested, ``__main__``) leaves the pick unconfirmed, said why.
    A function that does not return (model, data) is one clear error."""
    (tmp_path / "mybuild.py").write_text(BUILD)
    monkeypatch.syspath_prepend(str(tmp_path))
    import mybuild

    model, data, fresh, why = tn._built(mybuild.make, None, None)
    assert hasattr(model, "fit") and isinstance(data, tuple) and why is None
    assert fresh.model_fn == "mybuild:make" and fresh.recipe is None

    def nested():
        return mybuild.make()

    model, data, fresh, why = tn._built(nested, None, None)
    assert fresh is None and "define a function at the top of a module" in why
    # A model with its data, or a fresh target named, is left as it is.
    assert tn._built(model, data, None) == (model, data, None, None)
    named = tn._fresh_target("mybuild:make")
    assert tn._built(nested, None, named)[2] is named
    with pytest.raises(train.SetupError, match=r"must return \(compiled model, data\), got list"):
        tn._built(lambda: [1, 2], None, None)


FIND_IT = """
import sys
from toolkit.search.standings import ChooserError, function_spec

def build():
    pass

try:
    print(function_spec(build))
except ChooserError as e:
    print("refused:", e)
"""


@pytest.mark.parametrize("how", ["script", "module", "-c"])
def test_function_spec_finds_a_build_in_main_as_a_fresh_process_can(tmp_path, how):
    """A ``build`` in ``__main__``: run as a script, the fresh processes import the script by
    its path; run with ``python -m``, by its module's name; typed into ``python -c`` (or an
    interactive session), nothing can find it: refused with the one-line fix."""
    (tmp_path / "mytrain.py").write_text(FIND_IT)
    argv = {"script": [str(tmp_path / "mytrain.py")], "module": ["-m", "mytrain"],
            "-c": ["-c", FIND_IT]}[how]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True,
                         env=env, timeout=120)  # fmt: skip
    said = out.stdout.strip()
    assert out.returncode == 0, out.stderr[-2000:]
    expected = {"script": f"{tmp_path / 'mytrain.py'}:build", "module": "mytrain:build",
                "-c": "refused: fresh processes cannot import build: it was defined in an "
                "interactive session or python -c; move it to a module (mytrain.py) and run "
                "that"}[how]  # fmt: skip
    assert said == expected


def _readme_example() -> str:
    """The README's ``mytrain.py``, exactly as written there."""
    text = (pathlib.Path(ROOT) / "README.md").read_text(encoding="utf-8")
    start = text.index("```python\n# mytrain.py") + len("```python\n")
    return text[start : text.index("```", start)]


@pytest.mark.long
def test_the_readme_example_run_as_a_script_is_claimed_from_fresh_processes(tmp_path):
    """The README's ``mytrain.py`` run as written (``python mytrain.py``: ``build`` lives in
    ``__main__``): the fresh processes import the script by its path, its main block not
    run there, so the line it prints is a gain measured in fresh processes, not this
    process's unconfirmed one.

    45-90 s on 2 cores, by what it checks: the README's code as written, whose search has a
    30 s budget, then its pick confirmed in fresh processes, each importing TensorFlow."""
    (tmp_path / "mytrain.py").write_text(_readme_example(), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": ROOT, "TOOLKIT_CACHE_DIR": str(tmp_path / "cache"),
           "TF_CPP_MIN_LOG_LEVEL": "2"}  # fmt: skip
    out = subprocess.run([sys.executable, "mytrain.py"], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    claim = out.stdout.strip().splitlines()[-1]
    assert "in fresh processes" in claim, (claim, out.stderr[-3000:])
    assert "this process" not in claim and "[fresh 1 |" in out.stderr, out.stderr[-3000:]


def test_what_the_budget_left_untried_is_said_with_the_budget_that_tries_it_and_kept():
    defaults = en.Candidate(precision="float32", jit_compile=False, steps_per_execution=1)
    xla = dataclasses.replace(defaults, jit_compile=True, steps_per_execution=4)
    untried = [en.Untried(xla, needs_s=14.2, compile_s=9.1, spent_s=21.0, reserve_s=9.0)]
    words = tn.untried_words(untried, defaults)
    assert words == (
        "not tried: jit_compile=True (XLA) with steps_per_execution=4 (its compile needs about "
        "9 s; a 50 s budget tries it)"
    )
    window = [en.Untried(dataclasses.replace(defaults, steps_per_execution=8), 6.0, 1.0, 20.0)]
    assert tn.untried_words(window, defaults) == (
        "not tried: steps_per_execution=8 (it needs about 6 s; a 30 s budget tries it)"
    )
    trials = [en.Trial(defaults, 100.0, 12.0, compile_s=2.0)]
    result = tn.TuneResult(defaults, trials, "k", False, 21.0, True, untried=untried)
    again = tn.TuneResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.untried == untried and again.budget_exhausted


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"budget_s": 0}, "budget_s must be a number of seconds >= 1 (as --tune_budget), got 0"),
     ({"budget_s": float("nan")}, "got nan"), ({"budget_s": "60"}, "got '60'"),
     ({"steps": 0}, "steps must be an integer >= 1, got 0")],
)  # fmt: skip
def test_a_search_with_no_budget_is_refused_from_python_as_from_the_cli(kwargs, words):
    from toolkit.search.tune import tune

    with pytest.raises(ValueError, match=re.escape(words)):
        tune(object(), None, **kwargs)  # refused before the target is even looked at


# ---------------------------------------------------------------------------- the call's time


class FakeClock:
    """Seconds that pass only when a fake measurement says it took them: no real sleeping,
    no timing thresholds."""

    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class FakeBar:
    """tk_progress.bar's stand-in: where tune moved it, in order with the lines said."""

    def __init__(self, events, total, *args, **kwargs):
        self.events, self.total = events, total

    def advance_to(self, done):
        self.events.append(("bar", done))

    def close(self):
        pass


def _timed_tune(keras, monkeypatch, tmp_path, budget_s, *, ratios, run_s=6.0, start_s=2.0):
    """A real tune of a tiny Task whose search windows (4 s each) and fresh runs (`run_s`
    each, the pick `ratios[r]` times the defaults in round r) only move an injected clock.
    Returns ``(result, its progress lines, [("line", text) or ("bar", seconds)] in the order
    they came, seconds the call took)``."""
    from toolkit.core import progress as tk_progress
    from toolkit.search import fresh as fr
    from toolkit.search.standings import Figures

    clock = FakeClock()
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))

    def rate(self, c, steps=48, calls=3):
        clock.t += 4.0
        return fake_rates(c)

    def child_runner(target, *, backend, device, steps, timing, progress=None):
        def run(candidate, r):
            clock.t += run_s
            pick = candidate != en.Candidate()
            return Figures(examples_per_sec=1000.0 * (ratios[r] if pick else 1.0))

        return run

    monkeypatch.setattr(wl.TaskWorkload, "rate", rate)
    monkeypatch.setattr(fr, "_child_runner", child_runner)
    monkeypatch.setattr(fr, "start_estimate", lambda: start_s)
    events, bars = [], []
    monkeypatch.setattr(
        tk_progress, "bar", lambda *a, **k: bars.append(FakeBar(events, *a, **k)) or bars[-1]
    )
    monkeypatch.setattr(tk_progress, "say", lambda line: events.append(("line", line)))
    space = en.Space(jit_compile=(False, True), steps_per_execution=(1, 8), fused_steps=(1,))
    config = TrainConfig(batch_size=16, epochs=10, report_dir=None)
    start = clock()
    result = tn.tune(
        _task(keras), config, space=space, budget_s=budget_s, fresh="mlp", clock=clock,
        use_cache=False,
    )  # fmt: skip
    lines = [text for kind, text in events if kind == "line"]
    assert bars[-1].total is not None  # the bar of the whole call
    return result, lines, (bars[-1].total, events), clock() - start


def _announced(first: str, budget_s: float) -> float:
    """The whole call's seconds a first line promises: the budget, or the budget and the
    fresh rounds' time it announces."""
    beyond = re.fullmatch(r"tune: (\d+) s search \+ up to (\d+) s confirming the pick "
                          r"\(confirm=False skips it\)", first)  # fmt: skip
    if beyond:
        assert float(beyond[1]) == budget_s
        return budget_s + float(beyond[2])
    assert first.startswith(f"tune: {budget_s:.0f} s in all"), first
    return budget_s


@pytest.mark.parametrize("budget_s", [30.0, 300.0])
def test_the_whole_call_confirmation_included_keeps_the_budget_or_its_first_line(
    keras, tmp_path, monkeypatch, budget_s
):
    """30 s cannot hold three fresh rounds here: the first line says how long they will take
    after the search and how to skip them, and the call keeps to that. 300 s holds them: the
    whole call, fresh rounds included, keeps to the budget. Every line counts the same
    seconds against the same whole, and the bar is where the latest line says."""
    result, lines, bar, took = _timed_tune(
        keras, monkeypatch, tmp_path, budget_s, ratios=[2.9, 3.1, 3.0, 3.0]
    )
    promised = _announced(lines[0], budget_s)
    assert took <= promised and len(lines[0]) <= 80, (took, lines)
    assert result.seconds == took and result.budget_s == budget_s
    assert (result.announced_s > 0) == (budget_s == 30.0)
    assert result.picked and result.gain.trusted and len(result.fresh_rounds) >= 2
    total, events = bar
    assert total == round(promised)
    counted = [ln for ln in lines if ln.startswith("[") and " s]" in ln]
    assert any(ln.startswith("[fresh ") for ln in counted), lines
    shown = [ln.split(" | ")[1].split(" s]")[0].split("/") for ln in counted]
    assert {int(whole) for _, whole in shown} == {round(promised)}, lines
    # Each line's seconds are where the bar goes with it: the two count the same thing.
    for (kind, text), after in itertools.pairwise(events):
        if kind == "line" and text in counted:
            seconds = int(text.split(" | ")[1].split("/")[0])
            assert after == ("bar", seconds) and seconds <= total, (text, after)


def test_a_budget_that_ends_before_the_fresh_rounds_can_tell_says_what_this_noise_resolves(
    keras, tmp_path, monkeypatch
):
    """Fresh rounds that disagree (1.05×, then 1.60×, ...) in a 30 s tune whose fresh time
    holds three rounds: the defaults stay, and the last lines say what gain this machine's
    noise lets that time confirm."""
    result, lines, _bar, took = _timed_tune(
        keras, monkeypatch, tmp_path, 30.0, ratios=[1.05, 1.60, 0.9, 1.4, 1.0]
    )
    assert took <= _announced(lines[0], 30.0)
    assert not result.picked and result.budget_exhausted and result.gain is not None
    said = result.why.split("\n")
    assert any(ln.startswith("not confirmed in ") for ln in said), said
    noise = [ln for ln in said if ln.startswith("on this machine's noise (±")]
    assert noise and "cannot be confirmed in " in noise[0], said
    # faster here but unconfirmed: the defaults are "best", and the pick is what to try
    assert result.unconfirmed is not None and result.unconfirmed != result.best
    assert result.try_how and result.try_how != result.how_to_apply, result.try_how


def test_the_screen_claims_one_gain_in_short_lines_a_keras_user_reads(keras, tmp_path, monkeypatch):
    """The table holds the search's and the head-to-head's figures, labelled; below it, short
    lines in Keras's words, and one claimed gain: the fresh rounds' confirmed one."""
    from toolkit.core import terminal

    result, _lines, _bar, _took = _timed_tune(
        keras, monkeypatch, tmp_path, 30.0, ratios=[2.9, 3.1, 3.0, 3.0]
    )
    table, words = result.table()
    assert "vs defaults (medians)" in table.headers and "head to head (paired)" in table.headers
    lines = words.split("\n")
    claimed = [ln for ln in lines if "×" in ln]
    assert claimed == [f"gain: {result.gain.words()}"], lines  # the one figure below the table
    assert result.gain.where == "fresh processes" and result.gain.low > 1.0
    assert all(len(ln) <= 80 for ln in lines), lines
    assert not any(jargon in words for jargon in ("spe=", "fused=", "no-xla")), words
    assert lines[0].startswith("chosen: ") and "steps_per_execution=8" in lines[0], lines
    shown = terminal.show(result.table(), 80)
    assert shown.count("gain: ") == 1 and "| settings |" not in shown  # a table, not Markdown
    # The report says the same claim, rendered from the record (no words in the JSON).
    from toolkit.report._tune import TuneSection

    said = result.to_dict()
    assert said["picked"] is True and "gain_words" not in said
    assert TuneSection.from_dict(said).line().endswith(f"; claimed {result.gain.words()}")


def test_a_rate_s_window_warms_up_past_the_end_of_an_epoch_shorter_than_it(keras):
    """keras.io's weather LSTM: 1,494 sequences in batches of 64, a ragged 22 last. With XLA
    its first ragged batch compiled inside the window (635 ms against 9 ms steps, no retrace
    a counter sees), and tune read XLA at 0.71× when it ran 1.4-1.7× faster. The warm-up now
    runs past the epoch's end; a window the epoch outlasts is as it was."""
    import tensorflow as tf

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.zeros((1494, 3), "float32"), np.zeros((1494, 1), "float32")
    short = wl.workload(model, tf.data.Dataset.from_tensor_slices((x, y)).batch(64), None)
    for candidate in (en.Candidate(), en.Candidate(steps_per_execution=4)):
        warmup, total = en.window_steps(candidate, 48, 3)
        past, longer = short.window(candidate, 48, 3)
        assert candidate.per_call + past > 24 - 1 and longer - past == total - warmup
        assert past % candidate.per_call == 0  # whole calls
    long = wl.workload(model, tf.data.Dataset.from_tensor_slices((x, y)).batch(4), None)
    assert long.window(en.Candidate(), 48, 3) == en.window_steps(en.Candidate(), 48, 3)
