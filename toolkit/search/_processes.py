"""The search's fresh processes: what one must measure (a :class:`ChildSpec`: a contender's
run, or a backend's ``tune`` search), handed to the one private entry point ``python -m
toolkit._child`` as JSON, its figures read back as JSON; and each backend's device probe. Each
is bounded by a timeout and reports a failure as one line, never a traceback; a child's
progress lines are passed on as they come.

A fresh process per run: Keras fixes its backend when it is imported, and a finished run's
threads would eat into the next one's cores.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from toolkit.core import children, interrupts
from toolkit.core.files import atomic_write, parse_json, read_json
from toolkit.search.standings import Target

__all__: list[str] = []

CHILD = "toolkit._child"  # the entry point every child runs: python -m toolkit._child SPEC OUT
JOBS = ("figures", "tune", "anatomy", "devices")
KILLED = "killed by"  # the line follow() adds for a child a signal ended
# Signals from outside (the OOM killer's SIGKILL, a user's kill or Ctrl-C, a closed terminal):
# what the child would have measured is unknown. SIGSEGV, SIGABRT and the like are its own.
_INTERRUPTING = frozenset(int(s) for s in (signal.SIGKILL, *interrupts.SIGNALS))


@dataclasses.dataclass(frozen=True)
class ChildSpec:
    """What one fresh process does, whole, in typed values (JSON in, JSON out; never a
    command line): the job, the backend and device it runs on, and

    * ``figures``: one run of `steps` steps of `target` (``Workload.figures``), under
      `candidate` (a search's ``Candidate.to_dict()``; None: the target's own settings);
    * ``tune``: `target`'s ``tune`` search of `budget_s` seconds (``TuneResult.to_dict()``
      and the batch size);
    * ``anatomy``: `target`'s step taken apart, `steps` steps traced
      (``toolkit.anatomy``: ``Anatomy.to_dict()``);
    * ``devices``: the device kinds `backend` sees (no target).

    The target (``standings.Target``) carries the run's ``TrainConfig`` as its dict and a
    recipe's arguments: the child builds its config and task from them, without absl."""

    job: str
    backend: str
    device: str = "cpu"
    target: Target | None = None
    candidate: dict[str, Any] | None = None
    steps: int = 0
    budget_s: float = 0.0

    def __post_init__(self) -> None:
        if self.job not in JOBS:
            raise ValueError(f"child job {self.job!r}: one of {', '.join(JOBS)}")
        if (self.target is None) != (self.job == "devices"):
            raise ValueError(f"child job {self.job!r}: a target is for figures and tune alone")

    def config(self) -> dict[str, Any]:
        """The run's settings: the target's, on this backend and device."""
        own = self.target.config if self.target is not None else {}
        return {**own, "backend": self.backend, "device": self.device}

    def to_json(self) -> str:
        return json.dumps({
            **dataclasses.asdict(self),
            "target": None if self.target is None else self.target.to_dict(),
        })  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> ChildSpec:
        """Raises ValueError (a malformed spec)."""
        try:
            raw = parse_json(text)
            target = raw.pop("target")
            return cls(target=None if target is None else Target.from_dict(target), **raw)
        except (TypeError, KeyError, AttributeError, ValueError) as e:
            raise ValueError(f"a malformed child spec: {e}") from None


def probe_devices(backend: str, env: dict[str, str], timeout: float) -> list[str]:
    """The device kinds `backend` sees here, asked in a fresh process (``cpu`` first)."""
    found = run_child(ChildSpec("devices", backend), env, timeout)
    kinds = found.get("kinds") if isinstance(found, dict) else None
    if not isinstance(kinds, list):
        return ["cpu"]
    return ["cpu", *(str(k) for k in kinds if k != "cpu")]


def follow(
    argv: list[str],
    env: dict[str, str],
    timeout_s: float,
    progress: Callable[[str], Any],
    prefix: str = "",
) -> list[str] | None:
    """Runs `argv`, passing its progress lines (``[n | ...]``, ``tune: ...``) on to `progress`
    as they come, with `prefix`; returns its stderr's non-empty lines (the last one
    ``killed by SIGKILL`` when a signal ended it), or None when it ran past `timeout_s` (then
    it is killed)."""
    import threading

    killed = threading.Event()
    lines: list[str] = []
    # Stopped and waited for whatever ends this (Ctrl-C, SIGTERM, an error): never an orphan
    # that writes into the temporary directory its parent removes next.
    with children.running(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            for raw in proc.stderr:  # type: ignore[union-attr]
                line = raw.rstrip()
                if not line:
                    continue
                lines.append(line)
                if line.startswith(("[", "tune:")):
                    progress(prefix + line)
            proc.wait()
        finally:
            timer.cancel()
    if killed.is_set():
        return None
    if -proc.returncode in _INTERRUPTING:  # the OOM killer, a user's kill: not the contender's
        # own failure (a crash, SIGSEGV or SIGABRT, is: its last line says so)
        lines.append(f"{KILLED} {_signal_name(-proc.returncode)}")
    elif proc.returncode < 0:
        lines.append(f"error: crashed ({_signal_name(-proc.returncode)})")
    return lines


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
) -> dict[str, Any]:
    """Runs `spec` in a fresh ``python -m toolkit._child`` process: its JSON result, or
    ``{"error": ...}`` with the child's last error line; a child killed by a signal or past
    `timeout_s` also has ``"interrupted": True`` (what it would have measured is unknown, not
    failed: such a result is not cached). The child's progress
    lines (``[n | ...]``, ``tune: ...``) go to `progress` as they come, after `prefix`."""
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
        lines = follow(argv, child_env, timeout_s, progress or (lambda _line: None), prefix)
        if lines is None:
            return {"error": f"no result within {timeout_s:.0f} s", "interrupted": True}
        figures = read_json(out)
    if not figures:
        if lines and lines[-1].startswith(KILLED):
            return {"error": lines[-1], "interrupted": True}
        errors = [ln for ln in lines if ln.startswith("error:")]
        why = (errors or lines or ["no result"])[-1]
        return {"error": why.removeprefix("error: ").strip()}
    return figures
