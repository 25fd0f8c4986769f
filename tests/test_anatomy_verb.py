"""``python -m toolkit anatomy`` as a user runs it: a recipe taken apart in a real process,
its lines within 80 columns, its ``anatomy.json`` a record that reads back; a bad option is
one line and status 2, before anything loads."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from toolkit.core._anatomy import Anatomy, Phase, PhaseTime


def _run(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "TOOLKIT_PROGRESS": "0"}
    return subprocess.run(
        [sys.executable, "-m", "toolkit", "anatomy", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@pytest.mark.long
def test_anatomy_verb_takes_a_recipe_apart_and_writes_its_record(tmp_path):
    out = tmp_path / "out"
    done = _run("--recipe", "mlp", "--steps", "4", "--no_plot", "--out", str(out),
                "--batch_size=64", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "anatomy: recipe mlp"
    # the anatomy's lines at 80 columns (the file paths written, whole, as every verb's)
    wide = [x for x in lines if len(x) > 80 and not x.startswith("written: ")]
    assert not wide, wide
    assert any(line.startswith("the trace's phases sum to ") for line in lines), done.stdout
    assert any("Keras's" in line and "raw step" in line for line in lines), done.stdout
    assert any(" layers timed alone: " in line for line in lines), done.stdout
    found = Anatomy.from_dict(json.loads((out / "anatomy.json").read_text()))
    # exactly the steps asked, the phases shown adding up to the untraced step
    assert found.error is None and found.steps == 4 and found.traced_phases
    assert found.batch == 64  # what the step's times are of, as fit's adapter says it
    assert "(4 steps traced, batch 64," in " ".join(x.strip() for x in lines), lines
    assert found.phases_sum() == pytest.approx(found.untraced_s, rel=1e-6)
    assert found.phase(Phase.FORWARD) > 0 and found.layers and found.raw_s
    assert any(layer.alone_s for layer in found.layers)
    if found.other_large() and found.other_fix:  # TensorFlow's CPU step: XLA off, checked
        assert found.other_fixed_s is not None and found.other_saving_checked() is not None
        assert "measured: fit's step" in " ".join(line.strip() for line in lines), lines


def test_anatomy_verb_refuses_a_bad_option_in_one_line(tmp_path):
    for steps in ("1", "1000000000"):
        done = _run("--steps", steps, cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            f"error: anatomy: --steps must be an integer >= 2 and <= 100, got {steps}"
        ], done.stderr


class _Steps:
    def __init__(self, p50_s: float) -> None:
        self.steps = type("Steps", (), {"p50_s": p50_s})()


class _Work:
    """A workload that fits in no time: each fit's median step is its candidate's."""

    per_call = 1

    def __init__(self) -> None:
        self.fits: list[object] = []

    def defaults(self):
        from toolkit.search.engine import Candidate

        return Candidate(jit_compile=False)

    def fit(self, candidate=None, *, steps, warmup, one_batch=False, callbacks=()):
        self.fits.append((candidate, one_batch))
        return _Steps(0.004 if candidate is not None and candidate.jit_compile else 0.010)


@pytest.mark.every_backend
def test_anatomy_checks_the_fix_it_names_for_a_large_other(keras):
    """A step not compiled, its "other" large: the fix named (the backend's compiler), its
    saving predicted from the trace's gaps and checked by fit's step with the fix, one
    batch, as fit_s was; an "other" that is small, or a compiled step, costs no fit."""
    from toolkit import backend
    from toolkit.search.anatomy import _Measured

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse", jit_compile=False)
    large = Anatomy(
        backend.name(), step_s=0.010, untraced_s=0.010, fit_s=0.010, other_between_s=0.006,
        phases=(PhaseTime(Phase.FORWARD, 0.002), PhaseTime(Phase.OTHER, 0.008)),
    )  # fmt: skip
    work = _Work()
    found = _Measured(work, steps=4)._with_other_fix(large, model)
    advice = backend.get().jit_advice()
    if advice is None:  # JAX: its step is always jitted: nothing to name
        assert found == large and not work.fits
        return
    assert found.other_fix == advice and found.other_gaps_s() == pytest.approx(0.006)
    if True in backend.get().searched_jit():
        assert [c.jit_compile for c, one_batch in work.fits if one_batch] == [True]
        assert found.other_fixed_s == 0.004 and found.other_fix_held() is True
    else:  # torch.compile's tens of seconds: named, not measured, said so
        assert found.other_fixed_s is None and not work.fits
        assert any("not measured here" in n for n in found.notes)
    if True in backend.get().searched_jit():  # no raw step ran (--no_raw): fit's own step
        work.fits.clear()  # timed first, then in turn with the fix's, twice each (a step
        unfitted = dataclasses.replace(large, fit_s=None)  # after an XLA fit read 2.3x)
        own = _Measured(work, steps=4)._with_other_fix(unfitted, model)
        assert [c.jit_compile for c, one_batch in work.fits if one_batch] == [False, True] * 2
        assert own.fit_s == 0.010 and own.other_fixed_s == 0.004 and own.other_fix_held()
    phases = (PhaseTime(Phase.FORWARD, 0.009), PhaseTime(Phase.OTHER, 0.001))
    small = Anatomy(backend.name(), step_s=0.010, fit_s=0.010, phases=phases)
    work.fits.clear()
    assert _Measured(work, steps=4)._with_other_fix(small, model).other_fixed_s is None
    model.compile("sgd", "mse", jit_compile=True)
    assert _Measured(work, steps=4)._with_other_fix(large, model).other_fix is None
    assert not work.fits


def test_anatomy_without_a_raw_step_still_times_your_data_s_step_against_one_batch(keras):
    """A model with no raw step (a train_step of its own; keras.io's RecommenderNet, whose
    Embeddings add their own losses) still gets fit's step on your data against one batch's,
    timed in turn: what the data costs the step (its JAX batch transfers, slowed by the
    profiler, had been held as 98.8 % input). A traced fit's untraced steps faster than the
    step alone are no whole steps (0.08 ms against 0.44 ms on JAX): yours stands."""
    from toolkit import backend
    from toolkit.search.anatomy import RAW_ROUNDS, _Measured

    class Own(keras.Sequential):
        def train_step(self, data):
            return super().train_step(data)

    class Fed(_Work):
        def fit(self, candidate=None, *, steps, warmup, one_batch=False, callbacks=()):
            self.fits.append((candidate, one_batch))
            return _Steps(0.0044 if one_batch else 0.0064)

    model, work = Own([keras.Input((4,)), keras.layers.Dense(2)]), Fed()
    found = Anatomy(backend.name(), step_s=0.002, untraced_s=0.0008,
                    phases=(PhaseTime(Phase.FORWARD, 0.002),))  # fmt: skip
    got = _Measured(work, steps=4)._with_raw(found, model)
    assert [one for _, one in work.fits] == [True, False] * RAW_ROUNDS
    assert got.raw_s is None and got.fit_s == 0.0044 and got.fed_s == 0.0064
    assert got.untraced_s == 0.0064 and any("not whole steps" in n for n in got.notes)
    assert any(n.startswith("Keras's own cost not measured: Own has its own") for n in got.notes)
    kept = _Measured(work, steps=4)._with_raw(dataclasses.replace(found, untraced_s=0.005), model)
    assert kept.untraced_s == 0.005 and not any("not whole" in n for n in kept.notes)
