"""Values the backend seam and ``toolkit.devices`` share; below both, so backends add nothing."""

from __future__ import annotations

import dataclasses
import platform
import re
import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core.machine import cpu_model

MB = 1024.0 * 1024.0


class DeviceError(ValueError):
    """A device that does not exist here, or a selection a backend can no longer apply."""


@dataclasses.dataclass(frozen=True)
class DeviceInfo(fields.Record):
    """One physical device: `kind` ``cpu``, ``cuda``, ``metal`` (Apple) or ``gpu`` (another
    vendor's); `name` the backend's (``cuda:0``, ``mps``); `memory_mb` host RAM for CPUs."""

    kind: str
    name: str = fields.field(missing="")
    index: int = fields.field(missing=0)
    human_name: str = fields.field(missing="")
    memory_mb: float | None = None
    compute_capability: tuple[int, int] | None = None

    @property
    def device_type(self) -> str:
        return "CPU" if self.kind == "cpu" else "GPU"

    @property
    def logical_name(self) -> str:
        """TensorFlow's name to place ops with, e.g. ``/device:GPU:0``."""
        return f"/device:{self.device_type}:{self.index}"

    @property
    def spec(self) -> str:
        """The spec that names this device again: ``cuda:1``, ``metal:0``, ``cpu:0``."""
        return f"{self.kind}:{self.index}"

    @property
    def is_gpu(self) -> bool:
        return self.kind != "cpu"

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


def host_ram_mb() -> float | None:
    """This machine's RAM in MB (an Apple GPU's too: its memory is unified), None unknown."""
    try:
        import psutil

        return psutil.virtual_memory().total / MB
    except Exception:  # noqa: BLE001 - memory is a nicety
        return None


def is_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def host_cpu() -> DeviceInfo:
    """The host CPU as one device (how JAX and PyTorch see it)."""
    return DeviceInfo("cpu", "cpu", 0, cpu_model(), host_ram_mb())


def parse_device_spec(spec: str) -> tuple[str, int | None]:
    """``"gpu:1"`` -> ``("gpu", 1)``; ``mps`` is ``metal``; DeviceError unless
    auto/any/cpu/gpu/cuda/metal/mps[:i]."""
    m = re.fullmatch(r"\s*(auto|any|cpu|gpu|cuda|metal|mps)\s*(?::\s*(\d+))?\s*", spec.lower())
    if not m:
        raise DeviceError(
            f"unknown device {spec!r}: use auto, cpu, gpu, cuda or metal (mps), optionally "
            "with an index (gpu:1)"
        )
    kind = {"any": "auto", "mps": "metal"}.get(m.group(1), m.group(1))
    return kind, int(m.group(2)) if m.group(2) is not None else None


@dataclasses.dataclass(frozen=True)
class PlacementReport:
    """Every op of a run, ``(name, type, device)``, with a `note` on what the listing means;
    `plumbing`: op types run on the host by design, never a fallback."""

    ops: tuple[tuple[str, str, str], ...]
    gpu_selected: bool
    note: str = ""
    plumbing: frozenset[str] = frozenset()

    def by_device(self) -> dict[str, Counter]:
        """``{device: Counter(op type -> count)}``."""
        out: dict[str, Counter] = {}
        for _, op_type, device in self.ops:
            out.setdefault(_short(device), Counter())[op_type] += 1
        return out

    def cpu_fallbacks(self) -> list[tuple[str, str]]:
        """Ops that ran on the CPU while a GPU was selected (the plumbing left out)."""
        if not self.gpu_selected:
            return []
        return [
            (name, op_type)
            for name, op_type, device in self.ops
            if "cpu" in _short(device).lower() and op_type not in self.plumbing
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


@dataclasses.dataclass(frozen=True)
class Finding(fields.Record):
    """One preflight finding: ``severity`` is ``"error"``, ``"warning"`` or ``"info"``."""

    severity: str = fields.field(missing="")
    code: str = fields.field(missing="")
    message: str = fields.field(missing="")
    fix: str = fields.field(missing="")

    def __str__(self) -> str:
        return f"[{self.severity}] {self.code}: {self.message}. Fix: {self.fix}"


class InstalledVersions(dict):
    """``{distribution: version or None}``, read when first asked; ``python``, ``platform`` too."""

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = _installed(key)
        value = self[key]
        return default if value is None else value


def _installed(dist: str) -> str | None:
    from importlib import metadata

    if dist == "python":
        return platform.python_version()
    if dist == "platform":
        return f"{sys.platform}-{platform.machine()}"
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@dataclasses.dataclass(frozen=True)
class PreflightContext:
    """What a backend's preflight rules look at besides the device: `model` (weights checked for
    float64) or None, `versions` with ``python`` and ``platform``, `legacy_keras` (tf_keras)."""

    policy: str
    jit_compile: bool
    model: Any
    versions: Mapping[str, str | None]
    legacy_keras: bool
    optimizer: Any = None

    @property
    def apple_silicon(self) -> bool:
        return self.versions.get("platform") == "darwin-arm64"
