"""The search's fresh processes: what one must measure (a :class:`ChildSpec`: a contender's
run, or a backend's ``tune`` search), handed to the one private entry point ``python -m
toolkit._child`` as JSON, and what it answered as a :class:`ChildResult`; and each backend's
device probe. Each is bounded by a timeout and reports a failure as one line, never a
traceback.

While it runs, a child speaks to its parent in typed :class:`Message` s, one JSON object a
line on its standard output (its own prints, and anything else written there, go to its
standard error): its progress lines, passed on as they come, and the error that ended it. Its
standard error is read only where it sent no error: a crash's last words.

A fresh process per run: Keras fixes its backend when it is imported, and a finished run's
threads would eat into the next one's cores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from toolkit.core import children, interrupts
from toolkit.core._host_memory import MIB
from toolkit.core.files import atomic_write, parse_json, read_json
from toolkit.search.engine import Candidate
from toolkit.search.standings import Figures, Target

CHILD = "toolkit._child"  # the entry point every child runs: python -m toolkit._child SPEC OUT
JOBS = ("figures", "tune", "anatomy", "devices", "peak")
# Signals from outside (the OOM killer's SIGKILL, a user's kill or Ctrl-C, a closed terminal):
# what the child would have measured is unknown. SIGSEGV, SIGABRT and the like are its own.
_INTERRUPTING = frozenset(int(s) for s in (signal.SIGKILL, *interrupts.SIGNALS))
PROGRESS, ERROR = "progress", "error"  # the kinds of Message
HEARTBEAT_S = 10.0  # a child working unheard this long gets a "still running" line
CAP_EVERY_S = 0.05  # how often a capped child's resident memory is read (:class:`_HostCap`)


@dataclasses.dataclass(frozen=True)
class ChildSpec:
    """What one fresh process does, whole, in typed values (JSON in, JSON out; never a
    command line): the job, the backend and device it runs on, and

    * ``figures``: one run of `steps` steps of `target` (``Workload.figures``), under
      `candidate` (a search's ``Candidate``; None: the target's own settings);
    * ``tune``: `target`'s ``tune`` search of `budget_s` seconds (``TuneResult.to_dict()``
      and the batch size);
    * ``anatomy``: `target`'s step taken apart, `steps` steps traced
      (``toolkit.anatomy``: ``Anatomy.to_dict()``);
    * ``devices``: the device kinds `backend` sees (no target);
    * ``peak``: the peak memory of `steps` steps of `target` at its config's batch size
      (``workload.peak_at``: ``memory_fit.MemoryPeak.to_dict()``), for ``toolkit.fits``.

    The target (``standings.Target``) carries the run's ``TrainConfig`` as its dict and a
    recipe's arguments: the child builds its config and task from them, without absl."""

    job: str
    backend: str
    device: str = "cpu"
    target: Target | None = None
    candidate: Candidate | None = None
    steps: int = 0
    budget_s: float = 0.0

    def __post_init__(self) -> None:
        if self.job not in JOBS:
            raise ValueError(f"child job {self.job!r}: one of {', '.join(JOBS)}")
        if (self.target is None) != (self.job == "devices"):
            raise ValueError(f"child job {self.job!r}: a target is for figures and tune alone")

    def config(self) -> dict[str, Any]:
        """The run's settings, as ``TrainConfig.from_dict`` reads them: the target's, on this
        backend and device."""
        own = self.target.config if self.target is not None else {}
        return {**own, "backend": self.backend, "device": self.device}

    def to_json(self) -> str:
        return json.dumps({
            **dataclasses.asdict(self),
            "target": None if self.target is None else self.target.to_dict(),
            "candidate": None if self.candidate is None else self.candidate.to_dict(),
        })  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> ChildSpec:
        """Raises ValueError (a malformed spec)."""
        try:
            raw = parse_json(text)
            target, candidate = raw.pop("target"), raw.pop("candidate", None)
            return cls(
                target=None if target is None else Target.from_dict(target),
                candidate=None if candidate is None else Candidate.from_dict(candidate),
                **raw,
            )
        except (TypeError, KeyError, AttributeError, ValueError) as e:
            raise ValueError(f"a malformed child spec: {e}") from None


@dataclasses.dataclass(frozen=True)
class Message:
    """One thing a child tells its parent while it runs: a progress line (:data:`PROGRESS`),
    or the error that ends it (:data:`ERROR`), in one line of words."""

    kind: str
    text: str

    def to_json(self) -> str:
        return json.dumps({"message": self.kind, "text": self.text})

    @classmethod
    def from_json(cls, line: str) -> Message | None:
        """The message a line holds; None for any other line (what else reached the
        channel: the parent passes on messages only)."""
        try:
            raw = json.loads(line)
        except ValueError:
            return None
        if not isinstance(raw, dict) or raw.get("message") not in (PROGRESS, ERROR):
            return None
        return cls(raw["message"], " ".join(str(raw.get("text", "")).split()))


@dataclasses.dataclass(frozen=True)
class ChildResult:
    """What one fresh process answered: its job's JSON answer (`answer`, read back by the
    caller into its record), or `error`, one line why there is none; `interrupted` where a
    signal from outside or the timeout ended it (what it would have measured is unknown, not
    failed: such a result is not cached); `signal`, the name of the signal that ended it
    (``SIGKILL``: what the kernel's out-of-memory killer sends; None: none did)."""

    answer: Any = None
    error: str | None = None
    interrupted: bool = False
    signal: str | None = dataclasses.field(default=None, compare=False)  # beside the error
    # The timeout stopped it after this many seconds (None: it ended by itself or a signal).
    overran_s: float | None = dataclasses.field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None and self.answer is not None

    def figures(self) -> Figures | None:
        """A ``figures`` job's answer (None: it failed, or answered no figures)."""
        return Figures.from_dict(self.answer) if self.ok else None

    def field(self, name: str) -> Any:
        """One field of the answer (None where there is none)."""
        return self.answer.get(name) if isinstance(self.answer, dict) else None


def probe_devices(backend: str, env: dict[str, str], timeout: float) -> list[str]:
    """The device kinds `backend` sees here, asked in a fresh process (``cpu`` first)."""
    kinds = run_child(ChildSpec("devices", backend), env, timeout).field("kinds")
    if not isinstance(kinds, list):
        return ["cpu"]
    return ["cpu", *(str(k) for k in kinds if k != "cpu")]


@dataclasses.dataclass(frozen=True)
class Ended:
    """How a child ended, as :func:`follow` saw it: the error it sent (None: none), the last
    lines of its standard error (a crash's words), its exit status (None: the timeout killed
    it)."""

    error: str | None
    stderr: tuple[str, ...]
    returncode: int | None
    over_mb: tuple[float, float] | None = None  # (its resident MiB, the cap) where stopped so

    def result(self, answer: Any, timeout_s: float) -> ChildResult:
        """The :class:`ChildResult` of a child that wrote `answer` (None: nothing) and ended
        so."""
        if self.over_mb is not None:
            from toolkit.core.stats import format_mb

            rss, cap = self.over_mb
            said = (f"out of memory: its resident memory reached {format_mb(rss)}, past the "
                    f"{format_mb(cap)} this host could spare, and it was stopped")  # fmt: skip
            return ChildResult(error=said)
        if self.returncode is None:
            said = f"stopped after {timeout_s:.0f} s, past the time it had"
            return ChildResult(error=said, interrupted=True, overran_s=timeout_s)
        if answer:
            return ChildResult(answer)
        if -self.returncode in _INTERRUPTING:  # the OOM killer, a user's kill: not the
            # contender's own failure (a crash, SIGSEGV or SIGABRT, is)
            name = _signal_name(-self.returncode)
            return ChildResult(error=f"killed by {name}", interrupted=True, signal=name)
        if self.error:
            return ChildResult(error=self.error)
        if self.returncode < 0:
            name = _signal_name(-self.returncode)
            return ChildResult(error=f"crashed ({name})", signal=name)
        return ChildResult(error=(self.stderr or ("no result",))[-1])


class _Heartbeat:
    """The parent's word while a child works unheard: where :data:`HEARTBEAT_S` pass without
    a progress line, `still` (the seconds since the child started) says it is still running,
    so a slow build in a fresh process is never a silent minute. Lines go out one at a time
    (the child's, passed on, and these)."""

    def __init__(self, progress: Callable[[str], Any], still: Callable[[float], str] | None):
        self.progress, self.still = progress, still
        self.lock, self.done = threading.Lock(), threading.Event()
        self.began = self.last = time.monotonic()
        self.thread = threading.Thread(target=self._beat, daemon=True, name="child-heartbeat")

    def say(self, line: str) -> None:
        with self.lock:
            self.last = time.monotonic()
            self.progress(line)

    def _beat(self) -> None:
        while not self.done.wait(1.0):
            now = time.monotonic()
            if self.still is not None and now - self.last >= HEARTBEAT_S:
                with contextlib.suppress(Exception):  # a caller's progress that fails: quiet
                    self.say(self.still(now - self.began))

    def __enter__(self) -> _Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


def follow(
    argv: list[str],
    env: dict[str, str],
    timeout_s: float,
    progress: Callable[[str], Any],
    prefix: str = "",
    still: Callable[[float], str] | None = None,
    host_cap_mb: float | None = None,
) -> Ended:
    """Runs `argv`, passing the progress :class:`Message` s it sends on to `progress` as they
    come, with `prefix`, until it ends or `timeout_s` passes (then it is killed); `still`, a
    line at least every :data:`HEARTBEAT_S` while it sends none (:class:`_Heartbeat`).
    `host_cap_mb`: where its resident memory (its own processes' together) passes this, it
    is killed (:class:`_HostCap`), before it can take the memory the host runs on."""
    killed = threading.Event()
    error: list[str] = []
    with contextlib.ExitStack() as stack:
        err = stack.enter_context(_stderr_file())
        # Stopped and waited for whatever ends this (Ctrl-C, SIGTERM, an error): never an
        # orphan that writes into the temporary directory its parent removes next.
        proc = stack.enter_context(children.running(
            argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env
        ))  # fmt: skip
        capped = stack.enter_context(_HostCap(proc, host_cap_mb))
        # Entered last, left first: no "still running" line while a stopped child ends.
        heart = stack.enter_context(_Heartbeat(progress, still))

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            for message in _messages(proc.stdout):  # type: ignore[arg-type]
                if message.kind == PROGRESS:
                    heart.say(prefix + message.text)
                else:
                    error.append(message.text)
            proc.wait()
        finally:
            timer.cancel()
        err.seek(0)
        said = tuple(line.rstrip() for line in err.read().splitlines()[-20:] if line.strip())
    code = None if killed.is_set() else proc.returncode
    return Ended(error[-1] if error else None, said, code, capped.over_mb)


class _HostCap:
    """A watch on a child's resident memory, its own processes' together (psutil), every
    :data:`CAP_EVERY_S`: past `cap_mb`, the child is killed and :attr:`over_mb` says at how
    much. A fit at a batch too large for the host's RAM otherwise takes it all: with no swap,
    the kernel thrashes for minutes before its out-of-memory killer acts (a 24 GiB machine
    stalled ten, under a 22 GiB child). None: no watch."""

    def __init__(self, proc: subprocess.Popen[str], cap_mb: float | None) -> None:
        self.proc, self.cap_mb = proc, cap_mb
        self.over_mb: tuple[float, float] | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True, name="child-host-cap")

    def __enter__(self) -> _HostCap:
        if self.cap_mb is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()

    def _watch(self) -> None:
        import psutil

        cap = self.cap_mb
        try:
            top = psutil.Process(self.proc.pid)
        except psutil.Error:
            return
        if cap is None:
            return
        while not self.done.wait(CAP_EVERY_S):
            try:
                rss = sum(p.memory_info().rss for p in (top, *top.children(recursive=True)))
            except psutil.Error:  # it ended, or a process of it did, while it was read
                continue
            if rss / MIB > cap:
                self.over_mb = (rss / MIB, cap)
                self.proc.kill()
                return


def _messages(lines: Iterable[str]) -> Iterable[Message]:
    for line in lines:
        message = Message.from_json(line)
        if message is not None:
            yield message


@contextlib.contextmanager
def _stderr_file() -> Any:
    """A temporary file for a child's standard error (read once it ended; a pipe nobody
    reads while the child writes would fill and stop it)."""
    import tempfile

    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as f:
        yield f


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run_child(
    spec: ChildSpec,
    env: dict[str, str],
    timeout_s: float,
    progress: Callable[[str], Any] | None = None,
    prefix: str = "",
    still: Callable[[float], str] | None = None,
    host_cap_mb: float | None = None,
) -> ChildResult:
    """Runs `spec` in a fresh ``python -m toolkit._child`` process and returns its
    :class:`ChildResult`: its JSON answer, or the error it sent (else its last line of
    standard error); a child killed by a signal or past `timeout_s` is ``interrupted``, one
    whose resident memory passed `host_cap_mb` out of memory. Its progress messages go to
    `progress` as they come, after `prefix`, and `still`'s line while it sends none
    (:func:`follow`)."""
    child_env = {**env, "KERAS_BACKEND": spec.backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    # The user's module imports in the child as it does here.
    if spec.target is not None and spec.target.model_fn:
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        child_env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).strip(
            os.pathsep
        )
    with children.temporary_directory("toolkit-child-") as tmp:  # removed by an orphan too
        spec_path, out = os.path.join(tmp, "spec.json"), os.path.join(tmp, "out.json")
        atomic_write(spec_path, spec.to_json())
        argv = [sys.executable, "-m", CHILD, spec_path, out]
        said = progress or (lambda _line: None)
        ended = follow(argv, child_env, timeout_s, said, prefix, still, host_cap_mb)
        answer = read_json(out) if ended.returncode is not None else None
    return ended.result(answer, timeout_s)
