"""Input-bound or compute-bound? Three measured rates and a verdict, with advice.

:func:`diagnose` takes either a recipe's Task with a TrainConfig, or *your own* compiled Keras
model with *your own* batched ``tf.data`` pipeline (or ``(x, y)`` arrays), and measures, in
steps (batches) per second:

* **input**: the training input pipeline alone, batches pulled as fast as it makes them
  (``toolkit.data.benchmark``), first batch apart;
* **compute**: the training step alone, on one batch repeated (a Task: the runner's
  ``use_synthetic_data``, one random batch of the real spec; your model: the first batch of
  your pipeline, cached): the upper bound for this model, here, with these settings;
* **fit**: the real ``fit`` on the real pipeline.

With your own model and pipeline, exactly that pipeline is measured (its maps, its batching,
its prefetch) and your model's weights and optimizer state are restored afterwards. The
pipeline a diagnosis measured is named in its output (``measured pipeline: ...``).

:func:`classify` turns the rates into a verdict (pure, tested with injected rates):
input-bound when the pipeline alone can't keep up with the step, or when the real fit runs
slower than the step alone (the input as the fit reads it holds the step back), compute-bound
when the pipeline has headroom and the fit keeps up, balanced when the two are within the
margin. A fourth finding, *overlap*, flags a
fit slower than both of its parts (input and step not overlapping, or per-step overhead).
:func:`advise` draws concrete advice from what was measured and what the pipeline is made of
(Python generators, sequential maps, no cache, no prefetch, per-example maps), the step time,
the settings and the devices. No profiler is needed, so it works on Metal too.

A second opinion, where XProf is installed (the ``[profile]`` extra): a short fit of its
own runs :data:`TRACE_STEPS` steps under the profiler, with step markers, after the timed
fit (so no trace edge's wait for the device falls in a timed window), and XProf's own
reading of that trace (the share of step time spent waiting for input, and its verdict) is
stated beside the rates' verdict;
:func:`second_opinion` says whether the two agree, and why they may not. The rates compare what
the pipeline and the step *can* do apart; XProf sees what a few steps of the real fit waited
for, which prefetching hides and which a host busy with both hides less.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from toolkit import backend as backends
from toolkit.core import _extras as extras
from toolkit.core.progress import say
from toolkit.core.stats import whole_calls
from toolkit.runner.config import TrainConfig
from toolkit.search.workload import workload

__all__ = [
    "BALANCED",
    "COMPUTE_BOUND",
    "INPUT_BOUND",
    "Diagnosis",
    "diagnose",
]

INPUT_BOUND = "input-bound"
COMPUTE_BOUND = "compute-bound"
BALANCED = "balanced"
MARGIN = 0.2
SMALL_STEP_S = 0.005
TRACE_STEPS = 5  # steps of the real fit traced for XProf's reading, after the timed ones


@dataclasses.dataclass(frozen=True)
class Facts:
    """What advice is drawn from, besides the rates. All optional."""

    step_s: float | None = None
    batch_size: int | None = None
    steps_per_execution: int = 1
    fused_steps: int = 1
    jit_compile: bool = False
    precision: str = "float32"
    device_kind: str = "cpu"
    gpus: int = 0
    pipeline_classes: frozenset[str] = frozenset()
    pipeline_ops: frozenset[str] = frozenset()
    recommended_precision: str | None = None
    backend: str = "tensorflow"
    cpu_cores: int | None = None  # cores this process may run on (input and a CPU step share)


@dataclasses.dataclass
class Diagnosis:
    """Rates (steps/s), the verdict, whether input and step overlap, and advice."""

    input_rate: float
    compute_rate: float
    fit_rate: float
    verdict: str
    overlap_ok: bool
    advice: list[str]
    batch_size: int | None = None
    steps: int = 0
    pipeline: str = ""
    xprof: dict[str, Any] | None = None  # XProf's reading of a trace of the fit, if taken

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def lines(self) -> list[str]:
        per = f" ({self.batch_size} examples/step)" if self.batch_size else ""
        out = [
            f"verdict: {self.verdict}{per}",
            f"  measured pipeline: {self.pipeline or 'unknown'}",
            f"  input pipeline alone: {self.input_rate:,.1f} batches/s",
            f"  train step alone:     {self.compute_rate:,.1f} steps/s (one cached batch)",
            f"  real fit:             {self.fit_rate:,.1f} steps/s",
        ]
        if self.xprof:
            out.append(f"  XProf: {self.xprof['line']}")
        out += [f"  advice: {a}" for a in self.advice]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def classify(
    input_rate: float, compute_rate: float, fit_rate: float, margin: float = MARGIN
) -> tuple[str, bool]:
    """``(verdict, overlap_ok)`` from the three rates (any common unit, e.g. steps/s):
    input-bound when the pipeline alone is slower than the step alone, or when the real fit
    is (its input as the fit reads it costs the step); compute-bound when the pipeline has
    headroom and the fit keeps up with the step; balanced between.

    Raises:
        ValueError: a rate that is not positive.
    """
    for name, rate in (("input", input_rate), ("compute", compute_rate), ("fit", fit_rate)):
        if not rate > 0:
            raise ValueError(f"{name} rate must be > 0, got {rate}")
    # The step-alone run is a real fit too, on one batch repeated: a real fit that runs
    # slower than it by more than the margin is held back by its input, as the fit reads it
    # (the pipeline sharing the cores with the step, or not overlapping it), however fast
    # that pipeline is alone.
    if input_rate < compute_rate * (1 - margin) or fit_rate < compute_rate * (1 - margin):
        verdict = INPUT_BOUND
    elif input_rate > compute_rate * (1 + margin):
        verdict = COMPUTE_BOUND
    else:
        verdict = BALANCED
    overlap_ok = fit_rate >= min(input_rate, compute_rate) * (1 - margin)
    return verdict, overlap_ok


# XProf's verdicts that a rates verdict contradicts (balanced contradicts none).
_CONTRADICTS = {
    INPUT_BOUND: ("not input-bound",),
    COMPUTE_BOUND: ("highly input-bound",),
}


def second_opinion(verdict: str, analysis: Mapping[str, Any] | None) -> dict[str, Any]:
    """XProf's reading of a trace of the fit (``toolkit.report.trace.read_trace``) set beside
    the rates' `verdict`: ``verdict``, ``input_percent``, ``agrees`` (None when XProf gave no
    verdict) and ``line``, one sentence that says which, and why they may differ."""
    analysis = analysis or {}
    theirs, share = analysis.get("verdict"), analysis.get("input_percent")
    out: dict[str, Any] = {"verdict": theirs, "input_percent": share, "agrees": None}
    if theirs is None or share is None:
        why = analysis.get("error") or "XProf gave no verdict on the trace"
        out["line"] = f"no verdict ({why})"
        return out
    said = f"{theirs}, {share:.1f}% of the traced steps' time waiting for input"
    if theirs == "potentially input-bound":  # XProf's word for much unattributed time
        said += " (XProf's 'potentially': much of the step is Python or other host time)"
    if theirs in _CONTRADICTS.get(verdict, ()):
        out["agrees"] = False
        if verdict == INPUT_BOUND:
            why = (
                "the pipeline alone is slower than the step, yet the fit barely waited: "
                "prefetching or the cache filled the gap while traced, or the pipeline "
                "measured alone competed with nothing"
            )
        else:
            why = (
                "the pipeline alone outruns the step, yet the fit waited for it: the two "
                "compete for the host's cores when they run together"
            )
        out["line"] = f"{said}; disagrees with the rates ({verdict}): {why}"
    else:
        out["agrees"] = True
        out["line"] = f"{said}; agrees with the rates ({verdict})"
    return out


@contextlib.contextmanager
def _fit_trace(start_step: int, steps: int) -> Iterator[list[Any]]:
    """Callbacks that trace `steps` steps of a fit from `start_step`, in a directory removed
    afterwards; none where XProf, which reads the trace, is not installed."""
    from toolkit.profiling.trace_window import TraceWindow

    if extras.note_missing("profile", "diagnose: no XProf cross-check", needs=("xprof",)):
        yield []
        return
    with tempfile.TemporaryDirectory(prefix="toolkit-diagnose-") as tmp:
        yield [TraceWindow(tmp, start_step=start_step, stop_step=start_step + steps)]


def _read_trace(callbacks: list[Any], steps_per_execution: int) -> dict[str, Any] | None:
    """What the trace `_fit_trace`'s callbacks took says (``toolkit.report.trace``), read
    before its directory goes away; None when no trace was taken."""
    from toolkit.report.trace import read_trace

    if not callbacks:
        return None
    window = callbacks[0]
    if window.error:
        return {"error": window.error}
    if window.traced_steps is None:
        return {"error": "the fit ended before the traced steps"}
    return read_trace(window.trace_files(), steps_per_execution)


def _input_advice(facts: Facts, input_rate: float, compute_rate: float) -> list[str]:
    classes, ops = facts.pipeline_classes, facts.pipeline_ops
    out = [
        f"the pipeline makes {input_rate:,.1f} batches/s, the step could take "
        f"{compute_rate:,.1f}/s: speed up the input before the model"
    ]
    if ops & {"EagerPyFunc", "PyFunc", "PyFuncStateless"} or any("Generator" in c for c in classes):
        out.append(
            "Python runs per element (from_generator / py_function): use "
            "toolkit.data.parallel_generator (reads shards in parallel, crosses into TF in "
            "chunks) or express the work in TF ops"
        )
    if any(c.lstrip("_") == "MapDataset" for c in classes):
        out.append("a map runs on one thread: num_parallel_calls=tf.data.AUTOTUNE")
    if not any("Cache" in c for c in classes):
        out.append(
            "nothing is cached: cache the decoded examples if they fit in RAM "
            "(toolkit.data.pipeline(cache=True)); work before the cache is done once"
        )
    if any("Batch" in c for c in classes) and any("Map" in c for c in classes):
        out.append(
            "vectorize: batch first and map whole batches (pipeline(batch_map=...)): one op "
            "per batch instead of one per example"
        )
    if not any("Prefetch" in c for c in classes):
        out.append("no prefetch: end the pipeline with .prefetch(tf.data.AUTOTUNE)")
    return out


def _compute_advice(facts: Facts) -> list[str]:
    out = []
    # What to try differs between backends: each seam says (a report's unknown one: nothing).
    seam = backends.find(facts.backend)
    step = facts.step_s
    if step is not None and step < SMALL_STEP_S and facts.fused_steps == 1:
        short = f"the step is short ({step * 1e3:.2f} ms): per-step overhead counts; "
        out.append(short + (seam.loop_advice() if seam else "try --steps_per_execution"))
    jit = seam.jit_advice() if seam else None  # None: always compiled (JAX)
    if not facts.jit_compile and jit:
        out.append(jit)
    if facts.batch_size is not None:
        out.append(
            f"a larger batch than {facts.batch_size} (if memory and convergence allow) does "
            "more work per step overhead"
        )
    if facts.device_kind == "cpu" and facts.gpus:
        out.append(f"{facts.gpus} GPU(s) are here but the step runs on the CPU: try --device=gpu")
    if facts.device_kind != "cpu" and step is not None and step < SMALL_STEP_S:
        out.append(
            "a small step on a GPU: launch latency may dominate; try --device=cpu too "
            "(small models are often faster there)"
        )
    if facts.recommended_precision and facts.recommended_precision != facts.precision:
        out.append(
            f"try --precision={facts.recommended_precision} (this device's hint; measure it)"
        )
    return out


def advise(
    verdict: str,
    overlap_ok: bool,
    input_rate: float,
    compute_rate: float,
    facts: Facts,
    fit_rate: float | None = None,
) -> list[str]:
    """Advice for a verdict, drawn from the measured rates and `facts`; `fit_rate` (the real
    fit's) lets the overlap advice say how far from side by side input and step ran."""
    out: list[str] = []
    if verdict == INPUT_BOUND and input_rate >= compute_rate * (1 - MARGIN) and fit_rate:
        out.append(
            f"the pipeline alone makes {input_rate:,.1f} batches/s and the step could take "
            f"{compute_rate:,.1f}/s, yet the fit ran {fit_rate:,.1f}/s: reading the input "
            "inside the fit costs the step (input and step share the cores or don't overlap)"
        )
    elif verdict == INPUT_BOUND:
        out += _input_advice(facts, input_rate, compute_rate)
    elif verdict == COMPUTE_BOUND:
        out += _compute_advice(facts)
    else:
        out.append(
            "input and step are about as fast as each other: speeding up only one gains "
            f"at most {MARGIN:.0%}; both lists apply"
        )
        out += _input_advice(facts, input_rate, compute_rate)[1:2]
        out += _compute_advice(facts)[:1]
    if not overlap_ok:
        out += overlap_advice(facts, input_rate, compute_rate, fit_rate)
    return out


SERIAL = 0.8  # a fit step within 80 % of input + step ran them one after the other


def overlap_advice(
    facts: Facts, input_rate: float, compute_rate: float, fit_rate: float | None = None
) -> list[str]:
    """Why input and step did not overlap, from what the pipeline is made of, where the step
    runs and how many cores there are: the likely causes, most likely first, each with its
    fix. Never "add a prefetch" to a pipeline that has one."""
    classes, ops = facts.pipeline_classes, facts.pipeline_ops
    t_in, t_step = 1e3 / input_rate, 1e3 / compute_rate
    if fit_rate:
        t_fit = 1e3 / fit_rate
        how = (
            "one after the other"
            if t_fit >= SERIAL * (t_in + t_step)
            else "partly one after the other"
        )
        out = [
            f"input and step don't overlap: the fit takes {t_fit:.2f} ms a step against "
            f"{t_in:.2f} ms (input alone) + {t_step:.2f} ms (step alone) = "
            f"{t_in + t_step:.2f} ms: they ran {how}"
        ]
    else:
        out = ["input and step don't overlap: the fit is slower than both of its parts"]
    python = bool(ops & {"EagerPyFunc", "PyFunc", "PyFuncStateless"}) or any(
        "Generator" in c for c in classes
    )
    has_prefetch = any("Prefetch" in c for c in classes)
    has_maps = any("Map" in c for c in classes) or python
    causes: list[str] = []
    if not has_prefetch:
        causes.append(
            "no prefetch: end the pipeline with .prefetch(tf.data.AUTOTUNE), so the next "
            "batch is made while the step runs"
        )
    if python:
        causes.append(
            "Python in the pipeline (py_function / from_generator) holds the GIL while it "
            "runs, and so does Keras's Python side of each step: they take turns; use "
            "toolkit.data.parallel_generator or TF ops"
        )
    cores = facts.cpu_cores
    if facts.device_kind == "cpu" and (has_maps or has_prefetch):
        few = f"this process has {cores} CPU core(s)" if cores else "the cores are shared"
        causes.append(
            f"CPU contention: the step runs on the CPU too and {few}, so the pipeline's "
            "threads and the step's ops take turns on them (a prefetch can't hide what has no "
            "core to run on): cache what the maps make (the work before a cache runs once), "
            "move the step to a GPU, or run on more cores"
        )
    if not causes:
        causes.append(
            "per-step overhead around the step (callbacks that read the loss every step, the "
            "loop between calls): try --steps_per_execution, and check your callbacks"
        )
    out += [f"likely cause: {c}" for c in causes]
    return out


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


def _faster(a: Any, b: Any) -> Any:
    """Of two reports of the same measurement, the one whose timed steps ran faster."""
    if not b.steps.timed_steps:
        return a
    if not a.steps.timed_steps or b.steps.mean_s < a.steps.mean_s:
        return b
    return a


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
    steps: int = 60,
    devices_found: Iterable[Any] | None = None,
) -> Diagnosis:
    """Measures the input pipeline alone, the step alone and the real fit; returns the verdict.

    ``diagnose(task, config)`` diagnoses a recipe's Task as the runner would train it;
    ``diagnose(model, data)`` diagnoses your own compiled Keras model on your own batched
    ``tf.data`` pipeline (or ``(x, y)`` arrays, batched by ``config.batch_size``), and puts
    back its weights and optimizer state afterwards.

    Args:
        target: a ``toolkit.runner.train.Task``, or a compiled Keras model.
        data: with a model, its training data (required); with a Task, a TrainConfig may
            stand here for `config`.
        config: with a Task, the ``TrainConfig`` to diagnose (device, precision, batch
            size...). Defaults to ``TrainConfig()``.
        steps: steps (and batches) per measurement, after the warm-up. Defaults to `60`.
        devices_found: the devices present (defaults to ``toolkit.devices.detect()``).

    Raises:
        toolkit.runner.train.SetupError: a setting or data that cannot work.
    """
    from toolkit.data import benchmark, describe_pipeline

    # The step alone first: a Task's workload selects the device before anything else starts
    # TensorFlow's runtime.
    with workload(target, data, config) as work:
        config = work.config
        per_call = work.per_call
        warmup = max(1, min(config.warmup_steps, 10))
        total = whole_calls(warmup + 1 + steps, per_call)
        say(f"diagnose: 1/3 the train step alone, {total} steps on one batch (the first compiles)")
        compute = work.fit(steps=total, warmup=warmup, one_batch=True)
        dataset = work.pipeline()
        say(f"diagnose: 2/3 the input pipeline alone, {steps} batches")
        read = work.input_batches()  # what the backend's fit reads; None: the pipeline is
        if read is None:
            pipeline = benchmark(dataset.repeat(), num_batches=steps, verbose=False)
        else:
            words, batches = read
            try:
                pipeline = benchmark(
                    batches, num_batches=steps, batch_size=work.batch_size, verbose=False
                )
            finally:
                batches.close()
        say(f"diagnose: 3/3 the real fit, {total} steps, then both again")
        fit = work.fit(steps=total, warmup=warmup)
        # The step alone and the real fit once more each, now that the process is warm: a
        # first fit's steps after its compile still run cold (JAX's step alone ran at 0.44×
        # of a later run's). Each keeps its faster run, so the two are compared as warm.
        compute = _faster(compute, work.fit(steps=total, warmup=warmup, one_batch=True))
        fit = _faster(fit, work.fit(steps=total, warmup=warmup))
        # XProf's reading comes from a short fit of its own: the trace's edges wait for the
        # device, and in the timed fit that wait would leave the queued steps' device time
        # out of the timed window where the host runs ahead (JAX: 1.3× the fit's real rate).
        traced = whole_calls(TRACE_STEPS, per_call)
        with _fit_trace(per_call, traced) as tracing:
            if tracing:
                work.fit(steps=per_call + traced, warmup=0, callbacks=tracing)
            trace = _read_trace(tracing, work.defaults().steps_per_execution)
    described = work.described if read is None else words
    if not work.is_model:
        described += f": {describe_pipeline(dataset)}"
    settings = work.settings()
    return _conclude(
        # Rates per training step (a fused batch holds fused_steps steps' examples).
        input_rate=pipeline.batches_per_sec * settings["fused_steps"],
        compute=compute.steps,
        fit=fit.steps,
        dataset=dataset,
        described=described,
        settings=settings,
        batch_size=work.batch_size,
        device_kind=work.device.kind,
        steps=steps,
        devices_found=devices_found,
        trace=trace,
    )


def _conclude(
    *,
    input_rate: float,
    compute: Any,
    fit: Any,
    dataset: Any,
    described: str,
    settings: dict[str, Any],
    batch_size: int | None,
    device_kind: str,
    steps: int,
    devices_found: Iterable[Any] | None,
    trace: Mapping[str, Any] | None = None,
) -> Diagnosis:
    """The verdict and advice from the measured rates; `trace` is what a trace of the fit
    said (None: none was taken)."""
    from toolkit import devices

    compute_rate, fit_rate = _rate(compute), _rate(fit)
    verdict, overlap_ok = classify(input_rate, compute_rate, fit_rate)
    xprof = second_opinion(verdict, trace) if trace is not None else None
    found = list(devices_found) if devices_found is not None else devices.detect()
    chosen = next((d for d in found if d.kind == device_kind), None)
    recommended = devices.recommend_precision(chosen)[0] if chosen is not None else None
    classes, ops = _pipeline_facts(dataset)
    facts = Facts(
        step_s=compute.mean_s,
        batch_size=batch_size,
        device_kind=device_kind,
        gpus=sum(1 for d in found if d.is_gpu),
        pipeline_classes=classes,
        pipeline_ops=ops,
        recommended_precision=recommended,
        cpu_cores=_cpu_cores(),
        **settings,
    )
    return Diagnosis(
        input_rate=input_rate,
        compute_rate=compute_rate,
        fit_rate=fit_rate,
        verdict=verdict,
        overlap_ok=overlap_ok,
        advice=advise(verdict, overlap_ok, input_rate, compute_rate, facts, fit_rate),
        batch_size=batch_size,
        steps=steps,
        pipeline=described,
        xprof=xprof,
    )
