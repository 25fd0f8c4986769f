"""The verbs that measure a target (``doctor``, ``tune``, ``backends``) and what they share:
``--recipe R [flags]`` or ``--model_fn module:function [flags]`` made into a task or your
``(model, data)``, and the backends chooser's target. The command line itself (the parser,
the other verbs, exit codes) is ``toolkit.cli``'s.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__: list[str] = []  # the command line's own; nothing here is API


def model_fn(spec: str) -> tuple[Any, Any]:
    """``(compiled model, data in any form fit takes)`` from ``--model_fn module:function``."""
    import importlib

    from toolkit.app import UsageError

    module_name, sep, function = spec.partition(":")
    if not sep or not module_name or not function:
        raise UsageError(f"--model_fn={spec!r}: give module:function (e.g. mytrain:make)")
    sys.path.insert(0, os.getcwd())  # a module beside the user, as `python -m` would find it
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise UsageError(f"--model_fn={spec!r}: cannot import {module_name!r} ({e})") from None
    fn = getattr(module, function, None)
    if not callable(fn):
        raise UsageError(f"--model_fn={spec!r}: {module_name} has no function {function!r}")
    made = fn()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise UsageError(
            f"--model_fn={spec!r}: {function}() must return (compiled_model, batched_dataset)"
        )
    return made


def resolve_target(
    recipe: str | None, model_fn_spec: str | None, recipe_flags: list[str]
) -> tuple[str, Any, Any, Any, Any]:
    """``(what, flag values, config, target, data)`` of ``--recipe R [flags]`` (a Task, data
    None) or ``--model_fn module:function [flags]`` (your compiled model and its data): what
    ``toolkit.search.workload.workload`` makes the one Workload of."""
    from absl import flags

    from toolkit import app

    if model_fn_spec:
        from toolkit.runner import flags as tk_flags

        tk_flags.define_common_flags()
        flags.FLAGS(["keras-perf", *recipe_flags])
        config = tk_flags.config_from_flags()
        model, data = model_fn(model_fn_spec)
        return f"--model_fn {model_fn_spec}", flags.FLAGS, config, model, data
    module = app.load_recipe(recipe or "mlp")
    config, task = app.recipe_from_flags(module, [f"recipes.{recipe}", *recipe_flags])
    return f"recipe {recipe}", flags.FLAGS, config, task, None


def _target_of(args: argparse.Namespace) -> tuple[str, Any, Any, Any, Any]:
    return resolve_target(args.recipe, args.model_fn, args.recipe_flags)


def doctor(args: argparse.Namespace) -> int:
    from toolkit.search.diagnose import diagnose

    what, flag_values, config, target, data = _target_of(args)
    diagnosis = diagnose(target, data, config=config, steps=flag_values.diagnose_steps)
    print(f"doctor: {what}, batch {diagnosis.batch_size}, {diagnosis.steps} steps each")
    print(diagnosis)
    return 0


def tune(args: argparse.Namespace) -> int:
    from toolkit.search.tune import tune as search

    if args.across_backends:
        return tune_across(args)
    what, flag_values, config, target, data = _target_of(args)
    result = search(
        target, data, config=config, budget_s=flag_values.tune_budget,
        use_cache=not args.refresh, fresh=chooser_target(args),
    )  # fmt: skip
    source = "cache" if result.cache_hit else f"searched in {result.seconds:.1f} s"
    print(f"tune: {what}, batch {result.batch_words} ({source})")
    print(result.table())
    print(f"best: {result.how_to_apply}")
    return 0


def tune_across(args: argparse.Namespace) -> int:
    from absl import flags

    from toolkit.runner import flags as tk_flags
    from toolkit.search import chooser

    target = chooser_target(args)
    tk_flags.define_common_flags()  # --tune_budget, parsed as tune would
    budget = 120.0
    value = tk_flags.flag_value(args.recipe_flags, "tune_budget")
    if value is not None:
        try:
            budget = float(value)
        except ValueError:
            raise flags.IllegalFlagValueError(
                f"--tune_budget={value!r}: a number of seconds"
            ) from None
    result = chooser.tune_across(target, budget_s=budget)
    print(result.summary())
    return 0


def chooser_target(args: argparse.Namespace) -> Any:
    """The chooser's Target of ``--recipe R`` / ``--model_fn M:F`` and the recipe flags,
    checked here in one line (not in every child)."""
    from toolkit import app
    from toolkit.search.standings import Target

    if not args.model_fn:
        app.check_recipe(args.recipe)  # an unknown recipe: one line listing them, now
        return Target(args.recipe, None, tuple(args.recipe_flags))
    import importlib.util

    module, sep, function = args.model_fn.partition(":")
    sys.path.insert(0, os.getcwd())  # as the children will (a module beside the user)
    if not sep or not module or not function or importlib.util.find_spec(module) is None:
        raise app.UsageError(
            f"--model_fn={args.model_fn!r}: give module:function of a module importable from "
            "here (e.g. mytrain:make)"
        )
    return Target(None, args.model_fn, tuple(args.recipe_flags))


def backends(args: argparse.Namespace) -> int:
    import datetime as dt

    from toolkit.search import chooser

    target = chooser_target(args)
    result = chooser.compare(
        target,
        backends=split(args.backends) or None,
        steps=args.steps,
        rounds=args.rounds,
        use_cache=not args.refresh,
    )
    print(result.summary())
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
    print("written: " + ", ".join(paths[k] for k in ("markdown", "json", "png") if k in paths))
    return 0


def split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]
