"""JAX's devices: detection through ``jax.local_devices``, selection as JAX's default device,
placement with ``keras.device`` and where each result lives (XLA compiles a step for one device: no
fallback), and jax-metal's trap. JAX is imported inside each function."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from toolkit.backend._common import keras_device_scope, no_augmentation_pin
from toolkit.core._device_types import (
    MB,
    DeviceInfo,
    Finding,
    PlacementReport,
    PreflightContext,
    host_cpu,
    host_ram_mb,
)

augmentation_scope = no_augmentation_pin

_WHY_NONE = {
    "metal": "JAX sees no METAL device (jax-metal is not installed, or this is not Apple "
    "silicon); on a Mac use --backend=torch --device=mps",
    "cuda": "JAX sees no CUDA GPU (a CPU-only jax; pip install 'jax[cuda12]'), or "
    "CUDA_VISIBLE_DEVICES hides it",
}


def _capability(value: Any) -> tuple[int, int] | None:
    """``"9.0"`` or ``(9, 0)`` -> ``(9, 0)``; None when absent or unreadable."""
    if value is None:
        return None
    parts = str(value).replace(",", ".").strip("() ").split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].strip() else 0
    except ValueError:
        return None


def device_info(device: Any, index: int) -> DeviceInfo:
    """A JAX device (or anything with its ``platform``, ``device_kind``...) as a DeviceInfo."""
    platform_name = str(getattr(device, "platform", "")).lower()
    version = str(getattr(getattr(device, "client", None), "platform_version", "")).lower()
    if platform_name in ("gpu", "cuda"):
        kind = "gpu" if "rocm" in version else "cuda"
    elif platform_name in ("metal", "cpu"):
        kind = platform_name
    else:
        kind = "gpu"
    memory = None
    try:
        stats = device.memory_stats() or {}
        if stats.get("bytes_limit"):
            memory = stats["bytes_limit"] / MB
    except Exception:  # noqa: BLE001 - some plugins expose no stats
        pass
    if kind == "metal" and memory is None:
        memory = host_ram_mb()  # unified memory
    return DeviceInfo(
        kind=kind,
        name=str(device),
        index=index,
        human_name=str(getattr(device, "device_kind", "") or kind.upper()),
        memory_mb=memory,
        compute_capability=_capability(getattr(device, "compute_capability", None))
        if kind == "cuda"
        else None,
    )


def detect_devices() -> list[DeviceInfo]:
    """The host CPU, then this process's GPUs (``jax.devices()`` has other processes' too)."""
    import jax

    found = [host_cpu()]
    for platform_name in ("gpu", "METAL"):
        try:
            devices = jax.local_devices(backend=platform_name)
        except RuntimeError:  # this JAX has no such platform
            continue
        found += [device_info(d, i) for i, d in enumerate(devices)]
    return found


def why_no_device(kind: str) -> str | None:
    return _WHY_NONE.get(kind)


def framework_device(device: DeviceInfo) -> Any:
    """The ``jax.Device`` a DeviceInfo of :func:`detect_devices` names."""
    import jax

    platform_name = {"cpu": "cpu", "metal": "METAL"}.get(device.kind, "gpu")
    found = jax.local_devices(backend=platform_name)  # a process places on its own only
    return found[min(device.index, len(found) - 1)]


def select_device(device: DeviceInfo, memory_growth: bool) -> None:
    """`device` becomes ``jax_default_device``; `memory_growth` is TF's (JAX has its own)."""
    import jax

    jax.config.update("jax_default_device", framework_device(device))


def visible_devices() -> list[DeviceInfo]:
    return detect_devices()


def device_scope(device: DeviceInfo) -> contextlib.AbstractContextManager:
    return keras_device_scope(framework_device(device))


def placement(
    fn: Callable[..., Any], args: Any, kwargs: Any, gpu_selected: bool | None
) -> PlacementReport:
    """The device of each result of `fn` (of each live array when the result holds none, as
    ``train_on_batch``'s floats: where the step's state lives)."""
    import jax

    result = fn(*args, **kwargs)
    arrays = [leaf for leaf in jax.tree_util.tree_leaves(result) if isinstance(leaf, jax.Array)]
    what = "result"
    if not arrays:
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


def apple_gpu_path() -> tuple[str, str, str]:
    return (
        "experimental",
        "jax-metal's METAL device (last release 0.1.1, October 2024)",
        "developer.apple.com/metal/jax",
    )


def reaches_apple_gpu() -> bool:
    """jax-metal is installed."""
    from toolkit.core._device_types import InstalledVersions

    return bool(InstalledVersions().get("jax-metal"))


def preflight(device: DeviceInfo, context: PreflightContext) -> list[Finding]:
    """On jax-metal's METAL device: it is experimental, and many ops have no kernel there."""
    if device.kind != "metal":
        return []
    version = context.versions.get("jax-metal") or ""
    return [
        Finding(
            "warning",
            "jax-metal",
            f"jax-metal {version} is experimental and unmaintained since 0.1.1 (October "
            "2024); many ops have no METAL kernel".replace("  ", " "),
            "use --backend=torch --device=mps (PyTorch's maintained MPS device)",
        )
    ]
