"""``backends``: which Keras backend trains a recipe or your ``--model_fn`` fastest here,
each backend in a fresh process, measured in interleaved rounds (cached)."""

from __future__ import annotations

import argparse
import os
import sys

from toolkit.core import terminal
from toolkit.verbs._options import check_out, split
from toolkit.verbs._target import add_target, chooser_target

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "backends"
HELP = "which Keras backend trains a recipe or your model fastest (measured, cached)"
DESCRIPTION = (
    "Recipe flags (--batch_size, --dataset, --device...) follow --recipe;\nwithout "
    "--device every device each backend sees is a contender."
)
LOADS_TENSORFLOW = False
RECIPE_FLAGS = True


def options(p: argparse.ArgumentParser) -> None:
    add_target(p, "compare")
    p.add_argument("--backends", help="comma-separated (default: every installed one)")
    p.add_argument("--steps", type=int, default=200, help="training steps per run (200)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--out", help="output directory (default runs/backends-<time>)")
    p.add_argument("--refresh", action="store_true", help="measure again, replacing the cache")
    p.add_argument("--no_plot", action="store_true", help="skip the PNG chart")
    p.add_argument(
        "--anatomy",
        action="store_true",
        help="then say why the slowest backend is slower: the fastest's and the slowest's "
        "steps taken apart (each in a fresh process) and diffed in words",
    )


def check(args: argparse.Namespace) -> None:
    """The chooser's bounds, the output dir, and no ``--backend``: each contender runs its own."""
    from toolkit import _argv
    from toolkit.runner.config import check_number

    check_number("--steps", args.steps, integer=True, least=8)
    check_number("--rounds", args.rounds, integer=True, least=1)
    check_out(args.out, instead="or leave --out out (runs/backends-<time>)",
              writes=("backends.json", "backends.md", "backends.png"))  # fmt: skip
    one = _argv.flag_value(args.recipe_flags, "backend")
    if one is not None:
        raise ValueError(
            f"--backend={one} picks one run's backend, and each contender runs its own: "
            "name the backends to compare with --backends (e.g. --backends=jax,torch)"
        )


def run(args: argparse.Namespace) -> int:
    import datetime as dt

    from toolkit.search import chooser

    result = chooser.compare(
        chooser_target(args).target,
        backends=split(args.backends) or None,
        steps=args.steps,
        rounds=args.rounds,
        refresh=args.refresh,
    )
    print(terminal.show(result.summary()))
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or os.path.join("runs", f"backends-{stamp}")
    try:
        paths = result.write(out, plot=not args.no_plot)
    except OSError as e:  # the table above is what was kept
        print(
            f"error: could not write under {out} ({e.strerror or e}); the table above is the "
            "result",
            file=sys.stderr,
        )
        return 1
    written = ", ".join(paths[k] for k in ("markdown", "json", "png") if k in paths)
    print(terminal.fit(f"written: {written}", terminal.width()))
    if args.anatomy:
        _why_slower(result)
    if not any(row.ok() for row in result.rows):  # a table of failures is no answer
        why = next((row.error for row in result.rows if row.error), "see the table")
        print(f"error: no backend ran ({why})", file=sys.stderr)
        return 1
    return 0


def _why_slower(result: object) -> None:
    """``--anatomy``: the fastest and the slowest backend's anatomies, diffed in words."""
    from toolkit.report._anatomy import anatomy_top_lines, contrast_lines
    from toolkit.search.chooser import why_slower

    width = terminal.width() or 80
    found = why_slower(result)
    if found is None:
        print("anatomy: fewer than two backends ran; nothing to set side by side")
        return
    diff, fast, slow = found
    for a in (fast, slow):
        title = f"{a.backend}: " + (f"no anatomy ({a.error})" if a.error else "")
        print(terminal.fit(title, width) if a.error else title)
        if not a.error:
            print("\n".join(f"  {line}" for line in anatomy_top_lines(a)))
    if diff is not None:
        print("\n".join(contrast_lines(diff, width)))
