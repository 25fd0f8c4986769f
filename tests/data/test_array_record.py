"""ArrayRecord files, written and read back for real: the same batches in the same order as the
arrays they were written from, shard after shard; every damaged or missing piece refused in one
line; a fit on JAX fed from the files."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

pytest.importorskip("grain")  # the [grain] extra, in the test extras: never skipped in CI
pytest.importorskip("array_record")

from tests.helpers import run_python
from toolkit import data as D


def _batches(ds):
    return [(np.asarray(x), np.asarray(y)) for x, y in ds]


def _same(got, want):
    assert len(got) == len(want)
    for (gx, gy), (wx, wy) in zip(got, want, strict=True):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)


def test_files_read_back_as_the_arrays_batches_in_their_order(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 4, 3)).astype("float32")
    y = np.arange(50, dtype=np.int64) % 7
    paths = D.write_array_records(tmp_path, x, y, num_shards=3)
    assert [os.path.basename(p) for p in paths] == [
        f"data-0000{i}-of-00003.array_record" for i in range(3)
    ]
    said = json.loads((tmp_path / "data.array_record.json").read_text())
    assert said["features"] == {"dtype": "<f4", "shape": [4, 3]}
    assert list(said["files"].values()) == [17, 17, 16]  # consecutive runs of examples
    files = D.ArrayRecords(tmp_path)
    assert len(files) == 50 and files.element_shape() == (4, 3)
    for i in (0, 16, 17, 49):  # either side of each shard's edge
        features, label = files[i]
        np.testing.assert_array_equal(features, x[i])
        assert label.dtype == np.int64 and int(label) == y[i]
    many = files.take(np.array([49, 0, 17, 16, 33]))
    np.testing.assert_array_equal(many[0], x[[49, 0, 17, 16, 33]])
    np.testing.assert_array_equal(many[1], y[[49, 0, 17, 16, 33]])
    with pytest.raises(IndexError):
        files[50]
    # The Grain pipeline over the files feeds the batches the one over the arrays feeds, from
    # the same seed, epoch after epoch; per-example maps read by index, the same again.
    ds = D.pipeline(files, 8, seed=4, loader="grain")
    said = D.describe_pipeline(ds)
    assert said.startswith("ArrayRecord files (3) (one read per batch) → shuffle"), said
    reference = D.pipeline((x, y), 8, seed=4, loader="grain")
    for _ in range(2):
        _same(_batches(ds), _batches(reference))
    plus_one = lambda f, label: (f + 1, label)  # noqa: E731
    by_index = D.pipeline(files, 8, seed=4, preprocess=plus_one, loader="grain")
    assert "ArrayRecord files (3) (by index)" in D.describe_pipeline(by_index)
    want = [(bx + 1, by) for bx, by in _batches(D.pipeline((x, y), 8, seed=4, loader="grain"))]
    _same(_batches(by_index), want)
    # Worker processes open the files again (the source pickles) and read the same batches.
    from toolkit.data._grain import grain_pipeline

    workers = grain_pipeline(files, 8, seed=4, workers=1, num_threads=1)
    _same(_batches(workers), _batches(grain_pipeline((x, y), 8, seed=4)))
    bench = D.benchmark(D.pipeline(files, 8, seed=4, repeat=True, loader="grain"), 5, verbose=False)
    assert bench.batch_size == 8 and bench.examples_per_sec > 0
    with pytest.raises(ValueError, match="dataset: ArrayRecord files are read by Grain"):
        D.pipeline(files, 8)


def test_writing_refuses_what_it_cannot_write_in_one_line(tmp_path):
    x, y = np.zeros((4, 2), "float32"), np.zeros(4, "int32")
    refusals = {
        "features: each example must have the same shape": ([[1.0, 2.0], [3.0]], [0, 1]),
        "labels: got 3 labels for 4 examples": (x, y[:3]),
        "features: dtype <U1 is not a number": (np.array([["a"]] * 4), y),
        "num_shards: must be from 1 to the 4 examples, got 5": (x, y),
    }
    for message, (features, labels) in refusals.items():
        shards = 5 if message.startswith("num_shards") else 1
        with pytest.raises(ValueError, match=message) as caught:
            D.write_array_records(tmp_path, features, labels, num_shards=shards)
        assert "\n" not in str(caught.value)
    assert not list(tmp_path.iterdir())  # nothing written by a refusal


def test_reading_refuses_missing_damaged_and_cut_files_in_one_line(tmp_path):
    x = np.arange(40, dtype="float32").reshape(20, 2)
    y = np.arange(20, dtype="int32")

    def written(name):
        folder = tmp_path / name
        D.write_array_records(folder, x, y, num_shards=2)
        return folder

    def refused(folder, message, **kwargs):
        with pytest.raises(ValueError, match=message) as caught:
            D.ArrayRecords(folder, **kwargs)
        assert "\n" not in str(caught.value), str(caught.value)

    refused(tmp_path / "nowhere", r"directory: no .*data\.array_record\.json: give the folder")
    refused(written("prefix"), "directory: no .*other.array_record.json", prefix="other")
    damaged = written("damaged")
    (damaged / "data.array_record.json").write_text("{not json")
    refused(damaged, r"data\.array_record\.json is damaged \(JSONDecodeError")
    keyless = written("keyless")
    (keyless / "data.array_record.json").write_text(
        '{"format": "toolkit.data.write_array_records/1"}'
    )
    refused(keyless, r"is damaged \(KeyError")
    missing = written("missing")
    os.remove(missing / "data-00001-of-00002.array_record")
    refused(missing, r"data-00001-of-00002\.array_record is missing")
    # A file replaced by one of other records (10 of 12 bytes): their size says so.
    resized = written("resized")
    D.write_array_records(resized / "other", x.astype("float64"), y, num_shards=2)
    os.replace(
        resized / "other" / "data-00000-of-00002.array_record",
        resized / "data-00000-of-00002.array_record",
    )
    refused(resized, r"record 0 holds 20 bytes, not the 12 its sidecar says \(a damaged file\)")
    # A file replaced by one of fewer records than the sidecar lists.
    fewer = written("fewer")
    D.write_array_records(fewer / "other", x[:15], y[:15], num_shards=2)
    os.replace(
        fewer / "other" / "data-00001-of-00002.array_record",
        fewer / "data-00001-of-00002.array_record",
    )
    refused(fewer, r"data-00001-of-00002\.array_record holds 7 records, 10 when it was written")
    # A record's bytes changed: Riegeli's hash catches it when the record is read.
    flipped = written("flipped")
    data = bytearray((flipped / "data-00000-of-00002.array_record").read_bytes())
    data[600] ^= 0xFF  # a few records in
    (flipped / "data-00000-of-00002.array_record").write_bytes(bytes(data))
    files = D.ArrayRecords(flipped)
    with pytest.raises(ValueError, match=r"00000-of-00002\.array_record is damaged \(Corrupted"):
        files.take(np.arange(20))
    # A file cut short, anywhere.
    cut = written("cut")
    short = cut / "data-00001-of-00002.array_record"
    whole = short.read_bytes()
    for size in (len(whole) // 2, 100):
        short.write_bytes(whole[:size])
        refused(cut, r"00002\.array_record is damaged \(cut short, or not an ArrayRecord file\)")


def test_without_the_extra_writing_and_reading_is_one_line(monkeypatch, tmp_path):
    for name in ("array_record.python.array_record_module", "array_record.python"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails, as uninstalled
    x, y = np.zeros((4, 2), "float32"), np.zeros(4, "int32")
    extra = r"array_record package, which is not installed: pip install 'keras-perf-toolkit\[grain"
    with pytest.raises(ImportError, match=extra):
        D.write_array_records(tmp_path, x, y)
    (tmp_path / "data.array_record.json").write_text(
        json.dumps(
            {
                "format": "toolkit.data.write_array_records/1",
                "features": {"dtype": "<f4", "shape": [2]},
                "labels": {"dtype": "<i4", "shape": []},
                "files": {"data-00000-of-00001.array_record": 4},
            }
        )
    )
    with pytest.raises(ImportError, match=extra):
        D.ArrayRecords(tmp_path)


def test_a_jax_fit_reads_array_record_files(tmp_path):
    code = f"""
import os
os.environ["KERAS_BACKEND"] = "jax"
import numpy as np
import keras
from toolkit import data

rng = np.random.default_rng(0)
x = rng.normal(size=(64, 5)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
data.write_array_records({str(tmp_path)!r}, x, y, num_shards=2)
train = data.pipeline(data.ArrayRecords({str(tmp_path)!r}), 16, seed=0, repeat=True,
                      loader="grain")
model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(train, epochs=2, steps_per_epoch=len(train), verbose=0)
assert keras.backend.backend() == "jax" and len(history.history["loss"]) == 2
print("OK")
"""
    out = run_python(code, timeout=180)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]
