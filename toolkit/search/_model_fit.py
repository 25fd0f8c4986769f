"""A measured fit of a compiled model and what measuring one needs: its state put back, its size
and architecture for the cache, a run's figures. Shared by ``toolkit.search.workload``'s targets."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from toolkit import backend
from toolkit.core._host_memory import high_water_mb
from toolkit.core.stats import whole_calls


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
    """A short, quiet, measured ``fit`` of a compiled `model` on batched `data` (repeated, in
    whole calls); the step statistics leave out the first call and `warmup_steps` more. Nothing
    is written, but the model trains: callers restore it (:class:`Saved`). `callbacks` run after
    the profiling ones. Returns the RunReport."""
    from toolkit.core.compat import steps_per_execution
    from toolkit.runner.session import profile

    with profile(
        name, report_dir=None, batch_size=batch_size, data=data, warmup_steps=warmup_steps
    ) as prof:
        prof.fit(  # the whole call timed: the report shows start-up and exit too
            model,
            data.repeat() if hasattr(data, "repeat") else data,  # a Keras adapter: endless
            epochs=1,
            steps_per_epoch=whole_calls(steps, steps_per_execution(model)),
            shuffle=False,  # batched data: Keras would only warn it cannot shuffle
            callbacks=callbacks,
            verbose=0,
        )
    return prof.report


class Saved:
    """What the measurements put back so your next ``fit`` trains as without them: the model's
    variables and each optimizer's. An optimizer first built by a measured step had no slots to
    save, so ``build`` is watched and its slots reset to a fresh copy's build (on TensorFlow they
    cannot be read as made: a step's first trace makes them, initialized later)."""

    def __init__(self, model: Any) -> None:
        self.model = model  # values read now, eagerly: no step is being traced
        self.values = [(v, np.array(v)) for v in model.variables]
        self.optimizers = [_OptimizerState(o) for o in _optimizers(model)]

    def restore(self) -> None:
        """Puts every value back, stops watching the builds, and resets the model's metrics."""
        for variable, value in self.values:
            variable.assign(value)
        for state in self.optimizers:
            state.restore()
        if hasattr(self.model, "reset_metrics"):
            self.model.reset_metrics()


class _OptimizerState:
    """One optimizer's variables as saved, its build watched (:class:`Saved`)."""

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer
        self.values = [(v, np.array(v)) for v in _optimizer_variables(optimizer)]
        self.built_with: list[Any] | None = None  # what a build while watched was given
        build = getattr(optimizer, "build", None)
        self._watched = callable(build) and "build" not in vars(optimizer)
        if self._watched:

            def watched(*args: Any, **kwargs: Any) -> Any:
                given = args[0] if args else next(iter(kwargs.values()), None)
                if self.built_with is None and given is not None:
                    self.built_with = list(given)
                return build(*args, **kwargs)

            optimizer.build = watched

    def restore(self) -> None:
        if self._watched:
            del self.optimizer.build
            self._watched = False
        for variable, value in self.values:
            variable.assign(value)
        saved = {id(v) for v, _ in self.values}
        now = _optimizer_variables(self.optimizer)
        made = [i for i, v in enumerate(now) if id(v) not in saved]
        if not made:
            return
        fresh = self._fresh_build(len(now))
        for i in made:
            variable = now[i]
            if fresh is not None and tuple(fresh[i].shape) == tuple(variable.shape):
                variable.assign(fresh[i])
            else:  # no copy to ask: an optimizer's slots start at zero (Adam, SGD, RMSprop)
                variable.assign(np.zeros(tuple(variable.shape), dtype=_dtype(variable)))

    def _fresh_build(self, count: int) -> list[Any] | None:
        """A fresh copy's variables built over what the watched build was given (None where it
        cannot be copied from its config or builds otherwise)."""
        if self.built_with is None:
            return None
        try:
            copy = type(self.optimizer).from_config(self.optimizer.get_config())
            copy.build(self.built_with)
            fresh = [np.array(v) for v in _optimizer_variables(copy)]
        except Exception:  # noqa: BLE001 - a custom optimizer: its slots start at zero
            return None
        return fresh if len(fresh) == count else None


def _dtype(variable: Any) -> str:
    dtype = getattr(variable, "dtype", "float32")
    return getattr(dtype, "name", None) or str(dtype)


def _optimizers(model: Any) -> list[Any]:
    """`model`'s ``optimizer`` and any other it holds as an attribute (a GAN's pair)."""
    found = [getattr(model, "optimizer", None), *vars(model).values()]
    out: list[Any] = []
    for o in found:
        if callable(getattr(o, "apply_gradients", None)) and all(o is not x for x in out):
            out.append(o)
    return out


def _optimizer_variables(optimizer: Any) -> list[Any]:
    variables = getattr(optimizer, "variables", []) if optimizer is not None else []
    return list(variables() if callable(variables) else variables)


def param_count(model: Any) -> int:
    """The model's parameters counted from its weights: a subclassed model built by its own
    ``train_step`` (a GAN) has no ``count_params()`` until called, and must not be built here."""
    count = 0
    for weight in model.weights:
        size = 1
        for dim in weight.shape:
            size *= int(dim)
        count += size
    return count


def model_signature(model: Any) -> str:
    """The architecture as text: layer classes and configs (not names: per process), weights."""
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


def rate_of(stats: Any) -> float:
    """Examples/s over the timed window."""
    if not stats.timed_steps or not stats.batch_size:
        raise RuntimeError("no timed steps (or no batch size) in the window")
    return stats.batch_size * stats.timed_steps / stats.total_s


def compile_cost(stats: Any) -> float | None:
    """Seconds the first call took beyond its steps at the median: its compile (None: unknown)."""
    first, n, p50 = stats.first_step_s, stats.first_step_steps, stats.p50_s
    if first is None or not n or not p50:
        return None
    return max(0.0, first - n * p50)


def figures_of(report: Any) -> dict[str, Any]:
    steps, compute, metrics = report.steps, report.compute, report.metrics or {}
    loss = metrics.get("loss")
    return {
        "backend": backend.name(),
        "first_step_s": steps.first_step_s,
        "p50_s": steps.p50_s,
        "mean_s": steps.mean_s,
        "examples_per_sec": steps.examples_per_sec,
        "timed_steps": steps.timed_steps,
        "steps_per_call": steps.steps_per_execution,
        "batch_size": steps.batch_size,
        "mfu": compute.mfu if compute is not None else None,
        "loss": float(loss) if loss is not None else None,
    }


# ---------------------------------------------------------------------------- peak memory
# A fresh process's peak memory over a short fit, for ``toolkit.fits`` (its ``peak`` job).


def host_peak_mb() -> float:
    """This process's peak resident memory in MiB, since its start or :func:`reset_host_peak`."""
    return high_water_mb()


def reset_host_peak() -> bool:
    """Sets the peak back to what is resident now (Linux's ``clear_refs``): imports, build and
    first compile are transient peaks no batch size changes. False where the kernel cannot."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def peak_from_second_call() -> Any:
    """A Keras callback resetting the host and device peaks after the first call, so the peak
    read after the fit is the steps' own: the first call's (trace, compile, lazy start-up) made
    small batches' peaks wander between processes."""
    from toolkit.core import compat

    class ResetPeaks(compat.keras().callbacks.Callback):
        starts_untold_profiler = False  # StepTimer then probes for a profiler once an epoch

        def __init__(self) -> None:
            super().__init__()
            self.done = False

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if not self.done:
                self.done = True
                backend.get().device_memory(reset_peak=True)
                reset_host_peak()

    return ResetPeaks()


def out_of_memory(error: BaseException) -> bool:
    """Whether `error` says an allocation failed, on any backend. Read by name and text: each
    backend raises its own type, and a Keras wrapper may carry one in its message."""
    names = ("ResourceExhaustedError", "OutOfMemoryError", "MemoryError")
    if any(kind.__name__ in names for kind in type(error).__mro__):
        return True
    text = str(error)  # a crash's last line names the type: "...ResourceExhaustedError: OOM"
    said = (*names, "RESOURCE_EXHAUSTED", "OOM when allocating")
    return any(s in text for s in said) or "out of memory" in text.lower()


def at_batch(data: Any, batch_size: int) -> Any:
    """`data` read `batch_size` examples a step (full batches; None stays None). Arrays always go
    through ``tf.data``: Keras's adapter holds other memory, which would bend the fitted line.

    Raises:
        ValueError: data whose batches are its own (a PyDataset, a generator)."""
    from toolkit.data.builder import infer_batch_size

    if data is None:
        return None
    if hasattr(data, "element_spec"):
        if infer_batch_size(data) == batch_size:
            return data
        return data.unbatch().repeat().batch(batch_size, drop_remainder=True)
    import tensorflow as tf

    leaves = tf.nest.flatten(data)
    if not leaves or not all(hasattr(leaf, "shape") for leaf in leaves):
        raise ValueError(
            f"fits: your {type(data).__name__} makes its own batches: give arrays or a "
            "tf.data pipeline, which can be read at each batch size"
        )
    from toolkit.data._fit_data import as_fit_tuple

    # As fit unpacks it; lists made tuples (tf.data would stack a list of labels, one per
    # output); x alone as itself, as fit hands it to a custom train_step (a VAE's).
    parts = as_fit_tuple(data)
    alone = len(parts) == 1 and not isinstance(parts[0], tuple)
    examples = tf.data.Dataset.from_tensor_slices(parts[0] if alone else parts)
    return examples.repeat().batch(batch_size, drop_remainder=True)
