"""The command line's verbs, one module each (``toolkit/verbs/NAME.py``), and their registry,
:data:`VERBS`, in the order ``--help`` lists them.

Each verb module declares the same interface, read into its :class:`Verb`:

- ``NAME``: the verb as typed (``data-service``); ``HELP``: its line in ``--help``;
  ``DESCRIPTION``: its own ``--help``'s text, or None;
- ``LOADS_TENSORFLOW``: it loads TensorFlow and Keras first (their start-up lines held back);
- ``RECIPE_FLAGS``: the flags after its target (``--recipe R`` or ``--model_fn M:F``) go on to
  the recipe, and its ``--help`` lists the recipes and those flags;
- ``options(parser)``: its arguments; ``check(args)``: its options' bounds, before anything
  loads (a ConfigError or ValueError: one line, status 2); ``run(args)``: the verb, its status.
  The command line checks what a verb measures then too: ``--recipe``, ``--model_fn`` and,
  with ``RECIPE_FLAGS``, the recipe flags, parsed into the target the verb then reads.

What several verbs share is private here: ``_target`` (``--recipe``/``--model_fn`` made into
what is measured) and ``_options`` (``--backend``, lists). The parser, start-up and exit codes
are ``toolkit.cli``'s. Nothing here imports a framework before a verb runs."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from types import ModuleType

from toolkit.verbs import (
    anatomy,
    backends,
    compare,
    data_service,
    devices,
    doctor,
    memory,
    merge,
    ops,
    placement,
    preflight,
    show,
    trace,
    tune,
)

__all__: list[str] = []  # the command line's own; nothing here is API


@dataclasses.dataclass(frozen=True)
class Verb:
    """One verb of the command line, as its module declares it."""

    name: str
    help: str
    description: str | None
    loads_tensorflow: bool
    recipe_flags: bool
    options: Callable[[argparse.ArgumentParser], None]
    check: Callable[[argparse.Namespace], None]
    run: Callable[[argparse.Namespace], int]

    @classmethod
    def of(cls, module: ModuleType) -> Verb:
        """The verb `module` declares (an AttributeError names what it lacks)."""
        return cls(
            name=module.NAME,
            help=module.HELP,
            description=module.DESCRIPTION,
            loads_tensorflow=module.LOADS_TENSORFLOW,
            recipe_flags=module.RECIPE_FLAGS,
            options=module.options,
            check=module.check,
            run=module.run,
        )


MODULES = (
    compare, show, trace, devices, preflight, placement, doctor, anatomy, tune, backends, memory,
    ops, data_service, merge,
)  # fmt: skip
VERBS = tuple(Verb.of(module) for module in MODULES)
