"""The processes the toolkit starts: each bound to its parent's life, stopped and waited for
before what it uses is removed, never writing into a directory its parent removed.

Parent side: :func:`spawn` tells the child its parent's pid and temporary directories; :func:`stop`
ends one (SIGTERM, SIGKILL after a grace), :func:`running` whatever ends the block. Child side,
first: :func:`bind_to_parent`: ``PR_SET_PDEATHSIG`` on Linux (from the main thread), and a watchdog
polling the parent's pid (macOS has none); once it changes, the parent's directories are removed and
the child ends. Standard library only."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from toolkit.core import files

__all__: list[str] = []  # not API

_PARENT = "TOOLKIT_PARENT_PID"  # the pid of the process that started this one
_DIRS = "TOOLKIT_PARENT_DIRS"  # its temporary directories this one uses (os.pathsep-joined)
_DEATHSIG = "TOOLKIT_PARENT_DEATHSIG"  # "1": started by the parent's main thread
_PREFIX = "toolkit-"  # the only directories a child removes

STOP_GRACE_S = 10.0  # a stopped child's time to end on SIGTERM before SIGKILL
ORPHAN_GRACE_S = 10.0  # an orphan's time to end on SIGTERM before it ends at once
_POLL_S = 0.25  # how often the watchdog looks at the parent's pid

_dirs: list[str] = []  # the live temporary directories, told to every child started
_children: weakref.WeakSet[subprocess.Popen[Any]] = weakref.WeakSet()
_bound: dict[str, Any] = {}  # the child side: its parent's pid and directories
_importing: list[str] = []  # the child side: the user's script it is importing, if any


@contextlib.contextmanager
def temporary_directory(prefix: str) -> Iterator[str]:
    """A :func:`files.scratch_dir` removed when the block ends, told to every child started in
    it, so a child whose parent died removes it."""
    if not prefix.startswith(_PREFIX):
        raise ValueError(f"a child's temporary directory starts with {_PREFIX!r}: {prefix!r}")
    tmp = files.scratch_dir(prefix)
    _dirs.append(tmp)
    try:
        yield tmp
    finally:
        _dirs.remove(tmp)
        files.remove_scratch(tmp)


@contextlib.contextmanager
def importing_script(path: str) -> Iterator[None]:
    """While a child imports the user's script, :func:`spawn` refuses: calls not under ``if
    __name__ == "__main__":`` would start children in every child (as multiprocessing refuses)."""
    _importing.append(path)
    try:
        yield
    finally:
        _importing.pop()


def refuse_while_importing() -> None:
    """RuntimeError, with the fix, while a child imports the user's script."""
    if _importing:
        script = os.path.basename(_importing[-1])
        raise RuntimeError(
            f"{script} starts the toolkit's processes when a fresh process imports it: put "
            'its calls under if __name__ == "__main__":'
        )


def spawn(argv: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, **popen)`` for a child that calls :func:`bind_to_parent`; stop it
    with :func:`stop`.

    Raises:
        RuntimeError: called while a child imports the user's script."""
    refuse_while_importing()
    env = dict(popen.pop("env", None) or os.environ)
    env[_PARENT] = str(os.getpid())
    env[_DIRS] = os.pathsep.join(_dirs)
    env[_DEATHSIG] = "1" if threading.current_thread() is threading.main_thread() else "0"
    proc = subprocess.Popen(argv, env=env, **popen)
    if not _children:
        atexit.register(_stop_all)  # once per batch of children; stop() is idempotent
    _children.add(proc)
    return proc


def stop(proc: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> None:
    """Ends `proc` and waits: SIGTERM, SIGKILL after `grace_s` (or on an interrupt meanwhile)."""
    if proc.poll() is not None:
        return
    try:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)


@contextlib.contextmanager
def running(argv: list[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """:func:`spawn`, stopped and waited for (:func:`stop`) whatever ends the block."""
    proc = spawn(argv, **popen)
    try:
        yield proc
    finally:
        stop(proc)


def _stop_all() -> None:
    for proc in list(_children):
        stop(proc, grace_s=2.0)


def bind_to_parent() -> None:
    """The child's first call: it then ends with its :func:`spawn` parent (module docstring).
    The variables are popped so this child's own children are not bound to its parent."""
    parent = os.environ.pop(_PARENT, None)
    dirs = os.environ.pop(_DIRS, "")
    deathsig = os.environ.pop(_DEATHSIG, "0") == "1"
    if not parent or not parent.isdigit():
        return
    _bind(int(parent), [d for d in dirs.split(os.pathsep) if _ours(d)], deathsig)


def end_with_parent() -> None:
    """:func:`bind_to_parent` for another library's process (Grain's workers, started off the
    main thread): bound to its parent by the watchdog alone."""
    _bind(os.getppid(), [], deathsig=False)


def _bind(parent: int, dirs: list[str], deathsig: bool) -> None:
    if _bound:
        return
    _bound.update(parent=parent, dirs=dirs)
    _bound["deathsig"] = deathsig and _set_deathsig(signal.SIGTERM)
    if not parent_alive():  # it died before the kernel was asked to say so
        _end_orphan()
    atexit.register(_remove_if_orphaned)
    threading.Thread(target=_watch, name="toolkit-parent-watch", daemon=True).start()


def parent_alive() -> bool:
    """Whether the :func:`spawn` parent still runs (True where none): not re-parented, not
    dying (:func:`_dying`)."""
    return not _bound or (os.getppid() == _bound["parent"] and not _dying(_bound["parent"]))


def _dying(pid: int) -> bool:
    """Whether `pid`'s main thread has ended (Linux: ``Z`` or ``X`` in ``/proc/PID/stat``): the
    deathsig comes as that thread ends, while the child is still the dying parent's."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rpartition(")")[2].split()[:1]
    except OSError:  # no /proc (macOS: the watchdog sees the re-parenting), or gone
        return False
    return state in (["Z"], ["X"])


def write_result(path: str, data: str) -> bool:
    """Writes `data` atomically into a directory that must still exist (the parent removes it
    when it stops waiting); returns whether it was written."""
    if not parent_alive():
        return False
    try:
        files.atomic_write(path, data, make_dirs=False)
    except FileNotFoundError:  # the parent removed it: nobody waits for this result
        return False
    return True


def _set_deathsig(signum: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, signum)`` through ctypes (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(signum), 0, 0, 0) == 0  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


def _ours(path: str) -> bool:
    """Whether a child may remove `path`: a real ``toolkit-...`` directory of this user directly
    in the temporary directory."""
    temp = tempfile.gettempdir()
    if os.path.dirname(path) not in (temp, os.path.realpath(temp)):
        return False
    if not os.path.basename(path).startswith(_PREFIX):
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    import stat

    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def _remove_dirs() -> None:
    for path in _bound.get("dirs", ()):
        if _ours(path):
            shutil.rmtree(path, ignore_errors=True)


def _remove_if_orphaned() -> None:
    if not parent_alive():
        _remove_dirs()


def _end_orphan() -> None:
    """Ends this process at once (its parent is gone): the parent's directories removed."""
    _remove_dirs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(128 + signal.SIGTERM)


def _watch() -> None:
    """Once the parent is gone: SIGTERM (where the kernel sent none), a grace, the end."""
    while parent_alive():
        time.sleep(_POLL_S)
    if not _bound.get("deathsig"):
        with contextlib.suppress(OSError):
            os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(ORPHAN_GRACE_S)
    _end_orphan()
