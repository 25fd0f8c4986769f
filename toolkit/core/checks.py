"""The one validator of what a user gives, a flag or a Python argument, in the same words whatever
reads it: ``--batch_size must be an integer >= 1, got nan``, never a deep ``TypeError``."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = [
    "ConfigError",
]


class ConfigError(ValueError):
    """A setting that cannot work, in one line; a ValueError, so ``except ValueError`` sees it."""


def argument(owner: str, name: str) -> str:
    """A Python argument as a message names it: ``StepTimer: batch_size``."""
    return f"{owner}: {name}"


def check_number(
    flag: str,
    value: Any,
    *,
    integer: bool = False,
    least: float | None = None,
    most: float | None = None,
    above: float | None = None,
) -> None:
    """ConfigError unless `value` (None passes) is a finite non-bool number in range."""
    if value is None:
        return
    kind = "an integer" if integer else "a finite number"
    bounds = [f">= {_bound(least)}"] if least is not None else []
    bounds += [f"> {_bound(above)}"] if above is not None else []
    bounds += [f"<= {_bound(most)}"] if most is not None else []
    what = f"{kind} {' and '.join(bounds)}".strip()
    number = _is_number(value)
    if not number or (integer and not _is_integer(value)) or not math.isfinite(value):
        raise ConfigError(f"{flag} must be {what}, got {value!r}")
    if (least is not None and value < least) or (most is not None and value > most):
        raise ConfigError(f"{flag} must be {what}, got {value!r}")
    if above is not None and value <= above:
        raise ConfigError(f"{flag} must be {what}, got {value!r}")


def check_choice(flag: str, value: Any, allowed: Iterable[Any]) -> None:
    """ConfigError unless `value` is one of `allowed` (``==``, a bool never standing for 0 or 1)."""
    allowed = tuple(allowed)
    if any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed):
        return
    raise ConfigError(f"{flag} must be one of {', '.join(map(str, allowed))}, got {value!r}")


def _bound(value: float) -> str:
    """A bound as a user reads it: ``65535``, ``0.9`` (never ``4.29497e+09``)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _is_number(value: Any) -> bool:
    """A real number that is no bool, NumPy's scalars too (an ``np.int64`` from an array counts)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return False
    if isinstance(value, int | float):
        return True
    import numbers

    return isinstance(value, numbers.Real)


def _is_integer(value: Any) -> bool:
    import numbers

    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_batch_fits(owner: str, batch_size: int, count: int) -> None:
    """ConfigError when `count` examples hold no whole batch of `batch_size` and the partial
    batch is dropped: an epoch would train nothing, and ``fit`` would only warn."""
    if 0 <= count < batch_size:
        raise ConfigError(
            f"{argument(owner, 'batch_size')}={batch_size} is larger than the {count} "
            "examples, and drop_remainder=True leaves no batch: lower batch_size, or pass "
            f"drop_remainder=False (one batch of {count})"
        )
