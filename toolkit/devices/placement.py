"""Placement: ops on a device that must exist, random ops kept off Metal, and where every op of a
training step really ran (CPU fallbacks flagged); each backend's way is its seam module's."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from toolkit import backend as backends
from toolkit.core._device_types import DeviceInfo, PlacementReport, parse_device_spec
from toolkit.devices.selection import resolve

__all__: list[str] = []  # offered through toolkit.devices


@contextlib.contextmanager
def on(spec: str, *, backend: str | None = None) -> Iterator[DeviceInfo]:
    """Places the block's ops on a device that must exist (``tf.device`` or ``keras.device``).

    Raises:
        DeviceError: the device is not there (``tf.device`` would silently fall back)."""
    backend = backend or backends.name()
    seam = backends.get(backend)
    kind, index = parse_device_spec(spec)
    wanted = f"{kind}:{index}" if index is not None else kind
    chosen = resolve(wanted, seam.visible_devices(), backend=backend)
    with seam.device_scope(chosen):
        yield chosen


def augmentation_device(device: DeviceInfo | None = None) -> contextlib.AbstractContextManager:
    """Where random ops run: the CPU on tensorflow-metal (no ``RngReadAndSkip``), else a no-op."""
    seam = backends.find()  # None: a Keras backend the toolkit does not measure on (numpy)
    return seam.augmentation_scope(device) if seam is not None else contextlib.nullcontext()


def placement_report(
    fn: Callable[..., Any],
    *args: Any,
    gpu_selected: bool | None = None,
    backend: str | None = None,
    **kwargs: Any,
) -> PlacementReport:
    """Runs ``fn(*args, **kwargs)`` once and reports the device every op was placed on: on
    TensorFlow the placed graphs after soft placement (pass work that runs a function for the first
    time: a graph is placed when first instantiated); on PyTorch every ATen op with its result's
    device, MPS's CPU fallbacks on ``cpu (MPS fallback)``; on JAX (no soft placement) each result's.

    Args:
        fn: the work to inspect, e.g. ``lambda: model.train_on_batch(x, y)``.
        gpu_selected: whether ops were meant for a GPU (default: the backend's default device's)."""
    return backends.get(backend).placement(fn, args, kwargs, gpu_selected)
