"""The absl flags every recipe shares, and the TrainConfig they make. Nothing else: the app
main that runs a recipe is ``toolkit.app``.

Names follow TensorFlow Model Garden where it has one (``--batch_size`` is the global batch).
The training settings carry no bounds here: :func:`config_from_flags` hands them to
``TrainConfig.validate`` (``toolkit.config``), the one validator, whose messages name the flag.
Flags that are not training settings (the dataset spec, image sizes, budgets) are checked by
absl when parsed.
"""

from __future__ import annotations

import inspect
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from absl import flags

from toolkit.config import PRECISIONS, SMOKE_STEPS, ConfigError, TrainConfig
from toolkit.distribute import CLUSTER_WAIT_S, SERVICE_MODES, STRATEGIES
from toolkit.profiling.stats import DEFAULT_WARMUP_STEPS

__all__ = [
    "DEPRECATED_FLAGS",
    "FLAG_GROUPS",
    "canonical_argv",
    "config_from_flags",
    "define_common_flags",
    "define_flag",
    "define_image_flags",
    "flags_for_report",
    "help_text",
    "kwargs_from_flags",
    "own_flags",
]

# Old spellings still accepted, each with a one-line deprecation note (canonical_argv).
DEPRECATED_FLAGS = {"dtype": "precision"}

# The shared flags as --help groups them; tests check every shared flag is in one group.
FLAG_GROUPS = (
    (
        "data",
        ("dataset", "data_dir", "validation_fraction", "use_synthetic_data"),
    ),
    (
        "training",
        (
            "epochs",
            "batch_size",
            "train_steps",
            "seed",
            "init_weights",
            "stop_on_nan",
            "backup_dir",
            "smoke",
        ),
    ),
    (
        "speed settings (tune searches these)",
        (
            "precision",
            "jit_compile",
            "steps_per_execution",
            "fused_steps",
            "compile_cache",
            "autotune",
            "tune_budget",
        ),
    ),
    ("backend and device", ("backend", "device")),
    (
        "distribution",
        (
            "distribution_strategy",
            "worker_hosts",
            "task_index",
            "cluster_wait",
            "shard_policy",
            "data_service",
            "data_service_mode",
        ),
    ),
    (
        "measuring and the report",
        (
            "report_dir",
            "warmup_steps",
            "log_steps",
            "log_verbosity",
            "count_flops",
            "profile_steps",
            "memory_watch",
            "tensorboard",
            "diagnose",
            "diagnose_steps",
        ),
    ),
)

# Flags each module (a recipe) asked for through define_flag / define_image_flags, defined by
# it or (shared by an earlier recipe in this process) already there.
_OWN: dict[str, list[str]] = {}


def _parse_steps(value: str) -> tuple[int, int] | None:
    if not value:
        return None
    try:
        start, stop = (int(v) for v in value.split(","))
    except ValueError:
        raise ConfigError(
            f"--profile_steps must be two integers 'start,stop', got {value!r}"
        ) from None
    return start, stop


def _valid_dataset(value: str) -> bool:
    from toolkit.data.catalog import parse_dataset_spec

    try:
        parse_dataset_spec(value)
    except ValueError as e:
        raise flags.ValidationError(str(e)) from None
    return True


def define_common_flags(**defaults: Any) -> None:
    """Defines the shared flags once per process; `defaults` overrides a recipe's defaults.

    Importing a recipe only defines flags (nothing is parsed), so a notebook can import one and
    call its ``build_task`` whatever its own argv holds (``-f kernel.json``).
    """
    if "steps_per_execution" in flags.FLAGS:
        return
    d = {
        "epochs": 1,
        "batch_size": 32,
        "steps_per_execution": 1,
        "jit_compile": None,
        "report_dir": "runs",
        "seed": 0,
        "dataset": "synthetic",
        **defaults,
    }
    flags.DEFINE_string(
        "dataset",
        d["dataset"],
        "synthetic | digits | tfds:NAME | folder:PATH | tfrecord:GLOB (see toolkit.data.catalog).",
    )
    flags.register_validator("dataset", _valid_dataset, "bad --dataset")
    flags.DEFINE_string("data_dir", None, "TFDS data directory for --dataset=tfds:NAME.")
    flags.DEFINE_float(
        "validation_fraction",
        0.2,
        "Share of digits / folder / tfrecord examples held out for validation.",
        lower_bound=0.01,
        upper_bound=0.9,
    )
    flags.DEFINE_integer("log_steps", None, "Print step time and examples/s every N steps.")
    flags.DEFINE_bool(
        "stop_on_nan",
        True,
        "Stop at the first step whose loss is NaN or infinite (the report says which); "
        "--nostop_on_nan trains on (the run is still 'diverged').",
    )
    flags.DEFINE_bool(
        "diagnose",
        False,
        "First measure the input pipeline alone, the step alone and the real fit, and put the "
        "verdict (input-bound / compute-bound / balanced) with advice into the report.",
    )
    flags.DEFINE_integer(
        "diagnose_steps", 60, "Steps per measurement of --diagnose.", lower_bound=5
    )
    flags.DEFINE_bool(
        "autotune",
        False,
        "Use the fastest measured settings (precision, XLA, steps per execution, fused "
        "steps) for this model, input and machine: from the cache, or search now.",
    )
    flags.DEFINE_float(
        "tune_budget", 120.0, "Seconds the --autotune search may take.", lower_bound=1.0
    )
    flags.DEFINE_bool(
        "count_flops",
        True,
        "Count model FLOPs per step; report achieved FLOP/s and MFU against the measured "
        "matmul peak (measured once per machine, ~2 s, then cached).",
    )
    flags.DEFINE_integer("epochs", d["epochs"], "Training epochs.")
    flags.DEFINE_integer("batch_size", d["batch_size"], "Global batch size (examples per step).")
    flags.DEFINE_integer(
        "steps_per_execution",
        d["steps_per_execution"],
        "Training steps per call of the compiled function (Keras batch hooks run once per call).",
    )
    flags.DEFINE_integer(
        "fused_steps",
        1,
        "Training steps fused into one compiled train step (a loop inside it; with "
        "--jit_compile one XLA program): cuts per-step overhead for small models.",
    )
    flags.DEFINE_integer(
        "train_steps", None, "Steps per epoch (repeats the data); default: one pass."
    )
    flags.DEFINE_bool(
        "jit_compile",
        d["jit_compile"],
        "Compile the train step: XLA on TensorFlow and JAX, torch.compile on PyTorch. Default: "
        "Keras's choice (on for JAX; off for TensorFlow on a CPU and for PyTorch).",
    )
    flags.DEFINE_alias("enable_xla", "jit_compile")
    flags.DEFINE_bool(
        "compile_cache",
        False,
        "Keep compiled programs on disk ($TOOLKIT_CACHE_DIR/compiled/<backend>): a later run of "
        "the same model and settings reads them instead of compiling (JAX: every program; "
        "TensorFlow and PyTorch: what --jit_compile compiles). The first step then shows a read.",
    )
    flags.DEFINE_string(
        "backend",
        None,
        "tensorflow | jax | torch | auto: the Keras backend (default: KERAS_BACKEND, else "
        "tensorflow); auto: the one python -m toolkit backends measured fastest for this recipe "
        "and flags here. Read from the command line before Keras loads.",
    )
    flags.DEFINE_string(
        "device",
        "auto",
        "auto | cpu | gpu | cuda | metal (mps: the Apple GPU), optionally :index (e.g. gpu:1).",
    )
    flags.DEFINE_string(
        "precision",
        "float32",
        f"Keras precision policy: {' | '.join(PRECISIONS)} (mixed: float16/bfloat16 compute, "
        "float32 variables). --dtype is its old name.",
    )
    flags.DEFINE_alias("dtype", "precision")  # deprecated spelling: see DEPRECATED_FLAGS
    flags.DEFINE_string(
        "distribution_strategy",
        "default",
        f"tf.distribute strategy: {' | '.join(STRATEGIES)}.",
    )
    flags.DEFINE_string(
        "worker_hosts",
        None,
        "Multi-worker: comma-separated host:port of every worker (builds TF_CONFIG; without "
        "it TF_CONFIG is read from the environment). Worker 0 is the chief.",
    )
    flags.DEFINE_integer("task_index", 0, "Multi-worker: this worker's index.")
    flags.DEFINE_float(
        "cluster_wait",
        CLUSTER_WAIT_S,
        "Multi-worker: seconds a worker waits for every worker of --worker_hosts to join; "
        "then it fails in one line naming those that do not answer (0: TensorFlow's own wait).",
    )
    flags.DEFINE_string(
        "shard_policy",
        "data",
        "How a multi-worker strategy splits the input: data (every worker reads it all and "
        "keeps its share), file (workers read different files), auto, off.",
    )
    flags.DEFINE_string(
        "data_service",
        None,
        "grpc://host:port of a tf.data service dispatcher: the input pipeline runs on its "
        "workers (python -m toolkit data-service).",
    )
    flags.DEFINE_string(
        "data_service_mode",
        "parallel_epochs",
        f"{' | '.join(SERVICE_MODES)}. parallel_epochs: every trainer gets the whole "
        "dataset; distributed_epoch: trainers split one epoch's elements.",
    )
    flags.DEFINE_string(
        "backup_dir",
        None,
        "Back up the training state every epoch (keras BackupAndRestore); a restarted run "
        "resumes from the last backup.",
    )
    flags.DEFINE_bool(
        "use_synthetic_data",
        False,
        "Train on one random batch of the real spec, repeated: "
        "input costs ~0 (an upper bound for the step).",
    )
    flags.DEFINE_bool("smoke", False, f"A seconds-long run: 1 epoch of {SMOKE_STEPS} steps.")
    flags.DEFINE_integer(
        "warmup_steps",
        DEFAULT_WARMUP_STEPS,
        "Steps after the first left out of the step-time statistics.",
    )
    flags.DEFINE_string(
        "profile_steps", "", "Capture a profiler trace of steps 'start,stop' (e.g. '10,15')."
    )
    flags.DEFINE_bool("memory_watch", False, "Record host/device memory per epoch.")
    flags.DEFINE_bool(
        "tensorboard",
        False,
        "Write step time, p50/p90, examples/s, MFU, memory and the epoch metrics as "
        "TensorBoard scalars in <run dir>/tensorboard (view: tensorboard --logdir <report_dir>).",
    )
    flags.DEFINE_string(
        "report_dir", d["report_dir"], "Reports go to <report_dir>/<timestamp>/; '' for none."
    )
    flags.DEFINE_integer("seed", d["seed"], "Random seed (weights, shuffling).")
    flags.DEFINE_string(
        "init_weights",
        None,
        "Start from the weights in this .weights.h5 file; when it does not exist yet, the "
        "run's own initial weights are written there first. The same file gives runs under "
        "different backends the same start (python -m toolkit backends uses it).",
    )
    flags.DEFINE_integer(
        "log_verbosity",
        None,
        "Progress while training. Default: the toolkit's (a bar on a terminal; in a log, a line "
        "every --log_steps steps, about ten a run when unset); 0: none; 1 or 2: Keras's own "
        "(it reads the loss every step: a device sync per step).",
    )


def _caller(depth: int = 2) -> str:
    return sys._getframe(depth).f_globals.get("__name__", "__main__")


def _define(owner: str, kind: str, name: str, *args: Any, **kwargs: Any) -> None:
    names = _OWN.setdefault(owner, [])
    if name not in names:
        names.append(name)
    if name not in flags.FLAGS:
        # Filed under the recipe (absl's --helpfull lists them under it, not toolkit.flags);
        # absl names the main module by its path.
        module = sys.argv[0] if owner == "__main__" else owner
        getattr(flags, f"DEFINE_{kind}")(name, *args, module_name=module, **kwargs)


def own_flags(module: str) -> list[str]:
    """The flags module `module` (a recipe) defines for itself, in order."""
    return list(_OWN.get(module, ()))


def define_flag(kind: str, name: str, *args: Any, **kwargs: Any) -> None:
    """``flags.DEFINE_<kind>(name, *args, **kwargs)`` unless `name` is already defined.

    Recipes define their own flags through this, so several recipes can be imported into one
    process (a notebook, a test): a flag two recipes share keeps the first one's default,
    which only matters to flag parsing, and a process parses the flags of the one recipe it
    runs. ``build_task`` arguments carry each recipe's own defaults.
    """
    _define(_caller(), kind, name, *args, **kwargs)


def define_image_flags(image_size: int | None, channels: int) -> None:
    """``--image_size`` and ``--channels`` for recipes whose model reads images."""
    owner = _caller()
    _define(
        owner,
        "integer",
        "image_size",
        image_size,
        "Height and width the images are resized to"
        + ("." if image_size else " (default: the model's own)."),
        lower_bound=8,
    )
    new = "channels" not in flags.FLAGS
    _define(owner, "integer", "channels", channels, "Image channels: 1 (grey) or 3 (RGB).")
    if new:
        flags.register_validator("channels", lambda v: v in (1, 3), "--channels must be 1 or 3")
    _define(
        owner,
        "integer",
        "num_classes",
        10,
        "Classes, when the dataset does not say (synthetic, tfrecord).",
        lower_bound=2,
    )


def kwargs_from_flags(
    fn: Callable[..., Any], flag_values: flags.FlagValues = flags.FLAGS
) -> dict[str, Any]:
    """The parsed value of every flag named like a parameter of `fn`.

    A recipe's ``build_task`` names its parameters after its flags (``dataset``,
    ``image_size``, ``learning_rate``...), so its signature is the one list of what the
    flags feed it; parameters without a flag keep their defaults.
    """
    names = inspect.signature(fn).parameters
    return {name: _expand(name, flag_values[name].value) for name in names if name in flag_values}


# Flags that name paths: ``--report_dir=~/runs`` reaches the program with its ``~`` (no shell
# expands it after ``=``), so the toolkit expands it.
PATH_FLAGS = ("report_dir", "data_dir", "backup_dir", "init_weights")


def _expand(name: str, value: Any) -> Any:
    """`value` with a leading ``~`` expanded for path flags (and ``folder:~/...`` or
    ``tfrecord:~/...`` datasets)."""
    if not isinstance(value, str):
        return value
    if name in PATH_FLAGS:
        return os.path.expanduser(value)
    if name == "dataset":
        kind, sep, rest = value.partition(":")
        if sep and kind in ("folder", "tfrecord"):
            return f"{kind}:{os.path.expanduser(rest)}"
    return value


def config_from_flags(flag_values: flags.FlagValues = flags.FLAGS) -> TrainConfig:
    """A validated TrainConfig from parsed flags.

    Raises:
        ConfigError: a bad setting, in one line naming the flag.
    """
    f = flag_values
    return TrainConfig(
        epochs=f.epochs,
        batch_size=f.batch_size,
        steps_per_execution=f.steps_per_execution,
        fused_steps=f.fused_steps,
        jit_compile=f.jit_compile,
        compile_cache=f.compile_cache,
        steps_per_epoch=f.train_steps,
        warmup_steps=f.warmup_steps,
        profile_steps=_parse_steps(f.profile_steps),
        memory_watch=f.memory_watch,
        tensorboard=f.tensorboard,
        report_dir=_expand("report_dir", f.report_dir) or None,
        seed=f.seed,
        verbose=f.log_verbosity,
        device=f.device,
        precision=f.precision,
        distribution_strategy=f.distribution_strategy,
        use_synthetic_data=f.use_synthetic_data,
        smoke=f.smoke,
        log_steps=f.log_steps,
        stop_on_nan=f.stop_on_nan,
        count_flops=f.count_flops,
        worker_hosts=f.worker_hosts,
        task_index=f.task_index,
        cluster_wait=f.cluster_wait,
        shard_policy=f.shard_policy,
        data_service=f.data_service,
        data_service_mode=f.data_service_mode,
        backup_dir=_expand("backup_dir", f.backup_dir),
        backend=f.backend,
        init_weights=_expand("init_weights", f.init_weights),
    ).validate()


def flags_for_report(flag_values: flags.FlagValues = flags.FLAGS) -> dict[str, Any]:
    """Every flag's value except absl's own (logging and the like), for the report."""
    out: dict[str, Any] = {}
    for module, module_flags in flag_values.flags_by_module_dict().items():
        if module.startswith("absl."):
            continue
        for fl in module_flags:
            out[fl.name] = fl.value
    return dict(sorted(out.items()))


def canonical_argv(
    argv: Sequence[str],
    renames: dict[str, str] | None = None,
    note: Callable[[str], Any] | None = None,
) -> list[str]:
    """`argv` with deprecated flag spellings (``--dtype=X``, ``--dtype X``) replaced by their
    current names (:data:`DEPRECATED_FLAGS` unless `renames`), and one note per old name on
    stderr (or to `note`) saying what to write instead. Everything after ``--`` is kept."""
    renames = DEPRECATED_FLAGS if renames is None else renames
    say = note or (lambda line: print(line, file=sys.stderr))
    out: list[str] = []
    told: set[str] = set()
    for i, arg in enumerate(argv):
        if arg == "--":
            out += argv[i:]
            break
        dashes = "--" if arg.startswith("--") else "-" if arg.startswith("-") else ""
        name, eq, value = arg[len(dashes) :].partition("=")
        if dashes and name in renames:
            new = renames[name]
            if name not in told:
                told.add(name)
                say(f"note: --{name} is deprecated; use --{new} (--{name} still works for now)")
            arg = f"{dashes}{new}{eq}{value}"
        out.append(arg)
    return out


def _flag_line(fl: Any) -> str:
    if fl.boolean:
        state = {True: "on", False: "off"}.get(fl.default, "unset: see below")
        return f"--[no]{fl.name} (default: {state})"
    if fl.default is None or fl.default == "":
        return f"--{fl.name}=... (default: unset)"
    return f"--{fl.name}={fl.default_as_str.strip(chr(39))}"


def help_text(
    program: str,
    doc: str | None,
    own: Sequence[str],
    flag_values: flags.FlagValues = flags.FLAGS,
    *,
    title: str = "this recipe's flags",
    width: int | None = None,
) -> str:
    """A recipe's ``--help``: usage, its docstring, its own flags, then the shared ones in
    :data:`FLAG_GROUPS`, each flag with its default and help, wrapped to the terminal."""
    width = width or min(100, shutil.get_terminal_size((100, 24)).columns)
    out = [f"usage: {program} [--flag=value ...]", ""]
    if doc:
        out += [textwrap.dedent(doc).strip(), ""]

    def section(name: str, names: Sequence[str]) -> None:
        present = [flag_values[n] for n in names if n in flag_values]
        if not present:
            return
        out.append(f"{name}:")
        for fl in present:
            out.append(f"  {_flag_line(fl)}")
            out.extend(
                textwrap.wrap(
                    " ".join((fl.help or "").split()),
                    width=width,
                    initial_indent="      ",
                    subsequent_indent="      ",
                )
            )
        out.append("")

    section(title, own)
    for name, names in FLAG_GROUPS:
        section(name, [n for n in names if n not in own])
    out.append(
        "Old spellings still accepted: "
        + ", ".join(f"--{old} (now --{new})" for old, new in DEPRECATED_FLAGS.items())
        + ". --helpfull lists absl's own flags too."
    )
    return "\n".join(out).rstrip() + "\n"
