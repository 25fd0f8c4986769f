"""The seam between the backend-neutral core and a framework.

The measuring core (StepTimer, TraceWindow, MemoryWatch, FLOP counting, the matmul peak, the
report's environment) never calls a framework itself: it asks :func:`get` for the module of
the backend Keras trains on and calls the same functions on it: ``tensorflow``, ``jax`` and
``torch``, one module each, with the same functions: ``toolkit.backend._common.SEAM``, which
each module's ``__all__`` is (a test checks that every one is implemented).

Importing this package imports no framework. :func:`name` reads Keras's choice from an
already-imported Keras, else from ``KERAS_BACKEND``. Keras fixes its backend when it is
imported, so :func:`select` (``--backend``) must run before anything imports Keras: recipes
and ``python -m toolkit`` read ``--backend`` from the command line first thing
(``toolkit.runner.flags.backend_from_argv``, which ``toolkit.app.start`` calls).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from typing import Any

from toolkit.core import _extras as extras

__all__ = [
    "BACKENDS",
    "BackendError",
    "framework_facts",
    "get",
    "jits_by_default",
    "name",
    "select",
]

# Keras 3's training backends, in the toolkit's order of preference.
BACKENDS = ("tensorflow", "jax", "torch")
IMPLEMENTED = BACKENDS
# Backend -> (the module it imports, what installs it).
_INSTALL = {
    "tensorflow": ("tensorflow", "pip install keras-perf-toolkit (TensorFlow is a dependency)"),
    "jax": ("jax", extras.install_hint("jax")),
    "torch": ("torch", f"{extras.install_hint('torch')} (BUILD.md: CPU, CUDA, Mac)"),
}
_LEGACY = ("1", "true", "yes", "on")


class BackendError(ValueError):
    """A backend this toolkit cannot measure on (yet), with what to do instead."""


def name() -> str:
    """The backend Keras trains on in this process: ``tensorflow``, ``jax`` or ``torch``.

    tf_keras (``TF_USE_LEGACY_KERAS=1``) is TensorFlow. Keras 3 fixes its backend when it is
    imported; before that, ``KERAS_BACKEND`` says what it will be (default TensorFlow).
    """
    if os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in _LEGACY:
        return "tensorflow"
    keras = sys.modules.get("keras")
    config = getattr(keras, "config", None) if keras is not None else None
    if config is not None and hasattr(config, "backend"):
        try:
            return str(config.backend())
        except Exception:  # noqa: BLE001 - a half-imported Keras: fall back to the variable
            pass
    return os.environ.get("KERAS_BACKEND", "tensorflow").strip().lower() or "tensorflow"


def use_compile_cache() -> str:
    """Keeps this backend's compiled programs on disk, in
    ``$TOOLKIT_CACHE_DIR/compiled/<backend>`` (``--compile_cache``), so that a later process
    compiling the same program reads it. On TensorFlow it holds only when set before any
    TensorFlow op: the recipes and ``python -m toolkit`` set it from their command line
    (``toolkit.runner.flags.compile_cache_from_argv``) before anything else runs. Returns
    what it did, in words."""
    from toolkit.core import machine

    directory = os.path.join(machine.cache_dir(), "compiled", name())
    os.makedirs(directory, exist_ok=True)  # TensorFlow makes only the last directory
    return get().use_compile_cache(directory)


def select(backend: str) -> str:
    """Makes `backend` the one Keras will train on in this process (``KERAS_BACKEND``), before
    Keras is imported.

    Raises:
        BackendError: an unknown backend, one that is not installed (naming the extra that
            installs it), tf_keras with another backend, or Keras already loaded with another.
    """
    backend = backend.strip().lower()
    if backend not in BACKENDS:
        raise BackendError(f"--backend={backend}: use one of {', '.join(BACKENDS)}")
    if importlib.util.find_spec(_INSTALL[backend][0]) is None:
        raise BackendError(f"--backend={backend}: it is not installed; {_INSTALL[backend][1]}")
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in _LEGACY
    if legacy and backend != "tensorflow":
        raise BackendError(
            f"--backend={backend}: TF_USE_LEGACY_KERAS=1 selects tf_keras, which trains on "
            "TensorFlow only; unset it to use Keras 3 on another backend"
        )
    if "keras" in sys.modules and name() != backend:
        raise BackendError(
            f"--backend={backend}: Keras is already loaded with the {name()} backend in this "
            "process; choose the backend before importing Keras (KERAS_BACKEND, or --backend "
            "on the command line)"
        )
    os.environ["KERAS_BACKEND"] = backend
    return backend


def apple_gpu_backend() -> str | None:
    """The first installed backend that reaches this Mac's GPU: PyTorch's MPS (maintained),
    then jax-metal, then tensorflow-metal (before TensorFlow 2.18); None elsewhere. Imports
    PyTorch to ask it, nothing else."""
    import platform
    from importlib import metadata

    if sys.platform != "darwin" or platform.machine() != "arm64":
        return None

    def installed(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.backends.mps.is_available():
            return "torch"
    if installed("jax-metal"):
        return "jax"
    tf_version = installed("tensorflow") or installed("tensorflow-macos") or ""
    minor = tf_version.split(".")[1] if tf_version.count(".") >= 1 else ""
    if installed("tensorflow-metal") and minor.isdigit() and int(minor) < 18:
        return "tensorflow"
    return None


def get(backend: str | None = None) -> types.ModuleType:
    """The module implementing `backend` (default: :func:`name`).

    Raises:
        BackendError: a backend the toolkit does not implement, naming those it does.
    """
    backend = backend or name()
    if backend not in IMPLEMENTED:
        raise BackendError(
            f"the Keras backend {backend!r} is not measured by this toolkit yet "
            f"(implemented: {', '.join(IMPLEMENTED)}): set KERAS_BACKEND=tensorflow"
        )
    return importlib.import_module(f"toolkit.backend._{backend}")


def jits_by_default(backend: str | None = None) -> bool:
    """Whether `backend`'s train step is compiled when ``--jit_compile`` is unset (Keras's
    ``"auto"``), as the toolkit's measurements start from: JAX jits every step; PyTorch runs
    eagerly; TensorFlow runs a graph without XLA on a CPU (where the search and the advice
    offer XLA as a setting to measure). The seam's first ``jit_compile`` value for tune is
    Keras's default."""
    return bool(get(backend).searched_jit()[0])


def framework_facts() -> dict[str, Any]:
    """The facts about the loaded framework that a report records (devices it sees, how it was
    built, which Keras); ``{}`` when the backend's framework is not imported yet (reading a
    report never imports one)."""
    backend = name()
    facts: dict[str, Any] = {"keras_backend": backend}
    if backend in IMPLEMENTED and backend in sys.modules:
        facts.update(get(backend).framework_facts())
    if "keras" in sys.modules or "tf_keras" in sys.modules:
        from toolkit.core import compat

        facts.update(keras=compat.keras_version(), keras_flavor=compat.keras_flavor())
    return facts
