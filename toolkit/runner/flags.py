"""The absl flags every recipe shares, the TrainConfig they make, the flags that must act before
Keras loads (:class:`StartFlags`: the backend, the device, the compile cache, the verbosity;
parsed by absl with the same definitions) and the readings that edit a target's recipe flags
(the search): the command line's one module. The app main
that runs a recipe is ``toolkit.app``.

The flags are derived, not written: one per TrainConfig field (``toolkit.runner.config``'s table
of settings: name, default, help, group, aliases) and one per :data:`APP_FLAGS` entry (what to
train on, whether to diagnose or tune first). Adding a setting is one field there.

Names follow TensorFlow Model Garden where it has one (``--batch_size`` is the global batch).
The training settings carry no bounds here: :func:`config_from_flags` hands them to
``TrainConfig.validate`` (``toolkit.runner.config``), the one validator, whose messages name the
flag. Flags that are not training settings (the dataset spec, image sizes, budgets) are checked by
absl when parsed.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from absl import flags

from toolkit import backend
from toolkit.runner.config import (
    DATA,
    GROUPS,
    MEASURING,
    SETTINGS,
    SPEED,
    ConfigError,
    TrainConfig,
    flag_of,
)

__all__ = [
    "FLAG_GROUPS",
    "config_from_flags",
    "define_common_flags",
    "define_flag",
    "define_image_flags",
    "kwargs_from_flags",
]

# The shortest search (--tune_budget, tune(budget_s=)): the defaults alone take about that.
MIN_TUNE_BUDGET_S = 1.0

# Old spellings still accepted, each with a one-line deprecation note (canonical_argv).
DEPRECATED_FLAGS = {old: flag_of(f.name) for f in SETTINGS for old in f.metadata["deprecated"]}


def _valid_dataset(value: str) -> bool:
    from toolkit.data.catalog import parse_dataset_spec

    try:
        parse_dataset_spec(value)
    except ValueError as e:
        raise flags.ValidationError(str(e)) from None
    return True


@dataclasses.dataclass(frozen=True)
class AppFlag:
    """A shared flag that is not a training setting (what to train on, whether to diagnose
    or tune first): it reaches ``build_task`` or the app main, never a TrainConfig."""

    name: str
    kind: str  # absl's DEFINE_<kind>
    default: Any
    help: str
    group: str
    speed: bool = False  # see ``toolkit.runner.config.setting``
    lead: bool = False  # listed before the group's training settings in --help
    path: bool = False
    bounds: dict[str, Any] = dataclasses.field(default_factory=dict)


APP_FLAGS = (
    AppFlag(
        "dataset", "string", "synthetic",
        "synthetic | digits | tfds:NAME | folder:PATH | tfrecord:GLOB "
        "(see toolkit.data.catalog).", DATA, speed=True, lead=True,
    ),
    AppFlag(
        "data_dir", "string", None, "TFDS data directory for --dataset=tfds:NAME.", DATA,
        speed=True, lead=True, path=True,
    ),
    AppFlag(
        "validation_fraction", "float", 0.2,
        "Share of digits / folder / tfrecord examples held out for validation.", DATA,
        speed=True, lead=True, bounds={"lower_bound": 0.01, "upper_bound": 0.9},
    ),
    AppFlag(
        "autotune", "bool", False,
        "Use the fastest measured settings (precision, XLA, steps per execution, fused "
        "steps) for this model, input and machine: from the cache, or search now.", SPEED,
    ),
    AppFlag(
        "tune_budget", "float", 120.0, "Seconds the --autotune search may take.", SPEED,
        bounds={"lower_bound": MIN_TUNE_BUDGET_S},
    ),
    AppFlag(
        "diagnose", "bool", False,
        "First measure the input pipeline alone, the step alone and the real fit, and put the "
        "verdict (input-bound / compute-bound / balanced) with advice into the report.",
        MEASURING,
    ),
    AppFlag(
        "diagnose_steps", "integer", 60,
        "Steps per measurement of --diagnose (unset: 60, or more for a 0.5 s window).",
        MEASURING,
        bounds={"lower_bound": 5},
    ),
)  # fmt: skip


def _kind(field: dataclasses.Field) -> str:
    """absl's DEFINE_<kind> for a TrainConfig field, from its type (a window of steps is
    written ``start,stop``)."""
    kind = str(field.type).split("[")[0].split(" ")[0]
    return {"bool": "bool", "int": "integer", "float": "float"}.get(kind, "string")


# The shared flags as --help groups them: every setting in its group (toolkit.runner.config), the
# app's own leading the data group.
FLAG_GROUPS = tuple(
    (
        group,
        tuple(
            [a.name for a in APP_FLAGS if a.group == group and a.lead]
            + [flag_of(f.name) for f in SETTINGS if f.metadata["group"] == group]
            + [a.name for a in APP_FLAGS if a.group == group and not a.lead]
        ),
    )
    for group in GROUPS
)
# Flags that name paths: ``--report_dir=~/runs`` reaches the program with its ``~`` (no shell
# expands it after ``=``), so the toolkit expands it.
PATH_FLAGS = tuple(
    [flag_of(f.name) for f in SETTINGS if f.metadata["path"]]
    + [a.name for a in APP_FLAGS if a.path]
)
# Flags that change how long a run is or what it writes, not how fast a step is.
RUN_FLAGS = frozenset(
    [flag_of(f.name) for f in SETTINGS if not f.metadata["speed"]]
    + [a.name for a in APP_FLAGS if not a.speed]
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


def define_common_flags(**defaults: Any) -> None:
    """Defines the shared flags once per process (from the settings table,
    ``toolkit.runner.config``, and :data:`APP_FLAGS`); `defaults` overrides a recipe's
    defaults, by flag name.

    Importing a recipe only defines flags (nothing is parsed), so a notebook can import one and
    call its ``build_task`` whatever its own argv holds (``-f kernel.json``).
    """
    if "steps_per_execution" in flags.FLAGS:
        return
    for a in APP_FLAGS:
        define = getattr(flags, f"DEFINE_{a.kind}")
        define(a.name, defaults.get(a.name, a.default), a.help, **a.bounds)
        _finite(a.kind, a.name)
    flags.register_validator("dataset", _valid_dataset, "bad --dataset")
    for f in SETTINGS:
        name, meta = flag_of(f.name), f.metadata
        default = meta["flag_default"] if meta["flag_default"] is not None else f.default
        getattr(flags, f"DEFINE_{_kind(f)}")(name, defaults.get(name, default), meta["help"])
        for alias in (*meta["aliases"], *meta["deprecated"]):
            flags.DEFINE_alias(alias, name)


def _caller(depth: int = 2) -> str:
    return sys._getframe(depth).f_globals.get("__name__", "__main__")


def _define(owner: str, kind: str, name: str, *args: Any, **kwargs: Any) -> None:
    names = _OWN.setdefault(owner, [])
    if name not in names:
        names.append(name)
    if name not in flags.FLAGS:
        # Filed under the recipe (absl's --helpfull lists them under it, not
        # toolkit.runner.flags); absl names the main module by its path.
        module = sys.argv[0] if owner == "__main__" else owner
        getattr(flags, f"DEFINE_{kind}")(name, *args, module_name=module, **kwargs)
        _finite(kind, name)


def _finite(kind: str, name: str) -> None:
    """absl's float bounds let nan and inf through (no comparison holds): refused here."""
    if kind == "float":
        flags.register_validator(
            name, lambda v: v is None or math.isfinite(v), f"--{name} must be a finite number"
        )


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
    """A validated TrainConfig from parsed flags: every setting from its flag (paths with
    their ``~`` expanded, ``''`` for none; a window of steps parsed from ``start,stop``).

    Raises:
        ConfigError: a bad setting, in one line naming the flag.
    """
    values: dict[str, Any] = {}
    for f in SETTINGS:
        name = flag_of(f.name)
        value = flag_values[name].value
        if f.metadata["path"]:
            value = _expand(name, value) or None
        elif str(f.type).startswith("tuple"):
            value = _parse_steps(value)
        values[f.name] = value
    return TrainConfig(**values).validate()


# The packages whose flags are their own (absl's logging, TensorFlow's tt_check_filter, ...):
# matched on the package, so a script of yours named jax_train.py keeps its flags.
FOREIGN_FLAG_PACKAGES = frozenset({"absl", "tensorflow", "tf_keras", "keras", "jax", "torch"})


def flags_for_report(flag_values: flags.FlagValues = flags.FLAGS) -> dict[str, Any]:
    """Every flag's value except absl's own (logging and the like) and those the frameworks
    define for themselves (TensorFlow's ``tt_check_filter``, ...), for the report."""
    out: dict[str, Any] = {}
    for module, module_flags in flag_values.flags_by_module_dict().items():
        if module.split(".")[0] in FOREIGN_FLAG_PACKAGES:
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


# ---------------------------------------------------------------------------- read before parsing
# What must be known before anything parses the command line (Keras fixes its backend when it
# loads; TensorFlow reads XLA's cache directory once), and the search's edits of a target's
# recipe flags: the only hand-reading of a command line, here beside the flags it reads.


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag=V`` or ``--flag V`` in a command line, or None (read before
    anything parses it: ``--backend`` must be known before Keras loads)."""
    for i, arg in enumerate(args):
        if arg.startswith(f"--{flag}="):
            return arg.split("=", 1)[1]
        if arg == f"--{flag}" and i + 1 < len(args):
            return args[i + 1]
    return None


def without(argv: Sequence[str], names: frozenset[str] | set[str]) -> list[str]:
    """`argv` without the flags in `names` (``--name=v``, ``--name v``, ``--[no]name``)."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        flag = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if flag is not None and (flag in names or (flag[:2] == "no" and flag[2:] in names)):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            skip = "=" not in arg and flag in names and nxt is not None and not nxt.startswith("-")
            continue
        out.append(arg)
    return out


@dataclasses.dataclass(frozen=True)
class StartFlags:
    """What the command line says that must act before Keras loads (Keras fixes its backend
    when imported; TensorFlow reads its log level and XLA's cache place once): read at the
    program's start by :func:`start_flags`, acted on by :func:`apply_start_flags`.

    Attributes:
        backend: ``--backend``, None when not given.
        device: ``--device``, None when not given.
        compile_cache: ``--compile_cache`` (``--nocompile_cache`` or ``=false`` undo it).
        verbosity: absl's ``--verbosity``/``-v`` (-1, its default, when not given).
    """

    backend: str | None = None
    device: str | None = None
    compile_cache: bool = False
    verbosity: int = -1


_START_SETTINGS = ("backend", "device", "compile_cache")
_LEVELS = {"debug": 1, "info": 0, "warning": -1, "error": -2, "fatal": -3}


def _start_flag(argv: Sequence[str], name: str) -> Any:
    """`name`'s value in `argv`, parsed by absl as the settings table defines it (its own
    FlagValues, unknown flags left alone); None when absent or unreadable (the full parse,
    later, says what is wrong with it)."""
    values = flags.FlagValues()
    if name == "verbosity":
        flags.DEFINE_string(name, None, "", flag_values=values)
        flags.DEFINE_alias("v", name, flag_values=values)
    else:
        field = next(f for f in SETTINGS if flag_of(f.name) == name)
        getattr(flags, f"DEFINE_{_kind(field)}")(name, None, "", flag_values=values)
        for alias in (*field.metadata["aliases"], *field.metadata["deprecated"]):
            flags.DEFINE_alias(alias, name, flag_values=values)
    try:
        values(["start", *argv], known_only=True)
    except flags.Error:
        return None
    return values[name].value


def start_flags(argv: Sequence[str]) -> StartFlags:
    """The :class:`StartFlags` of a command line (without the program's name), read by absl's
    parser with the settings table's definitions, before anything else parses it."""
    verbosity = _start_flag(argv, "verbosity")
    if verbosity is not None:
        try:
            verbosity = int(verbosity)
        except ValueError:
            verbosity = _LEVELS.get(verbosity.strip().lower())
    return StartFlags(
        backend=_start_flag(argv, "backend"),
        device=_start_flag(argv, "device"),
        compile_cache=bool(_start_flag(argv, "compile_cache")),
        verbosity=-1 if verbosity is None else verbosity,
    )


def start_backend(start: StartFlags) -> str | None:
    """Selects ``--backend`` with ``toolkit.backend.select``; returns the backend chosen, or
    None. Without ``--backend`` (and without ``KERAS_BACKEND``), ``--device=mps`` or ``metal``
    picks the installed backend that reaches the Apple GPU (``backend.apple_gpu_backend``)."""
    if start.backend is not None:
        return backend.select(start.backend)
    device = (start.device or "").strip().lower().split(":")[0]
    if device in ("mps", "metal") and not os.environ.get("KERAS_BACKEND"):
        apple = backend.apple_gpu_backend()
        if apple is not None and "keras" not in sys.modules:
            return backend.select(apple)
    return None


def apply_start_flags(start: StartFlags) -> str | None:
    """Acts on `start` before anything loads a framework: the backend (:func:`start_backend`),
    then the compile cache (TensorFlow's XLA reads its place once). Returns the backend
    chosen, or None."""
    chosen = start_backend(start)
    if start.compile_cache:
        backend.use_compile_cache()
    return chosen
