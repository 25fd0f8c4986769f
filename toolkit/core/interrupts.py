"""Ctrl-C, SIGTERM, SIGHUP and SIGQUIT at any moment of a program's life: one exception,
never lost.

A program here (a recipe, a verb) calls :func:`install` first thing: SIGINT raises
``KeyboardInterrupt``, and SIGTERM, SIGHUP (a closed terminal or ssh session) and SIGQUIT
(Ctrl-\\) :class:`TrainingInterrupted` (a ``KeyboardInterrupt``) naming it, so each ends in
the app's one line and 128 + its number (130, 143, 129, 131), not in a kill by signal. Every
signal is also recorded, because Python drops an exception raised inside a garbage-collector
callback (``Exception ignored in: <function _xla_gc_callback>``): :func:`check`, at the points
where a program moves on (before training, before it says it is done), raises one that was
lost.

While the frameworks load or a report is written the signal is held (:func:`held`): an
exception in the middle of ``import tensorflow`` leaves modules half registered, and a report
cut in half is no report. It is raised when the block ends; a second signal raises at once.

Pure Python: the handler and what it raises import nothing.
"""

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

# Every signal that ends a program by default and that a user or the system sends to stop
# it: each is handled alike (the partial report, one line, 128 + its number). SIGHUP and
# SIGQUIT are POSIX only.
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


# A process forked from this one (a multiprocessing Pool's worker, a PyDataset's with
# use_multiprocessing) inherits the handlers but is not the program: there a signal takes its
# default action. A worker that ran the handler only recorded a pool's SIGTERM during a fit
# and lived on, and the pool's join waited on it for good (``diagnose`` on a raising
# PyDataset hung); outside a fit it printed a traceback from the worker's exit.
os.register_at_fork(after_in_child=_forked)


def forked() -> bool:
    """Whether this process was forked from the one that installed the handlers (and has not
    installed them itself since): a signal here takes its default action (:func:`handle`)."""
    return _state["forked"]


class TrainingInterrupted(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM (exit 143, as a shell
    reports a process ended by it), SIGHUP (129) or SIGQUIT (131); its ``signum`` says
    which. Ctrl-C raises a plain ``KeyboardInterrupt`` (130)."""

    signum: int = int(signal.SIGTERM)


def handled() -> list[int]:
    """The :data:`SIGNALS` this program handles: those not ignored. A program started with
    one ignored (``nohup`` ignores SIGHUP; a shell, SIGINT for a job in the background) keeps
    it ignored, as Python itself does for SIGINT."""
    return [s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]


def interruption(signum: int) -> KeyboardInterrupt:
    """The exception that `signum` raises: ``KeyboardInterrupt`` for SIGINT, else
    :class:`TrainingInterrupted` naming the signal (its ``signum`` set); watched (see
    :func:`_watch`), so that it is neither dropped nor ends a script in a traceback."""
    if signum == signal.SIGINT:
        error: KeyboardInterrupt = KeyboardInterrupt()
    else:
        error = TrainingInterrupted(f"signal {signal.Signals(signum).name}")
        error.signum = int(signum)
    _watch(error)
    return error


def _watch(error: KeyboardInterrupt) -> None:
    """Keeps `error`, an interruption about to be raised, from two ends that lose it.

    * **Dropped.** Python drops an exception raised inside a weakref callback, a ``__del__``
      or a garbage-collector callback (``Exception ignored in``); a SIGTERM during
      ``tune(build)``'s search was lost so, and the script ran on and exited 0. Not every
      such place can be told from its frames (:func:`_dropped_here` knows two), so
      ``sys.unraisablehook`` hears each drop: the signal is recorded again, silently, and the
      next :func:`check` raises it.
    * **Uncaught in a script.** A script that let it through ended in the toolkit's stack and
      status 1 (Python gives 130 to a plain ``KeyboardInterrupt`` only). ``sys.excepthook``
      ends it as the signal's default action would have, which the toolkit's handler took
      over: one line saying where the partial report is, the exit hooks (a child's
      temporary directories removed), and 128 + the signal's number.

    Both hooks are set once, the first time a signal is raised (never before: a program that
    is never interrupted keeps Python's), each passing every other exception to the hook it
    replaced."""
    error._toolkit_raised = True  # type: ignore[attr-defined]  # (kept on it: no reference here)
    if sys.unraisablehook is not _unraisable:
        _state["unraisablehook"] = sys.unraisablehook
        sys.unraisablehook = _unraisable
    if sys.excepthook is not _uncaught:
        _state["excepthook"] = sys.excepthook
        sys.excepthook = _uncaught


def _ours(error: BaseException | None) -> bool:
    """Whether `error` is an interruption raised here (:func:`_watch`). Marked on the
    exception, not held here: a held one would keep its frames, and a model in them, alive."""
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
    # The exit hooks Python would run, first (a child's orphaned temporary directories
    # removed: an exit at once left them), then the signal's status.
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    _flush()
    os._exit(128 + signum)


def signal_of(error: BaseException) -> int:
    """The signal that `error` (an interrupt) stands for: SIGINT for a plain
    ``KeyboardInterrupt``, the one a :class:`TrainingInterrupted` names."""
    if isinstance(error, TrainingInterrupted):
        return int(getattr(error, "signum", signal.SIGTERM))
    return int(signal.SIGINT)


def note(signum: int) -> None:
    """Records `signum` as received (a handler of its own that also raises it calls this, so
    that :func:`check` raises it again if it was dropped)."""
    _state["received"] = signum


def clear() -> None:
    """Forgets a recorded signal: its exception is being raised now (a caller that catches
    it, as a notebook or a test does, goes on without it coming back)."""
    _state["received"] = None


def _dropped_here(frame: Any) -> bool:
    """Whether an exception raised in `frame` would be dropped by Python (printed as
    ``Exception ignored in``): inside a garbage-collector callback or a ``__del__``."""
    import gc

    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def handle(signum: int, frame: Any) -> None:
    """The handler: records `signum`, then raises it unless it is held or Python would drop
    it where it came (:func:`check` raises it then). In a forked worker, the signal's
    default action (:func:`forked`)."""
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
    """SIGINT, SIGTERM, SIGHUP and SIGQUIT raise (see the module's doc) from here on; in the
    main thread only (elsewhere signals cannot be handled), first thing in a program, where it
    can say what an interrupt did. `early`: held until that call (a program's first imports,
    outside any ``try``), which then raises one that came."""
    if not _main_thread():
        return
    _state["forked"] = False  # a program of its own now, forked or not
    for signum in handled():
        signal.signal(signum, handle)
    if not _state.get("installed"):  # registered first: runs last, after every exit hook
        _state["installed"] = True
        # Whether nothing was registered before it (a program's early install): only then
        # may it end the process (:func:`exiting`); a script's late one leaves hooks after it
        # (multiprocessing's, JAX's distributed shutdown) that must run.
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
    """The program is ending (its run over, its report written, the frameworks' exit hooks
    still to run): a signal from here on is recorded, never raised, and ends the process with
    130 or 143 after the last exit hook, with one line ``interrupted by SIG...: `said```."""
    if _state["ending"] is None:
        _state["ending"] = said


def said() -> None:
    """The program has said it was interrupted (its one line, its status 130 or 143): a
    signal from here to its end adds no second line."""
    clear()
    _state["ending"] = ""


def exiting(returned: Any = None) -> None:
    """The program ends with `returned` as its status, or the ``SystemExit`` on its way out
    (called in its entry point's ``finally``, after :func:`ending`): after its last exit hook
    it then ends at once with that status (:func:`_at_exit`). CPython gives the signals back
    their default action as it finalizes, and the frameworks' teardown runs on for ~0.1 s
    after: a signal then killed the program with no ``interrupted by`` line (5 of 5 tries in
    a run's last 0.1 s). An uncaught error is left to Python (it prints the traceback), and
    so is a process whose handler was not its first exit hook (a script that installed it
    late: the hooks registered before it still run)."""
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
    """Ends the process with 128 + `signum`, after one line (none where the program has said
    it was interrupted already)."""
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
    """Whether Python is starting `program` itself: ``python -m recipes.NAME`` for
    ``recipes``, ``python -m toolkit`` or ``keras-perf`` for ``toolkit`` (not another
    module under it, such as the search's ``toolkit._child``). ``python -m`` sets
    ``sys.argv[0]`` to ``"-m"`` while it imports the module's package; ``sys.orig_argv``
    names the module."""
    first = sys.argv[0] if sys.argv else ""
    if program == "toolkit" and os.path.basename(first) == "keras-perf":
        return True
    original = list(getattr(sys, "orig_argv", ()))
    if first != "-m" or "-m" not in original[:-1]:
        return False
    target = original[original.index("-m") + 1]
    return target == program if program == "toolkit" else target.split(".")[0] == program


def check(**attrs: Any) -> None:
    """Raises a signal that was received but whose exception did not reach the program's end
    (dropped in a garbage-collector callback, or held), with `attrs` set on it (where the
    report is); nothing when none is pending."""
    signum, _state["received"] = _state["received"], None
    if signum is None:
        return
    error = interruption(signum)
    for name, value in attrs.items():
        setattr(error, name, value)
    raise error


@contextlib.contextmanager
def held(raise_after: bool = True, firm: str | None = None) -> Iterator[None]:
    """A block that a first signal does not cut: it is raised when the block ends (unless the
    block raised; with `raise_after` False, by the caller's :func:`check`); a second signal
    raises at once. Outside the main thread, a plain block.

    `firm` (what the block does, in words: ``"the report was being written"``): a second
    signal does not cut it either (a report cut by an impatient second Ctrl-C was lost, and the
    program said nothing of it); the :data:`FIRM_CUT`-th ends the process at once, with one
    line saying so (a write that hangs can still be left)."""
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
