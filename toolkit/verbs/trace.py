"""``trace RUN``: a run's profiler trace read back (XProf's verdict, the top ops), from its
run directory or report, or from any directory of traces."""

from __future__ import annotations

import argparse
import os

from toolkit.core import terminal
from toolkit.report import ReportError, RunReport

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "trace"
HELP = "a run's profiler trace read back (XProf's verdict, ops)"
DESCRIPTION = None
LOADS_TENSORFLOW = False
RECIPE_FLAGS = False


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory (or report.json), or any directory of traces")
    p.add_argument("--ops", type=int, default=10, help="top ops to list per side (10)")


def check(args: argparse.Namespace) -> None:
    from toolkit.runner.config import check_number

    check_number("--ops", args.ops, integer=True, least=0)


def run(args: argparse.Namespace) -> int:
    from toolkit.report.trace import find_trace_files, read_trace, trace_lines

    path = os.path.abspath(args.run)
    if os.path.isfile(path) or os.path.isfile(os.path.join(path, "report.json")):
        analysis = RunReport.load(path).read_trace()
        where = f"the trace of {path}"
    elif os.path.isdir(path):
        files = find_trace_files(path)
        analysis = read_trace(files) if files else None
        where = f"{len(files)} trace file(s) under {path}"
    else:
        raise ReportError(f"{args.run!r}: no such run directory or report")
    if analysis is None:
        raise ReportError(
            f"{path}: no profiler trace in it (*.xplane.pb, *.pt.trace.json): run the recipe "
            "with --profile_steps=START,STOP to capture one"
        )
    print(f"{where}:")
    print(terminal.fit("\n".join(trace_lines(analysis, ops=args.ops)), terminal.width()))
    return 0 if analysis.read else 1
