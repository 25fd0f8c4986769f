"""Your-own-model workloads for the benchmarks that run through ``--model_fn`` (a function
returning a compiled Keras model and its batched data), as a user's module would."""

from __future__ import annotations

__all__ = ["seed_mlp"]


def seed_mlp(steps: int = 2000, batch_size: int = 32):
    """The seed post's MLP (256 -> 512 -> 10, Adam, accuracy) with Keras's default compile
    settings, on random data made once with NumPy and held in memory (tf.data, batched)."""
    import numpy as np
    import tensorflow as tf

    from toolkit.core import compat

    keras = compat.keras()
    rng = np.random.default_rng(0)
    x = rng.random((steps * batch_size, 256), dtype=np.float32)
    y = rng.integers(0, 10, steps * batch_size).astype(np.int32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).cache().prefetch(2)
    model = keras.Sequential(
        [
            keras.Input((256,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model, data
