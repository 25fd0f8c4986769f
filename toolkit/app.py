"""The one app main: load a recipe, parse its flags, build its task, and run it. A recipe
(``recipes/<name>.py``) describes *what* to train as a ``build_task`` function and ends with
``main = app.recipe_main(build_task)``; everything else a recipe run does is here, once.
Errors end the program with one line ``error: ...`` on stderr and no traceback: status 2 for a
bad flag or setting, 1 for a run that cannot start or stopped on an error (its partial summary
first). ``--verbosity=1`` prints the traceback above the line."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import inspect
import os
import pkgutil
import sys
import traceback
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from absl import flags

from toolkit import _argv, backend
from toolkit.core import interrupts, progress, terminal
from toolkit.core.errors import one_line, user_raise
from toolkit.runner import flags as tk_flags
from toolkit.runner.config import ConfigError, TrainConfig

if TYPE_CHECKING:  # the runner imports Keras: loaded when a run starts, not with this module
    from toolkit.report._diagnosis import DiagnosisSection
    from toolkit.report._tune import TuneSection
    from toolkit.runner.train import Task
    from toolkit.search.standings import Target

__all__ = [
    "UsageError",
    "recipe_main",
    "recipe_names",
    "run",
    "run_recipe",
]

HELP_FLAGS = ("-h", "--help", "-?", "--helpshort")
INFO_FLAGS = (*HELP_FLAGS, "--helpfull", "--version")  # print only: start() skips them

RECIPES_PACKAGE = "recipes"
UNTIMED_STATUS = 3  # a run that timed no step: neither a pass (0) nor a failed run (1)


class UsageError(ValueError):
    """A command line that names something that is not there (a recipe, a function)."""


class UserCodeError(RuntimeError):
    """A user's function raised: one line naming it and its exception, status 1."""


def call_user(fn: Callable[[], Any], what: str, passes: tuple[type, ...] = ()) -> Any:
    """``fn()``; its exception (but `passes`) becomes a :class:`UserCodeError` naming `what`."""
    try:
        return fn()
    except passes:
        raise
    except Exception as e:
        raise UserCodeError(
            f"{what} raised {one_line(e)}; --verbosity=1 shows the traceback"
        ) from e


_OURS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), package, "")
    for package in ("toolkit", "recipes")
)


def _is_ours(fn: Callable[..., Any]) -> bool:
    """Whether `fn` is the toolkit's or recipes' code (its errors are input errors), not yours."""
    code = getattr(fn, "__code__", None)
    return code is not None and os.path.abspath(code.co_filename).startswith(_OURS)


def fail(error: BaseException, status: int = 1, cause: BaseException | None = None) -> NoReturn:
    """Ends with ``error: ...`` on stderr and `status`; ``--verbosity=1``: the traceback above."""
    from toolkit.distribute import processes

    if wants_traceback():
        traceback.print_exception(cause or error, file=sys.stderr)
    print(terminal.fit(f"error: {error}", terminal.width(sys.stderr)), file=sys.stderr)
    processes.leave(status)  # a process of a cluster ends here: its peers may be gone
    raise SystemExit(status) from None


def wants_traceback() -> bool:
    """Whether ``--verbosity`` (absl's, parsed) asks for tracebacks above error lines."""
    f = flags.FLAGS
    return f.is_parsed() and "verbosity" in f and (f["verbosity"].value or 0) >= 1


def _partial_summary(error: BaseException) -> str | None:
    """Prints a stopped run's partial summary (before the error line); returns its report's dir."""
    for e in (error, error.__cause__):
        report = getattr(e, "toolkit_report", None)
        if report is not None:
            print(report.summary())
            return getattr(e, "toolkit_run_dir", None)
    return None


def interrupted(error: KeyboardInterrupt, what: Any = None) -> NoReturn:
    """Ends an interrupted run: partial summary, where its report is, status 128 + the signal."""
    import signal

    # Not a module that imports Keras: the interrupt may have come while it was loading.
    run_dir = _partial_summary_kept(error) if what is None else None  # a verb's: not a run's
    signum = interrupts.signal_of(error)
    where = f"the partial report is in {run_dir}" if run_dir else "no report was written"
    report = getattr(error, "toolkit_report", None)
    if report is not None and report.status == "complete" and run_dir:  # as it was written
        where = f"the run had ended: its report is in {run_dir}"
    if what is not None:  # a verb (its object): nothing of a run to say
        where = f"{what.name} stopped before it finished"
    with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
        print(f"interrupted by {signal.Signals(signum).name}: {where}", file=sys.stderr)
    interrupts.said()  # one more signal on the way out: no second line
    from toolkit.distribute import processes

    processes.leave(128 + signum)
    raise SystemExit(128 + signum) from None


def _partial_summary_kept(error: BaseException) -> str | None:
    """:func:`_partial_summary`, with the report said even when stdout cannot take the summary."""
    try:
        return _partial_summary(error)
    except OSError:
        for e in (error, error.__cause__):
            if getattr(e, "toolkit_report", None) is not None:
                return getattr(e, "toolkit_run_dir", None)
        return None


def recipe_names() -> list[str]:
    """The recipes under ``recipes/``, sorted."""
    try:
        package = importlib.import_module(RECIPES_PACKAGE)
    except ModuleNotFoundError:
        return []
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.ispkg)


def check_recipe(name: str) -> str:
    """`name` when ``recipes/<name>.py`` exists (nothing is imported).

    Raises:
        UsageError: no such recipe; the message lists the recipes there are."""
    names = recipe_names()
    if name not in names:
        raise UsageError(
            f"--recipe: no recipe named {name!r}; the recipes are {', '.join(names) or 'none'}"
        )
    return name


def check_started_recipe() -> None:
    """``python -m recipes.NAME`` with no such recipe: the recipes in one line, status 2."""
    argv = list(getattr(sys, "orig_argv", ()))
    if "-m" not in argv[:-1]:
        return
    package, _, name = argv[argv.index("-m") + 1].partition(".")
    if package != RECIPES_PACKAGE or name in recipe_names():
        return
    try:
        check_recipe(name or "")
    except UsageError as e:
        said = f"no recipe named {name!r}" if name else "give a recipe"
        listed = str(e).split("; ", 1)[-1]
        print(f"error: python -m recipes.NAME: {said}; {listed}", file=sys.stderr)
        raise SystemExit(2) from None


def load_recipe(name: str) -> types.ModuleType:
    """The recipe module ``recipes.<name>`` (importing it defines its flags).

    Raises:
        UsageError: no such recipe; the message lists the recipes there are."""
    return importlib.import_module(f"{RECIPES_PACKAGE}.{check_recipe(name)}")


def recipe_task(build_task: Callable[..., Task], params: dict[str, Any]) -> Task:
    """``build_task(**params)``, its errors said as its own.

    Raises:
        ValueError, FileNotFoundError: the toolkit's recipes' data or settings.
        UserCodeError: a recipe of yours whose ``build_task`` raised, naming it."""
    name = f"{_module_name(sys.modules.get(build_task.__module__) or types.ModuleType('recipe'))}"
    # The recipes' own errors are one line (exit 2); yours are named with what they raised (exit 1).
    ours = (ValueError, OSError) if _is_ours(build_task) else (ConfigError,)
    return call_user(lambda: build_task(**params), f"{name}.build_task()", ours)


def recipe_target(
    recipe: str | None,
    model_fn: str | None,
    build_task: Callable[..., Task] | None,
    flag_values: flags.FlagValues,
    config: TrainConfig,
) -> Target:
    """The Target a fresh process rebuilds this run from: recipe (or M:F), changed args, config."""
    from toolkit.search.standings import Target

    params: dict[str, Any] = {}
    if build_task is not None:
        given = tk_flags.kwargs_from_flags(build_task, flag_values)
        signature = inspect.signature(build_task).parameters
        params = {k: v for k, v in given.items() if k not in signature
                  or v != signature[k].default}  # fmt: skip
    return Target(recipe, model_fn, params, config.to_dict())


def run_recipe(build_task: Callable[..., Task]) -> None:
    """Runs a parsed recipe: settings, report dir, data checked first; then searches and the run."""
    from toolkit.runner.task import SetupError, check_report_dir

    try:
        config = tk_flags.config_from_flags()  # the settings alone: no framework needed
        params = tk_flags.kwargs_from_flags(build_task)  # the task's, from the same flags
        check_report_dir(flags.FLAGS.report_dir)
        check_report_dir(flags.FLAGS.backup_dir, "--backup_dir", "or leave --backup_dir out")
        chosen = backend.find()  # what this backend cannot run (the run checks it again)
        if chosen is not None:
            chosen.check_config(config.effective(say=False))  # as the run will have it
        if _is_ours(build_task):
            _check_data_files(params, config)
    except ConfigError as e:
        fail(e, 2)
    except (SetupError, ValueError, FileNotFoundError) as e:
        fail(e)
    _load_frameworks(build_task)
    from toolkit.runner.train import run

    try:  # the config and the task's parameters read above, once
        task = recipe_task(build_task, params)
    except ConfigError as e:
        fail(e, 2)
    except (ValueError, FileNotFoundError, UserCodeError) as e:  # data and paths: checked here
        fail(e)
    try:
        config, tuned, diagnosis = _before_the_run(build_task, task, config)
        result = run(
            task, config, args=tk_flags.flags_for_report(), diagnosis=diagnosis, tune=tuned
        )
        # From here a signal is said as the program ends (130, 143), what was kept first.
        where = f"its report is in {result.run_dir}" if result.run_dir else "no report dir"
        interrupts.ending(f"the run had ended: {where}")
    except SetupError as e:
        _partial_summary(e)  # its message already says where the partial report is
        fail(e)
    except Exception as e:  # noqa: BLE001 - training stopped: what was measured, then one line
        _stopped(e)
    _said(result, smoke=config.smoke)


def _check_data_files(params: dict[str, Any], config: TrainConfig) -> None:
    """A toolkit recipe's ``--dataset``, checked before frameworks load (yours may differ)."""
    from toolkit.data import catalog
    from toolkit.runner import _data

    dataset = params.get("dataset")
    if isinstance(dataset, str):  # the recipe's fraction where it has one, else load's default
        split = {k: v for k, v in params.items() if k == "validation_fraction"}
        count = catalog.training_files(dataset, **split)
        if count is not None:
            _data.check_training_count(count, config)


def _load_frameworks(build_task: Callable[..., Task]) -> None:
    """TensorFlow and Keras loaded after a line (no silent seconds), C++ lines held, Ctrl-C kept."""
    from toolkit.devices import runtime

    short = _program(sys.modules.get(build_task.__module__) or types.ModuleType("recipe"))[1]
    with interrupts.held():
        progress.say(
            f"{short}: loading TensorFlow and Keras ({backend.name()}), then data and model"
        )
        runtime.load_tensorflow()  # its C++ start-up lines held back, errors kept
        from toolkit.core import compat

        compat.keras()


def _before_the_run(
    build_task: Callable[..., Task], task: Task, config: TrainConfig
) -> tuple[TrainConfig, TuneSection | None, DiagnosisSection | None]:
    """``--autotune`` and ``--diagnose`` when asked: ``(config, tune's section, the diagnosis)``."""
    f = flags.FLAGS
    tuned = diagnosis = None
    if f.autotune:
        from toolkit.search.tune import autotune

        config, result = autotune(
            task, config, budget_s=f.tune_budget, fresh=_fresh_target(build_task, config),
            confirm=f.tune_confirm, skip_words="--notune_confirm",
        )  # fmt: skip
        print(terminal.show(result.table()))
        print(f"autotune: {result.best.flags()}")
        tuned = result.section()
    if f.diagnose:
        from toolkit.search.diagnose import diagnose

        asked = f["diagnose_steps"].present  # else 60, or more for a 0.5 s window
        found = diagnose(task, config, steps=f.diagnose_steps if asked else None)
        print(terminal.show(str(found)))
        diagnosis = found.section()
    return config, tuned, diagnosis


def _stopped(e: Exception) -> NoReturn:
    """Training stopped on `e`: the partial summary, then one line: why, and where the report is."""
    run_dir = _partial_summary(e)
    where = f" (the partial report is in {run_dir})" if run_dir else ""
    from toolkit.distribute import processes

    report = getattr(e, "toolkit_report", None)
    lost = processes.lost_peer(e, report.steps.total_steps if report is not None else None)
    if lost is not None:
        fail(RuntimeError(f"{lost}{where}"), cause=e)
    if isinstance(e, MemoryError) or type(e).__name__ == "ResourceExhaustedError":
        stage = "training" if report is not None else "setting up the data and model"
        fail(
            RuntimeError(
                f"out of memory while {stage} ({one_line(e, 160)}){where}: lower "
                "--batch_size, the image or model size, or free memory"
            ),
            cause=e,
        )
    # Your own exception as raised (not TensorFlow's UnknownError around it), else its one line.
    said = user_raise(e) or one_line(e)
    fail(
        RuntimeError(f"training stopped on {said}{where}; --verbosity=1 shows the traceback"),
        cause=e,
    )


def _said(result: Any, smoke: bool = False) -> None:
    """A finished run's summary, files; one line if failed (``--smoke`` timing nothing passes)."""
    print(result.report.summary())  # folded on a terminal
    for kind, path in sorted(result.paths.items()):
        print(f"{kind}: {path}")
    if result.paths and "png" not in result.paths:
        print("png: not written (report.md says why)")
    if result.write_error:  # the summary above is on stdout: nothing measured is lost
        fail(
            RuntimeError(
                f"the report could not be written under {result.run_dir} "
                f"({result.write_error}): the summary above is what was kept; free space or "
                "choose another --report_dir"
            )
        )
    if result.report.status != "complete":  # e.g. a loss that went NaN: a failed run
        which = "partial report" if result.report.status == "partial" else "report"
        where = f" (the {which} is in {result.run_dir})" if result.run_dir else ""
        untimed = result.report.status == "untimed"
        if untimed and smoke:
            said = f"note: a --smoke run: it ran, and timed nothing{where}"
            print(terminal.fit(said, terminal.width(sys.stderr)), file=sys.stderr)
            return
        fail(RuntimeError(f"{result.report.error}{where}"), UNTIMED_STATUS if untimed else 1)


def _module_name(module: types.ModuleType) -> str:
    """``recipes.cnn`` for ``python -m recipes.cnn`` (whose ``__name__`` is ``__main__``)."""
    spec = getattr(module, "__spec__", None)
    return getattr(spec, "name", None) or module.__name__


def _fresh_target(build_task: Callable[..., Task], config: TrainConfig) -> Target | None:
    """Where ``--autotune`` confirms its pick in fresh processes; None outside ``recipes/``."""
    name = _module_name(sys.modules.get(build_task.__module__) or types.ModuleType("recipe"))
    package, _, short = name.rpartition(".")
    if package != RECIPES_PACKAGE or short not in recipe_names():
        return None
    return recipe_target(short, None, build_task, flags.FLAGS, config)


def _program(module: types.ModuleType) -> tuple[str, str]:
    """``("python -m recipes.cnn", "cnn")``: how the recipe was run, and its short name."""
    name = _module_name(module)
    if name != "__main__":
        return f"python -m {name}", name.rpartition(".")[2]
    typed = sys.argv[0] if sys.argv and sys.argv[0].endswith(".py") else None
    path = typed or getattr(module, "__file__", None) or "recipe.py"
    return f"python {path}", os.path.splitext(os.path.basename(path))[0]


def recipe_help(module: types.ModuleType) -> str:
    """A recipe's ``--help``: its docstring, its own flags, then the shared flags by group."""
    own = tk_flags.own_flags(module.__name__) or tk_flags.own_flags(_module_name(module))
    program, short = _program(module)
    return tk_flags.help_text(program, module.__doc__, own, title=f"{short} flags")


def run(main: Callable[[list[str]], None]) -> None:
    """Runs a recipe's absl `main`: help, version, old spellings, a closed stdout, signals."""
    try:
        interrupts.install()  # raises one that came while the program was imported
        _run(main)
        interrupts.check()  # one dropped on the way (in a gc callback) is not lost
    except KeyboardInterrupt as e:
        interrupted(e)
    finally:
        interrupts.ending()  # one during the frameworks' exit: said after it, 130 or 143
        interrupts.exiting()  # ... and none after it: the program ends at its last hook


def _run(main: Callable[[list[str]], None]) -> None:
    from absl import app as absl_app

    from toolkit.backend import BackendError
    from toolkit.core.version import __version__

    args = sys.argv[1:]
    module = sys.modules[getattr(main, "__module__", "__main__")]
    if any(a in HELP_FLAGS for a in args):
        with_broken_pipe(lambda: print(recipe_help(module), end=""))
        raise SystemExit(0)
    if "--version" in args:
        print(f"{_module_name(module)} (keras-perf-toolkit {__version__})")
        raise SystemExit(0)
    program, short = _program(module)
    try:  # --helpfull (absl's) starts nothing either; start() reads the argv as typed
        started = args if set(INFO_FLAGS) & set(args) else start(args, short, build_task=main)
        sys.argv[1:] = _argv.canonical_argv(started)
    except BackendError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None

    def parse(argv: list[str]) -> list[str]:
        """absl's parsing, with a bad flag in one ``error:`` line and status 2."""
        try:
            return flags.FLAGS(argv)
        except flags.Error as e:
            print(f"error: {' '.join(str(e).split())} ({program} --help lists the flags)",
                  file=sys.stderr)  # fmt: skip
            raise SystemExit(2) from None

    with_broken_pipe(lambda: absl_app.run(main, flags_parser=parse))


def start(
    argv: Sequence[str],
    recipe: str | None,
    model_fn: str | None = None,
    build_task: Callable[..., Any] | None = None,
) -> list[str]:
    """The start-up of every program here, first thing and once: Keras fixes its backend at
    import and TensorFlow reads its log level and XLA's flags when it loads, so these are read
    before anything parses the command line; ``--backend=auto`` becomes ``backends``' winner.

    Returns:
        `argv` (without the program's name) with ``--backend=auto`` resolved.

    Raises:
        toolkit.backend.BackendError: a backend not installed, or not the one already loaded."""
    started = _argv.start_flags(argv)
    if (started.backend or "").strip().lower() == "auto":
        from toolkit.search import chooser

        target = _auto_target(argv, recipe, model_fn, build_task)
        chosen = chooser.resolve_auto(target)  # reads a cache: no framework
        argv = _argv.with_value(argv, "backend", "auto", chosen)
        started = dataclasses.replace(started, backend=chosen)
    begin(started)
    return list(argv)


def begin(started: _argv.StartFlags) -> None:
    """Before a framework loads: C++ logs held (unless ``TF_CPP_MIN_LOG_LEVEL``), backend, cache."""
    import logging as std_logging

    from toolkit.core import native_logs

    native_logs.configure(started.verbosity)
    std_logging.getLogger("toolkit").setLevel(std_logging.WARNING)  # they print the files
    _argv.apply_start_flags(started)  # before anything starts a framework


def _auto_target(
    argv: Sequence[str],
    recipe: str | None,
    model_fn: str | None,
    build_task: Callable[..., Any] | None,
) -> Target:
    """The target ``--backend=auto`` asks about, parsed into a copy of the flags (absl's)."""
    from toolkit.search.standings import Target

    recipe = None if model_fn else recipe
    if build_task is None and recipe in recipe_names():
        build_task = getattr(load_recipe(str(recipe)), "build_task", None)
    build_task = getattr(build_task, "toolkit_build_task", build_task)
    tk_flags.define_common_flags()
    values = copy.deepcopy(flags.FLAGS)
    try:
        values(["start", *_argv.canonical_argv(argv, note=lambda _line: None)], known_only=True)
        config = tk_flags.config_from_flags(values, validate=False)
    except (flags.Error, ConfigError):
        return Target(recipe, model_fn)
    return recipe_target(recipe, model_fn, build_task, values, config)


def with_broken_pipe(fn: Callable[[], int | None]) -> None:
    """Calls `fn`; a gone or closed stdout ends quietly (141); unencodable ``×`` is ``x``."""
    closed = _fill_closed_streams()
    terminal.plain_streams()
    status = None
    try:
        try:
            status = fn()
        finally:  # also when fn ends the program (SystemExit): what it printed must get out
            sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # Python flushes stdout again at exit
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(141) from None
    except SystemExit as e:
        if closed and e.code in (0, None):
            raise SystemExit(141) from None
        raise
    if closed and not status:
        raise SystemExit(141)


def _fill_closed_streams() -> bool:
    """Puts /dev/null on a standard stream closed at start (``>&-``), or the next file opened
    takes descriptor 1 or 2 and printing lands in a report. Whether stdout was closed."""
    closed = False
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        setattr(sys, name, open(fd, "w", encoding="utf-8", closefd=False))  # noqa: SIM115
        closed = closed or fd == 1
    return closed


def recipe_main(build_task: Callable[..., Task]) -> Callable[[list[str]], None]:
    """The absl ``main`` of a recipe: ``app.run(recipe_main(build_task))``."""

    def main(argv: list[str]) -> None:
        if len(argv) > 1:
            fail(UsageError(f"unexpected arguments: {' '.join(argv[1:])}"), 2)
        try:
            run_recipe(build_task)
        except KeyboardInterrupt as e:  # Ctrl-C (130) or SIGTERM (143): what was measured is kept
            interrupted(e)

    main.__module__ = build_task.__module__  # app.run finds the recipe (its doc, its flags)
    main.toolkit_build_task = build_task  # type: ignore[attr-defined]  # start() reads its target
    return main
