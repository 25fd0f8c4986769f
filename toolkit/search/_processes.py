"""The search's fresh processes: a :class:`ChildSpec` handed as JSON to ``python -m
toolkit._child``, its answer a :class:`ChildResult`, bounded by a timeout, a failure one line.
A child speaks in :class:`Message` s, one JSON object a line on stdout (its prints go to stderr,
read only for a crash's last words). A fresh process per run: Keras fixes its backend on import,
and a finished run's threads would eat into the next one's cores."""

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

CHILD = "toolkit._child"  # python -m toolkit._child SPEC OUT
JOBS = ("figures", "tune", "anatomy", "devices", "peak")
# Signals from outside (OOM killer, kill, Ctrl-C, hang-up): what the child would have measured
# is unknown. SIGSEGV, SIGABRT and the like are its own failure.
_INTERRUPTING = frozenset(int(s) for s in (signal.SIGKILL, *interrupts.SIGNALS))
PROGRESS, ERROR = "progress", "error"  # the kinds of Message
HEARTBEAT_S = 10.0  # a child unheard this long gets a "still running" line
CAP_EVERY_S = 0.05  # how often a capped child's resident memory is read (:class:`_HostCap`)


@dataclasses.dataclass(frozen=True)
class ChildSpec:
    """What one fresh process does, as JSON (never a command line): a job of :data:`JOBS` on a
    backend and device (``devices`` alone takes no `target`). The target carries the
    ``TrainConfig`` as a dict: the child builds its config and task without absl."""

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
        """The target's settings on this backend and device, for ``TrainConfig.from_dict``."""
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
    """A child's line to its parent: progress (:data:`PROGRESS`) or its final :data:`ERROR`."""

    kind: str
    text: str

    def to_json(self) -> str:
        return json.dumps({"message": self.kind, "text": self.text})

    @classmethod
    def from_json(cls, line: str) -> Message | None:
        """The message a line holds; None for any other line."""
        try:
            raw = json.loads(line)
        except ValueError:
            return None
        if not isinstance(raw, dict) or raw.get("message") not in (PROGRESS, ERROR):
            return None
        return cls(raw["message"], " ".join(str(raw.get("text", "")).split()))


@dataclasses.dataclass(frozen=True)
class ChildResult:
    """A fresh process's JSON `answer`, or `error`; `interrupted` where an outside signal or the
    timeout ended it (unknown, not failed: never cached)."""

    answer: Any = None
    error: str | None = None
    interrupted: bool = False
    signal: str | None = dataclasses.field(default=None, compare=False)  # beside the error
    # The timeout stopped it after this many seconds (None: it ended otherwise).
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
    """How a child ended (:func:`follow`): the error it sent, its stderr's last lines, its exit
    status (None: the timeout killed it)."""

    error: str | None
    stderr: tuple[str, ...]
    returncode: int | None
    over_mb: tuple[float, float] | None = None  # (its resident MiB, the cap) where stopped so

    def result(self, answer: Any, timeout_s: float) -> ChildResult:
        """The :class:`ChildResult` of a child that wrote `answer` (None: nothing) and ended so."""
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
        if -self.returncode in _INTERRUPTING:  # not the contender's own failure
            name = _signal_name(-self.returncode)
            return ChildResult(error=f"killed by {name}", interrupted=True, signal=name)
        if self.error:
            return ChildResult(error=self.error)
        if self.returncode < 0:
            name = _signal_name(-self.returncode)
            return ChildResult(error=f"crashed ({name})", signal=name)
        return ChildResult(error=(self.stderr or ("no result",))[-1])


class _Heartbeat:
    """After :data:`HEARTBEAT_S` without a line, `still(seconds)` says the child still runs."""

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
                with contextlib.suppress(Exception):  # a caller's failing progress: quiet
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
    """Runs `argv`, its progress to `progress`, killed past `timeout_s` or `host_cap_mb`."""
    killed = threading.Event()
    error: list[str] = []
    with contextlib.ExitStack() as stack:
        err = stack.enter_context(_stderr_file())
        # Stopped and waited for whatever ends this: never an orphan writing into the
        # temporary directory its parent removes next.
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
    """Kills a child whose resident memory passes `cap_mb` (:attr:`over_mb`): without swap, the
    kernel thrashes for minutes before its OOM killer acts."""

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
            except psutil.Error:  # a process ended while read
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
    """A temporary file for a child's stderr: an unread pipe would fill and stop the child."""
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
    """Runs `spec` in a fresh ``python -m toolkit._child`` and returns its :class:`ChildResult`
    (see :func:`follow` for the other arguments)."""
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
