"""Shared setup for the benchmarks: one ≈1 ms/step MLP fit, and the ratio line format."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def quiet_gc() -> None:
    """Collects now and freezes what survives, before a timed fit.

    A full collection walks every tracked Python object, and TensorFlow and Keras hold millions:
    measured here, one landed in fit's teardown (after the last step) at 0.6-5 s. Freezing keeps
    the long-lived objects out of later collections, so the timed region holds the run itself.
    """
    import gc

    gc.collect()
    gc.freeze()


def ratio_line(name: str, baseline_s: float, toolkit_s: float) -> str:
    """``name: X.XX× (baseline A s, toolkit B s)`` with X = toolkit / baseline time."""
    ratio = toolkit_s / baseline_s
    return f"{name}: {ratio:.2f}× (baseline {baseline_s:.3f} s, toolkit {toolkit_s:.3f} s)"


def mlp_fit_setup(steps: int, batch_size: int = 32, width: int = 64, features: int = 32):
    """A compiled MLP and a dataset of `steps` batches held in memory (no input cost)."""
    import numpy as np
    import tensorflow as tf

    from toolkit import compat

    keras = compat.keras()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * batch_size, features)).astype("float32")
    y = rng.integers(0, 10, size=steps * batch_size).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size, drop_remainder=True)
    ds = ds.cache().prefetch(tf.data.AUTOTUNE)
    model = keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return keras, model, ds
