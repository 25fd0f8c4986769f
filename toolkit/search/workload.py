"""One measured target: a recipe's Task under a TrainConfig, or your compiled model with its data.

Every tool that measures training (``tune``, ``doctor`` /
:func:`~toolkit.search.diagnose.diagnose` and the backends chooser's child processes) asks the
same question, "how fast does this target train under these settings, for N steps?", of two kinds of
target. A :class:`Workload` answers it once for both:

* :class:`TaskWorkload`: a recipe's Task, trained by the one runner
  (``toolkit.runner.train.run``) with a short, quiet measurement config
  (``TrainConfig.for_measurement``); each candidate is a new build, so the search can change
  precision and fused steps;
* :class:`ModelWorkload`: your compiled model on your batched data, measured with a quiet
  ``fit`` (:func:`measured_fit`); a candidate recompiles it (same optimizer, loss, metrics), and
  :meth:`~Workload.close` puts back its compile settings, weights and optimizer state.

Both round a run to whole calls of the compiled function (``stats.whole_calls``), read the
backend's Keras defaults in one place (``toolkit.backend.jits_by_default``) and report through
the same ``RunReport``. Frameworks load when a workload is made, not when this module is
imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

from toolkit import backend
from toolkit.core import compat
from toolkit.core.stats import utilization, whole_calls
from toolkit.runner.config import SEARCHED, TrainConfig
from toolkit.search.engine import Candidate, window_steps

__all__ = [
    "ModelWorkload",
    "TaskWorkload",
    "Workload",
    "workload",
]

LIVE_WINDOW_S = 0.25  # a kept finalist's window when measured again, at least (seconds)
LIVE_PARAMS = 50_000_000  # models with more weights are rebuilt, not kept, for the rounds
# A candidate whose run has taken this many times what the best so far needed for its whole
# window is stopped: it cannot win (a first XLA compile can cost many times a whole window).
HOPELESS = 4.0
HOPELESS_FLOOR_S = 2.0  # ...and never before this much of its run (after the first call)


class Workload:
    """What every target offers the tools that measure it (see the module docstring)."""

    name: str
    config: TrainConfig  # the settings it measures from (validated)
    batch_size: int | None  # examples per training step (None: the data does not say)
    device: Any  # the DeviceInfo it trains on
    described: str  # the input pipeline, in words
    is_model: bool = False  # your own compiled model: only what a recompile changes is searchable
    # A run still going at this time.perf_counter() stops after its current call (a budget's
    # end; None: no end). One that has not finished its first call by then raises.
    deadline: float | None = None

    def defaults(self) -> Candidate:
        """The settings it trains with now, as this backend runs them (the search's first)."""
        raise NotImplementedError

    @property
    def per_call(self) -> int:
        """Training steps in one call of the compiled function."""
        return self.defaults().per_call

    def settings(self) -> dict[str, Any]:
        """Its speed settings in words, for the diagnosis's advice (a setting left to the
        config, such as the batch size, is not one)."""
        d = self.defaults()
        values = {name: getattr(d, name) for name in SEARCHED}
        return {**{k: v for k, v in values.items() if v is not None}, "backend": backend.name()}

    def fit(
        self,
        candidate: Candidate | None = None,
        *,
        steps: int,
        warmup: int,
        one_batch: bool = False,
        callbacks: Sequence[Any] = (),
    ) -> Any:
        """A measured run of `steps` training steps (whole calls) with `candidate`'s settings
        (None: its own) and the report's statistics after `warmup` more steps than the first
        call; `one_batch`: the step alone, one batch read again and again. Returns the
        RunReport."""
        raise NotImplementedError

    def pipeline(self) -> Any:
        """The batched training data as :meth:`fit` reads it (a fused batch holds
        ``fused_steps`` steps)."""
        raise NotImplementedError

    def rate(self, candidate: Candidate, steps: int = 48, calls: int = 3) -> float:
        """Examples/s over a timed window of at least `steps` steps and `calls` calls, after
        the candidate's own warm-up (:func:`~toolkit.search.engine.window_steps`)."""
        warmup, total = window_steps(candidate, steps, calls)
        with backend.get().quiet_retracing():
            return _rate(self.fit(candidate, steps=total, warmup=warmup).steps)

    def cache_facts(self) -> dict[str, Any]:
        """What a cached answer for it depends on: the model's architecture, its input's spec
        and batch size, the backend and device (the machine is added by the caller)."""
        model, spec = self._signature()
        return {
            "model": hashlib.sha256(model_signature(model).encode()).hexdigest()[:16],
            "params": param_count(model),
            "input": str(spec),
            "batch_size": self.batch_size or 0,
            "backend": backend.name(),
            "device": f"{self.device.kind}:{self.device.index}",
        }

    def how_to_apply(self, candidate: Candidate) -> str:
        """How a user applies `candidate` to this target: a recipe's flags, or the
        ``model.compile`` arguments of your model."""
        raise NotImplementedError

    def batch_words(self) -> str:
        """Its batch size in words, for a verb's first line."""
        return str(self.batch_size)

    def figures(self, steps: int, *, count_flops: bool = True) -> dict[str, Any]:
        """One run of at least `steps` steps and five calls, as the backends chooser compares
        them: first step, p50, mean, examples/s, MFU and the final training loss."""
        raise NotImplementedError

    def close(self) -> None:
        """Lets go of what measuring held (and puts your model back as it was)."""

    def _signature(self) -> tuple[Any, Any]:
        raise NotImplementedError

    def __enter__(self) -> Workload:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def workload(target: Any, data: Any = None, config: TrainConfig | None = None, **kw: Any):
    """The :class:`Workload` of a ``toolkit.runner.train.Task`` (with `config`; a TrainConfig may
    stand as `data`) or of a compiled model with its `data`: the one place that asks which kind
    a target is (tune, diagnose, doctor and backends take the Workload). `kw` (``resident``,
    ``keep``) are a Task's: your model is built already and its data is yours.

    Raises:
        toolkit.runner.train.SetupError: a model without data, data that is not batches.
    """
    from toolkit.runner import train

    if isinstance(data, TrainConfig):
        config, data = data, None
    config = (config or TrainConfig()).validate()
    if isinstance(target, train.Task):
        return TaskWorkload(target, config, **kw)
    if data is None:
        raise train.SetupError("give the training data your model fits on: (model, data)")
    return ModelWorkload(target, data, config)


def apply(config: TrainConfig, candidate: Candidate) -> TrainConfig:
    """`config` with the candidate's settings."""
    values = {name: getattr(candidate, name) for name in SEARCHED}
    return dataclasses.replace(config, **{k: v for k, v in values.items() if v is not None})


# ---------------------------------------------------------------------------- a recipe's Task


class TaskWorkload(Workload):
    """A recipe's Task trained by the runner. With `resident`, the training data is made once
    for many runs (arrays become tensors once, a data function is called once) and the
    validation split is left out (a window times training steps only). With `keep`, the
    first candidate measured (the defaults) and the `keep` fastest stay built: measuring one
    of those again runs its compiled step on its own pipeline for a fresh window (no rebuild,
    retrace or recompile), so head-to-head rounds cost their windows, not builds; a model
    with more than :data:`LIVE_PARAMS` weights is rebuilt instead."""

    def __init__(
        self, task: Any, config: TrainConfig, *, resident: bool = False, keep: int = 0
    ) -> None:
        from toolkit.data import has_tensorflow
        from toolkit.runner import train

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

    def defaults(self) -> Candidate:
        """The config's searched settings (those whose candidate default is None, the batch
        size, stay the config's), with Keras's own choice of compilation where it is unset."""
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

        cfg = dataclasses.replace(
            self._config(candidate, steps, warmup), use_synthetic_data=one_batch
        )
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
        if best:  # what the best so far needed for this whole window, times HOPELESS
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
            rate = stop.rate if stop.stopped else _rate(result.report.steps)
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
        return _rate(report.steps)

    def figures(self, steps: int, *, count_flops: bool = True) -> dict[str, Any]:
        from toolkit.runner import train

        per_call = self.per_call
        total = whole_calls(max(steps, 5 * per_call), per_call)
        cfg = dataclasses.replace(
            self.config.for_measurement(total, self.config.warmup_steps), count_flops=count_flops
        )
        return _figures(train.run(self.task, cfg).report)

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

    def close(self) -> None:
        if self.live:
            self.live.clear()
            compat.keras().backend.clear_session()


def _resident(source: Any) -> Any:
    """A Task's data made once for many runs: in-memory ``(features, labels)`` arrays as
    tensors (each run's pipeline gathers its batches from them; nothing is copied per run),
    anything else as a dataset of single examples."""
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
    """Your compiled model on your data, in any form ``fit`` takes (``toolkit.data._fit_data``:
    a ``tf.data.Dataset`` used exactly as it is, arrays batched by ``config.batch_size``, ``x``
    alone, sample weights, a ``PyDataset``, a generator)."""

    is_model = True

    def __init__(self, model: Any, data: Any, config: TrainConfig) -> None:
        from toolkit import devices

        self.model, self.config = model, config
        from toolkit.data import _fit_data
        from toolkit.runner.train import SetupError

        if not (getattr(model, "compiled", False) or getattr(model, "_is_compiled", False)):
            # Keras 3 says `compiled`, tf_keras `_is_compiled`
            raise SetupError(f"(model, data): compile {type(model).__name__} first (model.compile)")

        try:
            self.dataset, self.described, self.batch_size = _fit_data.fit_dataset(
                data, config.batch_size
            )
        except ValueError as e:  # a form fit would refuse too: one line, naming the data
            raise SetupError(str(e)) from None
        self.name = str(getattr(model, "name", None) or "model")
        self.device = devices.resolve(config.device)
        self.saved = snapshot(model)
        self.compiled: dict[str, Any] | None = None  # its settings, while a candidate's run

    def how_to_apply(self, candidate: Candidate) -> str:
        kwargs = ", ".join(f"{k}={v!r}" for k, v in candidate.compile_kwargs().items())
        return f"model.compile(..., {kwargs})"

    def batch_words(self) -> str:
        return f"{self.batch_size}, your pipeline's" if self.batch_size else "your pipeline's"

    def defaults(self) -> Candidate:
        from toolkit.core.compat import steps_per_execution

        policy = getattr(getattr(self.model, "dtype_policy", None), "name", None)
        jit = getattr(self.model, "jit_compile", False)
        return Candidate(
            precision=str(policy or "float32"),
            jit_compile=jit is True,
            steps_per_execution=steps_per_execution(self.model),
        )

    def fit(self, candidate=None, *, steps, warmup, one_batch=False, callbacks=()):
        if candidate is not None:
            if self.compiled is None:
                self.compiled = compat.compile_settings(self.model)
            compat.set_compile_settings(self.model, **candidate.compile_kwargs())
        data = self.dataset.take(1).cache().repeat() if one_batch else self.dataset
        return measured_fit(
            self.model, data, steps, warmup, batch_size=self.batch_size, callbacks=callbacks
        )

    def pipeline(self) -> Any:
        return self.dataset

    def figures(self, steps: int, *, count_flops: bool = True) -> dict[str, Any]:
        from toolkit.profiling import flops
        from toolkit.runner import train

        if self.config.init_weights:
            train.share_initial_weights(self.model, self.config.init_weights)
        per_call = self.per_call
        total = whole_calls(max(steps, 5 * per_call), per_call)
        out = _figures(self.fit(steps=total, warmup=self.config.warmup_steps))
        if count_flops and self.batch_size and out["p50_s"]:
            with contextlib.suppress(Exception):
                facts = flops.compute_facts(
                    self.model, self.batch_size, self.config.precision, self.device
                )
                out["mfu"] = utilization(
                    facts.get("flops_per_step"), out["p50_s"], facts.get("peak_flops_per_s")
                )["mfu"]
        return out

    def _signature(self) -> tuple[Any, Any]:
        return self.model, self.dataset.element_spec

    def close(self) -> None:
        if self.compiled is not None:
            compat.set_compile_settings(self.model, **self.compiled)
        restore(self.model, self.saved)


def measured_fit(
    model: Any,
    data: Any,
    steps: int,
    warmup_steps: int,
    *,
    batch_size: int | None = None,
    name: str = "measured-fit",
    callbacks: Sequence[Any] = (),
) -> Any:
    """A short, quiet, measured ``fit`` of an already compiled `model` on batched `data`
    (repeated as often as `steps` needs, in whole calls): the report's step statistics leave
    out the first execution and `warmup_steps` more. Nothing is written. The model trains:
    callers that must not change it restore its weights afterwards. `callbacks` run after
    the profiling ones. Returns the RunReport.
    """
    from toolkit.core.compat import steps_per_execution
    from toolkit.runner.session import profile

    with profile(
        name, report_dir=None, batch_size=batch_size, data=data, warmup_steps=warmup_steps
    ) as prof:
        model.fit(
            data.repeat(),
            epochs=1,
            steps_per_epoch=whole_calls(steps, steps_per_execution(model)),
            shuffle=False,  # batched data: Keras would only warn that it cannot shuffle it
            callbacks=[*prof.callbacks, *callbacks],
            verbose=0,
        )
    return prof.report


def snapshot(model: Any) -> tuple[list[Any], list[Any]]:
    """The model's weights and its optimizer's variables, as arrays (for :func:`restore`)."""
    optimizer = getattr(model, "optimizer", None)
    variables = getattr(optimizer, "variables", []) if optimizer is not None else []
    variables = list(variables() if callable(variables) else variables)
    return model.get_weights(), [(v, v.numpy()) for v in variables]


def restore(model: Any, saved: tuple[list[Any], list[Any]]) -> None:
    """Puts back what :func:`snapshot` saved, and resets the model's metrics."""
    weights, optimizer_state = saved
    model.set_weights(weights)
    for variable, value in optimizer_state:
        variable.assign(value)
    if hasattr(model, "reset_metrics"):
        model.reset_metrics()


def param_count(model: Any) -> int:
    """The model's parameters, its sub-models' included, counted from its variables: a
    subclassed model that ``fit`` builds through its own ``train_step`` (a GAN) has no
    ``count_params()`` until it is called, and a measurement must not build it."""
    count = 0
    for weight in model.weights:
        size = 1
        for dim in weight.shape:
            size *= int(dim)
        count += size
    return count


def model_signature(model: Any) -> str:
    """The architecture as text: every layer's class and configuration (layer names left out:
    Keras numbers them per process) and the shapes of the weights."""
    parts: list[Any] = []
    skip = {"name", "layers", "input_layers", "output_layers"}

    def walk(layer: Any) -> None:
        try:
            config = {k: v for k, v in layer.get_config().items() if k not in skip}
        except Exception:  # noqa: BLE001 - a subclassed layer may not serialize its config
            config = {}
        parts.append([type(layer).__qualname__, config])
        for sub in getattr(layer, "layers", None) or []:
            walk(sub)

    walk(model)
    parts.append([list(w.shape) for w in model.weights])
    return json.dumps(parts, sort_keys=True, default=str)


def _rate(stats: Any) -> float:
    """Examples/s over the timed window."""
    if not stats.timed_steps or not stats.batch_size:
        raise RuntimeError("no timed steps (or no batch size) in the window")
    return stats.batch_size * stats.timed_steps / stats.total_s


def _figures(report: Any) -> dict[str, Any]:
    steps, compute, metrics = report.steps, report.compute or {}, report.metrics or {}
    loss = metrics.get("loss")
    return {
        "backend": backend.name(),
        "first_step_s": steps.first_step_s,
        "p50_s": steps.p50_s,
        "mean_s": steps.mean_s,
        "examples_per_sec": steps.examples_per_sec,
        "timed_steps": steps.timed_steps,
        "batch_size": steps.batch_size,
        "mfu": compute.get("mfu"),
        "loss": float(loss) if loss is not None else None,
    }
