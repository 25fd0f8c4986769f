"""What the measuring verbs (``doctor``, ``tune``, ``backends``) measure: ``--recipe R
[flags]`` or ``--model_fn module:function [flags]``, made into a task or your ``(model, data)``
(:func:`target_of`, :func:`made` in fresh processes) or the chooser's target."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any


def add_target(parser: argparse.ArgumentParser, what: str) -> None:
    """``--recipe R`` or ``--model_fn module:function``: what doctor and tune measure."""
    parser.add_argument(
        "--recipe",
        default="mlp",
        help="a recipe under recipes/ (the list: below, or --help)",
    )
    parser.add_argument(
        "--model_fn",
        help="module:function returning (your compiled Keras model, your data in any form fit "
        f"takes: a tf.data pipeline, (x, y), x alone, a PyDataset...): {what} those instead of "
        "a recipe",
    )


def recipe_epilog(recipe: str | None) -> str:
    """For ``doctor|tune|backends --help``: the recipes and the recipe flags passed on, by group."""
    import shutil
    import textwrap

    from toolkit import app
    from toolkit.runner import flags as tk_flags

    width = min(shutil.get_terminal_size().columns, 100) - 2  # argparse's own margin

    names = app.recipe_names()
    out = [f"recipes (--recipe): {', '.join(names)}; default mlp", ""]
    own: list[str] = []
    if recipe in names:
        module = app.load_recipe(recipe)  # defines its flags; imports no framework
        own = tk_flags.own_flags(module.__name__)
    tk_flags.define_common_flags()
    out += textwrap.wrap(
        "Recipe flags follow --recipe (or --model_fn) and are passed on "
        f"(python -m recipes.{recipe if recipe in names else 'NAME'} --help: "
        "each with its default and meaning):",
        width,
    )
    groups = ([(f"{recipe} flags", own)] if own else []) + [
        (name, [n for n in group if n not in own]) for name, group in tk_flags.FLAG_GROUPS
    ]
    for name, group in groups:
        line = " ".join(f"--{n}" for n in group)
        out += textwrap.wrap(line, width, initial_indent=f"  {name}: ", subsequent_indent="    ")
    return "\n".join(out)


def model_fn(spec: str) -> tuple[Any, Any]:
    """``(compiled model, data in any form fit takes)`` from ``--model_fn module:function``."""
    import importlib

    from toolkit import app
    from toolkit.app import UsageError

    module_name, function = check_spec(spec)
    sys.path.insert(0, os.getcwd())  # a module beside the user, as `python -m` would find it
    from toolkit.core import children

    try:
        if module_name.endswith(".py"):
            module = _script_module(module_name)
        else:
            with children.importing_script(f"{module_name.replace('.', '/')}.py"):
                module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise UsageError(f"--model_fn={spec!r}: cannot import {module_name!r} ({e})") from None
    except Exception as e:  # the module's own code failed: theirs, named as theirs
        raise app.UserCodeError(
            f"--model_fn={spec!r}: importing {module_name} raised {app.one_line(e)}; "
            "--verbosity=1 shows the traceback"
        ) from e
    fn = getattr(module, function, None)
    if not callable(fn):
        raise UsageError(f"--model_fn={spec!r}: {module_name} has no function {function!r}")
    made = app.call_user(fn, f"--model_fn={spec!r}: {function}()")
    if not (isinstance(made, tuple) and len(made) == 2):  # it ran, and gave the wrong thing
        raise app.UserCodeError(
            f"--model_fn={spec!r}: {function}() returned {type(made).__name__}; it must return "
            "(compiled_model, data), the data in any form fit takes: a batched tf.data "
            "dataset, (x, y) arrays, a PyDataset, a generator"
        )
    return made


@dataclasses.dataclass(frozen=True)
class Parsed:
    """A measuring verb's target, read once: in words, flag values, config, typed ``Target``."""

    what: str
    flag_values: Any
    config: Any
    target: Any

    def batch_left_to_data(self) -> Any:
        """The target without a batch size where ``--model_fn`` gives no ``--batch_size``."""
        if self.target.model_fn is None or self.flag_values["batch_size"].present:
            return self.target
        config = {k: v for k, v in self.target.config.items() if k != "batch_size"}
        return dataclasses.replace(self.target, config=config)

    def unused_batch(self, read: int | None) -> str | None:
        """A note where ``--batch_size`` was given but ``fit`` read another batch; else None."""
        try:
            given = self.flag_values["batch_size"]  # absl's Flag: was it given, and its value
        except KeyError:
            return None
        if not given.present or read is None or read == given.value:
            return None
        return (
            f"note: --batch_size={given.value} was not used: your data batches itself, by "
            f"{read:,} (batch it by {given.value} where you make it)"
        )


def parse_target(recipe: str | None, model_fn_spec: str | None, recipe_flags: list[str]) -> Parsed:
    """``--recipe R [flags]`` or ``--model_fn module:function [flags]`` parsed by absl before
    anything is built.

    Raises:
        UsageError: no such recipe.
        ConfigError: a bad setting; absl's flags.Error: a flag not there or not readable."""
    from absl import flags

    from toolkit import _argv, app
    from toolkit.runner import flags as tk_flags

    build_task = None
    if model_fn_spec:
        tk_flags.define_common_flags()
        what, program, recipe = f"--model_fn {model_fn_spec}", "keras-perf", None
    else:
        build_task = app.load_recipe(recipe or "mlp").build_task
        what, program, recipe = f"recipe {recipe}", f"recipes.{recipe}", recipe or "mlp"
    flags.FLAGS([program, *_argv.canonical_argv(recipe_flags)])
    config = tk_flags.config_from_flags()
    target = app.recipe_target(recipe, model_fn_spec, build_task, flags.FLAGS, config)
    return Parsed(what, flags.FLAGS, config, target)


def made(target: Any) -> tuple[Any, Any]:
    """``(what workload() measures, its data)`` of a ``standings.Target``: a recipe's Task (data
    None) or your compiled model and data; fresh processes build theirs here.

    Raises:
        UsageError, UserCodeError: as :func:`model_fn`; ValueError, FileNotFoundError: a recipe's
            data or settings."""
    from toolkit import app

    if target.model_fn:
        return model_fn(target.model_fn)
    module = app.load_recipe(str(target.recipe))
    return app.recipe_task(module.build_task, dict(target.params)), None


def target_of(args: argparse.Namespace) -> tuple[Parsed, Any, Any]:
    """``(parsed, measured, data)`` of a verb's target: a Task and None, or your model and data."""
    parsed = _parsed(args)
    measured, data = made(parsed.target)
    return parsed, measured, data


def _parsed(args: argparse.Namespace) -> Parsed:
    """The target parsed before any framework loaded, or :func:`parse_target` of `args` now."""
    parsed = getattr(args, "parsed_target", None)
    return parsed or parse_target(args.recipe, args.model_fn, args.recipe_flags)


def chooser_target(args: argparse.Namespace) -> Parsed:
    """The chooser's target of a verb's ``--recipe``/``--model_fn`` and flags; nothing built."""
    if args.model_fn:
        _check_model_fn(args.model_fn)
    return _parsed(args)


def _check_model_fn(spec: str) -> None:
    """A ``module:function`` importable from here, or a script's path, or UsageError."""
    import importlib.util

    from toolkit import app

    module, _ = check_spec(spec)
    if module.endswith(".py"):  # a script's path, found by check_spec: imported by its path
        return
    sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a package above it that is not there, or is broken
        found = None
    if found is None:
        raise app.UsageError(
            f"--model_fn={spec!r}: give module:function of a module importable from "
            "here (e.g. mytrain:make)"
        )


def _script_module(path: str) -> Any:
    """The script at `path` imported as spawn imports a main (``__mp_main__``, its folder on
    ``sys.path``); one starting toolkit processes on import is refused: children would multiply."""
    import importlib.util

    from toolkit.core import children

    name = "__mp_main__"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"no Python script at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    with children.importing_script(path):
        spec.loader.exec_module(module)
    return module


def check_spec(spec: str) -> tuple[str, str]:
    """``(module, function)`` of ``--model_fn`` (``pkg.mod:fn``, ``script.py:fn``); UsageError."""
    from toolkit.app import UsageError

    script, sep, function = spec.rpartition(":")
    if script.endswith(".py"):
        if not (function.isidentifier() and os.path.isfile(script)):
            raise UsageError(
                f"--model_fn={spec!r}: give path/to/script.py:function, a script that exists "
                "and a function's name"
            )
        return script, function
    module, sep, function = spec.partition(":")
    names = module.split(".")
    if not (sep and all(n.isidentifier() for n in names) and function.isidentifier()):
        raise UsageError(
            f"--model_fn={spec!r}: give module:function, a module importable from here "
            "and a function's name (e.g. mytrain:make)"
        )
    return module, function
