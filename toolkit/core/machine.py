"""Machine identity, environment and cache key; a leaf: framework versions only if loaded."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from toolkit.core.version import __version__

__all__ = [
    "cache_dir",
    "capture_environment",
    "machine_facts",
]

CACHE_ENV = "TOOLKIT_CACHE_DIR"
ENV_VARS = (
    "TF_USE_LEGACY_KERAS",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_XLA_FLAGS",
    "TF_GPU_ALLOCATOR",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "KERAS_BACKEND",
)
_FRAMEWORKS = (
    ("tensorflow", "tensorflow"),
    ("keras", "keras"),
    ("tf_keras", "tf_keras"),
    ("jax", "jax"),
    ("torch", "torch"),
)


def cpu_model() -> str:
    """The CPU's marketing name, e.g. ``Apple M2 Pro`` or ``Intel(R) Xeon(R) ...``."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                for line in f:
                    if line.lower().startswith(("model name", "hardware", "cpu model")):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
    elif sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            )
            return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown"


def framework_versions() -> dict[str, str]:
    """``{"tensorflow": "2.21.0", ...}`` for frameworks already imported (none imported here)."""
    out = {}
    for module, label in _FRAMEWORKS:
        loaded = sys.modules.get(module)
        version = getattr(loaded, "__version__", None) if loaded is not None else None
        if version:
            out[label] = str(version)
    return out


def capture_environment(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Python, platform, CPU, toolkit, argv, performance env vars, loaded frameworks, `extra`."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "system": platform.system(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
        "toolkit_version": __version__,
        "argv": list(sys.argv),
        "env_vars": {k: os.environ[k] for k in ENV_VARS if k in os.environ},
        **framework_versions(),
    }
    env.update(extra or {})
    return env


def cache_dir() -> str:
    """Where measured facts are cached: ``$TOOLKIT_CACHE_DIR`` made absolute (one cache wherever a
    program starts), else ``~/.cache/keras-perf-toolkit``."""
    named = os.environ.get(CACHE_ENV, "").strip()
    if named:
        return os.path.abspath(os.path.expanduser(named))
    return os.path.join(os.path.expanduser("~"), ".cache", "keras-perf-toolkit")


def machine_facts(**more: Any) -> dict[str, Any]:
    """What makes a measurement valid only here: CPU, toolkit and loaded frameworks, `more`."""
    return {
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "toolkit": __version__,
        **framework_versions(),
        **_jax_beside_tensorflow(),
        **more,
    }


def _jax_beside_tensorflow() -> dict[str, str]:
    """JAX's installed version where TensorFlow is loaded without it: the toolkit loads TensorFlow
    alone, but your ``import tensorflow`` loads JAX; one machine must have one key."""
    if "tensorflow" not in sys.modules or "jax" in sys.modules:
        return {}
    from importlib import metadata

    try:
        return {"jax": metadata.version("jax")}
    except metadata.PackageNotFoundError:
        return {}


def machine_key(facts: Mapping[str, Any]) -> str:
    """A short stable hash of `facts`: a new CPU or framework version is a new cache key."""
    text = json.dumps(dict(facts), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]
