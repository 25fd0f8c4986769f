"""The seam between the backend-neutral core and a framework.

The measuring core (StepTimer, TraceWindow, MemoryWatch, FLOP counting, the matmul peak, the
report's environment) never calls a framework itself: it asks :func:`get` for the module of
the backend Keras trains on and calls the same functions on it. ``toolkit.backend.tensorflow``
is the one implemented today; a JAX or PyTorch backend is one more module here with the same
functions (``framework_facts``, ``start_trace``, ``stop_trace``, ``device_memory``,
``count_flops``, ``measure_matmul_peak``, ``fuse_train_steps``, ``quiet_retracing``), and no
change to the core.

Importing this package imports no framework; :func:`name` reads Keras's choice from an
already-imported Keras, else from ``KERAS_BACKEND``.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from typing import Any

__all__ = ["BACKENDS", "BackendError", "framework_facts", "get", "name"]

# Keras 3's training backends, in the toolkit's order of preference.
BACKENDS = ("tensorflow", "jax", "torch")
IMPLEMENTED = ("tensorflow",)


class BackendError(ValueError):
    """A backend this toolkit cannot measure on (yet), with what to do instead."""


def name() -> str:
    """The backend Keras trains on in this process: ``tensorflow``, ``jax`` or ``torch``.

    tf_keras (``TF_USE_LEGACY_KERAS=1``) is TensorFlow. Keras 3 fixes its backend when it is
    imported; before that, ``KERAS_BACKEND`` says what it will be (default TensorFlow).
    """
    if os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes", "on"):
        return "tensorflow"
    keras = sys.modules.get("keras")
    config = getattr(keras, "config", None) if keras is not None else None
    if config is not None and hasattr(config, "backend"):
        try:
            return str(config.backend())
        except Exception:  # noqa: BLE001 - a half-imported Keras: fall back to the variable
            pass
    return os.environ.get("KERAS_BACKEND", "tensorflow").strip().lower() or "tensorflow"


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
    return importlib.import_module(f"toolkit.backend.{backend}")


def framework_facts() -> dict[str, Any]:
    """The facts about the loaded framework that a report records (devices it sees, how it was
    built, which Keras); ``{}`` when the backend's framework is not imported yet (reading a
    report never imports one)."""
    backend = name()
    facts: dict[str, Any] = {"keras_backend": backend}
    if backend in IMPLEMENTED and backend in sys.modules:
        facts.update(get(backend).framework_facts())
    return facts
