"""Which Keras is in use, and version facts.

TensorFlow >= 2.16 ships Keras 3; ``TF_USE_LEGACY_KERAS=1`` puts tf_keras (Keras 2) behind
``tf.keras``. ``fit`` rejects a callback not subclassing its Keras's ``Callback``: use this one."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
import types
from collections.abc import Mapping
from importlib import metadata
from typing import Any

__all__ = [
    "keras",
    "keras_flavor",
    "keras_version",
    "use_legacy_keras",
]


# Keras's callback logs as every hook receives them; read, never kept as a record.
Logs = Mapping[str, Any] | None
_TRUE = ("1", "true", "yes", "on")


def use_legacy_keras() -> bool:
    """Whether ``TF_USE_LEGACY_KERAS`` selects tf_keras (Keras 2), as TensorFlow itself decides."""
    return os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in _TRUE


@functools.cache
def keras() -> types.ModuleType:
    """Returns the Keras module that ``tf.keras`` resolves to in this process.

    Raises:
        ImportError: ``TF_USE_LEGACY_KERAS=1`` is set but ``tf-keras`` is not installed."""
    if use_legacy_keras():
        try:
            import tf_keras
        except ImportError as e:
            raise ImportError(
                "TF_USE_LEGACY_KERAS=1 is set but tf_keras is not installed: "
                "`pip install tf-keras` matching your TensorFlow minor version, "
                "or unset TF_USE_LEGACY_KERAS to use Keras 3."
            ) from e
        return tf_keras
    import keras as keras3

    return keras3


def keras_flavor() -> str:
    """``"tf_keras"`` (legacy switch), ``"keras2"`` (TF <= 2.15) or ``"keras3"``."""
    if use_legacy_keras():
        return "tf_keras"
    major = keras_version().split(".")[0]
    return "keras3" if not major.isdigit() or int(major) >= 3 else "keras2"


def keras_version() -> str:
    return str(getattr(keras(), "__version__", "unknown"))


@dataclasses.dataclass(frozen=True)
class KerasRelease:
    """The installed release of the Keras in use; `nightly`: its timings are no release's."""

    version: str
    nightly: bool
    distribution: str | None


def keras_release() -> KerasRelease:
    """The installed release of the Keras in use, from metadata, never importing Keras. A nightly
    has its own name; with both installed, the loaded module's version picks (else the nightly)."""
    module = "tf_keras" if use_legacy_keras() else "keras"
    stem = module.replace("_", "-")
    installed = {}
    for name in (f"{stem}-nightly", stem):
        with contextlib.suppress(metadata.PackageNotFoundError):
            installed[name] = metadata.version(name)
    loaded = getattr(sys.modules.get(module), "__version__", None)
    named = [d for d, v in installed.items() if v == loaded] or list(installed)
    dist = named[0] if named else None
    version = installed[dist] if dist else str(loaded or "unknown")
    nightly = bool(dist and dist.endswith("-nightly")) or ".dev" in version
    return KerasRelease(version, nightly, dist)


def steps_per_execution(model: Any) -> int:
    """The model's steps_per_execution (a tf_keras ``tf.Variable``), 1 if none; read once a fit."""
    if model is None:
        return 1
    value = getattr(model, "steps_per_execution", None)
    if value is None:
        value = getattr(model, "_steps_per_execution", None)
    if value is None:
        return 1
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        return max(1, int(value.numpy() if hasattr(value, "numpy") else value))
    return 1


def xla_ruled_out(model: Any) -> tuple[str, ...]:
    """Layers in `model` ruling XLA out (``supports_jit`` False), as ``RandomRotation 'spin'``:
    ``jit_compile="auto"`` then turns the jit off, and on JAX the step runs op by op."""
    walk = getattr(model, "_flatten_layers", None)
    if walk is None:
        return ()
    return tuple(f"{type(layer).__name__} {layer.name!r}" for layer in walk(include_self=False)
                 if getattr(layer, "supports_jit", True) is False)  # fmt: skip


def unjitted_by(model: Any) -> tuple[str, ...]:
    """The layers that kept `model`'s step from being jitted; none where jitted or unknown."""
    if model is None or str(getattr(model, "jit_compile", None)) != "False":
        return ()
    with contextlib.suppress(Exception):
        return xla_ruled_out(model)
    return ()


def own_method(model: Any, name: str) -> type | None:
    """`model`'s class defining `name` where not Keras's (keras.io's ``Distiller.compile``)."""
    owner = next((k for k in type(model).__mro__ if name in vars(k)), None)
    if owner is None or owner.__module__.split(".")[0] in ("keras", "tf_keras"):
        return None
    return owner


def named_layers(names: tuple[str, ...], most: int = 3) -> str:
    """`names` (:func:`xla_ruled_out`'s) in words: the first `most`, then how many more."""
    more = len(names) - most
    return ", ".join(names[:most]) + (f" and {more} more" if more > 0 else "")


def ruling_xla_out(names: tuple[str, ...]) -> str:
    """``RandomRotation 'spin' rules XLA out (supports_jit False)``, the verb agreeing in number."""
    verb = "rules" if len(names) == 1 else "rule"
    return f"{named_layers(names)} {verb} XLA out (supports_jit False)"


def set_compile_settings(model: Any, **settings: Any) -> None:
    """Sets a compiled model's ``jit_compile``/``steps_per_execution`` as ``compile`` would, without
    recompiling (its own ``compile`` may take arguments nobody else can pass); ``fit`` retraces."""
    if "jit_compile" in settings:
        model.jit_compile = bool(settings["jit_compile"])
    if "steps_per_execution" in settings:
        loops = max(1, int(settings["steps_per_execution"]))
        variable = getattr(model, "_steps_per_execution", None)
        if hasattr(variable, "assign"):
            variable.assign(loops)
        else:
            model.steps_per_execution = loops
    for name in ("train_function", "test_function", "predict_function"):
        setattr(model, name, None)
