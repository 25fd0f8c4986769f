"""What each optional extra brings, and the one line that says so when it is missing.

A feature never vanishes silently; the install named by distribution works from PyPI or a wheel."""

from __future__ import annotations

import importlib.util
import sys

DISTRIBUTION = "keras-perf-toolkit"

# extra -> the modules features look for (a backend's extra: toolkit.backend.REGISTRY)
EXTRAS: dict[str, tuple[str, ...]] = {
    "report": ("matplotlib",),
    "profile": ("tensorboard", "xprof"),
}

_said: set[str] = set()


def install_hint(extra: str) -> str:
    """``pip install 'keras-perf-toolkit[extra]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing(extra: str, needs: tuple[str, ...] | None = None) -> list[str]:
    """The modules of `extra` (or just those a feature `needs`) that cannot be imported here."""
    gone = []
    for name in needs or EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken install, or a module set to None
            found = False
        if not found:
            gone.append(name)
    return gone


def why_missing(extra: str, needs: tuple[str, ...] | None = None) -> str | None:
    """``"matplotlib is not installed (pip install ...)"``, or None where `extra` is installed."""
    gone = missing(extra, needs)
    if not gone:
        return None
    verb = "is" if len(gone) == 1 else "are"
    return f"{' and '.join(gone)} {verb} not installed ({install_hint(extra)})"


def note_missing(extra: str, what: str, needs: tuple[str, ...] | None = None) -> bool:
    """Says ``"<what>: <why_missing>"`` on stderr once per process and `what`; whether missing."""
    why = why_missing(extra, needs)
    if why is None:
        return False
    if what not in _said:
        _said.add(what)
        print(f"{what}: {why}", file=sys.stderr, flush=True)
    return True
