"""``anatomy``: what inside a recipe's or your ``--model_fn``'s training step costs it: the
step in phases (input, forward, backward, optimizer, metrics, between steps, other) and layers,
from a short trace checked against the outside clock, and Keras's trainer's cost over a raw step."""

from __future__ import annotations

import argparse
import json
import os
import sys

from toolkit.core import terminal
from toolkit.verbs._options import check_out, split
from toolkit.verbs._target import add_target, target_of

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "anatomy"
HELP = "inside the step: phases, layers, Keras's own cost (measured)"
DESCRIPTION = "Recipe flags (--batch_size, --dataset...) follow --recipe or --model_fn."
LOADS_TENSORFLOW = True
RECIPE_FLAGS = True


def options(p: argparse.ArgumentParser) -> None:
    add_target(p, "take apart")
    p.add_argument(
        "--steps", type=int, default=10, help="training steps traced, exactly (10; at most 100)"
    )
    p.add_argument(
        "--layers",
        help="comma-separated layer names to time alone too (besides the trace's slowest 3)",
    )
    p.add_argument(
        "--no_raw",
        action="store_true",
        help="skip Keras's own cost (the step written without Keras's trainer, timed beside)",
    )
    p.add_argument("--out", help="output directory (default runs/anatomy-<time>)")
    p.add_argument("--no_plot", action="store_true", help="skip the PNG picture")


def check(args: argparse.Namespace) -> None:
    from toolkit.core._anatomy import MAX_STEPS
    from toolkit.report._anatomy import ANATOMY_PNG
    from toolkit.runner.config import check_number

    check_number("--steps", args.steps, integer=True, least=2, most=MAX_STEPS)
    check_out(args.out, instead="or leave --out out (runs/anatomy-<time>)",
              writes=("anatomy.json", ANATOMY_PNG))  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import datetime as dt

    from toolkit.core.files import atomic_write
    from toolkit.report._anatomy import ANATOMY_PNG, anatomy_lines, anatomy_png
    from toolkit.search.anatomy import anatomy

    parsed, measured, data = target_of(args)
    found = anatomy(measured, data, steps=args.steps, config=parsed.config,
                    raw=not args.no_raw, layers=split(args.layers))  # fmt: skip
    print(f"anatomy: {parsed.what}")
    unused = parsed.unused_batch(found.batch)
    if unused:
        print(terminal.show(unused))
    print("\n".join(anatomy_lines(found, terminal.width() or 80)))
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or os.path.join("runs", f"anatomy-{stamp}")
    try:
        written = [atomic_write(os.path.join(out, "anatomy.json"),
                                json.dumps(found.to_dict(), indent=2) + "\n")]  # fmt: skip
        if not args.no_plot and not found.error:
            png = anatomy_png(found, os.path.join(out, ANATOMY_PNG))
            written += [png] if png else []
    except OSError as e:  # the lines above are the result
        print(
            f"error: could not write under {out} ({e.strerror or e}); the lines above are the "
            "result",
            file=sys.stderr,
        )
        return 1
    print(terminal.fit("written: " + ", ".join(written), terminal.width()))
    if found.error:
        print(f"error: the step could not be taken apart: {found.error}", file=sys.stderr)
        return 1
    return 0
