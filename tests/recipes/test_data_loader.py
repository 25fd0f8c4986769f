"""``--data_loader``: the CNN recipe trained from a folder of real PNG and JPEG files by Grain
on JAX and on PyTorch, to the accuracy tf.data reaches; auto picks Grain off TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import run_python

pytest.importorskip("grain")  # the [grain] extra, in the test extras: never skipped in CI
pytest.importorskip("PIL")

TINY = ["--image_size=8", "--channels=3", "--epochs=6", "--batch_size=8", "--filters=4",
        "--learning_rate=0.02", "--nocount_flops"]  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two classes a CNN tells apart (dark and bright), 24 images each, PNG and JPEG of a few
    sizes."""
    from PIL import Image

    root = tmp_path_factory.mktemp("folder")
    rng = np.random.default_rng(0)
    for c, name in enumerate(["dark", "bright"]):
        (root / name).mkdir()
        for i in range(24):
            h, w = 10 + i % 3, 12 - i % 2
            pixels = (40 + 170 * c + rng.integers(0, 40, (h, w, 3))).astype(np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.{'png' if i % 2 else 'jpg'}")
    return root


def _cnn(report_dir, backend, loader, folder):
    out = subprocess.run(
        [sys.executable, "-m", "recipes.cnn", f"--backend={backend}", f"--data_loader={loader}",
         f"--dataset=folder:{folder}", f"--report_dir={report_dir}", *TINY],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = [p for p in report_dir.iterdir() if p.is_dir()]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "complete" and report["args"]["data_loader"] == loader
    assert report["context"]["backend"] == backend
    return report, out


@pytest.mark.long
def test_the_cnn_trains_from_image_files_by_grain_on_jax_and_pytorch(tmp_path, folder):
    """The CNN recipe on image files, read by Grain on JAX and on PyTorch and by tf.data on
    JAX, to the same accuracy. 45-95 s on 2 cores, beside the other worker's heaviest
    tests: three recipe processes of six epochs each, one per reader and backend, since what
    it checks is that each of them trains the same model from the same files."""
    reached = {}
    for backend, loader in (("jax", "grain"), ("torch", "grain"), ("jax", "tf_data")):
        report, out = _cnn(tmp_path / f"{backend}-{loader}", backend, loader, folder)
        reached[backend, loader] = report["metrics"]["val_accuracy"]
        epochs = report["epochs"]
        assert len(epochs) == 6 and all(e["steps"] == 4 for e in epochs)  # 39 images / 8
        if loader == "grain":  # fit is told an epoch's steps: no "ran out of data" warning
            assert "ran out of data" not in out.stderr, out.stderr[-2000:]
    # The accuracy tf.data's reaches (this data is easy: each run learns it; thread timing
    # may reorder float sums, so "the same" is within one validation image of 9).
    assert reached["jax", "tf_data"] >= 0.85, reached
    for key in (("jax", "grain"), ("torch", "grain")):
        assert reached[key] >= reached["jax", "tf_data"] - 0.12, reached


def test_auto_picks_grain_off_tensorflow_and_reads_the_arrays_path_s_order():
    code = """
import os
os.environ["KERAS_BACKEND"] = "jax"
import numpy as np
from toolkit.data import array_batches
from toolkit.runner import _data
from toolkit.runner.config import TrainConfig

x = np.arange(40, dtype=np.float32)[:, None]
y = np.arange(40, dtype=np.int32)
config = TrainConfig(batch_size=8, seed=5)
assert _data.data_loader(config, (x, y)) == "grain"
assert _data.data_loader(TrainConfig(data_loader="tf_data"), (x, y)) == "tf_data"
# Over processes and devices with fused steps, each process reads its part of every batch
# laid out as the fused step unfolds it: the part the arrays path gives.
from toolkit.distribute.processes import process_slice
fused = TrainConfig(batch_size=4, seed=5, fused_steps=2)
for index in range(2):
    mine = _data.dataset((x, y), fused, training=True, share=(index, 2, 2))
    assert "slice" in mine.description and mine.batch_size == 4, mine.description
    whole = array_batches((x, y), 8, shuffle=True, seed=5, drop_remainder=True)
    ref = process_slice(whole, index, 2, fused=2, shards=2)
    assert next(iter(mine))[1].tolist() == ref[0][1].tolist()
ds = _data.dataset((x, y), config, training=True)
assert "(grain)" in ds.description and _data.epoch_steps(ds) == len(ds) == 5
stream = iter(ds)
ref = array_batches((x, y), 8, shuffle=True, seed=5, drop_remainder=True)
for epoch in range(2):
    got = [next(stream)[1].tolist() for _ in range(5)]
    assert got == [ref[i][1].tolist() for i in range(5)], (epoch, got)
    ref.on_epoch_end()
print("OK")
"""
    out = run_python(code, timeout=180)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]
