"""Detect and select devices (CPUs, CUDA GPUs, Apple GPUs) as Keras's backend sees them. An Apple
GPU is kind ``metal`` whichever backend reaches it (``mps`` in a spec); nothing here knows a
backend by name: what differs is the seam's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit import backend as backends
from toolkit.core._device_types import DeviceError, DeviceInfo, parse_device_spec

__all__: list[str] = []  # offered through toolkit.devices

BUILD_HELP = "See BUILD.md"


def detect(backend: str | None = None) -> list[DeviceInfo]:
    """The devices `backend` sees: CPUs first, then GPUs, each with its kind."""
    return backends.get(backend).detect_devices()


def _unavailable(spec: str, kind: str, devices: Sequence[DeviceInfo], backend: str) -> DeviceError:
    available = ", ".join(d.spec for d in devices) or "none"
    why = backends.get(backend).why_no_device(kind) or (
        f"{backends.info(backend).title} sees no GPU" if kind == "gpu" else "no such device"
    )
    return DeviceError(
        f"unknown device {spec!r} on --backend={backend}: {why}. Available: {available}. "
        f"{BUILD_HELP}"
    )


def resolve(
    spec: str = "auto",
    devices: Sequence[DeviceInfo] | None = None,
    *,
    backend: str | None = None,
) -> DeviceInfo:
    """The device `spec` names among `devices`, changing nothing; ``auto`` prefers the first GPU."""
    backend = backend or backends.name()
    devices = list(devices) if devices is not None else detect(backend)
    kind, index = parse_device_spec(spec)
    if kind == "auto":
        gpus = [d for d in devices if d.is_gpu]
        pool = gpus or [d for d in devices if d.kind == "cpu"]
    elif kind == "gpu":
        pool = [d for d in devices if d.is_gpu]
    else:
        pool = [d for d in devices if d.kind == kind]
    if index is not None:
        pool = [d for d in pool if d.index == index]
    if not pool:
        raise _unavailable(spec, kind if kind != "auto" else "gpu", devices, backend)
    return pool[0]


def select(
    spec: str = "auto", memory_growth: bool = True, *, backend: str | None = None
) -> DeviceInfo:
    """Makes `spec` the device the backend trains on, like ML Compute's ``set_mlc_device``: on
    TensorFlow the only GPU visible (``cpu`` hides all; before the runtime starts), on JAX the
    default device, on PyTorch Keras's device (``KERAS_TORCH_DEVICE`` before Keras loads).

    Args:
        spec: ``auto`` | ``cpu`` | ``gpu`` | ``cuda`` | ``metal`` (``mps``), optionally ``:index``.
        memory_growth: allocate GPU memory as needed (TensorFlow on CUDA).

    Returns:
        The chosen device.

    Raises:
        DeviceError: no such device here (listing what is), or the runtime already started."""
    backend = backend or backends.name()
    chosen = resolve(spec, detect(backend), backend=backend)
    backends.get(backend).select_device(chosen, memory_growth)
    return chosen


def framework_device(device: DeviceInfo, backend: str | None = None) -> Any:
    """`device` as `backend`'s own API names it (``jax.Device``, ``cuda:1``, ``/device:GPU:0``)."""
    return backends.get(backend).framework_device(device)
