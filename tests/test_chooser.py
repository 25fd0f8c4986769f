"""The backends chooser: its rules with injected runs (the pick, the loss check, the order of
the rounds, the cache, ``--backend=auto``), the shared initial weights, and one real comparison
of every installed backend in fresh processes, whose winner a recipe then trains on."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from tests.test_faults import _last, _run
from toolkit import backend
from toolkit.core.terminal import markdown
from toolkit.runner.config import ConfigError, TrainConfig
from toolkit.search import chooser as ch
from toolkit.search._processes import ChildResult

TF, JAX, TORCH = ch.Contender("tensorflow"), ch.Contender("jax"), ch.Contender("torch")


def row(contender, means, loss=1.0, error=None):
    runs = [
        ch.Run(ch.Figures(mean_s=m, p50_s=m * 0.9, first_step_s=0.5, loss=loss), round=i)
        for i, m in enumerate(means)
    ]
    if error:
        runs = [ch.Run(error=error)]
    return ch.Row(contender, runs)


def measured(mean_s, **more):
    return ch.Figures(mean_s=mean_s, p50_s=mean_s, first_step_s=0.1, loss=0.7, **more)


def test_the_fastest_agreeing_contender_wins_by_its_paired_ratio():
    rows = [row(TF, [1.0, 2.0, 1.0]), row(JAX, [0.5, 1.0, 0.5]), row(TORCH, [3.0, 3.0, 3.0])]
    pick, why = ch.choose(rows)
    assert pick == JAX and "2.00× the defaults" in why
    # A machine that slowed down in round 2 slowed both: the paired ratio stays 2×.
    result = ch.BackendsResult(ch.Target("mlp"), rows, pick, "k", 100, 3, 1.0)
    assert result.ratio(rows[1]) == pytest.approx(2.0)


def test_a_faster_backend_whose_loss_disagrees_is_not_chosen():
    rows = [row(TF, [1.0] * 3, loss=1.0), row(JAX, [0.5] * 3, loss=1.5)]
    assert ch.choose(rows)[0] == TF
    result = ch.BackendsResult(ch.Target("mlp"), rows, TF, "k", 100, 3, 1.0)
    assert result.loss_agrees(rows[1]) is False and "loss differs" in result.table()
    assert "more than 5% off: jax cpu (50.0% off)" in markdown(result.summary())


def test_the_summary_states_the_loss_tolerance_and_who_has_no_loss():
    rows = [
        row(TF, [1.0] * 3, loss=2.0),
        row(JAX, [0.5] * 3, loss=2.04),
        row(TORCH, [], error="no torch here"),
    ]
    result = ch.BackendsResult(ch.Target("mlp"), rows, JAX, "k", 100, 3, 1.0)
    line = result.loss_line()
    assert line == (
        "losses: the defaults' final loss 2; every other agrees within 5%; no loss from torch cpu"
    )
    assert line in markdown(result.summary())
    nan = [row(TF, [1.0] * 3, loss=2.0), row(JAX, [0.5] * 3, loss=float("nan"))]
    result = ch.BackendsResult(ch.Target("mlp"), nan, TF, "k", 100, 3, 1.0)
    assert result.loss_line().endswith("more than 5% off: jax cpu (NaN off)")


def test_within_the_minimum_gain_the_defaults_stay():
    rows = [row(TF, [1.0] * 3), row(JAX, [0.99] * 3)]
    pick, why = ch.choose(rows)
    assert pick == TF and "defaults stay" in why


def test_failed_defaults_hand_over_to_the_fastest_that_ran():
    rows = [row(TF, [], error="boom"), row(JAX, [2.0]), row(TORCH, [1.0])]
    pick, why = ch.choose(rows)
    assert pick == TORCH and "boom" in why


def test_contenders_that_all_failed_are_said_so_not_outrun():
    rows = [row(TF, [1.0]), row(JAX, [], error="TypeError: boom"), row(TORCH, [], error="x")]
    result = ch.BackendsResult(ch.Target("mlp"), rows, TF, "k", 50, 1, 1.0)
    assert ch.choose(rows) == (TF, "every other contender failed")
    assert result.loss_line().endswith(
        "no other contender ran to compare it with; no loss from jax cpu, torch cpu"
    )


OWN_TRAIN_STEP = """
import keras
import numpy as np


class Custom(keras.Model):
    def train_step(self, data):  # keras.io's TensorFlow-style step: JAX's takes a state too
        return {}


def make():
    x = keras.Input((4,))
    model = Custom(x, keras.layers.Dense(1)(x))
    model.compile("sgd", "mse")
    return model, (np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32"))
"""


def test_a_fresh_process_s_unforeseen_error_is_its_one_line_not_its_traceback_s_last(
    tmp_path, monkeypatch
):
    """keras.io's custom ``train_step`` on JAX: Keras's trainer calls it with a state, and
    the TypeError's traceback ends with JAX's note ("For simplicity, JAX has removed its
    internal frames..."), which was said as the run's error."""
    from toolkit.search._processes import ChildSpec, run_child

    (tmp_path / "ownstep.py").write_text(OWN_TRAIN_STEP)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = ChildSpec("figures", "jax", target=ch.Target(None, "ownstep:make"), steps=8)
    got = run_child(spec, {**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path)}, timeout_s=300)
    assert got.error.startswith("TypeError: Custom.train_step() takes 2 positional"), got


def test_a_contender_with_a_failed_run_is_never_chosen():
    """The fastest by far, but one of its three runs failed: what failed it may fail the run
    it is chosen for. The table says why it was passed over."""
    lost = row(JAX, [0.2, 0.2, 0.2])
    lost.runs[1] = ch.Run(error="killed by SIGKILL", interrupted=True, round=1)
    rows = [row(TF, [1.0] * 3), lost, row(TORCH, [0.5] * 3)]
    pick, why = ch.choose(rows)
    assert pick == TORCH and "2.00×" in why
    result = ch.BackendsResult(ch.Target("mlp"), rows, pick, "k", 100, 3, 1.0)
    assert "1 run(s) failed: not chosen" in result.table()
    rows[0] = row(TF, [], error="boom")  # the defaults failed: still not the one that failed
    assert ch.choose(rows)[0] == TORCH


def test_a_run_a_signal_ended_keeps_the_result_out_of_the_cache(tmp_path, monkeypatch):
    """A contender's child killed (the OOM killer, a user's kill): the answer is not its
    own, so nothing is cached and the next comparison measures again."""
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def runner(contender, target):
        calls.append(contender)
        if contender == JAX and len(calls) == 2:
            return ChildResult(error="killed by SIGKILL", interrupted=True)
        return measured(1.0)

    lines = []
    result = ch.compare(
        ch.Target("mlp"), backends=["tensorflow", "jax"], steps=20, rounds=2, runner=runner,
        progress=lines.append,
    )  # fmt: skip
    assert result.best == TF and len(calls) == 4 and ch.cached(result.key) is None
    said = [line for line in lines if line.startswith("backends: not cached")]
    assert said == [
        "backends: not cached: 1 run(s) ended by a signal or the timeout measured nothing; run "
        "again for an answer to keep"
    ]


def test_a_child_killed_by_a_signal_is_said_so_and_marked_interrupted(tmp_path, monkeypatch):
    """A real child that a signal ends (here its own SIGKILL, as the OOM killer's)."""
    from toolkit.search._processes import ChildSpec, run_child

    (tmp_path / "dies.py").write_text(
        "import os, signal\n\ndef build():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = ChildSpec("figures", "tensorflow", target=ch.Target(None, "dies:build"), steps=10)
    got = run_child(spec, {**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path)}, timeout_s=300)
    assert got == ChildResult(error="killed by SIGKILL", interrupted=True)


def test_contenders_every_backend_times_the_devices_it_sees_defaults_first(monkeypatch):
    monkeypatch.setattr(backend.Backend, "installed", lambda self: True)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    seen = {"tensorflow": ["cpu", "cuda"], "jax": ["cpu", "cuda"], "torch": ["cpu", "metal"]}
    found = ch.contenders(probe=seen.get)
    assert found[0] == ch.Contender("tensorflow", "cuda")  # the default device: its GPU
    assert set(found) == {
        ch.Contender(b, d) for b, kinds in seen.items() for d in kinds
    }  # fmt: skip
    only_cpu = ch.contenders("cpu", probe=seen.get)
    assert only_cpu == [TF, JAX, TORCH]
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert ch.contenders("cpu", probe=seen.get)[0] == JAX
    with pytest.raises(ch.ChooserError, match="unknown mxnet"):
        ch.contenders(backends=["mxnet"])
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    with pytest.raises(ch.ChooserError, match="tf_keras, which trains on TensorFlow only"):
        ch.contenders(probe=seen.get)


def test_compare_interleaves_rounds_shares_weights_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    speed = {"tensorflow": 1.0, "jax": 0.5, "torch": 2.0}

    def runner(contender, target):
        calls.append((contender.backend, target.config["init_weights"]))
        return measured(speed[contender.backend], mfu=0.01)

    target = ch.Target("mlp", None, {}, {"batch_size": 64, "epochs": 5})
    lines = []
    result = ch.compare(
        target, backends=["tensorflow", "jax", "torch"], steps=50, rounds=3,
        runner=runner, progress=lines.append,
    )  # fmt: skip
    order = [b for b, _ in calls]
    assert order[:3] == ["tensorflow", "jax", "torch"] and order[3:6] == [
        "jax",
        "torch",
        "tensorflow",
    ]
    assert len({weights for _, weights in calls}) == 1  # every run: the same initial weights
    assert calls[0][1].endswith("initial.weights.h5")
    assert lines[0].startswith("backends: asking each backend which devices it sees")
    assert result.best == JAX and len(lines) == 10 and "[9/9" in lines[-1]
    assert "| jax | cpu |" in result.table() and "| defaults |" in result.table()
    assert re.search(r"\| jax \| cpu \|.*\| chosen \|", result.table())
    assert (
        ch.BackendsResult.from_dict(json.loads(json.dumps(result.to_dict())), cache_hit=False)
        == result
    )
    paths = result.write(str(tmp_path / "out"))
    with open(paths["json"]) as f:
        assert json.load(f)["best"] == {"backend": "jax", "device": "cpu", "settings": []}
    with open(paths["png"], "rb") as f:
        assert f.read(4) == b"\x89PNG"
    # The run length is not part of the key: a longer run reads the same answer.
    longer = ch.Target("mlp", None, {}, {"epochs": 20, "batch_size": 64})
    again = ch.compare(
        longer, backends=["tensorflow", "jax", "torch"], steps=50, rounds=3, runner=runner,
        progress=lines.append,
    )  # fmt: skip
    assert again.cache_hit and again.best == JAX and len(calls) == 9
    # --backend=auto reads it, for the same recipe and settings, whatever the run length.
    auto = ch.Target("mlp", None, {}, {"batch_size": 64, "backend": "auto", "steps_per_epoch": 9})
    assert ch.resolve_auto(auto) == "jax"
    other = ch.Target("mlp", None, {}, {"batch_size": 32})
    assert ch.resolve_auto(other) == os.environ.get("KERAS_BACKEND", "tensorflow")
    assert ch.resolve_auto(ch.Target("mlp", None, {"hidden_units": 7}, {"batch_size": 64})) == (
        os.environ.get("KERAS_BACKEND", "tensorflow")
    )  # another recipe argument: another model


def test_a_model_fn_edited_under_the_same_name_is_another_key(tmp_path, monkeypatch):
    """keras.io's custom train_step model with a layer widened 8× under the same
    ``custom:make``: the cache answered with the narrow model's figures (2.4× too fast) until
    the file that builds it became part of the key; --backend=auto's lookup reads it too."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    script = tmp_path / "custommodel.py"
    script.write_text("def make():\n    return 256\n")
    target = ch.Target(None, "custommodel:make", {}, {})
    by_path = ch.Target(None, f"{script}:make", {}, {})
    key, facts = ch.cache_key(target, 50)
    assert facts["source"] and ch.keyed(by_path)["source"] == facts["source"]
    assert ch.cache_key(target, 50)[0] == key  # unchanged: the same key
    script.write_text("def make():\n    return 2048\n")
    assert ch.cache_key(target, 50)[0] != key
    assert ch.keyed(by_path)["source"] == ch.keyed(target)["source"] != facts["source"]
    assert ch.keyed(ch.Target("mlp", None, {}, {}))["source"]  # a recipe: its module's file
    assert ch.keyed(ch.Target(None, "nosuchmodule:make", {}, {}))["source"] is None


def test_the_cache_key_holds_the_keras_release_and_whether_a_nightly():
    """keras-nightly installs `keras` under its own name: the key reads the one release that
    a report records (its version, nightly or not), so a nightly's winner is not a release's.
    The same key before and after Keras loads (``--backend=auto`` reads it before)."""
    code = (
        "import sys; from toolkit.core import compat; from toolkit.search import chooser as ch; "
        "key = lambda: ch.cache_key(ch.Target('mlp', None, {}, {}), 50); "
        "before, facts = key(); assert 'keras' not in sys.modules; import keras; "
        "r = compat.keras_release(); m = facts['machine']; "
        "assert (m['keras'], m['keras_nightly']) == (r.version, r.nightly), (m, r); "
        "assert key()[0] == before, 'the key changed once Keras loaded'; print('ok')"
    )
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_init_weights_must_be_a_keras_weights_file():
    with pytest.raises(ConfigError, match=r"--init_weights must be a Keras weights file"):
        TrainConfig(init_weights="/tmp/w.h5x").validate()
    TrainConfig(init_weights="/tmp/w.weights.h5").validate()


def test_share_initial_weights_writes_then_loads_and_rejects_another_model(keras, tmp_path):
    from toolkit.runner import train

    def model(units):
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(units)])

    path = str(tmp_path / "w" / "initial.weights.h5")
    first, second = model(3), model(3)
    assert train.share_initial_weights(first, path) == "written"
    assert train.share_initial_weights(second, path) == "loaded"
    for a, b in zip(first.get_weights(), second.get_weights(), strict=True):
        assert (a == b).all()
    with pytest.raises(train.SetupError, match="another model's weights: delete it"):
        train.share_initial_weights(model(5), path)


@pytest.mark.long
def test_backends_cli_then_a_recipe_on_backend_auto(tmp_path):
    """Every installed backend in fresh processes, the same start (the losses agree), the
    table and files; then ``--backend=auto`` trains on the winner.

    50-80 s on 2 cores, by what it checks: one fresh process per installed backend, each
    importing its framework and compiling the step, then the recipe run the choice is read
    by; the verb and the recipe are two processes because the cache between them is what is
    checked."""
    env = {**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("KERAS_BACKEND", None)
    flags = ["--batch_size=64", "--hidden_units=32", "--device=cpu"]
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "backends", "--recipe", "mlp", "--steps", "40",
         "--rounds", "1", "--out", str(tmp_path / "out"), *flags],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads((tmp_path / "out" / "backends.json").read_text())
    result = ch.BackendsResult.from_dict(saved, cache_hit=False)
    assert {r.contender.backend for r in result.rows} == set(ch.installed_backends())
    for r in result.rows:
        assert r.error is None and r.runs[0].figures.timed_steps > 0, r.runs
        assert r.runs[0].figures.backend == r.contender.backend  # it really trained there
        assert result.loss_agrees(r), (r.contender, r.median("loss"))
    assert "chosen: --backend=" in done.stdout
    assert f"[{len(result.rows)}/{len(result.rows)}" in done.stderr
    report_dir = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "recipes.mlp", "--backend=auto", "--smoke", "--epochs=3",
         f"--report_dir={report_dir}", *flags],
        capture_output=True, text=True, timeout=300, env=env, cwd=os.getcwd(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"--backend=auto: {result.best.backend}" in done.stderr
    (run,) = list(report_dir.iterdir())
    report = json.loads((run / "report.json").read_text())
    assert report["environment"]["keras_backend"] == result.best.backend


def test_backends_cli_bad_input_is_one_line(tmp_path):
    for argv, message in (
        (["--recipe", "nope"], "no recipe named 'nope'; the recipes are"),
        (["--model_fn", "nomodule_here:make"], "--model_fn='nomodule_here:make'"),
        (["--backends", "mxnet"], "unknown mxnet"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "toolkit", "backends", *argv],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path)},
        )  # fmt: skip
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.long
def test_tune_across_backends_searches_each_then_meets_head_to_head(tmp_path):
    """The backend as a tune axis: one search per installed backend (fresh processes), then
    their winners and the untuned defaults head to head; the defaults always a contender.

    Over 60 s on 2 cores (55-125 s seen), by what it checks: a search per installed backend,
    each held to the 25 s budget (the smallest tune takes) in fresh processes, then the head
    to head; one real process, as a user runs it, checks the whole of it."""
    env = {**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("KERAS_BACKEND", None)
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "tune", "--recipe", "mlp", "--across_backends",
         "--tune_budget=25", "--device=cpu", "--hidden_units=32", "--batch_size=64"],
        capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"^tensorflow +cpu ", out, re.M), out  # the table, as a terminal shows it
    assert "defaults" in out and "chosen: --backend=" in out
    lines = done.stderr.splitlines()
    searched = [ln for ln in lines if ln.startswith("tune ") and ": searching" not in ln]
    assert len(searched) == len(ch.installed_backends()), done.stderr[-3000:]
    # each search's progress, live, under its contender's name
    assert any(ln.startswith("  tensorflow cpu [") for ln in lines), done.stderr[-3000:]
    assert all(
        ("--precision=" in ln) or ("Keras defaults" in ln) or ("failed" in ln) for ln in searched
    )


def test_a_run_without_timed_steps_is_a_failed_run_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))

    def runner(contender, target):
        if contender.settings:  # its calls ate every step: nothing timed
            return ch.Figures(loss=0.7)
        return measured(1.0)

    big = ch.Contender("tensorflow", "cpu", (("steps_per_execution", 512),))
    result = ch.compare(
        ch.Target("mlp"), candidates=[TF, big], steps=20, rounds=2, runner=runner,
        progress=lambda line: None,
    )  # fmt: skip
    assert result.best == TF
    assert "no timed steps in 2560 steps: raise --steps" in result.row(big).error
    assert "failed: no timed steps" in result.table()


def test_every_contender_trains_as_many_steps_since_their_losses_are_compared():
    tuned = ch.Contender("tensorflow", "cpu", {"jit_compile": True, "steps_per_execution": 8,
                                               "fused_steps": 32})  # fmt: skip
    three = ch.Contender("jax", "cpu", {"fused_steps": 3})
    plain = ch.Target("mlp")
    # 5 calls of the longest (256 steps) and a whole number of every contender's calls
    assert ch.run_steps(200, [TF, tuned], plain) == 1280
    assert ch.run_steps(200, [TF, tuned, three], plain) == 1536  # lcm(256, 3) = 768
    assert ch.run_steps(200, [TF, JAX], plain) == 200
    # the target's settings are every contender's, unless its own say otherwise
    fused = ch.Target("mlp", None, {}, {"fused_steps": 64})
    assert ch.run_steps(200, [TF, JAX], fused) == 320
    assert ch.run_steps(200, [TF, tuned], fused) == 1280

    def runner(contender, target):
        return measured(1.0)

    lines = []
    result = ch.compare(
        ch.Target("mlp"), candidates=[TF, tuned], steps=200, rounds=1, runner=runner,
        progress=lines.append,
    )  # fmt: skip
    assert result.steps == 1280 and "1280 steps per run" in markdown(result.summary())
    assert any("1280 steps per run, not 200" in ln for ln in lines)


def test_a_target_from_a_name_a_spec_or_your_function(tmp_path, monkeypatch):
    (tmp_path / "benchmarks_like.py").write_text("def make():\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from benchmarks_like import make  # a module-level function, importable by name

    from toolkit.runner.config import TrainConfig

    made = ch.Target.of("cnn", {"filters": 8}, TrainConfig(batch_size=8))
    assert made == ch.Target("cnn", None, {"filters": 8}, TrainConfig(batch_size=8).to_dict())
    assert ch.Target.from_dict(json.loads(json.dumps(made.to_dict()))) == made
    assert ch.Target.of("mytrain:make").model_fn == "mytrain:make"
    assert ch.Target.of(make).model_fn == "benchmarks_like:make"

    def nested():
        return None

    with pytest.raises(ch.ChooserError, match="define a function at the top of a module"):
        ch.Target.of(nested)


def test_a_tuned_winner_that_is_the_defaults_is_the_plain_contender():
    from toolkit.search.engine import Candidate, Trial
    from toolkit.search.tune import TuneResult

    defaults = Trial(Candidate(), 100.0, 1.0)
    faster = Trial(Candidate(steps_per_execution=8), 150.0, 1.0)
    same = TuneResult(Candidate(), [defaults, faster], "k", False, 1.0)
    assert ch.tuned_settings(ch.Searched.from_dict(json.loads(json.dumps(same.to_dict())))) == ()
    won = ch.Searched.from_dict(TuneResult(faster.candidate, [defaults, faster], "k", False,
                                           1.0).to_dict())  # fmt: skip
    settings = dict(ch.tuned_settings(won))
    assert settings["steps_per_execution"] == 8 and settings["jit_compile"] is False
    tuned = ch.Contender("jax", "cpu", ch.tuned_settings(won))
    assert "--steps_per_execution=8" in tuned.settings_words()
    assert "--nojit_compile" in tuned.flags() and tuned.flags().startswith("--backend=jax")


def test_tuned_settings_must_beat_their_own_backends_defaults_by_more_than_noise():
    tuned = ch.Contender("jax", "cpu", {"steps_per_execution": 32})
    rows = [row(TF, [1.0] * 2), row(JAX, [0.50, 0.50]), row(tuned, [0.49, 0.49])]
    pick, why = ch.choose(rows)
    assert pick == JAX and "tuned settings were 1.02×" in why  # 2 %: noise, the plain one
    rows = [row(TF, [1.0] * 2), row(JAX, [0.50, 0.50]), row(tuned, [0.40, 0.40])]
    assert ch.choose(rows)[0] == tuned  # 25 %: kept


def test_the_searches_leave_one_round_of_the_final_inside_the_budget():
    """tune --across_backends: the final's least round (every backend's defaults and its
    tuned winner, a fresh process each) is reserved from the searches' part of the budget."""
    # Before any search has run: half the budget, shared equally.
    assert ch.search_share(0.0, 90.0, 3, [], [], finalists=6) == pytest.approx(15.0)
    # Cheap final runs: the half holds; what the first search took beyond its share is
    # taken off the next ones.
    assert ch.search_share(20.0, 90.0, 2, [5.0], [3.0], finalists=6) == pytest.approx(7.5)
    # Final runs of 8 s: one round is 48 s, 60 s with the margin, so the searches may use
    # 30 s in all.
    assert ch.FINAL_MARGIN == 1.25
    assert ch.search_share(20.0, 90.0, 2, [5.0], [8.0], finalists=6) == pytest.approx(1.0)
    assert ch.search_share(0.0, 200.0, 2, [2.0], [8.0], finalists=6) == pytest.approx(48.0)
    assert ch.search_share(0.0, 200.0, 2, [2.0], [24.0], finalists=6) == pytest.approx(8.0)
    # Never below 1 s: the search then measures the defaults alone.
    assert ch.search_share(80.0, 90.0, 1, [5.0], [20.0], finalists=6) == 1.0


def test_a_final_run_is_estimated_from_its_search_child():
    from toolkit.search.engine import Candidate

    def searched(**d):
        return ch.Searched.from_dict({"best": {}, **d})

    found = searched(seconds=12.0, trials=[{"seconds": 4.0}, {"seconds": 3.0}])
    # 6 s outside the search (start-up, data, report) + the defaults' build, compile, window
    assert ch.final_run_estimate(found, wall_s=18.0) == pytest.approx(10.0)
    assert ch.Searched.from_dict({}) is None  # no pick: the search failed
    assert ch.final_run_estimate(searched(), wall_s=18.0) is None
    assert ch.final_run_estimate(searched(seconds=1.0, trials=[]), wall_s=3.0) is None
    # A winner of 256 steps a call makes every final run 1280 steps, not 200: the defaults'
    # 1080 more, at 32 examples a step and 16,000 examples/s, take 2.16 s more.
    found = searched(
        seconds=12.0, batch_size=32, best={"steps_per_execution": 8, "fused_steps": 32},
        trials=[{"seconds": 4.0, "examples_per_sec": 16_000.0}],
    )  # fmt: skip
    assert ch.final_run_estimate(found, wall_s=18.0, steps=200) == pytest.approx(12.16)
    found = dataclasses.replace(found, best=Candidate(steps_per_execution=4, fused_steps=4))
    assert ch.final_run_estimate(found, wall_s=18.0, steps=200) == pytest.approx(10.016)
    found = dataclasses.replace(found, best=Candidate())  # 13 calls of 16: 208 steps above
    assert ch.final_run_estimate(found, wall_s=18.0, steps=200) == pytest.approx(10.0)


def test_a_child_gets_one_spec_and_answers_in_json(tmp_path):
    """What a fresh process measures is one serialisable spec handed to ``python -m
    toolkit._child``, not a command line of hidden options; a spec it cannot use is one line."""
    from toolkit.search._processes import ChildSpec, run_child
    from toolkit.search.engine import Candidate

    target = ch.Target("mlp", None, {"hidden_units": 16}, {"device": "gpu", "backend": "jax"})
    spec = ChildSpec("figures", "tensorflow", "cpu", target, Candidate(jit_compile=True), 30)
    assert ChildSpec.from_json(spec.to_json()) == spec
    assert "--" not in spec.to_json()  # typed values, no command line
    # The child runs on the spec's backend and device, whatever the target's config said.
    assert spec.config() == {"device": "cpu", "backend": "tensorflow"}
    with pytest.raises(ValueError, match="child job"):
        ChildSpec("train", "jax", target=target)
    with pytest.raises(ValueError, match="a target is for figures and tune"):
        ChildSpec("devices", "jax", target=target)
    with pytest.raises(ValueError, match="malformed child spec"):
        ChildSpec.from_json('{"job": "tune"}')
    env = {**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path)}
    bad = ChildSpec("figures", "tensorflow", target=ch.Target("nope"), steps=10)
    failed = run_child(bad, env, timeout_s=300)
    assert "no recipe named 'nope'" in failed.error and not failed.interrupted, failed
    run = ChildSpec("figures", "tensorflow", target=ch.Target("mlp", None, {"hidden_units": 16}),
                    steps=20)  # fmt: skip
    got = run_child(run, env, timeout_s=300).figures()
    assert got.timed_steps > 0 and got.backend == "tensorflow", got
    (tmp_path / "spec.json").write_text("{not json")
    done = subprocess.run(
        [sys.executable, "-m", "toolkit._child", str(tmp_path / "spec.json"), str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (
        done.returncode == 2 and done.stderr.startswith("error:") and "Traceback" not in done.stderr
    )


def test_backends_png_reads_when_one_bar_is_far_longer(tmp_path, monkeypatch):
    """A contender 50× slower than the rest: a log axis (the others no slivers), each bar's
    value printed, and a legend for the colours (green: the chosen one)."""
    from matplotlib.figure import Figure

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    speed = {"tensorflow": 0.0014, "jax": 0.00078, "torch": 0.043}

    def runner(contender, target):
        return measured(speed[contender.backend], mfu=0.01)

    result = ch.compare(
        ch.Target("mlp"), backends=["tensorflow", "jax", "torch"], steps=50,
        rounds=1, runner=runner, progress=lambda line: None,
    )  # fmt: skip
    figures, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda f, *a, **k: (figures.append(f), save(f, *a, **k)))
    result.write(str(tmp_path / "out"))
    ax = figures[-1].axes[0]
    assert ax.get_xscale() == "log" and "log scale" in ax.get_xlabel()
    values = {t.get_text() for t in ax.texts}
    assert {"0.780 ms", "1.400 ms", "43.000 ms"} <= values, values  # as the table writes them
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["chosen", "other"]


def test_what_a_backend_s_search_left_untried_is_said_with_the_whole_budget_that_tries_it():
    """``tune --across_backends``: a backend's search had a share of the budget; what it left
    untried is said with the --tune_budget whose share would have tried it."""
    untried = [{"candidate": {}, "needs_s": 9.0, "compile_s": 6.0, "spent_s": 11.0},
               {"candidate": {}, "needs_s": 4.0, "compile_s": None, "spent_s": 11.0,
                "reserve_s": 3.0}, {"needs_s": "?"}]  # fmt: skip
    needed = ch.Searched.from_dict({"best": {}, "untried": untried}).untried_s
    assert needed == (20.0, 18.0)  # each one's search budget that tries it (a bad one: left out)
    # The costliest needed 20 s of a 15 s share: a 120 s budget's share is 15 × 120 / 90.
    assert ch.untried_budget(needed, share=15.0, budget_s=90.0) == (2, 120)
    assert ch.untried_budget([], share=15.0, budget_s=90.0) is None
    assert ch.Searched.from_dict({"best": {}, "untried": [{"spent_s": "?"}]}).untried_s == ()


def test_backends_where_nothing_ran_fails_and_caches_nothing(tmp_path):
    (tmp_path / "broken_mf.py").write_text("raise RuntimeError('boom at import')\n")
    cache = tmp_path / "cache"
    out = _run(
        [sys.executable, "-m", "toolkit", "backends", "--model_fn=broken_mf:make",
         "--backends=tensorflow", "--smoke", f"--out={tmp_path / 'out'}"],
        cwd=tmp_path, timeout=300, env={"TOOLKIT_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert _last(out).startswith("error: no backend ran (--model_fn='broken_mf:make'")
    assert "backends: not cached: no contender ran" in out.stderr
    assert not (cache / "backends.json").exists()


def test_why_slower_diffs_the_fastest_and_slowest_on_the_speed_table_s_steps():
    """``backends --anatomy``: the fastest and the slowest backend's anatomies, the diff on
    the table's own steps (its parts add up to the gap the table shows, whatever each
    anatomy's own step read), the slower one's fix named."""
    from toolkit.core._anatomy import Anatomy, LayerTime, Phase, PhaseTime

    def taken(contender, target):
        slow = contender.backend == "torch"
        k = 3.0 if slow else 1.0
        phases = (PhaseTime(Phase.FORWARD, 0.002 * k), PhaseTime(Phase.BACKWARD, 0.004 * k),
                  PhaseTime(Phase.HOST, 0.001))  # fmt: skip
        return Anatomy(contender.backend, step_s=0.007 * k, traced_s=0.007 * k, phases=phases,
                       traced_phases=phases, untraced_s=0.0065 * k,
                       layers=(LayerTime("conv", "Conv2D", 0.002 * k, 0.004 * k),))  # fmt: skip

    rows = [row(TF, [0.010] * 3), row(JAX, [0.012] * 3), row(TORCH, [0.040] * 3)]
    result = ch.BackendsResult(ch.Target("mlp"), rows, TF, "k", 100, 3, 1.0)
    diff, fast, slow = ch.why_slower(result, runner=taken)
    assert (fast.backend, slow.backend) == ("tensorflow", "torch")
    assert diff.ratio == pytest.approx(4.0)  # the table's 40 ms over its 10 ms
    gap = sum(p.gap_s for p in diff.parts) + (diff.rest.gap_s if diff.rest else 0.0)
    assert gap == pytest.approx(0.030)
    assert diff.parts[0].what == "the Conv2D layer (1)"
    assert (
        ch.why_slower(ch.BackendsResult(ch.Target("mlp"), rows[:1], TF, "k", 100, 3, 1.0)) is None
    )
