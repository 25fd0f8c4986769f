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
import tempfile
from collections.abc import Callable
from typing import Any

from toolkit.core.files import atomic_write, read_json
from toolkit.runner.flags import without
from toolkit.search.standings import Target

__all__: list[str] = []

CHILD = "toolkit._child"  # the entry point every child runs: python -m toolkit._child SPEC OUT
JOBS = ("figures", "tune")
KILLED = "killed by"  # the line follow() adds for a child a signal ended
# Signals from outside (the OOM killer's SIGKILL, a user's kill or Ctrl-C, a closed terminal):
# what the child would have measured is unknown. SIGSEGV, SIGABRT and the like are its own.
_INTERRUPTING = frozenset(
    int(s) for s in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
)


@dataclasses.dataclass(frozen=True)
class ChildSpec:
    """What one fresh process measures, whole: the target (a recipe with its flags, or
    ``module:function``), the backend and device it runs on, the contender's settings, and the
    job: ``figures`` (one run of `steps` steps: ``Workload.figures``) or ``tune`` (a search of
    `budget_s` seconds: ``TuneResult.to_dict()`` and the batch size). `extra` holds the run's
    own recipe flags (``--init_weights``: the same start for every contender)."""

    job: str
    target: Target
    backend: str
    device: str = "cpu"
    settings: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    steps: int = 0
    budget_s: float = 0.0

    def __post_init__(self) -> None:
        if self.job not in JOBS:
            raise ValueError(f"child job {self.job!r}: one of {', '.join(JOBS)}")

    def recipe_flags(self) -> list[str]:
        """The flags the child's run parses as a recipe's (absl's, at the child's edge): the
        target's, with this backend and device in place of the target's own, then the
        settings and the run's own."""
        own = without(self.target.flags, {"device", "backend", "tune_budget"})
        return [
            f"--backend={self.backend}", f"--device={self.device}", *own, *self.settings,
            *self.extra,
        ]  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ChildSpec:
        """Raises ValueError (a malformed spec)."""
        try:
            raw = json.loads(text)
            target = raw.pop("target")
            return cls(
                target=Target(target["recipe"], target["model_fn"], tuple(target["flags"])),
                **{**raw, "settings": tuple(raw["settings"]), "extra": tuple(raw["extra"])},
            )
        except (TypeError, KeyError, AttributeError, ValueError) as e:
            raise ValueError(f"a malformed child spec: {e}") from None


def probe_devices(backend: str, env: dict[str, str], timeout: float) -> list[str]:
    """The device kinds `backend` sees here, asked in a fresh process (``cpu`` first)."""
    code = (
        "import json, sys\n"
        "from toolkit import devices\n"
        f"print(json.dumps(sorted({{d.kind for d in devices.detect({backend!r})}})))\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
            env={**env, "KERAS_BACKEND": backend}, check=True,
        )  # fmt: skip
        kinds = json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return ["cpu"]
    return ["cpu", *(k for k in kinds if k != "cpu")]


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

    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    lines: list[str] = []
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
    if spec.target.model_fn:  # the user's module imports in the child as it does here
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        child_env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).strip(
            os.pathsep
        )
    with tempfile.TemporaryDirectory(prefix="toolkit-child-") as tmp:
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
