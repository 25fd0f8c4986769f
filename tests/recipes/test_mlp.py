"""recipes/mlp.py as a user runs it: a real process, real digits, real flags and
signals."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

RECIPE = [sys.executable, "-m", "recipes.mlp"]


def _run(args, timeout=240):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [*RECIPE, *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _report(report_dir):
    (run_dir,) = [p for p in report_dir.iterdir() if p.is_dir()]
    return run_dir, json.loads((run_dir / "report.json").read_text())


def test_default_settings_reach_095_and_write_the_report(tmp_path):
    out = _run([f"--report_dir={tmp_path}"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "== mlp: complete" in out.stdout and "examples/s" in out.stdout
    run_dir, data = _report(tmp_path)
    assert sorted(os.listdir(run_dir)) == ["report.json", "report.md", "steps.png"]
    assert data["metrics"]["val_accuracy"] >= 0.95
    assert data["args"]["epochs"] == 20 and data["args"]["hidden_units"] == 128
    assert data["steps"]["batch_size"] == 32 and data["steps"]["timed_steps"] > 500


def test_performance_flags_trace_and_memory(tmp_path):
    out = _run(
        [
            f"--report_dir={tmp_path}",
            "--epochs=3",
            "--batch_size=64",
            "--steps_per_execution=4",
            "--jit_compile",
            "--profile_steps=4,12",
            "--tensorboard",
        ]
    )
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir, data = _report(tmp_path)
    steps = data["steps"]
    assert steps["steps_per_execution"] == 4
    kinds = ("first_step_steps", "warmup_steps", "excluded_steps", "compiled_steps", "timed_steps")
    assert sum(steps[k] for k in kinds) == 3 * (1437 // 64)
    assert data["trace"]["error"] is None and data["trace"]["files"]
    assert data["trace"]["traced_steps"] == [4, 12]
    epochs = data["ledger"]["memory"]["epochs"]  # train begin, then each epoch's end
    assert [e["epoch"] for e in epochs] == [None, 0, 1, 2] and all(
        e["host_mb"] > 10 for e in epochs
    )
    # Steps begun by each end: the epochs before it, then its own counted a call of 4 at a
    # time (its last call, of 2, too).
    per, begun = 1437 // 64, -(-(1437 // 64) // 4) * 4
    assert [e["step"] for e in epochs[1:]] == [per * n + begun for n in (0, 1, 2)]
    assert "trace: steps 4–11 (8)" in out.stdout  # [4, 12): eight steps, as counted below
    # Read back with XProf: one marker per execution of 4 steps, each run in Keras's loop (a
    # tf.while_loop, folded into the marked steps for XProf): a row per call, times per step.
    analysis = data["trace"]["analysis"]
    assert data["trace"]["marked_steps"] == 2
    assert len(analysis["steps"]) == 2 and analysis["steps_per_row"] == 4, analysis
    assert "one call of 4 steps" in analysis["error"] and analysis["verdict"] is not None
    assert "trace steps: 8 marked in 2 calls of 4" in out.stdout
    assert analysis["top_ops"]["host"] and "top host ops" in out.stdout
    assert "Top host ops by self time" in (run_dir / "report.md").read_text()
    before = sorted(p for p in run_dir.rglob("*"))
    assert not [p for p in before if "op_stats" in p.name]  # XProf's cache: in its own copy
    again = subprocess.run(
        [sys.executable, "-m", "toolkit", "trace", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "top host ops" in again.stdout
    assert again.stderr == ""  # XProf's C++ log lines kept off the terminal
    assert sorted(p for p in run_dir.rglob("*")) == before  # a run is read, never written
    # --tensorboard: the Scalars tab gets step time, the epoch metrics, MFU and memory.
    from tests.helpers import assert_mfu, read_scalars

    train = read_scalars(run_dir / "train")
    tags = set(train)
    assert {"Step time/ms", "Step time/p50_ms", "epoch_loss", "epoch_accuracy"} <= tags
    assert "memory/host_rss_mb" in tags, tags
    assert [e.step for e in train["epoch_loss"]] == [0, 1, 2]
    # MFU where the report gives it: not from a peak measured on a machine too busy for it
    # (its runs spread over 25 %, as on a loaded CI machine; tests/helpers.assert_mfu)
    assert_mfu(data["compute"])
    if data["compute"]["mfu"] is not None:
        assert len(train["Throughput/mfu_percent"]) == 3  # a line, not one dot
    else:
        assert "Throughput/mfu_percent" not in tags, tags
    assert set(read_scalars(run_dir / "validation")) == {"epoch_loss", "epoch_accuracy"}
    # One run directory holds both TensorBoard runs and the trace (in train, as Keras puts
    # it), and the one viewing command names the report directory.
    assert list((run_dir / "train").rglob("*.xplane.pb"))
    view = f"tensorboard --logdir {tmp_path}"
    assert data["tensorboard"]["view"] == view and data["trace"]["view"] == view
    assert data["tensorboard"]["runs"] == ["train", "validation"]
    assert f"tensorboard: runs train, validation in {run_dir}; view with `{view}`" in out.stdout
    # What the real TensorBoard serves from that command (its Rust data server, as a browser
    # gets it; docs/tensorboard.md has the screenshots): the run's two runs, the headline
    # groups first, a description on every card, and the trace in the train run.
    from tests.helpers import get_json, tensorboard_server

    stamp = run_dir.name
    with tensorboard_server(tmp_path) as url:
        runs = get_json(f"{url}/data/runs", lambda got: len(got) == 2)
        assert runs == [f"{stamp}/train", f"{stamp}/validation"]
        cards = get_json(f"{url}/data/plugin/scalars/tags", lambda got: len(got) == 2)
        groups = sorted({tag.split("/")[0] for tag in cards[f"{stamp}/train"]})
        assert groups[:2] == ["Step time", "Throughput"], groups
        assert set(cards[f"{stamp}/validation"]) == {"epoch_loss", "epoch_accuracy"}
        described = [card["description"] for run in cards.values() for card in run.values()]
        assert all(len(d) > 30 for d in described), cards
        profiles = get_json(f"{url}/data/plugin/profile/runs", lambda got: bool(got))
        assert [p.rsplit("/", 1)[0] for p in profiles] == [f"{stamp}/train"]
        # The run's ledger as one stacked bar and (the trace taken apart) the step's anatomy,
        # in the Images tab of the train run.
        pictures = {"Ledger/where the time went"}
        if data["anatomy"] is not None and data["anatomy"]["error"] is None:
            pictures.add("anatomy")
        images = get_json(f"{url}/data/plugin/images/tags", lambda got: bool(got))
        assert set(images[f"{stamp}/train"]) == pictures, images


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        ("--epochs=0", "--epochs must be an integer >= 1, got 0"),
        ("--batch_size=-1", "--batch_size must be an integer >= 1, got -1"),
        ("--profile_steps=9,3", "--profile_steps must be start,stop with 0 <= start < stop"),
        ("--profile_steps=nine", "--profile_steps must be two integers"),
        ("--dtype=float64", "--precision must be one of float32"),
        ("--device=tpu", "unknown device 'tpu'"),
        ("--distribution_strategy=tpu", "--distribution_strategy must be one of default"),
        ("--log_steps=0", "--log_steps must be >= 1, got 0"),
    ],
)
def test_bad_settings_fail_with_one_clear_line(tmp_path, flag, words):
    """The one validator (TrainConfig.validate) speaks for the flags: one line, status 2."""
    out = _run([f"--report_dir={tmp_path}", flag], timeout=120)
    assert out.returncode == 2, out.stderr[-1000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and words in last, out.stderr[-1000:]
    assert "Traceback" not in out.stderr
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_an_unknown_flag_fails_at_parsing(tmp_path):
    out = _run([f"--report_dir={tmp_path}", "--no_such_flag=1"], timeout=120)
    assert out.returncode == 2, out.stderr[-1000:]
    error_lines = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1 and "no_such_flag" in error_lines[0], out.stderr[-1000:]
    assert "--help lists the flags" in error_lines[0] and "FATAL" not in out.stderr
    assert not list(tmp_path.iterdir())
