"""The command line's verbs, one module each (``toolkit/verbs/NAME.py``), and their registry,
:data:`VERBS`, in the order ``--help`` lists them. Each verb module declares, read into its
:class:`Verb`: ``NAME``, ``HELP`` (its ``--help`` line), ``DESCRIPTION`` (its own ``--help``, or
None), ``LOADS_TENSORFLOW`` (loaded first, start-up lines held back), ``RECIPE_FLAGS`` (flags
after its target go on to the recipe), ``options(parser)``, ``check(args)`` (bounds before
anything loads: a ConfigError or ValueError is one line, status 2) and ``run(args)`` (its
status). The command line parses the target (``--recipe``, ``--model_fn``, recipe flags) first
too. The parser, start-up and exit codes are ``toolkit.cli``'s; nothing here imports a framework."""

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
