"""``python -m toolkit <verb>``: command-line entry points.

Verbs:
    compare A B   deltas of report B against baseline A, with a noise-aware verdict
    show REPORT   a report's summary (``--markdown`` for the full Markdown)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from toolkit.report import ReportError, RunReport, compare


def _compare(args: argparse.Namespace) -> int:
    a, b = RunReport.load(args.a), RunReport.load(args.b)
    print(compare(a, b, z=args.z, min_rel=args.min_rel).render())
    return 0


def _show(args: argparse.Namespace) -> int:
    report = RunReport.load(args.report)
    print(report.to_markdown() if args.markdown else report.summary())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolkit", description=__doc__.split("\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser("compare", help="compare two run reports (B against baseline A)")
    p.add_argument("a", help="baseline: report.json or its run directory")
    p.add_argument("b", help="candidate: report.json or its run directory")
    p.add_argument("--z", type=float, default=3.0, help="standard errors a change must exceed")
    p.add_argument("--min-rel", type=float, default=0.01, help="smallest relative change (0.01)")
    p.set_defaults(func=_compare)

    p = verbs.add_parser("show", help="print a run report")
    p.add_argument("report", help="report.json or its run directory")
    p.add_argument("--markdown", action="store_true", help="the full Markdown report")
    p.set_defaults(func=_show)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
