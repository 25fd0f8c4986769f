"""TrainConfig: every training setting declared once (:data:`SETTINGS`), and the one validator.

Flags, tune's knobs and run flags derive from that table; validate's errors name the flag."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

from absl import logging

from toolkit import backend, distribute
from toolkit.core import compat
from toolkit.core._advice import Setting
from toolkit.core.checks import ConfigError, check_number  # the one validator, re-exported
from toolkit.core.stats import DEFAULT_WARMUP_STEPS, whole_calls
from toolkit.devices import parse_device_spec

__all__ = [
    "PRECISIONS",
    "SETTINGS",
    "TrainConfig",
]

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
DATA_LOADERS = ("auto", "tf_data", "grain")
SMOKE_STEPS = 8

DATA, TRAINING, SPEED, WHERE, DISTRIBUTION, MEASURING = (  # the help groups, in --help order
    "data",
    "training",
    "speed settings (tune searches these)",
    "backend and device",
    "distribution",
    "measuring and the report",
)
GROUPS = (DATA, TRAINING, SPEED, WHERE, DISTRIBUTION, MEASURING)


@dataclasses.dataclass(frozen=True)
class SearchContext:
    """What a searched setting's candidate values may depend on (``None``: the generic values)."""

    device: Any = None
    step_s: float | None = None
    backend: str = "tensorflow"
    batch_sizes: tuple[int, ...] = ()
    loader: str = ""  # what feeds fit: tf_data, grain, arrays ("": not known)


LOOP, KNOB = "loop", "knob"  # a searched setting's role (Searched.role)
COMPILE, FIT = "compile", "fit"  # a setting a script passes to model.compile / model.fit


@dataclasses.dataclass(frozen=True)
class Searched:
    """How tune searches a setting, said where it is declared (``toolkit.search.engine`` reads it).

    * `values`: a rule of a :class:`SearchContext`, Keras default first; `default`: None: config's.
    * `role`: :data:`LOOP` (steps per call: searched first, at its longest) or :data:`KNOB`.
    * `read`/`write`: the setting on a compiled model, set with no rebuild (None: recipes only)."""

    values: Callable[[SearchContext | None], tuple[Any, ...]]
    label: Callable[[Any], str | None]
    default: Any = None
    role: str = KNOB
    order: int = 0
    read: Callable[[Any], Any] | None = None
    write: Callable[[Any, Any], None] | None = None
    # Why `values` offers the default alone here, by design ("": it does not).
    cut: Callable[[SearchContext], str] | None = None

    @property
    def compile_arg(self) -> bool:
        """A ``model.compile`` argument: applied to your compiled model as it is."""
        return self.write is not None


def _policy_of(model: Any) -> str:
    return str(getattr(getattr(model, "dtype_policy", None), "name", None) or "float32")


def _compile_arg(name: str) -> Callable[[Any, Any], None]:
    """Writes `name` into a compiled model as ``compile`` would, without compiling again."""
    return lambda model, value: compat.set_compile_settings(model, **{name: value})


TIGHT_STEP_S, SLOW_STEP_S = 0.01, 0.05  # step times under which loops of 32, 4 steps pay


def _precisions(ctx: SearchContext | None) -> tuple[str, ...]:
    """float32, and the device's fast policy where it has one."""
    if ctx is None or ctx.device is None:
        return ("float32",)
    from toolkit.devices import recommend_precision

    fast, _why = recommend_precision(ctx.device)
    return ("float32", fast) if fast != "float32" else ("float32",)


def _jit(ctx: SearchContext | None) -> tuple[bool, ...]:
    """What the backend compiles, its Keras default first (the seam says)."""
    return (False, True) if ctx is None else backend.get(ctx.backend).searched_jit()


def _jit_cut(ctx: SearchContext) -> str:
    """Why XLA is not searched both ways here: the backend's own rule (the seam's)."""
    only = backend.get(ctx.backend).searched_jit()
    if len(only) > 1:
        return ""
    if only[0]:
        return f"XLA is not searched on {ctx.backend}: it compiles every step with it"
    return f"jit_compile is not searched on {ctx.backend}: its compile outlasts a tune budget"


def _loops(setting: str) -> Callable[[SearchContext | None], tuple[int, ...]]:
    """Loop `setting`'s rule: it pays where per-step overhead counts, if the backend runs it."""
    return lambda ctx: _loop_rule(setting, ctx)[0]


def _loop_cut(setting: str) -> Callable[[SearchContext], str]:
    """Why the loop `setting` is not searched here: :func:`_loop_rule`'s reason."""
    return lambda ctx: _loop_rule(setting, ctx)[1]


def _loop_rule(setting: str, ctx: SearchContext | None) -> tuple[tuple[int, ...], str]:
    """``(the values tried, why the default alone, or "")``: the rule and its reason, once."""
    if ctx is None:
        return (1, 8, 32), ""
    if setting not in backend.get(ctx.backend).step_loops(ctx.loader):
        return (1,), f"{setting} does not run on {ctx.backend} with this input"
    if ctx.step_s is not None and ctx.step_s >= SLOW_STEP_S:
        return (1,), (
            f"no loop is searched for a {ctx.step_s * 1e3:.0f} ms step (loops cut a "
            f"per-step overhead that counts under {SLOW_STEP_S * 1e3:.0f} ms)"
        )
    if ctx.step_s is not None and ctx.step_s >= TIGHT_STEP_S:
        return (1, 4), ""
    return (1, 8, 32), ""


def setting(
    default: Any,
    help: str,
    group: str,
    *,
    flag: str | None = None,
    flag_default: Any = None,
    aliases: tuple[str, ...] = (),
    deprecated: tuple[str, ...] = (),
    searched: Searched | None = None,
    speed: bool = True,
    quiet: Any = dataclasses.MISSING,
    path: bool = False,
    python: str | None = None,
) -> Any:
    """A :class:`TrainConfig` field with everything else that is said of it, once.

    Args:
        default: also the flag's, unless `flag_default`.
        group: its ``--help`` group (:data:`GROUPS`).
        flag: the flag's name where it differs from the field's.
        flag_default: the flag's default where spelled differently (``""``: unset).
        deprecated: old names of the flag, still accepted with a note.
        searched: how tune searches it; None: it does not.
        speed: it changes step speed; False: left out of the chooser's cache key.
        quiet: its value in a short measurement run.
        path: a path (a leading ``~`` is expanded).
        python: :data:`COMPILE`, :data:`FIT` or a ``{value}`` template; None: the flag."""
    meta = {
        "help": help, "group": group, "flag": flag or None, "flag_default": flag_default,
        "aliases": aliases, "deprecated": deprecated, "searched": searched, "speed": speed,
        "path": path, "python": python,
    }  # fmt: skip
    if quiet is not dataclasses.MISSING:
        meta["quiet"] = quiet
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass
class TrainConfig:
    """How to train: every training setting, declared once (:func:`setting`)."""

    use_synthetic_data: bool = setting(
        False,
        "Train on one random batch of the real spec, repeated: input costs ~0 (an upper bound "
        "for the step).",
        DATA,
    )
    data_loader: str = setting(
        "auto",
        f"{' | '.join(DATA_LOADERS)}: what builds the input pipeline (tf_data: tf.data; grain: "
        "Grain, which reads arrays, digits, synthetic and image folders). auto: tf.data on "
        "TensorFlow; Grain on JAX and PyTorch where it is installed and reads the data; else "
        "tf.data, or NumPy arrays without TensorFlow.",
        DATA,
    )
    epochs: int = setting(1, "Training epochs.", TRAINING, speed=False, quiet=1)
    batch_size: int = setting(
        32,
        "Global batch size (examples per step).",
        TRAINING,
        searched=Searched(  # None: the config's
            lambda ctx: (None, *(ctx.batch_sizes if ctx else ())),
            lambda v: f"batch={v}" if v else None,
            order=3,  # last: it changes what every other setting is measured at
        ),
        python=FIT,
    )
    steps_per_epoch: int | None = setting(
        None,
        "Steps per epoch (repeats the data); default: one pass.",
        TRAINING,
        flag="train_steps",
        speed=False,
    )
    validation_freq: int = setting(
        1,
        "Validate every this many epochs (Keras's validation_freq): where validation is a "
        "large share of the run, the report's ledger says what a larger one saves.",
        TRAINING,
        speed=False,
        python=FIT,
    )
    seed: int | None = setting(0, "Random seed (weights, shuffling).", TRAINING)
    init_weights: str | None = setting(
        None,
        "Start from the weights in this .weights.h5 file; when it does not exist yet, the "
        "run's own initial weights are written there first. The same file gives runs under "
        "different backends the same start (python -m toolkit backends uses it).",
        TRAINING,
        speed=False,
        path=True,
    )  # a .weights.h5 to start from (written first if missing)
    stop_on_nan: bool = setting(
        True,
        "Stop at the first step whose loss is NaN or infinite (the report says which); "
        "--nostop_on_nan trains on (the run is still 'diverged').",
        TRAINING,
        speed=False,
    )
    backup_dir: str | None = setting(
        None,
        "Back up the training state every epoch (keras BackupAndRestore); a restarted run "
        "resumes from the last backup. Over processes: a directory every worker reads; the "
        "chief writes it.",
        TRAINING,
        speed=False,
        quiet=None,  # a measurement must not resume a run
        path=True,
    )
    smoke: bool = setting(
        False,
        f"A seconds-long run: 1 epoch of {SMOKE_STEPS} steps.",
        TRAINING,
        speed=False,
        quiet=False,
    )
    precision: str = setting(
        "float32",
        f"Keras precision policy: {' | '.join(PRECISIONS)} (mixed: float16/bfloat16 compute, "
        "float32 variables). --dtype is its old name.",
        SPEED,
        deprecated=("dtype",),
        searched=Searched(_precisions, str, default="float32", order=2, read=_policy_of),
        python="keras.mixed_precision.set_global_policy('{value}') before the model is built",
    )
    jit_compile: bool | None = setting(
        None,
        "Compile the train step: XLA on TensorFlow and JAX, torch.compile on PyTorch. Default: "
        "Keras's choice (on for JAX; off for TensorFlow on a CPU and for PyTorch).",
        SPEED,
        aliases=("enable_xla",),
        searched=Searched(  # first: it moves the step most, and changes what precision costs
            _jit,
            lambda v: "xla" if v else "no-xla",
            default=False,
            order=1,
            read=lambda model: getattr(model, "jit_compile", False) is True,
            write=_compile_arg("jit_compile"),
            cut=_jit_cut,
        ),
        python=COMPILE,
    )  # None: Keras's "auto" (toolkit.backend.jits_by_default)
    steps_per_execution: int = setting(
        1,
        "Training steps per call of the compiled function (Keras batch hooks run once per call).",
        SPEED,
        searched=Searched(
            _loops("steps_per_execution"),
            lambda v: f"spe={v}",
            default=1,
            role=LOOP,
            read=compat.steps_per_execution,
            write=_compile_arg("steps_per_execution"),
            cut=_loop_cut("steps_per_execution"),
        ),
        python=COMPILE,
    )
    fused_steps: int = setting(
        1,
        "Training steps fused into one compiled train step (a loop inside it; with "
        "--jit_compile one XLA program): cuts per-step overhead for small models.",
        SPEED,
        searched=Searched(
            _loops("fused_steps"),
            lambda v: f"fused={v}",
            default=1,
            role=LOOP,
            cut=_loop_cut("fused_steps"),
        ),
        python="{value} training steps fused into one compiled step (recipes: --fused_steps)",
    )
    compile_cache: bool = setting(
        False,
        "Keep compiled programs on disk ($TOOLKIT_CACHE_DIR/compiled/<backend>): a later run of "
        "the same model and settings reads them instead of compiling (JAX: every program; "
        "TensorFlow and PyTorch: what --jit_compile compiles). The first step then shows a read.",
        SPEED,
        python=(
            "toolkit.backend.use_compile_cache() before anything compiles "
            "(recipes: --compile_cache)"
        ),
    )
    backend: str | None = setting(
        None,
        f"{' | '.join(backend.names())} | auto: the Keras backend (default: KERAS_BACKEND, else "
        f"{backend.DEFAULT}); auto: the one python -m toolkit backends measured fastest for this "
        "recipe and flags here. Read from the command line before Keras loads.",
        WHERE,
        speed=False,  # each contender of the backends chooser sets its own
        python="KERAS_BACKEND={value} (set before Keras is imported)",
    )  # None: the one Keras trains on (toolkit.backend.name())
    device: str = setting(
        "auto",
        "auto | cpu | gpu | cuda | metal (mps: the Apple GPU), optionally :index (e.g. gpu:1).",
        WHERE,
        python="with keras.device('{value}'): around building, compile and fit",
    )
    distribution_strategy: str = setting(
        "default",
        f"{' | '.join(distribute.STRATEGIES)}: data_parallel is Keras's own over every device "
        "of every process (any backend); the others are tf.distribute's.",
        DISTRIBUTION,
    )
    worker_hosts: str | None = setting(
        None,
        "Multi-worker: comma-separated host:port of every worker; worker 0 is the chief (and "
        "for data_parallel the coordinator: its port is the one that listens). Without it, "
        "TF_CONFIG (tf.distribute) or KERAS_DISTRIBUTION_* (data_parallel) is read from the "
        "environment.",
        DISTRIBUTION,
    )
    task_index: int = setting(0, "Multi-worker: this worker's index.", DISTRIBUTION)
    cluster_wait: float = setting(
        distribute.CLUSTER_WAIT_S,
        "Multi-worker: seconds a worker waits for every worker of --worker_hosts to join; "
        "then it fails in one line naming those that do not answer (0: the framework's own "
        "wait).",
        DISTRIBUTION,
    )
    shard_policy: str = setting(
        "data",
        "How a multi-worker strategy splits the input: data (every worker reads it all and "
        "keeps its share), file (workers read different files), auto, off.",
        DISTRIBUTION,
    )
    data_service: str | None = setting(
        None,
        "grpc://host:port of a tf.data service dispatcher: the input pipeline runs on its "
        "workers (python -m toolkit data-service).",
        DISTRIBUTION,
    )
    data_service_mode: str = setting(
        "parallel_epochs",
        f"{' | '.join(distribute.SERVICE_MODES)}. parallel_epochs: every trainer gets the whole "
        "dataset; distributed_epoch: trainers split one epoch's elements.",
        DISTRIBUTION,
    )
    data_service_wait: float = setting(
        distribute.DISPATCHER_WAIT_S,
        "Seconds a trainer waits for the --data_service dispatcher to answer (one started "
        "beside it gets this long to come up); then it fails in one line naming the address.",
        DISTRIBUTION,
    )
    report_dir: str | None = setting(
        "runs",
        "Reports go to <report_dir>/<timestamp>/; '' for none.",
        MEASURING,
        speed=False,
        quiet=None,
        path=True,
    )
    warmup_steps: int = setting(
        DEFAULT_WARMUP_STEPS,
        "Steps after the first left out of the step-time statistics.",
        MEASURING,
        speed=False,
    )
    log_steps: int | None = setting(
        None,
        "Print step time and examples/s every N steps.",
        MEASURING,
        speed=False,
        quiet=None,
    )
    verbose: int | None = setting(
        None,
        "Progress while training. Default: the toolkit's (a bar on a terminal; in a log, a line "
        "every --log_steps steps, about ten a run when unset); 0: none; 1 or 2: Keras's own "
        "(it reads the loss every step: a device sync per step).",
        MEASURING,
        flag="log_verbosity",
        speed=False,
        quiet=0,
    )  # None: the toolkit's progress (toolkit.core.progress)
    count_flops: bool = setting(
        True,
        "Count model FLOPs per step; report achieved FLOP/s and MFU against the measured "
        "matmul peak (measured once per machine, ~2 s, then cached).",
        MEASURING,
        speed=False,
        quiet=False,
    )
    profile_steps: tuple[int, int] | None = setting(
        None,
        "Capture a profiler trace of the steps from start up to stop, stop not included "
        "('10,15': steps 10 to 14, five steps).",
        MEASURING,
        flag_default="",
        speed=False,
        quiet=None,
    )
    tensorboard: bool = setting(
        False,
        "Write step time, p50/p90, examples/s, MFU, memory and the epoch metrics as "
        "TensorBoard scalars in the run dir's train and validation runs, as Keras lays them out "
        "(view: tensorboard --logdir <report_dir>).",
        MEASURING,
        speed=False,
        quiet=False,
    )

    def validate(self) -> TrainConfig:
        """Returns self, or raises ConfigError naming the first bad setting and what it must be."""
        self._check_counts()  # in this order: the first bad setting found is the one reported
        self._check_measuring()
        self._check_choices()
        self._check_available()
        self._check_specs()
        return self

    def _check_counts(self) -> None:
        """Whole counts in range (a bool is no count), whole fused steps per epoch, the waits."""
        for name in (
            "epochs",
            "batch_size",
            "steps_per_execution",
            "fused_steps",
            "validation_freq",
        ):
            check_number(flag_name(name), getattr(self, name), integer=True, least=1)
            if getattr(self, name) is None:
                raise _bad(name, "an integer >= 1", None)
        for name in ("steps_per_epoch", "log_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise _bad(name, ">= 1", value)
        if self.steps_per_epoch is not None and self.steps_per_epoch % self.fused_steps:
            raise ConfigError(
                f"--train_steps={self.steps_per_epoch} must be a multiple of "
                f"--fused_steps={self.fused_steps}"
            )
        # NumPy's seeded generator takes 0 .. 2**32 - 1; its own error names no flag.
        check_number(flag_name("seed"), self.seed, integer=True, least=0, most=2**32 - 1)
        for name in ("warmup_steps", "task_index"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise _bad(name, ">= 0", value)
        wait = self.cluster_wait
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:
            raise _bad(
                "cluster_wait", "a number of seconds >= 0 (0: the framework's own wait)", wait
            )
        wait = self.data_service_wait
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait > 0:
            raise _bad("data_service_wait", "a number of seconds > 0", wait)

    def _check_measuring(self) -> None:
        """A trace window that is one, what ``--tensorboard`` needs, a progress Keras knows."""
        if self.profile_steps is not None:
            start, stop = self.profile_steps
            if start < 0 or stop <= start:
                raise ConfigError(
                    f"--profile_steps must be start,stop with 0 <= start < stop, got {start},{stop}"
                )
        if self.tensorboard and not self.report_dir:
            raise ConfigError(
                "--tensorboard writes into the run's directory: give --report_dir "
                "(TensorBoard then reads <report_dir>)"
            )
        if self.tensorboard and importlib.util.find_spec("tensorboard") is None:
            raise ConfigError(
                "--tensorboard needs TensorBoard, which the base install leaves out: "
                "pip install 'keras-perf-toolkit[profile]'"
            )
        if self.verbose not in (None, 0, 1, 2):
            raise _bad("verbose", "0, 1 or 2 (or unset: the toolkit's progress)", self.verbose)

    def _check_choices(self) -> None:
        """The settings that name one of a few choices name one of them."""
        choices = (
            ("precision", PRECISIONS),
            ("distribution_strategy", distribute.STRATEGIES),
            ("shard_policy", distribute.SHARD_POLICIES),
            ("data_service_mode", distribute.SERVICE_MODES),
            ("data_loader", DATA_LOADERS),
        )
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                raise _bad(name, f"one of {', '.join(allowed)}", getattr(self, name))

    def _check_available(self) -> None:
        """The data loader is installed; the backend asked for is the one Keras trains on."""
        if self.data_loader == "grain" and importlib.util.find_spec("grain") is None:
            raise ConfigError(
                "--data_loader=grain needs Grain, which is not installed: "
                "pip install 'keras-perf-toolkit[grain]'"
            )
        if self.data_loader == "tf_data" and importlib.util.find_spec("tensorflow") is None:
            raise ConfigError(
                "--data_loader=tf_data needs TensorFlow, which is not installed here: "
                "--data_loader=auto or grain, or install tensorflow"
            )
        if self.backend is not None and self.backend not in backend.names():
            raise _bad("backend", f"one of {', '.join(backend.names())}", self.backend)
        if self.backend is not None and self.backend != backend.name():
            raise ConfigError(
                f"--backend={self.backend}: Keras trains on {backend.name()} in this process; "
                "give --backend on the command line, or set KERAS_BACKEND before importing Keras"
            )

    def _check_specs(self) -> None:
        """What must parse: weights file, device, service address, workers (not reached)."""
        weights = self.init_weights
        if weights is not None and not str(weights).endswith(".weights.h5"):
            raise _bad("init_weights", "a Keras weights file ending in .weights.h5", weights)
        try:
            parse_device_spec(self.device)
            if self.data_service is not None:
                distribute.service_address(self.data_service)
            if self.worker_hosts:
                distribute.tf_config(self.worker_hosts.split(","), self.task_index)
        except ValueError as e:  # DeviceError, DistributeError: already one line with the flag
            raise ConfigError(str(e)) from None
        for host in (self.worker_hosts or "").split(","):
            # A bad port would otherwise end the run only at the bind, after everything loaded.
            port = host.strip().rpartition(":")[2]
            if port.isdigit() and not 1 <= int(port) <= 65535:
                raise ConfigError(
                    f"--worker_hosts: {host.strip()!r} has port {port}: a port is 1..65535"
                )

    def to_dict(self) -> dict[str, object]:
        """Every setting by field name, as JSON holds it (what crosses to a fresh process)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        """The config :meth:`to_dict` wrote (not validated).

        Raises:
            ConfigError: a name that is no setting."""
        unknown = sorted(set(values) - {f.name for f in SETTINGS})
        if unknown:
            raise ConfigError(f"unknown settings: {', '.join(unknown)}")
        window = values.get("profile_steps")
        return cls(**{**values, "profile_steps": tuple(window) if window else None})

    def for_measurement(self, steps: int, warmup_steps: int) -> TrainConfig:
        """This config as a short quiet run: one epoch of `steps`, each setting at its `quiet`."""
        quiet = {f.name: f.metadata["quiet"] for f in SETTINGS if "quiet" in f.metadata}
        return dataclasses.replace(self, **quiet, steps_per_epoch=steps, warmup_steps=warmup_steps)

    def effective(self, say: bool = True) -> TrainConfig:
        """What a run really uses: ``smoke`` shrinks it; ``steps_per_execution`` fits an epoch."""
        return (self._smoked(say) if self.smoke else self)._within_epoch(say)

    def _within_epoch(self, say: bool = True) -> TrainConfig:
        """Caps a call at an epoch: Keras runs every step of a call, past the epoch's end."""
        if self.steps_per_epoch is None:
            return self
        calls = self.steps_per_epoch // self.fused_steps  # Keras batches in an epoch
        if self.steps_per_execution <= calls:
            return self
        fused = f" ({calls} of --fused_steps={self.fused_steps})" if self.fused_steps > 1 else ""
        (logging.warning if say else logging.debug)(
            "--steps_per_execution=%d is more than an epoch's %d steps%s: "
            "--steps_per_execution=%d, one call per epoch",
            self.steps_per_execution,
            self.steps_per_epoch,
            fused,
            calls,
        )
        return dataclasses.replace(self, steps_per_execution=calls)

    def _smoked(self, say: bool = True) -> TrainConfig:
        steps = min(self.steps_per_epoch or SMOKE_STEPS, SMOKE_STEPS)
        steps = whole_calls(steps, self.fused_steps)
        window = self.profile_steps
        if window is not None:  # kept where it fits the smoke run, never dropped silently
            start, stop = window
            if start >= steps:
                (logging.warning if say else logging.debug)(
                    "--smoke: --profile_steps=%d,%d starts after the smoke run's %d steps: "
                    "no trace (run without --smoke, or trace earlier steps)",
                    start,
                    stop,
                    steps,
                )
                window = None
            elif stop > steps:
                (logging.warning if say else logging.debug)(
                    "--smoke: --profile_steps=%d,%d traced as %d,%d (a smoke run has %d steps)",
                    start,
                    stop,
                    start,
                    steps,
                    steps,
                )
                window = (start, steps)
        return dataclasses.replace(
            self,
            epochs=1,
            steps_per_epoch=steps,
            warmup_steps=min(self.warmup_steps, 1),
            profile_steps=window,
        )


# Every training setting in its help group's order: the one table everything derives from.
SETTINGS: tuple[dataclasses.Field, ...] = dataclasses.fields(TrainConfig)
SEARCHED_SETTINGS: tuple[tuple[str, Searched], ...] = tuple(  # speed ones first, then others
    (f.name, f.metadata["searched"])
    for f in sorted(SETTINGS, key=lambda f: f.metadata["group"] != SPEED)
    if f.metadata["searched"] is not None
)
SEARCHED = tuple(name for name, _ in SEARCHED_SETTINGS)


def model_settings(model: Any) -> dict[str, Setting]:
    """The searched settings your compiled model says it has (each setting's `read`)."""
    return {name: how.read(model) for name, how in SEARCHED_SETTINGS if how.read is not None}


def set_model_settings(model: Any, values: Mapping[str, Setting]) -> None:
    """Writes the compile arguments among `values` into your model; the others need a rebuild."""
    for name, how in SEARCHED_SETTINGS:
        if how.write is not None and name in values:
            how.write(model, values[name])


def as_flags(values: Mapping[str, Setting]) -> str:
    """`values` as the flags a user types (None: no flag): the one place a setting is spelled so."""
    out = []
    for name, value in values.items():
        if value is None:
            continue
        flag = flag_of(name)
        out.append(f"--{'' if value else 'no'}{flag}" if isinstance(value, bool)
                   else f"--{flag}={value}")  # fmt: skip
    return " ".join(out)


@dataclasses.dataclass(frozen=True)
class OwnCompile:
    """A model's own ``compile`` taking only its own arguments (keras.io's ``Distiller``)."""

    owner: str  # the class whose compile it is
    takes: frozenset[str]  # the arguments it names

    @classmethod
    def of(cls, model: Any) -> OwnCompile | None:
        """`model`'s own ``compile`` where it takes no ``**kwargs``; None otherwise."""
        import inspect

        owner = compat.own_method(model, "compile")
        if owner is None:
            return None
        try:
            params = inspect.signature(vars(owner)["compile"]).parameters.values()
        except (TypeError, ValueError):
            return None
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return None
        return cls(owner.__name__, frozenset(p.name for p in params))


def as_python(values: Mapping[str, Setting], own: OwnCompile | None = None) -> str:
    """The settings as a script sets them (``model.compile(..., jit_compile=True)``, the policy;
    else the flag), compile arguments where `own` takes them: the one Python spelling."""
    calls: dict[str, list[str]] = {COMPILE: [], FIT: []}
    out, names = [], []  # names: the compile arguments said
    for name, value in values.items():
        if value is None:
            continue
        how = TrainConfig.__dataclass_fields__[name].metadata.get("python")
        if how in calls:
            calls[how].append(f"{name}={value!r}" if isinstance(value, str) and value != "K"
                              else f"{name}={value}")  # fmt: skip
            names += [name] if how == COMPILE else []
        elif how:
            out.append(how.format(value=value))
        else:
            out.append(f"{as_flags({name: value})} (a recipe's flag)")
    called = [f"model.{c}(..., {', '.join(a)})" for c, a in calls.items() if a]
    if own is not None and calls[COMPILE] and not set(names) <= own.takes:
        called[0] = (
            f"super().compile(..., {', '.join(calls[COMPILE])}) in {own.owner}.compile "
            f"(its own compile takes no {', '.join(n for n in names if n not in own.takes)})"
        )
    return " and ".join(called + out)


def flag_of(field: str) -> str:
    """The flag of a TrainConfig field (``steps_per_epoch`` -> ``train_steps``)."""
    meta = TrainConfig.__dataclass_fields__[field].metadata
    return meta.get("flag") or field


def flag_name(field: str) -> str:
    """``--train_steps (steps_per_epoch)`` for a field whose flag differs, else ``--batch_size``."""
    flag = flag_of(field)
    return f"--{flag} ({field})" if flag != field else f"--{field}"


def _bad(field: str, what: str, value: Any) -> ConfigError:
    return ConfigError(f"{flag_name(field)} must be {what}, got {value!r}")
