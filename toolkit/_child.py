"""The private entry point of the search's fresh processes: ``python -m toolkit._child SPEC
OUT``. SPEC is a JSON ``ChildSpec`` (job, backend, device, target, config, candidate: typed);
the answer, a record, is written to OUT atomically; no command line is rebuilt. It speaks to its
parent in typed messages, one JSON object a line on stdout; status 1, or 2 for a bad spec."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Protocol


class _Answer(Protocol):
    """What a job answers: a record that says itself as JSON."""

    def to_dict(self) -> dict[str, object]: ...


@dataclasses.dataclass(frozen=True)
class _Tuned:
    """A ``tune`` job's answer: the search's result and the batch size it ran at."""

    result: Any  # toolkit.search.tune.TuneResult
    batch_size: int | None

    def to_dict(self) -> dict[str, object]:
        return {**self.result.to_dict(), "batch_size": self.batch_size}


@dataclasses.dataclass(frozen=True)
class _Devices:
    """A ``devices`` job's answer: the device kinds the spec's backend sees here."""

    kinds: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"kinds": list(self.kinds)}


class _Channel:
    """The child's side of its messages: stdout, kept for them alone (other printing: stderr)."""

    def __init__(self) -> None:
        sys.stdout.flush()
        fd = os.dup(1)
        os.dup2(2, 1)  # fd 1, and sys.stdout on it, now write to standard error
        self.out = os.fdopen(fd, "w", encoding="utf-8", buffering=1)

    def send(self, kind: str, text: str) -> None:
        from toolkit.search._processes import Message

        with contextlib.suppress(OSError, ValueError):  # a parent gone: nobody reads
            self.out.write(Message(kind, text).to_json() + "\n")
            self.out.flush()

    def progress(self, line: str) -> None:
        from toolkit.search._processes import PROGRESS

        self.send(PROGRESS, line)

    def error(self, text: str) -> None:
        """The error that ends the child: sent, and said on standard error for a person."""
        from toolkit.search._processes import ERROR

        text = " ".join(str(text).split())
        self.send(ERROR, text)
        print(f"error: {text}", file=sys.stderr)


def _figures_or_tune(spec: Any, channel: _Channel) -> _Answer:
    """The spec's job on its target, built from its typed values (absl left alone)."""
    from toolkit.core.files import jsonable
    from toolkit.runner.config import TrainConfig
    from toolkit.search.standings import Figures
    from toolkit.search.workload import workload
    from toolkit.verbs._target import made

    config = TrainConfig.from_dict(spec.config()).validate()
    target, data = made(spec.target)
    weights = spec.target.class_weight  # your fit's, beside the data your function returned
    if spec.job == "figures":
        with workload(target, data, config, class_weight=weights) as work:
            figures = work.figures(
                spec.steps, count_flops=config.count_flops, candidate=spec.candidate
            )
        return Figures.from_dict(jsonable(figures))
    if spec.job == "peak":  # toolkit.fits: the peak memory of a short fit at this batch
        from toolkit.search.workload import peak_at

        # a batch size left out: your function's pipeline's own
        return peak_at(target, data, config, spec.steps, "batch_size" not in spec.target.config)
    if spec.job == "anatomy":
        from toolkit.search.anatomy import anatomy

        return anatomy(target, data, steps=spec.steps or 10, config=config)
    from toolkit.search.tune import tune

    result = tune(
        target,
        data,
        config=config,
        budget_s=spec.budget_s,
        progress=channel.progress,
        class_weight=weights,
    )
    return _Tuned(result, result.batch_size)


def _job(spec: Any, channel: _Channel) -> _Answer:
    """Starts as a program here starts (the backend before Keras loads), then the job."""
    if spec.job == "devices":
        from toolkit import devices

        return _Devices(tuple(sorted({d.kind for d in devices.detect(spec.backend)})))
    from toolkit import _argv, app
    from toolkit.devices import runtime

    cache = bool((spec.target.config or {}).get("compile_cache"))
    app.begin(_argv.StartFlags(spec.backend, spec.device, compile_cache=cache))
    if spec.job == "tune":  # as the tune verb: TensorFlow first, its C++ lines held back
        runtime.load_tensorflow()
    return _figures_or_tune(spec, channel)


def main(argv: Sequence[str]) -> int:
    """The child's run: bound to its parent (it ends with it), signals unwinding it (its
    temporary files removed), then ending it as the signal would."""
    from toolkit.core import children, interrupts

    children.bind_to_parent()
    interrupts.install()
    try:
        return _main(argv)
    except KeyboardInterrupt as e:
        _die_of(interrupts.signal_of(e))
        raise


def _die_of(signum: int) -> None:
    """Ends this process by `signum` itself, after the exit hooks: the parent reads ``-signum``."""
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

    channel = _Channel()
    if len(argv) != 3:
        channel.error("python -m toolkit._child SPEC OUT is the search's own")
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            spec = ChildSpec.from_json(f.read())
    except (OSError, ValueError) as e:
        channel.error(f"{argv[1]}: {e}")
        return 2
    from toolkit.app import UserCodeError
    from toolkit.backend import BackendError
    from toolkit.core import children
    from toolkit.core.errors import one_line, user_raise
    from toolkit.report import ReportError
    from toolkit.search._processes import ERROR

    try:
        result = _job(spec, channel)
    except Exception as e:
        # Your own exception with its line (not TensorFlow's UnknownError around it): the run's.
        yours = user_raise(e)
        said = (BackendError, ReportError, UserCodeError, ValueError, FileNotFoundError)
        if yours is None and not isinstance(e, said):
            # the parent's one line (a traceback's last line may be a note, as JAX's); re-raised
            channel.send(ERROR, " ".join(one_line(e).split()))
            raise
        channel.error(str(yours or e))
        return 1
    # Into the parent's temporary directory, never made again once the parent removed it.
    children.write_result(argv[2], json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
