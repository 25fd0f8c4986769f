"""The private entry point of the search's fresh processes: ``python -m toolkit._child SPEC
OUT``. SPEC is a JSON file of a ``toolkit.search._processes.ChildSpec`` (the job: one run's
figures, one backend's ``tune`` search, its step's anatomy, or the devices a backend sees;
the backend, device, target with its config, and candidate, all typed values); the result is
written to OUT as JSON,
atomically. No command line is rebuilt: the config is ``TrainConfig.from_dict`` and a recipe's
task its ``build_task(**params)``. It has no options of its own: what to measure is the
spec, which only the search writes. An error ends it with one ``error:`` line on stderr (the
parent reports that line) and status 1, or 2 for a spec it cannot read.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__: list[str] = []  # the search's own; nothing here is API


def _figures_or_tune(spec: Any) -> dict[str, Any]:
    """The spec's job on its target: the config and the task (or your model and data) made
    from its typed values, absl left alone."""
    from toolkit.core.files import jsonable
    from toolkit.runner.config import TrainConfig
    from toolkit.search.engine import Candidate
    from toolkit.search.workload import workload
    from toolkit.verbs._target import made

    config = TrainConfig.from_dict(spec.config()).validate()
    target, data = made(spec.target)
    if spec.job == "figures":
        candidate = Candidate.from_dict(spec.candidate) if spec.candidate else None
        with workload(target, data, config) as work:
            return jsonable(
                work.figures(spec.steps, count_flops=config.count_flops, candidate=candidate)
            )
    if spec.job == "anatomy":
        from toolkit.search.anatomy import anatomy

        return anatomy(target, data, steps=spec.steps or 10, config=config).to_dict()
    from toolkit.search.tune import tune

    result = tune(target, data, config=config, budget_s=spec.budget_s)
    return {**result.to_dict(), "batch_size": result.batch_size}


def _devices(spec: Any) -> dict[str, Any]:
    """The device kinds the spec's backend sees here."""
    from toolkit import devices

    return {"kinds": sorted({d.kind for d in devices.detect(spec.backend)})}


def _job(spec: Any) -> dict[str, Any]:
    """Starts as a program here starts (the backend before Keras loads), then the job."""
    if spec.job == "devices":
        return _devices(spec)
    from toolkit import _argv, app
    from toolkit.devices import runtime

    cache = bool((spec.target.config or {}).get("compile_cache"))
    app.begin(_argv.StartFlags(spec.backend, spec.device, compile_cache=cache))
    if spec.job == "tune":  # as the tune verb: TensorFlow first, its C++ lines held back
        runtime.load_tensorflow()
    return _figures_or_tune(spec)


def main(argv: Sequence[str]) -> int:
    """The child's run: bound to its parent first (it ends with it, however the parent
    ended), SIGINT, SIGTERM, SIGHUP and SIGQUIT unwinding it (its own temporary files
    removed), then ending it as the signal would (the parent reads ``killed by SIG...``)."""
    from toolkit.core import children, interrupts

    children.bind_to_parent()
    interrupts.install()
    try:
        return _main(argv)
    except KeyboardInterrupt as e:
        _die_of(interrupts.signal_of(e))
        raise


def _die_of(signum: int) -> None:
    """Ends this process by `signum` itself (its default action), as an unhandled signal
    would have: its parent reads ``-signum`` (interrupted, not failed). The exit hooks run
    first: the frameworks' temporary files (TensorFlow's autograph modules) are removed."""
    import atexit
    import os
    import signal

    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default is not to end: as a shell would report it


def _main(argv: Sequence[str]) -> int:
    from toolkit.search._processes import ChildSpec

    if len(argv) != 3:
        print("error: python -m toolkit._child SPEC OUT is the search's own", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            spec = ChildSpec.from_json(f.read())
    except (OSError, ValueError) as e:
        print(f"error: {argv[1]}: {e}", file=sys.stderr)
        return 2
    from toolkit.app import UserCodeError
    from toolkit.backend import BackendError
    from toolkit.core import children
    from toolkit.report import ReportError

    try:
        result = _job(spec)
    except (BackendError, ReportError, UserCodeError, ValueError, FileNotFoundError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    # Into the parent's temporary directory, never made again once the parent removed it.
    children.write_result(argv[2], json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
