"""The one keyed cache of measured answers: the tune winner, the backends table, the matmul peak.

A measurement is only true for what it measured (a model, its input, a backend, this machine and
its software), so each answer is stored under the key of exactly those facts
(``toolkit.core.machine.machine_key``) in one JSON file per kind of answer under
``$TOOLKIT_CACHE_DIR``. An entry is ``{"facts", "result", "stored"}``: the facts stay readable
beside the hash, so a person (or ``--backend=auto``) can see what a result was measured for.

A cache is a convenience, never a failure: a missing, unreadable or corrupt file is a miss, and
a read-only cache directory is skipped when writing. A leaf: standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

from toolkit.core import machine
from toolkit.core.files import read_json, update_json

__all__ = ["Cache"]


class Cache:
    """One file of keyed entries under :func:`toolkit.core.machine.cache_dir`.

    ``cache = Cache("tune.json")``, ``key = cache.key(facts)``, then ``cache.get(key)`` or,
    after measuring, ``cache.put(key, facts, result)``.
    """

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

    def put(self, key: str, facts: Mapping[str, Any], result: Mapping[str, Any]) -> bool:
        """Stores `result` under `key` with the `facts` it was measured for (atomically);
        False when the cache cannot be written."""
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
