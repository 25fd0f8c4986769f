"""Options and helpers several verbs share that are not about a target: ``--backend``, the
backend in use, comma-separated lists."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence


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


def check_device(spec: str, flag: str = "--device") -> None:
    """A device `spec` a run can ask for (``auto``, ``cpu``, ``gpu:1``, ``metal``...), read as
    ``parse_device_spec`` will, before any framework loads; ValueError naming `flag` otherwise."""
    from toolkit.core._device_types import DeviceError, parse_device_spec

    try:
        parse_device_spec(spec)
    except DeviceError as e:
        raise ValueError(f"{flag}: {e}") from None


def check_out(
    path: str | None,
    flag: str = "--out",
    instead: str = "or leave --out out",
    writes: Sequence[str] = (),
) -> None:
    """A verb's output directory (`path`; None: its default), checked as ``--report_dir`` is,
    before measuring, not after. `writes`: its files; one already there (a result): ValueError."""
    from toolkit.runner.task import check_report_dir

    check_report_dir(path, flag, instead)
    held = [name for name in writes if path and os.path.exists(os.path.join(path, name))]
    if held:
        raise ValueError(
            f"{flag}={path} already holds a result ({', '.join(held)}): choose another "
            f"directory, {instead}"
        )
