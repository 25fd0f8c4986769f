"""Preflight: known traps of a backend / device / precision / XLA / version choice, each with its
fix, and a starting precision per device. The backend's own rules are its seam's; those depending
on the device alone are here."""

from __future__ import annotations

from typing import Any

from toolkit import backend as backends
from toolkit.backend._tensorflow.devices import (  # 0.2's public name, here
    METAL_COMPATIBILITY as METAL_COMPATIBILITY,
)
from toolkit.core import compat
from toolkit.core._device_types import (
    DeviceInfo,
    Finding,
    InstalledVersions,
    PreflightContext,
)
from toolkit.devices.selection import resolve

__all__: list[str] = []  # offered through toolkit.devices


def apple_gpu_paths() -> dict[str, tuple[str, str, str]]:
    """How each backend reaches an Apple-silicon GPU today: ``{backend: (status, how,
    source)}``, status ``maintained``, ``experimental`` or ``broken``."""
    return {name: backends.get(name).apple_gpu_path() for name in backends.names()}


def cpu_has_fast_bf16() -> bool:
    """Whether the CPU has bfloat16 arithmetic (AVX512-BF16 or AMX) that makes bf16 pay off."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return False
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16"))


def preflight(
    device: DeviceInfo | None = None,
    *,
    policy: str | None = None,
    jit_compile: bool = False,
    model: Any = None,
    versions: dict[str, str | None] | None = None,
    legacy_keras: bool | None = None,
    optimizer: Any = None,
    backend: str | None = None,
) -> list[Finding]:
    """Checks for known traps before a run; returns findings, each with its fix.

    Args:
        device: the run's device (default: ``resolve("auto")``).
        policy: the mixed-precision policy (default: Keras's global one).
        model: a Keras model whose weights are checked for float64.
        versions: ``{distribution: version}`` with ``python`` and ``platform`` (default: installed).
        optimizer: the run's optimizer (the tf_keras-on-Metal trap)."""
    backend = backend or backends.name()
    if device is None:
        device = resolve("auto", backend=backend)
    context = PreflightContext(
        policy=_global_policy() if policy is None else policy,
        jit_compile=jit_compile,
        model=model,
        versions=InstalledVersions() if versions is None else versions,
        legacy_keras=compat.use_legacy_keras() if legacy_keras is None else legacy_keras,
        optimizer=optimizer,
    )
    policy = context.policy
    findings = list(backends.get(backend).preflight(device, context))
    if policy and policy != "float32":
        fast, why = _fast_low_precision(device, policy)
        if not fast:
            findings.append(
                Finding(
                    "warning",
                    "precision",
                    f"{policy} on {device.kind}: {why}, so it is likely slower than float32",
                    f"use {recommend_precision(device)[0]} (then measure)",
                )
            )
    if device.kind == "cpu" and jit_compile:
        findings.append(
            Finding(
                "info",
                "cpu-xla",
                "jit_compile on the CPU helps some models and slows others",
                "measure with and without (toolkit.tune)",
            )
        )
    return findings


def _global_policy() -> str:
    try:
        return str(compat.keras().mixed_precision.global_policy().name)
    except Exception:  # noqa: BLE001
        return "float32"


def _fast_low_precision(device: DeviceInfo, policy: str) -> tuple[bool, str]:
    if device.kind == "cuda":
        cc = device.compute_capability or (0, 0)
        if policy == "mixed_float16":
            return cc >= (7, 0), f"compute capability {cc[0]}.{cc[1]} has no tensor cores"
        if policy == "mixed_bfloat16":
            return cc >= (8, 0), f"compute capability {cc[0]}.{cc[1]} has no bfloat16 tensor cores"
    if device.kind == "metal":
        if policy == "mixed_float16":
            return True, ""
        return False, "Apple GPUs run float16 fast and have no fast bfloat16 path"
    if device.kind == "cpu":
        if policy == "mixed_bfloat16":
            return cpu_has_fast_bf16(), "this CPU has no AVX512-BF16/AMX"
        return False, "CPUs have no fast float16 arithmetic"
    return True, ""


def recommend_precision(device: DeviceInfo) -> tuple[str, str]:
    """A starting policy and why. A hint only: measurement (``toolkit.tune``) decides."""
    if device.kind == "cuda":
        cc = device.compute_capability or (0, 0)
        if cc >= (7, 0):
            return "mixed_float16", f"tensor cores (compute capability {cc[0]}.{cc[1]})"
        return "float32", "no tensor cores"
    if device.kind == "cpu" and cpu_has_fast_bf16():
        return "mixed_bfloat16", "the CPU has AVX512-BF16/AMX"
    if device.kind == "metal":
        return "float32", "the safe default on Metal; mixed_float16 may help large models"
    return "float32", "no fast low-precision arithmetic here"
