"""Detect and select devices: CPUs, CUDA GPUs and Metal GPUs, told apart by what TensorFlow
reports, and ML Compute's ``set_mlc_device`` for TensorFlow (visible devices, memory growth).

* :func:`detect` lists CPUs and GPUs as :class:`DeviceInfo`, telling Metal from CUDA through
  ``tf.config.experimental.get_device_details`` (CUDA reports a compute capability; the
  tensorflow-metal PluggableDevice reports ``METAL``) and the build info, not by guessing.
* :func:`resolve` finds the device a spec names without changing anything; :func:`select`
  makes it the one TensorFlow uses, before the runtime starts.
"""

from __future__ import annotations

import dataclasses
import platform
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.machine import cpu_model

__all__ = [
    "DeviceError",
    "DeviceInfo",
    "detect",
    "parse_device_spec",
    "resolve",
    "select",
]

MB = 1024.0 * 1024.0
BUILD_HELP = "See BUILD.md"


class DeviceError(ValueError):
    """A device that does not exist here, or a selection TensorFlow can no longer apply."""


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """One physical device.

    Attributes:
        kind: ``"cpu"``, ``"cuda"`` or ``"metal"`` (``"gpu"`` for a GPU of unknown vendor).
        name: TensorFlow's physical device name, e.g. ``/physical_device:GPU:0``.
        index: index among the devices of its type.
        human_name: e.g. ``NVIDIA H100 80GB HBM3``, ``METAL``, or the CPU model.
        memory_mb: memory where known (host RAM for CPUs; Metal shares it), else None.
        compute_capability: ``(major, minor)`` for CUDA GPUs, else None.
    """

    kind: str
    name: str
    index: int
    human_name: str
    memory_mb: float | None = None
    compute_capability: tuple[int, int] | None = None

    @property
    def device_type(self) -> str:
        return "CPU" if self.kind == "cpu" else "GPU"

    @property
    def logical_name(self) -> str:
        """The name to place ops with, e.g. ``/device:GPU:0``."""
        return f"/device:{self.device_type}:{self.index}"

    @property
    def is_gpu(self) -> bool:
        return self.kind != "cpu"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceInfo:
        """A DeviceInfo from :meth:`to_dict`'s output (a report's JSON); unknown keys are
        left out."""
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in names}
        if known.get("compute_capability") is not None:
            known["compute_capability"] = tuple(known["compute_capability"])
        known.setdefault("name", "")
        known.setdefault("human_name", "")
        known.setdefault("index", 0)
        return cls(**known)

    def label(self) -> str:
        """``cuda:0 NVIDIA H100 80GB HBM3``: kind, index and name, in one short line."""
        return f"{self.kind}:{self.index} {self.human_name}".rstrip()

    def __str__(self) -> str:
        extra = []
        if self.compute_capability:
            extra.append(
                f"compute capability {self.compute_capability[0]}.{self.compute_capability[1]}"
            )
        if self.memory_mb:
            extra.append(f"{self.memory_mb / 1024:.1f} GiB")
        tail = f" ({', '.join(extra)})" if extra else ""
        return f"{self.kind}:{self.index} {self.human_name} [{self.name}]{tail}"


# ---------------------------------------------------------------------------- detect


def _host_ram_mb() -> float | None:
    try:
        import psutil

        return psutil.virtual_memory().total / MB
    except Exception:  # noqa: BLE001 - memory is a nicety
        return None


def _is_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def _gpu_kind(details: dict[str, Any], build: dict[str, Any]) -> str:
    name = str(details.get("device_name", ""))
    if "compute_capability" in details:
        return "cuda"
    if "METAL" in name.upper() or (_is_apple_silicon() and not build.get("is_cuda_build")):
        return "metal"
    if build.get("is_cuda_build"):
        return "cuda"
    return "gpu"


def detect() -> list[DeviceInfo]:
    """The physical devices TensorFlow sees: CPUs first, then GPUs, each with its kind."""
    import tensorflow as tf

    try:
        build = dict(tf.sysconfig.get_build_info())
    except Exception:  # noqa: BLE001
        build = {}
    found: list[DeviceInfo] = []
    for i, dev in enumerate(tf.config.list_physical_devices("CPU")):
        found.append(DeviceInfo("cpu", dev.name, i, cpu_model(), _host_ram_mb()))
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
                memory_mb=_host_ram_mb() if kind == "metal" else None,  # unified memory
                compute_capability=tuple(int(v) for v in cc) if cc else None,
            )
        )
    return found


# ---------------------------------------------------------------------------- select


def parse_device_spec(spec: str) -> tuple[str, int | None]:
    """``"gpu:1"`` -> ``("gpu", 1)``; DeviceError unless auto/any/cpu/gpu/cuda/metal[:i]."""
    m = re.fullmatch(r"\s*(auto|any|cpu|gpu|cuda|metal)\s*(?::\s*(\d+))?\s*", spec.lower())
    if not m:
        raise DeviceError(
            f"unknown device {spec!r}: use auto, cpu, gpu, cuda or metal, optionally with an "
            "index (gpu:1)"
        )
    kind = "auto" if m.group(1) == "any" else m.group(1)
    return kind, int(m.group(2)) if m.group(2) is not None else None


def _unavailable(spec: str, kind: str, devices: Sequence[DeviceInfo]) -> DeviceError:
    available = ", ".join(f"{d.kind}:{d.index}" for d in devices) or "none"
    why = {
        "metal": "no Metal GPU found (tensorflow-metal not installed, or not Apple silicon)",
        "cuda": "no CUDA GPU found (CPU-only TensorFlow, no NVIDIA driver, or "
        "CUDA_VISIBLE_DEVICES hides it)",
        "gpu": "no GPU found",
    }.get(kind, "no such device")
    return DeviceError(f"unknown device {spec!r}: {why}. Available: {available}. {BUILD_HELP}")


def resolve(spec: str = "auto", devices: Sequence[DeviceInfo] | None = None) -> DeviceInfo:
    """The device `spec` names among `devices` (default: :func:`detect`), without changing
    anything. ``auto`` prefers the first GPU."""
    devices = list(devices) if devices is not None else detect()
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
        raise _unavailable(spec, kind if kind != "auto" else "gpu", devices)
    return pool[0]


def select(spec: str = "auto", memory_growth: bool = True) -> DeviceInfo:
    """Makes `spec` the device TensorFlow uses, like ML Compute's ``set_mlc_device``.

    ``cpu`` hides every GPU; a GPU choice makes only that GPU visible (and turns on memory
    growth on CUDA, so TensorFlow does not take all GPU memory up front). Must run before
    TensorFlow starts its runtime (before the first op or model).

    Args:
        spec: ``auto`` | ``cpu`` | ``gpu`` | ``cuda`` | ``metal``, optionally ``:index``.
        memory_growth: allocate GPU memory as needed (CUDA). Defaults to `True`.

    Returns:
        The chosen device.

    Raises:
        DeviceError: no such device here (the message lists what is available), or the
            runtime already started with another visible-device setup.
    """
    import tensorflow as tf

    devices = detect()
    chosen = resolve(spec, devices)
    gpus = tf.config.list_physical_devices("GPU")
    wanted = [g for g in gpus if g.name == chosen.name] if chosen.is_gpu else []
    try:
        tf.config.set_visible_devices(wanted, "GPU")
        if chosen.kind == "cuda" and memory_growth:
            for gpu in wanted:
                tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as e:
        visible = tf.config.get_visible_devices("GPU")
        if [g.name for g in visible] == [g.name for g in wanted]:
            return chosen  # already set up this way: nothing to change
        raise DeviceError(
            f"select({spec!r}) came after TensorFlow started its runtime, so the visible "
            "devices can no longer change: call toolkit.devices.select() first in your "
            "program, before any op or model (or set CUDA_VISIBLE_DEVICES)"
        ) from e
    return chosen
