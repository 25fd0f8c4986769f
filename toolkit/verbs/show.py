"""``show REPORT``: a run report's summary, fitted to the terminal (``--markdown``: the whole
Markdown report; ``--json``: report.json's own JSON)."""

from __future__ import annotations

import argparse

from toolkit.core import terminal
from toolkit.report import RunReport

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "show"
HELP = "print a run report"
DESCRIPTION = None
LOADS_TENSORFLOW = False
RECIPE_FLAGS = False


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", help="report.json or its run directory")
    p.add_argument("--markdown", action="store_true", help="the full Markdown report")
    p.add_argument("--json", action="store_true", help="the report's JSON, as report.json holds")


def check(args: argparse.Namespace) -> None:
    """Nothing to bound: the report is checked as it loads."""


def run(args: argparse.Namespace) -> int:
    report = RunReport.load(args.report)
    if args.json:
        print(report.to_json())
    else:
        shown = terminal.fit(report.summary(), terminal.width())
        print(report.to_markdown() if args.markdown else shown)
    return 0
