"""The command line, read at the edge: what a program does with its argv before absl parses it,
and nothing below the app layer does at all (``tests/test_edges.py`` holds the rest of the
toolkit to typed values instead of flag strings)."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from absl import flags

from toolkit import backend
from toolkit.runner.config import SETTINGS, flag_of
from toolkit.runner.flags import DEPRECATED_FLAGS, setting_kind


def canonical_argv(
    argv: Sequence[str],
    renames: dict[str, str] | None = None,
    note: Callable[[str], Any] | None = None,
) -> list[str]:
    """`argv` with old flag names renamed, one note each on stderr (or `note`); ``--`` ends it."""
    renames = DEPRECATED_FLAGS if renames is None else renames
    say = note or (lambda line: print(line, file=sys.stderr))
    out: list[str] = []
    told: set[str] = set()
    for i, arg in enumerate(argv):
        if arg == "--":
            out += argv[i:]
            break
        dashes = "--" if arg.startswith("--") else "-" if arg.startswith("-") else ""
        name, eq, value = arg[len(dashes) :].partition("=")
        if dashes and name in renames:
            new = renames[name]
            if name not in told:
                told.add(name)
                say(f"note: --{name} is deprecated; use --{new} (--{name} still works for now)")
            arg = f"{dashes}{new}{eq}{value}"
        out.append(arg)
    return out


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag=V`` or ``--flag V``, or None: ``--backend`` is read before Keras."""
    for i, arg in enumerate(args):
        if arg.startswith(f"--{flag}="):
            return arg.split("=", 1)[1]
        if arg == f"--{flag}" and i + 1 < len(args):
            return args[i + 1]
    return None


def without(argv: Sequence[str], names: frozenset[str] | set[str]) -> list[str]:
    """`argv` without the flags in `names` (``--name=v``, ``--name v``, ``--[no]name``)."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        flag = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if flag is not None and (flag in names or (flag[:2] == "no" and flag[2:] in names)):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            skip = "=" not in arg and flag in names and nxt is not None and not nxt.startswith("-")
            continue
        out.append(arg)
    return out


def with_value(argv: Sequence[str], flag: str, old: str, new: str) -> list[str]:
    """`argv` with ``--flag=old`` (any case) now saying `new`, in place."""
    out: list[str] = []
    for arg in argv:
        if arg.startswith(f"--{flag}=") and arg.split("=", 1)[1].strip().lower() == old:
            arg = f"--{flag}={new}"
        elif arg.strip().lower() == old and out and out[-1] == f"--{flag}":
            arg = new
        out.append(arg)
    return out


@dataclasses.dataclass(frozen=True)
class StartFlags:
    """What must act before Keras loads (backend; TensorFlow's log level, XLA cache): read by
    :func:`start_flags` or from a spec, acted on by :func:`apply_start_flags`; -1: no ``-v``."""

    backend: str | None = None
    device: str | None = None
    compile_cache: bool = False
    verbosity: int = -1


_LEVELS = {"debug": 1, "info": 0, "warning": -1, "error": -2, "fatal": -3}


def _start_flag(argv: Sequence[str], name: str) -> Any:
    """`name`'s value in `argv` as absl parses it; None when absent or unreadable (said later)."""
    values = flags.FlagValues()
    if name == "verbosity":
        flags.DEFINE_string(name, None, "", flag_values=values)
        flags.DEFINE_alias("v", name, flag_values=values)
    else:
        field = next(f for f in SETTINGS if flag_of(f.name) == name)
        getattr(flags, f"DEFINE_{setting_kind(field)}")(name, None, "", flag_values=values)
        for alias in (*field.metadata["aliases"], *field.metadata["deprecated"]):
            flags.DEFINE_alias(alias, name, flag_values=values)
    try:
        values(["start", *argv], known_only=True)
    except flags.Error:
        return None
    return values[name].value


def start_flags(argv: Sequence[str]) -> StartFlags:
    """The :class:`StartFlags` of a command line, parsed with the settings table's definitions."""
    verbosity = _start_flag(argv, "verbosity")
    if verbosity is not None:
        try:
            verbosity = int(verbosity)
        except ValueError:
            verbosity = _LEVELS.get(verbosity.strip().lower())
    return StartFlags(
        backend=_start_flag(argv, "backend"),
        device=_start_flag(argv, "device"),
        compile_cache=bool(_start_flag(argv, "compile_cache")),
        verbosity=-1 if verbosity is None else verbosity,
    )


def start_backend(start: StartFlags) -> str | None:
    """Selects ``--backend``; without it, ``--device=mps`` picks the backend for the Apple GPU."""
    if start.backend is not None:
        return backend.select(start.backend)
    named = os.environ.get("KERAS_BACKEND", "").strip().lower()
    if named and "keras" not in sys.modules and named not in backend.REGISTRY:
        raise backend.BackendError(
            f"KERAS_BACKEND={named}: use one of {', '.join(backend.REGISTRY)}, or give --backend"
        )
    device = (start.device or "").strip().lower().split(":")[0]
    if device in ("mps", "metal") and not os.environ.get("KERAS_BACKEND"):
        apple = backend.apple_gpu_backend()
        if apple is not None and "keras" not in sys.modules:
            return backend.select(apple)
    return None


def apply_start_flags(start: StartFlags) -> str | None:
    """Acts on `start` before a framework loads (backend, compile cache); the backend chosen."""
    chosen = start_backend(start)
    if start.compile_cache:
        backend.use_compile_cache()
    seam = backend.find()
    if seam is not None:
        seam.private_caches()  # after the compile cache, which names its own place
    return chosen
