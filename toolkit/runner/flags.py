"""The absl flags every recipe shares, the TrainConfig they make, a recipe's own flags, ``--help``.

One flag per TrainConfig field and :data:`APP_FLAGS` entry, a recipe's per ``build_task`` parameter;
names as in TF Model Garden (``--batch_size``: global); no bounds: ``TrainConfig.validate`` checks.
Reading argv before absl: ``toolkit._argv``."""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import re
import shutil
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from absl import flags

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
    "Flag",
    "config_from_flags",
    "define_common_flags",
    "define_flag",
    "define_task_flags",
]

HELP_WIDTH = 80  # a recipe's --help at most (narrower on a narrower terminal)

MIN_TUNE_BUDGET_S = 1.0  # the shortest search (--tune_budget): about the defaults alone

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
    """A shared flag that is no training setting: it reaches ``build_task`` or the app main."""

    name: str
    kind: str  # absl's DEFINE_<kind>
    default: Any
    help: str
    group: str
    lead: bool = False  # listed before the group's training settings in --help
    path: bool = False
    bounds: dict[str, float] = dataclasses.field(default_factory=dict)


APP_FLAGS = (
    AppFlag(
        "dataset", "string", "synthetic",
        "synthetic | digits | tfds:NAME | folder:PATH | tfrecord:GLOB "
        "(see toolkit.data.catalog).", DATA, lead=True,
    ),
    AppFlag(
        "data_dir", "string", None, "TFDS data directory for --dataset=tfds:NAME.", DATA,
        lead=True, path=True,
    ),
    AppFlag(
        "validation_fraction", "float", 0.2,
        "Share of digits / folder / tfrecord examples held out for validation.", DATA,
        lead=True, bounds={"lower_bound": 0.01, "upper_bound": 0.9},
    ),
    AppFlag(
        "autotune", "bool", False,
        "Use the fastest measured settings (precision, XLA, steps per execution, fused "
        "steps) for this model, input and machine: from the cache, or search now.", SPEED,
    ),
    AppFlag(
        "tune_budget", "float", 120.0,
        "Seconds --autotune may take in all, the pick's confirmation in fresh processes "
        "included; where that does not fit, its first line says how long confirming takes.",
        SPEED, bounds={"lower_bound": MIN_TUNE_BUDGET_S},
    ),
    AppFlag(
        "tune_confirm", "bool", True,
        "Confirm --autotune's pick in fresh processes (--notune_confirm: keep the search's "
        "pick unconfirmed, within --tune_budget).", SPEED,
    ),
    AppFlag(
        "diagnose", "bool", False,
        "First measure the input pipeline alone, the step alone and the real fit, and put the "
        "verdict (input-bound / compute-bound / balanced, or uncertain where the rates "
        "contradict themselves) with advice into the report.",
        MEASURING,
    ),
    AppFlag(
        "diagnose_steps", "integer", 60,
        "Steps per measurement of --diagnose (unset: 60, or more for a 0.5 s window).",
        MEASURING,
        bounds={"lower_bound": 5},
    ),
)  # fmt: skip


def setting_kind(field: dataclasses.Field) -> str:
    """absl's DEFINE_<kind> for a TrainConfig field, from its type (a window is ``start,stop``)."""
    kind = str(field.type).split("[")[0].split(" ")[0]
    return {"bool": "bool", "int": "integer", "float": "float"}.get(kind, "string")


FLAG_GROUPS = tuple(  # the shared flags as --help groups them, the app's own leading data
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
PATH_FLAGS = tuple(  # no shell expands the ~ of --report_dir=~/runs, so the toolkit does
    [flag_of(f.name) for f in SETTINGS if f.metadata["path"]]
    + [a.name for a in APP_FLAGS if a.path]
)

_OWN: dict[str, list[str]] = {}  # what each recipe defined (define_task_flags, define_flag)


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
    """Defines the shared flags once per process (never parsing: a notebook's argv is no concern);
    `defaults`: a recipe's, by flag name."""
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
        getattr(flags, f"DEFINE_{setting_kind(f)}")(name, defaults.get(name, default), meta["help"])
        for alias in (*meta["aliases"], *meta["deprecated"]):
            flags.DEFINE_alias(alias, name)


def _caller(depth: int = 2) -> str:
    return sys._getframe(depth).f_globals.get("__name__", "__main__")


def _define(owner: str, kind: str, name: str, *args: Any, **kwargs: Any) -> bool:
    """Files flag `name` under `owner` and defines it unless defined; True when it did."""
    names = _OWN.setdefault(owner, [])
    if name not in names:
        names.append(name)
    if name in flags.FLAGS:
        return False
    module = sys.argv[0] if owner == "__main__" else owner  # absl's name for __main__: its path
    getattr(flags, f"DEFINE_{kind}")(name, *args, module_name=module, **kwargs)
    _finite(kind, name)
    return True


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
    """``flags.DEFINE_<kind>`` unless defined, for a recipe's non-``build_task`` flags. A flag two
    recipes share keeps the first one's default, which only parsing sees."""
    _define(_caller(), kind, name, *args, **kwargs)


@dataclasses.dataclass(frozen=True)
class Flag:
    """A ``build_task`` parameter's flag help, bounds, choices and check, in its annotation::

        hidden_units: Annotated[int, Flag("Units in each hidden layer.", lower_bound=1)] = 128

    Attributes:
        lower_bound: the least value absl accepts, None for none.
        upper_bound: the greatest, None for none.
        choices: the values of an enum flag (a ``Literal[...]`` gives them too).
        check: ``(predicate, message)``, a validator absl runs when it parses the flag."""

    help: str
    lower_bound: float | None = None
    upper_bound: float | None = None
    choices: tuple[str, ...] | None = None
    check: tuple[Callable[[Any], bool], str] | None = None


SHARED_TASK_FLAGS = {  # parameters many recipes take, their help said once (a Flag wins)
    "image_size": Flag("Height and width the images are resized to.", lower_bound=8),
    "channels": Flag(
        "Image channels: 1 (grey) or 3 (RGB).",
        check=(lambda v: v in (1, 3), "--channels must be 1 or 3"),
    ),
    "num_classes": Flag(
        "Classes, when the dataset does not say (synthetic, tfrecord).", lower_bound=2
    ),
    "learning_rate": Flag("Adam learning rate.", lower_bound=0.0),
}
_KINDS = {bool: "bool", int: "integer", float: "float", str: "string"}
# The shared flags a build_task parameter may be named after (data and run settings).
_APP_NAMES = frozenset(a.name for a in APP_FLAGS)
_SETTING_NAMES = frozenset(flag_of(f.name) for f in SETTINGS)


def define_task_flags(build_task: Callable[..., Any], **settings: Any) -> None:
    """A recipe's flags from its ``build_task``'s signature, and the shared ones, defined on import.

    A parameter is a flag of its name, default and type (``int``, ``float``, ``str``, ``bool``, or
    None; ``Literal``: an enum), with its :class:`Flag` or :data:`SHARED_TASK_FLAGS`' help; one
    named like a shared flag is that flag (a setting's default: the table's or `settings`').

    Args:
        build_task: the recipe's ``build_task``; its flags are filed under its module.
        **settings: the recipe's defaults for run settings, by flag name (``epochs=20``).

    Raises:
        TypeError: a parameter with no default, help or flag type; a `settings` name no setting."""
    where = f"{build_task.__module__}.{build_task.__qualname__}"
    unknown = sorted(set(settings) - _SETTING_NAMES)
    if unknown:
        raise TypeError(
            f"define_task_flags({where}, {unknown[0]}=...): not a run setting (epochs, "
            "batch_size, ...); give a parameter's default in the signature"
        )
    params = inspect.signature(build_task).parameters
    for name, p in params.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{where}(*{name}): a flag is one named parameter; name each one")
        if p.default is p.empty:
            raise TypeError(
                f"{where}({name}): every parameter needs a default, so that {where}() "
                "runs without flags (a notebook, the search's processes)"
            )
    hints = _parameter_hints(build_task)
    own = []  # all read before any is defined: a recipe that is refused defines nothing
    for name, p in params.items():
        if name in _APP_NAMES or name in _SETTING_NAMES:
            continue
        kind, spec = _flag_of_parameter(f"{where}({name})", name, hints.get(name))
        bounds = {"lower_bound": spec.lower_bound, "upper_bound": spec.upper_bound}
        bounds = {k: v for k, v in bounds.items() if v is not None}
        if bounds and kind not in ("integer", "float"):
            raise TypeError(f"{where}({name}): bounds on a {kind} flag")
        args = (p.default, spec.help)
        if kind == "enum":
            args = (p.default, list(spec.choices), spec.help)
        own.append((kind, name, args, bounds, spec.check))
    inputs = {name: p.default for name, p in params.items() if name in _APP_NAMES}
    define_common_flags(**inputs, **settings)
    for kind, name, args, bounds, check in own:
        if _define(build_task.__module__, kind, name, *args, **bounds) and check:
            flags.register_validator(name, *check)


def _parameter_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """`fn`'s parameter annotations with ``Annotated`` extras (the return's may not import)."""
    own = {k: v for k, v in getattr(fn, "__annotations__", {}).items() if k != "return"}
    if not own:
        return {}
    holder = types.SimpleNamespace(__annotations__=own)
    return typing.get_type_hints(holder, globalns=fn.__globals__, include_extras=True)


def _flag_of_parameter(where: str, name: str, hint: Any) -> tuple[str, Flag]:
    """absl's kind for a parameter annotated `hint`, and its :class:`Flag`."""
    spec = None
    if typing.get_origin(hint) is typing.Annotated:
        spec = next((m for m in hint.__metadata__ if isinstance(m, Flag)), None)
        hint = hint.__origin__
    spec = spec or SHARED_TASK_FLAGS.get(name)
    if spec is None:
        raise TypeError(
            f"{where}: no help for its flag; annotate it as "
            f"Annotated[<type>, Flag('What it is.')] (toolkit.runner.flags.Flag)"
        )
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # int | None: may be unset
        kinds = [t for t in typing.get_args(hint) if t is not type(None)]
        hint = kinds[0] if len(kinds) == 1 else hint
    if typing.get_origin(hint) is typing.Literal:
        spec = dataclasses.replace(spec, choices=spec.choices or typing.get_args(hint))
        hint = str
    if spec.choices is not None:
        if hint is not str:
            raise TypeError(f"{where}: an enum flag's values are strings, not {hint!r}")
        return "enum", spec
    if hint not in _KINDS:
        raise TypeError(
            f"{where}: a flag is an int, float, str or bool (maybe | None), not {hint!r}"
        )
    return _KINDS[hint], spec


def kwargs_from_flags(
    fn: Callable[..., Any], flag_values: flags.FlagValues = flags.FLAGS
) -> dict[str, Any]:
    """The parsed value of every flag named like a parameter of `fn`."""
    names = inspect.signature(fn).parameters
    return {name: _expand(name, flag_values[name].value) for name in names if name in flag_values}


def _expand(name: str, value: Any) -> Any:
    """`value` with a leading ``~`` expanded: path flags, ``folder:``/``tfrecord:`` datasets."""
    if not isinstance(value, str):
        return value
    if name in PATH_FLAGS:
        return os.path.expanduser(value)
    if name == "dataset":
        kind, sep, rest = value.partition(":")
        if sep and kind in ("folder", "tfrecord"):
            return f"{kind}:{os.path.expanduser(rest)}"
    return value


def config_from_flags(
    flag_values: flags.FlagValues = flags.FLAGS, validate: bool = True
) -> TrainConfig:
    """A validated TrainConfig from parsed flags; `validate` False: unchecked (``--backend=auto``).

    Raises:
        ConfigError: a bad setting, in one line naming the flag."""
    values: dict[str, Any] = {}
    for f in SETTINGS:
        name = flag_of(f.name)
        value = flag_values[name].value
        if f.metadata["path"]:
            value = _expand(name, value) or None
        elif str(f.type).startswith("tuple"):
            value = _parse_steps(value)
        values[f.name] = value
    config = TrainConfig(**values)
    return config.validate() if validate else config


# Packages whose flags are their own, matched on the package (your jax_train.py keeps its flags).
FOREIGN_FLAG_PACKAGES = frozenset({"absl", "tensorflow", "tf_keras", "keras", "jax", "torch"})


def flags_for_report(flag_values: flags.FlagValues = flags.FLAGS) -> dict[str, Any]:
    """Every flag's value except absl's and the frameworks' own, for the report."""
    out: dict[str, Any] = {}
    for module, module_flags in flag_values.flags_by_module_dict().items():
        if module.split(".")[0] in FOREIGN_FLAG_PACKAGES:
            continue
        for fl in module_flags:
            out[fl.name] = fl.value
    return dict(sorted(out.items()))


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
    """A recipe's ``--help``: usage, its docstring, its flags, the shared ones by group, wrapped."""
    width = width or min(HELP_WIDTH, shutil.get_terminal_size((HELP_WIDTH, 24)).columns)
    out = [f"usage: {program} [--flag=value ...]", ""]
    if doc:
        out += [plain_text(doc, width), ""]

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
    out += textwrap.wrap(
        "Old spellings still accepted: "
        + ", ".join(f"--{old} (now --{new})" for old, new in DEPRECATED_FLAGS.items())
        + ". --helpfull lists absl's own flags too.",
        width=width,
        break_on_hyphens=False,
    )
    return "\n".join(out).rstrip() + "\n"


def plain_text(doc: str, width: int = HELP_WIDTH) -> str:
    """A docstring as a user reads it: reST as plain words, prose refilled, indented blocks kept."""
    paragraphs = re.split(r"\n[ \t]*\n", inspect.cleandoc(doc))
    out = []
    for paragraph in paragraphs:
        paragraph = _ROLE.sub(r"\1", paragraph).replace("``", "")
        if paragraph[:1].isspace():  # an example: as written, its lines kept
            out.append(paragraph.rstrip())
            continue
        words = " ".join(paragraph.split())
        words = words[:-1] if words.endswith("::") else words
        out.append("\n".join(textwrap.wrap(words, width=width, break_on_hyphens=False)))
    return "\n\n".join(out)


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
