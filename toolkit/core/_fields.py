"""A record's JSON: its dataclass fields, declared once, written, read back and type-checked.

A report is anyone's file: a wrong value fails where read, as a ReportError naming the field
(``steps.p50_s``), never later as a ``TypeError``; a field an older file lacks takes its default."""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from toolkit.core.files import ReportError

MOST_PER_STEP_S = 86_400.0  # a day a step: past it, a figure was edited, not measured


def field_said(field: str, value: Any, what: str) -> str:
    """What is wrong with a field, in the words every reader uses."""
    if value is None:
        return f"{field} is missing or null, not {what}"
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
    return f"{field} is {shown}, not {what}"


def bad(field: str, value: Any, what: str) -> ReportError:
    return ReportError(f"field {field_said(field, value, what)}")


def number(field: str, value: Any, optional: bool = False, counts: bool = False) -> Any:
    """`value` when a finite number >= 0 (an integer where it `counts`; None where `optional`)."""
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
    """Seconds per step no training step takes (1e300): refused, naming the field."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > MOST_PER_STEP_S:
        raise bad(field, value, f"seconds per step up to {MOST_PER_STEP_S:,.0f} (a day)")


def metric(field: str, value: Any) -> None:
    """A metric: any number (a loss may be NaN; null where not finite), as Keras logs it."""
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


def signed(value: Any, field: str) -> Any:
    """A finite number of either sign (a change, an R², an offset) or null: a field's `read`."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ):
        raise bad(field, value, "a number or null")
    return value


def omit_none(value: Any) -> bool:
    return value is None


def omit_empty(value: Any) -> bool:
    return not value


def field(
    default: Any = dataclasses.MISSING,
    *,
    missing: Any = dataclasses.MISSING,
    key: str | None = None,
    write: Callable[[Any], Any] | None = None,
    read: Callable[[Any, str], Any] | None = None,
    omit: Callable[[Any], bool] | None = None,
    json: bool = True,
    **kwargs: Any,
) -> Any:
    """A dataclass field with its JSON shape: `missing` (read where absent), `key` (JSON name),
    `write`/`read` (JSON not the plain value), `omit` (left out where true), `json` False (none)."""
    meta = {"missing": missing, "key": key, "write": write, "read": read, "omit": omit}
    meta["json"] = json
    return dataclasses.field(default=default, metadata=meta, **kwargs)


def plain(value: Any) -> Any:
    """`value` as JSON holds it: records by ``to_dict``, sequences as lists, enums by value."""
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


class Record:
    """A dataclass whose JSON is its fields. `WHERE`: its path in the file, prefixing field names
    in errors; `EXTRA`: derived properties written beside the fields, never read back."""

    WHERE: ClassVar[str] = ""
    EXTRA: ClassVar[tuple[str, ...]] = ()
    LENIENT: ClassVar[bool] = False  # a view's record: one it cannot read is None, no error

    def to_dict(self) -> dict[str, object]:
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            meta, value = f.metadata, getattr(self, f.name)
            if not meta.get("json", True) or (meta.get("omit") and meta["omit"](value)):
                continue
            out[meta.get("key") or f.name] = (meta.get("write") or plain)(value)
        return {**out, **{name: plain(getattr(self, name)) for name in self.EXTRA}}

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> Any:
        """The record `d` holds, fields checked (`where`: its path), missing or null defaulted.

        Raises:
            ReportError: a field missing (without a default) or not of its kind, named."""
        where = cls.WHERE if where is None else where
        try:
            return cls._read(d, where)
        except ReportError:
            if cls.LENIENT:
                return None
            raise

    @classmethod
    def _read(cls, d: Any, where: str) -> Any:
        m = mapping(where or "record", d, optional=False)
        hints, values = _hints(cls), {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            meta = f.metadata
            missing = meta.get("missing", dataclasses.MISSING)
            if not f.init:
                continue
            if not meta.get("json", True):  # not in the JSON: its `missing`, if it has one
                if missing is not dataclasses.MISSING:
                    values[f.name] = missing
                continue
            key = meta.get("key") or f.name
            at, value = f"{where}.{key}" if where else key, m.get(key)
            if value is None and missing is not dataclasses.MISSING:
                value = missing
            if meta.get("read"):
                values[f.name] = meta["read"](value, at)
            elif value is not None or not _has_default(f):
                if key not in m and missing is dataclasses.MISSING and _takes_none(hints[f.name]):
                    raise ReportError(f"field {at} is missing")  # null would read as None
                values[f.name] = read(value, hints[f.name], at)
        return cls(**values)


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _takes_none(hint: Any) -> bool:
    """Whether null would read as a value of `hint`, so an absent field is said as missing."""
    collection = typing.get_origin(hint) in (list, tuple, Sequence, dict, Mapping)
    return collection or type(None) in typing.get_args(hint) or hint in (Any, object)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def read(value: Any, hint: Any, at: str) -> Any:
    """`value` checked against `hint` (`at`: its path); records by ``from_dict``, enums by value."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = tuple(a for a in args if a is not type(None))
        optional = len(rest) < len(args)
        if value is None and optional:
            return None
        if set(rest) <= {int, float}:
            return number(at, value, optional, counts=rest == (int,))
        if rest == (str,):
            return string(at, value, optional)
        return read(value, rest[0], at) if len(rest) == 1 else value
    if hint is bool:
        return flag(at, value)
    if hint in (int, float):
        return number(at, value, counts=hint is int)
    if hint is str:
        return string(at, value)
    if origin is tuple and args[-1:] != (Ellipsis,):  # a fixed row: (first, last)
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise bad(at, value, f"a list of {len(args)}")
        pairs = zip(value, args, strict=True)
        return tuple(read(v, a, f"{at}[{i}]") for i, (v, a) in enumerate(pairs))
    if origin in (tuple, list, Sequence):
        kind = args[0] if args else Any
        got = [read(v, kind, f"{at}[{i}]") for i, v in enumerate(items(at, value))]
        return got if origin is list else tuple(got)
    if origin in (dict, Mapping):
        kind = args[1] if args else Any
        return {str(k): read(v, kind, f"{at}.{k}") for k, v in mapping(at, value).items()}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise bad(at, value, "one of " + ", ".join(str(e.value) for e in hint)) from None
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_dict(value, at)
    if dataclasses.is_dataclass(hint):  # a programming error, found by the first test
        raise TypeError(f"{at}: {hint.__name__} is no Record: give its field a read")
    return value
