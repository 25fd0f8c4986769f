"""The backends chooser's fresh processes: each contender's run (``python -m toolkit backends
--child``), each backend's device probe, and a child whose progress lines are passed on as they
come. Each is bounded by a timeout and reports a failure as one line, never a traceback.

A fresh process per run: Keras fixes its backend when it is imported, and a finished run's
threads would eat into the next one's cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from toolkit.core.files import read_json
from toolkit.search.standings import Contender, Target

__all__: list[str] = []


def without(argv: Sequence[str], names: frozenset[str] | set[str]) -> list[str]:
    """`argv` without the flags in `names` (``--name=v``, ``--name v``, ``--[no]name``)."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        flag = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if flag is not None and (flag in names or (flag[:2] == "no" and flag[2:] in names)):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            skip = "=" not in arg and flag in names and nxt is not None and not nxt.startswith("-")
            continue
        out.append(arg)
    return out


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
    as they come, with `prefix`; returns its stderr's non-empty lines, or None when it ran
    past `timeout_s` (then it is killed)."""
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
    return None if killed.is_set() else lines


def child_run(
    target: Target,
    contender: Contender,
    steps: int,
    extra: list[str],
    env: dict[str, str],
    timeout_s: float,
) -> dict[str, Any]:
    """One run in a fresh ``python -m toolkit backends --child`` process: its figures, or
    ``{"error": ...}`` with the child's last error line."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    flags = without(target.flags, {"device", "backend"})
    argv = [
        sys.executable, "-m", "toolkit", "backends", "--child", out, "--steps", str(steps),
        *(["--recipe", target.recipe] if target.recipe else ["--model_fn", str(target.model_fn)]),
        f"--backend={contender.backend}", f"--device={contender.device}", *flags,
        *contender.settings, *extra,
    ]  # fmt: skip
    child_env = {**env, "KERAS_BACKEND": contender.backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    if target.model_fn:  # the user's module imports in the child as it does here
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        child_env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).strip(
            os.pathsep
        )
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=child_env, check=False
        )
        figures = read_json(out)
        if done.returncode != 0 or not figures:
            lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("error:")]
            why = (errors or lines or [f"exit status {done.returncode}"])[-1]
            return {"error": why.removeprefix("error: ").strip()}
        return figures
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout_s:.0f} s"}
    finally:
        with contextlib.suppress(OSError):
            os.remove(out)
