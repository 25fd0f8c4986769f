"""Data sources that return a ``tf.data.Dataset`` (or arrays to make one from)."""

from __future__ import annotations

from typing import Any

import numpy as np

Arrays = tuple[np.ndarray, np.ndarray]


def from_arrays(features: Any, labels: Any):
    """A dataset of ``(features, label)`` pairs from in-memory arrays.

    Raises:
        ValueError: features and labels do not have the same number of examples, or none.
    """
    import tensorflow as tf

    n_x, n_y = len(features), len(labels)
    if n_x != n_y:
        raise ValueError(
            f"labels: got {n_y} labels for {n_x} examples; features and labels must have the "
            "same first dimension"
        )
    if n_x == 0:
        raise ValueError("features: no examples (empty array)")
    return tf.data.Dataset.from_tensor_slices((features, labels))


def digits(validation_fraction: float = 0.2, seed: int = 0) -> tuple[Arrays, Arrays]:
    """scikit-learn's handwritten digits (1797 8×8 images, 10 classes), split for validation.

    Real data that ships inside scikit-learn, so it works offline. Pixels are scaled from
    [0, 16] to [0, 1] and flattened to 64 features; the split is stratified by class.

    Returns:
        ``((x_train, y_train), (x_val, y_val))`` with float32 features and int32 labels.
    """
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int32)
    x_tr, x_va, y_tr, y_va = train_test_split(
        x, y, test_size=validation_fraction, random_state=seed, stratify=y
    )
    return (x_tr, y_tr), (x_va, y_va)
