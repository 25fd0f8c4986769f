"""Detect and select devices: CPUs, CUDA GPUs and Apple GPUs, as the backend Keras trains on
sees them, and a selection like ML Compute's ``set_mlc_device``, made by each backend its own
way.

* :func:`detect` lists CPUs and GPUs as :class:`DeviceInfo`, each backend asked its own way by
  its seam module (``toolkit.backend._<name>.devices``): an Apple GPU is kind ``metal``
  whichever backend reaches it; ``mps`` is another name for it in a spec.
* :func:`resolve` finds the device a spec names without changing anything; :func:`select`
  makes it the one the backend uses.

Nothing here knows a backend by name: what differs between them is the seam's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit import backend as backends
from toolkit.core._device_types import DeviceError, DeviceInfo, parse_device_spec

__all__: list[str] = []  # offered through toolkit.devices

BUILD_HELP = "See BUILD.md"


def detect(backend: str | None = None) -> list[DeviceInfo]:
    """The devices `backend` (default: the one Keras trains on) sees: CPUs first, then GPUs,
    each with its kind."""
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
    """The device `spec` names among `devices` (default: :func:`detect` for `backend`),
    without changing anything. ``auto`` prefers the first GPU."""
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
    """Makes `spec` the device the backend trains on, like ML Compute's ``set_mlc_device``.

    * TensorFlow: ``cpu`` hides every GPU; a GPU choice makes only that GPU visible (and
      turns on memory growth on CUDA, so TensorFlow does not take all GPU memory up front).
      Must run before TensorFlow starts its runtime (before the first op or model).
    * JAX: the device becomes JAX's default device (``jax_default_device``), where Keras puts
      its variables and runs its steps.
    * PyTorch: the device becomes Keras's PyTorch device (what ``keras.device`` sets for a
      block, here for the program; ``KERAS_TORCH_DEVICE`` before Keras loads).

    Args:
        spec: ``auto`` | ``cpu`` | ``gpu`` | ``cuda`` | ``metal`` (``mps``), optionally
            ``:index``.
        memory_growth: allocate GPU memory as needed (TensorFlow on CUDA). Defaults to `True`.
        backend: the backend to set up. Defaults to the one Keras trains on.

    Returns:
        The chosen device.

    Raises:
        DeviceError: no such device here (the message lists what is, and what would reach
            it), or the runtime already started with another visible-device setup."""
    backend = backend or backends.name()
    chosen = resolve(spec, detect(backend), backend=backend)
    backends.get(backend).select_device(chosen, memory_growth)
    return chosen


def framework_device(device: DeviceInfo, backend: str | None = None) -> Any:
    """`device` as `backend`'s own API names it: a ``jax.Device`` on JAX, a name such as
    ``cuda:1`` on PyTorch, TensorFlow's logical device name (``/device:GPU:0``)."""
    return backends.get(backend).framework_device(device)
