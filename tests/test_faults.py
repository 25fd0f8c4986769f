"""Faults and bad input, as a user meets them: real processes, real files, real signals.

What every case promises: one line saying what was wrong and what to do, naming the file or
flag; the right exit status (1 a failed run, 2 a usage error, 130 SIGINT, 143 SIGTERM); no
traceback unless ``--verbosity=1`` asks for it; nothing measured lost (the summary on stdout, a
partial report where one could be written); nothing left behind by a run that never started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import assert_mfu, read_until, run_child, run_python, signals_at
from toolkit import app
from toolkit.data import check_tfrecords, write_tfrecords

RECIPE = [sys.executable, "-m", "recipes.mlp"]
CNN = [sys.executable, "-m", "recipes.cnn"]


def _run(args, timeout=300, **kwargs):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **kwargs.pop("env", {})}
    command = args if args[:1] == [sys.executable] else [*RECIPE, *args]
    return run_child(command, timeout, env, **kwargs)


def _report(report_dir):
    (run_dir,) = [p for p in report_dir.iterdir() if p.is_dir()]
    return run_dir, json.loads((run_dir / "report.json").read_text())


def _last(out):
    return out.stderr.strip().splitlines()[-1]


# ---------------------------------------------------------------------------- signals, NaN, peak


@pytest.mark.parametrize(
    ("signum", "status"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGQUIT, 131)],
)
def test_interrupted_run_leaves_a_partial_report(tmp_path, signum, status):
    """Ctrl-C, SIGTERM, a closed terminal (SIGHUP) or Ctrl-\\ (SIGQUIT) during fit: the run
    stops at the next step, prints its partial summary and one line saying where the partial
    report is, and exits as the shell would (128 + the signal's number). The signal is sent
    once training is seen to run (a step's log line), not after a sleep."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        signals_at([*RECIPE, f"--report_dir={tmp_path}", "--epochs=100000", "--log_steps=50"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        # No timing guess: it printed a step line (on stderr: stdout is for results).
        seen, said = read_until(proc, "step ", timeout=300, stream="stderr")
        if not seen or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"no step in 300 s, or it ended:\n{said[-2000:]}{proc.stdout.read()}")
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
    runs = tmp_path / "new" / "runs"  # not there yet: the failed run must not make it
    out = _run([f"--report_dir={runs}", "--smoke", "--device=metal"], timeout=120)
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
    assert last.startswith("error: LossNotFinite: loss became nan at step 2 of epoch 1")
    assert f"the report is in {tmp_path}" in last and "Traceback" not in out.stderr
    _, data = _report(tmp_path)
    assert data["status"] == "diverged" and "== mlp: diverged" in out.stdout


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
    for entry in peaks.values():  # the one keyed cache: {"facts", "result", "stored"}
        # "measured" on a machine far too busy, yet steady: a settled peak is read from the
        # cache (one spread out is measured again before the run whatever this test's load)
        entry["result"].update(flops_per_s=entry["result"]["flops_per_s"] / 1e4, spread_pct=0.0)
    cache.write_text(json.dumps(peaks))
    out = subprocess.run(
        [*RECIPE, "--smoke", f"--report_dir={tmp_path / 'b'}"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    (run_dir,) = (tmp_path / "b").iterdir()
    compute = json.loads((run_dir / "report.json").read_text())["compute"]
    assert compute["peak_source"].startswith("measured again")
    assert_mfu(compute)
    assert min(e["result"]["flops_per_s"] for e in json.loads(cache.read_text()).values()) > 1e8


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


def test_a_report_dir_past_the_file_system_s_limits_is_said_before_anything_loads(tmp_path):
    """A 260-byte name, and a path whose run files would pass the longest path: one line
    naming the flag, exit 1, before TensorFlow loads (no "loading" line), nothing made."""
    for where, words in (
        (tmp_path / ("r" * 260), "is 260 bytes, more than the 255 a file name can have here"),
        (tmp_path.joinpath(*["d" * 200] * 20), "would pass the 4096 a path can have here"),
    ):
        out = subprocess.run(
            [*RECIPE, "--smoke", f"--report_dir={where}"], capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert out.returncode == 1, out.stderr[-2000:]
        assert out.stderr.strip().splitlines() == [out.stderr.strip()], out.stderr
        assert out.stderr.startswith("error: --report_dir: ") and words in out.stderr
        assert list(tmp_path.iterdir()) == []


def test_runs_started_together_with_one_new_report_dir_all_pass_its_check(tmp_path):
    """The workers of a cluster start at once with the same --report_dir: each one's check
    must pass, whatever the others' checks are doing, and leave nothing behind."""
    from toolkit.runner.task import check_report_dir

    n, rounds = 8, 40
    barrier, failures = threading.Barrier(n), []

    def check(where):
        barrier.wait()
        try:
            check_report_dir(str(where))
        except Exception as e:  # noqa: BLE001 - every failure is collected and shown
            failures.append(repr(e))

    for r in range(rounds):
        where = tmp_path / f"round{r}" / "runs"
        threads = [threading.Thread(target=check, args=(where,)) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert not failures, failures[:3]
    assert list(tmp_path.iterdir()) == []


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


@pytest.mark.parametrize(("size", "status"), [("4k", 1), ("32k", 0)])
def test_a_full_disk_keeps_the_summary_and_says_what_was_lost(small_disk, size, status):
    """4 KiB: not even the JSON fits: the summary is on stdout, one line says the report could
    not be written, exit 1, no run directory left behind. 32 KiB: JSON and Markdown fit (about
    17 KiB with the memory's timeline), the plot (about 70 KiB) does not: the run says the PNG
    was not written, and report.md says why."""
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


def _images(root, counts, kind="png"):
    """`counts[name]` real 8×8 RGB images per class folder, PNG or JPEG."""
    import tensorflow as tf

    encode = {"png": tf.io.encode_png, "jpg": tf.io.encode_jpeg}[kind]
    rng = np.random.default_rng(0)
    for name, n in counts.items():
        (root / name).mkdir(parents=True)
        for i in range(n):
            pixels = tf.constant(rng.integers(0, 255, size=(8, 8, 3)), tf.uint8)
            tf.io.write_file(str(root / name / f"{i}.{kind}"), encode(pixels))


@pytest.mark.parametrize(
    ("counts", "args", "words"),
    [
        ({"cat": 6}, [], "one class only (cat): a classifier learns nothing from it"),
        # 3 images, every 5th held out: 2 to train on
        ({"a": 2, "b": 1}, ["--batch_size=64"], "--batch_size=64 is larger than the 2 training"),
        ({"a": 1, "b": 0}, ["--batch_size=1"], "1 image(s), all held out for validation"),
    ],
)
def test_a_folder_too_small_to_train_on_is_one_line_before_training(tmp_path, counts, args, words):
    _images(tmp_path / "img", counts)
    out = _run(
        [*CNN, "--smoke", f"--dataset=folder:{tmp_path / 'img'}", "--image_size=8",
        "--channels=3", f"--report_dir={tmp_path / 'runs'}", *args,]
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and words in last and "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())
    assert "loading TensorFlow" not in out.stderr  # said before any framework loads


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("notes.png", b"just some text\n", "is not an image of that kind"),
        ("empty.jpg", b"", "is an empty file"),
    ],
)
def test_a_file_that_is_not_the_image_its_name_says_is_named(tmp_path, name, content, words):
    _images(tmp_path / "img", {"a": 3, "b": 3})
    (tmp_path / "img" / "b" / name).write_bytes(content)
    out = _run(
        [*CNN, "--smoke", f"--dataset=folder:{tmp_path / 'img'}", "--image_size=8",
        "--channels=3", "--batch_size=2", f"--report_dir={tmp_path / 'runs'}",]
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert str(tmp_path / "img" / "b" / name) in last and words in last
    assert "Traceback" not in out.stderr and "loading TensorFlow" not in out.stderr


def test_a_recipe_with_no_dispatcher_fails_in_one_line(tmp_path):
    out = subprocess.run(
        [*RECIPE, "--smoke", f"--report_dir={tmp_path}",
         "--data_service=grpc://localhost:1", "--data_service_wait=2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --data_service=grpc://localhost:1: no dispatcher answered")
    assert "within 2 s" in last  # --data_service_wait, not the 20 s default
    assert "Traceback" not in out.stderr and not list(tmp_path.iterdir())  # nothing left behind


# ---------------------------------------------------------------------------- TFRecord files


def _records(directory, n=40, shards=2):
    x = np.random.default_rng(0).random((n, 8, 8, 1)).astype("float32")
    return write_tfrecords(directory, x, np.arange(n) % 10, num_shards=shards)


def _record_ends(path):
    """The byte offset where each record of a TFRecord file ends."""
    import struct

    ends, offset, data = [], 0, Path(path).read_bytes()
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        offset += 12 + length + 4
        ends.append(offset)
    return ends


def test_tfrecord_files_are_checked_and_the_bad_one_is_named(tmp_path):
    paths = _records(tmp_path / "rec")
    assert check_tfrecords(paths) == 40
    manifest = json.loads((tmp_path / "rec" / "data.manifest.json").read_text())
    assert [e["records"] for e in manifest["files"].values()] == [20, 20]

    # Cut at a record boundary: only the manifest written beside the shards can tell.
    whole = Path(paths[1]).read_bytes()
    ends = _record_ends(paths[1])
    Path(paths[1]).write_bytes(whole[: ends[9]])
    with pytest.raises(ValueError, match=rf"{paths[1]} is cut short: it holds 10 records, 20"):
        check_tfrecords(paths, "--dataset=tfrecord:x")
    # Cut inside a record: the headers alone tell, manifest or not.
    Path(paths[1]).write_bytes(whole[: ends[9] + 30])
    (tmp_path / "rec" / "data.manifest.json").unlink()
    with pytest.raises(ValueError, match=r"is cut short: record 11 at byte \d+ needs \d+ bytes"):
        check_tfrecords(paths)
    # A damaged length: its CRC says so.
    damaged = bytearray(whole)
    damaged[ends[4]] ^= 0xFF
    Path(paths[1]).write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match=rf"{paths[1]} is corrupt: record 6's header"):
        check_tfrecords(paths)


def _damage_data(path):
    """Flips a byte inside the first record's data (its header intact): only the reader's CRC
    finds it, while training."""
    data = bytearray(Path(path).read_bytes())
    data[12 + 20] ^= 0xFF
    Path(path).write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("cut", "is cut short: it holds 10 records, 20 when it was written"),
        ("mid", "is cut short: record 11"),
        ("data", "cannot read {path} (corrupted record at"),
    ],
)
def test_a_damaged_tfrecord_file_is_named_in_one_line(tmp_path, damage, words):
    paths = _records(tmp_path / "rec")
    if damage == "data":
        _damage_data(paths[1])
    else:
        whole, ends = Path(paths[1]).read_bytes(), _record_ends(paths[1])
        Path(paths[1]).write_bytes(whole[: ends[9] + (30 if damage == "mid" else 0)])
    out = _run(
        ["--smoke", "--batch_size=4", f"--dataset=tfrecord:{tmp_path}/rec/*",  # the manifest too
         f"--report_dir={tmp_path / 'runs'}"]
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    last = _last(out)
    assert paths[1] in last and words.format(path=paths[1]) in last, last
    assert "Traceback" not in out.stderr
    if damage == "data":  # found while training: the partial summary and report are kept
        assert "== mlp: partial (DataLossError: corrupted record at" in out.stdout
        run_dir, data = _report(tmp_path / "runs")
        assert f"the partial report is in {run_dir}" in last and data["status"] == "partial"
    else:  # found before any framework loads: nothing trained, nothing written
        runs = tmp_path / "runs"
        assert "== mlp" not in out.stdout and not (runs.exists() and list(runs.iterdir()))
        assert "loading TensorFlow" not in out.stderr


def test_tfrecords_report_their_record_count_to_the_batch_size_check(tmp_path):
    _records(tmp_path / "rec", n=10, shards=2)  # every 5th held out: 8 to train on
    out = _run(
        ["--smoke", "--batch_size=16", f"--dataset=tfrecord:{tmp_path}/rec/*.tfrecord",
         f"--report_dir={tmp_path / 'runs'}"]
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert "--batch_size=16 is larger than the 8 training examples: lower it" in _last(out)
    assert "loading TensorFlow" not in out.stderr  # the count read before any framework loads


# ---------------------------------------------------------------------------- images, TFDS


def test_a_jpeg_damaged_past_its_header_is_named(tmp_path):
    _images(tmp_path / "img", {"a": 6, "b": 6}, kind="jpg")
    bad = tmp_path / "img" / "b" / "3.jpg"
    bad.write_bytes(bad.read_bytes()[:40])  # a real JPEG header, then nothing
    out = _run(
        [*CNN, "--smoke", f"--dataset=folder:{tmp_path / 'img'}", "--image_size=8",
         "--channels=3", "--batch_size=2", f"--report_dir={tmp_path / 'runs'}"]
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    last = _last(out)
    assert f"cannot read {bad} (" in last and "remove or replace that file" in last, last
    assert "Traceback" not in out.stderr and "the partial report is in" in last


def test_an_empty_tfds_split_is_one_line_before_training(tmp_path):
    code = f"""
import tensorflow_datasets as tfds
from recipes import cnn
from toolkit.runner import train
from toolkit.runner.config import TrainConfig
with tfds.testing.mock_data(num_examples=0):
    try:
        train.run(cnn.build_task("tfds:mnist", image_size=16),
                  TrainConfig(smoke=True, batch_size=8, report_dir={str(tmp_path)!r}))
    except train.SetupError as e:
        print("SETUP:", e)
"""
    out = run_python(code, timeout=300)
    assert "SETUP: --dataset=tfds:mnist: its train split ('train')" in out.stdout, out.stderr
    assert "has no examples" in out.stdout and not list(tmp_path.iterdir())


# ---------------------------------------------------------------------------- any other error


FAILING_RECIPE = """
from absl import app
import numpy as np
from toolkit import app as tk_app
from toolkit.core import compat
from toolkit.runner import train
from toolkit.runner import flags as tk_flags

tk_flags.define_common_flags(epochs=1, batch_size=8)

keras = compat.keras()

class Broken(keras.layers.Layer):
    def call(self, x, training=None):
        if training:
            raise RuntimeError("the model's own bug\\nsecond line")
        return x

def build_task():
    x = np.zeros((64, 4), "float32")
    y = np.zeros(64, "int32")
    model = lambda: keras.Sequential([keras.Input((4,)), Broken(), keras.layers.Dense(2)])
    return train.Task("broken", model, (x, y), "sparse_categorical_crossentropy")

app.run(tk_app.recipe_main(build_task))
"""


@pytest.mark.parametrize("verbosity", [None, "1"])
def test_any_error_in_training_is_one_line_unless_verbosity_asks(tmp_path, verbosity):
    """An error no check foresaw (here the model's own) still ends in one line naming it, with
    where the partial report is; --verbosity=1 puts the traceback above that line."""
    script = tmp_path / "broken.py"
    script.write_text(FAILING_RECIPE)
    args = [sys.executable, str(script), "--smoke", f"--report_dir={tmp_path / 'runs'}"]
    out = _run(args + ([f"--verbosity={verbosity}"] if verbosity else []), cwd=os.getcwd())
    assert out.returncode == 1, out.stderr[-2000:]
    last = _last(out)
    assert last.startswith("error: training stopped on RuntimeError: the model's own bug")
    assert "--verbosity=1 shows the traceback" in last and "second line" not in last
    assert ("Traceback (most recent call last)" in out.stderr) == bool(verbosity)


def test_one_line_finds_what_went_wrong_in_tensorflow_and_keras_errors(keras):
    import tensorflow as tf

    from toolkit.core.errors import one_line

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])  # fails when run
    def reshape(x):
        return tf.reshape(x, (5,))

    with pytest.raises(tf.errors.InvalidArgumentError) as graph_error:
        reshape(tf.zeros(4))
    line = one_line(graph_error.value)
    assert line.startswith("InvalidArgumentError: Input to reshape is a tensor with 4 values")
    assert "\n" not in line and "[Op:" not in line and "Detected at node" not in line
    assert one_line(ValueError("first\nsecond")) == "ValueError: first"
    # autograph's message (a Keras layer in a tf.data map): the user's frames, then the
    # error's own, Keras's wrapper lines around it
    traced = NotImplementedError(
        'in user code:\n\n    File "text.py", line 53, in vectorize_text  *\n'
        "        return vectorize_layer(text), label\n\n"
        "    NotImplementedError: Exception encountered when calling TextVectorization.call().\n"
        "    \n    \x1b[1mCannot convert a symbolic tf.Tensor (ExpandDims:0) to a numpy array."
        "\x1b[0m\n    \n    Arguments received by TextVectorization.call():\n"
        "      • inputs=<tf.Tensor 'ExpandDims:0' shape=(None, 1) dtype=string>\n"
    )
    assert one_line(traced) == (
        "NotImplementedError: Cannot convert a symbolic tf.Tensor (ExpandDims:0) to a numpy array."
    )
    assert one_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    # Keras's wrapper around an error in a layer's call ends with the call's arguments; its
    # last line (``• inputs=...``) is none of the error (keras.io's miniature GPT's mask)
    import keras

    class Rows(keras.layers.Layer):
        def call(self, x):
            return keras.ops.stack([row for row in x])

    with pytest.raises(Exception, match="Exception encountered when calling") as in_call:
        Rows()(keras.Input((4,)))
    line = one_line(in_call.value)
    assert line.startswith(
        "OperatorNotAllowedInGraphError: Iterating over a symbolic `tf.Tensor` is not allowed."
    ), line
    assert line.endswith("… (in Rows.call())") and "•" not in line  # cut to make room


def test_library_raise_tells_a_library_s_error_from_yours_and_the_toolkit_s():
    """What ``fit`` of your model raised inside Keras, TensorFlow or JAX (a model that does
    not run on this backend or data), apart from your own code's raise (said as yours) and
    the toolkit's (its traceback): only the first becomes "your model's fit raised"."""
    from toolkit.core import checks, files
    from toolkit.core.errors import library_raise

    with pytest.raises(ValueError) as decoding:
        files.parse_json("{")  # the toolkit called Python's json, which raised
    assert library_raise(decoding.value)

    def yours():
        raise KeyError("row 17")

    with pytest.raises(KeyError) as own:
        yours()
    assert not library_raise(own.value)
    with pytest.raises(ValueError) as ours:
        checks.check_number("--steps", -1, least=1)
    assert not library_raise(ours.value)
    # (Keras's wrapper of an error in a layer's call, from your model's fit: test_diagnose's)


def test_verbs_name_a_damaged_file_as_recipes_do_and_fail_with_1(tmp_path):
    paths = _records(tmp_path / "rec")
    _damage_data(paths[1])
    out = subprocess.run(
        [sys.executable, "-m", "toolkit", "doctor", "--recipe", "mlp", "--batch_size=4",
         f"--dataset=tfrecord:{tmp_path}/rec/*.tfrecord", "--diagnose_steps=10"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"cannot read {paths[1]} (corrupted record at" in _last(out)
    assert "Traceback" not in out.stderr


def test_out_of_memory_is_one_line_naming_the_stage(tmp_path):
    """Under an address-space limit, a model too big for it (a Dense kernel of 1024²×128
    floats): one line saying out of memory and while doing what, no traceback."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    out = _run(["--smoke", "--image_size=1024", f"--report_dir={tmp_path}"], preexec_fn=limit)
    assert out.returncode == 1, out.stderr[-2000:]
    # Where memory runs out first (building, or the first step) depends on the allocator.
    assert _last(out).startswith("error: out of memory while "), _last(out)
    assert "lower --batch_size" in _last(out) and "Traceback" not in out.stderr


# ---------------------------------------------------------------------------- errors stand alone


def test_errors_stand_alone_and_a_misspelled_recipe_lists_the_recipes(tmp_path):
    """No framework chatter before the error line (TFDS's offline package index), no Keras
    "ran out of data" warning on a folder dataset (its length is said), and a recipe name
    that is not there lists the ones that are."""
    out = _run([sys.executable, "-m", "recipes.mlpp", "--smoke"])
    assert out.returncode == 2 and out.stderr == (
        "error: python -m recipes.NAME: no recipe named 'mlpp'; the recipes are "
        f"{', '.join(app.recipe_names())}\n"
    )
    out = _run(["--smoke", "--dataset=tfds:nosuch", f"--report_dir={tmp_path / 'runs'}"])
    assert out.returncode == 1 and out.stderr.splitlines() == [
        "mlp: loading TensorFlow and Keras (tensorflow), then data and model",
        "error: --dataset=tfds:nosuch: unknown TFDS dataset; see `tfds.list_builders()` for names",
    ], out.stderr[-2000:]
    _images(tmp_path / "img", {"a": 11, "b": 12})
    out = _run(
        [sys.executable, "-W", "error::UserWarning", "-m", "recipes.cnn", "--epochs=2",
         f"--dataset=folder:{tmp_path / 'img'}", "--image_size=8", "--channels=3",
         "--batch_size=4", f"--report_dir={tmp_path / 'runs'}"]
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ran out of data" not in out.stderr and "Warning" not in out.stderr
