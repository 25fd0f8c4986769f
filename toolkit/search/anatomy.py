"""``toolkit.anatomy(model, data)``: what inside the training step costs it, measured here. A
short fit traces ``steps`` steps into phases and layers; the model and its slowest layers are
timed alone and all reconciled to the untraced step; Keras's own cost is the backend's
``raw_step`` against ``fit``'s. What cannot be measured is left out with a note saying why."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Sequence
from typing import Any

from toolkit import backend
from toolkit.core import compat
from toolkit.core._advice import Advice
from toolkit.core._anatomy import MAX_STEPS, Anatomy, reconcile
from toolkit.core.checks import check_number
from toolkit.core.errors import one_line
from toolkit.core.progress import say
from toolkit.core.stats import DEFAULT_WARMUP_STEPS, format_ms, warmed_calls, whole_calls
from toolkit.profiling.layers_alone import check_layers, check_model, fed_by_data
from toolkit.runner.config import TrainConfig
from toolkit.search.advice import unjitted_advice
from toolkit.search.workload import workload

__all__ = ["anatomy"]

DEFAULT_STEPS = 10  # traced steps (whole calls of steps_per_execution)
AFTER_STEPS = 10  # untraced steps after the window, for the untraced median
RAW_WINDOW_S = 0.2  # each timed run of the raw step, at least
RAW_WARM_S = 0.1  # the raw step's calls before its timed runs
RAW_RUNS = 2  # timed runs of the raw step before, between and after fit's
RAW_ROUNDS = 2  # fit's one-batch runs, each between raw runs
# A step on your data under this share of fit's step on one batch is no whole step.
WHOLE_STEP = 0.8


def anatomy(
    target: Any,
    data: Any = None,
    *,
    steps: int = DEFAULT_STEPS,
    config: TrainConfig | None = None,
    raw: bool = True,
    layers: Sequence[str] = (),
    check: bool = True,
) -> Anatomy:
    """The training step of `target` taken apart (a compiled model is put back afterwards).

    Args:
        target: a ``toolkit.Task`` or your compiled model.
        data: your model's data (None for a Task).
        steps: training steps traced (more: steadier figures, a longer trace).
        config: a TrainConfig (batch size, device, settings); default: the defaults.
        raw: also time the step written without Keras's trainer (Keras's own cost).
        layers: layers to time alone besides the slowest three (``outer/inner`` if nested).
        check: time the layers alone and reconcile (False: the trace's own split, sooner).

    Returns:
        a :class:`toolkit.core._anatomy.Anatomy` in a fit's milliseconds without the profiler
        (``toolkit.report.anatomy_lines``); its ``error`` says why no trace could be taken.

    Raises:
        ConfigError: `steps` outside 2 to :data:`MAX_STEPS`.
        toolkit.runner.train.SetupError: a target that cannot be measured."""
    check_number("anatomy: steps", steps, integer=True, least=2, most=MAX_STEPS)
    with workload(target, data, config) as work:
        return _Measured(work, steps, tuple(layers), check).run(raw)


@dataclasses.dataclass
class _Measured:
    work: Any
    steps: int
    layers: tuple[str, ...] = ()
    check: bool = True

    def run(self, raw: bool) -> Anatomy:
        from toolkit.profiling.anatomy import AnatomyWindow

        work = self.work
        per_call = max(1, work.per_call)
        start = whole_calls(DEFAULT_WARMUP_STEPS + 1 + per_call, per_call)
        traced = whole_calls(self.steps, per_call)
        after = whole_calls(AFTER_STEPS, per_call)
        device = getattr(work.device, "human_name", "") or ""
        say(f"anatomy: tracing {traced} steps after {start} (scoped layers, one trace window)")
        with tempfile.TemporaryDirectory(prefix="toolkit-anatomy-") as logdir:
            window = AnatomyWindow(logdir, start_step=start, stop_step=start + traced,
                                   stop_if_refused=True)  # fmt: skip
            report = work.fit(steps=start + traced + after, warmup=DEFAULT_WARMUP_STEPS,
                              callbacks=[window])  # fmt: skip
            untraced = report.steps.p50_s if report.steps.timed_steps else None
            found = window.anatomy(untraced_s=untraced, device=device)
            model = window.model
        if found.error or not self.check:
            return self._with_raw(found, model) if raw and not found.error else found
        scopes = window.scopes
        if scopes is not None:
            say("anatomy: the model and its slowest layers timed alone, compiled as the step is")
            batch, jit = work.config.batch_size, _jitted(model)
            found = check_model(found, model, scopes.model_inputs, calls=scopes.model_calls,
                                batch=batch, jit=jit)  # fmt: skip
            found = check_layers(found, scopes.entries.values(), batch=batch, jit=jit,
                                 names=self.layers, data_fed=fed_by_data(model))  # fmt: skip
        # Keras's own cost first: reconcile holds "Keras between steps" to it
        found = reconcile(self._with_raw(found, model) if raw else found)
        return self._with_other_fix(found, model)

    def _with_raw(self, found: Anatomy, model: Any) -> Anatomy:
        """`found` with Keras's own cost and your data's, timed in turn; the second even without
        a raw step, else a JAX step's input holds the profiler-slowed batch transfers."""
        why = _no_raw_step(model)
        batch = None if why else self._batch()
        timed, how = None, ""
        if batch is None:
            why = why or "no batch could be read"
        else:
            try:
                timed, how = backend.get().raw_step(model, batch, max(1, self.work.per_call))
            except Exception as e:  # noqa: BLE001 - one plain step cannot stand for this one
                why = str(e)
        notes = found.notes + ((f"Keras's own cost not measured: {why}",) if why else ())
        against = "the raw step" if timed else "your data's"  # fit's step alone against it
        say(f"anatomy: Keras's fit step alone against {against}, timed in turn")
        try:
            raws, fits, feds = self._in_turn(timed)
        except Exception as e:  # noqa: BLE001 - the raw step is ours: said, the anatomy kept
            failed = "the raw step" if timed else "fit's step on one batch"
            note = f"Keras's own cost not measured: {failed} failed ({one_line(e)})"
            return dataclasses.replace(found, notes=(*notes, note))
        # The raw step is a floor: its fastest run. Your data's step is the untraced step where
        # faster: the traced fit's run while the profiler still writes its trace.
        fed, alone, theirs = [f for f in feds if f], min(fits), found.untraced_s
        if fed and theirs and theirs < WHOLE_STEP * alone:
            # no step on your data is faster than the step alone: yours, timed in turn, stands
            notes += (f"the traced fit's untraced steps read {format_ms(theirs)}, faster "
                      f"than fit's step on one batch alone ({format_ms(alone)}): not whole "
                      f"steps; fit's step on your data, timed in turn, stands",)  # fmt: skip
            theirs = None
        untraced = min([u for u in (theirs, *fed) if u], default=None)
        return dataclasses.replace(found, raw_s=min(raws, default=None), raw_how=how,
                                   fit_s=min(fits), fed_s=min(fed) if fed else None,
                                   untraced_s=untraced, notes=notes)  # fmt: skip

    def _in_turn(self, timed: Any) -> tuple[list[float], list[float], list[float]]:
        """Per-step runs of the raw step (none if `timed` is None), fit on one batch and fit on
        your data, in turn: a machine's slow spell falls on all."""
        per_call = max(1, self.work.per_call)
        n = warmed_calls(timed, RAW_WINDOW_S, RAW_WARM_S) if timed else 1  # calls of per_call
        raws: list[float] = []
        fits: list[float] = []
        feds: list[float] = []
        for _ in range(RAW_ROUNDS):
            if timed:
                raws += [timed(n) / (n * per_call) for _ in range(RAW_RUNS)]
            fits.append(self._fit_alone(n * per_call, per_call))
            feds.append(self._fit_fed(n * per_call, per_call))
        if timed:
            raws += [timed(n) / (n * per_call) for _ in range(RAW_RUNS)]
        return raws, fits, feds

    def _fit_alone(self, steps: int, per_call: int, candidate: Any = None) -> float:
        """``fit``'s median step on one batch repeated (`candidate`'s settings; None: own)."""
        return self.work.fit(
            candidate,
            steps=whole_calls(max(30, steps), per_call),
            warmup=DEFAULT_WARMUP_STEPS,
            one_batch=True,
        ).steps.p50_s

    def _fit_fed(self, steps: int, per_call: int) -> float | None:
        """``fit``'s median step on your data, timed in turn with :meth:`_fit_alone`."""
        return self.work.fit(
            steps=whole_calls(max(30, steps), per_call), warmup=DEFAULT_WARMUP_STEPS
        ).steps.p50_s

    def _with_other_fix(self, found: Anatomy, model: Any) -> Anatomy:
        """`found` with the fix for a large "other" (the compiler) named and, where it compiles
        in seconds (``searched_jit``), ``fit``'s step with it timed as tune would."""
        advice = None if model is None or _jitted(model) else backend.get().jit_advice()
        if advice is not None and (ruled_out := compat.xla_ruled_out(model)):
            # Keras drops jit_compile=True for such a model: measuring it measured nothing
            advice = unjitted_advice(ruled_out, backend.name())
        if advice is None:
            return found
        found = dataclasses.replace(found, other_fix=advice)
        tries = advice.settings
        if not (found.other_large() and tries):
            return found
        if tries[0].get("jit_compile", False) not in backend.get().searched_jit():
            note = f"the fix for other not measured here: {advice}"
            return dataclasses.replace(found, notes=(*found.notes, note))
        per_call = max(1, self.work.per_call)
        try:
            candidate = dataclasses.replace(self.work.defaults(), **tries[0])
            tried = Advice.of("{0}", tries[0])  # the settings alone, as a log spells them
            say(f"anatomy: fit's step with {tried}, against its own")
            # fit's own not timed yet (--no_raw): first, then again in turn with the fix's
            # (a step reads slower in the fits after an XLA one)
            own, base = self.work.defaults(), found.fit_s
            if base is None:
                base = self._fit_alone(30, per_call, own)
            fixed = self._fit_alone(30, per_call, candidate)
            if found.fit_s is None:
                base = min(base, self._fit_alone(30, per_call, own))
                fixed = min(fixed, self._fit_alone(30, per_call, candidate))
        except Exception as e:  # noqa: BLE001 - the check is ours: said, the anatomy kept
            note = f"the fix for other not measured: {one_line(e)}"
            return dataclasses.replace(found, notes=(*found.notes, note))
        return dataclasses.replace(found, other_fixed_s=fixed, fit_s=base)

    def _batch(self) -> Any:
        """One training batch as NumPy (Keras's own reading of the data, else the pipeline's)."""
        keras = compat.keras()
        with contextlib.suppress(Exception):
            read = self.work.input_batches()
            if read is not None:
                batches = read[1]
                try:
                    return _as_numpy(keras, next(batches))
                finally:
                    with contextlib.suppress(Exception):
                        batches.close()
        with contextlib.suppress(Exception):
            return _as_numpy(keras, next(iter(self.work.pipeline())))
        return None


def _as_numpy(keras: Any, batch: Any) -> Any:
    import numpy as np

    return keras.tree.map_structure(lambda t: None if t is None else np.asarray(t), batch)


def _no_raw_step(model: Any) -> str | None:
    """Why the plain raw step would not be this model's step (None: it would be)."""
    if model is None:
        return "the fit never handed its model over"
    if compat.keras_flavor() != "keras3":
        return "tf_keras: the raw step is written for Keras 3's stateless API"
    own = getattr(type(model), "train_step", None)
    if own is not None and not getattr(own, "__module__", "").startswith("keras."):
        return f"{type(model).__name__} has its own train_step: a raw step would not be the same"
    return None


def _jitted(model: Any) -> bool:
    """Whether the model's step is compiled: its layers are timed alone the same way."""
    return getattr(model, "jit_compile", False) is True  # Keras resolves "auto" on reading
