"""``toolkit.fits`` and ``python -m toolkit memory`` (issue 67, part 3): peaks measured in
real fresh processes on real fits, the line through them against a batch it never measured,
and the edges: a limit below one batch, a fresh process the kernel's out-of-memory killer
would end (SIGKILL), bad flags before TensorFlow loads, 80 columns. The line itself, the
limit's units and the record's words are checked on values, without a process."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from toolkit.search import memory_fit as mf
from toolkit.search._processes import ChildResult

# Your module, as a user writes it: a model whose activations grow with the batch (six layers
# of 512 × 64 floats an example, cheap to compute), and one whose layer ends its own process
# with SIGKILL, as the kernel's out-of-memory killer would, once a batch reaches 64 examples.
MODELS = """
import os
import signal

import numpy as np


def _data(n=256):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 512, 16)).astype("float32")
    return x, rng.integers(0, 10, n).astype("int32")


def _compiled(keras, inputs, x, run_eagerly=False):
    x = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(inputs, keras.layers.Dense(10)(x))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="sgd", loss=loss, run_eagerly=run_eagerly)
    return model


def sized():
    import keras

    inputs = keras.Input((512, 16))
    x = inputs
    for _ in range(6):
        x = keras.layers.Dense(64, activation="relu")(x)
    return _compiled(keras, inputs, x), _data()


def dies_at_64():
    import keras

    class DiesAt64(keras.layers.Layer):
        def call(self, x):
            if x.shape[0] is not None and x.shape[0] >= 64:
                os.kill(os.getpid(), signal.SIGKILL)
            return x

    inputs = keras.Input((512, 16))
    x = DiesAt64()(keras.layers.Dense(8)(inputs))
    return _compiled(keras, inputs, x, run_eagerly=True), _data(64)
"""


@pytest.fixture
def models(tmp_path, monkeypatch):
    """The module above, importable here and in the fresh processes (``memfit_models``)."""
    (tmp_path / "memfit_models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLKIT_PROGRESS", "0")
    return tmp_path


def _memory(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "TOOLKIT_PROGRESS": "0", "KERAS_BACKEND": "tensorflow"}
    return subprocess.run(
        [sys.executable, "-m", "toolkit", "memory", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip


# ---------------------------------------------------------------------------- real processes


@pytest.mark.long
def test_fits_draws_its_line_through_the_peaks_it_measured_in_fresh_processes(models):
    """The line is the least-squares line through the three fresh processes' peaks, its fit
    said from their residuals. How close it predicts a batch it never measured (within 15 %)
    is a measurement on a loaded machine: benchmarks/memory.py prints it as a ratio."""
    found = mf.fits("memfit_models:sized", batch_sizes=(256, 384, 512), steps=2, check=False)
    assert [p.batch_size for p in found.points] == [256, 384, 512]
    assert all(p.ok and p.memory == mf.HOST for p in found.points), found.points
    assert {p.examples for p in found.points} == {256}  # sized's data, as the child saw it
    line = found.line
    assert line is not None and line.points == 3 and line.span == 256, line
    assert line == mf.PeakLine.through([(p.batch_size, p.peak_mb) for p in found.points])
    residuals = [abs(p.peak_mb - line.at(p.batch_size)) for p in found.points]
    assert line.worst_mb == pytest.approx(max(residuals), abs=1e-9)
    # least squares: the residuals sum to zero, the line passes through the mean point
    mean_batch = sum(p.batch_size for p in found.points) / 3
    assert line.at(mean_batch) == pytest.approx(sum(p.peak_mb for p in found.points) / 3)
    assert found.check is None and found.ratio is None  # check=False: no fourth process


def test_fits_refuses_a_limit_below_one_batch_in_one_line_with_the_smallest_peak(models):
    import memfit_models

    model, (x, y) = memfit_models.sized()  # your model in memory: handed over as .keras
    with pytest.raises(ValueError) as refused:
        mf.fits(model, (x[:64], y[:64]), limit="1MB", batch_sizes=(8, 16), steps=1)
    said = str(refused.value)
    assert "\n" not in said, said
    assert said.startswith(
        "--memory_limit (limit): 1.00 MB (given) is below what one batch needs: the smallest "
        "measured peak is "
    ), said
    assert " at batch 8, and the line puts batch 1 at " in said, said


def test_fits_says_in_one_line_that_a_model_keras_cannot_save_needs_a_function(keras):
    """keras.io's VAE takes its encoder and decoder in ``__init__`` and has no
    ``get_config``: Keras cannot save it for the fresh processes (its error is a page of
    example code). fits says so in one line, with what to do, before any process starts."""
    import numpy as np

    class Wrapped(keras.Model):
        def __init__(self, inner, **kwargs):
            super().__init__(**kwargs)
            self.inner = inner

        def call(self, x):
            return self.inner(x)

    model = Wrapped(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((64, 4), "float32")
    with pytest.raises(ValueError) as refused:
        mf.fits(model, (x, x[:, :2]), limit="1GB", batch_sizes=(8, 16), steps=1)
    said = str(refused.value)
    assert "\n" not in said and said.startswith("fits(model, data): Keras cannot save your Wrapped")
    assert "get_config" in said and "fits(build)" in said, said


def test_memory_verb_says_a_process_killed_by_sigkill_ran_out_of_memory_at_its_batch(models):
    done = _memory("--model_fn", "memfit_models:dies_at_64", "--batch_sizes=16,64",
                   "--steps=1", "--memory_limit=4GB", cwd=models)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    rows = {r.split()[0]: r.split()[1:] for r in done.stdout.splitlines() if r.split()}
    assert rows["16"][1] == "MB", rows  # measured
    assert rows["64"] == ["—", "out", "of", "memory"], rows
    said = " ".join(done.stdout.split())
    assert "largest batch: not predicted (out of memory at batch 64 (killed by SIGKILL" in said


@pytest.mark.long
def test_memory_verb_checks_its_prediction_within_80_columns_and_writes_its_record(models):
    """40-60 s on 2 cores, by what it checks: the verb as a user runs it, a fresh process
    for each batch it measures, then one at the batch it predicts fits under the limit (and
    more where a loaded machine's peak lands over it), each importing TensorFlow."""
    out = models / "reports"
    done = _memory("--model_fn", "memfit_models:sized", "--batch_sizes=256,512", "--steps=1",
                   "--memory_limit=1.8GB", f"--report_dir={out}", cwd=models)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    wide = [x for x in lines if len(x) > 80 and not x.startswith("written: ")]
    assert not wide, wide
    assert lines[0].startswith("memory: --model_fn memfit_models:sized on tensorflow: peak")
    assert any(x.startswith("line: peak ≈ ") for x in lines), done.stdout
    assert any(x.startswith("check: batch ") for x in lines), done.stdout
    (written,) = list(out.glob("memory-*.json"))
    record = json.loads(written.read_text())
    assert record["limit_mb"] == pytest.approx(1.8 * 1024) and record["limit_from"] == "given"
    # the answer is a batch a fresh process ran under the limit: the prediction checked, or
    # where the refits ran out over it (a loaded machine), the largest measured under it
    assert record["batch_size"] >= 512 and record["check"]["batch_size"] == record["batch_size"]
    assert record["under_limit"] is True
    assert record["ratio"] == pytest.approx(record["predicted_mb"] / record["check"]["peak_mb"])


def _memory_cli(*argv: str) -> subprocess.CompletedProcess:
    """``memory --recipe mlp`` with `argv`, as the program runs it, in a fresh process that
    prints whether TensorFlow was loaded before it exits with the verb's status."""
    code = (
        "import sys\n"
        "from toolkit import cli\n"
        f"status = cli.main(['memory', '--recipe', 'mlp', *{list(argv)!r}])\n"
        "print('tensorflow loaded' if 'tensorflow' in sys.modules else 'no tensorflow')\n"
        "sys.exit(status)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--memory_limit=lots"], "memory: --memory_limit (limit) must be a size above 0 in MiB"),
        (["--memory_limit=0"], "memory: --memory_limit (limit) must be a size above 0 in MiB"),
        (["--batch_sizes=32"], "memory: --batch_sizes (batch_sizes) must be two different"),
        (["--batch_sizes=32,x"], "memory: --batch_sizes must be integers >= 1, comma-separated"),
        (["--batch_sizes=0,8"], "memory: --batch_sizes (batch_sizes) must be an integer >= 1"),
        (["--steps=0"], "memory: --steps (steps) must be an integer >= 1, got 0"),
        # the recipe's own --batch_size goes on to the recipe: not a prefix of --batch_sizes
        (["--batch_size=abc"], "flag --batch_size=abc: invalid literal for int()"),
    ],
)
def test_memory_verb_refuses_a_bad_flag_in_one_line_before_tensorflow_loads(argv, said):
    done = _memory_cli(*argv)
    assert done.returncode == 2, done.stderr
    assert done.stdout.strip() == "no tensorflow"
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {said}"), line


# ---------------------------------------------------------------------------- on values


def test_peak_line_is_least_squares_and_says_how_well_it_fits():
    line = mf.PeakLine.through([(32, 900.0), (64, 964.0), (128, 1092.0)])
    assert line.base_mb == pytest.approx(836.0) and line.per_example_mb == pytest.approx(2.0)
    assert line.r2 == pytest.approx(1.0) and line.worst_pct == pytest.approx(0.0, abs=1e-9)
    assert line.at(1000) == pytest.approx(2836.0)
    assert line.largest_under(1836.0) == 500 and line.largest_under(800.0) < 1
    assert line.words() == "peak ≈ 836 MB + 2.00 MB × batch (3 points: R² 1.0000, each within 0.0%)"
    two = mf.PeakLine.through([(32, 900.0), (64, 964.0)])
    assert two.r2 is None and "exact through two, untested" in two.words()
    flat = mf.PeakLine.through([(32, 900.0), (64, 899.0), (128, 900.0)])
    assert not flat.grows and flat.largest_under(2000.0) is None  # within the noise
    with pytest.raises(ValueError, match="two different batch sizes"):
        mf.PeakLine.through([(32, 900.0), (32, 901.0)])


def test_parse_limit_reads_binary_units_as_the_toolkit_prints_them():
    assert mf.parse_limit(None) is None and mf.parse_limit(512) == 512.0
    assert mf.parse_limit("4096") == mf.parse_limit("4GB") == mf.parse_limit("4 GiB") == 4096.0
    assert mf.parse_limit("1.5gb") == 1536.0 and mf.parse_limit("512MB") == 512.0
    for bad in ("4 bananas", "-1GB", "", True, float("nan"), 0):
        with pytest.raises(ValueError, match=r"^--memory_limit \(limit\) must be"):
            mf.parse_limit(bad)


def test_peak_of_a_process_killed_by_sigkill_is_out_of_memory_at_its_batch():
    killed = ChildResult(error="killed by SIGKILL", interrupted=True, signal="SIGKILL")
    peak = mf.MemoryPeak.of(512, killed)
    assert peak.out_of_memory and not peak.ok
    assert peak.words().startswith("out of memory at batch 512 (killed by SIGKILL")
    said = "ResourceExhaustedError: OOM when allocating tensor with shape[512,512,1024]"
    assert mf.MemoryPeak.of(512, ChildResult(error=said)).out_of_memory
    crashed = mf.MemoryPeak.of(8, ChildResult(error="crashed (SIGSEGV)", signal="SIGSEGV"))
    assert not crashed.out_of_memory and crashed.words().startswith("batch 8 failed")
    answered = mf.MemoryPeak(64, 812.5, "GPU:0", 81559.0)
    assert mf.MemoryPeak.of(64, ChildResult(answered.to_dict())) == answered


def test_a_child_past_its_host_cap_is_stopped_as_out_of_memory_at_its_batch():
    """A fresh process that keeps taking RAM is killed once its resident memory passes the
    cap (``_processes._HostCap``), before it can take the host's: the result says so and
    reads as out of memory at its batch. The child would hold on for two minutes otherwise:
    the test waits on the watch, not on a timer."""
    from toolkit.search._processes import follow

    grows = ("import time\nheld = []\nfor _ in range(64):\n"
             "    held.append(bytearray(16 * 2**20)); time.sleep(0.02)\n"
             "time.sleep(120)")  # fmt: skip
    ended = follow([sys.executable, "-c", grows], dict(os.environ), 300.0, lambda _l: None,
                   host_cap_mb=160.0)  # fmt: skip
    assert ended.over_mb is not None and ended.over_mb[0] > 160.0 == ended.over_mb[1]
    got = ended.result(None, 300.0)
    assert not got.ok and not got.interrupted
    assert got.error.startswith("out of memory: its resident memory reached ")
    peak = mf.MemoryPeak.of(26656, got)
    assert peak.out_of_memory and peak.words().startswith("out of memory at batch 26,656")
    # under its cap, a child runs to its end
    ended = follow([sys.executable, "-c", "pass"], dict(os.environ), 300.0, lambda _l: None,
                   host_cap_mb=4096.0)  # fmt: skip
    assert ended.over_mb is None and ended.returncode == 0


def test_batch_fit_screen_fits_80_columns_and_its_record_reads_as_json():
    from toolkit.core import terminal

    line = mf.PeakLine.through([(32, 900.0), (64, 964.0), (128, 1092.0)])
    points = (mf.MemoryPeak(32, 900.0), mf.MemoryPeak(64, 964.0), mf.MemoryPeak(128, 1092.0))
    check = mf.MemoryPeak(1456, 3790.0)
    found = mf.BatchFit("recipe cnn", "tensorflow", mf.HOST, 4, points, line, 3750.0, "given",
                        1456, line.at(1456), check)  # fmt: skip
    assert found.ratio == pytest.approx(3748.0 / 3790.0) and found.under_limit is False
    shown = terminal.show(found.screen(), 80)
    assert max(len(x) for x in shown.splitlines()) <= 80, shown
    said = " ".join(shown.split())
    assert "check: batch 1,456 measured at 3.70 GB, predicted vs measured 0.99×, OVER the" in said
    # its own check ran over the limit: no answer is claimed
    assert "largest batch: none found under the limit: the predicted 1,456" in said
    assert "largest batch predicted to fit" not in said
    record = json.loads(json.dumps(found.to_dict()))
    assert record["points"][2] == points[2].to_dict() and record["check"]["peak_mb"] == 3790.0
    assert record["line"]["per_example_mb"] == pytest.approx(2.0)


def test_a_prediction_past_the_data_or_far_past_the_batches_measured_says_so():
    """A small model on 2,000 examples: the line puts the limit at a batch far beyond
    anything measured and beyond the data (a keras.io FeatureSpace model read 5,309,733):
    the screen says the data never makes such a batch, and, unchecked, how far it reached."""
    from toolkit.core import terminal

    sizes = (32, 64, 16384)
    points = tuple(mf.MemoryPeak(b, 700.0 + b * 0.001, examples=2000) for b in sizes)
    line = mf.PeakLine.through([(p.batch_size, p.peak_mb) for p in points])
    found = mf.BatchFit("your model 'fs'", "tensorflow", mf.HOST, 4, points, line, 6000.0,
                        "given", 5_309_733, line.at(5_309_733), None)  # fmt: skip
    said = " ".join(terminal.show(found.screen(), 80).split())
    assert "data: your data holds 2,000 examples, fewer than the batch" in said, said
    assert "reach: 324× the largest batch measured (16,384), read off the line and not" in said
    checked = dataclasses.replace(found, batch_size=20_000, check=mf.MemoryPeak(20_000, 720.0))
    said = " ".join(terminal.show(checked.screen(), 80).split())
    assert "holds 2,000 examples" in said and "reach:" not in said  # a check ran it
    near = dataclasses.replace(found, batch_size=1500)
    assert not any(b.startswith(("data:", "reach:")) for b in near.screen() if isinstance(b, str))
    # So far past the data (over FAR times it), no run checks it: a 512-example model's check
    # of 24,190 held 15.9 GB of a CPU host's RAM for minutes; nearer it, a check may run.
    unrun = " ".join(terminal.show(found.screen(), 80).split())
    assert mf._far_past_the_data(found) and "(measure --batch_sizes nearer it)" in unrun
    assert not mf._far_past_the_data(dataclasses.replace(found, batch_size=mf.FAR * 2000))
    assert mf.MemoryPeak.from_dict(points[0].to_dict()) == points[0]


def test_a_limit_above_this_host_s_ram_is_said_on_the_limit_line():
    import psutil

    total = psutil.virtual_memory().total / 2**20
    points = (mf.MemoryPeak(32, 900.0), mf.MemoryPeak(64, 964.0))
    limit, said = mf._limit(total * 40, points)
    assert limit == total * 40
    assert said.startswith("given; more than this host's ") and "of RAM" in said
    assert mf._limit(512.0, points) == (512.0, "given")
    on_gpu = (
        mf.MemoryPeak(32, 900.0, "GPU:0", 81559.0),
        mf.MemoryPeak(64, 964.0, "GPU:0", 81559.0),
    )
    assert mf._limit(total * 40, on_gpu) == (total * 40, "given")  # the device's, not the host's


def test_memory_verb_refuses_a_report_dir_that_is_a_file_before_measuring(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("x")
    done = _memory_cli(f"--report_dir={path}")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: --report_dir={path}: it is a file, not a directory"), line
    assert "memory: batch" not in done.stdout + done.stderr  # nothing measured


def test_an_answer_over_the_limit_steps_down_to_the_largest_batch_measured_under_it():
    """The refits ran out with the last check 66 MB over the limit (a loaded machine): the
    answer is the largest batch a fresh process measured under it, never the one over."""
    points = (mf.MemoryPeak(256, 1208.0), mf.MemoryPeak(512, 1546.0), mf.MemoryPeak(734, 1690.0))
    line = mf.PeakLine.through([(p.batch_size, p.peak_mb) for p in points])
    over = mf.MemoryPeak(853, 1909.0)
    found = mf.BatchFit("m", "tensorflow", mf.HOST, 1, points, line, 1843.2, "given", 853,
                        line.at(853), over)  # fmt: skip
    assert found.under_limit is False
    got = mf._under(found)
    assert got.batch_size == 734 and got.check == points[2] and got.under_limit is True
    assert over in got.points and points[2] not in got.points  # shown, the answer checked
    assert "the prediction 853 ran 65.8 MB over the limit when run (1.86 GB)" in got.why
    assert (
        mf._under(dataclasses.replace(found, points=(mf.MemoryPeak(256, 1900.0),))).batch_size
        == 853
    )


def test_a_batch_larger_than_a_recipe_s_data_is_measured_on_synthetic_batches():
    """``memory --recipe mlp`` dead-ended: its 32-128 peaks grew within the noise, and the
    larger batches that would tell were refused (the digits hold 1,437 examples). A batch past
    the data is measured on random batches of its shapes, and the screen says which."""
    from toolkit.core import terminal
    from toolkit.runner.config import TrainConfig
    from toolkit.search.standings import Target
    from toolkit.search.workload import peak_at
    from toolkit.verbs._target import made

    task, data = made(Target.of("mlp", config={}))
    config = TrainConfig(batch_size=2048).validate()
    got = peak_at(task, data, config, steps=1)
    assert got.ok and got.synthetic and got.peak_mb > 0, got
    assert mf.MemoryPeak.from_dict(json.loads(json.dumps(got.to_dict()))) == got
    points = (mf.MemoryPeak(32, 900.0), dataclasses.replace(got, peak_mb=1100.0))
    line = mf.PeakLine.through([(32, 900.0), (2048, 1100.0)])
    found = mf.BatchFit("recipe mlp", "tensorflow", mf.HOST, 1, points, line, None, "", None,
                        None, None)  # fmt: skip
    shown = " ".join(terminal.show(found.screen(), 80).split())
    assert "synthetic: batches larger than the training data" in shown, shown
    real = peak_at(task, data, TrainConfig(batch_size=64).validate(), steps=1)
    assert real.ok and not real.synthetic


def test_fits_measures_further_where_the_default_sizes_peak_within_the_noise():
    flat = mf.PeakLine.through([(32, 900.0), (64, 901.0), (128, 902.0)])
    points = (mf.MemoryPeak(32, 900.0), mf.MemoryPeak(64, 901.0), mf.MemoryPeak(128, 902.0))
    found = mf.BatchFit("m", "tensorflow", mf.HOST, 1, points, flat, 2000.0, "given", None,
                        None, None)  # fmt: skip
    assert not flat.grows and mf._flat(found)
    oom = dataclasses.replace(found, points=(*points, mf.MemoryPeak(256, out_of_memory=True)))
    assert not mf._flat(oom)  # larger would run out too: nothing further to measure
    grows = mf.PeakLine.through([(32, 900.0), (64, 964.0), (128, 1092.0)])
    assert not mf._flat(dataclasses.replace(found, line=grows))
    # further: where the flat line puts 4x the noise above its first peak (1 KB an example:
    # 64 MB at batch 65,536), within 256x to 2,048x the run's batch
    kb = mf.PeakLine.through([(32, 900.0), (64, 900.03125), (128, 900.09375)])
    assert mf._further(dataclasses.replace(found, line=kb), 32) == (65_536, 131_072)
    assert mf._further(found, 32) == (8_192, 16_384)  # 0.02 MB an example: 3,186, raised
    falling = dataclasses.replace(flat, per_example_mb=-1.0)
    assert mf._further(dataclasses.replace(found, line=falling), 32) == (8_192, 16_384)


class _Curve(mf._Runs):
    """Fresh processes on a known curve: each batch's peak is `truth(batch)`; records the
    batches run, in order (no process is started)."""

    def __init__(self, truth):
        self.target, self.env, self.steps, self.timeout_s = "m", {}, 1, 1.0
        self.say, self.backend, self.truth, self.ran = (lambda line: None), "tensorflow", truth, []

    def peak(self, batch, what="measuring"):
        self.ran.append(batch)
        return mf.MemoryPeak(batch, self.truth(batch))


def test_a_prediction_far_past_the_batches_measured_is_approached_before_it_is_checked():
    """keras.io's Distiller peaked at 887-913 MB over batches 64-256: the line put the
    answer at 159,715, whose check ran to the host's cap, and the answer fell back to 256.
    Here the first points read a slope half the true one: the batches measured on the way
    (each the geometric mean of the largest measured and the prediction) bring the answer to
    the true curve's, and the check runs it, not a batch past it."""
    truth = lambda b: 860.0 + 0.25 * b  # noqa: E731 - the curve the fresh processes follow
    points = (mf.MemoryPeak(64, 887.0), mf.MemoryPeak(128, 900.0), mf.MemoryPeak(256, 913.0))
    runs = _Curve(truth)
    found = mf._predicted("m", runs, points, 16_000.0, "given")
    assert found.batch_size > mf.FAR * 256  # the reach: far past what was measured
    approached = mf._toward(found, runs)
    answer = (16_000.0 - 860.0) / 0.25  # the true curve's largest batch under the limit
    assert abs(approached.batch_size - answer) <= 0.01 * answer, approached
    assert 2 <= len(runs.ran) <= mf.REACH_RUNS and max(runs.ran) < answer, runs.ran
    assert runs.ran[0] == round((256 * found.batch_size) ** 0.5)  # the geometric mean
    assert f"{found.batch_size:,} first predicted: measured batch" in approached.why
    runs.ran.clear()
    mf._checked(approached, runs)
    assert runs.ran[0] == approached.batch_size and max(runs.ran) == runs.ran[0], runs.ran
    near = mf._predicted("m", runs, (*points, mf.MemoryPeak(8_192, truth(8_192))), 4_000.0, "")
    runs.ran.clear()
    assert mf._toward(near, runs) is near and runs.ran == []  # within FAR: checked as it is
    oom = _Curve(lambda b: truth(b) if b < 5_000 else None)
    oom.peak = lambda b, what="": oom.ran.append(b) or mf.MemoryPeak(b, out_of_memory=True)
    bounded = mf._toward(found, oom)
    assert bounded.batch_size < oom.ran[0], (bounded, oom.ran)  # below the batch that failed


def test_a_last_check_over_the_limit_is_backed_off_before_the_answer_falls_back():
    """keras.io's VAE: its refitted prediction 1,108 ran 5.81 MB over a 1.2 GB limit, and
    the answer fell back to 372, the largest batch measured under it, where about 1,090 fit.
    Here the peaks step up 8 MB past batch 1,000 (as a larger buffer's allocation would):
    both checks land just over the limit, the third, backed off below it by the miss, fits."""
    truth = lambda b: 770.0 + 0.41 * b + (8.0 if b > 1_000 else 0.0)  # noqa: E731
    points = tuple(mf.MemoryPeak(b, truth(b)) for b in (32, 64, 128, 372))
    runs = _Curve(truth)
    found = mf._predicted("m", runs, points, 1228.8, "given")
    got = mf._checked(found, runs)
    assert len(runs.ran) == 3 and runs.ran[-1] < runs.ran[-2] < runs.ran[0], runs.ran
    assert got.batch_size == runs.ran[-1] > 1_000 and got.under_limit is True, got
    assert truth(got.batch_size) <= 1228.8 < truth(runs.ran[-2])
    assert f"the prediction {runs.ran[-2]:,} ran " in got.why and "backed off by" in got.why
    over = _Curve(lambda b: truth(b) if b <= 372 else 1300.0)  # every check over it
    fell = mf._checked(mf._predicted("m", over, points, 1228.8, "given"), over)
    assert fell.batch_size == 372 and fell.under_limit is True, (fell, over.ran)


def test_fits_measures_a_function_s_pipeline_at_its_own_batch_when_none_is_given(monkeypatch):
    """keras.io's weather model, batched by 256 in its function, was measured at 32, 64 and
    128 by ``memory --model_fn``: the flag's default, a batch its run never reads. With no
    batch size given, the first fresh process reads your pipeline's (``peak_at``'s `own`),
    and the defaults are it, twice and four times it; a given one is kept."""
    import types

    import keras
    import numpy as np
    import tensorflow as tf

    from toolkit.runner.config import TrainConfig
    from toolkit.search.standings import Target
    from toolkit.search.workload import peak_at
    from toolkit.verbs._target import Parsed

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((192, 4), "float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :2])).batch(48)
    config = TrainConfig().validate()
    assert peak_at(model, data, config, steps=1, own=True).batch_size == 48
    assert peak_at(model, data, config, steps=1).batch_size == config.batch_size

    class Pipeline(_Curve):  # the first process answers the batch it read
        def peak(self, batch, what="measuring"):
            self.ran.append(batch)
            return mf.MemoryPeak(batch or 48, self.truth(batch or 48))

    runs = Pipeline(lambda b: 900.0 + b)
    monkeypatch.setattr(mf, "_Runs", lambda *args: runs)
    found = mf.fits("memfit_models:sized", check=False)
    assert runs.ran == [None, 96, 192], runs.ran
    assert [p.batch_size for p in found.points] == [48, 96, 192]
    runs.ran.clear()
    mf.fits("memfit_models:sized", config={"batch_size": 16}, check=False)
    assert runs.ran == [16, 32, 64], runs.ran
    # the verb: --batch_size left out of a --model_fn target's config unless given
    target = Target(None, "m:f", {}, {"batch_size": 32, "steps": 5})
    flag = {"batch_size": types.SimpleNamespace(present=False, value=32)}
    assert Parsed("", flag, None, target).batch_left_to_data().config == {"steps": 5}
    flag["batch_size"].present = True
    assert Parsed("", flag, None, target).batch_left_to_data() is target
    recipe = dataclasses.replace(target, recipe="mlp", model_fn=None)
    assert Parsed("", {}, None, recipe).batch_left_to_data() is recipe
