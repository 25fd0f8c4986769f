"""Files that are never half-written, and values that are always valid JSON.

A leaf: standard library only. (Named ``files``, not ``io``, so that no module of the package
can shadow the standard library's ``io`` when a file is run as a script.)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ReportError",
    "atomic_write",
]


class ReportError(ValueError):
    """A report or result file that is missing, unreadable, or of an unknown schema."""


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> str:
    """Writes `data` to `path` so that readers see the old file or the new one, never a mix:
    a temporary file in the same directory, fsync, rename. Returns the path."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix="-" + os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; a report follows the umask
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object in `path`; ``{}`` when the file is missing, unreadable, not JSON or not
    an object (for caches, where a bad file is a miss, not an error)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def update_json(path: str | os.PathLike[str], key: str, value: Any) -> bool:
    """Sets `key` to `value` in the JSON object in `path` (a cache: a missing or bad file starts
    empty), written atomically; False when the file cannot be written (a read-only cache is
    skipped, not an error)."""
    data = read_json(path)
    data[key] = value
    try:
        atomic_write(path, json.dumps(data, indent=1))
    except OSError:
        return False
    return True


def jsonable(value: Any) -> Any:
    """Plain JSON types; non-finite floats become None (JSON has no NaN), NumPy scalars their
    Python value, dataclass-like objects with ``to_dict`` their dict, anything else its str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if hasattr(value, "to_dict"):
        return jsonable(value.to_dict())
    if hasattr(value, "item"):  # NumPy scalars
        return jsonable(value.item())
    return str(value)
