"""A JSON field read back and checked, in one wording for every record.

A report or result file is anyone's file: edited by hand, cut by another tool, written by
another version. Each record's ``from_dict`` checks its own fields with these, so a value of
the wrong kind fails where it is read, in one line naming the field (``steps.p50_s``), never
later in a ``TypeError`` from a view. Each raises :class:`~toolkit.core.files.ReportError`
(a ValueError) saying ``field <name> is <value>, not <what it must be>``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.core.files import ReportError

MOST_PER_STEP_S = 86_400.0  # a day a step: past it, a figure was edited, not measured


def field_said(field: str, value: Any, what: str) -> str:
    """What is wrong with a field, in the words every reader uses (the reader says
    ``field <them>``)."""
    if value is None:
        return f"{field} is missing or null, not {what}"
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
    return f"{field} is {shown}, not {what}"


def bad(field: str, value: Any, what: str) -> ReportError:
    return ReportError(f"field {field_said(field, value, what)}")


def number(field: str, value: Any, optional: bool = False, counts: bool = False) -> Any:
    """`value` when it is a finite number >= 0 (an integer where it `counts`; None where
    `optional`)."""
    if value is None and optional:
        return None
    kinds = "an integer" if counts else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(field, value, f"{kinds}{' or null' if optional else ''}")
    if counts and not isinstance(value, int):
        raise bad(field, value, "an integer")
    if not math.isfinite(value) or value < 0:
        raise bad(field, value, f"{kinds} >= 0")
    return value


def per_step(field: str, value: Any) -> None:
    """Seconds per step no training step takes (1e300: compare then reads runs "as fast"
    under a 1e296× figure): refused, naming the field."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > MOST_PER_STEP_S:
        raise bad(field, value, f"seconds per step up to {MOST_PER_STEP_S:,.0f} (a day)")


def metric(field: str, value: Any) -> None:
    """A metric: any number (a loss may be NaN, an R² negative; null where it was not
    finite), as Keras logs it."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise bad(field, value, "a number")


def string(field: str, value: Any, optional: bool = False) -> Any:
    if not (isinstance(value, str) or (optional and value is None)):
        raise bad(field, value, "a string" + (" or null" if optional else ""))
    return value


def flag(field: str, value: Any) -> bool:
    """A true or false (false for null: a flag an older report lacks is off)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(field, value, "true or false")
    return value


def mapping(field: str, value: Any, optional: bool = True) -> Mapping[str, Any]:
    """An object (an empty one for null, where `optional`)."""
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise bad(field, value, "an object" + (" or null" if optional else ""))
    return value


def records(field: str, value: Any) -> Sequence[Mapping[str, Any]]:
    """A list of objects (an empty one for null)."""
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(r, Mapping) for r in value):
        raise bad(field, value, "a list of objects")
    return value


def items(field: str, value: Any) -> Sequence[Any]:
    """A list (an empty one for null)."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise bad(field, value, "a list")
    return value


def finite(value: Any) -> float | None:
    """A finite number, or None: the tolerant reading of a field no view depends on."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
