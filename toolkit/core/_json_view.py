"""A record that also reads as its JSON: for callers written against the dict a room used to
hand over (``report.ledger["parts"]``), while the room's own code reads the record's fields.

The record defines ``_json`` (its JSON, once: a ``functools.cached_property``); this mixin
makes it a read-only Mapping of that.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__: list[str] = []  # the rooms' own mixin (JsonView)


class JsonView(Mapping[str, Any]):
    """Read-only Mapping access to a record's ``_json``."""

    _json: dict[str, object]

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def __len__(self) -> int:
        return len(self._json)
