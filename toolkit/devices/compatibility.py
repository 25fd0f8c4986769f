"""Preflight: known traps of a backend / device / precision / XLA / version choice, each with
its fix, and a starting precision per device.

:func:`preflight` returns findings (severity, what, fix); the table of TensorFlow /
tensorflow-metal pairs it checks is :data:`METAL_COMPATIBILITY`, and :data:`APPLE_GPU_PATHS`
says how each backend reaches an Apple GPU today, with the sources they rest on.
:func:`recommend_precision` gives a starting point that measurement (``toolkit.tune``)
confirms or overrules.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
from typing import Any

from toolkit import backend as backends
from toolkit.core import compat
from toolkit.devices.selection import DeviceInfo, resolve

__all__ = [
    "METAL_COMPATIBILITY",
    "Finding",
    "cpu_has_fast_bf16",
    "preflight",
    "recommend_precision",
]

# Which tensorflow-metal goes with which TensorFlow. tensorflow-metal's wheels declare no
# TensorFlow requirement, so pip never catches a mismatch; this table does.
# (tf_minor range, metal version prefix, status, note, source)
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

# How each Keras backend reaches an Apple-silicon GPU today (backend -> (status, how, source)).
APPLE_GPU_PATHS: dict[str, tuple[str, str, str]] = {
    "torch": (
        "maintained",
        "PyTorch's MPS device: --backend=torch --device=mps",
        "PyTorch's MPS backend (pytorch.org/docs/stable/notes/mps.html)",
    ),
    "jax": (
        "experimental",
        "jax-metal's METAL device (last release 0.1.1, October 2024)",
        "developer.apple.com/metal/jax",
    ),
    "tensorflow": (
        "broken",
        "tensorflow-metal, which does not load from TensorFlow 2.18 on; tensorflow-macos ended "
        "at 2.16.2, where Keras 3 does not train on the GPU",
        "tensorflow/tensorflow#81987, #84167, #126360, #63854",
    ),
}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One preflight finding: ``severity`` is ``"error"``, ``"warning"`` or ``"info"``."""

    severity: str
    code: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.severity}] {self.code}: {self.message}. Fix: {self.fix}"

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        """A Finding from :meth:`to_dict`'s output (a report's JSON)."""
        return cls(
            str(data.get("severity", "")),
            str(data.get("code", "")),
            str(data.get("message", "")),
            str(data.get("fix", "")),
        )


def _installed_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _tf_minor(version: str) -> int:
    parts = version.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1


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
        device: the device the run will use. Defaults to :func:`resolve` ``("auto")``.
        policy: the mixed-precision policy (``float32``, ``mixed_float16``,
            ``mixed_bfloat16``). Defaults to Keras's global policy.
        jit_compile: whether the run compiles with XLA.
        model: a Keras model whose weights are checked for float64.
        versions: ``{"tensorflow", "tensorflow-metal", "jax-metal", "python", "platform"}``
            (``platform`` as ``sys.platform-machine``, e.g. ``darwin-arm64``); defaults to the
            installed ones and this machine (tests pass their own).
        legacy_keras: whether tf_keras is in use. Defaults to ``TF_USE_LEGACY_KERAS``.
        optimizer: the optimizer the run will use (checked for the tf_keras-on-Metal trap).
        backend: the Keras backend of the run. Defaults to the one Keras trains on.
    """
    backend = backend or backends.name()
    if device is None:
        device = resolve("auto", backend=backend)
    if versions is None:
        versions = {
            "tensorflow": _installed_version("tensorflow")
            or _installed_version("tensorflow-macos"),
            "tensorflow-metal": _installed_version("tensorflow-metal"),
            "jax-metal": _installed_version("jax-metal"),
            "python": platform.python_version(),
            "platform": f"{sys.platform}-{platform.machine()}",
        }
    if legacy_keras is None:
        legacy_keras = compat.use_legacy_keras()
    if policy is None:
        policy = _global_policy()
    findings: list[Finding] = []
    tf_version = versions.get("tensorflow") or ""
    metal = versions.get("tensorflow-metal") if backend == "tensorflow" else None
    apple = versions.get("platform") == "darwin-arm64"

    if apple and backend == "tensorflow" and _tf_minor(tf_version) >= 18 and tf_version[:2] == "2.":
        findings.append(
            Finding(
                "error" if device.kind == "metal" else "warning",
                "mac-backend",
                f"TensorFlow {tf_version} on Apple silicon trains on the CPU only: "
                + APPLE_GPU_PATHS["tensorflow"][1]
                + f" ({APPLE_GPU_PATHS['tensorflow'][2]})",
                "use --backend=torch --device=mps (pip install 'keras-perf-toolkit[torch]'), "
                "Keras 3 on PyTorch's maintained MPS device",
            )
        )

    if metal:
        minor = _tf_minor(tf_version)
        for (lo, hi), prefix, status, note, source in METAL_COMPATIBILITY:
            if lo <= minor <= hi and metal.startswith(prefix):
                if status == "broken" and not (minor == 16 and legacy_keras):
                    findings.append(
                        Finding(
                            "error",
                            "metal-version",
                            f"TensorFlow {tf_version} with tensorflow-metal {metal}: {note} "
                            f"({source})",
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
        py = versions.get("python") or ""
        if py and tuple(int(p) for p in py.split(".")[:2]) < (3, 9):
            findings.append(
                Finding(
                    "error",
                    "metal-python",
                    f"Python {py}: Apple requires 3.9 or later",
                    "use Python 3.10 or 3.11",
                )
            )

    if device.kind == "metal" and backend == "torch":
        findings += _mps_findings(jit_compile, model)
    elif device.kind == "metal" and backend == "jax":
        findings.append(
            Finding(
                "warning",
                "jax-metal",
                f"jax-metal {versions.get('jax-metal') or ''} is experimental and unmaintained "
                f"since 0.1.1 (October 2024); many ops have no METAL kernel".replace("  ", " "),
                "use --backend=torch --device=mps (PyTorch's maintained MPS device)",
            )
        )
    elif device.kind == "metal":
        if jit_compile:
            findings.append(
                Finding(
                    "error",
                    "metal-xla",
                    "jit_compile=True: XLA does not compile for the METAL device",
                    "run with --nojit_compile on Metal (or select the CPU to use XLA)",
                )
            )
        if _has_float64(model):
            findings.append(
                Finding(
                    "error",
                    "metal-float64",
                    "float64 weights or inputs: Metal has no float64 kernels, so these ops "
                    "run on the CPU",
                    "use float32 (keras.config.set_floatx('float32')) or select the CPU",
                )
            )
        if legacy_keras and optimizer is not None and not _is_legacy_optimizer(optimizer):
            findings.append(
                Finding(
                    "warning",
                    "metal-optimizer",
                    "tf_keras's current optimizers run slowly on M1/M2 Macs",
                    "use tf.keras.optimizers.legacy.Adam (and friends) under tf_keras",
                )
            )
        elif not legacy_keras:
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


def _mps_findings(jit_compile: bool, model: Any) -> list[Finding]:
    """The traps of Keras on PyTorch's MPS device."""
    findings = []
    if _has_float64(model):
        findings.append(
            Finding(
                "error",
                "mps-float64",
                "float64 weights or inputs: the MPS device has no float64 type, PyTorch refuses "
                "them",
                "use float32 (keras.config.set_floatx('float32')) or --device=cpu",
            )
        )
    if jit_compile:
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


def _global_policy() -> str:
    try:
        return str(compat.keras().mixed_precision.global_policy().name)
    except Exception:  # noqa: BLE001
        return "float32"


def _has_float64(model: Any) -> bool:
    try:
        if str(compat.keras().config.floatx()) == "float64":
            return True
    except Exception:  # noqa: BLE001 - tf_keras spells it keras.backend.floatx
        try:
            if str(compat.keras().backend.floatx()) == "float64":
                return True
        except Exception:  # noqa: BLE001
            pass
    if model is None:
        return False
    return any("float64" in str(getattr(w, "dtype", "")) for w in getattr(model, "weights", []))


def _is_legacy_optimizer(optimizer: Any) -> bool:
    return ".legacy" in type(optimizer).__module__


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
