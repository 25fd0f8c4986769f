"""``tune``: the fastest measured settings for a recipe or your ``--model_fn`` here (cached);
with ``--across_backends`` the backend is one more axis, a search per installed backend."""

from __future__ import annotations

import argparse

from toolkit.core import terminal
from toolkit.verbs._target import add_target, chooser_target, target_of

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "tune"
HELP = "the fastest measured settings for a recipe or your model here (cached)"
DESCRIPTION = "Recipe flags (--batch_size, --dataset...) follow --recipe or --model_fn."
LOADS_TENSORFLOW = True
RECIPE_FLAGS = True


def options(p: argparse.ArgumentParser) -> None:
    add_target(p, "tune")
    p.add_argument(
        "--refresh",
        action="store_true",
        help="search again, and cache what it finds in place of the cached answer",
    )
    p.add_argument(
        "--no_confirm",
        action="store_true",
        help="skip confirming the pick in fresh processes (the gain claimed is then this "
        "process's own, said unconfirmed)",
    )
    p.add_argument(
        "--across_backends",
        action="store_true",
        help="the backend as one more axis: a search per installed backend (each a fresh "
        "process), then their winners and the defaults head to head",
    )


def check(args: argparse.Namespace) -> None:
    """Nothing to bound: the command line checks the recipe flags with the target, first."""


def run(args: argparse.Namespace) -> int:
    from toolkit.search.tune import tune as search

    if args.across_backends:
        return _across_backends(args)
    parsed, measured, data = target_of(args)
    # --no_confirm or a recipe flag's --notune_confirm (--autotune's): either skips confirming.
    confirm = not args.no_confirm and parsed.flag_values.tune_confirm
    result = search(
        measured, data, config=parsed.config, budget_s=parsed.flag_values.tune_budget,
        refresh=args.refresh, fresh=parsed.target, confirm=confirm,
        skip_words="--no_confirm" if args.no_confirm or confirm else "--notune_confirm",
    )  # fmt: skip
    print(terminal.show([f"tune: {parsed.what}, batch {result.batch_words} ({result.took()})",
                         *result.table()]))  # fmt: skip
    # A command line to copy: whole in a log, folded with "\\" on a terminal (pastes whole).
    print(terminal.fit_command(f"best: {result.how_to_apply}", terminal.width()))
    if result.try_how:  # faster here, neither confirmed nor refused: the defaults stand
        print(terminal.fit_command(f"not confirmed, to try: {result.try_how}", terminal.width()))
    return 0


def _across_backends(args: argparse.Namespace) -> int:
    from toolkit.search import chooser

    parsed = chooser_target(args)  # --tune_budget parsed with the rest, as tune reads it
    result = chooser.tune_across(parsed.target, budget_s=parsed.flag_values.tune_budget)
    print(terminal.show(result.summary()))
    return 0
