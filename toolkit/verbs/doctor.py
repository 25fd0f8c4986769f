"""``doctor``: is a recipe or your ``--model_fn`` input-bound or compute-bound? Measured,
with advice; or, with ``--report``, where a whole run's time went, read from its report."""

from __future__ import annotations

import argparse

from toolkit.core import terminal
from toolkit.core.files import ReportError
from toolkit.verbs._target import add_target, target_of

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "doctor"
HELP = "input-bound or compute-bound? measured, with advice"
DESCRIPTION = "Recipe flags (--batch_size, --dataset...) follow --recipe or --model_fn."
LOADS_TENSORFLOW = False  # not for --report (a JSON file): run() loads them to measure
RECIPE_FLAGS = True


def options(p: argparse.ArgumentParser) -> None:
    add_target(p, "diagnose")
    p.add_argument(
        "--report",
        help="a run's report.json or run directory: where that whole run's time went and what "
        "each fix would save (its ledger), read from the report alone; nothing is measured",
    )


def check(args: argparse.Namespace) -> None:
    """Nothing to bound: the command line checks the recipe flags; ``--report`` is read strictly."""


def run(args: argparse.Namespace) -> int:
    if args.report:  # a whole run's ledger and its fixes, read from its report alone
        return _whole_run(args.report)
    _load_tensorflow()
    from toolkit.search.diagnose import diagnose

    parsed, measured, data = target_of(args)
    asked = parsed.flag_values["diagnose_steps"].present  # else 60, or more for a 0.5 s window
    steps = parsed.flag_values.diagnose_steps if asked else None
    diagnosis = diagnose(measured, data, config=parsed.config, steps=steps)
    print(f"doctor: {parsed.what}, batch {diagnosis.batch_size}, {diagnosis.steps} steps timed")
    unused = parsed.unused_batch(diagnosis.batch_size)
    if unused:
        print(terminal.show(unused))
    print(terminal.show("\n".join(diagnosis.lines())))
    return 0


def _load_tensorflow() -> None:
    """TensorFlow and Keras loaded before measuring, as ``toolkit.cli`` does for measuring verbs."""
    from toolkit.core import interrupts, progress
    from toolkit.devices import runtime

    if progress.mode() == progress.BAR:
        progress.say(f"{NAME}: loading TensorFlow and Keras first")
    with interrupts.held():
        runtime.load_tensorflow()


def _whole_run(path: str) -> int:
    """``--report``: the ledger, its fixes' savings, the rules, the process; nothing measured."""
    from toolkit.report import RunReport
    from toolkit.report._ledger import whole_run_lines
    from toolkit.runner.config import as_flags

    report = RunReport.load(path)
    if not report.ledger:
        raise ReportError(
            f"{path}: this report has no ledger (written before the ledger was "
            "measured, or by a custom loop): run the recipe again and pass its run directory"
        )
    from toolkit.report._anatomy import anatomy_top_lines

    print(f"doctor: the run {report.name} in {path}")
    lines = whole_run_lines(report.ledger, flags=as_flags)
    if report.process is not None:  # the fit within its whole process
        from toolkit.report._fit_call import process_line

        lines.append(process_line(report.process))
    if report.anatomy is not None and not report.anatomy.error:  # its traced steps, apart
        lines += anatomy_top_lines(report.anatomy)
    print(terminal.show("\n".join(lines)))
    return 0
