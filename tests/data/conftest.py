"""Real files for the data tests: TFRecords and JPEG/PNG folders written here, per test session."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from toolkit.data import builder as pipeline_mod

FEATURES = 6
N = 48


@pytest.fixture(scope="session")
def arrays():
    rng = np.random.default_rng(0)
    return rng.normal(size=(N, FEATURES)).astype("float32"), (np.arange(N) % 3).astype("int32")


@pytest.fixture(scope="session")
def tfrecord_dir(tmp_path_factory, arrays):
    from toolkit.data import write_tfrecords

    directory = tmp_path_factory.mktemp("tfrecords")
    write_tfrecords(directory, *arrays, num_shards=3)
    return directory


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory):
    """root/<class>/ with JPEGs and PNGs of different sizes, and a stray non-image file."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(1)
    for c, name in enumerate(["cat", "dog", "emu"]):
        (root / name).mkdir()
        for i in range(4):
            h, w = 20 + 3 * i, 30 - 2 * i
            img = tf.constant(rng.integers(0, 255, size=(h, w, 3)), tf.uint8)
            encoded = tf.io.encode_jpeg(img) if (i + c) % 2 else tf.io.encode_png(img)
            ext = "JPG" if (i + c) % 2 else "png"
            tf.io.write_file(str(root / name / f"{i}.{ext}"), encoded)
        (root / name / "notes.txt").write_text("not an image")
    return root


@pytest.fixture(autouse=True)
def fresh_warnings():
    """Each test sees the builder's once-only warnings afresh."""
    pipeline_mod._warned.clear()
    yield
    pipeline_mod._warned.clear()
