"""``memory``: the largest batch of a recipe or your ``--model_fn`` that fits in memory here:
peaks measured at two or three batch sizes, each in a fresh process, a line fitted through them,
the batch under the limit read off it and checked (``toolkit.search.memory_fit``)."""

from __future__ import annotations

import argparse
import os
import sys

from toolkit.core import terminal
from toolkit.verbs._options import check_out, split
from toolkit.verbs._target import add_target, chooser_target

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "memory"
HELP = "the largest batch that fits in memory here (measured in fresh processes, checked)"
DESCRIPTION = (
    "Recipe flags (--batch_size, --dataset, --device...) follow --recipe or\n"
    "--model_fn; --report_dir DIR also writes the result to DIR/memory-<time>.json."
)
LOADS_TENSORFLOW = False
RECIPE_FLAGS = True


def options(p: argparse.ArgumentParser) -> None:
    add_target(p, "measure")  # no abbreviations (toolkit.cli): --batch_size goes to the recipe
    p.add_argument(
        "--memory_limit",
        help="the memory to fit in: MiB (4096) or with its unit (4GB, 512MB; binary units, "
        "as every figure printed: 1GB is 1024MB); default: the device's memory, or on a CPU "
        "80%% of the RAM this host has available",
    )
    p.add_argument(
        "--batch_sizes",
        help="comma-separated batch sizes to measure, two or more (default: --batch_size, "
        "twice and four times it; with --model_fn and no --batch_size, your data's batch)",
    )
    p.add_argument("--steps", type=int, default=4, help="training steps in each run (4)")
    p.add_argument(
        "--no_check", action="store_true", help="predict only: do not run the predicted batch"
    )


def check(args: argparse.Namespace) -> None:
    """The limit, batch sizes and steps: a bad one is one line, status 2, before any process."""
    from toolkit.search.memory_fit import check_sizes, check_steps, parse_limit

    args.memory_limit = parse_limit(args.memory_limit)
    sizes = split(args.batch_sizes) if args.batch_sizes is not None else None
    if sizes is not None:
        try:
            sizes = [int(s) for s in sizes]
        except ValueError:
            raise ValueError(
                f"--batch_sizes must be integers >= 1, comma-separated, got {args.batch_sizes!r}"
            ) from None
    args.batch_sizes = check_sizes(sizes)
    check_steps(args.steps)


def run(args: argparse.Namespace) -> int:
    from toolkit.search.memory_fit import fits

    parsed = chooser_target(args)  # the recipe flags read and checked here, nothing built
    out = parsed.config.report_dir if parsed.flag_values["report_dir"].present else None
    check_out(out, "--report_dir", "or leave --report_dir out")  # before anything is measured
    found = fits(
        parsed.batch_left_to_data(), limit=args.memory_limit, batch_sizes=args.batch_sizes,
        steps=args.steps, check=not args.no_check,
    )  # fmt: skip
    print(terminal.show(found.screen(), terminal.width() or 80))  # a log too: 80 columns
    if out:
        try:
            print(f"written: {_write(found, out)}")
        except OSError as e:  # the result above is what was kept
            print(f"error: could not write under {out} ({e.strerror or e}); the result above "
                  "is the answer", file=sys.stderr)  # fmt: skip
            return 1
    # an answer whose own check ran over the limit is no answer
    return 0 if found.batch_size is not None and found.under_limit is not False else 1


def _write(found: object, folder: str) -> str:
    """The result as JSON under `folder` (``memory-<time>.json``), written atomically."""
    import datetime as dt
    import json

    from toolkit.core.files import atomic_write

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = os.path.join(folder, f"memory-{stamp}.json")
    return atomic_write(path, json.dumps(found.to_dict(), indent=2))  # type: ignore[attr-defined]
