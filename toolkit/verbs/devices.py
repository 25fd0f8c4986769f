"""``devices``: the devices each installed backend (or ``--backend``'s) sees, each with a
precision hint."""

from __future__ import annotations

import argparse

from toolkit.verbs._options import add_backend

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "devices"
HELP = "list devices with a precision hint, per backend"
DESCRIPTION = None
LOADS_TENSORFLOW = True
RECIPE_FLAGS = False


def options(p: argparse.ArgumentParser) -> None:
    add_backend(p, "the backend to ask (default: every installed one)")


def check(args: argparse.Namespace) -> None:
    """Nothing to bound: ``--backend`` is one of its choices."""


def run(args: argparse.Namespace) -> int:
    from toolkit import backend, devices

    chosen = [args.backend] if args.backend else list(backend.installed())
    for name in chosen:
        print(f"--backend={name}")
        for device in devices.detect(name):
            policy, why = devices.recommend_precision(device)
            print(f"  {device}\n      precision hint: {policy} ({why})")
    return 0
