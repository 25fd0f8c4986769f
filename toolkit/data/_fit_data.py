"""Whatever ``model.fit`` accepts, as a batched ``tf.data.Dataset`` that can be read again (the
short fits of ``diagnose``, ``tune`` and ``backends --model_fn``):

* a batched ``tf.data.Dataset``, as it is;
* ``(x, y[, sample_weight])`` (nests as ``fit`` takes) batched by ``batch_size``, or ``x`` alone;
* a ``PyDataset`` (anything indexable returning batches) or a re-iterable (a ``DataLoader``): read
  again each pass through ``from_generator``, as Keras on TensorFlow reads them;
* a generator: its first :data:`HELD_BATCHES` batches held in memory.

``class_weight`` weighs batches by their labels' classes, refused where ``fit`` refuses it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

HELD_BATCHES = 256


def _tf() -> Any:
    import tensorflow as tf

    return tf


def _plain(value: Any) -> Any:
    """`value` with lists made tuples and tensors arrays: ``from_tensor_slices`` guesses not."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    if value is None or isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):  # a PyTorch tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def as_fit_tuple(batch: Any) -> tuple[Any, ...]:
    """A batch as Keras unpacks it: a tuple is ``(x[, y[, sample_weight]])``; else ``x``."""
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


def fit_dataset(
    data: Any, batch_size: int | None = None, class_weight: Any = None
) -> tuple[Any, str, int | None]:
    """``(dataset, description, batch size)`` for `data` in any ``fit`` form, weighed as fit does.

    Raises:
        ValueError: a form ``fit`` refuses too (``data:``/``class_weight:``), or no batch."""
    dataset, said, size = _any_form(data, batch_size)
    if class_weight is None:
        return dataset, said, size
    return with_class_weight(dataset, class_weight), f"{said}; weighed by class_weight", size


def _any_form(data: Any, batch_size: int | None) -> tuple[Any, str, int | None]:
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


def check_class_weight(data: Any, class_weight: Any) -> dict[int, float] | None:
    """`class_weight` as ``{class index: weight}`` (JSON's string keys made ints), or None;
    ValueError where ``fit`` refuses it or weighs no classes of the form."""
    if class_weight is None:
        return None
    try:
        weights = {int(k): float(v) for k, v in dict(class_weight).items()}
    except (TypeError, ValueError):
        weights = {}
    if not weights or min(weights) < 0:
        raise ValueError(
            f"class_weight: a dict of class index (>= 0) to weight, as fit takes it, got "
            f"{class_weight!r}"
        )
    kind = type(data).__name__
    if hasattr(data, "element_spec") or _is_arrays(data):
        return weights
    refused = hasattr(data, "__next__") or not hasattr(data, "__getitem__")  # one-way reads
    if refused or type(data).__module__.startswith("grain"):
        raise ValueError(
            f"class_weight: fit does not weigh classes of a {kind}; give arrays, a "
            "tf.data.Dataset or a PyDataset, or yield (x, y, sample_weight) batches"
        )
    return weights


def with_class_weight(dataset: Any, class_weight: dict[int, float]) -> Any:
    """`dataset` with sample weights from each batch's label classes, as Keras's
    ``make_class_weight_map_fn``; ValueError for no labels, weights already, or several outputs."""
    tf = _tf()
    spec = dataset.element_spec
    parts = len(spec) if isinstance(spec, tuple) else 1
    if parts != 2:
        said = "holds sample weights already" if parts == 3 else "has no labels"
        raise ValueError(
            f"class_weight: your data {said}; fit takes class_weight or sample_weight, for "
            "(x, y) data"
        )
    if tf.nest.is_nested(spec[1]):
        raise ValueError(
            "class_weight: fit takes it for a model with one output; for several, give one "
            "sample_weight array per output: (x, y, {output: weights})"
        )
    table = tf.constant(
        [class_weight.get(c, 1.0) for c in range(max(class_weight) + 1)], tf.float32
    )

    def weigh(x: Any, y: Any) -> Any:
        if y.shape.rank is not None and y.shape.rank >= 2:
            classes = tf.cond(
                tf.shape(y)[-1] > 1,
                lambda: tf.argmax(y, axis=-1, output_type=tf.int32),
                lambda: tf.cast(tf.round(tf.squeeze(y, axis=-1)), tf.int32),
            )
        else:
            classes = tf.cast(tf.round(y), tf.int32)
        return x, y, tf.gather(table, classes)

    return dataset.map(weigh)


def _from_arrays(data: Any, batch_size: int | None) -> tuple[Any, str, int | None]:
    """In-memory arrays batched by `batch_size` in tf.data, as ``fit(x, y, sample_weight)``."""
    from toolkit.data.builder import describe_pipeline
    from toolkit.data.sources import array_examples, nest_rows

    parts = as_fit_tuple(data)
    n = array_examples(parts[0], parts[1] if len(parts) > 1 else None)
    rows = nest_rows("data: sample_weight", parts[2]) if len(parts) == 3 else n
    if rows != n:  # one array, or one per output (a dict or list as the labels'), as fit
        raise ValueError(
            f"data: sample_weight has {rows} rows for {n} examples; give one weight per example"
        )
    size = batch_size or 32
    dataset = _tf().data.Dataset.from_tensor_slices(parts).batch(size)
    what = {1: "x alone", 2: "(x, y)", 3: "(x, y, sample_weight)"}[len(parts)]
    said = f"your arrays, batched by {size} in tf.data: {describe_pipeline(dataset)}"
    return dataset, said + ("" if what == "(x, y)" else f"; {what}"), size


def _from_indexed(data: Any, kind: str) -> tuple[Any, str, int | None]:
    """Batches by index: every pass reads them all, then calls ``on_epoch_end`` as ``fit`` does."""
    count = len(data)
    if count < 1:
        raise ValueError(f"data: your {kind} has no batches (len() is 0)")

    def passes() -> Iterator[tuple[Any, ...]]:
        for i in range(count):
            yield as_fit_tuple(data[i])
        end = getattr(data, "on_epoch_end", None)
        if callable(end):
            end()

    first = as_fit_tuple(data[0])
    said = f"your {kind}, {count} batches a pass, read through tf.data.from_generator"
    return _from_batches(passes, first), said, _leading(first)


def _from_iterable(data: Any, kind: str) -> tuple[Any, str, int | None]:
    """A re-iterable of batches (a ``DataLoader``): each pass iterates it again."""
    try:
        first = as_fit_tuple(next(iter(data)))
    except StopIteration:
        raise ValueError(f"data: your {kind} gave no batch") from None

    def again() -> Iterator[tuple[Any, ...]]:
        return (as_fit_tuple(batch) for batch in data)

    said = f"your {kind}, read again on every pass through tf.data.from_generator"
    return _from_batches(again, first), said, _leading(first)


def _from_generator(data: Any, kind: str) -> tuple[Any, str, int | None]:
    """A generator, read once: its first :data:`HELD_BATCHES` batches held in memory."""
    held = []
    for batch in data:  # a generator: read once, so held
        held.append(as_fit_tuple(batch))
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
    """In-memory arrays: an array or tensor, or a nest whose leaves all are."""
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
