"""Devices: detect, select, place, report where ops ran, preflight. Metal, CUDA and CPU.

Every platform-specific TensorFlow device call of the toolkit lives in this module.

* :func:`detect` lists CPUs and GPUs as :class:`DeviceInfo`, telling Metal from CUDA through
  ``tf.config.experimental.get_device_details`` (CUDA reports a compute capability; the
  tensorflow-metal PluggableDevice reports ``METAL``) and the build info, not by guessing.
* :func:`select` is ML Compute's ``set_mlc_device('cpu'|'gpu'|'any')`` for tensorflow-metal and
  CUDA: it sets the visible devices (and memory growth) before the runtime starts.
* :func:`on` is ``tf.device`` that refuses a device that does not exist instead of silently
  falling back; :func:`augmentation_device` pins random ops to the CPU on Metal, where they have
  no kernels.
* :func:`placement_report` runs a function (one training step) and lists every op with the
  device it ran on, flagging ops that fell back to the CPU while a GPU was selected.
* :func:`preflight` returns findings (severity, what, fix) for known traps; the table of
  version pairs it checks is ``METAL_COMPATIBILITY``, with the sources it rests on.
* :func:`recommend_precision` and :func:`configure_threads` give starting points that
  measurement (``toolkit.tune``) confirms or overrules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

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

    from toolkit.report import cpu_model

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


# ---------------------------------------------------------------------------- placement


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


# ---------------------------------------------------------------------------- preflight

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
    ((18, 18), "1.2", "ok", "release for TensorFlow 2.18 (not tested by this project)", "PyPI"),
)


@dataclasses.dataclass(frozen=True)
class Finding:
    """One preflight finding: ``severity`` is ``"error"``, ``"warning"`` or ``"info"``."""

    severity: str
    code: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.severity}] {self.code}: {self.message}. Fix: {self.fix}"


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
) -> list[Finding]:
    """Checks for known traps before a run; returns findings, each with its fix.

    Args:
        device: the device the run will use. Defaults to :func:`resolve` ``("auto")``.
        policy: the mixed-precision policy (``float32``, ``mixed_float16``,
            ``mixed_bfloat16``). Defaults to Keras's global policy.
        jit_compile: whether the run compiles with XLA.
        model: a Keras model whose weights are checked for float64.
        versions: ``{"tensorflow", "tensorflow-metal", "python"}`` versions; defaults to the
            installed ones (tests pass their own).
        legacy_keras: whether tf_keras is in use. Defaults to ``TF_USE_LEGACY_KERAS``.
        optimizer: the optimizer the run will use (checked for the tf_keras-on-Metal trap).
    """
    from toolkit import compat

    if device is None:
        device = resolve("auto")
    if versions is None:
        import tensorflow as tf

        versions = {
            "tensorflow": tf.__version__,
            "tensorflow-metal": _installed_version("tensorflow-metal"),
            "python": platform.python_version(),
        }
    if legacy_keras is None:
        legacy_keras = compat.use_legacy_keras()
    if policy is None:
        policy = _global_policy()
    findings: list[Finding] = []
    tf_version = versions.get("tensorflow") or ""
    metal = versions.get("tensorflow-metal")

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

    if device.kind == "metal":
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


def _global_policy() -> str:
    try:
        from toolkit import compat

        return str(compat.keras().mixed_precision.global_policy().name)
    except Exception:  # noqa: BLE001
        return "float32"


def _has_float64(model: Any) -> bool:
    from toolkit import compat

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
        return False, "Metal has no fast bfloat16 path in tensorflow-metal"
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


# ---------------------------------------------------------------------------- threads


def configure_threads(
    intra_op: int | None = None,
    inter_op: int | None = None,
    cores: int | None = None,
) -> dict[str, int]:
    """Sets TensorFlow's intra/inter-op thread pools, as Model Garden's flags do, and suggests
    ``datasets_num_private_threads`` for the input pipeline (``pipeline(private_threads=...)``).

    Defaults: intra-op = all cores, inter-op = 2, private tf.data threads = half the cores (at
    least 1). Must run before TensorFlow starts its runtime.

    Raises:
        DeviceError: a count < 1, or the runtime already started.
    """
    import tensorflow as tf

    cores = cores or os.cpu_count() or 1
    plan = {
        "intra_op": intra_op if intra_op is not None else cores,
        "inter_op": inter_op if inter_op is not None else min(2, cores),
        "datasets_private_threads": max(1, cores // 2),
    }
    for name, value in plan.items():
        if value < 1:
            raise DeviceError(f"{name}: thread counts must be >= 1, got {value}")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(plan["intra_op"])
        tf.config.threading.set_inter_op_parallelism_threads(plan["inter_op"])
    except RuntimeError as e:
        raise DeviceError(
            "configure_threads() came after TensorFlow started its runtime: call it first in "
            "your program, before any op or model"
        ) from e
    return plan


# ---------------------------------------------------------------------------- memory


def device_memory(reset_peak: bool = False) -> dict[str, dict[str, float]]:
    """Current and peak memory of each visible GPU, in MiB, where TensorFlow exposes it.

    Args:
        reset_peak: reset each device's peak counter after reading it, so the next reading's
            peak covers only the time in between. Defaults to `False`.

    Returns:
        ``{"GPU:0": {"current_mb": ..., "peak_mb": ...}}``; empty when no GPU reports memory
        (CPU-only TensorFlow reports zeros for the CPU, which says nothing, so it is left out).
    """
    import tensorflow as tf

    out: dict[str, dict[str, float]] = {}
    for dev in tf.config.list_logical_devices("GPU"):
        name = dev.name.split("device:")[-1]
        try:
            info = tf.config.experimental.get_memory_info(name)
        except (ValueError, tf.errors.OpError, NotImplementedError):
            continue  # e.g. tensorflow-metal exposes no memory info
        out[name] = {"current_mb": info["current"] / MB, "peak_mb": info["peak"] / MB}
        if reset_peak:
            with contextlib.suppress(ValueError, tf.errors.OpError, NotImplementedError):
                tf.config.experimental.reset_memory_stats(name)
    return out
