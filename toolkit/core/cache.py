"""The one keyed cache of measured answers: the tune winner, the backends table, the matmul peak.

A measurement is true only for what it measured: each answer is keyed by those facts, kept beside
the hash. Never a failure: a bad or unwritable cache is a miss or a skip; writes are locked."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from toolkit.core import machine
from toolkit.core.errors import one_line
from toolkit.core.files import read_json, update_json

__all__ = ["Cache"]

T = TypeVar("T")


class _Damaged(ValueError):
    """An entry that is no ``{"facts", "result", "stored"}`` object at all."""


def _result_of(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise _Damaged(f"it is {_shown(entry)}, not an object")
    if not isinstance(entry.get("result"), dict):
        raise _Damaged(f"field result is {_shown(entry.get('result'))}, not an object")
    return entry["result"]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


class Cache:
    """One file of keyed entries: ``key(facts)``, then ``get``, ``read`` or ``put`` by that key."""

    def __init__(self, file: str) -> None:
        self.file = file

    @property
    def path(self) -> str:
        # Read each time: $TOOLKIT_CACHE_DIR may change within a process (tests, notebooks).
        return os.path.join(machine.cache_dir(), self.file)

    @staticmethod
    def key(facts: Mapping[str, Any]) -> str:
        """The key of `facts`: the one hash every cache uses."""
        return machine.machine_key(facts)

    def get(self, key: str) -> dict[str, Any] | None:
        """The result stored under `key`, or None."""
        entry = read_json(self.path).get(key)
        result = entry.get("result") if isinstance(entry, dict) else None
        return result if isinstance(result, dict) else None

    def read(self, key: str, parse: Callable[[dict[str, Any]], T]) -> T | None:
        """The result under `key` as `parse` makes it, or None (a damaged entry said on stderr)."""
        entry = read_json(self.path).get(key)
        if entry is None:
            return None
        try:
            return parse(_result_of(entry))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            if isinstance(e, _Damaged):
                why = str(e)
            elif isinstance(e, KeyError) and e.args:
                why = f"field result.{e.args[0]} is missing"
            elif isinstance(e, ValueError) and str(e).startswith("field "):
                why = str(e).replace("field ", "field result.", 1)
            else:
                why = one_line(e)
            print(f"{self.path}: damaged entry {key} ({why}): treated as a miss", file=sys.stderr)
            return None

    def put(self, key: str, facts: Mapping[str, Any], result: Mapping[str, Any]) -> bool:
        """Stores `result` and its `facts` under `key` (atomically); False where unwritable."""
        entry = {"facts": dict(facts), "result": dict(result), "stored": time.time()}
        return update_json(self.path, key, entry)

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every well-formed entry (``{"facts", "result", "stored"}``), in file order."""
        for entry in read_json(self.path).values():
            if (
                isinstance(entry, dict)
                and isinstance(entry.get("facts"), dict)
                and isinstance(entry.get("result"), dict)
            ):
                yield entry
