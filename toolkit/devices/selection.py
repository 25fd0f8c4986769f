"""Detect and select devices: CPUs, CUDA GPUs and Apple GPUs, as the backend Keras trains on
sees them, and ML Compute's ``set_mlc_device`` for each backend.

* :func:`detect` lists CPUs and GPUs as :class:`DeviceInfo`, each backend asked its own way:
  TensorFlow through ``tf.config`` (CUDA reports a compute capability; the tensorflow-metal
  PluggableDevice reports ``METAL``), JAX through ``jax.devices`` (``gpu``; ``METAL`` from
  jax-metal), PyTorch through ``torch.cuda`` and ``torch.backends.mps``. An Apple GPU is kind
  ``metal`` whichever backend reaches it; ``mps`` is another name for it in a spec.
* :func:`resolve` finds the device a spec names without changing anything; :func:`select`
  makes it the one the backend uses: TensorFlow's visible devices (before its runtime
  starts), JAX's default device, Keras's PyTorch device.
"""

from __future__ import annotations

import dataclasses
import platform
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit import backend as backends
from toolkit.core.machine import cpu_model

__all__ = [
    "DeviceError",
    "DeviceInfo",
    "detect",
    "framework_device",
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
        kind: ``"cpu"``, ``"cuda"`` or ``"metal"`` (an Apple GPU, through tensorflow-metal,
            jax-metal or PyTorch's MPS; ``"gpu"`` for a GPU of another vendor).
        name: the backend's name for it: ``/physical_device:GPU:0`` (TensorFlow), ``cuda:0``
            (JAX, PyTorch), ``mps`` (PyTorch).
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
        """TensorFlow's name to place ops with, e.g. ``/device:GPU:0``."""
        return f"/device:{self.device_type}:{self.index}"

    @property
    def spec(self) -> str:
        """The spec that names this device again: ``cuda:1``, ``metal:0``, ``cpu:0``."""
        return f"{self.kind}:{self.index}"

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


def _host_cpu() -> DeviceInfo:
    return DeviceInfo("cpu", "cpu", 0, cpu_model(), _host_ram_mb())


def _gpu_kind(details: dict[str, Any], build: dict[str, Any]) -> str:
    name = str(details.get("device_name", ""))
    if "compute_capability" in details:
        return "cuda"
    if "METAL" in name.upper() or (_is_apple_silicon() and not build.get("is_cuda_build")):
        return "metal"
    if build.get("is_cuda_build"):
        return "cuda"
    return "gpu"


def _detect_tensorflow() -> list[DeviceInfo]:
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


def _capability(value: Any) -> tuple[int, int] | None:
    """``"9.0"`` or ``(9, 0)`` -> ``(9, 0)``; None when absent or unreadable."""
    if value is None:
        return None
    parts = str(value).replace(",", ".").strip("() ").split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].strip() else 0
    except ValueError:
        return None


def jax_device_info(device: Any, index: int) -> DeviceInfo:
    """A JAX device (anything with ``platform``, ``device_kind``, optionally
    ``compute_capability`` and ``memory_stats()``) as a DeviceInfo: ``gpu`` is CUDA unless the
    client says ROCm, ``METAL`` (jax-metal) is an Apple GPU."""
    platform_name = str(getattr(device, "platform", "")).lower()
    version = str(getattr(getattr(device, "client", None), "platform_version", "")).lower()
    if platform_name in ("gpu", "cuda"):
        kind = "gpu" if "rocm" in version else "cuda"
    elif platform_name == "metal":
        kind = "metal"
    elif platform_name == "cpu":
        kind = "cpu"
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
        memory = _host_ram_mb()  # unified memory
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


def _detect_jax() -> list[DeviceInfo]:
    import jax

    found = [_host_cpu()]
    for platform_name in ("gpu", "METAL"):
        try:  # this process's own: over processes, jax.devices() holds the others' too
            devices = jax.local_devices(backend=platform_name)
        except RuntimeError:  # this JAX has no such platform
            continue
        found += [jax_device_info(d, i) for i, d in enumerate(devices)]
    return found


def torch_device_infos(cuda: Sequence[Any], mps: bool, *, hip: bool = False) -> list[DeviceInfo]:
    """PyTorch's devices as DeviceInfos: `cuda` are ``torch.cuda.get_device_properties``
    results (``name``, ``total_memory``, ``major``, ``minor``), `mps` whether
    ``torch.backends.mps.is_available()``; `hip` a ROCm build (its GPUs are not CUDA)."""
    found = [_host_cpu()]
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
        found.append(DeviceInfo("metal", "mps", 0, f"{cpu_model()} GPU (MPS)", _host_ram_mb()))
    return found


def _detect_torch() -> list[DeviceInfo]:
    import torch

    cuda = []
    if torch.cuda.is_available():
        cuda = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    return torch_device_infos(
        cuda, bool(torch.backends.mps.is_available()), hip=bool(torch.version.hip)
    )


_DETECT = {"tensorflow": _detect_tensorflow, "jax": _detect_jax, "torch": _detect_torch}


def detect(backend: str | None = None) -> list[DeviceInfo]:
    """The devices `backend` (default: the one Keras trains on) sees: CPUs first, then GPUs,
    each with its kind."""
    return _DETECT[backend or backends.name()]()


# ---------------------------------------------------------------------------- select


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


# What each backend needs to see a GPU of each kind: (backend, kind) -> why it sees none.
_WHY_NONE = {
    ("tensorflow", "metal"): "TensorFlow sees no Metal GPU (tensorflow-metal is not installed, "
    "does not load with TensorFlow 2.18 or later, or this is not Apple silicon); on a Mac use "
    "--backend=torch --device=mps",
    ("jax", "metal"): "JAX sees no METAL device (jax-metal is not installed, or this is not "
    "Apple silicon); on a Mac use --backend=torch --device=mps",
    ("torch", "metal"): "PyTorch sees no MPS device (not Apple silicon, macOS older than 12.3, "
    "or a PyTorch built without MPS)",
    ("tensorflow", "cuda"): "TensorFlow sees no CUDA GPU (a CPU-only TensorFlow, no NVIDIA "
    "driver, or CUDA_VISIBLE_DEVICES hides it; pip install 'tensorflow[and-cuda]')",
    ("jax", "cuda"): "JAX sees no CUDA GPU (a CPU-only jax; pip install 'jax[cuda12]'), or "
    "CUDA_VISIBLE_DEVICES hides it",
    ("torch", "cuda"): "PyTorch sees no CUDA GPU (a CPU build of torch, no NVIDIA driver, or "
    "CUDA_VISIBLE_DEVICES hides it)",
}


def _unavailable(spec: str, kind: str, devices: Sequence[DeviceInfo], backend: str) -> DeviceError:
    available = ", ".join(d.spec for d in devices) or "none"
    pretty = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}.get(backend, backend)
    why = _WHY_NONE.get((backend, kind)) or {"gpu": f"{pretty} sees no GPU"}.get(
        kind, "no such device"
    )
    return DeviceError(
        f"unknown device {spec!r} on --backend={backend}: {why}. Available: {available}. "
        f"{BUILD_HELP}"
    )


def resolve(
    spec: str = "auto",
    devices: Sequence[DeviceInfo] | None = None,
    *,
    backend: str | None = None,
) -> DeviceInfo:
    """The device `spec` names among `devices` (default: :func:`detect` for `backend`),
    without changing anything. ``auto`` prefers the first GPU."""
    backend = backend or backends.name()
    devices = list(devices) if devices is not None else detect(backend)
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
        raise _unavailable(spec, kind if kind != "auto" else "gpu", devices, backend)
    return pool[0]


def select(
    spec: str = "auto", memory_growth: bool = True, *, backend: str | None = None
) -> DeviceInfo:
    """Makes `spec` the device the backend trains on, like ML Compute's ``set_mlc_device``.

    * TensorFlow: ``cpu`` hides every GPU; a GPU choice makes only that GPU visible (and
      turns on memory growth on CUDA, so TensorFlow does not take all GPU memory up front).
      Must run before TensorFlow starts its runtime (before the first op or model).
    * JAX: the device becomes JAX's default device (``jax_default_device``), where Keras puts
      its variables and runs its steps.
    * PyTorch: the device becomes Keras's PyTorch device (what ``keras.device`` sets for a
      block, here for the program; ``KERAS_TORCH_DEVICE`` before Keras loads).

    Args:
        spec: ``auto`` | ``cpu`` | ``gpu`` | ``cuda`` | ``metal`` (``mps``), optionally
            ``:index``.
        memory_growth: allocate GPU memory as needed (TensorFlow on CUDA). Defaults to `True`.
        backend: the backend to set up. Defaults to the one Keras trains on.

    Returns:
        The chosen device.

    Raises:
        DeviceError: no such device here (the message lists what is, and what would reach
            it), or the runtime already started with another visible-device setup.
    """
    backend = backend or backends.name()
    devices = detect(backend)
    chosen = resolve(spec, devices, backend=backend)
    if backend == "jax":
        import jax

        jax.config.update("jax_default_device", jax_device(chosen))
        return chosen
    if backend == "torch":
        _set_torch_device(torch_device_name(chosen))
        return chosen
    return _select_tensorflow(spec, chosen, memory_growth)


def jax_device(device: DeviceInfo) -> Any:
    """The ``jax.Device`` a DeviceInfo of :func:`detect` names."""
    import jax

    platform_name = {"cpu": "cpu", "metal": "METAL"}.get(device.kind, "gpu")
    found = jax.local_devices(backend=platform_name)  # a process places on its own only
    return found[min(device.index, len(found) - 1)]


def torch_device_name(device: DeviceInfo) -> str:
    """PyTorch's name for a DeviceInfo: ``cpu``, ``cuda:1``, ``mps``."""
    if device.kind == "metal":
        return "mps"
    if device.is_gpu:
        return f"cuda:{device.index}"
    return "cpu"


def framework_device(device: DeviceInfo, backend: str | None = None) -> Any:
    """`device` as `backend`'s own API names it (the backend seam, ``toolkit.backend``, takes
    this, so that every framework's device code stays here): a ``jax.Device`` on JAX, a name
    such as ``cuda:1`` on PyTorch, and TensorFlow's logical device name
    (``/device:GPU:0``)."""
    backend = backend or backends.name()
    if backend == "jax":
        return jax_device(device)
    if backend == "torch":
        return torch_device_name(device)
    return device.logical_name


def _set_torch_device(name: str) -> None:
    """Keras's PyTorch backend reads its device from a global that ``keras.device`` sets for a
    block; set here for the rest of the program (before Keras loads: its variable)."""
    if "keras" not in sys.modules:
        import os

        os.environ["KERAS_TORCH_DEVICE"] = name
        return
    from keras.src.backend.common import global_state  # keras.device's own switch

    global_state.set_global_attribute("torch_device", name)


def _select_tensorflow(spec: str, chosen: DeviceInfo, memory_growth: bool) -> DeviceInfo:
    import tensorflow as tf

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
