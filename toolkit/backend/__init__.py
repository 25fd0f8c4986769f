"""The seam between the backend-neutral core and a framework.

The measuring core and ``toolkit.devices`` never call a framework themselves, nor compare a
backend's name: they ask :func:`get` for the :class:`~toolkit.backend._common.Seam` of the backend
Keras trains on. Importing this package imports no framework; Keras fixes its backend when
imported, so :func:`select` (``--backend``) runs before anything imports Keras."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import os
import sys
from typing import Any, cast

from toolkit.backend._common import Seam, missing_from_seam
from toolkit.core import _extras as extras

__all__ = [
    "Backend",
    "BackendError",
    "get",
    "info",
    "installed",
    "name",
    "names",
    "register",
    "select",
]


@dataclasses.dataclass(frozen=True)
class Backend:
    """One Keras backend the toolkit measures on: what it may know without the seam module.

    Attributes:
        name: Keras's name for it (``KERAS_BACKEND``).
        title: how a person reads it (``PyTorch``).
        module: the seam module implementing :data:`toolkit.backend._common.SEAM`.
        framework: the module whose presence means it is installed.
        extra: the ``setup.py`` extra that installs it; None: a dependency.
        distributions: what a fingerprint of the installed frameworks reads for it.
        install_note: said after its install line."""

    name: str
    title: str
    module: str
    framework: str
    extra: str | None = None
    distributions: tuple[str, ...] = ()
    install_note: str = ""

    def install_hint(self) -> str:
        if self.extra is None:
            hint = f"pip install {extras.DISTRIBUTION} ({self.title} is a dependency)"
        else:
            hint = extras.install_hint(self.extra)
        return f"{hint} ({self.install_note})" if self.install_note else hint

    def installed(self) -> bool:
        try:
            return importlib.util.find_spec(self.framework) is not None
        except (ImportError, ValueError):  # a broken install, or a module set to None
            return False


# Keras 3's training backends in order of preference (a new one: its seam module, a line, an extra).
REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Adds `backend` to :data:`REGISTRY` (last in preference); returns it."""
    REGISTRY[backend.name] = backend
    return backend


register(Backend("tensorflow", "TensorFlow", "toolkit.backend._tensorflow", "tensorflow", None,
                 ("tensorflow", "keras", "tf_keras")))  # fmt: skip
register(Backend("jax", "JAX", "toolkit.backend._jax", "jax", "jax", ("jax", "jaxlib")))
register(Backend("torch", "PyTorch", "toolkit.backend._torch", "torch", "torch", ("torch",),
                 "BUILD.md: CPU, CUDA, Mac"))  # fmt: skip
DEFAULT = "tensorflow"  # Keras's own default backend
_LEGACY = ("1", "true", "yes", "on")


def names() -> tuple[str, ...]:
    """The registered backends' names, in order of preference."""
    return tuple(REGISTRY)


def installed() -> tuple[str, ...]:
    """The registered backends installed here, in order of preference."""
    return tuple(b.name for b in REGISTRY.values() if b.installed())


def info(backend: str | None = None) -> Backend:
    """The registry's entry for `backend` (default: :func:`name`).

    Raises:
        BackendError: a backend the toolkit does not implement, naming those it does."""
    backend = backend or name()
    if backend not in REGISTRY:
        raise BackendError(
            f"the Keras backend {backend!r} is not measured by this toolkit yet "
            f"(implemented: {', '.join(REGISTRY)}): set KERAS_BACKEND={DEFAULT}"
        )
    return REGISTRY[backend]


class BackendError(ValueError):
    """A backend this toolkit cannot measure on (yet), with what to do instead."""


def title(backend: str) -> str:
    """`backend` as people name it (the registry's title); an unknown name as given."""
    return REGISTRY[backend].title if backend in REGISTRY else backend


def name() -> str:
    """The backend Keras trains on (tf_keras: TensorFlow; before Keras loads: ``KERAS_BACKEND``)."""
    if os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in _LEGACY:
        return "tensorflow"
    keras = sys.modules.get("keras")
    config = getattr(keras, "config", None) if keras is not None else None
    if config is not None and hasattr(config, "backend"):
        try:
            return str(config.backend())
        except Exception:  # noqa: BLE001 - a half-imported Keras: fall back to the variable
            pass
    return os.environ.get("KERAS_BACKEND", DEFAULT).strip().lower() or DEFAULT


def use_compile_cache() -> str:
    """Keeps this backend's compiled programs in ``$TOOLKIT_CACHE_DIR/compiled/<backend>``
    (``--compile_cache``) for later processes. Returns what it did, in words; a directory that
    cannot be made, or that others can write, is a cache skipped, said once."""
    from toolkit.core import files, machine

    root = machine.cache_dir()
    directory = os.path.join(root, "compiled", name())
    try:
        os.makedirs(root, 0o700, exist_ok=True)
        for level in (os.path.dirname(directory), directory):  # TF makes only the last
            with contextlib.suppress(FileExistsError):
                os.mkdir(level, 0o700)
    except OSError as e:
        words = (
            f"compile cache: not cached: cannot make {directory} ({e.strerror or e}); "
            "set TOOLKIT_CACHE_DIR to a writable directory"
        )
        return _skipped_cache(directory, words)
    # A compiled program read from the cache runs here: every level must be this user's alone.
    shared = [p for p in (root, os.path.dirname(directory), directory) if not files.is_private(p)]
    if shared:
        words = (
            f"compile cache: not used: {shared[0]} is not a directory of this user's that "
            "others cannot write (a program read from it would run here); `chmod go-w` it, "
            "or set TOOLKIT_CACHE_DIR to a private directory"
        )
        return _skipped_cache(directory, words)
    return get().use_compile_cache(directory)


def _skipped_cache(directory: str, words: str) -> str:
    if directory not in _SKIPPED_CACHES:  # said once: the runner asks again
        _SKIPPED_CACHES.add(directory)
        print(words, file=sys.stderr)
    return words


_SKIPPED_CACHES: set[str] = set()


def select(backend: str) -> str:
    """Makes `backend` the one Keras will train on in this process, before Keras is imported.

    Raises:
        BackendError: unknown, not installed, non-TF under tf_keras, or Keras already on another."""
    backend = backend.strip().lower()
    if backend not in REGISTRY:
        raise BackendError(f"--backend={backend}: use one of {', '.join(REGISTRY)}")
    if not REGISTRY[backend].installed():
        raise BackendError(
            f"--backend={backend}: it is not installed; {REGISTRY[backend].install_hint()}"
        )
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
    """The installed backend best reaching this Mac's GPU, by how well its path is kept (PyTorch's
    MPS maintained, jax-metal experimental, tensorflow-metal broken); None off Apple silicon."""
    from toolkit.core._device_types import is_apple_silicon

    if not is_apple_silicon():
        return None
    rank = {"maintained": 0, "experimental": 1}
    for backend in sorted(installed(), key=lambda b: rank.get(get(b).apple_gpu_path()[0], 2)):
        if get(backend).reaches_apple_gpu():
            return backend
    return None


def get(backend: str | None = None) -> Seam:
    """The module implementing `backend` (default: :func:`name`), as the :class:`Seam` it is.

    Raises:
        BackendError: an unknown backend, or a module missing a seam function (naming them)."""
    return _seam(info(backend).module)


@functools.cache
def _seam(module: str) -> Seam:
    found = importlib.import_module(module)
    missing = missing_from_seam(found)
    if missing:
        raise BackendError(
            f"{module} does not implement the backend seam: {', '.join(missing)} missing "
            "(toolkit.backend._common.Seam)"
        )
    return cast("Seam", found)


def find(backend: str | None = None) -> Seam | None:
    """The module implementing `backend`, or None for one not measured here (callers fall back)."""
    backend = backend or name()
    return get(backend) if backend in REGISTRY else None


def jits_by_default(backend: str | None = None) -> bool:
    """Whether `backend`'s train step is compiled with ``--jit_compile`` unset (Keras's ``"auto"``):
    JAX jits every step; PyTorch runs eagerly; TensorFlow runs a graph without XLA on a CPU."""
    return bool(get(backend).searched_jit()[0])


def framework_facts() -> dict[str, Any]:
    """The loaded framework's facts for a report; ``{}`` before it is imported (imports none)."""
    backend = name()
    facts: dict[str, Any] = {"keras_backend": backend}
    if backend in REGISTRY and REGISTRY[backend].framework in sys.modules:
        facts.update(get(backend).framework_facts())
    if "keras" in sys.modules or "tf_keras" in sys.modules:
        from toolkit.core import compat

        release = compat.keras_release()
        facts.update(
            keras=compat.keras_version(),
            keras_flavor=compat.keras_flavor(),
            keras_nightly=release.nightly,
            keras_distribution=release.distribution,
        )
    return facts
