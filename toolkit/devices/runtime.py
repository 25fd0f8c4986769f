"""Runtime settings that must come before TensorFlow starts its runtime (thread pools), and
loading TensorFlow with its start-up lines held and without JAX (:func:`load_tensorflow`)."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from toolkit.core import native_logs
from toolkit.devices.selection import DeviceError

__all__: list[str] = []  # offered through toolkit.devices


def load_tensorflow() -> bool:
    """Imports TensorFlow and lists its devices (which does not start the runtime) with their C++
    start-up lines held and without JAX where unused; False where not installed."""
    with native_logs.held(), _jax_deferred():
        try:
            import tensorflow as tf
        except ImportError:
            return False
        tf.config.list_physical_devices()
    return True


# Modules importing JAX as TensorFlow loads: TFLite's (``jax.jit`` kept as ``_jit``), Keras's Orbax.
_TFLITE_UTIL = "tensorflow.lite.python.util"
_TFLITE_JIT = (_TFLITE_UTIL, "tensorflow.lite.python.lite")
_KERAS_ORBAX = "keras.src.callbacks.orbax_checkpoint"


class _JaxDeferred(importlib.abc.MetaPathFinder):
    """Fails the import of JAX from the named modules' own code, as if absent; others go on."""

    def __init__(self, importers: frozenset[str]) -> None:
        self.importers = importers

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname != "jax":
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith(
            ("importlib", "_frozen_importlib")
        ):
            frame = frame.f_back  # the import system's own frames, up to the importer
        if frame is not None and frame.f_globals.get("__name__") in self.importers:
            raise ModuleNotFoundError("JAX deferred to its first use", name="jax")
        return None


@contextlib.contextmanager
def _jax_deferred() -> Iterator[None]:
    """TensorFlow imported without JAX, which TFLite and Keras's Orbax callback import as it loads
    (a large share of its import time). TFLite gets a ``jit`` importing JAX on first call; Keras's
    is deferred only where JAX has ``record_scalar`` (a JAX run imports JAX first, so has both)."""
    spec = importlib.util.find_spec("jax")
    if spec is None or "jax" in sys.modules:
        yield
        return
    importers = {_TFLITE_UTIL}
    if _has_record_scalar(spec):
        importers.add(_KERAS_ORBAX)
    finder = _JaxDeferred(frozenset(importers))
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for module_name in _TFLITE_JIT:
            module = sys.modules.get(module_name)
            if module is not None and getattr(module, "_jit", False) is None:
                module._jit = _jit_on_first_use  # type: ignore[attr-defined]


def _has_record_scalar(spec: importlib.machinery.ModuleSpec) -> bool:
    """Whether the installed JAX defines ``jax.monitoring.record_scalar``, read from its source."""
    for folder in spec.submodule_search_locations or ():
        try:
            with open(os.path.join(folder, "monitoring.py"), encoding="utf-8") as f:
                return "record_scalar" in f.read()
        except OSError:
            continue
    return False


def _jit_on_first_use(*args: Any, **kwargs: Any) -> Callable[..., Any]:
    """``jax.jit`` for TFLite's JAX converter, importing JAX when first called."""
    import jax

    return jax.jit(*args, **kwargs)


def configure_threads(
    intra_op: int | None = None,
    inter_op: int | None = None,
    cores: int | None = None,
) -> dict[str, int]:
    """Sets TensorFlow's intra/inter-op thread pools (default: all cores, 2) before its runtime
    starts, and suggests ``datasets_num_private_threads`` (half the cores).

    Raises:
        DeviceError: a count < 1, or the runtime already started."""
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
