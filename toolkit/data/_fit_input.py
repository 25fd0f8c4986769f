"""Your data as ``fit`` takes it, for Keras's own data adapter (``diagnose`` times the input ``fit``
reads, not a look-alike), and one batch handed to the step again and again. A generator is read
once, a diagnosis several times: :class:`Replay` replays the batches held, then reads on."""

from __future__ import annotations

import itertools
import sys
import types
from collections.abc import Iterator
from typing import Any

from toolkit.data._fit_data import HELD_BATCHES


class Replay:
    """A generator made re-readable: ``iter()`` replays those held, then reads on (to `hold`)."""

    def __init__(self, generator: Iterator[Any], hold: int = HELD_BATCHES) -> None:
        self.live: Iterator[Any] | None = generator
        self.held: list[Any] = []
        self.hold = hold

    def __iter__(self) -> Iterator[Any]:
        return self._read()

    def fill(self, batches: int) -> None:
        """Reads on until `batches` (at most `hold`) are held: every measurement replays them."""
        for _, _batch in zip(range(min(batches, self.hold)), self._read(), strict=False):
            pass

    def _read(self) -> Iterator[Any]:
        i = 0
        while True:
            if i == len(self.held):
                if self.live is None or i >= self.hold:
                    return
                try:
                    self.held.append(next(self.live))
                except StopIteration:
                    self.live = None
                    return
            yield self.held[i]
            i += 1


def fit_arguments(
    data: Any, batch_size: int | None, class_weight: dict[int, float] | None = None
) -> dict[str, Any] | None:
    """``fit``'s arguments for `data` (arrays batched and shuffled as ``fit`` does), or None."""
    from toolkit.core import compat

    if compat.keras_flavor() != "keras3":
        return None
    args = _fit_arguments(data, batch_size)
    if args is not None and class_weight is not None:
        args["class_weight"] = class_weight
    return args


def _fit_arguments(data: Any, batch_size: int | None) -> dict[str, object] | None:
    """:func:`fit_arguments` by form, in ``get_data_adapter``'s order: the adapter ``fit`` picks."""
    from keras.src.trainers.data_adapters.array_data_adapter import can_convert_arrays

    parts = (tuple(data) + (None,) * 3)[:3] if isinstance(data, tuple) else (data, None, None)
    if can_convert_arrays(parts):  # the first form Keras's get_data_adapter tries
        x, y, weights = parts
        return {
            "x": x, "y": y, "sample_weight": weights, "batch_size": batch_size or 32,
            "shuffle": True,
        }  # fmt: skip
    from keras.src.trainers.data_adapters import (
        is_grain_dataset,
        is_tf_dataset,
        is_torch_dataloader,
    )
    from keras.utils import PyDataset

    if isinstance(data, Replay):
        return {"x": iter(data), "shuffle": False}
    if isinstance(data, PyDataset):
        return {"x": data, "shuffle": True}  # fit's default: a finite PyDataset's order shuffled
    if is_tf_dataset(data) or is_torch_dataloader(data) or is_grain_dataset(data):
        return {"x": data, "shuffle": False}  # already shuffled or not, as you made it
    return None


def repeated_batch(batch: Any, batch_size: int | None) -> Any:
    """A Keras data adapter handing `batch` forever: ``fit`` on it runs the step alone, no input."""

    class RepeatedBatch(_endless(batch_size)):
        def get_numpy_iterator(self) -> Iterator[Any]:
            return itertools.repeat(batch)

        def get_jax_iterator(self, super_batch: int | None = None) -> Iterator[Any]:
            if not super_batch:
                return itertools.repeat(batch)
            # Keras 3.16 scans steps_per_execution on JAX over K stacked batches: stacked once here.
            return itertools.repeat(next(_super_batches(itertools.repeat(batch), super_batch)))

        def get_torch_dataloader(self) -> Any:
            return Forever(batch)

        def get_tf_dataset(self) -> Any:
            import tensorflow as tf

            return tf.data.Dataset.from_tensors(batch).repeat()

    return RepeatedBatch()


def as_fit_reads(
    data: Any, batch_size: int | None, class_weight: dict[int, float] | None = None
) -> Any:
    """A Keras data adapter reading `data` as ``fit`` does (weighed by `class_weight`), endless
    epochs each ending in ``on_epoch_end``; None where ``fit`` would not take `data` as it is."""
    if fit_arguments(data, batch_size, class_weight) is None:  # tf_keras, or a form fit refuses
        return None
    from keras.src.trainers.data_adapters import get_data_adapter
    from keras.src.trainers.data_adapters.data_adapter import DataAdapter

    once = isinstance(data, Replay)  # a generator: read once, so each pass reads anew

    def adapter() -> Any:
        return get_data_adapter(**fit_arguments(data, batch_size, class_weight))

    first = adapter()

    class EndlessEpochs(_endless(first.batch_size or batch_size)):
        def _passes(self, read: Any) -> Iterator[Any]:
            current = first
            while True:
                count = 0
                try:
                    for batch in read(current):
                        count += 1
                        yield batch
                except GeneratorExit:  # left mid-pass: end it, or a PyDataset's next read hangs
                    current.on_epoch_end()
                    raise
                current.on_epoch_end()
                if not count:  # empty data: fit says it ran out, as yours would
                    return
                if once:
                    current = adapter()

        def get_numpy_iterator(self) -> Iterator[Any]:
            return self._passes(lambda a: a.get_numpy_iterator())

        def get_jax_iterator(self, super_batch: int | None = None) -> Iterator[Any]:
            # JAX super-batches (Keras 3.16) stack across passes: no epoch end leaves a partial one.
            batches = self._passes(lambda a: a.get_jax_iterator())
            return _super_batches(batches, super_batch) if super_batch else batches

        def get_torch_dataloader(self) -> Any:
            return _Iterable(lambda: self._passes(lambda a: a.get_torch_dataloader()))

        def get_tf_dataset(self) -> Any:
            ends = type(first).on_epoch_end is not DataAdapter.on_epoch_end
            if not once and not ends:  # its own tf.data form (yours, for tf.data), repeated
                return first.get_tf_dataset().repeat()
            import tensorflow as tf

            # Epochs ending as fit ends them, or read anew: the passes, as Keras reads these forms.
            spec = first.get_tf_dataset().element_spec  # from the batches it peeked at
            return tf.data.Dataset.from_generator(self.get_numpy_iterator, output_signature=spec)

    return EndlessEpochs()


def _super_batches(batches: Iterator[Any], count: int) -> Iterator[Any]:
    """`batches` `count` at a time, stacked on a new axis, for Keras 3.16's scanned steps on JAX."""
    import jax.numpy as jnp
    from keras.src.trainers.data_adapters import data_adapter_utils

    return data_adapter_utils.super_batch_iterator(batches, count, stack_fn=jnp.stack)


def _endless(batch_size: int | None) -> type:
    """A Keras data adapter base of no length and whole batches of `batch_size` examples."""
    from keras.src.trainers.data_adapters.data_adapter import DataAdapter

    class Endless(DataAdapter):
        @property
        def num_batches(self) -> None:
            return None

        @property
        def batch_size(self) -> int | None:
            return batch_size

        @property
        def has_partial_batch(self) -> bool:
            return False

        @property
        def partial_batch_size(self) -> None:
            return None

    return Endless


class _Iterable:
    """An iterable whose every ``iter()`` is a new iterator from `make`."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __iter__(self) -> Iterator[Any]:
        return self.make()


class Forever:
    """An iterable (what PyTorch's EpochIterator iterates) of one batch, repeated."""

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    def __iter__(self) -> Iterator[Any]:
        return itertools.repeat(self.batch)


def epoch_batches(data: Any) -> int | None:
    """An epoch's batches where `data` says so unread (a Grain dataset's ``len()``), or None."""
    from toolkit.data import _grain
    from toolkit.data.builder import infer_batch_size

    if not _grain.is_grain_dataset(data) or not infer_batch_size(data):
        return None
    try:
        count = len(data)
    except TypeError:  # an IterDataset of Grain's own has no length
        return None
    return count if 0 < count < sys.maxsize else None  # .repeat(): sys.maxsize, no epoch


def is_generator(data: Any) -> bool:
    """A Python generator: what Keras's fit reads once, through its generator adapter."""
    return isinstance(data, types.GeneratorType)
