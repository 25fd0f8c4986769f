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
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from toolkit import backend as backends
from toolkit.devices.selection import (
    DeviceInfo,
    detect,
    framework_device,
    parse_device_spec,
    resolve,
)

__all__ = ["PlacementReport", "augmentation_device", "on", "placement_report"]


@contextlib.contextmanager
def on(spec: str, *, backend: str | None = None) -> Iterator[DeviceInfo]:
    """Places the ops of the block on a device that must exist: ``tf.device`` on TensorFlow,
    ``keras.device`` on JAX and PyTorch.

    Raises:
        DeviceError: the device is not there (``tf.device`` would silently fall back).
    """
    backend = backend or backends.name()
    kind, index = parse_device_spec(spec)
    wanted = f"{kind}:{index}" if index is not None else kind
    if backend != "tensorflow":
        import keras

        chosen = resolve(wanted, backend=backend)
        with keras.device(framework_device(chosen, backend)):
            yield chosen
        return
    import tensorflow as tf

    logical = tf.config.list_logical_devices()
    devices = [
        d for d in detect(backend) if any(ld.name.endswith(d.logical_name[8:]) for ld in logical)
    ]
    chosen = resolve(wanted, devices, backend=backend)
    with tf.device(chosen.logical_name):
        yield chosen


def augmentation_device(device: DeviceInfo | None = None) -> contextlib.AbstractContextManager:
    """Where random/augmentation ops should run: the CPU under tensorflow-metal (it has no
    kernels for ops such as ``RngReadAndSkip`` / ``StatelessRandomGetKeyCounter``, so they
    would bounce between devices), anywhere else a no-op (tf.data's ops run on the CPU under
    JAX and PyTorch in any case)."""
    if backends.name() != "tensorflow":
        return contextlib.nullcontext()
    import tensorflow as tf

    if device is None:
        gpus = [d for d in detect() if d.is_gpu]
        device = gpus[0] if gpus else None
    if device is not None and device.kind == "metal":
        return tf.device("/device:CPU:0")
    return contextlib.nullcontext()


_HOST_ONLY = {
    "_Arg",
    "_Retval",
    "_DeviceArg",
    "_DeviceRetval",
    "_Send",
    "_Recv",
    "_HostSend",
    "_HostRecv",
    "NoOp",
    "Const",
    # PyTorch: copies between host and device, and reading a scalar back
    "aten::_to_copy",
    "aten::copy_",
    "aten::lift_fresh",
    "aten::lift_fresh_copy",
    "aten::_local_scalar_dense",
}
# What PyTorch warns when an op has no MPS kernel and PYTORCH_ENABLE_MPS_FALLBACK=1 sends it to
# the CPU: "The operator 'aten::xyz' is not currently supported on the MPS backend and will fall
# back to run on the CPU."
_MPS_FALLBACK = re.compile(r"operator '([\w:.]+)' is not currently (?:supported|implemented)")
MPS_FALLBACK_DEVICE = "cpu (MPS fallback)"


@dataclasses.dataclass(frozen=True)
class PlacementReport:
    """Every op of a run with the device it was placed on.

    Attributes:
        ops: ``(op name, op type, device)`` for each placed op.
        gpu_selected: whether a GPU was the intended device.
        note: what the listing means on this backend, where it differs from TensorFlow's.
    """

    ops: tuple[tuple[str, str, str], ...]
    gpu_selected: bool
    note: str = ""

    def by_device(self) -> dict[str, Counter]:
        """``{device: Counter(op type -> count)}``."""
        out: dict[str, Counter] = {}
        for _, op_type, device in self.ops:
            out.setdefault(_short(device), Counter())[op_type] += 1
        return out

    def cpu_fallbacks(self) -> list[tuple[str, str]]:
        """Ops that ran on the CPU while a GPU was selected (argument/transfer plumbing left
        out)."""
        if not self.gpu_selected:
            return []
        return [
            (name, op_type)
            for name, op_type, device in self.ops
            if "cpu" in _short(device).lower() and op_type not in _HOST_ONLY
        ]

    def render(self) -> str:
        if not self.ops:
            return (
                "no ops were placed: the function ran no new graph (it was traced before); "
                "pass work that runs a function for the first time"
            )
        lines = [self.note] if self.note else []
        for device, counts in sorted(self.by_device().items()):
            lines.append(f"{device}: {sum(counts.values())} ops")
            for op_type, n in counts.most_common():
                lines.append(f"  {n:5d}  {op_type}")
        fallbacks = self.cpu_fallbacks()
        if fallbacks:
            types = Counter(t for _, t in fallbacks)
            lines.append(
                f"WARNING: {len(fallbacks)} ops ran on the CPU while a GPU was selected: "
                + ", ".join(f"{t} ×{n}" for t, n in types.most_common())
            )
        elif self.gpu_selected:
            lines.append("all compute ops ran on the GPU")
        return "\n".join(lines)


def _short(device: str) -> str:
    return device.rsplit("device:", 1)[-1]


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
        backend: defaults to the one Keras trains on.
    """
    backend = backend or backends.name()
    if backend == "torch":
        return _torch_placement(fn, args, kwargs, gpu_selected)
    if backend == "jax":
        return _jax_placement(fn, args, kwargs, gpu_selected)
    return _tensorflow_placement(fn, args, kwargs, gpu_selected)


def _tensorflow_placement(
    fn: Callable[..., Any], args: Any, kwargs: Any, gpu_selected: bool | None
) -> PlacementReport:
    import tensorflow as tf
    from tensorflow.python.eager import context  # the run-metadata switch has no public API

    if gpu_selected is None:
        gpu_selected = bool(tf.config.list_logical_devices("GPU"))
    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        result = fn(*args, **kwargs)
        # Materialize the result so that asynchronous work has run before we read.
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    ops = tuple(
        (node.name, node.op, node.device)
        for function_graph in metadata.function_graphs
        for partition in function_graph.partition_graphs
        for node in partition.node
    )
    return PlacementReport(ops, gpu_selected)


def _torch_placement(
    fn: Callable[..., Any], args: Any, kwargs: Any, gpu_selected: bool | None
) -> PlacementReport:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode  # the dispatcher's Python hook

    ops: list[tuple[str, str, str]] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            tensors = [
                t
                for t in torch.utils._pytree.tree_leaves((out, args, kwargs or {}))
                if isinstance(t, torch.Tensor)
            ]
            device = str(tensors[0].device) if tensors else "cpu"
            ops.append((f"{len(ops)}", f"aten::{func.overloadpacket.__name__}", device))
            return out

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder():
            fn(*args, **kwargs)
    fell_back = {m.group(1) for w in caught if (m := _MPS_FALLBACK.search(str(w.message)))}
    for w in caught:
        if not _MPS_FALLBACK.search(str(w.message)):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    ops = [
        (name, op, MPS_FALLBACK_DEVICE if op in fell_back and device.startswith("mps") else device)
        for name, op, device in ops
    ]
    if gpu_selected is None:
        gpu_selected = any(not d.startswith("cpu") for _, _, d in ops)
    note = "(PyTorch: ATen ops as dispatched, each on the device of its result)" if ops else ""
    return PlacementReport(tuple(ops), gpu_selected, note)


def _jax_placement(
    fn: Callable[..., Any], args: Any, kwargs: Any, gpu_selected: bool | None
) -> PlacementReport:
    import jax

    result = fn(*args, **kwargs)
    arrays = [leaf for leaf in jax.tree_util.tree_leaves(result) if isinstance(leaf, jax.Array)]
    what = "result"
    if not arrays:  # e.g. train_on_batch's Python floats: where the step's state lives
        arrays, what = list(jax.live_arrays()), "array"
    ops = []
    for i, leaf in enumerate(arrays):
        leaf.block_until_ready()
        device = ",".join(sorted(str(d) for d in leaf.devices()))
        ops.append((f"{what}[{i}]", f"{leaf.dtype}{list(leaf.shape)}", device))
    if gpu_selected is None:
        default = jax.config.jax_default_device or jax.devices()[0]
        platform = default if isinstance(default, str) else default.platform
        gpu_selected = platform.lower() != "cpu"
    return PlacementReport(
        tuple(ops),
        gpu_selected,
        "(JAX: XLA compiles the whole step for one device, with no per-op fallback; listed: "
        + (
            "the device of each result)"
            if what == "result"
            else "the device of each live array: the model's and optimizer's state)"
        ),
    )
