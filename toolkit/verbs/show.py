"""``show REPORT``: a run report's summary, fitted to the terminal (``--markdown``: the whole
Markdown report; ``--json``: its JSON); ``anatomy.json``, ``backends.json`` as their verbs print."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any

from toolkit.core import terminal
from toolkit.report import RunReport

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "show"
HELP = "print a run report (or what anatomy and backends wrote)"
DESCRIPTION = None
LOADS_TENSORFLOW = False
RECIPE_FLAGS = False

RECORDS = ("report.json", "anatomy.json", "backends.json")  # each verb's, in reading order


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "report", help="report.json, anatomy.json or backends.json, or the directory holding it"
    )
    p.add_argument("--markdown", action="store_true", help="the full Markdown report")
    p.add_argument("--json", action="store_true", help="the report's JSON, as report.json holds")


def check(args: argparse.Namespace) -> None:
    """Nothing to bound: the report is checked as it loads."""


def run(args: argparse.Namespace) -> int:
    path = _record(args.report)
    name = os.path.basename(path)
    if name == "anatomy.json" or name == "backends.json":
        record, lines = _other(path, name)
        print(json.dumps(record, indent=1) if args.json else lines)
        return 0
    report = RunReport.load(path)
    if args.json:
        print(report.to_json())
    else:
        shown = terminal.fit(report.summary(), terminal.width())
        print(report.to_markdown() if args.markdown else shown)
    return 0


def _record(given: str) -> str:
    """The file to read: `given`, or in a directory the first record a verb writes there."""
    if not os.path.isdir(given):
        return given
    for name in RECORDS:
        if os.path.isfile(os.path.join(given, name)):
            return os.path.join(given, name)
    return os.path.join(given, RECORDS[0])  # said as a missing report


def _other(path: str, name: str) -> tuple[dict[str, Any], str]:
    """``anatomy``'s or ``backends``' record at `path`, read strictly, and its lines as printed."""
    from toolkit.core.files import read_checked

    width = terminal.width() or 80
    reader: Callable[[Any], Any]
    if name == "anatomy.json":
        from toolkit.core._anatomy import Anatomy
        from toolkit.report._anatomy import anatomy_lines

        reader = Anatomy.from_dict
        found = read_checked(path, reader, lambda a: anatomy_lines(a, width))
        return found.to_dict(), "\n".join(anatomy_lines(found, width))
    from toolkit.search.standings import BackendsResult

    found = read_checked(path, BackendsResult.from_dict, lambda r: r.summary())
    return found.to_dict(), terminal.show(found.summary(), width)
