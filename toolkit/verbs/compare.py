"""``compare A B``: two run reports, B against baseline A, within their noise band; with
``--fail_on_slower`` a regression (or a comparison that cannot tell) fails with status 1."""

from __future__ import annotations

import argparse
import json
import sys

from toolkit.core import terminal
from toolkit.report import Comparison, RunReport, compare

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "compare"
HELP = "compare two run reports (B against baseline A)"
DESCRIPTION = None
LOADS_TENSORFLOW = False
RECIPE_FLAGS = False


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="baseline: report.json or its run directory")
    p.add_argument("b", help="candidate: report.json or its run directory")
    p.add_argument("--z", type=float, default=3.0, help="standard errors a change must exceed")
    p.add_argument(
        "--min_rel",
        type=float,
        default=0.10,
        help="smallest relative change that counts: what two runs of one command differ by "
        "(0.10, as asv's factor 1.1)",
    )
    p.add_argument("--json", action="store_true", help="the comparison as JSON, on stdout")
    p.add_argument(
        "--fail_on_slower",
        "--fail-on-slower",
        action="store_true",
        help="exit 1 when B is slower than A beyond the noise band (a regression in CI), or "
        "when that cannot be told (no timed steps, different workloads, a noise band of ±100%% "
        "or wider)",
    )


def check(args: argparse.Namespace) -> None:
    from toolkit.runner.config import check_number

    check_number("--z", args.z, above=0)
    # --min_rel of 1 or more would make every band too wide for a verdict (report.comparison)
    check_number("--min_rel", args.min_rel, least=0, most=0.9)


def run(args: argparse.Namespace) -> int:
    """Status 1 with ``--fail_on_slower`` when B is slower beyond the noise band: a CI gate."""
    a, b = RunReport.load(args.a), RunReport.load(args.b)
    result = compare(a, b, z=args.z, min_rel=args.min_rel)
    print(json.dumps(result.to_dict(), indent=2) if args.json else terminal.show(result.blocks()))
    return _gate(result) if args.fail_on_slower else 0


def _gate(result: Comparison) -> int:
    """``--fail_on_slower``'s status for `result`, its reason on stderr."""
    if result.verdict == "slower":
        print(
            f"compare: B is slower than A beyond the noise band ({result.ratio:.2f}× A's "
            "speed): failing, as --fail_on_slower asks",
            file=sys.stderr,
        )
        return 1
    if result.verdict in ("unknown", "different workloads", "too noisy"):
        why = {  # no pass on nothing or runs it cannot compare; no "slower" in a band too wide
            "unknown": "a report has no timed steps",
            "different workloads": "A and B are different workloads",
            "too noisy": f"the runs are too noisy: a ±{(result.noise or 0) * 100:.1f}% noise band",
        }[result.verdict]
        print(
            f"compare: cannot tell whether B is slower ({why}): failing, as --fail_on_slower asks",
            file=sys.stderr,
        )
        return 1
    return 0
