"""Options and helpers several verbs share that are not about a target: ``--backend``, the
backend in use, comma-separated lists."""

from __future__ import annotations

import argparse

__all__: list[str] = []  # the command line's own; nothing here is API


def add_backend(p: argparse.ArgumentParser, what: str | None = None) -> None:
    """``--backend NAME``, one of the seam's backends."""
    from toolkit import backend

    p.add_argument(
        "--backend",
        choices=backend.names(),
        help=what or "Keras backend (default: KERAS_BACKEND, else tensorflow)",
    )


def backend_name() -> str:
    """The Keras backend this process runs (after ``app.start`` chose it)."""
    from toolkit import backend

    return backend.name()


def split(value: str | None) -> list[str]:
    """``"a, b,,c"`` as ``["a", "b", "c"]``; nothing as ``[]``."""
    return [v.strip() for v in (value or "").split(",") if v.strip()]
