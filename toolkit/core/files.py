"""Files that are never half-written, and values that are always valid JSON.

A leaf: standard library plus ``filelock``. Named ``files``, not ``io``, so it never shadows
the standard library's ``io`` when a file is run as a script."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Callable, Mapping
from typing import IO, Any

from toolkit.core.errors import one_line

__all__ = [
    "ReportError",
    "atomic_write",
]


# How long a cache write waits for another's: writes hold it for milliseconds, so a longer hold
# is a stopped process, and a cache is never worth a stall (the entry is skipped).
LOCK_TIMEOUT_S = 5.0


class ReportError(ValueError):
    """A report or result file that is missing, unreadable, or of an unknown schema."""


def atomic_write(path: str | os.PathLike[str], data: str | bytes, make_dirs: bool = True) -> str:
    """Writes `data` to `path` so readers see the old file or the new one, never a mix (temporary
    file, fsync, rename); returns the path. `make_dirs` False: a missing directory is
    FileNotFoundError (a parent that stopped waiting removed it), never made again.

    ``os.open(..., 0o666)`` lets the kernel apply the umask, unlike ``mkstemp`` (0600) plus a
    chmod, which needs the umask read by setting it process-wide."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if make_dirs:
        os.makedirs(directory, exist_ok=True)
    fd, tmp = _new_file(directory, os.path.basename(path))
    try:
        raw = data if isinstance(data, bytes) else data.encode("utf-8")
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def _new_file(directory: str, name: str) -> tuple[int, str]:
    """A new file ``.tmp-<random>-<name>`` in `directory`, created exclusively, no symlinks."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = os.path.join(directory, f".tmp-{secrets.token_hex(6)}-{name}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {name} in {directory}")


def private_dir(name: str) -> str | None:
    """A temporary directory `name` only this user can use, shared by this user's processes;
    None where there is none.

    A predictable name in a shared ``/tmp`` may be another user's trap, so it is used only if
    :func:`is_private`; else the caller does without it. A sticky ``/tmp`` stops later swaps."""
    path = os.path.join(tempfile.gettempdir(), name)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    return path if is_private(path) else None


_HOLDER = ".held"  # the lock file inside a scratch directory, held while its process lives
_SCRATCH_SWEEP_AGE_S = 60.0  # a scratch directory younger than this is never swept
_held: dict[str, Any] = {}  # this process's scratch directories: their held locks


def scratch_dir(prefix: str) -> str:
    """A new private temporary directory (``mkdtemp``) this process holds, by a ``filelock`` on a
    file inside, until :func:`remove_scratch`.

    No exit hook runs on SIGKILL or the OOM killer, so each new one first removes this user's
    older (over a minute) ones of `prefix` whose lock is free: the kernel frees a dead holder's
    lock in any pid namespace, where a pid could name another container's process."""
    import filelock

    _sweep(prefix)
    path = tempfile.mkdtemp(prefix=prefix)
    lock = filelock.FileLock(os.path.join(path, _HOLDER), timeout=0)
    lock.acquire()
    _held[path] = lock
    return path


def remove_scratch(path: str) -> None:
    """Removes a :func:`scratch_dir` (gone already: nothing), and lets its lock go."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    lock = _held.pop(path, None)
    if lock is not None:
        lock.release()


def _sweep(prefix: str) -> None:
    import shutil
    import time

    import filelock

    temp = tempfile.gettempdir()
    try:
        names = [name for name in os.listdir(temp) if name.startswith(prefix)]
    except OSError:
        return
    for name in names:
        path = os.path.join(temp, name)
        holder = os.path.join(path, _HOLDER)
        try:
            st = os.lstat(path)
            if not (is_private(path) and os.path.isfile(holder)):
                continue
        except OSError:
            continue
        if time.time() - st.st_mtime < _SCRATCH_SWEEP_AGE_S or path in _held:
            continue
        try:
            with filelock.FileLock(holder, timeout=0):
                shutil.rmtree(path, ignore_errors=True)
        except OSError:  # filelock.Timeout: its process still runs
            continue


def is_private(path: str) -> bool:
    """Whether `path` is a real directory (no symlink) of this user, not group/other-writable."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    ours = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return stat.S_ISDIR(st.st_mode) and ours and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def parse_json(source: str | bytes | IO[str], finite: bool = False) -> Any:
    """``json.loads`` of a text or ``json.load`` of a file, nesting too deep for Python a
    ValueError like any bad JSON (not a RecursionError). With `finite`, a number not finite as a
    float (``NaN``, ``1e999``, a huge int) is a ValueError, not an OverflowError far from here."""
    hooks: dict[str, Callable[[str], Any]] = {}
    if finite:
        hooks = {"parse_float": _finite_float, "parse_int": _finite_int,
                 "parse_constant": _no_constant}  # fmt: skip
    try:
        if isinstance(source, str | bytes | bytearray):
            return json.loads(source, **hooks)
        return json.load(source, **hooks)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is not finite as a float (too large)")
    return value


def _finite_int(text: str) -> int:
    value = int(text)
    try:
        float(value)
    except OverflowError:
        shown = text if len(text) <= 40 else text[:39] + "…"
        raise ValueError(f"number {shown} is too large for a float") from None
    return value


def _no_constant(text: str) -> float:
    raise ValueError(f"number {text} is not finite: a report holds finite numbers or null")


def open_regular(path: str | os.PathLike[str]) -> IO[str]:
    """`path` opened as UTF-8 text if it is a regular file; else an OSError saying what it is (a
    FIFO blocks, ``/dev/zero`` never ends). Checked by ``stat`` before opening, then by ``fstat``
    after an ``O_NONBLOCK`` open, so a swap in between is refused too."""
    _regular(os.stat(path).st_mode)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        _regular(os.fstat(fd).st_mode)
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        return open(fd, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def _regular(mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))  # fmt: skip
    kind = next((what for test, what in kinds if test(mode)), "not a file")
    raise OSError(f"not a regular file ({kind})")


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object in `path`; ``{}`` when it is missing or bad in any way (a cache miss)."""
    try:
        with open_regular(path) as f:
            data = parse_json(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def update_json(path: str | os.PathLike[str], key: str, value: Any) -> bool:
    """Sets `key` to `value` in the JSON cache `path` (a bad file starts empty), atomically;
    False when it cannot be written or locked within :data:`LOCK_TIMEOUT_S` (skipped, no error).

    The read-modify-write holds ``<path>.lock`` so concurrent writers keep each other's entries."""
    import filelock  # only a cache write needs it

    path = os.fspath(path)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with filelock.FileLock(path + ".lock", timeout=LOCK_TIMEOUT_S):
            data = read_json(path)
            data[key] = value
            atomic_write(path, json.dumps(data, indent=1))
    except OSError:  # filelock.Timeout is one too
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


def read_checked(path: str, from_dict: Callable[[Any], Any], views: Callable[[Any], object]) -> Any:
    """The report in JSON file `path`, read with `from_dict` (which checks its values) and shown
    once with `views`; any failure is one ReportError naming the file.

    Numbers must be finite, only a regular file is read, and every string is made printable
    (:func:`visible`) first: a report may come from anyone, and escape sequences in it would
    act on the terminal the verbs print to."""
    try:
        with open_regular(path) as f:
            data = parse_json(f, finite=True)
    except FileNotFoundError:
        raise ReportError(f"no report at {path!r}: give a report.json or a run directory") from None
    except (OSError, ValueError) as e:  # JSON, UTF-8, nested too deep, not finite, a FIFO
        raise ReportError(f"cannot read report {path!r}: {e}") from e
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ReportError(f"{path!r} is not a run report: it holds a JSON {kind}")
    data = visible(data)
    try:
        report = from_dict(data)
        check_views(report, views)
        return report
    except ReportError as e:  # name the file: the caller may have given several
        fix = ": fix that field, or run again for a new report" if "field " in str(e) else ""
        raise ReportError(f"{path!r}: {e}{fix}") from None
    except (TypeError, KeyError, ValueError, AttributeError) as e:
        raise ReportError(f"report {path!r} is malformed: {one_line(e)}") from e


# C0 and C1 control characters and DEL, less newline and tab: what a terminal acts on.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def visible(data: Any) -> Any:
    """`data` (parsed JSON) with control characters in strings and keys, bar newline and tab,
    escaped (ESC as ``\\x1b``). Iterative, so the deepest JSON never hits the recursion limit."""
    root = [data]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        value = parent[key]
        if isinstance(value, str):
            parent[key] = _escape(value)
        elif isinstance(value, list):
            stack.extend((value, i) for i in range(len(value)))
        elif isinstance(value, dict):
            if any(_CONTROL.search(k) for k in value):
                value = {_escape(k): v for k, v in value.items()}
                parent[key] = value
            stack.extend((value, k) for k in value)
    return root[0]


def inside_run(run_dir: str, name: str, field: str, report: str) -> str:
    """The real path of `name` (named in report `report`'s `field`), relative to `run_dir` and
    resolved: a report may come from anyone, so what it names must not lead out of its run.

    Raises:
        ReportError: `name` is empty or leads outside `run_dir`."""
    root = os.path.realpath(run_dir)
    sound = bool(name) and "\0" not in name
    real = os.path.realpath(os.path.join(root, name)) if sound else root
    if real == root or os.path.commonpath([root, real]) != root:
        plain = os.path.normpath(os.path.join(root, name)) if sound else real
        link = f" (a symbolic link to {real})" if plain != real else ""
        raise ReportError(
            f"{report!r}: field {field} names {name!r}{link}, outside its run directory "
            f"{root}: a report's files are read only from inside its own run directory"
        )
    return real


def check_views(report: Any, views: Callable[[Any], object]) -> None:
    """Raises ReportError naming the top-level field without which `views(report)` renders."""
    try:
        views(report)
        return
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
        error = e
    for f in dataclasses.fields(report):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            continue
        empty = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        try:
            views(dataclasses.replace(report, **{f.name: empty}))
        except (TypeError, ValueError, KeyError, AttributeError, IndexError):
            continue
        raise ReportError(
            f"field {f.name} holds a value this toolkit cannot show ({one_line(error)})"
        )
    raise ReportError(f"a field holds a value this toolkit cannot show ({one_line(error)})")
