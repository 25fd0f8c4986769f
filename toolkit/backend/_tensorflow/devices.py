"""TensorFlow's devices: detection through ``tf.config``, selection through its visible devices
(before its runtime starts), placement with ``tf.device`` and run metadata, and TensorFlow's traps
on an Apple GPU. TensorFlow is imported inside each function."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from toolkit.backend._common import has_float64
from toolkit.core._device_types import (
    DeviceError,
    DeviceInfo,
    Finding,
    PlacementReport,
    PreflightContext,
    host_ram_mb,
    is_apple_silicon,
)
from toolkit.core.machine import cpu_model

# Which tensorflow-metal goes with which TensorFlow: its wheels declare no TensorFlow requirement,
# so pip never catches a mismatch. (tf_minor range, metal version prefix, status, note, source)
METAL_COMPATIBILITY: tuple[tuple[tuple[int, int], str, str, str, str], ...] = (
    ((13, 15), "1.", "ok", "works", "tensorflow/tensorflow#63854 (2.15 + metal 1.1.0 trains)"),
    (
        (16, 16),
        "1.1",
        "broken",
        "GPU listed but Keras 3 does not train on it; use TF_USE_LEGACY_KERAS=1 with "
        "tf-keras 2.16, or TensorFlow 2.15",
        "tensorflow/tensorflow#63854",
    ),
    (
        (17, 99),
        "1.1",
        "broken",
        "import fails: symbol not found in libmetal_plugin.dylib; use tensorflow-metal 1.2 "
        "with TensorFlow 2.18, or TensorFlow 2.15 with tensorflow-metal 1.1",
        "tensorflow/tensorflow#81987, #84167",
    ),
    (
        (18, 99),
        "1.2",
        "broken",
        "tensorflow-metal 1.2.0 (January 2025, the last release, no wheel past cp312) fails to "
        "load with TensorFlow 2.18 and later",
        "tensorflow/tensorflow#81987, #84167, #126360",
    ),
)
# How TensorFlow reaches an Apple-silicon GPU today: (status, how, source).
APPLE_GPU_PATH = (
    "broken",
    "tensorflow-metal, which does not load from TensorFlow 2.18 on; tensorflow-macos ended "
    "at 2.16.2, where Keras 3 does not train on the GPU",
    "tensorflow/tensorflow#81987, #84167, #126360, #63854",
)
# Ops that run on the host by design in a placed graph: never a CPU fallback.
_PLUMBING = frozenset(
    {"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval", "_Send", "_Recv", "_HostSend",
     "_HostRecv", "NoOp", "Const"}
)  # fmt: skip
_WHY_NONE = {
    "metal": "TensorFlow sees no Metal GPU (tensorflow-metal is not installed, does not load "
    "with TensorFlow 2.18 or later, or this is not Apple silicon); on a Mac use "
    "--backend=torch --device=mps",
    "cuda": "TensorFlow sees no CUDA GPU (a CPU-only TensorFlow, no NVIDIA driver, or "
    "CUDA_VISIBLE_DEVICES hides it; pip install 'tensorflow[and-cuda]')",
}


def _gpu_kind(details: dict[str, Any], build: dict[str, Any]) -> str:
    name = str(details.get("device_name", ""))
    if "compute_capability" in details:
        return "cuda"
    if "METAL" in name.upper() or (is_apple_silicon() and not build.get("is_cuda_build")):
        return "metal"
    if build.get("is_cuda_build"):
        return "cuda"
    return "gpu"


def detect_devices() -> list[DeviceInfo]:
    """TensorFlow's physical devices: CPUs, then GPUs with their kind."""
    import tensorflow as tf

    try:
        build = dict(tf.sysconfig.get_build_info())
    except Exception:  # noqa: BLE001
        build = {}
    found: list[DeviceInfo] = []
    for i, dev in enumerate(tf.config.list_physical_devices("CPU")):
        found.append(DeviceInfo("cpu", dev.name, i, cpu_model(), host_ram_mb()))
    for i, dev in enumerate(tf.config.list_physical_devices("GPU")):
        try:
            details = dict(tf.config.experimental.get_device_details(dev))
        except Exception:  # noqa: BLE001 - some plugins expose no details
            details = {}
        kind = _gpu_kind(details, build)
        cc = details.get("compute_capability")
        found.append(
            DeviceInfo(
                kind=kind,
                name=dev.name,
                index=i,
                human_name=str(
                    details.get("device_name") or ("METAL" if kind == "metal" else "GPU")
                ),
                memory_mb=host_ram_mb() if kind == "metal" else None,  # unified memory
                compute_capability=tuple(int(v) for v in cc) if cc else None,
            )
        )
    return found


def why_no_device(kind: str) -> str | None:
    """Why TensorFlow sees no GPU of `kind`, and what would reach one."""
    return _WHY_NONE.get(kind)


def select_device(device: DeviceInfo, memory_growth: bool) -> None:
    """Makes only `device` visible (CPU: no GPU), memory growth on CUDA; before TF's runtime starts.

    Raises:
        DeviceError: the runtime started with another visible-device setup."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    wanted = [g for g in gpus if g.name == device.name] if device.is_gpu else []
    try:
        tf.config.set_visible_devices(wanted, "GPU")
        if device.kind == "cuda" and memory_growth:
            for gpu in wanted:
                tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as e:
        visible = tf.config.get_visible_devices("GPU")
        if [g.name for g in visible] == [g.name for g in wanted]:
            return  # already set up this way: nothing to change
        raise DeviceError(
            f"select({device.spec!r}) came after TensorFlow started its runtime, so the "
            "visible devices can no longer change: call toolkit.devices.select() first in your "
            "program, before any op or model (or set CUDA_VISIBLE_DEVICES)"
        ) from e


def framework_device(device: DeviceInfo) -> str:
    """TensorFlow's logical device name to place ops with: ``/device:GPU:0``."""
    return device.logical_name


def visible_devices() -> list[DeviceInfo]:
    """The detected devices TensorFlow's runtime can place on (those it was left to see)."""
    import tensorflow as tf

    logical = tf.config.list_logical_devices()
    return [
        d for d in detect_devices() if any(ld.name.endswith(d.logical_name[8:]) for ld in logical)
    ]


def device_scope(device: DeviceInfo) -> contextlib.AbstractContextManager:
    import tensorflow as tf

    return tf.device(device.logical_name)


def augmentation_scope(device: DeviceInfo | None) -> contextlib.AbstractContextManager:
    """The CPU under tensorflow-metal, which has no kernels for random ops; elsewhere nothing."""
    import tensorflow as tf

    if device is None:
        gpus = [d for d in detect_devices() if d.is_gpu]
        device = gpus[0] if gpus else None
    if device is not None and device.kind == "metal":
        return tf.device("/device:CPU:0")
    return contextlib.nullcontext()


def placement(
    fn: Callable[..., Any], args: Any, kwargs: Any, gpu_selected: bool | None
) -> PlacementReport:
    """The placed graphs in TF's run metadata (soft placement); `fn` must call a new function."""
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
    return PlacementReport(ops, gpu_selected, plumbing=_PLUMBING)


def apple_gpu_path() -> tuple[str, str, str]:
    return APPLE_GPU_PATH


def _minor(version: str) -> int:
    parts = version.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1


def reaches_apple_gpu() -> bool:
    """tensorflow-metal with a TensorFlow it loads with (before 2.18)."""
    from toolkit.core._device_types import InstalledVersions

    versions = InstalledVersions()
    tf_version = versions.get("tensorflow") or versions.get("tensorflow-macos") or ""
    return bool(versions.get("tensorflow-metal")) and 0 <= _minor(tf_version) < 18


def preflight(device: DeviceInfo, context: PreflightContext) -> list[Finding]:
    """TF's traps: a current TF on a Mac, a mismatched tensorflow-metal, and a Metal GPU's own."""
    versions = context.versions
    tf_version = versions.get("tensorflow") or versions.get("tensorflow-macos") or ""
    findings: list[Finding] = []
    if context.apple_silicon and _minor(tf_version) >= 18 and tf_version[:2] == "2.":
        findings.append(
            Finding(
                "error" if device.kind == "metal" else "warning",
                "mac-backend",
                f"TensorFlow {tf_version} on Apple silicon trains on the CPU only: "
                f"{APPLE_GPU_PATH[1]} ({APPLE_GPU_PATH[2]})",
                "use --backend=torch --device=mps (pip install 'keras-perf-toolkit[torch]'), "
                "Keras 3 on PyTorch's maintained MPS device",
            )
        )
    metal = versions.get("tensorflow-metal")
    if metal:
        findings += _metal_version(tf_version, metal, context)
    if device.kind == "metal":
        findings += _metal_traps(context)
    return findings


def _metal_version(tf_version: str, metal: str, context: PreflightContext) -> list[Finding]:
    minor = _minor(tf_version)
    findings = []
    for (lo, hi), prefix, status, note, source in METAL_COMPATIBILITY:
        if lo <= minor <= hi and metal.startswith(prefix):
            if status == "broken" and not (minor == 16 and context.legacy_keras):
                findings.append(
                    Finding(
                        "error",
                        "metal-version",
                        f"TensorFlow {tf_version} with tensorflow-metal {metal}: {note} ({source})",
                        "install a pair marked ok in toolkit.devices.METAL_COMPATIBILITY "
                        "(BUILD.md#macos-apple-silicon-tensorflow-metal)",
                    )
                )
            break
    else:
        findings.append(
            Finding(
                "warning",
                "metal-version",
                f"TensorFlow {tf_version} with tensorflow-metal {metal} is not in the "
                "known-good table",
                "prefer TensorFlow 2.15 + tensorflow-metal 1.1.0 (BUILD.md)",
            )
        )
    py = context.versions.get("python") or ""
    if py and tuple(int(p) for p in py.split(".")[:2]) < (3, 9):
        findings.append(
            Finding(
                "error", "metal-python", f"Python {py}: Apple requires 3.9 or later",
                "use Python 3.10 or 3.11",
            )
        )  # fmt: skip
    return findings


def _metal_traps(context: PreflightContext) -> list[Finding]:
    findings = []
    if context.jit_compile:
        findings.append(
            Finding(
                "error",
                "metal-xla",
                "jit_compile=True: XLA does not compile for the METAL device",
                "run with --nojit_compile on Metal (or select the CPU to use XLA)",
            )
        )
    if has_float64(context.model):
        findings.append(
            Finding(
                "error",
                "metal-float64",
                "float64 weights or inputs: Metal has no float64 kernels, so these ops "
                "run on the CPU",
                "use float32 (keras.config.set_floatx('float32')) or select the CPU",
            )
        )
    legacy_optimizer = ".legacy" in type(context.optimizer).__module__
    if context.legacy_keras and context.optimizer is not None and not legacy_optimizer:
        findings.append(
            Finding(
                "warning",
                "metal-optimizer",
                "tf_keras's current optimizers run slowly on M1/M2 Macs",
                "use tf.keras.optimizers.legacy.Adam (and friends) under tf_keras",
            )
        )
    elif not context.legacy_keras:
        findings.append(
            Finding(
                "info",
                "metal-optimizer",
                "Keras 3 has no legacy optimizers; the tf_keras advice to use "
                "tf.keras.optimizers.legacy does not apply",
                "nothing to do; compare against TF_USE_LEGACY_KERAS=1 if training is slow",
            )
        )
    findings.append(
        Finding(
            "info",
            "metal-random",
            "random ops (RngReadAndSkip, StatelessRandomGetKeyCounter) have no Metal "
            "kernels and run on the CPU",
            "pin augmentation with toolkit.devices.augmentation_device()",
        )
    )
    return findings
