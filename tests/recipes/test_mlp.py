"""recipes/mlp.py as a user runs it: a real process, real digits, real flags and signals."""

from __future__ import annotations

import json
import os
import signal
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
            "--memory_watch",
        ]
    )
    assert out.returncode == 0, out.stderr[-2000:]
    _run_dir, data = _report(tmp_path)
    steps = data["steps"]
    assert steps["steps_per_execution"] == 4
    assert steps["first_step_steps"] + steps["warmup_steps"] + steps["excluded_steps"] + steps[
        "timed_steps"
    ] == 3 * (1437 // 64)
    assert data["trace"]["error"] is None and data["trace"]["files"]
    assert data["trace"]["traced_steps"] == [4, 12]
    assert len(data["memory"]["readings"]) == 4
    assert "trace: steps 4–12" in out.stdout


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        ("--epochs=0", "--epochs must be an integer >= 1, got 0"),
        ("--batch_size=-1", "--batch_size must be an integer >= 1, got -1"),
        ("--profile_steps=9,3", "--profile_steps must be start,stop with 0 <= start < stop"),
        ("--profile_steps=nine", "--profile_steps must be two integers"),
        ("--dtype=float64", "--dtype (precision) must be one of float32"),
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
    assert out.returncode != 0
    error_lines = [line for line in out.stderr.splitlines() if "FATAL Flags parsing error" in line]
    assert len(error_lines) == 1 and "no_such_flag" in error_lines[0], out.stderr[-1000:]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_run_leaves_a_partial_report(tmp_path, signum, status):
    """Ctrl-C or SIGTERM during fit: the run stops at the next step, prints its partial summary
    and one line saying where the partial report is, and exits as the shell would (130, 143).
    The signal is sent once training is seen to run (a step's log line), not after a sleep."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*RECIPE, f"--report_dir={tmp_path}", "--epochs=100000", "--log_steps=50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        seen = []
        for line in proc.stdout:  # blocks until the recipe prints: no timing guess
            seen.append(line)
            if line.startswith("step "):
                break
        assert proc.poll() is None, "".join(seen) + proc.stderr.read()[-2000:]
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, stderr[-2000:]
    name = signal.Signals(signum).name
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"interrupted by {name}: the partial report is in {tmp_path}")
    assert "Traceback" not in stderr and "== mlp: partial" in stdout
    run_dir, data = _report(tmp_path)
    assert data["status"] == "partial" and data["steps"]["total_steps"] > 0 and data["epochs"]
    assert data["error"].startswith("KeyboardInterrupt" if status == 130 else "TrainingInterrupted")
    assert "partial" in (run_dir / "report.md").read_text()


def test_a_missing_device_is_one_line_and_nothing_is_written(tmp_path):
    out = _run([f"--report_dir={tmp_path}", "--smoke", "--device=metal"], timeout=120)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1].startswith("error: unknown device 'metal'")
    assert "Traceback" not in out.stderr
    assert not list(tmp_path.iterdir())


def test_a_loss_that_goes_nan_is_a_failed_run_with_its_report(tmp_path):
    out = subprocess.run(
        [*RECIPE, f"--report_dir={tmp_path}", "--learning_rate=1e12"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: LossNotFinite: loss became nan in epoch 1")
    assert f"the partial report is in {tmp_path}" in last and "Traceback" not in out.stderr
    _, data = _report(tmp_path)
    assert data["status"] == "partial" and "== mlp: partial" in out.stdout


def test_a_peak_measured_on_a_busy_machine_is_measured_again(tmp_path):
    """A cached matmul peak far too low (as measured while the machine was busy) would show an
    MFU over 100 %: the run measures the peak again, and the cache keeps the higher one."""
    env = {**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path / "cache")}
    first = subprocess.run(
        [*RECIPE, "--smoke", f"--report_dir={tmp_path / 'a'}"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    (cache,) = (tmp_path / "cache").glob("*peak*.json")
    peaks = json.loads(cache.read_text())
    for record in peaks.values():
        record["flops_per_s"] /= 1e4  # "measured" on a machine far too busy
    cache.write_text(json.dumps(peaks))
    out = subprocess.run(
        [*RECIPE, "--smoke", f"--report_dir={tmp_path / 'b'}"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    (run_dir,) = (tmp_path / "b").iterdir()
    compute = json.loads((run_dir / "report.json").read_text())["compute"]
    assert compute["peak_source"].startswith("measured again") and 0 < compute["mfu"] < 1
    assert min(r["flops_per_s"] for r in json.loads(cache.read_text()).values()) > 1e8


@pytest.mark.parametrize(
    ("where", "words"),
    [("a_file", "it is a file, not a directory"), ("a_file/runs", "cannot write there")],
)
def test_a_report_dir_that_cannot_be_written_is_found_before_training(tmp_path, where, words):
    (tmp_path / "a_file").write_text("not a directory")
    out = subprocess.run(
        [*RECIPE, "--smoke", f"--report_dir={tmp_path / where}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: --report_dir={tmp_path / where}: {words}")
    assert "Traceback" not in out.stderr and "== mlp" not in out.stdout  # nothing trained
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_a_tilde_in_a_path_flag_is_the_home_directory(tmp_path):
    out = subprocess.run(
        [*RECIPE, "--smoke", "--report_dir=~/runs"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(list((tmp_path / "home" / "runs").iterdir())) == 1
    assert not (tmp_path / "~").exists()


@pytest.fixture
def small_disk(tmp_path):
    """A real filesystem of a few KiB (tmpfs), where this machine lets the tests mount one."""
    mounted = []

    def make(size: str):
        where = tmp_path / f"disk-{size}"
        where.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()[:200]}")
        mounted.append(where)
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", str(where)], capture_output=True)


@pytest.mark.parametrize(("size", "status"), [("4k", 1), ("16k", 0)])
def test_a_full_disk_keeps_the_summary_and_says_what_was_lost(small_disk, size, status):
    """4 KiB: not even the JSON fits: the summary is on stdout, one line says the report could
    not be written, exit 1, no run directory left behind. 16 KiB: JSON and Markdown fit, the
    plot does not: the run says the PNG was not written, and report.md says why."""
    disk = small_disk(size)
    out = subprocess.run(
        [*RECIPE, "--smoke", f"--report_dir={disk}"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == status, out.stderr[-2000:]
    assert "== mlp: complete" in out.stdout and "step time:" in out.stdout
    assert "Traceback" not in out.stderr
    if status:
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith("error: the report could not be written under")
        assert "No space left on device" in last and list(disk.iterdir()) == []
    else:
        assert "png: not written (report.md says why)" in out.stdout
        (run_dir,) = disk.iterdir()
        assert "no plot: OSError" in (run_dir / "report.md").read_text()
