"""Runtime settings that must come before TensorFlow starts its runtime: thread pools; and
loading TensorFlow with its native start-up lines held, and without JAX
(:func:`load_tensorflow`).

(Device memory readings are the backend's: ``toolkit.backend._tensorflow.device_memory``.)"""

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
    """Imports TensorFlow and lists its devices, the two calls that write its C++ start-up
    lines, with those lines held back (:mod:`toolkit.core.native_logs`); False where it is
    not installed.

    Listing devices does not start the runtime: thread pools and visible devices can still
    be set afterwards. JAX is not imported with it where the run does not use it
    (:func:`_jax_deferred`)."""
    with native_logs.held(), _jax_deferred():
        try:
            import tensorflow as tf
        except ImportError:
            return False
        tf.config.list_physical_devices()
    return True


# The modules that import JAX as TensorFlow loads, where no TensorFlow or PyTorch run uses it:
# TFLite's, for its JAX converter, which keeps ``jax.jit`` as ``_jit`` (None without JAX, and
# so in the module that copies it); Keras's Orbax callback's, to give JAX releases without
# ``jax.monitoring.record_scalar`` one.
_TFLITE_UTIL = "tensorflow.lite.python.util"
_TFLITE_JIT = (_TFLITE_UTIL, "tensorflow.lite.python.lite")
_KERAS_ORBAX = "keras.src.callbacks.orbax_checkpoint"


class _JaxDeferred(importlib.abc.MetaPathFinder):
    """Fails the import of JAX from the named modules' own code, as if JAX were not
    installed; every other import of JAX (Keras's JAX backend, a JAX run's) goes on."""

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
    """TensorFlow imported without JAX, which it imports as it loads where JAX is installed
    (TFLite's ``from jax import jit`` and Keras's Orbax callback's ``import jax``, neither used
    by a TensorFlow or PyTorch run): 0.6-0.8 s of TensorFlow's 2.6-2.8 s on 2 cores, in every
    such process. Those two imports fail as if JAX were absent (:class:`_JaxDeferred`):
    TFLite then gets a ``jit`` that imports JAX on its first call, so its JAX converter still
    works; Keras's is deferred only where the JAX installed has ``record_scalar`` already
    (read in its source), so Keras's stand-in for older releases is never missed. A JAX
    run's Keras imports JAX for its backend first, and so has both as ever."""
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
    """Whether the installed JAX's ``jax.monitoring`` defines ``record_scalar``, read from its
    source without importing JAX; False where it cannot be read."""
    for folder in spec.submodule_search_locations or ():
        try:
            with open(os.path.join(folder, "monitoring.py"), encoding="utf-8") as f:
                return "record_scalar" in f.read()
        except OSError:
            continue
    return False


def _jit_on_first_use(*args: Any, **kwargs: Any) -> Callable[..., Any]:
    """``jax.jit`` for TFLite's JAX converter, imported when it is first called
    (:func:`_jax_deferred`)."""
    import jax

    return jax.jit(*args, **kwargs)


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
