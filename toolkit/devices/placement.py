"""Placement: ops on a device that must exist, random ops kept off Metal, and a report of where
every op of one training step really ran (soft placement's CPU fallbacks flagged).

* :func:`on` is ``tf.device`` that refuses a device that does not exist instead of silently
  falling back; :func:`augmentation_device` pins random ops to the CPU on Metal, where they have
  no kernels.
* :func:`placement_report` runs a function (one training step) and lists every op with the
  device it ran on, flagging ops that fell back to the CPU while a GPU was selected.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from toolkit.devices.selection import DeviceInfo, detect, parse_device_spec, resolve

__all__ = ["PlacementReport", "augmentation_device", "on", "placement_report"]


@contextlib.contextmanager
def on(spec: str) -> Iterator[DeviceInfo]:
    """``tf.device`` for a device that must exist: places the ops in the block on it.

    Raises:
        DeviceError: the device is not visible (``tf.device`` would silently fall back).
    """
    import tensorflow as tf

    kind, index = parse_device_spec(spec)
    logical = tf.config.list_logical_devices()
    devices = [d for d in detect() if any(ld.name.endswith(d.logical_name[8:]) for ld in logical)]
    chosen = resolve(f"{kind}:{index}" if index is not None else kind, devices)
    with tf.device(chosen.logical_name):
        yield chosen


def augmentation_device(device: DeviceInfo | None = None) -> contextlib.AbstractContextManager:
    """Where random/augmentation ops should run: the CPU on Metal (tensorflow-metal has no
    kernels for ops such as ``RngReadAndSkip`` / ``StatelessRandomGetKeyCounter``, so they
    would bounce between devices), anywhere else a no-op."""
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
}


@dataclasses.dataclass(frozen=True)
class PlacementReport:
    """Every op of a run with the device it was placed on.

    Attributes:
        ops: ``(op name, op type, device)`` for each placed op.
        gpu_selected: whether a GPU was the intended device.
    """

    ops: tuple[tuple[str, str, str], ...]
    gpu_selected: bool

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
            if "CPU" in _short(device) and op_type not in _HOST_ONLY
        ]

    def render(self) -> str:
        if not self.ops:
            return (
                "no ops were placed: the function ran no new graph (it was traced before); "
                "pass work that runs a function for the first time"
            )
        lines = []
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
    fn: Callable[..., Any], *args: Any, gpu_selected: bool | None = None, **kwargs: Any
) -> PlacementReport:
    """Runs ``fn(*args, **kwargs)`` once and reports the device every op was placed on.

    It reads the placed (partitioned) graphs TensorFlow records in its run metadata, so it
    sees what really ran where, after soft placement moved ops without a kernel to the CPU.
    Pass work that runs a function for the first time (a fresh ``tf.function``, or the first
    ``train_on_batch`` of a model): a graph is placed when it is first instantiated.

    Args:
        fn: the work to inspect, e.g. ``lambda: model.train_on_batch(x, y)``.
        gpu_selected: whether ops were meant for a GPU. Defaults to whether one is visible.
    """
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
