"""Placement: ops on a device that must exist, random ops kept off Metal, and a report of where
every op of one training step really ran (CPU fallbacks flagged), for each backend.

* :func:`on` places the ops of a block on a device that must exist (``tf.device`` and
  ``keras.device`` would fall back or fail later); :func:`augmentation_device` pins random
  ops to the CPU under tensorflow-metal, where they have no kernels.
* :func:`placement_report` runs a function (one training step) and lists every op with the
  device it ran on, flagging ops that fell back to the CPU while a GPU was selected:
  TensorFlow's placed graphs (soft placement), PyTorch's dispatched ATen ops (with the ops MPS
  ran on the CPU, ``PYTORCH_ENABLE_MPS_FALLBACK``), and for JAX the device of each result
  (XLA compiles a step for one device: an op without a kernel fails to compile instead).

How each backend does it is its seam module's (``toolkit.backend._<name>.devices``)."""

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
    """Places the ops of the block on a device that must exist: ``tf.device`` on TensorFlow,
    ``keras.device`` on JAX and PyTorch.

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
    """Where random/augmentation ops should run: the CPU under tensorflow-metal (it has no
    kernels for ops such as ``RngReadAndSkip`` / ``StatelessRandomGetKeyCounter``, so they
    would bounce between devices), anywhere else a no-op (tf.data's ops run on the CPU under
    JAX and PyTorch in any case)."""
    seam = backends.find()  # None: a Keras backend the toolkit does not measure on (numpy)
    return seam.augmentation_scope(device) if seam is not None else contextlib.nullcontext()


def placement_report(
    fn: Callable[..., Any],
    *args: Any,
    gpu_selected: bool | None = None,
    backend: str | None = None,
    **kwargs: Any,
) -> PlacementReport:
    """Runs ``fn(*args, **kwargs)`` once and reports the device every op was placed on.

    * TensorFlow: the placed (partitioned) graphs in its run metadata, so it sees what really
      ran where, after soft placement moved ops without a kernel to the CPU. Pass work that
      runs a function for the first time (a fresh ``tf.function``, or the first
      ``train_on_batch`` of a model): a graph is placed when it is first instantiated.
    * PyTorch: every ATen op dispatched, with the device of its result; ops that MPS sent to
      the CPU (``PYTORCH_ENABLE_MPS_FALLBACK=1``: PyTorch warns once per op) are listed on
      ``cpu (MPS fallback)``. Any call works, warmed up or not.
    * JAX: XLA compiles each step for one device, with no soft placement (an op without a kernel
      there fails to compile), so the report lists the device of each result (of each live
      array when the result holds none, as ``train_on_batch``'s floats).

    Args:
        fn: the work to inspect, e.g. ``lambda: model.train_on_batch(x, y)``.
        gpu_selected: whether ops were meant for a GPU. Defaults to whether the backend's
            default device is a GPU.
        backend: defaults to the one Keras trains on."""
    return backends.get(backend).placement(fn, args, kwargs, gpu_selected)
