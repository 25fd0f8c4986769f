"""Ctrl-C, SIGTERM, SIGHUP and SIGQUIT at any moment of a program's life: one exception, never lost.

A program (a recipe, a verb) calls :func:`install` first thing: SIGINT raises
``KeyboardInterrupt``; SIGTERM, SIGHUP and SIGQUIT raise :class:`TrainingInterrupted` naming it,
so each ends in one line and 128 + its number, not a kill by signal. Every signal is also
recorded, since Python drops exceptions raised in garbage-collector callbacks: :func:`check`,
where a program moves on, raises one that was lost.

While the frameworks load or a report is written the signal is held (:func:`held`): an
interrupted ``import tensorflow`` leaves modules half registered, and half a report is none.
It is raised when the block ends; a second signal raises at once. Pure Python."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["TrainingInterrupted"]  # the rest: the programs' start-up, not API

# The signals sent to stop a program, handled alike; SIGHUP and SIGQUIT are POSIX only.
SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)  # fmt: skip
_state: dict[str, Any] = {
    "received": None, "holding": 0, "early": False, "ending": None, "exited": False,
    "firm": None, "cuts": 0, "forked": False,
}  # fmt: skip
FIRM_CUT = 3  # the signals that cut a firm block (a report being written): an escape, not one


def _forked() -> None:
    _state["forked"] = True


# A forked process (a Pool's or PyDataset's worker) inherits the handlers but is not the
# program: there a signal takes its default action, else a worker that only records a pool's
# SIGTERM lives on and the pool's join hangs.
os.register_at_fork(after_in_child=_forked)


def forked() -> bool:
    """Whether this process was forked from the installing one and has not installed since."""
    return _state["forked"]


class TrainingInterrupted(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM (exit 143), SIGHUP (129) or SIGQUIT (131), named by
    ``signum``. Ctrl-C raises a plain ``KeyboardInterrupt`` (130)."""

    signum: int = int(signal.SIGTERM)


def handled() -> list[int]:
    """The :data:`SIGNALS` not ignored at start (``nohup``, background jobs), as Python does."""
    return [s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]


def interruption(signum: int) -> KeyboardInterrupt:
    """The exception `signum` raises (``KeyboardInterrupt`` for SIGINT, else
    :class:`TrainingInterrupted`), watched by :func:`_watch`."""
    if signum == signal.SIGINT:
        error: KeyboardInterrupt = KeyboardInterrupt()
    else:
        error = TrainingInterrupted(f"signal {signal.Signals(signum).name}")
        error.signum = int(signum)
    _watch(error)
    return error


def _watch(error: KeyboardInterrupt) -> None:
    """Keeps `error`, an interruption about to be raised, from being lost.

    * **Dropped** in a weakref callback, ``__del__`` or GC callback (``Exception ignored in``):
      ``sys.unraisablehook`` records the signal again and the next :func:`check` raises it
      (:func:`_dropped_here` cannot tell every such frame).
    * **Uncaught in a script** (a traceback and status 1): ``sys.excepthook`` ends it as the
      signal would have: one line naming the partial report, the exit hooks, 128 + its number.

    Both hooks are set at the first signal only, passing other exceptions to the ones they
    replaced."""
    error._toolkit_raised = True  # type: ignore[attr-defined]  # (kept on it: no reference here)
    if sys.unraisablehook is not _unraisable:
        _state["unraisablehook"] = sys.unraisablehook
        sys.unraisablehook = _unraisable
    if sys.excepthook is not _uncaught:
        _state["excepthook"] = sys.excepthook
        sys.excepthook = _uncaught


def _ours(error: BaseException | None) -> bool:
    """Whether `error` was raised here; marked on it, since holding it keeps its frames alive."""
    return error is not None and getattr(error, "_toolkit_raised", False) is True


def _unraisable(unraisable: Any) -> None:
    if _ours(unraisable.exc_value):
        note(signal_of(unraisable.exc_value))  # dropped: the next check() raises it
        return
    _state["unraisablehook"](unraisable)


def _uncaught(kind: type[BaseException], error: BaseException, tb: Any) -> None:
    if not _ours(error):
        _state["excepthook"](kind, error, tb)
        return
    run_dir = getattr(error, "toolkit_run_dir", None) or getattr(
        error.__cause__, "toolkit_run_dir", None
    )
    where = f"the partial report is in {run_dir}" if run_dir else "stopped before it finished"
    signum = signal_of(error)
    _state["ending"] = where
    _said(signum)
    _state["ending"] = ""  # said: a signal from here adds no second line
    # The exit hooks first (they remove a child's temporary directories), then the status.
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    _flush()
    os._exit(128 + signum)


def signal_of(error: BaseException) -> int:
    """The signal that interrupt `error` stands for (SIGINT for a plain KeyboardInterrupt)."""
    if isinstance(error, TrainingInterrupted):
        return int(getattr(error, "signum", signal.SIGTERM))
    return int(signal.SIGINT)


def note(signum: int) -> None:
    """Records `signum` as received, so :func:`check` raises it again if it is dropped."""
    _state["received"] = signum


def clear() -> None:
    """Forgets a recorded signal whose exception is being raised now (so a catch ends it)."""
    _state["received"] = None


def _dropped_here(frame: Any) -> bool:
    """Whether Python would drop an exception raised in `frame` (a GC callback, a ``__del__``)."""
    import gc

    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def handle(signum: int, frame: Any) -> None:
    """Records `signum` and raises it unless held or where Python would drop it (then
    :func:`check` does); in a forked worker, the signal's default action."""
    if _state["forked"]:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    again = _state["received"] is not None
    note(signum)
    if _state["firm"] is not None:  # a report being written: not cut by a second signal
        _state["cuts"] += 1
        if _state["cuts"] < FIRM_CUT:
            return
        _state["ending"] = f"{FIRM_CUT} signals while {_state['firm']}: it may be incomplete"
        _exit_now(signum)
    if _state["ending"] is not None and (again or _state["exited"]):
        _exit_now(signum)  # a second while ending (a hang in exit), or one after the last hook
    held = _state["holding"] and not again
    if held or _state["ending"] is not None or _dropped_here(frame):
        return  # raised when the held block ends, or by the next check()
    clear()
    raise interruption(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def install(early: bool = False) -> None:
    """The signals raise from here on (main thread only: elsewhere they cannot be handled).
    `early`: held until a later plain call (a program's first imports), which raises one."""
    if not _main_thread():
        return
    _state["forked"] = False  # a program of its own now, forked or not
    for signum in handled():
        signal.signal(signum, handle)
    if not _state.get("installed"):  # registered first: runs last, after every exit hook
        _state["installed"] = True
        # Only a first-registered (early) install may end the process (:func:`exiting`): hooks
        # after a late one (multiprocessing's, JAX's shutdown) must run.
        _state["last"] = getattr(atexit, "_ncallbacks", lambda: 1)() == 0
        atexit.register(_at_exit)
    if early and not _state["early"]:
        _state["early"] = True
        _state["holding"] += 1
    elif not early and _state["early"]:
        _state["early"] = False
        _state["holding"] -= 1
        check()


def ending(said: str = "it was ending: what it printed above stands") -> None:
    """The program is ending: a signal from here on is recorded, never raised, and ends the
    process after the last exit hook with one line ``interrupted by SIG...: `said```."""
    if _state["ending"] is None:
        _state["ending"] = said


def said() -> None:
    """The program has said it was interrupted: a later signal adds no second line."""
    clear()
    _state["ending"] = ""


def exiting(returned: Any = None) -> None:
    """The program ends with `returned` (or the ``SystemExit`` on its way out) as its status, at
    once after its last exit hook (:func:`_at_exit`): CPython restores default signal actions
    while finalizing and the frameworks' teardown runs on, so a signal there killed it silently.
    Called in the entry point's ``finally``; uncaught errors and late installs are left to
    Python."""
    error = sys.exc_info()[1]
    if not _state.get("last") or (error is not None and not isinstance(error, SystemExit)):
        _state["status"] = None  # not the process's last hook, or Python's own exit to make
        return
    code = error.code if isinstance(error, SystemExit) else returned
    _state["status"] = 0 if code is None else code if isinstance(code, int) else 1


def _at_exit() -> None:
    _state["exited"] = True
    signum = _state["received"]
    if _state["ending"] is None:
        return
    if signum is not None:
        _exit_now(signum)
    status = _state.get("status")
    if status is not None and _main_thread():  # the program's end: nothing after it to cut
        if "logging" in sys.modules:  # its exit hook, registered before this one, runs now
            with contextlib.suppress(Exception):
                sys.modules["logging"].shutdown()
        _flush()
        os._exit(status)


def _flush() -> None:
    """stdout and stderr flushed before the process ends at once (a reader gone: nothing)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _exit_now(signum: int) -> None:
    """Ends the process with 128 + `signum`, after one line unless already said."""
    _said(signum)
    os._exit(128 + signum)


def _said(signum: int) -> None:
    """The ``interrupted by SIG...: ...`` line, where the program has not said it already."""
    _flush()
    if _state["ending"]:
        with contextlib.suppress(Exception):
            name = signal.Signals(signum).name
            sys.stderr.write(f"interrupted by {name}: {_state['ending']}\n")
            sys.stderr.flush()


def starting(program: str) -> bool:
    """Whether Python is starting `program` itself (``python -m recipes.NAME``, ``python -m
    toolkit`` or ``keras-perf``; not ``toolkit._child``). ``sys.argv[0]`` is ``"-m"`` while
    the package imports; ``sys.orig_argv`` names the module."""
    first = sys.argv[0] if sys.argv else ""
    if program == "toolkit" and os.path.basename(first) == "keras-perf":
        return True
    original = list(getattr(sys, "orig_argv", ()))
    if first != "-m" or "-m" not in original[:-1]:
        return False
    target = original[original.index("-m") + 1]
    return target == program if program == "toolkit" else target.split(".")[0] == program


def check(**attrs: Any) -> None:
    """Raises a pending signal (dropped or held), with `attrs` set on it; else nothing."""
    signum, _state["received"] = _state["received"], None
    if signum is None:
        return
    error = interruption(signum)
    for name, value in attrs.items():
        setattr(error, name, value)
    raise error


@contextlib.contextmanager
def held(raise_after: bool = True, firm: str | None = None) -> Iterator[None]:
    """A block a first signal does not cut: it is raised when the block ends (with `raise_after`
    False, by the caller's :func:`check`); a second raises at once. Off the main thread, a plain
    block. `firm` (in words: ``"the report was being written"``): a second signal does not cut
    it either; the :data:`FIRM_CUT`-th ends the process with one line (a hung write is left)."""
    if not _main_thread():
        yield
        return
    old = {signum: signal.getsignal(signum) for signum in handled()}
    _state["holding"] += 1
    outer = _state["firm"]
    if firm is not None and outer is None:
        _state["firm"], _state["cuts"] = firm, 1 if _state["received"] is not None else 0
    for signum in old:
        signal.signal(signum, handle)
    try:
        yield
    finally:
        _state["holding"] -= 1
        if outer is None:
            _state["firm"], _state["cuts"] = None, 0
        for signum, handler in old.items():
            with contextlib.suppress(TypeError, ValueError):  # None: set outside Python
                signal.signal(signum, handler)
    if raise_after:
        check()
