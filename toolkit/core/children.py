"""The processes the toolkit starts, in one place: each bound to its parent's life, stopped
and waited for before what it uses is removed, and never writing into a directory its parent
has removed.

The parent side:

* :func:`spawn` (a ``subprocess.Popen``) tells the child who its parent is, and which of the
  parent's temporary directories (made with :func:`temporary_directory`) it uses;
* :func:`stop` ends a child (SIGTERM, then SIGKILL after a grace) and waits for it, and
  :func:`running` does so whatever ends the block (a result, an error, Ctrl-C); a program that
  exits with children still running stops them on its way out (an exit hook).

The child side, first thing in its program: :func:`bind_to_parent`. On Linux the kernel sends
it SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``, through ctypes), even of SIGKILL,
which no handler of the parent's sees; it then checks that its parent is still the process that
started it (one that died before the call would never signal). Everywhere (macOS has no
``PR_SET_PDEATHSIG``) a watchdog thread polls the parent's pid as well: once it changes, the
child is sent SIGTERM (where the kernel did not), and after a grace it removes the parent's
temporary directories it was told of and ends at once. A child that ends as an orphan removes
them too (an exit hook): a parent killed by SIGKILL leaves no temporary file behind.

``PR_SET_PDEATHSIG`` fires when the *thread* that started the child ends: a child started from
another thread than the main one is watched by the thread alone.

Pure standard library: the child calls it before anything heavy loads.
"""

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

__all__: list[str] = []  # the toolkit's own start-up and tear-down; nothing here is API

_PARENT = "TOOLKIT_PARENT_PID"  # the pid of the process that started this one
_DIRS = "TOOLKIT_PARENT_DIRS"  # its temporary directories this one uses (os.pathsep-joined)
_DEATHSIG = "TOOLKIT_PARENT_DEATHSIG"  # "1": started by the parent's main thread
_PREFIX = "toolkit-"  # the only directories a child removes: the toolkit's own temporary ones

STOP_GRACE_S = 10.0  # a stopped child's time to end on SIGTERM before SIGKILL
ORPHAN_GRACE_S = 10.0  # an orphan's time to end on SIGTERM before it ends at once
_POLL_S = 0.25  # how often the watchdog looks at the parent's pid

_dirs: list[str] = []  # the temporary directories live here: told to every child started
_children: weakref.WeakSet[subprocess.Popen[Any]] = weakref.WeakSet()
_bound: dict[str, Any] = {}  # the child side: its parent's pid and directories
_importing: list[str] = []  # the child side: the user's script it is importing, if any


# ---------------------------------------------------------------------------- the parent's side


@contextlib.contextmanager
def temporary_directory(prefix: str) -> Iterator[str]:
    """A temporary directory (:func:`files.scratch_dir`: one a parent killed before its child
    started left is swept), removed when the block ends, whose path every child started
    inside the block is told of: a child whose parent died removes it (the parent cannot).
    `prefix` starts with
    ``toolkit-`` (a child removes nothing else). Stop the block's children before it ends
    (:func:`running`): a child still writing there would make it again."""
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
    """While a child imports the script a ``build`` lives in (``python mytrain.py`` ran
    ``tune(build)``), :func:`spawn` refuses: a script whose calls are not under ``if
    __name__ == "__main__":`` would start children of its own in every child, as
    ``multiprocessing``'s spawn refuses such a script too."""
    _importing.append(path)
    try:
        yield
    finally:
        _importing.pop()


def refuse_while_importing() -> None:
    """RuntimeError while a child imports the user's script or module
    (:func:`importing_script`): what would start more processes there (``tune``, a spawn)
    is refused at once, with the fix, not after a search of its own."""
    if _importing:
        script = os.path.basename(_importing[-1])
        raise RuntimeError(
            f"{script} starts the toolkit's processes when a fresh process imports it: put "
            'its calls under if __name__ == "__main__":'
        )


def spawn(argv: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, **popen)`` for a child that calls :func:`bind_to_parent`: it
    is told this process's pid and the temporary directories live here. Stop it with
    :func:`stop` (a program that exits first stops it on its way out).

    Raises:
        RuntimeError: called while a child imports the user's script (:func:`importing_script`).
    """
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
    """Ends `proc` and waits for it: SIGTERM (it writes nothing more and cleans up), SIGKILL
    after `grace_s`. Also when interrupted while waiting: the child is killed first."""
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


# ---------------------------------------------------------------------------- the child's side


def bind_to_parent() -> None:
    """The child's first call, where :func:`spawn` started it (nothing otherwise): it ends
    when its parent does, whatever ended the parent (see the module's doc). The variables that
    say who the parent is are taken out of the environment: a process this one starts is not
    bound to this one's parent."""
    parent = os.environ.pop(_PARENT, None)
    dirs = os.environ.pop(_DIRS, "")
    deathsig = os.environ.pop(_DEATHSIG, "0") == "1"
    if not parent or not parent.isdigit():
        return
    _bind(int(parent), [d for d in dirs.split(os.pathsep) if _ours(d)], deathsig)


def end_with_parent() -> None:
    """:func:`bind_to_parent` for a process started by another library (Grain's worker
    processes, started by ``multiprocessing`` from one of Grain's threads): bound to the
    process that started it, by the watchdog alone."""
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
    """Whether the process that started this one (:func:`spawn`) still runs; True where none
    did. Once the parent is gone, the child is re-parented (to init or a subreaper); while
    it dies, its main thread is a zombie first (:func:`_dying`)."""
    return not _bound or (os.getppid() == _bound["parent"] and not _dying(_bound["parent"]))


def _dying(pid: int) -> bool:
    """Whether `pid`'s main thread has ended (Linux: ``Z`` or ``X`` in ``/proc/PID/stat``).
    A signal's default action ends a process's threads one by one, and the kernel sends
    ``PR_SET_PDEATHSIG`` when the thread that started the child ends: the child is still the
    dying parent's then (a script killed by SIGTERM during tune's fresh rounds left its
    ``spec.json`` behind: the child, told by the kernel, still saw its parent alive)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rpartition(")")[2].split()[:1]
    except OSError:  # no /proc (macOS: the watchdog sees the re-parenting), or gone
        return False
    return state in (["Z"], ["X"])


def write_result(path: str, data: str) -> bool:
    """Writes `data` to `path` atomically, into a directory that must still be there: a
    parent's temporary directory, removed once the parent stopped waiting, is never made
    again. Returns whether it was written."""
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
    """Whether `path` is a temporary directory of the toolkit's, of this user's, that a
    child may remove: directly in the temporary directory, named ``toolkit-...``, a real
    directory (not a link), owned by this user."""
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
    """The watchdog thread: once the parent is gone, SIGTERM (where the kernel sent none),
    time to end on it, then the end at once."""
    while parent_alive():
        time.sleep(_POLL_S)
    if not _bound.get("deathsig"):
        with contextlib.suppress(OSError):
            os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(ORPHAN_GRACE_S)
    _end_orphan()
