"""Every source passes one shared contract; then each source's own behaviour and errors."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from toolkit import data as D
from toolkit.data import pipeline

from .conftest import FEATURES, N

SIG = (tf.TensorSpec((FEATURES,), tf.float32), tf.TensorSpec((), tf.int32))


def _factory(arrays):
    x, y = arrays

    def factory(shard):
        for i in range(shard, N, 4):
            yield x[i], y[i]

    return factory


def make_source(kind, arrays, tfrecord_dir, image_dir, deterministic=None):
    """(dataset, expected element count) for each kind of source."""
    if kind == "arrays":
        return D.from_arrays(*arrays), N
    if kind == "synthetic":
        return D.synthetic((FEATURES,), num_examples=N, num_classes=3), N
    if kind == "parallel_generator":
        return D.parallel_generator(
            _factory(arrays), range(4), SIG, chunk_size=5, deterministic=deterministic
        ), N
    if kind == "tfrecords":
        return D.tfrecords(
            str(tfrecord_dir / "*.tfrecord"), (FEATURES,), deterministic=deterministic
        ), N
    if kind == "image_folder":
        return D.image_folder(image_dir, (8, 10), deterministic=deterministic), 12
    if kind == "tfds":  # inside tfds.testing.mock_data (see the test)
        return D.tfds_dataset("mnist", deterministic=deterministic), 12
    raise AssertionError(kind)


KINDS = ["arrays", "synthetic", "parallel_generator", "tfrecords", "image_folder", "tfds"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_source_yields_its_spec_batches_and_keeps_order_when_asked(
    kind, arrays, tfrecord_dir, image_dir
):
    with contextlib.ExitStack() as stack:
        if kind == "tfds":  # the real TFDS loading code, offline, on generated examples
            stack.enter_context(tfds.testing.mock_data(num_examples=12))
        _check_source_contract(kind, arrays, tfrecord_dir, image_dir)


def _check_source_contract(kind, arrays, tfrecord_dir, image_dir):
    ds, n = make_source(kind, arrays, tfrecord_dir, image_dir, deterministic=True)
    spec = ds.element_spec
    assert isinstance(spec, tuple) and len(spec) == 2
    elements = list(ds)
    assert len(elements) == n
    for features, label in elements[:5]:
        assert spec[0].is_compatible_with(features) and spec[1].is_compatible_with(label)
    batched = pipeline(ds, 4, shuffle=False, deterministic=True)
    assert batched.element_spec[0].shape[0] == 4  # static batch: drop_remainder
    assert sum(1 for _ in batched) == n // 4
    # Determinism: the same order twice, also through the parallel stages.
    again = list(make_source(kind, arrays, tfrecord_dir, image_dir, deterministic=True)[0])
    assert all(
        np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(elements, again, strict=True)
    )
    shuffled = [
        [int(y) for _, y in pipeline(ds, 4, seed=7, deterministic=True).unbatch()] for _ in range(2)
    ]
    assert shuffled[0] == shuffled[1]  # a seed makes shuffling repeatable


def test_tfds_source_runs_the_real_loading_code_offline():
    with tfds.testing.mock_data(num_examples=12):
        ds = D.tfds_dataset(
            "mnist",
            split="train",
            shuffle_files=True,
            seed=3,
            deterministic=True,
            interleave_cycle_length=2,
        )
        assert ds.element_spec[0].shape == (28, 28, 1)
        assert sum(1 for _ in pipeline(ds, 4, shuffle=False)) == 3
        raw = D.tfds_dataset(
            "mnist", as_supervised=False, decoders={"image": tfds.decode.SkipDecoding()}
        )
        assert raw.element_spec["image"].dtype == tf.string  # decoders passed through
        config = tfds.ReadConfig(interleave_cycle_length=1)
        assert sum(1 for _ in D.tfds_dataset("mnist", read_config=config)) == 12


def test_unknown_tfds_name_is_a_clear_error():
    with pytest.raises(ValueError, match="dataset: unknown TFDS dataset 'no_such_dataset'"):
        D.tfds_dataset("no_such_dataset")


def test_arrays_errors_name_the_argument(arrays):
    x, y = arrays
    with pytest.raises(ValueError, match=r"^labels: got 47 labels for 48 examples"):
        D.from_arrays(x, y[:-1])
    with pytest.raises(ValueError, match="^features: no examples"):
        D.from_arrays(x[:0], y[:0])
    with pytest.raises(ValueError, match="^features: arrays of different lengths"):
        D.from_arrays({"a": x, "b": x[:3]})
    assert D.from_arrays({"a": x, "b": x}).element_spec["a"].shape == (FEATURES,)


def test_synthetic_batches_and_labels():
    ds = D.synthetic((32, 32, 3), batch_size=8, num_examples=3, num_classes=5)
    batches = list(ds)
    assert len(batches) == 3 and batches[0][0].shape == (8, 32, 32, 3)
    assert np.array_equal(batches[0][0], batches[2][0])  # made once, repeated: no input cost
    assert int(tf.reduce_min(batches[0][1])) >= 0 and int(tf.reduce_max(batches[0][1])) < 5
    assert D.synthetic((4,), labels=None, num_examples=1).element_spec.shape == (4,)
    with pytest.raises(ValueError, match="^batch_size: must be >= 1"):
        D.synthetic((4,), batch_size=0)
    with pytest.raises(ValueError, match="^features: expected a tf.TensorSpec"):
        D.synthetic("big")


def test_parallel_generator_reads_every_element_once_in_any_order(arrays):
    ds = D.parallel_generator(_factory(arrays), range(4), SIG, chunk_size=3, deterministic=False)
    labels = sorted(float(x[0]) for x, _ in ds)
    assert labels == sorted(float(v) for v in arrays[0][:, 0])


def test_parallel_generator_errors(arrays):
    with pytest.raises(ValueError, match="^shards: empty"):
        D.parallel_generator(_factory(arrays), [], SIG)
    with pytest.raises(ValueError, match="^chunk_size: must be >= 1"):
        D.parallel_generator(_factory(arrays), [0], SIG, chunk_size=0)
    with pytest.raises(ValueError, match="^output_signature: every shape must be fully known"):
        D.parallel_generator(_factory(arrays), [0], tf.TensorSpec((None,), tf.float32))


def test_tfrecord_parse_single_and_vectorized_agree(tfrecord_dir, arrays):
    records = D.tfrecord_records(str(tfrecord_dir / "*.tfrecord"), deterministic=True)
    parse = D.tfrecord_parser((FEATURES,))
    one_by_one = [parse(r) for r in records]
    vectorized = list(pipeline(records, 8, shuffle=False, batch_map=parse).unbatch())
    assert len(one_by_one) == len(vectorized) == N
    for (xa, ya), (xb, yb) in zip(one_by_one, vectorized, strict=True):
        assert np.array_equal(xa, xb) and int(ya) == int(yb)
    written = {tuple(np.round(x, 5)) for x in arrays[0]}
    assert {tuple(np.round(x.numpy(), 5)) for x, _ in one_by_one} == written


def test_tfrecord_errors(tmp_path, arrays):
    with pytest.raises(FileNotFoundError, match="^pattern: no files match"):
        D.tfrecord_records(str(tmp_path / "*.tfrecord"))
    with pytest.raises(ValueError, match="^labels: got 2 labels"):
        D.write_tfrecords(tmp_path, arrays[0], arrays[1][:2])
    with pytest.raises(ValueError, match="^num_shards"):
        D.write_tfrecords(tmp_path, *arrays, num_shards=0)


def test_image_folder_labels_and_class_names(image_dir):
    assert D.class_names(image_dir) == ["cat", "dog", "emu"]
    ds = D.image_folder(image_dir, (8, 10), deterministic=True)
    labels = [int(y) for _, y in ds]
    assert labels == [0] * 4 + [1] * 4 + [2] * 4  # the .txt files are skipped
    images = np.stack([x.numpy() for x, _ in ds])
    assert images.shape == (12, 8, 10, 3) and images.min() >= 0 and images.max() <= 1


def test_image_decode_eager_and_in_dataset_map_agree(image_dir):
    path = str(sorted((image_dir / "dog").glob("*"))[0])
    eager = D.decode_image(tf.io.read_file(path), (8, 10))
    mapped = next(
        iter(
            tf.data.Dataset.from_tensors(path).map(
                lambda p: D.decode_image(tf.io.read_file(p), (8, 10))
            )
        )
    )
    assert eager.shape == mapped.shape == (8, 10, 3)
    np.testing.assert_allclose(eager.numpy(), mapped.numpy(), atol=1e-6)
    gray = D.decode_image(tf.io.read_file(path), (4, 4), channels=1)
    assert gray.shape == (4, 4, 1)


def test_image_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="^root: no such directory"):
        D.image_folder(tmp_path / "missing")
    with pytest.raises(ValueError, match="^root: .* has no class sub-folders"):
        D.image_folder(tmp_path)
    (tmp_path / "a").mkdir()
    with pytest.raises(ValueError, match="^root: no .jpg"):
        D.image_folder(tmp_path)
    with pytest.raises(ValueError, match="^image_size"):
        D.image_folder(tmp_path, (0, 4))
    with pytest.raises(ValueError, match="^channels"):
        D.image_folder(tmp_path, channels=2)


def test_uint8_images_normalized_after_batch_match_float_images(image_dir):
    as_float = pipeline(D.image_folder(image_dir, (8, 10)), 4, shuffle=False)
    as_bytes = D.image_folder(image_dir, (8, 10), dtype="uint8")
    assert as_bytes.element_spec[0].dtype == tf.uint8
    normalized = pipeline(as_bytes, 4, shuffle=False, batch_map=D.normalize_images)
    for (a, ya), (b, yb) in zip(as_float, normalized, strict=True):
        assert b.dtype == tf.float32 and np.array_equal(ya, yb)
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=0.5 / 255 + 1e-6)  # rounding only
    assert D.normalize_images(tf.constant([255], tf.uint8)).numpy()[0] == 1.0
    with pytest.raises(ValueError, match="^dtype"):
        D.image_folder(image_dir, dtype="float16")
