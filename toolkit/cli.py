"""The toolkit's command line (``keras-perf VERB`` or ``python -m toolkit VERB``).

The verbs are one table, :data:`VERBS`: each verb's options, what it runs, whether it loads
TensorFlow first and whether the flags after its target go on to a recipe (``doctor``,
``tune``, ``backends``); the parser, ``--help`` and the verb lists come from it. The README's
verb table says what each does. Measuring verbs live in ``toolkit._verbs``; results go to
stdout, progress to stderr, and an error is one ``error:`` line with status 2 (the command
line) or 1 (a run that could not start).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from toolkit import _verbs
from toolkit.core import terminal
from toolkit.report import (
    ReportError,
    RunReport,
    compare,
    merge_reports,
    render_merged,
)

__all__ = ["main"]

DESCRIPTION = (
    "How fast is a Keras training step, why is it not faster, and which settings make it "
    "faster here: measured. Recipes train with `python -m recipes.NAME` (--help "
    "lists their flags); these verbs measure, tune and read reports."
)
# --size tiny's (repeats, shortest loop in s): a smoke run, not a measurement to keep.
TINY_TIMING = (3, 0.005)
# Old spellings of verb options, still accepted with a one-line note.
DEPRECATED_OPTIONS = {"min-rel": "min_rel"}


def _prog() -> str:
    """``keras-perf`` when run as the console script, else ``python -m toolkit``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return (
        name if name and not name.startswith("__main__") and name != "-m" else "python -m toolkit"
    )


def _recipe_epilog(recipe: str | None) -> str:
    """For ``doctor|tune|backends --help``: the recipes, and the recipe flags passed on
    (the recipe's own when ``--recipe`` names one), grouped as a recipe's ``--help``."""
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


def _compare(args: argparse.Namespace) -> int:
    """Status 1 with ``--fail_on_slower`` when B is slower beyond the noise band: a
    regression fails the CI job that asked, as pytest-benchmark's and asv's do."""
    a, b = RunReport.load(args.a), RunReport.load(args.b)
    result = compare(a, b, z=args.z, min_rel=args.min_rel)
    print(json.dumps(result.to_dict(), indent=2) if args.json else terminal.show(result.render()))
    if args.fail_on_slower and result.verdict == "slower":
        print(
            f"compare: B is slower than A beyond the noise band ({result.ratio:.2f}× A's "
            "speed): failing, as --fail_on_slower asks",
            file=sys.stderr,
        )
        return 1
    if args.fail_on_slower and result.verdict in ("unknown", "different workloads", "too noisy"):
        # A gate does not pass on nothing, nor on two runs it cannot compare; nor does it say
        # "slower" where the noise band is too wide to say anything.
        why = {
            "unknown": "a report has no timed steps",
            "different workloads": "A and B are different workloads",
            "too noisy": f"the runs are too noisy: a ±{(result.noise or 0) * 100:.1f}% noise band",
        }[result.verdict]
        print(
            f"compare: cannot tell whether B is slower ({why}): failing, as --fail_on_slower asks",
            file=sys.stderr,
        )
        return 1
    return 0


def _show(args: argparse.Namespace) -> int:
    report = RunReport.load(args.report)
    if args.json:
        print(report.to_json())
    else:
        shown = terminal.fit(report.summary(), terminal.width())
        print(report.to_markdown() if args.markdown else shown)
    return 0


def _trace(args: argparse.Namespace) -> int:
    from toolkit.report.trace import find_trace_files, read_trace, trace_lines

    path = os.path.abspath(args.run)
    if os.path.isfile(path) or os.path.isfile(os.path.join(path, "report.json")):
        analysis = RunReport.load(path).read_trace()
        where = f"the trace of {path}"
    elif os.path.isdir(path):
        files = find_trace_files(path)
        analysis = read_trace(files) if files else None
        where = f"{len(files)} trace file(s) under {path}"
    else:
        raise ReportError(f"{args.run!r}: no such run directory or report")
    if analysis is None:
        raise ReportError(
            f"{path}: no profiler trace in it (*.xplane.pb, *.pt.trace.json): run the recipe "
            "with --profile_steps=START,STOP to capture one"
        )
    print(f"{where}:")
    print(terminal.fit("\n".join(trace_lines(analysis, ops=args.ops)), terminal.width()))
    return 0 if analysis.get("steps") or any(analysis.get("top_ops", {}).values()) else 1


def _devices(args: argparse.Namespace) -> int:
    from toolkit import backend, devices

    # one backend, or every installed one, each as it sees this machine
    chosen = [args.backend] if args.backend else list(backend.installed())
    for name in chosen:
        print(f"--backend={name}")
        for device in devices.detect(name):
            policy, why = devices.recommend_precision(device)
            print(f"  {device}\n      precision hint: {policy} ({why})")
    return 0


def _preflight(args: argparse.Namespace) -> int:
    from toolkit import devices

    device = devices.resolve(args.device)
    findings = devices.preflight(device, policy=args.precision, jit_compile=args.jit_compile)
    print(f"preflight for {device} on --backend={backend_name()}")
    for finding in findings:
        print(f"  {finding}")
    if not findings:
        print("  no known traps")
    return 1 if any(f.severity == "error" for f in findings) else 0


def _placement(args: argparse.Namespace) -> int:
    from toolkit import app

    app.check_recipe(args.recipe)  # before TensorFlow starts: one line listing the recipes
    from toolkit import devices
    from toolkit.runner import train
    from toolkit.runner.config import TrainConfig

    recipe = app.load_recipe(args.recipe)
    device = devices.select(args.device)
    task = recipe.build_task()
    model = task.build_model()
    model.compile(optimizer="adam", loss=task.loss, metrics=list(task.metrics))
    # The runner's own input: tf.data, array batches (a PyDataset) without TensorFlow, or a
    # Grain pipeline (--data_loader).
    pipeline = train.input_pipeline(task, TrainConfig(batch_size=args.batch_size))
    if hasattr(pipeline, "as_numpy_iterator"):
        batch = next(pipeline.as_numpy_iterator())
    elif hasattr(pipeline, "__getitem__"):
        batch = pipeline[0]
    else:
        batch = next(iter(pipeline))
    report = devices.placement_report(
        lambda: model.train_on_batch(*batch), gpu_selected=device.is_gpu
    )
    print(f"placement of one {args.recipe} training step on {device} (--backend={backend_name()})")
    print(report.render())
    return 0


def _fusion(args: argparse.Namespace, found: list[Any], timing: dict[str, Any], out: str) -> int:
    from toolkit.bench import fusion
    from toolkit.bench.measure import MODES, select_modes
    from toolkit.core.stats import format_flops
    from toolkit.profiling.flops import matmul_peak

    modes = tuple(m for m in select_modes(_verbs.split(args.modes)) if m in MODES)
    if not modes:
        raise ValueError("ops --fusion: --modes must name TensorFlow's eager, graph or xla")
    demos = [
        demo
        for device in found
        for demo in fusion.fusion_demos(
            args.size, device=device, dtype=args.dtype, modes=modes, **timing
        )
    ]
    for demo in demos:
        print(demo.render() + "\n")
    for device in found:
        peak = matmul_peak(device, args.dtype)
        print(
            f"for scale: {device.kind}:{device.index}'s measured {args.dtype} matmul peak is "
            f"{format_flops(peak['flops_per_s'], per_second=True)} ({peak['source']})"
        )
    paths = fusion.write(demos, out, {"size": args.size, "dtype": args.dtype, **timing})
    print(f"written: {paths['markdown']}, {paths['json']}")
    return 0


def _ops(args: argparse.Namespace) -> int:
    import datetime as dt

    from toolkit import devices

    found = devices.detect("tensorflow")  # the op table measures TensorFlow's modes
    if args.device != "all":
        found = [devices.resolve(args.device, found, backend="tensorflow")]
    # --size tiny is a smoke run (seconds): fewer, shorter loops unless asked otherwise.
    repeats, min_time = TINY_TIMING if args.size == "tiny" else (5, 0.05)
    timing = {
        "repeats": repeats if args.repeats is None else args.repeats,
        "min_time_s": min_time if args.min_time is None else args.min_time,
    }
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    if args.fusion:
        return _fusion(args, found, timing, args.out or os.path.join("runs", f"fusion-{stamp}"))

    from toolkit.bench import frameworks
    from toolkit.bench.measure import DEFAULT_MODES, MODES, benchmark, select_modes
    from toolkit.core import progress

    # Default: TensorFlow's modes, and JAX's jit and PyTorch eager where they are installed.
    default = [m for m in DEFAULT_MODES if m in MODES or not frameworks.missing(m)]
    for mode in DEFAULT_MODES:
        if mode not in default and not args.modes:  # a column that vanished, said once
            frameworks.note_missing(mode, f"ops: no {mode} column")
    table = benchmark(
        _verbs.split(args.ops),
        select_modes(_verbs.split(args.modes), default),
        size=args.size,
        devices=found,
        dtype=args.dtype,
        progress=progress.say,  # a line per op; a bar of the cells on a terminal
        **timing,
    )
    paths = table.write(args.out or os.path.join("runs", f"ops-{stamp}"), plot=not args.no_plot)
    print(table.to_terminal())  # the average table; the whole one is in ops.md
    written = [os.path.basename(paths[k]) for k in ("csv", "json", "png") if k in paths]
    print(f"whole table: {paths['markdown']} (beside it: {', '.join(written)})")
    return 0


def _merge(args: argparse.Namespace) -> int:
    merged = merge_reports([RunReport.load(path) for path in args.reports])
    print(render_merged(merged))
    return 0 if merged["all_complete"] else 1


def _add_target(parser: argparse.ArgumentParser, what: str) -> None:
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


def backend_name() -> str:
    from toolkit import backend

    return backend.name()


def _add_backend(p: argparse.ArgumentParser, what: str | None = None) -> None:
    from toolkit import backend

    p.add_argument(
        "--backend",
        choices=backend.names(),
        help=what or "Keras backend (default: KERAS_BACKEND, else tensorflow)",
    )


# ---------------------------------------------------------------------------- each verb's options


def _compare_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="baseline: report.json or its run directory")
    p.add_argument("b", help="candidate: report.json or its run directory")
    p.add_argument("--z", type=float, default=3.0, help="standard errors a change must exceed")
    p.add_argument("--min_rel", type=float, default=0.01, help="smallest relative change (0.01)")
    p.add_argument("--json", action="store_true", help="the comparison as JSON, on stdout")
    p.add_argument(
        "--fail_on_slower",
        "--fail-on-slower",
        action="store_true",
        help="exit 1 when B is slower than A beyond the noise band (a regression in CI), or "
        "when that cannot be told (no timed steps, different workloads, a noise band of ±100%% "
        "or wider)",
    )


def _show_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", help="report.json or its run directory")
    p.add_argument("--markdown", action="store_true", help="the full Markdown report")
    p.add_argument("--json", action="store_true", help="the report's JSON, as report.json holds")


def _trace_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory (or report.json), or any directory of traces")
    p.add_argument("--ops", type=int, default=10, help="top ops to list per side (10)")


def _devices_options(p: argparse.ArgumentParser) -> None:
    _add_backend(p, "the backend to ask (default: every installed one)")


def _preflight_options(p: argparse.ArgumentParser) -> None:
    _add_backend(p)
    p.add_argument("--device", default="auto", help="auto, cpu, gpu, cuda, metal (mps)[:index]")
    p.add_argument("--precision", default="float32", help="float32, mixed_float16, mixed_bfloat16")
    p.add_argument("--jit_compile", action="store_true", help="the run will compile with XLA")


def _placement_options(p: argparse.ArgumentParser) -> None:
    _add_backend(p)
    p.add_argument(
        "--recipe", default="mlp", help="a recipe under recipes/ (doctor --help lists them)"
    )
    p.add_argument("--device", default="auto", help="auto, cpu, gpu, cuda, metal (mps)[:index]")
    p.add_argument("--batch_size", type=int, default=32)


def _doctor_options(p: argparse.ArgumentParser) -> None:
    _add_target(p, "diagnose")
    p.add_argument(
        "--report",
        help="a run's report.json or run directory: where that whole run's time went and what "
        "each fix would save (its ledger), read from the report alone; nothing is measured",
    )


def _tune_options(p: argparse.ArgumentParser) -> None:
    _add_target(p, "tune")
    p.add_argument("--refresh", action="store_true", help="search again, ignoring the cache")
    p.add_argument(
        "--across_backends",
        action="store_true",
        help="the backend as one more axis: a search per installed backend (each a fresh "
        "process), then their winners and the defaults head to head",
    )


def _backends_options(p: argparse.ArgumentParser) -> None:
    _add_target(p, "compare")
    p.add_argument("--backends", help="comma-separated (default: every installed one)")
    p.add_argument("--steps", type=int, default=200, help="training steps per run (200)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--out", help="output directory (default runs/backends-<time>)")
    p.add_argument("--refresh", action="store_true", help="measure again, ignoring the cache")
    p.add_argument("--no_plot", action="store_true", help="skip the PNG chart")


def _ops_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", help="comma-separated op names (default: all 21)")
    p.add_argument(
        "--modes",
        help="comma-separated: eager,graph,xla (TensorFlow), jax_jit, torch_eager, "
        "torch_compile, or all (default: TensorFlow's three, jax_jit and torch_eager where "
        "installed; torch_compile compiles every case anew, seconds each: name it)",
    )
    p.add_argument(
        "--size",
        choices=("tiny", "default", "full"),
        default="default",
        help="shapes: default runs in minutes on 2 CPU cores, full = the seed's shapes",
    )
    p.add_argument("--device", default="all", help="all (default), cpu, gpu, cuda, metal[:i]")
    p.add_argument(
        "--dtype",
        default="float32",
        help="the tensors' dtype: float32 (default), float16, bfloat16 (a recipe's Keras "
        "policy is --precision)",
    )
    p.add_argument("--repeats", type=int, help="timed loops per cell (5; --size tiny: 3)")
    p.add_argument(
        "--min_time", type=float, help="shortest timed loop, s (0.05; --size tiny: 0.005)"
    )
    p.add_argument("--out", help="output directory (default runs/ops-<time>)")
    p.add_argument("--no_plot", action="store_true", help="skip the PNG chart")
    p.add_argument("--fusion", action="store_true", help="the fusion demo instead of the table")


def _merge_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("reports", nargs="+", help="report.json files or run directories")


@dataclasses.dataclass(frozen=True)
class Verb:
    """One verb of the command line: its parser's options and what it runs. The parser, the
    help and which verbs load TensorFlow or pass flags on to a recipe all come from
    :data:`VERBS`."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    options: Callable[[argparse.ArgumentParser], None]
    description: str | None = None
    loads_tensorflow: bool = False  # it loads first, its start-up lines held back
    recipe_flags: bool = False  # the flags after the target go to the recipe (absl parses them)


_PASSED_ON = "Recipe flags (--batch_size, --dataset...) follow --recipe or --model_fn."
VERBS = (
    Verb("compare", "compare two run reports (B against baseline A)", _compare, _compare_options),
    Verb("show", "print a run report", _show, _show_options),
    Verb("trace", "a run's profiler trace read back (XProf's verdict, ops)", _trace,
         _trace_options),
    Verb("devices", "list devices with a precision hint, per backend", _devices,
         _devices_options, loads_tensorflow=True),
    Verb("preflight", "check for known device/precision/XLA traps", _preflight,
         _preflight_options, loads_tensorflow=True),
    Verb("placement", "where each op of one training step ran", _placement, _placement_options,
         loads_tensorflow=True),
    Verb("doctor", "input-bound or compute-bound? measured, with advice", _verbs.doctor,
         _doctor_options, _PASSED_ON, loads_tensorflow=True, recipe_flags=True),
    Verb("tune", "the fastest measured settings for a recipe here (cached)", _verbs.tune,
         _tune_options, _PASSED_ON, loads_tensorflow=True, recipe_flags=True),
    Verb("backends", "which Keras backend trains a recipe fastest here (measured, cached)",
         _verbs.backends, _backends_options,
         "Recipe flags (--batch_size, --dataset, --device...) follow --recipe;\nwithout "
         "--device every device each backend sees is a contender.", recipe_flags=True),
    Verb("ops", "per-op benchmark in eager/graph/XLA on every device (or --fusion)", _ops,
         _ops_options,
         "The seed's per-op table for TensorFlow, or with --fusion what XLA and Grappler fuse. "
         "Writes Markdown, CSV, PNG and JSON under --out.", loads_tensorflow=True),
    Verb("data-service", "run a tf.data service dispatcher or worker", _verbs.data_service,
         _verbs.data_service_options,
         "Recipes read through it with --data_service=grpc://host:port.", loads_tensorflow=True),
    Verb("merge", "the workers' reports of a multi-worker run", _merge, _merge_options),
)  # fmt: skip
BY_NAME = {verb.name: verb for verb in VERBS}


def parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command line's parser, a subparser per verb of :data:`VERBS`. With ``--help`` in
    `argv`, a verb that passes flags on to a recipe lists the recipes and those flags."""
    from toolkit.core.version import __version__
    from toolkit.runner import flags as tk_flags

    wants_help = any(a in ("-h", "--help") for a in argv)
    named = next((a for a in argv if not a.startswith("-")), None)
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
        epilog = None
        if verb.recipe_flags and wants_help and named == verb.name:
            no_recipe = tk_flags.flag_value(argv, "model_fn")  # the shared flags only
            epilog = _recipe_epilog(
                None if no_recipe else tk_flags.flag_value(argv, "recipe") or "mlp"
            )
        raw = {"formatter_class": argparse.RawDescriptionHelpFormatter} if epilog else {}
        p = verbs.add_parser(
            verb.name, help=verb.help, description=verb.description, epilog=epilog, **raw
        )
        verb.options(p)
        p.set_defaults(func=verb.run)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; a closed stdout (``| head``) ends it quietly (status 141), Ctrl-C
    and SIGTERM in one line (130, 143)."""
    from toolkit.app import interrupted, with_broken_pipe
    from toolkit.core import interrupts

    status: list[int] = []
    try:
        if argv is None:  # the program itself, not a call from Python
            interrupts.install()
        with_broken_pipe(lambda: status.append(_main(argv)))
        interrupts.check()  # one dropped on the way (in a gc callback) is not lost
    except KeyboardInterrupt as e:
        interrupted(e, what=BY_NAME.get(next((a for a in sys.argv[1:] if a in BY_NAME), "")))
    finally:
        if argv is None:
            interrupts.ending()  # one during the frameworks' exit: said after it, 130 or 143
    return status[0]


def _main(argv: Sequence[str] | None = None) -> int:
    from absl import flags

    from toolkit import app, backend
    from toolkit.runner import flags as tk_flags

    argv = list(argv if argv is not None else sys.argv[1:])
    argv = tk_flags.canonical_argv(argv, DEPRECATED_OPTIONS)
    root = parser(argv)
    try:  # before anything imports Keras, which fixes its backend at import
        argv = app.start(argv, recipe=tk_flags.flag_value(argv, "recipe") or "mlp")
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
    try:
        _verbs.check_options(verb.name, args)  # before anything loads: one line, status 2
    except ValueError as e:
        print(f"error: {verb.name}: {e}", file=sys.stderr)
        return 2
    from toolkit.core import progress

    if progress.mode() == progress.BAR:
        # Every verb's first line within a second, before anything heavy loads (a framework,
        # XProf's reader), for a person at a terminal; a log gets the stages.
        first = "; loading TensorFlow and Keras first" if verb.loads_tensorflow else ""
        progress.say(f"{verb.name}: {verb.help}{first}")
    if verb.loads_tensorflow:
        from toolkit.core import interrupts
        from toolkit.devices import runtime

        with interrupts.held():  # Ctrl-C mid-import would leave modules half loaded: after it
            runtime.load_tensorflow()  # its C++ start-up lines held back, errors kept
    try:
        return args.func(args)
    except app.UserCodeError as e:  # --model_fn, a recipe's build_task: named, status 1
        if app.wants_traceback():
            import traceback

            traceback.print_exception(e, file=sys.stderr)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (ReportError, ValueError, FileNotFoundError, flags.Error) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1 if _run_failed(e) else 2  # a run that could not start or read its data: 1


def _run_failed(error: BaseException) -> bool:
    """Whether `error` says a run failed to start or to read its data (``doctor``, ``tune``,
    ``placement`` through the runner, as a recipe would) rather than that the command line was
    wrong. Looked up, not imported: ``show`` and ``compare`` must not start TensorFlow."""
    setup_error = getattr(sys.modules.get("toolkit.runner.task"), "SetupError", None)
    return setup_error is not None and isinstance(error, setup_error)
