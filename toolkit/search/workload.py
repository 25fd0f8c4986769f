"""One measured target: a recipe's Task under a TrainConfig, or your compiled model with its data.

Every tool that measures training asks "how fast does this target train under these settings
for N steps?"; a :class:`Workload` answers it for both kinds. A :class:`TaskWorkload` rebuilds
per candidate, so precision and fused steps can change; a :class:`ModelWorkload` recompiles your
model and :meth:`~Workload.close` puts it back. Frameworks load when a workload is made."""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import hashlib
import math
from collections.abc import Sequence
from typing import Any

from toolkit import backend
from toolkit.core import compat
from toolkit.core._advice import Setting
from toolkit.core.errors import in_your_fit, library_raise, one_line, user_raise
from toolkit.core.stats import whole_calls
from toolkit.runner.config import (
    SEARCHED,
    OwnCompile,
    TrainConfig,
    as_python,
    model_settings,
    set_model_settings,
)
from toolkit.search._model_fit import (
    Saved,
    compile_cost,
    figures_of,
    measured_fit,
    model_signature,
    param_count,
    rate_of,
)
from toolkit.search.engine import Candidate, RunShape, Space, window_steps

__all__ = [
    "ModelWorkload",
    "TaskWorkload",
    "Workload",
    "workload",
]

LIVE_WINDOW_S = 0.25  # a kept finalist's window when measured again, at least (seconds)
LIVE_PARAMS = 50_000_000  # models with more weights are rebuilt, not kept, for the rounds
# A run taking this many times the best window so far is stopped: it cannot win.
HOPELESS = 4.0
HOPELESS_FLOOR_S = 2.0  # ...and never before this much of its run (after the first call)


class Workload(abc.ABC):
    """What every target offers the tools that measure it (see the module docstring)."""

    name: str
    config: TrainConfig  # the settings it measures from (validated)
    batch_size: int | None  # examples per training step (None: the data does not say)
    device: Any  # the DeviceInfo it trains on
    described: str  # the input pipeline, in words
    # Advice in a recipe's flags (False) or your model's compile arguments (True).
    applies_in_python: bool = False
    # The Keras data adapter fit reads through, once input_batches read it, and its workers.
    adapter: str | None = None
    input_workers: int | None = None
    # Your model class's own compile: advice names its super().compile(...) call (None: Keras's).
    own_compile: OwnCompile | None = None
    # A run still going at this time.perf_counter() stops after its current call (None: no
    # end); one that has not finished its first call by then raises.
    deadline: float | None = None
    # Each candidate's compile cost as its first measured run paid it (note_compile).
    compiles: dict[Candidate, float]

    def __init__(self) -> None:
        self.compiles = {}

    @abc.abstractmethod
    def defaults(self) -> Candidate:
        """The settings it trains with now, as this backend runs them (the search's first)."""

    def note_compile(self, candidate: Candidate, stats: Any) -> None:
        """Keeps the candidate's compile cost (``compile_cost``) from its first run only."""
        if candidate not in self.compiles:
            cost = compile_cost(stats)
            if cost is not None:
                self.compiles[candidate] = cost

    def compile_s(self, candidate: Candidate) -> float | None:
        """The candidate's compile cost as first measured (None: not measured)."""
        return self.compiles.get(candidate)

    def compile_again(self, candidate: Candidate, until: float) -> float | None:
        """`candidate`'s compile timed again by `until`, kept where smaller: the first in a
        process also paid the process's own first trace. None: none measured."""
        import time

        first = self.compiles.get(candidate)  # (it takes about that, and two calls)
        if first is None or until - time.perf_counter() < 1.25 * first:
            return first
        try:
            report = self.fit(candidate, steps=2 * candidate.per_call, warmup=0)
        except Exception:  # noqa: BLE001 - a run that fails now: the first figure stands
            return first
        again = None if report.steps is None else compile_cost(report.steps)
        if again is not None and again < first:
            self.compiles[candidate] = again
        return self.compiles[candidate]

    def run_steps(self, candidate: Candidate) -> int | None:
        """Training steps of the whole run `candidate` would be applied to (None: unknown)."""
        shape = self.run_shape()
        batches = shape.epoch_batches(candidate) if shape is not None else None
        if batches is None:
            return None
        return shape.epochs * batches * max(1, candidate.fused_steps or 1)

    @property
    def per_call(self) -> int:
        """Training steps in one call of the compiled function."""
        return self.defaults().per_call

    @abc.abstractmethod
    def fit(
        self,
        candidate: Candidate | None = None,
        *,
        steps: int,
        warmup: int,
        one_batch: bool = False,
        callbacks: Sequence[Any] = (),
    ) -> Any:
        """The RunReport of `steps` steps (whole calls) under `candidate` (None: its own),
        statistics after the first call and `warmup`; `one_batch`: one batch repeated."""

    @abc.abstractmethod
    def pipeline(self) -> Any:
        """The batched training data as :meth:`fit` reads it (a fused batch: several steps)."""

    def prepare(self, steps: int) -> None:  # noqa: B027 (a hook: nothing by default)
        """Readies the data for windows of `steps` steps, so the first candidate pays nothing
        the others do not (a generator's batches read once, then replayed)."""

    def input_batches(self) -> tuple[str, Any] | None:
        """``(the input in words, its batches)`` as this backend's ``fit`` reads them (close the
        iterator when done); None where :meth:`pipeline` is what fit reads."""
        return None

    def rate(self, candidate: Candidate, steps: int = 48, calls: int = 3) -> float:
        """Examples/s over a timed window of at least `steps` steps and `calls` calls."""
        warmup, total = self.window(candidate, steps, calls)
        with backend.get().quiet_retracing():
            stats = self.fit(candidate, steps=total, warmup=warmup).steps
        self.note_compile(candidate, stats)
        return rate_of(stats)

    def window(self, candidate: Candidate, steps: int, calls: int) -> tuple[int, int]:
        """``(warm-up, steps)`` of a rate's window (:func:`~toolkit.search.engine.window_steps`);
        the warm-up runs past an epoch's end inside the window: XLA compiles a ragged last
        batch once, silently, a cost of the run's start, not of its steps."""
        warmup, total = window_steps(candidate, steps, calls)
        shape = self.run_shape()
        epoch = shape.steps_per_epoch if shape is not None else None
        if epoch and candidate.per_call + warmup < epoch <= total:
            later = whole_calls(max(warmup, epoch), candidate.per_call)
            warmup, total = later, total + later - warmup
        return warmup, total

    def cache_facts(self) -> dict[str, Any]:
        """What a cached answer depends on (the caller adds the machine)."""
        model, spec = self._signature()
        return {
            "model": hashlib.sha256(model_signature(model).encode()).hexdigest()[:16],
            "params": param_count(model),
            "input": str(spec),
            "batch_size": self.batch_size or 0,
            "backend": backend.name(),
            "device": f"{self.device.kind}:{self.device.index}",
        }

    @abc.abstractmethod
    def how_to_apply(self, candidate: Candidate) -> str:
        """How a user applies `candidate`: a recipe's flags, or ``model.compile`` arguments."""

    def run_shape(self) -> RunShape | None:
        """The run a pick is for, so the search offers only loops it can time; None: unknown."""
        return None

    def loader(self) -> str:
        """What feeds its fit (``tf_data``, ``grain``, ``arrays``; "": unknown): loops pay by it."""
        return ""

    def batch_words(self) -> str:
        """Its batch size in words, for a verb's first line."""
        return str(self.batch_size)

    @abc.abstractmethod
    def figures(
        self, steps: int, *, count_flops: bool = True, candidate: Candidate | None = None
    ) -> dict[str, Any]:
        """One run of `steps` steps (five calls at least) in ``figures_of``'s figures."""

    @abc.abstractmethod
    def space(self, space: Space, defaults: Candidate) -> Space:
        """What the search may change of `space` for this target, the `defaults` first."""

    @abc.abstractmethod
    def length_known(self, config_given: bool) -> bool:
        """Whether the run a pick is for has a known length, given a config or not."""

    @abc.abstractmethod
    def fresh_words(self) -> str:
        """Why tune did not confirm a pick in fresh processes, and what would."""

    def input_words(self, dataset: Any) -> str:
        """Its input in words for the diagnosis, `dataset` being :meth:`pipeline`'s."""
        return self.described

    def close(self) -> None:  # noqa: B027 (a hook: nothing by default)
        """Lets go of what measuring held (and puts your model back as it was)."""

    @abc.abstractmethod
    def _signature(self) -> tuple[Any, Any]:
        """The built model and its input's spec: what a cached answer is keyed by."""

    def __enter__(self) -> Workload:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def workload(
    target: Any,
    data: Any = None,
    config: TrainConfig | None = None,
    *,
    class_weight: Any = None,
    **kw: Any,
):
    """The :class:`Workload` of a ``Task`` (`config` may stand as `data`; `kw` are its) or of a
    compiled model with its `data` and `class_weight`: the one place that tells them apart.

    Raises:
        toolkit.runner.train.SetupError: a model without data, data that is not batches."""
    from toolkit.runner import train

    if isinstance(data, TrainConfig):
        config, data = data, None
    config = (config or TrainConfig()).validate()
    if isinstance(target, train.Task):
        if class_weight is not None:
            raise train.SetupError(
                "class_weight: for your compiled model and its data, (model, data); a recipe's "
                "Task weighs its classes in its own loss"
            )
        return TaskWorkload(target, config, **kw)
    if data is None:
        raise train.SetupError("give the training data your model fits on: (model, data)")
    return ModelWorkload(target, data, config, class_weight)


def peak_at(target: Any, data: Any, config: TrainConfig, steps: int, own: bool = False) -> Any:
    """A fresh process's ``peak`` job: the ``memory_fit.MemoryPeak`` of `steps` steps of
    `target` after its first call (``peak_from_second_call``), at ``config.batch_size`` (`own`:
    your pipeline's). A failed allocation is answered as out of memory, not raised."""
    from toolkit.runner._data import TooFewExamples
    from toolkit.search._model_fit import at_batch, out_of_memory, peak_from_second_call
    from toolkit.search.memory_fit import MemoryPeak

    if own and hasattr(data, "element_spec"):
        from toolkit.data.builder import infer_batch_size

        config = dataclasses.replace(config, batch_size=infer_batch_size(data) or config.batch_size)
    batch = config.batch_size
    try:
        with workload(target, at_batch(data, batch), config) as work:
            # one call more than `steps`: its peaks are set back at its end
            steps += work.defaults().per_call
            work.fit(steps=steps, warmup=0, callbacks=[peak_from_second_call()])
            got = _peak_reading(work.device, batch)
            return dataclasses.replace(got, examples=_examples(data))
    except Exception as e:  # an allocation that failed is an answer; anything else is raised
        if isinstance(e.__cause__, TooFewExamples) and not config.use_synthetic_data:
            # a recipe's data smaller than the batch: synthetic batches of its shapes
            got = peak_at(target, data, dataclasses.replace(config, use_synthetic_data=True),
                          steps)  # fmt: skip
            return dataclasses.replace(got, synthetic=True)
        if not out_of_memory(e):
            raise
        said = (str(e).strip().splitlines() or [""])[0][:200]
        return MemoryPeak(batch, error=f"{type(e).__name__}: {said}", out_of_memory=True)


def _examples(data: Any) -> int | None:
    """The examples `data` holds where it says so without being read (None: unknown, or none)."""
    if data is None:
        return None
    if hasattr(data, "element_spec"):
        from toolkit.data.builder import batched_examples

        return batched_examples(data)
    leaves = [x for x in (data if isinstance(data, list | tuple) else (data,)) if x is not None]
    first = leaves[0] if leaves else None
    while isinstance(first, dict | list | tuple) and first:
        first = next(iter(first.values())) if isinstance(first, dict) else first[0]
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else None


def _peak_reading(device: Any, batch: int) -> Any:
    """The peak of the run just ended: the device's where it reports memory, else the host's."""
    from toolkit.search._model_fit import host_peak_mb
    from toolkit.search.memory_fit import HOST, MemoryPeak

    if device.kind != "cpu":
        seen = backend.get().device_memory()
        name = next((k for k in seen if k.endswith(f":{device.index}")), next(iter(seen), None))
        if name is not None:
            limit = backend.get().device_memory_limit().get(name)
            return MemoryPeak(batch, seen[name]["peak_mb"], name, limit)
    return MemoryPeak(batch, host_peak_mb(), HOST)


def apply(config: TrainConfig, candidate: Candidate) -> TrainConfig:
    """`config` with the candidate's settings."""
    values = {name: getattr(candidate, name) for name in SEARCHED}
    return dataclasses.replace(config, **{k: v for k, v in values.items() if v is not None})


def _build(model: Any, dataset: Any) -> None:
    """Builds a model with no weights yet (subclassed) as ``fit`` would, one call on your first
    batch: :class:`Saved` needs its weights to exist. Refused in one line where that fails."""
    from toolkit.runner.train import SetupError

    if getattr(model, "built", True) or model.weights:  # a GAN of built parts has weights
        return
    try:
        model(_first_inputs(dataset), training=False)
    except Exception as e:  # noqa: BLE001 - said in one line, with the way out
        raise SetupError(
            f"(model, data): {type(model).__name__} is not built (a subclassed model makes its "
            f"weights at its first call), and a call on your data's first batch failed "
            f"({one_line(e)}): call it on a batch first, model(x[:1]), or "
            "model.build(input_shape)"
        ) from None


def _first_inputs(dataset: Any) -> Any:
    """The inputs of `dataset`'s first batch as NumPy (any backend takes them), as Keras unpacks."""
    import numpy as np
    import tensorflow as tf

    batch = next(iter(dataset.take(1)))
    x = batch[0] if isinstance(batch, tuple) else batch
    return tf.nest.map_structure(lambda t: np.asarray(t) if isinstance(t, tf.Tensor) else t, x)


def _check_batched(model: Any, data: Any) -> None:
    """SetupError for an unbatched ``tf.data.Dataset`` (Keras's: a shape mismatch in ``call``)."""
    from toolkit.runner.train import SetupError

    spec, inputs = getattr(data, "element_spec", None), getattr(model, "inputs", None)
    if spec is None or not inputs or len(inputs) != 1:
        return
    features = spec[0] if isinstance(spec, tuple) else spec
    shape, wanted = getattr(features, "shape", None), getattr(inputs[0], "shape", None)
    if shape is None or wanted is None or getattr(shape, "rank", 0) is None:
        return
    if len(shape) == len(wanted) - 1 and tuple(shape) == tuple(wanted)[1:]:
        raise SetupError(
            f"(model, data): your dataset yields single examples of shape {tuple(shape)} and "
            f"{type(model).__name__} takes batches {tuple(wanted)}: batch your data "
            "(dataset.batch(N))"
        )


# ---------------------------------------------------------------------------- a recipe's Task


class TaskWorkload(Workload):
    """A recipe's Task trained by the runner. `resident`: the training data is made once for
    many runs, without validation. `keep`: the defaults and the `keep` fastest stay built, so
    head-to-head rounds cost windows, not builds (up to :data:`LIVE_PARAMS` weights)."""

    def __init__(
        self, task: Any, config: TrainConfig, *, resident: bool = False, keep: int = 0
    ) -> None:
        from toolkit.data.arrays import has_tensorflow
        from toolkit.runner import train

        super().__init__()
        self.config = config.validate()
        self.device, _findings = train.setup_device(self.config)
        if resident:
            data = task.train() if callable(task.train) else task.train
            if has_tensorflow():
                data = _resident(data)
            task = dataclasses.replace(task, train=data, validation=None)
        self.task, self.name, self.keep = task, task.name, keep
        self.batch_size = self.config.batch_size
        self.described = f"{task.name}'s pipeline, as the runner builds it"
        self.live: dict[Candidate, tuple[Any, Any]] = {}
        self.rates: dict[Candidate, float] = {}  # each candidate's first (built) window
        self.first: Candidate | None = None

    def how_to_apply(self, candidate: Candidate) -> str:
        return candidate.flags()

    def loader(self) -> str:
        """The runner's loader for this task and config (``--data_loader`` resolved)."""
        from toolkit.runner import _data

        return _data.data_loader(self.config, self.task.train, self.task)

    def space(self, space: Space, defaults: Candidate) -> Space:
        """Every setting: each candidate is a new build."""
        return space

    def length_known(self, config_given: bool) -> bool:
        """Always: a recipe's run is its config's."""
        return True

    def fresh_words(self) -> str:
        return "give tune fresh= the recipe's name and settings (a Target) for that"

    def input_words(self, dataset: Any) -> str:
        from toolkit.data import describe_pipeline

        return f"{self.described}: {describe_pipeline(dataset)}"

    def run_shape(self) -> RunShape:
        """The config's run: ``--epochs`` of ``--train_steps`` or one pass over the examples."""
        c = self.config._smoked() if self.config.smoke else self.config
        return RunShape(
            epochs=c.epochs,
            steps_per_epoch=c.steps_per_epoch,
            examples=None if c.steps_per_epoch else _count_examples(self.task),
            batch_size=c.batch_size,
            warmup_steps=c.warmup_steps,
        )

    def defaults(self) -> Candidate:
        """The config's searched settings, with Keras's own choice of compilation where unset."""
        c = self.config
        values = {
            name: getattr(c, name) for name in SEARCHED if getattr(Candidate(), name) is not None
        }
        jit = c.jit_compile if c.jit_compile is not None else backend.jits_by_default()
        return Candidate(**{**values, "jit_compile": bool(jit)})

    def _config(self, candidate: Candidate | None, steps: int, warmup: int) -> TrainConfig:
        base = self.config if candidate is None else apply(self.config, candidate)
        return base.for_measurement(whole_calls(steps, base.fused_steps), warmup)

    def fit(self, candidate=None, *, steps, warmup, one_batch=False, callbacks=()):
        from toolkit.runner import train

        cfg = self._config(candidate, steps, warmup)
        cfg = dataclasses.replace(cfg, use_synthetic_data=one_batch or cfg.use_synthetic_data)
        return train.run(self.task, cfg, callbacks=callbacks).report

    def pipeline(self) -> Any:
        from toolkit.runner import train

        return train.input_pipeline(self.task, self._config(None, self.per_call, 0))

    def rate(self, candidate: Candidate, steps: int = 48, calls: int = 3) -> float:
        if candidate in self.live:
            return self._again(candidate, steps)
        from toolkit.profiling.hopeless_stop import HopelessStop
        from toolkit.runner import train

        warmup, total = window_steps(candidate, steps, calls)
        batch = candidate.batch_size or self.config.batch_size
        best = max(self.rates.values(), default=None)
        limit = math.inf
        if best:
            limit = max(HOPELESS * total * batch / best, HOPELESS_FLOOR_S)
        deadline = math.inf if self.deadline is None else self.deadline
        stop = HopelessStop(candidate.per_call * batch, limit, deadline)
        try:
            with backend.get().quiet_retracing():  # each candidate is a new model, not a retrace
                result = train.run(
                    self.task, self._config(candidate, total, warmup), callbacks=[stop]
                )
            if stop.stopped and not stop.rate:
                raise RuntimeError("the budget ended in its first call (the compile)")
            rate = stop.rate if stop.stopped else rate_of(result.report.steps)
            self.note_compile(candidate, result.report.steps)
            self._hold(candidate, rate, result)
        finally:
            compat.keras().backend.clear_session()
        return rate

    def _hold(self, candidate: Candidate, rate: float, result: Any) -> None:
        """Keeps the candidate built when it is the first or among the `keep` fastest."""
        self.rates[candidate] = rate
        if self.first is None:
            self.first = candidate
        elif not self.keep:
            return
        if param_count(result.model) > LIVE_PARAMS or result.train_data is None:
            return
        self.live[candidate] = (result.model, result.train_data)
        others = sorted(
            (c for c in self.live if c != self.first), key=lambda c: self.rates[c], reverse=True
        )
        for c in others[self.keep :]:
            del self.live[c]

    def _again(self, candidate: Candidate, steps: int) -> float:
        model, data = self.live[candidate]
        per_call = candidate.per_call
        batch = candidate.batch_size or self.config.batch_size
        long_enough = math.ceil(LIVE_WINDOW_S * self.rates[candidate] / batch)
        timed = whole_calls(max(steps, per_call, long_enough), per_call)
        with backend.get().quiet_retracing():
            report = measured_fit(
                model, data, (per_call + timed) // candidate.fused_steps, 0, batch_size=batch
            )
        return rate_of(report.steps)

    def figures(self, steps, *, count_flops=True, candidate=None):
        from toolkit.runner import train

        base = self.config if candidate is None else apply(self.config, candidate)
        per_call = candidate.per_call if candidate is not None else self.per_call
        total = whole_calls(max(steps, 5 * per_call), per_call)
        cfg = dataclasses.replace(
            base.for_measurement(total, self.config.warmup_steps), count_flops=count_flops
        )
        return figures_of(train.run(self.task, cfg).report)

    def _signature(self) -> tuple[Any, Any]:
        from toolkit.runner import _data, train

        with train.precision_policy("float32"):
            model = self.task.build_model()
        spec = _data.examples(self.task.train).element_spec
        return model, spec

    def cache_facts(self) -> dict[str, Any]:
        try:
            return super().cache_facts()
        finally:
            compat.keras().backend.clear_session()

    def compile_again(self, candidate: Candidate, until: float) -> float | None:
        try:
            return super().compile_again(candidate, until)
        finally:  # its run built a model of its own, as each rate's does
            compat.keras().backend.clear_session()

    def close(self) -> None:
        if self.live:
            self.live.clear()
            compat.keras().backend.clear_session()


def _count_examples(task: Any) -> int | None:
    """The task's training examples, counted without reading them; None: unknown."""
    from toolkit.runner import _data

    source = task.train() if callable(task.train) else task.train
    try:
        count = _data.example_count(source, task.train_examples)
    except (AttributeError, TypeError, ValueError, ImportError):
        return task.train_examples
    return count if count >= 0 else None


def _resident(source: Any) -> Any:
    """A Task's data made once for many runs: arrays as tensors (nothing copied per run), else
    a dataset of single examples."""
    import tensorflow as tf

    from toolkit.runner import _data

    if isinstance(source, tuple):
        return tuple(
            None if part is None else tf.nest.map_structure(tf.convert_to_tensor, part)
            for part in source
        )
    return _data.examples(source)


# ---------------------------------------------------------------------------- your own model


class ModelWorkload(Workload):
    """Your compiled model on your data in any form ``fit`` takes, weighed by `class_weight`."""

    applies_in_python = True

    def __init__(
        self, model: Any, data: Any, config: TrainConfig, class_weight: Any = None
    ) -> None:
        from toolkit import devices

        super().__init__()
        self.model, self.config = model, config
        from toolkit.data import _fit_data
        from toolkit.runner.train import SetupError

        if not (
            callable(getattr(model, "fit", None)) and callable(getattr(model, "compile", None))
        ):
            raise SetupError(
                f"(model, data): a {type(model).__name__} is not a Keras model: give your "
                "compiled keras.Model and its data (or a function returning both)"
            )
        if not (getattr(model, "compiled", False) or getattr(model, "_is_compiled", False)):
            # Keras 3 says `compiled`, tf_keras `_is_compiled`
            raise SetupError(f"(model, data): compile {type(model).__name__} first (model.compile)")

        from toolkit.data import _fit_input, _grain

        _check_batched(model, data)
        kind = type(data).__name__
        try:  # before a generator is wrapped: fit weighs no classes of one
            self.class_weight = _fit_data.check_class_weight(data, class_weight)
            if _fit_input.is_generator(data):  # read once: each measurement replays, reads on
                data = _fit_input.Replay(data)
            self.data = data
            self.dataset, self.described, self.batch_size = _fit_data.fit_dataset(
                data, config.batch_size, self.class_weight
            )
        except ValueError as e:  # a form fit would refuse too: one line
            if user_raise(e) is not None:  # your data's own error
                raise
            raise SetupError(str(e)) from None
        self.data_words = self.described.partition(" in tf.data")[0]  # arrays, batched by N
        if _is_empty(self.dataset):
            raise SetupError(f"(model, data): {self.data_words}: it yields no batches (empty)")
        if isinstance(data, _fit_input.Replay):
            self.described = self.data_words = (
                f"your {kind}, read once: each measurement replays the batches read so far "
                f"and reads on (at most {data.hold} held)"
            )
        elif _grain.is_grain_dataset(data):
            from toolkit.data import describe_pipeline

            self.data_words = f"your Grain pipeline: {describe_pipeline(data)}"
        elif not hasattr(data, "element_spec") and "batched by" not in self.data_words:
            self.data_words = f"your {kind}"
        self.name = str(getattr(model, "name", None) or "model")
        self.device = devices.resolve(config.device)
        _build(model, self.dataset)
        self.saved = Saved(model)
        self.own_compile = OwnCompile.of(model)  # a compile of its class's own (a Distiller's)
        self.compiled: dict[str, Setting] | None = None  # its own, while a candidate's run
        self.endless: Any = None  # your data as fit reads it, built at the first real fit

    def how_to_apply(self, candidate: Candidate) -> str:
        own = self.own_compile
        if own is not None and not set(candidate.compile_kwargs()) <= own.takes:
            return as_python(candidate.compile_kwargs(), own)  # where your compile passes them
        kwargs = ", ".join(f"{k}={v!r}" for k, v in candidate.compile_kwargs().items())
        return f"model.compile(..., {kwargs})"

    def batch_words(self) -> str:
        return f"{self.batch_size}, your pipeline's" if self.batch_size else "your pipeline's"

    def space(self, space: Space, defaults: Candidate) -> Space:
        """`space` cut to compile arguments (no rebuild), the model's own settings first."""

        def first(value: Any, values: Sequence[Any]) -> tuple[Any, ...]:
            return (value, *(v for v in values if v != value))

        pairs = list(zip(space.axes(), space.SEARCHED, strict=True))
        rebuilt = [n for (n, values), (_, how) in pairs if not how.compile_arg and len(values) > 1]
        cut = (f"{', '.join(rebuilt)}: not searched on a compiled model (a rebuild sets it)",)
        found = dataclasses.replace(space, cut=space.cut + (cut if rebuilt else ()), **{
            name: first(getattr(defaults, name), values) if how.compile_arg
            else (getattr(defaults, name),)
            for (name, values), (_, how) in pairs
        })  # fmt: skip
        ruled_out = compat.xla_ruled_out(self.model)
        if not ruled_out or True not in found.jit_compile:
            return found
        # Keras drops jit_compile=True here: such a candidate times the same step, its noise
        # credited to XLA
        said = f"XLA: {compat.ruling_xla_out(ruled_out)}"
        jit = tuple(v for v in found.jit_compile if v is not True) or (False,)
        return dataclasses.replace(found, jit_compile=jit, cut=(*found.cut, said))

    def length_known(self, config_given: bool) -> bool:
        """Only as long as the config you gave says: your fit's length is yours."""
        return config_given

    def fresh_words(self) -> str:
        return "your model lives in this process: give tune fresh='module:function' for that"

    def run_shape(self) -> RunShape | None:
        """Your fit: ``config.epochs`` of ``config.steps_per_epoch`` or one pass over your data
        where countable (a Grain dataset's own count: its tf.data form has none)."""
        from toolkit.data import _fit_input

        steps = self.config.steps_per_epoch
        if steps is None:
            count = _cardinality(self.dataset)
            steps = count if count > 0 else _fit_input.epoch_batches(self.data)
        if steps is None:
            return None
        return RunShape(
            epochs=self.config.epochs, steps_per_epoch=steps, warmup_steps=self.config.warmup_steps
        )

    def defaults(self) -> Candidate:
        """The settings your compiled model has (those it does not say: the defaults)."""
        return Candidate(**model_settings(self.model))

    def fit(self, candidate=None, *, steps, warmup, one_batch=False, callbacks=()):
        if candidate is not None:
            if self.compiled is None:
                self.compiled = model_settings(self.model)
            set_model_settings(self.model, candidate.compile_kwargs())
        data = self._one_batch() if one_batch else self._as_fit_reads()
        try:
            return measured_fit(
                self.model, data, steps, warmup, batch_size=self.batch_size, callbacks=callbacks
            )
        except Exception as e:
            if library_raise(e):  # yours is said as yours; the toolkit's, with its traceback
                in_your_fit(e, backend.name())
            raise

    def pipeline(self) -> Any:
        return self.dataset

    def prepare(self, steps: int) -> None:
        from toolkit.data import _fit_input

        if isinstance(self.data, _fit_input.Replay):
            self.data.fill(window_steps(self.defaults(), steps)[1])

    def input_batches(self) -> tuple[str, Any] | None:
        from toolkit.data import _fit_input

        try:
            args = _fit_input.fit_arguments(self.data, self.batch_size, self.class_weight)
            read = None if args is None else backend.get().fit_batches(self.model, args)
        except (ImportError, AttributeError, TypeError, ValueError):
            # Keras's adapters are not public API: elsewhere the tf.data form is timed
            read = None
        if read is None:
            return None
        adapter, batches = read
        self.adapter = adapter
        workers = getattr(self.data, "workers", None) or getattr(self.data, "num_workers", None)
        self.input_workers = workers if isinstance(workers, int) else None
        form = self.described.rpartition("; ")[2] if "; " in self.described else ""
        said = f"{self.data_words}, read by Keras's {adapter} as fit reads it"
        return said + (f"; {form}" if form else ""), batches  # "; x alone": what fit gets

    def _as_fit_reads(self) -> Any:
        """Your data as ``fit`` reads it, endless (Keras's adapter), not the toolkit's ``tf.data``
        form: JAX slices arrays in NumPy, PyTorch reads a DataLoader."""
        from toolkit.data import _fit_input

        if self.endless is None:
            try:
                self.endless = (
                    _fit_input.as_fit_reads(self.data, self.batch_size, self.class_weight) or False
                )
            except (ImportError, AttributeError, TypeError, ValueError):
                self.endless = False  # another Keras version: the tf.data form
        return self.endless or self.dataset

    def _one_batch(self) -> Any:
        """One batch handed to the step again and again: the step alone, no pipeline."""
        from toolkit.data import _fit_input

        read = self.input_batches()
        if read is None:
            return self.dataset.take(1).cache().repeat()
        batches = read[1]
        try:
            first = next(batches)
        except StopIteration:
            from toolkit.runner.train import SetupError

            raise SetupError(
                f"(model, data): {self.data_words}: it yields no batches (empty)"
            ) from None
        finally:
            batches.close()
        try:
            return _fit_input.repeated_batch(first, self.batch_size)
        except (TypeError, ValueError):  # a batch split over replicas (a tf.distribute one)
            return self.dataset.take(1).cache().repeat()

    def figures(self, steps, *, count_flops=True, candidate=None):
        from toolkit.profiling import flops
        from toolkit.runner import train

        if self.config.init_weights:
            train.share_initial_weights(self.model, self.config.init_weights)
        per_call = (candidate or self.defaults()).per_call
        total = whole_calls(max(steps, 5 * per_call), per_call)
        out = figures_of(self.fit(candidate, steps=total, warmup=self.config.warmup_steps))
        if count_flops and self.batch_size and out["mean_s"]:
            with contextlib.suppress(Exception):
                facts = flops.compute_facts(
                    self.model, self.batch_size, self.config.precision, self.device
                )
                out["mfu"] = facts.at_step(out["mean_s"]).mfu  # none from a busy machine's peak
        return out

    def _signature(self) -> tuple[Any, Any]:
        return self.model, self.dataset.element_spec

    def close(self) -> None:
        if self.compiled is not None:
            set_model_settings(self.model, self.compiled)
        self.saved.restore()


def _cardinality(dataset: Any) -> int:
    """The batches a tf.data pipeline says it holds (negative: endless, or it cannot say)."""
    try:
        return int(dataset.cardinality())
    except (AttributeError, TypeError, ValueError):
        return -2  # tf.data.UNKNOWN_CARDINALITY


def _is_empty(dataset: Any) -> bool:
    """No batch at all: by its count, or where tf.data cannot count, by reading the first."""
    count = _cardinality(dataset)
    if count != -2 or not hasattr(dataset, "take"):
        return count == 0
    return next(iter(dataset.take(1)), None) is None
