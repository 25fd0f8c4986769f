"""Whatever ``model.fit`` accepts, as a batched ``tf.data.Dataset`` that can be read again.

``diagnose``, ``tune`` and ``backends --model_fn`` measure your compiled model on your data,
several short fits in a row; you hand them what you hand ``fit``:

* a batched ``tf.data.Dataset``: used exactly as it is;
* ``(x, y)`` or ``(x, y, sample_weight)``: ``fit(x, y, sample_weight=...)``, batched by
  ``batch_size`` (32 by default, as ``fit``);
* ``x`` alone (an array, a tensor, a dict or a list of them): ``fit(x)``, for a model whose
  ``train_step`` computes its own loss (a VAE, a contrastive model);
* a ``keras.utils.PyDataset`` (or any object with ``__len__`` and ``__getitem__`` that returns
  batches), or a re-iterable of batches (a ``torch.utils.data.DataLoader``): read again on
  every pass through ``tf.data.Dataset.from_generator``, as Keras on TensorFlow reads them;
* a generator (an iterator read once): its first :data:`HELD_BATCHES` batches are held in
  memory, since every measurement needs the data again.

Each batch becomes the tuple Keras unpacks (``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``),
lists inside it become tuples (a list of inputs is one ``x``, not ``x`` and ``y``), and
framework tensors become NumPy arrays.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

HELD_BATCHES = 256


def _tf() -> Any:
    import tensorflow as tf

    return tf


def _plain(value: Any) -> Any:
    """`value` with lists made tuples and tensors made arrays (what ``from_tensor_slices`` and
    ``from_generator`` take without guessing)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    if value is None or isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):  # a PyTorch tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _as_fit_tuple(batch: Any) -> tuple[Any, ...]:
    """A batch as Keras unpacks it: a tuple is ``(x[, y[, sample_weight]])``; a list or
    anything else is ``x``."""
    if isinstance(batch, tuple):
        parts = list(batch)
        while parts and parts[-1] is None:
            parts.pop()
        if not 1 <= len(parts) <= 3 or any(p is None for p in parts):
            raise ValueError(
                f"data: a tuple is (x, y) or (x, y, sample_weight) as fit takes them, got "
                f"{len(batch)} parts ({', '.join(type(p).__name__ for p in batch)})"
            )
        return tuple(_plain(p) for p in parts)
    return (_plain(batch),)


def _leading(structure: Any) -> int | None:
    leaves = _tf().nest.flatten(structure)
    shape = getattr(leaves[0], "shape", None) if leaves else None
    return int(shape[0]) if shape else None


def _spec(batch: tuple[Any, ...]) -> Any:
    """The ``from_generator`` signature of batches like `batch`, the batch dimension free."""
    tf = _tf()

    def leaf(array: Any) -> Any:
        array = np.asarray(array)
        return tf.TensorSpec((None, *array.shape[1:]), tf.as_dtype(array.dtype))

    return tf.nest.map_structure(leaf, batch)


def _from_batches(make: Any, first: tuple[Any, ...]) -> Any:
    """A dataset that calls `make()` for an iterator of fit tuples on every pass."""
    return _tf().data.Dataset.from_generator(make, output_signature=_spec(first))


def fit_dataset(data: Any, batch_size: int | None = None) -> tuple[Any, str, int | None]:
    """``(dataset, in words what it is, examples per batch)`` for `data` in any form ``fit``
    takes (the module's docstring lists them).

    Raises:
        ValueError: a form ``fit`` would refuse too (one line, starting with ``data:``), or
            data with no batch in it.
    """
    from toolkit.data.builder import describe_pipeline, infer_batch_size

    _tf()  # every form becomes tf.data: without TensorFlow, say so before reading any
    if hasattr(data, "element_spec"):  # tf.data, used as it is; its batch is what fit reads
        size = infer_batch_size(data) or batch_size  # yours where the pipeline does not say
        return data, f"your pipeline: {describe_pipeline(data)}", size
    if _is_arrays(data):
        return _from_arrays(data, batch_size)
    kind = type(data).__name__
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):  # a PyDataset, a Sequence
        return _from_indexed(data, kind)
    if not hasattr(data, "__iter__"):
        raise ValueError(
            f"data: {kind} is not something fit takes; pass a tf.data.Dataset, (x, y) arrays, "
            "x alone, a keras.utils.PyDataset or a generator of batches"
        )
    if iter(data) is not data:  # re-iterable: a DataLoader reads its batches again
        return _from_iterable(data, kind)
    return _from_generator(data, kind)


def _from_arrays(data: Any, batch_size: int | None) -> tuple[Any, str, int | None]:
    """In-memory arrays, as ``fit(x, y, sample_weight)`` takes them: sliced and batched by
    `batch_size` (``fit``'s 32 by default) in tf.data; a weight per example or an error."""
    from toolkit.data.builder import describe_pipeline
    from toolkit.data.sources import array_examples

    parts = _as_fit_tuple(data)
    n = array_examples(parts[0], parts[1] if len(parts) > 1 else None)
    if len(parts) == 3 and _leading(parts[2]) != n:
        raise ValueError(
            f"data: sample_weight has {_leading(parts[2])} rows for {n} examples; give "
            "one weight per example"
        )
    size = batch_size or 32
    dataset = _tf().data.Dataset.from_tensor_slices(parts).batch(size)
    what = {1: "x alone", 2: "(x, y)", 3: "(x, y, sample_weight)"}[len(parts)]
    said = f"your arrays, batched by {size} in tf.data: {describe_pipeline(dataset)}"
    return dataset, said + ("" if what == "(x, y)" else f"; {what}"), size


def _from_indexed(data: Any, kind: str) -> tuple[Any, str, int | None]:
    """Batches by index (a ``PyDataset``, a ``Sequence``): every pass reads them all, then
    calls its ``on_epoch_end`` as ``fit`` does."""
    count = len(data)
    if count < 1:
        raise ValueError(f"data: your {kind} has no batches (len() is 0)")

    def passes() -> Iterator[tuple[Any, ...]]:
        for i in range(count):
            yield _as_fit_tuple(data[i])
        end = getattr(data, "on_epoch_end", None)
        if callable(end):
            end()

    first = _as_fit_tuple(data[0])
    said = f"your {kind}, {count} batches a pass, read through tf.data.from_generator"
    return _from_batches(passes, first), said, _leading(first)


def _from_iterable(data: Any, kind: str) -> tuple[Any, str, int | None]:
    """A re-iterable of batches (a ``DataLoader``): each pass iterates it again."""
    try:
        first = _as_fit_tuple(next(iter(data)))
    except StopIteration:
        raise ValueError(f"data: your {kind} gave no batch") from None

    def again() -> Iterator[tuple[Any, ...]]:
        return (_as_fit_tuple(batch) for batch in data)

    said = f"your {kind}, read again on every pass through tf.data.from_generator"
    return _from_batches(again, first), said, _leading(first)


def _from_generator(data: Any, kind: str) -> tuple[Any, str, int | None]:
    """A generator, read once: its first :data:`HELD_BATCHES` batches held in memory, since
    every measurement reads the data again."""
    held = []
    for batch in data:  # a generator: read once, so held
        held.append(_as_fit_tuple(batch))
        if len(held) == HELD_BATCHES:
            break
    if not held:
        raise ValueError(f"data: your {kind} gave no batch (was it read already?)")
    said = (
        f"your {kind}: its first {len(held)} batches, held in memory (a generator is read "
        "once; every measurement reads them again)"
    )
    return _from_batches(lambda: iter(held), held[0]), said, _leading(held[0])


def _is_arrays(data: Any) -> bool:
    """In-memory arrays (``fit(x, y)``'s kind): an array or tensor, or a tuple, list or dict
    whose leaves all are."""
    tf = _tf()
    if isinstance(data, dict | list | tuple):
        leaves = tf.nest.flatten(_plain_shallow(data))
        return bool(leaves) and all(_is_array(leaf) for leaf in leaves if leaf is not None)
    return _is_array(data)


def _plain_shallow(data: Any) -> Any:
    if isinstance(data, list | tuple):
        return tuple(_plain_shallow(v) for v in data)
    if isinstance(data, dict):
        return {k: _plain_shallow(v) for k, v in data.items()}
    return data


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or (
        hasattr(value, "shape") and hasattr(value, "dtype") and not hasattr(value, "element_spec")
    )
