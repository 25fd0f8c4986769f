"""The one pipeline builder: the order of cache, shuffle, repeat, batch and prefetch matters."""

from __future__ import annotations

from typing import Any


def pipeline(
    dataset: Any,
    batch_size: int,
    *,
    shuffle: bool = True,
    shuffle_buffer: int | None = None,
    seed: int | None = None,
    cache: bool = False,
    drop_remainder: bool = True,
    repeat: bool = False,
):
    """Batches `dataset` for training, in the order that keeps the input fast and correct.

    Args:
        dataset: a `tf.data.Dataset` of single examples.
        batch_size: examples per batch.
        shuffle: shuffle examples. Defaults to `True`.
        shuffle_buffer: shuffle buffer in examples. Defaults to the dataset's size when known
            (a full shuffle), else 10 000.
        seed: shuffle seed. Defaults to `None`.
        cache: keep decoded examples in memory after the first epoch. Defaults to `False`.
        drop_remainder: drop a last partial batch. Defaults to `True`: static shapes, so a
            compiled step is never retraced for an odd-sized last batch, and every step has the
            same batch size (exact examples/sec).
        repeat: repeat forever (use with ``steps_per_epoch``). Defaults to `False`.

    Raises:
        ValueError: a size argument is not positive.
    """
    import tensorflow as tf

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if shuffle_buffer is not None and shuffle_buffer < 1:
        raise ValueError(f"shuffle_buffer must be >= 1, got {shuffle_buffer}")
    ds = dataset
    if cache:
        # Cache before shuffling so every epoch still sees a new order.
        ds = ds.cache()
    if shuffle:
        if shuffle_buffer is None:
            n = int(ds.cardinality())
            shuffle_buffer = n if n > 0 else 10_000
        # Shuffle before repeat so epochs don't blur into each other.
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    # Prefetch last: overlap producing batch N+1 with training on batch N.
    return ds.prefetch(tf.data.AUTOTUNE)
