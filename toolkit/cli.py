"""The command line as a whole (``keras-perf VERB`` or ``python -m toolkit VERB``): the parser
from the verbs' registry, start-up, and exit codes. Results go to stdout, progress to stderr;
an error is one ``error:`` line, status 2 (the command line) or 1 (a run that could not start)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from toolkit.report import ReportError
from toolkit.verbs import VERBS, Verb

__all__ = ["main"]

DESCRIPTION = (
    "How fast is a Keras training step, why is it not faster, and which settings make it "
    "faster here: measured. Recipes train with `python -m recipes.NAME` (--help "
    "lists their flags); these verbs measure, tune and read reports."
)
DEPRECATED_OPTIONS = {"min-rel": "min_rel"}  # old spellings, still accepted with a note
BY_NAME = {verb.name: verb for verb in VERBS}


def _prog() -> str:
    """``keras-perf`` when run as the console script, else ``python -m toolkit``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name and not name.startswith(("__main__", "-")) else "python -m toolkit"


def parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser, a subparser per verb; a verb passing recipe flags lists them in ``--help``."""
    from toolkit.core.version import __version__

    root = argparse.ArgumentParser(prog=_prog(), description=DESCRIPTION)
    root.add_argument(
        "--version", action="version", version=f"%(prog)s (keras-perf-toolkit {__version__})"
    )
    root.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bars or stage lines (as TOOLKIT_PROGRESS=0); results still print",
    )
    verbs = root.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb in VERBS:
        epilog = _epilog(verb, argv)
        raw = {"formatter_class": argparse.RawDescriptionHelpFormatter} if epilog else {}
        p = verbs.add_parser(
            verb.name, help=verb.help, description=verb.description, epilog=epilog,
            allow_abbrev=not verb.recipe_flags, **raw,  # --batch_size: no prefix of --batch_sizes
        )  # fmt: skip
        verb.options(p)
    return root


def _epilog(verb: Verb, argv: Sequence[str]) -> str | None:
    """``VERB --help``'s epilog for a verb passing flags to a recipe: the recipes and flags."""
    wants_help = any(a in ("-h", "--help") for a in argv)
    named = next((a for a in argv if not a.startswith("-")), None)
    if not (verb.recipe_flags and wants_help and named == verb.name):
        return None
    from toolkit import _argv
    from toolkit.verbs._target import recipe_epilog

    no_recipe = _argv.flag_value(argv, "model_fn")  # the shared flags only
    return recipe_epilog(None if no_recipe else _argv.flag_value(argv, "recipe") or "mlp")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; a closed stdout ends it quietly (141), Ctrl-C and SIGTERM in one line."""
    from toolkit.app import interrupted, with_broken_pipe
    from toolkit.core import interrupts

    status: list[int] = []
    try:
        if argv is None:  # the program itself, not a call from Python
            from toolkit.core import children

            children.bind_to_parent()  # started by the toolkit (data-service): ends with it
            interrupts.install()

        def verb() -> int:
            status.append(_main(argv))
            return status[-1]

        with_broken_pipe(verb)
        interrupts.check()  # one dropped on the way (in a gc callback) is not lost
    except KeyboardInterrupt as e:
        interrupted(e, what=BY_NAME.get(next((a for a in sys.argv[1:] if a in BY_NAME), "")))
    finally:
        if argv is None:
            interrupts.ending()  # one during the frameworks' exit: said after it, 130 or 143
            if interrupts.starting("toolkit"):  # the program itself: none after its last hook
                interrupts.exiting(status[0] if status else None)
    return status[0]


def _main(argv: Sequence[str] | None = None) -> int:
    """Start-up, the verb's own checks, its framework loaded, then the verb: its status."""
    parsed = _parse(list(argv if argv is not None else sys.argv[1:]))
    if isinstance(parsed, int):
        return parsed
    verb, args = parsed
    said = _check(verb, args)  # before anything loads: one line, status 2
    if said is not None:
        from toolkit.core import terminal

        print(terminal.fit(f"error: {said}", terminal.width(sys.stderr)), file=sys.stderr)
        return 2
    _start(verb)
    return _run(verb, args)


def _check(verb: Verb, args: argparse.Namespace) -> str | None:
    """What is wrong with the command line, before frameworks load (config kept on `args`)."""
    from absl import flags

    from toolkit import app
    from toolkit.verbs import _target

    try:
        verb.check(args)
        if getattr(args, "model_fn", None):
            _target.check_spec(args.model_fn)
    except ValueError as e:
        return f"{verb.name}: {e}"
    try:
        if getattr(args, "recipe", None) and not getattr(args, "model_fn", None):
            app.check_recipe(args.recipe)  # the recipes listed, whichever verb names one
        if verb.recipe_flags:
            args.parsed_target = _target.parse_target(args.recipe, args.model_fn, args.recipe_flags)
    except ValueError as e:
        return str(e)
    except flags.Error as e:  # absl's words, on one line, and where the flags are listed
        return f"{' '.join(str(e).split())} ({_prog()} {verb.name} --help lists the flags)"
    return None


def _parse(argv: list[str]) -> tuple[Verb, argparse.Namespace] | int:
    """The verb `argv` names and its arguments, after ``app.start``; 2: backend missing."""
    from toolkit import _argv, app, backend

    argv = _argv.canonical_argv(argv, DEPRECATED_OPTIONS)
    root = parser(argv)
    try:  # before anything imports Keras, which fixes its backend at import
        recipe, model_fn = _argv.flag_value(argv, "recipe"), _argv.flag_value(argv, "model_fn")
        argv = app.start(argv, recipe or "mlp", model_fn)
    except backend.BackendError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args, rest = root.parse_known_args(argv)
    verb = BY_NAME[args.verb]
    if args.quiet:  # for this process and the ones it starts (backends, tune --across_backends)
        os.environ["TOOLKIT_PROGRESS"] = "0"
    if verb.recipe_flags:
        args.recipe_flags = rest  # the recipe's own flags, parsed by absl
    elif rest:
        root.error(f"unrecognized arguments: {' '.join(rest)}")
    return verb, args


def _start(verb: Verb) -> None:
    """The verb's first line on a terminal, then TensorFlow loaded if the verb needs it."""
    from toolkit.core import progress

    if progress.mode() == progress.BAR:
        # Every verb's first line within a second, before anything heavy loads.
        first = "; loading TensorFlow and Keras first" if verb.loads_tensorflow else ""
        progress.say(f"{verb.name}: {verb.help}{first}")
    if verb.loads_tensorflow:
        from toolkit.core import interrupts
        from toolkit.devices import runtime

        with interrupts.held():  # Ctrl-C mid-import would leave modules half loaded: after it
            runtime.load_tensorflow()  # its C++ start-up lines held back, errors kept


def _run(verb: Verb, args: argparse.Namespace) -> int:
    """The verb's status; an error it raises as one ``error:`` line, status 1 or 2. Your code's
    error is status 1, named as yours (type, message, line), not the TensorFlow error around it."""
    from absl import flags

    from toolkit import app
    from toolkit.core.errors import raised_in_your_fit, user_raise

    try:
        return verb.run(args)
    except app.UserCodeError as e:  # --model_fn, a recipe's build_task: named, status 1
        return _failed(e, str(e))
    except Exception as e:
        yours = user_raise(e)
        if yours is not None:  # raised in your code, as it ran: a failed run
            return _failed(e, f"{verb.name} stopped on {yours}; --verbosity=1 shows the traceback")
        fit = raised_in_your_fit(e)  # raised in Keras, running your model: a failed run too
        if fit is not None:
            return _failed(e, f"{verb.name} stopped: {fit}; --verbosity=1 shows the traceback")
        if not isinstance(e, (ReportError, ValueError, FileNotFoundError, flags.Error)):
            raise
        if _run_failed(e):  # a run that could not start or read its data: 1
            return _failed(e, str(e))
        print(f"error: {e}", file=sys.stderr)
        return 2


def _failed(error: BaseException, line: str) -> int:
    """Status 1 after `line`, with `error`'s traceback above it when ``--verbosity=1`` asks."""
    from toolkit import app
    from toolkit.core import terminal

    if app.wants_traceback():
        import traceback

        traceback.print_exception(error, file=sys.stderr)
    print(terminal.fit(f"error: {line}", terminal.width(sys.stderr)), file=sys.stderr)
    return 1


def _run_failed(error: BaseException) -> bool:
    """Whether `error` is a failed run, not a bad command line (looked up: no TensorFlow import)."""
    setup_error = getattr(sys.modules.get("toolkit.runner.task"), "SetupError", None)
    return setup_error is not None and isinstance(error, setup_error)
