"""Data without TensorFlow: NumPy arrays in batches, for ``fit`` on any backend. Without TensorFlow,
the catalog's digits and synthetic data come as an :class:`ArraySource` (with a per-batch transform
such as a resize), which the runner batches with :func:`array_batches`."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np

from toolkit.core.checks import ConfigError, argument, check_number

__all__: list[str] = []  # offered through toolkit.data


def has_tensorflow() -> bool:
    """Whether TensorFlow is installed (tf.data pipelines), without importing it."""
    return importlib.util.find_spec("tensorflow") is not None


@dataclasses.dataclass(frozen=True)
class ArraySource:
    """Examples as arrays, and `transform` applied to each batch of features when read."""

    features: np.ndarray
    labels: np.ndarray
    transform: Callable[[np.ndarray], np.ndarray] | None = None

    def __post_init__(self) -> None:
        if len(self.features) != len(self.labels):
            raise ValueError(
                f"features and labels differ in length: {len(self.features)} vs {len(self.labels)}"
            )

    def __len__(self) -> int:
        return len(self.features)

    def take(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The examples at `indices`, transformed: one batch."""
        x = np.asarray(self.features[indices])
        return (self.transform(x) if self.transform else x), np.asarray(self.labels[indices])

    def element_shape(self) -> tuple[int, ...]:
        """The shape of one transformed example."""
        return tuple(self.take(np.arange(1))[0].shape[1:])


_MODES = {1: "L", 3: "RGB", 4: "RGBA"}  # Pillow's mode for each channel count


@dataclasses.dataclass(frozen=True)
class ImageFiles:
    """JPEG/PNG files as examples, decoded by Pillow when read: ``self[i]`` is ``(image, label)``,
    resized as ``tf.image.resize`` does, float32 in [0, 1] or uint8 (what Grain's workers read)."""

    paths: tuple[str, ...]
    labels: np.ndarray
    size: tuple[int, int]
    channels: int = 3
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if len(self.paths) != len(self.labels):
            raise ValueError(f"paths and labels differ: {len(self.paths)} vs {len(self.labels)}")
        if self.channels not in (1, 3, 4):
            raise ValueError(f"channels: must be 1, 3 or 4, got {self.channels}")
        if self.dtype not in ("float32", "uint8"):
            raise ValueError(f"dtype: must be 'float32' or 'uint8', got {self.dtype!r}")

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        from PIL import Image

        mode = _MODES[self.channels]
        with Image.open(self.paths[int(index)]) as image:
            pixels = np.asarray(image if image.mode == mode else image.convert(mode))
        pixels = pixels.reshape(*pixels.shape[:2], self.channels)
        out = resize_images(pixels[None], *self.size)[0]  # float32, 0-255
        if self.dtype == "uint8":
            out = np.clip(np.round(out), 0, 255).astype(np.uint8)
        else:
            out = out / np.float32(255.0)
        return out, np.asarray(self.labels[int(index)])

    def subset(self, indices: Any) -> ImageFiles:
        """The files at `indices` (a split)."""
        indices = np.asarray(indices, dtype=np.int64)
        paths = tuple(self.paths[i] for i in indices)
        return dataclasses.replace(self, paths=paths, labels=np.asarray(self.labels)[indices])

    def take(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The examples at `indices`, decoded: one batch."""
        pairs = [self[i] for i in indices]
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])

    def element_shape(self) -> tuple[int, ...]:
        return (*self.size, self.channels)


def resize_images(images: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of ``(n, h, w, c)`` images with half-pixel centres, as ``tf.image.resize``
    does (no antialiasing), float32 out. Every Grain image comes here, on cores shared with the
    step: weights cached per size, uint8 read as is, sums in place; bit-identical to the formula."""
    images = np.asarray(images)
    if images.dtype not in (np.uint8, np.float32):
        images = images.astype(np.float32)
    n, h, w, c = images.shape
    if (h, w) == (height, width):
        return images.astype(np.float32, copy=False)
    y0, y1, fy, gy = _bilinear_weights(h, height, 1)
    x0, x1, fx, gx = _bilinear_weights(w, width, c)
    flat = images.reshape(n, h, w * c)
    rows = np.take(flat, y0, axis=1) * gy[:, None]
    rows += np.take(flat, y1, axis=1) * fy[:, None]
    out = rows[..., x0] * gx
    out += rows[..., x1] * fx
    return out.reshape(n, height, width, c)


@functools.lru_cache(maxsize=64)
def _bilinear_weights(size_in: int, size_out: int, channels: int) -> tuple[np.ndarray, ...]:
    """One axis of :func:`resize_images`: each output's source indices and weights (read-only)."""
    src = (np.arange(size_out, dtype=np.float32) + 0.5) * (size_in / size_out) - 0.5
    src = np.clip(src, 0.0, size_in - 1)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, size_in - 1)
    f = (src - lo).astype(np.float32)
    k = np.arange(channels)
    parts = (
        (lo[:, None] * channels + k).ravel(),
        (hi[:, None] * channels + k).ravel(),
        np.repeat(f, channels),
        np.repeat(1 - f, channels),
    )
    for part in parts:
        part.flags.writeable = False
    return parts


def array_batches(
    source: ArraySource | ImageFiles | tuple[Any, Any],
    batch_size: int,
    *,
    shuffle: bool = False,
    seed: int | None = None,
    drop_remainder: bool = False,
    repeat: bool = False,
    batches_per_epoch: int | None = None,
) -> Any:
    """A ``keras.utils.PyDataset`` of ``(features, labels)`` batches of `source`.

    Args:
        source: an :class:`ArraySource`, :class:`ImageFiles` or ``(features, labels)`` arrays.
        shuffle: a new order every epoch (from `seed`).
        drop_remainder: leave out the last partial batch of each pass.
        repeat: endless (the epoch's length is ``fit``'s ``steps_per_epoch``).
        batches_per_epoch: an epoch's length when it is not one pass.

    Raises:
        ValueError: no batch at all."""
    import keras

    check_number(argument("array_batches", "batch_size"), batch_size, integer=True, least=1)
    if batch_size is None:
        raise ConfigError("array_batches: batch_size must be an integer >= 1, got None")
    if isinstance(source, tuple):
        source = ArraySource(np.asarray(source[0]), np.asarray(source[1]))
    count = len(source)
    per_pass = _batches_per_pass(count, batch_size, drop_remainder)

    class ArrayBatches(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0
            # The order of the pass being read: a permutation per batch cost more than a step.
            self._cached: tuple[tuple[int, int], np.ndarray] | None = None

        @property
        def num_batches(self) -> int | None:
            return None if repeat else (batches_per_epoch or per_pass)

        def _order(self, n_pass: int) -> np.ndarray:
            key = (self.epoch, n_pass)
            cached = self._cached  # one read: workers may call from several threads
            if cached is not None and cached[0] == key:
                return cached[1]
            order = _pass_order(count, shuffle, seed, key)
            self._cached = (key, order)
            return order

        def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
            n_pass, within = divmod(int(index), per_pass)  # endless: passes within an epoch
            order = self._order(n_pass)
            return source.take(order[within * batch_size : (within + 1) * batch_size])

        def on_epoch_end(self) -> None:
            self.epoch += 1

    batches = ArrayBatches()
    batches.batch_size = batch_size  # what the profiler reads for examples/s
    batches.description = _describe_batches(source, batch_size, shuffle, repeat)
    return batches


def _batches_per_pass(count: int, batch_size: int, drop_remainder: bool) -> int:
    """The batches one pass over `count` examples makes; a pass of no batch is refused."""
    per_pass = count // batch_size if drop_remainder else -(-count // batch_size)
    if per_pass < 1:
        raise ValueError(f"--batch_size={batch_size} is larger than the {count} examples: lower it")
    return per_pass


def _pass_order(count: int, shuffle: bool, seed: int | None, key: tuple[int, int]) -> np.ndarray:
    """The order of pass ``key[1]`` of epoch ``key[0]``: seeded by seed, epoch, pass; or as is."""
    if not shuffle:
        return np.arange(count)
    epoch, n_pass = key
    return np.random.default_rng([seed or 0, epoch, n_pass]).permutation(count)


def _describe_batches(
    source: ArraySource | ImageFiles, batch_size: int, shuffle: bool, repeat: bool
) -> str:
    """The batches' stages in words (``describe_pipeline`` shows them)."""
    stages = ["image files (decode)"] if isinstance(source, ImageFiles) else ["arrays"]
    stages += ["transform"] if getattr(source, "transform", None) else []
    stages += [*(["shuffle"] if shuffle else []), f"batch({batch_size})"]
    stages += ["repeat"] if repeat else []
    return " → ".join(stages) + " (keras.utils.PyDataset)"
