"""PyTorch's devices: detection through ``torch.cuda`` and ``torch.backends.mps`` (a ROCm build's
GPUs are not CUDA), selection as Keras's PyTorch device, placement from each ATen op's result
device (MPS fallbacks too), Keras's traps on MPS. PyTorch is imported inside each function."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from toolkit.backend._common import has_float64, keras_device_scope, no_augmentation_pin
from toolkit.core._device_types import (
    MB,
    DeviceInfo,
    Finding,
    PlacementReport,
    PreflightContext,
    host_cpu,
    host_ram_mb,
)
from toolkit.core.machine import cpu_model

augmentation_scope = no_augmentation_pin

_WHY_NONE = {
    "metal": "PyTorch sees no MPS device (not Apple silicon, macOS older than 12.3, or a "
    "PyTorch built without MPS)",
    "cuda": "PyTorch sees no CUDA GPU (a CPU build of torch, no NVIDIA driver, or "
    "CUDA_VISIBLE_DEVICES hides it)",
}
# Copies between host and device, and reading a scalar back: on the host by design.
_PLUMBING = frozenset(
    {"aten::_to_copy", "aten::copy_", "aten::lift_fresh", "aten::lift_fresh_copy",
     "aten::_local_scalar_dense"}
)  # fmt: skip
# PyTorch's warning when PYTORCH_ENABLE_MPS_FALLBACK=1 sends an op lacking an MPS kernel to the CPU
_MPS_FALLBACK = re.compile(r"operator '([\w:.]+)' is not currently (?:supported|implemented)")
MPS_FALLBACK_DEVICE = "cpu (MPS fallback)"


def device_infos(cuda: Sequence[Any], mps: bool, *, hip: bool = False) -> list[DeviceInfo]:
    """DeviceInfos from ``get_device_properties`` results, MPS availability and a ROCm build."""
    found = [host_cpu()]
    for i, props in enumerate(cuda):
        found.append(
            DeviceInfo(
                kind="gpu" if hip else "cuda",
                name=f"cuda:{i}",
                index=i,
                human_name=str(getattr(props, "name", "GPU")),
                memory_mb=getattr(props, "total_memory", 0) / MB or None,
                compute_capability=None
                if hip
                else (int(getattr(props, "major", 0)), int(getattr(props, "minor", 0))),
            )
        )
    if mps:
        found.append(DeviceInfo("metal", "mps", 0, f"{cpu_model()} GPU (MPS)", host_ram_mb()))
    return found


def detect_devices() -> list[DeviceInfo]:
    import torch

    cuda = []
    if torch.cuda.is_available():
        cuda = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    return device_infos(cuda, bool(torch.backends.mps.is_available()), hip=bool(torch.version.hip))


def why_no_device(kind: str) -> str | None:
    return _WHY_NONE.get(kind)


def framework_device(device: DeviceInfo) -> str:
    """PyTorch's name for a DeviceInfo: ``cpu``, ``cuda:1``, ``mps``."""
    if device.kind == "metal":
        return "mps"
    if device.is_gpu:
        return f"cuda:{device.index}"
    return "cpu"


def select_device(device: DeviceInfo, memory_growth: bool) -> None:
    """`device` becomes Keras's PyTorch device for the rest of the program (``KERAS_TORCH_DEVICE``
    before Keras loads); `memory_growth` is TensorFlow's (PyTorch's allocator grows anyway)."""
    name = framework_device(device)
    if "keras" not in sys.modules:
        os.environ["KERAS_TORCH_DEVICE"] = name
        return
    from keras.src.backend.common import global_state  # keras.device's own switch

    global_state.set_global_attribute("torch_device", name)


def visible_devices() -> list[DeviceInfo]:
    return detect_devices()


def device_scope(device: DeviceInfo) -> contextlib.AbstractContextManager:
    return keras_device_scope(framework_device(device))


def placement(
    fn: Callable[..., Any], args: Any, kwargs: Any, gpu_selected: bool | None
) -> PlacementReport:
    """Every ATen op dispatched, with its result's device (MPS fallbacks on the CPU, so named)."""
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
    return PlacementReport(tuple(ops), gpu_selected, note, plumbing=_PLUMBING)


def apple_gpu_path() -> tuple[str, str, str]:
    return (
        "maintained",
        "PyTorch's MPS device: --backend=torch --device=mps",
        "PyTorch's MPS backend (pytorch.org/docs/stable/notes/mps.html)",
    )


def reaches_apple_gpu() -> bool:
    """PyTorch's MPS device is available (imports PyTorch to ask)."""
    import torch

    return bool(torch.backends.mps.is_available())


def preflight(device: DeviceInfo, context: PreflightContext) -> list[Finding]:
    """The traps of Keras on PyTorch's MPS device."""
    if device.kind != "metal":
        return []
    findings = []
    if has_float64(context.model):
        findings.append(
            Finding(
                "error",
                "mps-float64",
                "float64 weights or inputs: the MPS device has no float64 type, PyTorch refuses "
                "them",
                "use float32 (keras.config.set_floatx('float32')) or --device=cpu",
            )
        )
    if context.jit_compile:
        findings.append(
            Finding(
                "warning",
                "mps-compile",
                "jit_compile=True is torch.compile, whose MPS (Metal) code generation is a "
                "prototype: it may fail or run slower than eager",
                "measure with and without (toolkit.tune); --nojit_compile if it fails",
            )
        )
    fallback = os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "") == "1"
    findings.append(
        Finding(
            "info",
            "mps-fallback",
            "ops without an MPS kernel "
            + (
                "run on the CPU (PYTORCH_ENABLE_MPS_FALLBACK=1), copying their tensors both ways"
                if fallback
                else "stop the run with NotImplementedError (PYTORCH_ENABLE_MPS_FALLBACK is unset)"
            ),
            "list them with toolkit.devices.placement_report (python -m toolkit placement)"
            + ("" if fallback else "; set PYTORCH_ENABLE_MPS_FALLBACK=1 to run them on the CPU"),
        )
    )
    return findings
