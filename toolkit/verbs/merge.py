"""``merge REPORT...``: the workers' reports of one multi-worker run as the cluster's; status
1 unless every worker's run completed."""

from __future__ import annotations

import argparse

from toolkit.core import terminal
from toolkit.report import RunReport, merge_reports
from toolkit.report._cluster import render_cluster

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "merge"
HELP = "the workers' reports of a multi-worker run"
DESCRIPTION = None
LOADS_TENSORFLOW = False
RECIPE_FLAGS = False


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("reports", nargs="+", help="report.json files or run directories")


def check(args: argparse.Namespace) -> None:
    """Nothing to bound: the reports are checked as they load and merge."""


def run(args: argparse.Namespace) -> int:
    merged = merge_reports([RunReport.load(path) for path in args.reports])
    print(terminal.show(render_cluster(merged)))  # the same as render_merged's, on a terminal
    return 0 if merged.all_complete else 1
