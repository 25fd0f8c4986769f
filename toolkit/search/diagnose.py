"""Input-bound or compute-bound? Three measured rates and a verdict, with advice.

:func:`diagnose` measures a recipe's Task, or *your own* compiled Keras model and batched data
(weights and optimizer state put back), in steps per second: **input**, the pipeline alone;
**compute**, the step alone on one batch repeated (the upper bound here); **fit**, the real ``fit``.
:func:`classify` turns them into a verdict; *overlap* flags a fit slower than both parts. Advice
leaves out what a cached tune search measured here and did not pick. No profiler is needed (so it
works on Metal); with XProf, a short traced fit sets its reading beside the rates'."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from toolkit.core import _extras as extras
from toolkit.core import compat, terminal
from toolkit.core._advice import Advice
from toolkit.core._anatomy import Anatomy, reconcile
from toolkit.core.checks import argument, check_number
from toolkit.core.files import ReportError
from toolkit.core.progress import say
from toolkit.core.stats import whole_calls
from toolkit.profiling._ledger_records import Ledger
from toolkit.report._anatomy import anatomy_top_lines
from toolkit.report._diagnosis import DiagnosisSection, SecondOpinion
from toolkit.report._ledger import as_ledger, ledger_json, whole_run_lines
from toolkit.report._trace_records import TraceAnalysis
from toolkit.runner.config import OwnCompile, TrainConfig, as_flags, as_python
from toolkit.search.advice import (
    BALANCED,
    COMPUTE_BOUND,
    INPUT_BOUND,
    INPUT_COST_BOUND,
    MARGIN,
    UNCERTAIN,
    Facts,
    Tuned,
    advise,
)
from toolkit.search.engine import Candidate
from toolkit.search.workload import workload

__all__ = [
    "BALANCED",
    "COMPUTE_BOUND",
    "INPUT_BOUND",
    "UNCERTAIN",
    "Diagnosis",
    "diagnose",
]

DEFAULT_STEPS = 60  # steps per measurement, at least, unless you give a number
MIN_WINDOW_S = 0.5  # each timed window of a diagnosis, at least (at the step alone's rate)
MAX_WINDOW_STEPS = 2000  # ... but no more steps than this
TRACE_STEPS = 5  # steps of the real fit traced for XProf's reading, after the timed ones


@dataclasses.dataclass
class Diagnosis:
    """Rates (steps/s), the verdict, whether input and step overlap, and advice."""

    input_rate: float
    compute_rate: float
    fit_rate: float
    verdict: str
    overlap_ok: bool
    advice: list[Advice]
    batch_size: int | None = None
    steps: int = 0  # the real fit's timed steps (the steps asked for, or its window's more)
    pipeline: str = ""
    xprof: SecondOpinion | None = None  # XProf's reading of a trace of the fit, if taken
    python: bool = False  # your own model (diagnose(model, data)): advice in Python, not flags
    own_compile: OwnCompile | None = None  # its class's own compile: said where it passes them
    ledger: Ledger | None = None  # a whole run's, handed in: where its time went, and fixes
    anatomy: Anatomy | None = None  # the same trace taken apart, where XProf read it
    noise: float | None = None  # how far two runs of one window differed (None: one run each)
    uncertain: str = ""  # why the verdict is uncertain

    def section(self) -> DiagnosisSection:
        """What the run's report keeps of it: the advice and the ledger."""
        return DiagnosisSection(
            self.input_rate, self.compute_rate, self.fit_rate, self.verdict, self.overlap_ok,
            tuple(self.advice_lines()), self.batch_size, self.steps, self.pipeline, self.xprof,
            self.python,
            ledger_json(self.ledger, as_flags) if self.ledger is not None else None,
            self.anatomy, self.noise, self.uncertain,
        )  # fmt: skip

    def to_dict(self) -> dict[str, object]:
        """report.json's ``diagnosis``."""
        return self.section().to_dict()

    def advice_lines(self) -> list[str]:
        """Each piece of advice spelled for who asked: Python for your model, flags for a recipe."""
        spell = functools.partial(as_python, own=self.own_compile) if self.python else as_flags
        return [a.spelled(spell) if isinstance(a, Advice) else str(a) for a in self.advice]

    def lines(self) -> list[str]:
        per = f" ({self.batch_size} examples/step)" if self.batch_size else ""
        why = (
            f": {self.uncertain}; no advice from it, measure again (more steps, a quieter machine)"
            if self.uncertain
            else ""
        )
        out = [
            f"verdict: {self.verdict}{per}{why}",
            f"  measured pipeline: {self.pipeline or 'unknown'}",
            f"  input pipeline alone: {self.input_rate:,.1f} batches/s",
            f"  train step alone:     {self.compute_rate:,.1f} steps/s (one cached batch)",
            f"  real fit:             {self.fit_rate:,.1f} steps/s",
        ]
        if self.noise is not None and self.noise > MARGIN / 2:  # said where it could matter
            out.append(
                f"  noise: two runs of one window differed by {self.noise:.0%} (more steps "
                "hold the windows still)"
            )
        if self.xprof:
            out.append(f"  XProf: {self.xprof.line}")
        if self.anatomy is not None and not self.anatomy.error:
            out += [f"  {line}" for line in anatomy_top_lines(self.anatomy)]
        out += [f"  advice: {a}" for a in self.advice_lines()]
        if self.ledger:
            out += [f"  {line}" for line in whole_run_lines(self.ledger, flags=as_flags)]
        return out

    def __str__(self) -> str:
        # Folded to a terminal's width; in a notebook or a log, one line per finding.
        return terminal.fit("\n".join(self.lines()), terminal.width())


def classify(
    input_rate: float, compute_rate: float, fit_rate: float, margin: float = MARGIN
) -> tuple[str, bool]:
    """``(verdict, overlap_ok)`` from the three rates (any common unit): input-bound when the
    pipeline alone, or the real fit, is slower than the step alone; compute-bound when the pipeline
    has headroom and the fit keeps up (within half the margin); balanced between. Beside a pipeline
    with headroom, a fit's shortfall is put on its input only up to `INPUT_COST_BOUND` times the
    pipeline's own time per batch; a fit trailing by more lost the time elsewhere.

    Raises:
        ValueError: a rate that is not positive."""
    for name, rate in (("input", input_rate), ("compute", compute_rate), ("fit", fit_rate)):
        if not rate > 0:
            raise ValueError(f"{name} rate must be > 0, got {rate}")
    input_could_cost = 1 / fit_rate - 1 / compute_rate <= INPUT_COST_BOUND / input_rate
    headroom = input_rate > compute_rate * (1 + margin)
    shortfall_is_input = input_could_cost or not headroom
    if input_rate < compute_rate * (1 - margin) or (
        fit_rate < compute_rate * (1 - margin) and shortfall_is_input
    ):
        verdict = INPUT_BOUND
    elif headroom and (fit_rate >= compute_rate * (1 - margin / 2) or not input_could_cost):
        verdict = COMPUTE_BOUND
    else:
        verdict = BALANCED
    overlap_ok = fit_rate >= min(input_rate, compute_rate) * (1 - margin) or not (
        shortfall_is_input
    )
    return verdict, overlap_ok


def consistency(
    input_rate: float,
    compute_rate: float,
    fit_rate: float,
    noise: float | None,
    margin: float = MARGIN,
) -> str:
    """Why the rates cannot carry a verdict ("" where they can): a fit faster than the step alone
    beyond the runs' `noise`; a verdict resting on a fit-to-step gap inside the noise; a fit faster
    than its own pipeline. Said as :data:`UNCERTAIN`, never a verdict with advice."""
    ratio, swing = fit_rate / compute_rate, max(noise or 0.0, margin / 2)
    if ratio > 1 + swing:
        return (
            f"the real fit ran {ratio:.2f}× the step alone, which bounds it: the machine's "
            "load moved between the windows"
        )
    outran = fit_rate / input_rate
    # A fit well below the step alone that outran its pipeline by under twice the margin read what
    # the window left untimed (buffers filled during the compile): the pipeline bounds it still.
    buffered = fit_rate < compute_rate * (1 - margin) and outran <= 1 + 2 * margin
    if outran > 1 + swing and not buffered:
        return (
            f"the real fit ran {outran:.2f}× the pipeline alone, which feeds "
            "it: the pipeline read slower alone than in the fit (its buffers filling in a "
            "short window, or the machine's load moved between the windows)"
        )
    fit_decides = input_rate >= compute_rate * (1 - margin) and ratio < 1 - margin / 2
    if fit_decides and noise is not None and 1 - ratio <= noise:
        return (
            f"the real fit's {1 - ratio:.0%} gap to the step alone is inside this machine's "
            f"noise (two runs of one window differed by {noise:.0%})"
        )
    apart = max(input_rate, compute_rate) / min(input_rate, compute_rate) - 1
    if noise is not None and noise > margin and apart <= noise:  # which bounds: noise says
        return (
            f"the pipeline alone and the step alone are {apart:.0%} apart, inside this "
            f"machine's noise (two runs of one window differed by {noise:.0%})"
        )
    return ""


_CONTRADICTS = {  # XProf's verdicts a rates verdict contradicts (balanced: none)
    INPUT_BOUND: ("not input-bound",),
    COMPUTE_BOUND: ("highly input-bound",),
}


def second_opinion(
    verdict: str, analysis: TraceAnalysis | None, pipeline_slower: bool = True
) -> SecondOpinion:
    """XProf's reading of a trace of the fit beside the rates' `verdict`: whether they agree, and
    why they may not, in one line. `pipeline_slower`: the pipeline alone trailed the step alone."""
    analysis = analysis or TraceAnalysis()
    theirs, share = analysis.verdict, analysis.input_percent
    if theirs is None or share is None:
        why = analysis.error or "XProf gave no verdict on the trace"
        return SecondOpinion(theirs, share, None, f"no verdict ({why})")
    said = f"{theirs}, {share:.1f}% of the traced steps' time waiting for input"
    if "potentially" in theirs:  # XProf's word for much unattributed time, not for a wait
        said = (
            f"{share:.1f}% of the traced steps' time waiting for input (XProf labels it "
            f"'{theirs}'; much of the step is Python or other host time)"
        )
    if verdict == UNCERTAIN:
        uncertain = f"{said}; the rates are uncertain: nothing to hold it against"
        return SecondOpinion(theirs, share, None, uncertain)
    positive = not theirs.startswith("not ")
    clash = (verdict == COMPUTE_BOUND and positive) or (verdict == INPUT_BOUND and not positive)
    if clash and "potentially" not in theirs and theirs not in _CONTRADICTS.get(verdict, ()):
        said = (  # one verdict's words: the rates'
            f"{share:.1f}% of the traced steps' time waiting for input (XProf labels it '{theirs}')"
        )
    if theirs not in _CONTRADICTS.get(verdict, ()):
        return SecondOpinion(theirs, share, True, f"{said}; agrees with the rates: {verdict}")
    if verdict == INPUT_BOUND and pipeline_slower:
        why = (
            "the pipeline alone is slower than the step, yet the fit barely waited: "
            "prefetching or the cache filled the gap while traced, or the pipeline "
            "measured alone competed with nothing"
        )
    elif verdict == INPUT_BOUND:
        why = (
            "the pipeline alone outruns the step, but the real fit trails the step "
            "alone: its input's threads take the step's cores, which XProf counts as "
            "step time, not as waiting"
        )
    else:
        why = (
            "the pipeline alone outruns the step, yet the fit waited for it: the two "
            "compete for the host's cores when they run together"
        )
    return SecondOpinion(
        theirs, share, False, f"{said}; disagrees with the rates ({verdict}): {why}"
    )


@contextlib.contextmanager
def _fit_trace(start_step: int, steps: int) -> Iterator[list[Any]]:
    """Callbacks tracing `steps` fit steps from `start_step`, in a temp dir; [] without XProf."""
    from toolkit.profiling.anatomy import AnatomyWindow

    if extras.note_missing("profile", "diagnose: no XProf cross-check", needs=("xprof",)):
        yield []
        return
    with tempfile.TemporaryDirectory(prefix="toolkit-diagnose-") as tmp:
        # the same window takes the step apart (its anatomy's top lines join the diagnosis)
        yield [AnatomyWindow(tmp, start_step=start_step, stop_step=start_step + steps)]


def _read_trace(callbacks: list[Any], steps_per_execution: int) -> TraceAnalysis | None:
    """What `_fit_trace`'s trace says, read before its directory goes; None: none was taken."""
    from toolkit.report.trace import read_trace

    if not callbacks:
        return None
    window = callbacks[0]
    if window.error:
        return TraceAnalysis(error=window.error)
    if window.traced_steps is None:
        return TraceAnalysis(error="the fit ended before the traced steps")
    return read_trace(window.trace_files(), steps_per_execution)


def _cpu_cores() -> int | None:
    """The cores this process may run on (its affinity, where the OS says; else all)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def _pipeline_facts(dataset: Any) -> tuple[frozenset[str], frozenset[str]]:
    from toolkit.data.builder import dataset_ops

    classes, ops = dataset_ops(dataset)
    return frozenset(classes), frozenset(ops)


def _window(rate: float) -> int:
    """Steps (batches) lasting :data:`MIN_WINDOW_S` at `rate`, at most :data:`MAX_WINDOW_STEPS`."""
    return min(MAX_WINDOW_STEPS, math.ceil(MIN_WINDOW_S * rate)) if rate > 0 else 0


def _input_alone(work: Any, dataset: Any, batches: int) -> tuple[Any, str | None]:
    """``(benchmark result, words)`` of `batches` of the input alone, read as the fit reads it."""
    from toolkit.data import benchmark

    read = work.input_batches()
    if read is None:
        return benchmark(dataset.repeat(), num_batches=batches, verbose=False), None
    words, reader = read
    try:
        result = benchmark(reader, num_batches=batches, batch_size=work.batch_size, verbose=False)
    finally:
        reader.close()
    return result, words


def _faster(a: Any, b: Any) -> Any:
    """Of two reports of the same measurement, the one whose timed steps ran faster."""
    if not b.steps.timed_steps:
        return a
    if not a.steps.timed_steps or b.steps.mean_s < a.steps.mean_s:
        return b
    return a


def _spread(a: Any, b: Any) -> float | None:
    """How far two runs of one window differed: the slower's mean step over the faster's, less 1."""
    if not (a.steps.timed_steps and b.steps.timed_steps and a.steps.mean_s and b.steps.mean_s):
        return None
    slow, fast = sorted((a.steps.mean_s, b.steps.mean_s), reverse=True)
    return slow / fast - 1


def _rate(stats: Any) -> float:
    if not stats.timed_steps:
        raise ValueError(
            "no timed steps: measure more steps (diagnose(..., steps=N); on the command line "
            "--diagnose_steps=N)"
        )
    return 1.0 / stats.mean_s


def diagnose(
    target: Any,
    data: Any = None,
    *,
    config: TrainConfig | None = None,
    steps: int | None = None,
    devices_found: Iterable[Any] | None = None,
    ledger: Any = None,
    class_weight: Mapping[int, float] | None = None,
) -> Diagnosis:
    """Measures the input pipeline alone, the step alone and the real fit; returns the verdict.

    ``diagnose(task, config)`` as the runner would train the Task; ``diagnose(model, data)`` your
    own compiled model on your batched data, its weights and optimizer state put back afterwards.

    Args:
        target: a ``toolkit.runner.train.Task``, or a compiled Keras model.
        data: with a model, its training data (required); with a Task, may be its TrainConfig.
        config: with a Task, the ``TrainConfig`` to diagnose.
        steps: per measurement after warm-up (default: 60, more where under ``MIN_WINDOW_S``).
        devices_found: the devices present (default: ``toolkit.devices.detect()``).
        ledger: a whole run (a StepTimer that timed its fit, a RunReport or its ledger): the
            diagnosis then says where its time went and what each fix would save.
        class_weight: with your model, ``{class index: weight}`` as ``fit`` takes it.

    Raises:
        toolkit.runner.train.SetupError: a setting or data that cannot work."""
    check_number(argument("diagnose", "steps"), steps, integer=True, least=1)
    # The step alone first: a Task's workload selects the device before TensorFlow's runtime starts.
    auto, steps = steps is None, DEFAULT_STEPS if steps is None else steps
    with workload(target, data, config, class_weight=class_weight) as work:
        measured = _Measurements(work, steps)
        measured.step_alone()
        measured.input_alone()
        windows = measured.windows() if auto else measured.unsized()
        measured.real_fit_then_both_again(windows)
        measured.xprof_trace()
        measured.tuned = _tuned(work)
    found = dataclasses.replace(measured.conclude(devices_found), anatomy=measured.anatomy)
    found.ledger = ledger_of(ledger)
    return found


@dataclasses.dataclass(frozen=True)
class _Windows:
    """The timed fits' lengths in steps; `probe`: the step alone's first run only sized them."""

    alone_total: int
    fit_total: int
    probe: bool = False


class _Measurements:
    """One workload's measurements: a method per phase, in :func:`diagnose`'s order."""

    def __init__(self, work: Any, steps: int) -> None:
        self.work, self.steps = work, steps
        self.per_call = work.per_call
        self.warmup = max(1, min(work.config.warmup_steps, 10))
        self.total = whole_calls(self.warmup + 1 + steps, self.per_call)
        self.compute: Any = None  # the step alone's report
        self.dataset: Any = None  # the pipeline measured, alone and in the real fit
        self.pipeline: Any = None  # the input alone's benchmark
        self.words: str | None = None  # the adapter's words for it (None: the pipeline's own)
        self.fit: Any = None  # the real fit's report
        self.trace: TraceAnalysis | None = None
        self.anatomy: Anatomy | None = None
        self.tuned: Tuned | None = None
        self.noise: float | None = None  # how far two runs of one window differed

    def step_alone(self) -> None:
        """1/3: the step alone on one batch repeated, the upper bound for this model here."""
        total = self.total
        say(f"diagnose: 1/3 the train step alone, {total} steps on one batch (the first compiles)")
        self.compute = self.work.fit(steps=total, warmup=self.warmup, one_batch=True)

    def input_alone(self) -> None:
        """2/3: the input pipeline alone, as fast as it makes batches."""
        self.dataset = self.work.pipeline()
        say(f"diagnose: 2/3 the input pipeline alone, {self.steps} batches")
        self.pipeline, self.words = _input_alone(self.work, self.dataset, self.steps)

    def unsized(self) -> _Windows:
        """The windows as the steps given: one length for both, no probe."""
        return _Windows(self.total, self.total)

    def windows(self) -> _Windows:
        """Windows of MIN_WINDOW_S at each part's rate (the fit's the slower), to hold still."""
        steps, warmup, per_call = self.steps, self.warmup, self.per_call
        if not (self.compute.steps.timed_steps and self.compute.steps.mean_s):
            return self.unsized()
        step_rate, batch_rate = 1.0 / self.compute.steps.mean_s, self.pipeline.batches_per_sec
        if _window(batch_rate) > steps:
            self.pipeline, self.words = _input_alone(self.work, self.dataset, _window(batch_rate))
        probe = _window(step_rate) > steps  # its first run then only sized the windows: not kept
        alone_total = whole_calls(warmup + 1 + max(steps, _window(step_rate)), per_call)
        fit_steps = max(steps, _window(min(step_rate, batch_rate)))
        return _Windows(alone_total, whole_calls(warmup + 1 + fit_steps, per_call), probe)

    def real_fit_then_both_again(self, windows: _Windows) -> None:
        """3/3: the real fit, then the step alone and the fit again, warm; each keeps its faster."""
        work, warmup = self.work, self.warmup
        alone_total, fit_total = windows.alone_total, windows.fit_total
        say(f"diagnose: 3/3 the real fit, {fit_total} steps, then both again")
        fit = work.fit(steps=fit_total, warmup=warmup)
        # Once more each, now warm: a first fit's steps after its compile still run cold.
        again = work.fit(steps=alone_total, warmup=warmup, one_batch=True)
        first = again if windows.probe else self.compute
        fit_again = work.fit(steps=fit_total, warmup=warmup)
        if windows.probe:  # the first only sized the windows: the faster of two, as the fit's
            again = work.fit(steps=alone_total, warmup=warmup, one_batch=True)
        self.compute, self.fit = _faster(first, again), _faster(fit, fit_again)
        warm = [(fit, fit_again), *([(first, again)] if windows.probe else [])]
        spreads = [s for s in (_spread(a, b) for a, b in warm) if s is not None]
        self.noise = max(spreads, default=None)

    def xprof_trace(self) -> None:
        """XProf's reading of a few traced steps of a short fit of its own (none without XProf):
        a trace's edges wait for the device, which in the timed fit would leave queued time out."""
        work, per_call = self.work, self.per_call
        traced = whole_calls(TRACE_STEPS, per_call)
        start = 3 * per_call  # its step functions are built again under the anatomy's scopes
        with _fit_trace(start, traced) as tracing:
            if tracing:
                work.fit(steps=start + traced, warmup=0, callbacks=tracing)
            self.trace = _read_trace(tracing, work.defaults().steps_per_execution)
            if tracing:
                # As profile() reads it: the profiler's cost taken out against the untraced step.
                untraced = self.fit.steps.p50_s if self.fit is not None else None
                self.anatomy = reconcile(
                    tracing[0].anatomy(untraced_s=untraced or None, device=work.device.human_name)
                )

    def conclude(self, devices_found: Iterable[Any] | None) -> Diagnosis:
        """The verdict and advice from what was measured, once the workload is put back."""
        work = self.work
        described = work.input_words(self.dataset) if self.words is None else self.words
        defaults = work.defaults()
        return _conclude(
            input_rate=self.pipeline.batches_per_sec * defaults.fused_steps,  # per training step
            compute=self.compute.steps,
            fit=self.fit.steps,
            dataset=self.dataset,
            described=described,
            defaults=defaults,
            batch_size=work.batch_size,
            device_kind=work.device.kind,
            steps=self.steps,
            devices_found=devices_found,
            trace=self.trace,
            adapter=work.adapter,
            input_workers=work.input_workers,
            python=work.applies_in_python,
            own_compile=work.own_compile,
            tuned=self.tuned,
            noise=self.noise,
            own_layers=_own_layers(work.model) if work.applies_in_python else (),
            unjitted_by=compat.unjitted_by(work.model) if work.applies_in_python else (),
        )


def ledger_of(run: Any) -> Ledger | None:
    """The ledger of `run`: a StepTimer, a RunReport, or a ledger (record or JSON)."""
    if run is None:
        return None
    if isinstance(run, (Ledger, Mapping)):
        ledger = run
    elif callable(getattr(run, "ledger", None)):  # a StepTimer
        ledger = run.ledger()
    else:  # a RunReport
        ledger = getattr(run, "ledger", None)
    takes = "ledger= takes a StepTimer that timed a fit, a RunReport with a ledger, or a ledger"
    try:
        found = as_ledger(ledger) if isinstance(ledger, (Ledger, Mapping)) else None
    except ReportError as e:  # a ledger's JSON with a field of the wrong kind
        raise ValueError(f"{takes}: this one's {e}") from None
    if found is None or not found.wall_s:
        raise ValueError(f"{takes}: this one has none")
    return found


def _tuned(work: Any) -> Tuned | None:
    """What a cached tune search measured for this workload here (tune's own key); None: nothing."""
    from toolkit.search import tune

    try:
        result = tune.cached(tune.cache_key(work)[0])
    except Exception:  # noqa: BLE001 - a nicety: the diagnosis stands without it
        return None
    return Tuned.of(result) if result is not None and result.trials else None


def _own_layers(model: Any) -> tuple[str, ...]:
    """`model`'s layer classes its user wrote, once each in order: tensors such a layer makes itself
    are float32 under a mixed-precision policy unless it says otherwise."""
    import inspect

    from toolkit.core.errors import written_by_user

    def theirs(cls: type) -> bool:
        try:
            return written_by_user(inspect.getfile(cls))
        except (TypeError, OSError):  # no file: defined where the user typed it
            return True

    flatten = getattr(model, "_flatten_layers", None)
    if flatten is None:
        return ()
    layers = [x for x in flatten(include_self=False, recursive=True) if theirs(type(x))]
    cleared = {type(x).__name__ for x in layers}  # none of their layers makes float32: unnamed
    for layer in layers:
        if _makes_float32(layer) is not False:
            cleared.discard(type(layer).__name__)
    return tuple(dict.fromkeys(type(x).__name__ for x in layers if type(x).__name__ not in cleared))


MIXED = "mixed_bfloat16"  # the policy a layer is tried under (float16 has few CPU kernels)


def _makes_float32(layer: Any) -> bool | None:
    """Whether `layer`, rebuilt from its config under :data:`MIXED` and called as the model called
    it, fails or returns float32. None: it cannot be tried alone, or fails in float32 too."""
    keras = compat.keras()
    try:
        node = layer._inbound_nodes[0]
        args, kwargs = node.arguments.args, node.arguments.kwargs
        config = layer.get_config()
        from keras.src.dtype_policies import dtype_policy as policies
    except Exception:  # noqa: BLE001 - tf_keras, or no call or config to copy: unknown
        return None

    def tried(policy: str) -> Any:
        before = policies.dtype_policy()
        policies.set_dtype_policy(policy)
        try:  # process-wide for the moment of the call, then as it was
            fresh = type(layer).from_config({**config, "dtype": policy})
            compute = fresh.compute_dtype

            def like(t: Any) -> Any:
                if not isinstance(t, keras.KerasTensor):
                    return t
                shape = [2 if d is None else d for d in t.shape]
                dtype = compute if "float" in str(t.dtype) else t.dtype
                return keras.ops.ones(shape, dtype=dtype)

            fill = functools.partial(keras.tree.map_structure, like)
            return keras.tree.flatten(fresh(*fill(list(args)), **fill(dict(kwargs))))
        finally:
            policies.set_dtype_policy(before)

    try:
        tried("float32")
    except Exception:  # noqa: BLE001 - not callable alone: unknown
        return None
    try:
        out = tried(MIXED)
    except Exception:  # noqa: BLE001 - fails under the policy alone
        return True
    return any("float32" in str(getattr(x, "dtype", "")) for x in out)


def _devices_facts(device_kind: str, devices_found: Iterable[Any] | None) -> tuple[int, Any]:
    """``(GPUs here, the precision recommended for the device measured)``."""
    from toolkit import devices

    found = list(devices_found) if devices_found is not None else devices.detect()
    chosen = next((d for d in found if d.kind == device_kind), None)
    recommended = devices.recommend_precision(chosen)[0] if chosen is not None else None
    return sum(1 for d in found if d.is_gpu), recommended


def _conclude(
    *,
    input_rate: float,
    compute: Any,
    fit: Any,
    dataset: Any,
    described: str,
    defaults: Candidate,
    batch_size: int | None,
    device_kind: str,
    steps: int,
    devices_found: Iterable[Any] | None,
    trace: TraceAnalysis | None = None,
    adapter: str | None = None,
    input_workers: int | None = None,
    python: bool = False,
    own_compile: OwnCompile | None = None,
    tuned: Tuned | None = None,
    noise: float | None = None,
    own_layers: tuple[str, ...] = (),
    unjitted_by: tuple[str, ...] = (),
) -> Diagnosis:
    """The verdict and advice from the rates and the rest measured (`python`: advice in Python)."""
    compute_rate, fit_rate = _rate(compute), _rate(fit)
    verdict, overlap_ok = classify(input_rate, compute_rate, fit_rate)
    if uncertain := consistency(input_rate, compute_rate, fit_rate, noise):
        verdict, overlap_ok = UNCERTAIN, True
    gpus, recommended = _devices_facts(device_kind, devices_found)
    classes, ops = _pipeline_facts(dataset)
    facts = Facts.of(
        defaults, step_s=compute.mean_s, batch_size=batch_size, device_kind=device_kind,
        gpus=gpus, pipeline_classes=classes, pipeline_ops=ops, recommended_precision=recommended,
        cpu_cores=_cpu_cores(), adapter=adapter, input_workers=input_workers, tuned=tuned,
        own_layers=own_layers, fusable=not python, unjitted_by=unjitted_by,
    )  # fmt: skip
    return Diagnosis(
        input_rate=input_rate,
        compute_rate=compute_rate,
        fit_rate=fit_rate,
        verdict=verdict,
        overlap_ok=overlap_ok,
        advice=advise(verdict, overlap_ok, input_rate, compute_rate, facts, fit_rate),
        batch_size=batch_size,
        steps=fit.timed_steps or steps,  # the real fit's window, which may have grown past it
        pipeline=described,
        xprof=second_opinion(verdict, trace, input_rate < compute_rate) if trace else None,
        python=python,
        own_compile=own_compile,
        noise=noise,
        uncertain=uncertain,
    )
