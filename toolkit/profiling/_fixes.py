"""What each of a run's largest ledger items would save: its fix, as data, spelled at the edge
(``toolkit.report._fixes``).

:func:`read_fixes` reads a :class:`~toolkit.profiling._ledger_records.Ledger` (pure Python: a report
read elsewhere gets its fixes too) and turns each large item into a :class:`Fix`: the finding, the
:class:`Setting` that fixes it, and the seconds it would save over the run, from this run's own
figures (None where it cannot say). A large part no fix covers is an :class:`Unfixed`."""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from toolkit import backend as backends
from toolkit.core import compat
from toolkit.core.stats import format_duration, format_s
from toolkit.profiling._ledger_records import Ledger

SHARE, MIN_S = 0.05, 0.1  # an item is worth a fix from this share of the run and these seconds
VALIDATION_SHARE = 0.15
COMPILE_SHARE = 0.25  # XLA's break-even, said from this share of the run
INPUT_SHARE = 0.2
EXIT_S = 0.5
UNEVEN = 1.5  # epochs' waits are uneven where the longest is over this many times their mean
EVERY = 5  # validation_freq / checkpoints every this many epochs, as the fixes propose


def share(part: float | None, wall: float) -> str:
    """`part` as a share of `wall`: ``43%`` (``—`` where either is unknown)."""
    return f"{part / wall:.0%}" if part is not None and wall > 0 else "—"


def part_share(ledger: Ledger, name: str) -> str:
    """The ledger's part `name` as a share of the run, as its table rounds it; ``—`` if untimed."""
    pct = ledger.percents().get(name)
    return "—" if pct is None or ledger.wall_s <= 0 else f"{pct}%"


# ---------------------------------------------------------------------------- the records


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting a fix changes, as data: its name and value, and where a script sets it.

    Attributes:
        name: Keras's argument (and, with `runner`, the TrainConfig field).
        call, place: what a script passes it to (``model.fit``), or where it goes, in words.
        runner: a run the runner set up takes it as a flag.
        python: how a script sets it where that is no argument."""

    name: str
    value: Any
    call: str | None = None
    place: str | None = None
    runner: bool = False
    python: str | None = None


@dataclasses.dataclass(frozen=True)
class Fix:
    """One large ledger item and its fix (its JSON: :func:`fix_json`).

    Attributes:
        item: what it fixes (``validation``, ``callback ModelCheckpoint``, ...).
        part, also: the ledger part it shortens, and any others.
        saves_s: the seconds it would save over the run; None: this run cannot say.
        why, note: the finding in words (no setting spelled in it); words after the saving.
        setting: the setting that fixes it; else `action`, the fix in words.
        break_even_ms: XLA's compile: what each step must gain to pay for it."""

    item: str
    part: str
    seconds: float
    saves_s: float | None
    why: str
    setting: Setting | None = None
    action: str | None = None
    note: str | None = None
    break_even_ms: float | None = None
    also: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Unfixed:
    """A large part no fix covers and the rule applied; `names`: settings spelled at ``{name}``."""

    part: str
    seconds: float
    rule: str
    names: tuple[tuple[str, Setting], ...] = ()


# ---------------------------------------------------------------------------- the rules


def read_fixes(ledger: Ledger) -> list[Fix]:
    """The ledger's large items with their fixes: those with a saving first, largest first."""
    if ledger.wall_s <= 0:
        return []
    out = [
        *_recompiles(ledger),
        *filter(None, [_validation(ledger)]),
        *_callbacks(ledger),
        *filter(None, [_exit(ledger), _epoch_starts(ledger), _input(ledger)]),
        *filter(None, [_cache(ledger), _xla(ledger)]),
        *filter(None, [_unjitted(ledger)]),
    ]
    out.sort(
        key=lambda f: (f.saves_s is None, -(f.saves_s if f.saves_s is not None else f.seconds))
    )
    return out


def _is_shape(cause: Any) -> bool:
    text = str(cause or "").lower()
    return "shape" in text or "size mismatch" in text


def _n(epoch: int | None) -> str:
    return str(epoch + 1) if isinstance(epoch, int) else "?"


def _recompiles(ledger: Ledger) -> list[Fix]:
    """Recompiles for a new input shape, per function; the others where a large share."""
    out = []
    again = [c for c in ledger.compiles if not c.first]
    for function in ("train", "evaluate"):
        mine = [c for c in again if c.function == function and _is_shape(c.cause)]
        seconds = sum(c.seconds for c in mine)
        if not mine or seconds < MIN_S:
            continue
        data = "training" if function == "train" else "validation"
        n = len(mine)
        own = _whole_batches(ledger, function)
        batching = Setting("drop_remainder", True, place=f"on the {data} data's batching")
        out.append(Fix(
            f"recompile ({function})", "compile", seconds,
            seconds,  # the partial batch's own step goes too, but is not guessed at
            f"{n} recompile{'s' if n != 1 else ''} of the {function} step for a new input "
            f"shape ({mine[0].cause}, epoch {_n(mine[0].epoch)}) cost {format_s(seconds)}",
            None if own else batching,
            action=own,
            note="(or a batch size that divides it; a pipeline batched where you cannot set it, "
            "such as timeseries_dataset_from_array's: .rebatch(batch_size, drop_remainder=True) "
            "on it; the recompile goes, and the partial batch's own step each pass)"
            if own is None
            else "(the recompile goes, and the partial batch's own step each pass)",
        ))  # fmt: skip
    other = [c for c in again if not _is_shape(c.cause)]
    seconds = sum(c.seconds for c in other)
    if other and seconds >= MIN_S and seconds >= SHARE * ledger.wall_s:
        out.append(Fix(
            "recompile (other)", "compile", seconds, None,
            f"{len(other)} recompile(s) cost {format_s(seconds)} ({other[0].cause})",
            action="keep the step's inputs and settings fixed",
            note="(the step compiled again mid-run)",
        ))  # fmt: skip
    return out


def _validation(ledger: Ledger) -> Fix | None:
    """Validation every epoch, a large share: its runs beyond ``validation_freq=k``'s."""
    validation, wall, epochs = ledger.seconds("validation"), ledger.wall_s, ledger.epochs
    runs_s = ledger.validation_runs_s
    runs = len(runs_s)
    # Only a run validated every epoch (one already thinned has its own validation_freq).
    if not (validation and runs == epochs and runs >= 2 and validation >= VALIDATION_SHARE * wall):
        return None
    k = min(EVERY, epochs)
    per_run = statistics.median(runs_s)
    saves = per_run * max(0, runs - epochs // k)
    if saves < MIN_S:
        return None
    return Fix(
        "validation", "validation", validation, saves,
        f"validation takes {part_share(ledger, 'validation')} of the run ({runs} runs, "
        f"{format_s(per_run)} each)",
        Setting("validation_freq", k, call="model.fit", runner=True),
    )  # fmt: skip


TRACES = ("TraceWindow", "AnatomyWindow")  # the profiler's cost, paid once by a run that asks


def _callbacks(ledger: Ledger) -> list[Fix]:
    """Each large callback: ModelCheckpoint's saves beyond one every k epochs; another's time."""
    out = []
    epochs, wall = ledger.epochs, ledger.wall_s
    for c in ledger.callbacks:
        if c.seconds < MIN_S or c.seconds < SHARE * wall:
            continue
        if c.name in TRACES:  # the toolkit's own, asked for: once, not an epoch's habit
            out.append(Fix(
                f"callback {c.name}", "callbacks", c.seconds, c.seconds,
                f"the trace you asked for ({c.name}) took {format_s(c.seconds)} "
                f"({share(c.seconds, wall)} of the run), starting and ending the profiler",
                action="a run without the trace (trace_steps=, --profile_steps) does not pay "
                "it; trace where you need to see inside the step",
            ))  # fmt: skip
            continue
        per_epoch = c.seconds / max(1, epochs)
        why = (
            f"{c.name} spends {format_s(per_epoch)} per epoch ({share(c.seconds, wall)} of the run)"
        )
        if c.name == "ModelCheckpoint" and epochs >= 2:
            k = min(EVERY, epochs)
            saves = per_epoch * (epochs - epochs // k)
            spe = ledger.steps_per_epoch
            setting = (
                Setting("save_freq", k * spe, call="keras.callbacks.ModelCheckpoint")
                if spe
                else None
            )
            action = None if spe else f"save_freq={k} × the steps per epoch on ModelCheckpoint"
            out.append(Fix(
                f"callback {c.name}", "callbacks", c.seconds, saves, why, setting, action,
                note=f"(a save every {k} epochs)",
            ))  # fmt: skip
            continue
        out.append(Fix(
            f"callback {c.name}", "callbacks", c.seconds, c.seconds, why,
            action=f"call {c.name} less often, or make it cheaper",
            note="at most (without it: less where it overlapped other work, such as "
            "tf.data's between epochs)",
        ))  # fmt: skip
    return out


# The data adapters Keras builds its own tf.data pipeline for: no option of the user's reaches it.
KERAS_OWN_PIPELINE = {
    "ArrayDataAdapter": "arrays",
    "PyDatasetAdapter": "a PyDataset",
    "GeneratorDataAdapter": "a generator",
    "TorchDataLoaderAdapter": "a DataLoader",
    "GrainDatasetAdapter": "a Grain dataset",
}


# How each form whose batches Keras makes drops its last partial batch.
WHOLE_BATCHES = {
    "ArrayDataAdapter": "trim your arrays to a multiple of the batch size, or give fit a "
    "batch_size that divides your examples",
    "PyDatasetAdapter": "have your PyDataset's __len__ count whole batches only",
    "GeneratorDataAdapter": "have your generator yield whole batches only",
    "TorchDataLoaderAdapter": "DataLoader(..., drop_last=True)",
    "GrainDatasetAdapter": ".batch(batch_size, drop_remainder=True) on your Grain dataset",
}


def _whole_batches(ledger: Ledger, function: str) -> str | None:
    """The fix in words for a ragged last batch read by Keras's own adapter; None for tf.data
    (``drop_remainder``). Validation data's form is unknown, so both ways are named."""
    if ledger.adapter not in WHOLE_BATCHES:
        return None
    if function == "train":
        return WHOLE_BATCHES[ledger.adapter]
    return (
        "give fit a validation_batch_size that divides the validation examples (with "
        "validation_split, the split's), or trim them to a multiple of it; a tf.data "
        "validation pipeline: drop_remainder=True on its batching"
    )


def _teardown(ledger: Ledger) -> str:
    """The fix for tf.data's teardown waiting for its autotune thread, on a pipeline you reach."""
    own = KERAS_OWN_PIPELINE.get(ledger.adapter or "")
    if own is None:
        return (
            "options.autotune.enabled = False on the tf.data dataset (its teardown waits for "
            "the autotune thread)"
        )
    return (
        f"give fit a tf.data.Dataset of your data with options.autotune.enabled = False (Keras "
        f"makes its own tf.data pipeline of {own}, whose teardown waits for the autotune thread)"
    )


def _through_tf_data(ledger: Ledger) -> bool:
    """Whether fit read through tf.data (Keras on TensorFlow makes one of every input form)."""
    return ledger.backend == "tensorflow"


def _exit(ledger: Ledger) -> Fix | None:
    """A slow exit: on TensorFlow, tf.data's teardown waiting for its autotune thread."""
    exit_s = ledger.seconds("exit")
    if exit_s is None or exit_s < EXIT_S or exit_s < SHARE * ledger.wall_s:
        return None
    tf = _through_tf_data(ledger)
    action = _teardown(ledger) if tf else "close the input's iterator and worker processes sooner"
    why = f"the fit exits {format_s(exit_s)} after its last step"
    return Fix("exit", "exit", exit_s, exit_s if tf else None, why, action=action)


def _epoch_starts(ledger: Ledger) -> Fix | None:
    """Epochs that waited before their first step: each new input iterator (on TensorFlow, the old
    one's teardown waits for autotune); one iterator for the fit (``repeat``) makes none."""
    starts = ledger.epoch_starts_s
    if not starts or starts < EXIT_S or starts < SHARE * ledger.wall_s:
        return None
    tf = _through_tf_data(ledger)
    action = (
        f"{_teardown(ledger)}; or .repeat() the dataset and pass steps_per_epoch (one iterator "
        "for the whole fit)"
        if tf
        else "one iterator for the whole fit: a repeated dataset with steps_per_epoch"
    )
    later = max(1, ledger.epochs - 1)
    part, longest = share(starts, ledger.wall_s), ledger.epoch_start_max_s
    if longest is not None and later > 1 and longest > UNEVEN * starts / later:
        each = f"one epoch {format_s(longest)} of it"
    else:
        each = f"{format_s(starts / later)} an epoch"
    why = (
        f"epochs 2 on waited {format_s(starts)} before their first steps ({part} of the run, "
        f"{each}): each epoch's new input iterator"
    )
    return Fix("epoch starts", "other", starts, None, why, action=action,
               note="save up to that much")  # fmt: skip


def _input(ledger: Ledger) -> Fix | None:
    """The input, where it was timed (the steps' wait) or read beside queued steps."""
    wall, input_s, read = ledger.wall_s, ledger.seconds("input"), ledger.input_read_s
    action = "cache, prefetch or more input workers (diagnose measures the pipeline)"
    if input_s is not None and input_s >= INPUT_SHARE * wall and input_s >= MIN_S:
        why = (
            f"the steps waited {format_s(input_s)} for their input ({part_share(ledger, 'input')} "
            "of the run)"
        )
        return Fix("input", "input", input_s, None, why, action=action,
                   note="save up to that much")  # fmt: skip
    if input_s is None and read and read >= INPUT_SHARE * wall:
        why = (
            f"the host spent {format_s(read)} ({share(read, wall)} of the run) reading "
            "batches while the device ran the steps"
        )
        return Fix("input", "input", read, None, why, action=action,
                   note="(diagnose says whether the steps waited for them)")  # fmt: skip
    return None


def caches_this_step(ledger: Ledger) -> bool:
    """Whether the compile cache keeps this run's step: what ``jit_compile`` compiles, and every
    step on a backend that jits all (JAX) unless Keras did not; tracing is never cached."""
    if ledger.jit():
        return True
    return False not in _searched_jit(ledger.backend) and str(ledger.jit_compile) != "False"


def _unjitted(ledger: Ledger) -> Fix | None:
    """A step Keras ran op by op on a backend that jits every step (JAX), for a layer ruling XLA
    out: move it into the input pipeline; only a run with that says the saving."""
    if not ledger.unjitted_by or ledger.jit() or False in _searched_jit(ledger.backend):
        return None
    steps = ledger.seconds("steps") or 0.0
    compile_s = ledger.seconds("compile") or 0.0
    if steps + compile_s < max(MIN_S, SHARE * ledger.wall_s):
        return None
    return Fix(
        "unjitted step", "steps", steps, None,
        f"{compat.ruling_xla_out(ledger.unjitted_by)}, so "
        f"Keras ran {backends.title(ledger.backend)}'s step unjitted, op by op: the steps took "
        f"{part_share(ledger, 'steps')} of the run and compile {part_share(ledger, 'compile')}",
        action="apply such layers to the training data (a tf.data or Grain map) instead of "
        "inside the model, and the step jits",
        note="(tune or a second run measures the saving)",
        also=("compile",),  # the op-by-op compile: a jitted step compiles once
    )  # fmt: skip


def _cache(ledger: Ledger) -> Fix | None:
    """Compile in a runner's run without the cache, where it keeps this step: what the backend
    timed compiling (only XLA's is cached), capped at the compile part; None if untimed."""
    compile_s, wall = ledger.seconds("compile"), ledger.wall_s
    if not compile_s or compile_s < MIN_S or compile_s < SHARE * wall:
        return None
    if not ledger.reader.runner or ledger.reader.compile_cache or not caches_this_step(ledger):
        return None
    timed = sum(c.backend_seconds or 0.0 for c in ledger.compiles)
    saves = min(timed, compile_s) if timed else None
    what = "what the backend timed compiling here" if saves is not None else "up to the compile"
    built = ledger.reader.build_compile_s
    # The build's compiles are the process's, not the fit's: said beside the saving.
    more = f"; the model's build, {format_s(built)} of compiling before fit, too" if built else ""
    return Fix(
        "compile cache", "compile", compile_s, saves,
        f"compile takes {part_share(ledger, 'compile')} of the run ({format_s(compile_s)})",
        Setting("compile_cache", True, runner=True,
                python="toolkit.backend.use_compile_cache() before anything compiles"),
        note=f"on each later run of this model and settings ({what}; its tracing is not "
        f"cached; the first run writes the cache{more})",
    )  # fmt: skip


def _searched_jit(backend: str) -> tuple[bool, ...]:
    """``jit_compile`` values tune searches on `backend` (both if unknown): all a fix may name."""
    try:
        found = backends.find(backend) if backend else None
        return tuple(found.searched_jit()) if found is not None else (False, True)
    except Exception:  # noqa: BLE001 - a report from elsewhere: both ways
        return (False, True)


def _xla(ledger: Ledger) -> Fix | None:
    """XLA's compile, a large share of a short run: what each step must gain to pay for it."""
    compile_s, wall, steps = ledger.seconds("compile"), ledger.wall_s, ledger.steps
    first = next((c for c in ledger.compiles if c.first and c.function == "train"), None)
    if not (ledger.jit() and compile_s and compile_s >= COMPILE_SHARE * wall and first and steps):
        return None
    per_step = first.seconds / steps
    if False not in _searched_jit(ledger.backend):
        return Fix(  # XLA off is no setting here (JAX jits every step): a longer run spreads it
            "compile", "compile", compile_s, None,
            f"compile takes {part_share(ledger, 'compile')} of the run ({format_s(first.seconds)} "
            f"for the step's first call, {format_duration(per_step)} over each of its {steps:,} "
            "steps)",
            action="a longer run spreads it",
            note=f"({backends.title(ledger.backend)} compiles every step it runs: there XLA "
            "off is no setting)",
        )  # fmt: skip
    why = (
        f"compile takes {part_share(ledger, 'compile')} of the run ({format_s(first.seconds)} for "
        f"XLA's first call): over this run's {steps:,} steps it pays for itself only if XLA "
        f"saves {format_duration(per_step)} a step"
    )
    return Fix(
        "compile", "compile", compile_s, None, why,
        Setting("jit_compile", False, call="model.compile", runner=True),
        action="or a longer run", note="(tune measures jit_compile both ways over the run)",
        break_even_ms=per_step * 1e3,
    )  # fmt: skip


# ---------------------------------------------------------------------------- no fix


def unfixed(ledger: Ledger, found: list[Fix]) -> list[Unfixed]:
    """Each part of :data:`SHARE` and :data:`MIN_S` no fix in `found` shortens, with its rule."""
    wall, covered = ledger.wall_s, {p for f in found for p in (f.part, *f.also)}
    large = [
        p for p in ledger.parts
        if p.seconds is not None and p.seconds >= max(MIN_S, SHARE * wall)
        and p.name not in covered
    ]  # fmt: skip
    large.sort(key=lambda p: -(p.seconds or 0.0))
    return [Unfixed(p.name, p.seconds or 0.0, *_rule(ledger, p.name)) for p in large]


def _rule(ledger: Ledger, part: str) -> tuple[str, tuple[tuple[str, Setting], ...]]:
    """Why `part` has no fix: the rule applied, in words (and the settings they name)."""
    if part == "compile":
        return _compile_rule(ledger)
    if part == "validation":
        runs, epochs = len(ledger.validation_runs_s), ledger.epochs
        return (
            "validating less often is proposed for a run validated every epoch, at least "
            f"twice, where validation takes {VALIDATION_SHARE:.0%} of the run (this run: "
            f"{runs} validations in {epochs} epochs)"
        ), ()
    if part == "callbacks":
        top = ledger.callbacks[0] if ledger.callbacks else None
        largest = f"; the largest, {top.name}, took {format_s(top.seconds)}" if top else ""
        return (
            f"a callback is proposed from {MIN_S} s and {SHARE:.0%} of the run on its own{largest}"
        ), ()
    return _RULES.get(part, "the ledger has no fix for it"), ()


_RULES = {
    "steps": "the training steps themselves: the ledger has no fix for them (doctor without "
    "--report measures whether the input or the step bounds them; tune searches the step's "
    "settings)",
    "start_up": "the fit's start (the data adapter, building, the callbacks' train begin, the "
    "input iterator): the ledger has no fix for it",
    "input": f"the input is proposed from {INPUT_SHARE:.0%} of the run",
    "exit": f"a slow exit is proposed from {EXIT_S} s and {SHARE:.0%} of the run",
    "other": "Keras's own work between the parts: the ledger has no fix for it (report.md's "
    "'Other' lines say where it lies)",
}


def _compile_rule(ledger: Ledger) -> tuple[str, tuple[tuple[str, Setting], ...]]:
    """Why compile has no fix: not a runner's run, the cache on already, or a step it won't keep."""
    cache = Setting("compile_cache", True, runner=True,
                    python="toolkit.backend.use_compile_cache()")  # fmt: skip
    jit = Setting("jit_compile", True, call="model.compile", runner=True)
    if not ledger.reader.runner:
        return (
            "the compile cache is proposed for a run the toolkit's runner set up (a recipe "
            "records whether it was on); from a script, {cache} before anything compiles "
            "keeps compiled programs for later runs"
        ), (("cache", cache),)
    if ledger.reader.compile_cache:
        return (
            "the run had {cache} on already (a first run writes the cache, a later one "
            "reads it; tracing is never cached)"
        ), (("cache", cache),)
    if not caches_this_step(ledger):
        backend = backends.title(ledger.backend) if ledger.backend else "this backend"
        return (
            f"{{cache}} would not shorten it: {backend}'s cache keeps only what {{jit}} "
            "compiles, and this run's step was not compiled so (tracing is never cached)"
        ), (("cache", cache), ("jit", jit))
    return f"compile is proposed from {MIN_S} s and {SHARE:.0%} of the run", ()
