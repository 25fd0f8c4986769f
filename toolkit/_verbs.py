"""The verbs that measure a target (``doctor``, ``tune``, ``backends``) and what they share:
``--recipe R [flags]`` or ``--model_fn module:function [flags]`` made into a task or your
``(model, data)``, and the backends chooser's target. The command line itself (the parser,
the other verbs, exit codes) is ``toolkit.cli``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from toolkit.core import terminal
from toolkit.core.files import ReportError

__all__: list[str] = []  # the command line's own; nothing here is API


def model_fn(spec: str) -> tuple[Any, Any]:
    """``(compiled model, data in any form fit takes)`` from ``--model_fn module:function``."""
    import importlib

    from toolkit import app
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
    made = app.call_user(fn, f"--model_fn={spec!r}: {function}()")
    if not (isinstance(made, tuple) and len(made) == 2):  # it ran, and gave the wrong thing
        raise app.UserCodeError(
            f"--model_fn={spec!r}: {function}() returned {type(made).__name__}; it must return "
            "(compiled_model, batched_dataset)"
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
    from toolkit.search.diagnose import diagnose, whole_run_lines

    if args.report:  # a whole run's ledger and its fixes, read from its report alone
        from toolkit.report import RunReport

        report = RunReport.load(args.report)
        if not report.ledger:
            raise ReportError(
                f"{args.report}: this report has no ledger (written before the ledger was "
                "measured, or by a custom loop): run the recipe again and pass its run directory"
            )
        print(f"doctor: the run {report.name} in {args.report}")
        print(terminal.show("\n".join(whole_run_lines(report.ledger))))
        return 0
    what, flag_values, config, target, data = _target_of(args)
    asked = flag_values["diagnose_steps"].present  # else 60, or more for a 0.5 s window
    steps = flag_values.diagnose_steps if asked else None
    diagnosis = diagnose(target, data, config=config, steps=steps)
    print(f"doctor: {what}, batch {diagnosis.batch_size}, {diagnosis.steps} steps each")
    print(terminal.show("\n".join(diagnosis.lines())))
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
    print(terminal.show(result.table()))
    # A command line to copy: whole in a log, folded with "\\" on a terminal (pastes whole).
    print(terminal.fit_command(f"best: {result.how_to_apply}", terminal.width()))
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
    print(terminal.show(result.summary()))
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
    print("written: " + ", ".join(paths[k] for k in ("markdown", "json", "png") if k in paths))
    return 0


def split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def data_service(args: argparse.Namespace) -> int:
    import signal
    import time

    from toolkit import distribute

    if args.worker:
        if not args.dispatcher:
            raise ValueError("data-service --worker: give --dispatcher grpc://host:port")
        distribute.service_address(args.dispatcher, "--dispatcher")
        with _port_taken(args.port):
            server = distribute.serve_worker(args.dispatcher, args.port, args.host)
        what = f"worker of {args.dispatcher}"
    elif args.dispatcher == "":
        with _port_taken(args.port):
            server = distribute.serve_dispatcher(args.port, args.work_dir)
        what = f"dispatcher at grpc://{args.host}:{server.target.rsplit(':', 1)[-1]}"
    else:
        raise ValueError(
            "data-service: give --dispatcher (to run one) or --worker --dispatcher "
            "grpc://host:port (to serve one)"
        )
    # The server runs on its own threads. The main thread waits in Python, not in join() (C++,
    # where signal handlers never run), so SIGTERM and Ctrl-C stop it at once.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"data-service: {what} serving (Ctrl-C to stop)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(0.5)
    del server
    return 0


def data_service_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dispatcher",
        nargs="?",
        const="",
        default=None,
        help="alone: run a dispatcher; with --worker: the dispatcher's grpc://host:port",
    )
    p.add_argument("--worker", action="store_true", help="run a worker")
    p.add_argument("--port", type=int, default=0, help="port to listen on (0: any free one)")
    p.add_argument("--host", default="localhost", help="the name others reach this host by")
    p.add_argument("--work_dir", help="dispatcher: journal dir (restarts keep their jobs)")


@contextlib.contextmanager
def _port_taken(port: int) -> Iterator[None]:
    """TensorFlow's "Could not start gRPC server" (a port in use, or not this host's to
    bind) as one line naming --port (gRPC's own line about it held back)."""
    from toolkit.core import native_logs

    try:
        with native_logs.held():
            yield
    except RuntimeError as e:
        if "grpc" not in str(e).lower():
            raise
        from toolkit.runner.task import SetupError  # a run that cannot start: status 1

        raise SetupError(
            f"data-service: --port={port}: could not listen there (in use by another "
            "process?): choose another port, or 0 for any free one"
        ) from None


# A verb's options that the command line's parser types but does not bound: checked before
# anything runs, in the settings' words (toolkit.runner.config.check_number). backends'
# --steps and --rounds are its own function's to check (toolkit.search.chooser).
OPTION_CHECKS: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    # --min_rel of 1 or more would make every band too wide for a verdict (report.comparison)
    "compare": (("z", {"above": 0}), ("min_rel", {"least": 0, "most": 0.9})),
    "trace": (("ops", {"integer": True, "least": 0}),),
    "placement": (("batch_size", {"integer": True, "least": 1}),),
    "ops": (("repeats", {"integer": True, "least": 1}), ("min_time", {"above": 0})),
    "data-service": (("port", {"integer": True, "least": 0, "most": 65535}),),
}


def check_options(verb: str, args: argparse.Namespace) -> None:
    """ConfigError naming the first of `verb`'s options out of its range (a port past 65535,
    --z that is not a positive number), before anything loads or runs."""
    from toolkit.runner.config import PRECISIONS, ConfigError, check_number

    for name, bounds in OPTION_CHECKS.get(verb, ()):
        check_number(f"--{name}", getattr(args, name, None), **bounds)
    if verb == "preflight" and args.precision not in PRECISIONS:
        raise ConfigError(
            f"--precision must be one of {', '.join(PRECISIONS)}, got {args.precision!r}"
        )
    if verb == "data-service" and args.host is not None and not args.host.strip():
        raise ConfigError("--host must name this host as others reach it, got ''")
    if verb == "data-service" and args.worker and args.dispatcher:
        from toolkit import distribute

        distribute.service_address(args.dispatcher, "--dispatcher")
