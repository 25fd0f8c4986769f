"""``python -m toolkit anatomy`` as a user runs it: a recipe taken apart in a real process,
its lines within 80 columns, its ``anatomy.json`` a record that reads back; a bad option is
one line and status 2, before anything loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from toolkit.core._anatomy import Anatomy, Phase


def _run(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "TOOLKIT_PROGRESS": "0"}
    return subprocess.run(
        [sys.executable, "-m", "toolkit", "anatomy", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


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
    assert found.phases_sum() == pytest.approx(found.untraced_s, rel=1e-6)
    assert found.phase(Phase.FORWARD) > 0 and found.layers and found.raw_s
    assert any(layer.alone_s for layer in found.layers)


def test_anatomy_verb_refuses_a_bad_option_in_one_line(tmp_path):
    for steps in ("1", "1000000000"):
        done = _run("--steps", steps, cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            f"error: anatomy: --steps must be an integer >= 2 and <= 100, got {steps}"
        ], done.stderr
