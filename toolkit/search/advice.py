"""What to change, from a diagnosis: pure functions of the verdict, the rates and :class:`Facts`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from toolkit import backend as backends
from toolkit.core import compat
from toolkit.core._advice import Advice
from toolkit.search.engine import Candidate, WholeRun

__all__: list[str] = []  # diagnose's own (its verdict names are re-exported there)

INPUT_BOUND = "input-bound"
COMPUTE_BOUND = "compute-bound"
BALANCED = "balanced"
UNCERTAIN = "uncertain"  # the rates contradict themselves or their gap is in the noise: no advice
MARGIN = 0.2
# How many times its own time alone the input can cost a fit's step (its threads take the step's
# cores); a fit trailing the step alone by more is not waiting on its input.
INPUT_COST_BOUND = 6.0
SMALL_STEP_S = 0.005


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
    adapter: str | None = None  # the Keras adapter fit reads your data through (None: tf.data)
    input_workers: int | None = None  # the workers your PyDataset or DataLoader was given
    tuned: Tuned | None = None  # what a cached tune search measured for this workload here
    own_layers: tuple[str, ...] = ()  # your model's layer classes that are not a library's
    fusable: bool = True  # fused steps can be set (a recipe's flag; your own compile has none)
    unjitted_by: tuple[str, ...] = ()  # layers ruling XLA out: Keras ignores jit_compile then

    @classmethod
    def of(cls, defaults: Candidate, **facts: Any) -> Facts:
        """The facts of a run with speed settings `defaults` on the backend in use, and `facts`."""
        given = {name: value for name, value in defaults.values().items() if value is not None}
        return cls(**given, backend=backends.name(), **facts)


@dataclasses.dataclass(frozen=True)
class Tuned:
    """A cached tune search's findings here: what it measured and did not pick is not advised."""

    trials: tuple[tuple[Candidate, float | None, str | None], ...]
    defaults_rate: float | None
    chosen: Candidate
    seconds: float
    run: WholeRun | None = None  # why the fastest measured was not picked: its compile didn't pay
    unconfirmed: bool = False  # ... or the rounds did not confirm it

    @classmethod
    def of(cls, result: Any) -> Tuned:
        """From a ``toolkit.search.tune.TuneResult``."""
        run, gain = result.run, result.gain
        return cls(
            tuple((t.candidate, t.examples_per_sec, t.error) for t in result.trials),
            result.defaults_rate, result.best, result.seconds,
            run=run,
            unconfirmed=gain is not None and not gain.trusted and not result.picked,
        )  # fmt: skip

    def held_back(self, what: str, tried: Callable[[Candidate], bool]) -> str | None:
        """Why advice for `what` is withheld (measured, not picked), in a line; None: give it."""
        measured = [(rate, error) for c, rate, error in self.trials if tried(c)]
        if not measured or tried(self.chosen):
            return None
        source = f"cached {self.seconds:.0f} s search"
        rates = [rate for rate, _ in measured if rate is not None]
        if not rates:
            return f"{what}: tune could not run it here ({measured[0][1]}; {source}), not advised"
        if not self.defaults_rate:
            return f"{what}: tune measured it and did not pick it here ({source}), not advised"
        best = max(rates) / self.defaults_rate
        return (
            f"{what}: tune measured it at best {best:.2f}× the defaults' speed here"
            f"{self._but(tried) if best > 1 else ''} ({source}), not advised"
        )

    def _but(self, tried: Callable[[Candidate], bool]) -> str:
        """Why a faster setting was not picked, where the fastest measured are of this advice."""
        ran = [(rate, c) for c, rate, _ in self.trials if rate is not None]
        if not ran or not tried(max(ran, key=lambda r: r[0])[1]):
            return ""
        if self.run is not None and not self.run.pick_wins:
            after = self.run.break_even_steps
            pays = f"after {after:,} steps" if after else "never"
            return f", but its longer compile pays for itself {pays} of a run of {self.run.steps:,}"
        return (
            ", but the rounds against the defaults did not confirm it" if self.unconfirmed else ""
        )


Said = str | Advice  # what the helpers hand each other: words, or advice with a setting


def _advice(said: Said) -> Advice:
    return said if isinstance(said, Advice) else Advice(said)


def _unless_tuned(
    facts: Facts, advice: Advice, what: str, tried: Callable[[Candidate], bool]
) -> Advice:
    """`advice`, or the line that says tune measured it here and did not pick it."""
    said = facts.tuned.held_back(what, tried) if facts.tuned is not None else None
    return Advice(said) if said else advice


def _adapter_advice(facts: Facts) -> list[str] | None:
    """Advice for data read by Keras's own adapter: its levers, not tf.data's (None: tf.data)."""
    workers = facts.input_workers or 1
    more = f"more than its {workers} " if workers > 1 else ""
    return {
        "PyDatasetAdapter": [
            f"give your PyDataset {more}workers to read ahead of the step: "
            "super().__init__(workers=N, use_multiprocessing=True, max_queue_size=...) "
            "(threads, without multiprocessing, where __getitem__ releases the GIL)",
            "build each batch in __getitem__ with whole-array operations, not a Python loop "
            "per example",
        ],
        "GeneratorDataAdapter": [
            "a generator makes one batch at a time in the training process, never ahead of "
            "the step: make it a keras.utils.PyDataset with workers, or read it through "
            "toolkit.data.parallel_generator (shards in parallel, prefetched)",
        ],
        "ArrayDataAdapter": [
            "Keras slices your arrays batch by batch in the training process: a larger batch "
            "slices less often, and toolkit.data.pipeline (tf.data, prefetched) reads ahead",
        ],
        "GrainDatasetAdapter": [
            "give your Grain pipeline more readers: to_iter_dataset(grain.ReadOptions("
            "num_threads=N)) where its work releases the GIL (decoding, NumPy), "
            ".mp_prefetch(grain.MultiprocessingOptions(num_workers=N)) where Python holds it; "
            "toolkit.data.pipeline(..., loader='grain', workers=N) builds either",
            "batch first and map whole batches where the map allows (one call per batch, not "
            "one per example)",
        ],
        "TorchDataLoaderAdapter": [
            f"give your DataLoader {more}worker processes: DataLoader(..., num_workers=N, "
            "persistent_workers=True), pin_memory=True where the step runs on a GPU",
        ],
    }.get(facts.adapter or "")


def _input_advice(facts: Facts, input_rate: float, compute_rate: float) -> list[Said]:
    classes, ops = facts.pipeline_classes, facts.pipeline_ops
    out = [
        f"the pipeline makes {input_rate:,.1f} batches/s, the step could take "
        f"{compute_rate:,.1f}/s: speed up the input before the model"
    ]
    own = _adapter_advice(facts)
    if own is not None:
        return out + own
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


def unjitted_advice(layers: tuple[str, ...], backend: str) -> Advice:
    """What to do where `layers` rule XLA out: Keras drops ``jit_compile=True`` with a warning (on
    JAX the step runs op by op), so advise moving them into the input pipeline instead."""
    how = ", op by op" if backend in backends.names() and backends.jits_by_default(backend) else ""
    return Advice(
        f"{compat.ruling_xla_out(layers)}, so Keras runs the "
        f"step without it{how}, whatever jit_compile says: apply such layers to the training "
        "data (a tf.data or Grain map) instead of inside the model, and the step compiles"
    )


def _compute_advice(facts: Facts) -> list[Advice]:
    out: list[Advice] = []
    seam = backends.find(facts.backend)  # each seam says what to try (a report's unknown: None)
    step = facts.step_s
    if step is not None and step < SMALL_STEP_S and facts.fused_steps == 1:
        short = f"the step is short ({step * 1e3:.2f} ms): per-step overhead counts; "
        said = (
            seam.loop_advice(facts.fusable)
            if seam
            else Advice.of("try {0}", {"steps_per_execution": 8})
        )
        loop = said.after(short)
        what = f"more steps per call (steps_per_execution{', fused_steps' * facts.fusable})"
        out.append(_unless_tuned(facts, loop, what, lambda c: c.per_call > 1))
    jit = seam.jit_advice() if seam else None  # None: always compiled (JAX)
    if facts.unjitted_by:
        out.append(unjitted_advice(facts.unjitted_by, facts.backend))
    elif not facts.jit_compile and jit:
        out.append(_unless_tuned(facts, jit, "jit_compile", lambda c: bool(c.jit_compile)))
    if facts.batch_size is not None:
        larger = Advice(
            f"a larger batch than {facts.batch_size} (if memory and convergence allow) does "
            "more work per step overhead"
        )
        size = facts.batch_size
        what = f"a batch larger than {size}"
        out.append(_unless_tuned(facts, larger, what, lambda c: (c.batch_size or 0) > size))
    if facts.device_kind == "cpu" and facts.gpus:
        out.append(
            Advice.of(
                f"{facts.gpus} GPU(s) are here but the step runs on the CPU: try {{0}}",
                {"device": "gpu"},
            )
        )
    if facts.device_kind != "cpu" and step is not None and step < SMALL_STEP_S:
        out.append(
            Advice.of(
                "a small step on a GPU: launch latency may dominate; try {0} too (small "
                "models are often faster there)",
                {"device": "cpu"},
            )
        )
    hint = facts.recommended_precision
    if hint and hint != facts.precision:
        words = "try {0} (this device's hint; measure it)"
        if hint.startswith("mixed") and facts.own_layers:
            words += (  # e.g. a layer's float32 noise added to a bfloat16 mean fails under it
                f"; under it, a tensor your own layers make ({', '.join(facts.own_layers)}) "
                "needs dtype=self.compute_dtype"
            )
        advice = Advice.of(words, {"precision": hint})
        out.append(_unless_tuned(facts, advice, hint, lambda c: c.precision == hint))
    return out


def advise(
    verdict: str,
    overlap_ok: bool,
    input_rate: float,
    compute_rate: float,
    facts: Facts,
    fit_rate: float | None = None,
) -> list[Advice]:
    """Advice for a verdict from the rates and `facts` (`fit_rate`: how input and step overlap)."""
    if verdict == UNCERTAIN:  # no rate decides the layers that rule XLA out: said anyway
        return [unjitted_advice(facts.unjitted_by, facts.backend)] if facts.unjitted_by else []
    out: list[Said] = []
    if verdict == INPUT_BOUND and input_rate >= compute_rate * (1 - MARGIN) and fit_rate:
        out.append(
            f"the pipeline alone makes {input_rate:,.1f} batches/s and the step could take "
            f"{compute_rate:,.1f}/s, yet the fit ran {fit_rate:,.1f}/s: reading the input "
            "inside the fit costs the step (input and step share the cores or don't overlap)"
        )
    elif verdict == INPUT_BOUND:
        out += _input_advice(facts, input_rate, compute_rate)
    elif verdict == COMPUTE_BOUND:
        if fit_rate and fit_rate < compute_rate * (1 - MARGIN / 2):
            out.append(
                f"the fit ran {fit_rate:,.1f} steps/s ({fit_rate / compute_rate:.2f}× the "
                f"step alone), yet the pipeline alone makes {input_rate:,.1f} batches/s, too "
                "fast to cost it that: the rest is the fit's own per-step work or a busy "
                "machine; the step is what to speed up"
            )
        out += _compute_advice(facts)
    elif input_rate > compute_rate * (1 + MARGIN) and fit_rate:
        out.append(
            f"the pipeline alone makes {input_rate:,.1f} batches/s, well above the step's "
            f"{compute_rate:,.1f}/s, yet the fit ran {fit_rate:,.1f}/s "
            f"({fit_rate / compute_rate:.2f}× the step alone): reading the input inside the "
            "fit costs the step part of its time; both lists apply"
        )
        out += _input_advice(facts, input_rate, compute_rate)[1:2]
        out += _compute_advice(facts)[:1]
    else:
        out.append(
            "input and step are about as fast as each other: speeding up only one gains "
            f"at most {MARGIN:.0%}; both lists apply"
        )
        out += _input_advice(facts, input_rate, compute_rate)[1:2]
        out += _compute_advice(facts)[:1]
    if not overlap_ok:
        out += overlap_advice(facts, input_rate, compute_rate, fit_rate)
    return [_advice(a) for a in out]


SERIAL = 0.2  # at most this share of the shorter part hidden behind the other: serial


def _serial_words(t_in: float, t_step: float, fit_rate: float | None) -> str:
    """How far the fit's step ran its input and its step one after the other (ms each)."""
    if not fit_rate:
        return "input and step don't overlap: the fit is slower than both of its parts"
    t_fit = 1e3 / fit_rate
    hidden = max(0.0, t_in + t_step - t_fit)  # of the shorter part, run beside the other
    shorter, which, other = min((t_in, "input", "step"), (t_step, "step", "input"))
    how = (
        "one after the other"
        if hidden <= SERIAL * shorter
        else f"partly one after the other ({hidden:.2f} ms of the {which}'s "
        f"{shorter:.2f} ms ran beside the {other})"
    )
    return (
        f"input and step don't overlap: the fit takes {t_fit:.2f} ms a step against "
        f"{t_in:.2f} ms (input alone) + {t_step:.2f} ms (step alone) = "
        f"{t_in + t_step:.2f} ms: they ran {how}"
    )


def overlap_advice(
    facts: Facts, input_rate: float, compute_rate: float, fit_rate: float | None = None
) -> list[Advice]:
    """Why input and step did not overlap, from the pipeline, the step's device and the cores:
    likely causes first, each with its fix. Never "add a prefetch" to a pipeline that has one."""
    classes, ops = facts.pipeline_classes, facts.pipeline_ops
    out = [_serial_words(1e3 / input_rate, 1e3 / compute_rate, fit_rate)]
    python = bool(ops & {"EagerPyFunc", "PyFunc", "PyFuncStateless"}) or any(
        "Generator" in c for c in classes
    )
    has_prefetch = any("Prefetch" in c for c in classes)
    has_maps = any("Map" in c for c in classes) or python
    causes: list[Said] = []
    own = _adapter_advice(facts)
    if own is not None:  # read by Keras's own adapter: its levers, not the tf.data form's
        python = facts.adapter in {"PyDatasetAdapter", "GeneratorDataAdapter"}
        has_prefetch, has_maps = True, python
        causes.append(own[0])
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
            Advice.of(
                "per-step overhead around the step (callbacks that read the loss every step, "
                "the loop between calls): try {0}, and check your callbacks",
                {"steps_per_execution": 8},
            )
        )
    out += [_advice(c).after("likely cause: ") for c in causes]
    return [_advice(a) for a in out]
