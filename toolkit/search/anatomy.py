"""``toolkit.anatomy(model, data)``: what inside the training step costs it. One measured
target (a recipe's Task, or your compiled model and data: ``toolkit.search.workload``), three
measurements in this process:

1. A short fit with an :class:`~toolkit.profiling.anatomy.AnatomyWindow`: the scope tokens
   on the model's layers and phases, a trace of ``steps`` steps after the warm-up, read into
   phases and layers and checked against the outside clock; the same fit's untraced median
   step says what the profiler itself cost. The whole model and its slowest layers are then
   timed alone (``toolkit.profiling.layers_alone``), and the anatomy is reconciled to the
   untraced step with those figures (``toolkit.core._anatomy.reconcile``).
2. Keras's own cost: the same model's step written without Keras's trainer (the backend's
   ``raw_step``: JAX's ``stateless_call`` + ``value_and_grad`` + ``stateless_apply`` jitted,
   PyTorch's forward/``backward()``/``apply``, TensorFlow's ``tf.function`` with a
   ``GradientTape``) against ``fit``'s step on one batch repeated (the step alone, no input
   pipeline between steps), timed twice around it.

Nothing is guessed: a raw step that cannot be written for a model (several losses, a custom
``train_step``) is left out with a note saying why.
"""

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

DEFAULT_STEPS = 10  # traced steps: exactly these (whole calls of steps_per_execution)
AFTER_STEPS = 10  # untraced steps after the window, for the untraced step's median
RAW_WINDOW_S = 0.2  # each timed run of the raw step, at least
RAW_WARM_S = 0.1  # the raw step's calls before its timed runs
RAW_RUNS = 2  # timed runs of the raw step before, between and after fit's
RAW_ROUNDS = 2  # fit's one-batch runs, each between raw runs
# A step on your data under this share of the step alone (fit's on one batch) is no whole step.
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
    """The training step of `target` taken apart: a recipe's Task (with `config`), or your
    compiled Keras model with its batched `data` in any form ``fit`` takes (its weights and
    optimizer state are put back afterwards).

    Args:
        target: a ``toolkit.Task`` or your compiled model.
        data: your model's data (None for a Task).
        steps: training steps traced (more: steadier figures, a longer trace).
        config: a TrainConfig (batch size, device, settings); default: the defaults.
        raw: also time the step written without Keras's trainer (Keras's own cost).
        layers: names of layers to time alone besides the trace's slowest three (as
            ``model.summary()`` names them; ``outer/inner`` inside a nested model).
        check: time the layers alone and reconcile to the untraced step (False: the trace's
            own split, seconds sooner).

    Returns:
        a :class:`toolkit.core._anatomy.Anatomy` (``print(toolkit.report.anatomy_lines(a))``
        or ``str``-free: render it with the report's functions); its ``error`` says why where
        the trace could not be taken (another profiler running): the rest is then empty.

    Every layer figure is checked: the trace's slowest three, the `layers` named and then
    every layer with weights as time allows are timed alone (``toolkit.profiling.
    layers_alone``), and the phases and layers are reconciled to the untraced step
    (``toolkit.core._anatomy.reconcile``): the milliseconds shown are the ones a fit without
    the profiler sees, each layer's the figure that holds.

    Raises:
        ConfigError: `steps` outside 2 to :data:`MAX_STEPS`;
            ``toolkit.runner.train.SetupError``: a target that cannot be measured (as
            diagnose and tune refuse it).
    """
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
        """`found` with Keras's own cost, the raw step against fit's step alone, and what
        your data costs the step, fit's step on it against fit's on one batch, timed in
        turn. Where no raw step can be taken (a model adding its own losses), the second
        is timed still: without it a JAX step's input held the trace's batch transfers,
        which the profiler slows (98.8 % of a 0.19 ms step)."""
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
        # The raw step is a floor: its fastest run, as a peak is the most a device did (the
        # runs just after a fit read up to 25 % slower, its caches still the fit's); fit's
        # figure is its faster round's median step.
        # Your data's step, timed in turn, is the untraced step too where it ran faster than
        # the traced fit's untraced steps: those follow the trace's stop, while the profiler
        # writes its trace on other threads (a JAX Conv1D read 3.8 ms slower there, and
        # reconcile put it in "other").
        fed, alone, theirs = [f for f in feds if f], min(fits), found.untraced_s
        if fed and theirs and theirs < WHOLE_STEP * alone:
            # no step on your data is faster than the step alone (a JAX step of 0.44 ms on
            # one batch read 0.08 ms in the traced fit's untraced steps): yours, timed in turn
            notes += (f"the traced fit's untraced steps read {format_ms(theirs)}, faster "
                      f"than fit's step on one batch alone ({format_ms(alone)}): not whole "
                      f"steps; fit's step on your data, timed in turn, stands",)  # fmt: skip
            theirs = None
        untraced = min([u for u in (theirs, *fed) if u], default=None)
        return dataclasses.replace(found, raw_s=min(raws, default=None), raw_how=how,
                                   fit_s=min(fits), fed_s=min(fed) if fed else None,
                                   untraced_s=untraced, notes=notes)  # fmt: skip

    def _in_turn(self, timed: Any) -> tuple[list[float], list[float], list[float]]:
        """Per step: the raw step's runs (none where `timed` is None), fit's on one batch
        and fit's on your data, each round in turn: a machine's slow spell falls on all."""
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
        """``fit``'s median step on one batch repeated, about as long as a raw run (with
        `candidate`'s settings: None, the target's own)."""
        return self.work.fit(
            candidate,
            steps=whole_calls(max(30, steps), per_call),
            warmup=DEFAULT_WARMUP_STEPS,
            one_batch=True,
        ).steps.p50_s

    def _fit_fed(self, steps: int, per_call: int) -> float | None:
        """``fit``'s median step on your data, as long as :meth:`_fit_alone`'s run and timed
        in turn with it: what the input adds to the step, under the same load."""
        return self.work.fit(
            steps=whole_calls(max(30, steps), per_call), warmup=DEFAULT_WARMUP_STEPS
        ).steps.p50_s

    def _with_other_fix(self, found: Anatomy, model: Any) -> Anatomy:
        """`found` with the fix for a large "other" named (fewer, larger ops: the backend's
        compiler, where the step is not compiled), its saving predicted (``other_gaps_s``)
        and, where "other" is large and the backend compiles in seconds (the ``jit_compile``
        values tune searches here), checked: ``fit``'s step with the fix applied, against
        `fit_s`, as tune would measure it. Nothing else of the anatomy changes."""
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
            # fit's own not timed yet (--no_raw): here, first, then in turn with the fix's
            # (a PyDataset's step read 2.3x its own in the fits after an XLA one)
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
        """One training batch as NumPy arrays (Keras's own reading of your data where the
        workload has it; the pipeline's first batch otherwise)."""
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
    """Whether the model's step is compiled (XLA on TensorFlow, ``jax.jit`` on JAX): its
    layers are timed alone the same way."""
    return getattr(model, "jit_compile", False) is True  # Keras resolves "auto" on reading
