"""toolkit.data.arrays: the data path of a machine without TensorFlow, checked against the
tf.data path it stands in for."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from toolkit.data import ArraySource, array_batches, catalog, resize_images


@pytest.mark.parametrize(("size", "channels"), [((32, 32), 1), ((96, 80), 3), ((4, 4), 1)])
def test_resize_matches_tf_image_resize(size, channels):
    images = np.random.default_rng(0).uniform(size=(3, 8, 8, channels)).astype(np.float32)
    ours = resize_images(images, *size)
    theirs = tf.image.resize(images, size).numpy()
    assert ours.shape == theirs.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    # uint8 pixels (a decoded file) are interpolated as they are: the values of float32 ones.
    pixels = np.random.default_rng(1).integers(0, 256, (3, 8, 8, channels), dtype=np.uint8)
    as_float = resize_images(pixels.astype(np.float32), *size)
    np.testing.assert_array_equal(resize_images(pixels, *size), as_float)
    np.testing.assert_allclose(as_float, tf.image.resize(pixels, size).numpy(), atol=1e-3)


def test_digit_images_and_tokens_match_the_tf_data_path(monkeypatch):
    image_spec = catalog.ImageSpec(32, 32, 3, 10)
    token_spec = catalog.TokenSpec(70, 64, 10)
    with_tf = [
        next(iter(catalog.load("digits", spec).train().batch(5).as_numpy_iterator()))
        for spec in (image_spec, token_spec)
    ]
    monkeypatch.setattr(catalog, "has_tensorflow", lambda: False)
    for spec, (x_tf, y_tf) in zip((image_spec, token_spec), with_tf, strict=True):
        source = catalog.load("digits", spec).train()
        assert isinstance(source, ArraySource) and len(source) == 1437
        x, y = source.take(np.arange(5))
        np.testing.assert_allclose(x, x_tf, atol=1e-5)
        np.testing.assert_array_equal(y, y_tf)
    synthetic = catalog.load("synthetic", image_spec).train()
    assert len(synthetic) == catalog.SYNTHETIC_EXAMPLES and synthetic.features.strides[0] == 0
    with pytest.raises(ValueError, match="needs tf.data, and TensorFlow is not installed"):
        catalog.load("tfds:mnist", image_spec)


def _labels(batches, n):
    return [batches[i][1].tolist() for i in range(n)]


def test_array_batches_shuffle_per_epoch_drop_and_repeat(keras, monkeypatch):
    source = ArraySource(np.arange(10, dtype=np.float32)[:, None], np.arange(10))
    plain = array_batches(source, 4)
    assert plain.num_batches == 3 and _labels(plain, 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert plain.batch_size == 4 and "batch(4)" in plain.description

    train = array_batches(source, 4, shuffle=True, seed=1, drop_remainder=True)
    assert train.num_batches == 2
    first = _labels(train, 2)
    assert first != [[0, 1, 2, 3], [4, 5, 6, 7]]  # shuffled
    assert _labels(array_batches(source, 4, shuffle=True, seed=1, drop_remainder=True), 2) == first
    train.on_epoch_end()
    assert _labels(train, 2) != first  # a new order every epoch

    # One order per pass, drawn once (not per batch), and a pass is every example once.
    big = array_batches(ArraySource(np.zeros((1000, 1)), np.arange(1000)), 10, shuffle=True)
    calls = []
    real = np.random.default_rng
    monkeypatch.setattr(np.random, "default_rng", lambda *a: calls.append(a) or real(*a))
    labels = sorted(v for i in range(100) for v in big[i][1].tolist())
    monkeypatch.undo()
    assert labels == list(range(1000)) and len(calls) == 1

    endless = array_batches(source, 4, drop_remainder=True, repeat=True)
    assert endless.num_batches is None and _labels(endless, 3)[2] == [0, 1, 2, 3]
    one = array_batches(ArraySource(np.zeros((4, 1)), np.zeros(4)), 4, batches_per_epoch=7)
    assert one.num_batches == 7 and one[6][0].shape == (4, 1)
    with pytest.raises(ValueError, match="larger than the 10 examples"):
        array_batches(source, 11, drop_remainder=True)


def test_keras_fit_reads_array_batches(keras):
    x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    y = (x.sum(axis=1) > 0).astype(np.int32)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(array_batches((x, y), 16, shuffle=True), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    endless = array_batches((x, y), 16, repeat=True)
    assert len(model.fit(endless, epochs=2, steps_per_epoch=3, verbose=0).history["loss"]) == 2
