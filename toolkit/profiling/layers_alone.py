"""Each layer timed alone: the anatomy's check of its own layer figures.

A trace's time for a layer can be far from its cost: the profiler's cost falls on layers of many
small ops, other layers' ops run beside it (XLA's CPU runtime), a fused program's time is split by a
rule. So the layers that matter are timed alone (the seam's ``layer_alone``), compiled as the step
is, on their calls' input shapes; :func:`toolkit.core._anatomy.reconcile` shows what holds."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from toolkit import backend
from toolkit.core._anatomy import Anatomy, LayerTime
from toolkit.core.compat import own_method
from toolkit.core.errors import one_line
from toolkit.core.stats import warmed_calls

_STEP = ("train_step", "compute_loss")  # a model's own: its step is more than its call

__all__ = ["time_alone"]  # check_layers is the anatomy's (toolkit.search.anatomy)

BUDGET_S = 8.0  # wall time for the checks past the first AT_LEAST layers
AT_LEAST = 3  # layers always checked (the trace's slowest), with any the user named
RUN_S = 0.03  # each timed run, at least
RUNS = 3  # timed runs of each (forward; with backward), in turn, the fastest kept
WARM_S = 0.06  # calls before the timed runs, at least

Specs = tuple[tuple[tuple[int, ...], str], ...]


@dataclasses.dataclass(frozen=True)
class Alone:
    """One call timed alone: forward, and forward with gradients, each the fastest run."""

    forward_s: float
    both_s: float


def time_alone(
    layer: Any,
    inputs: Specs,
    *,
    jit: bool,
    runs: int = RUNS,
    input_grads: bool = True,
) -> Alone:
    """One call of `layer` alone (the seam's ``layer_alone``, after its compile): forward, and with
    gradients (of its floating inputs too unless `input_grads` is False). Timed in turn, `runs`
    each, keeping the fastest: a loaded machine's slow spell then falls on both."""
    seam = backend.get()
    forward = seam.layer_alone(layer, inputs, backward=False, jit=jit, input_grads=input_grads)
    both = seam.layer_alone(layer, inputs, backward=True, jit=jit, input_grads=input_grads)
    n_forward = warmed_calls(forward, RUN_S, WARM_S, most=1000)
    n_both = warmed_calls(both, RUN_S, WARM_S, most=1000)
    forwards: list[float] = []
    boths: list[float] = []
    for _ in range(max(1, runs)):
        forwards.append(forward(n_forward) / n_forward)
        boths.append(both(n_both) / n_both)
    return Alone(forward_s=min(forwards), both_s=max(min(boths), min(forwards)))


def check_layers(
    found: Anatomy,
    entries: Iterable[Any],
    *,
    batch: int | None,
    jit: bool,
    names: Sequence[str] = (),
    budget_s: float = BUDGET_S,
    clock: Callable[[], float] = time.perf_counter,
    timer: Callable[..., Alone] = time_alone,
    data_fed: Collection[int] = (),
) -> Anatomy:
    """`found` with its layers timed alone, or in ``check`` why not (never raises for a layer).
    `entries`: the scopes' ``LayerEntry`` records; `batch`: for an open batch dimension;
    `data_fed`: layers on the model's inputs only, timed without their inputs' gradients."""
    by_name = {e.name: e for e in entries}
    if found.error or not found.layers:
        return found
    held = {x.name for x in found.layers}
    done: dict[str, tuple[float, float] | str] = {}  # signature -> (forward, both) or why
    out: dict[str, LayerTime] = {}
    began = clock()
    for i, x in enumerate(_order(found.layers, by_name, names)):
        entry = by_name.get(x.name)
        late = clock() - began > budget_s
        if late and i >= AT_LEAST and x.name not in names:
            out[x.name] = dataclasses.replace(
                x, check=f"not timed alone: the checks' {budget_s:.0f} s ran out"
            )
            continue
        why, specs = _why_not(entry, batch)
        if why:
            out[x.name] = dataclasses.replace(x, check=f"not timed alone: {why}")
            continue
        grads = id(entry.layer) not in data_fed
        key = f"{_signature(entry.layer, specs)}|{grads}"
        if key not in done:
            try:
                alone = timer(entry.layer, specs, jit=jit, input_grads=grads)
                done[key] = (alone.forward_s, alone.both_s)
            except Exception as e:  # noqa: BLE001 - a layer that will not run alone says so
                done[key] = f"not timed alone: {_failed_alone(e)}"
        got = done[key]
        out[x.name] = (
            dataclasses.replace(x, check=got) if isinstance(got, str) else _timed(x, *got, held)
        )
    missing = [n for n in names if n not in held]
    notes = found.notes
    if missing:
        notes = (*notes, f"no layer named {', '.join(missing)} ran in the traced steps")
    return dataclasses.replace(
        found, layers=tuple(out.get(x.name, x) for x in found.layers), notes=notes
    )


def _timed(x: LayerTime, forward_s: float, both_s: float, held: set[str]) -> LayerTime:
    """`x` with its calls timed alone: a backward only for the calls a gradient went through."""
    calls = max(1, x.calls)
    # A forward no faster than with gradients is noise: its total stands, its split is the trace's
    forward = forward_s * calls if forward_s < both_s else None
    both = both_s * calls
    if forward is not None and x.backward_calls is not None:  # a call took no gradient
        both = forward + (both_s - forward_s) * x.backward_calls
    return dataclasses.replace(
        x, alone_s=both, alone_forward_s=forward,
        alone_with_held=any(n.startswith(x.name + "/") for n in held),
    )  # fmt: skip


def check_model(
    found: Anatomy,
    model: Any,
    inputs: Any,
    *,
    calls: int,
    batch: int | None,
    jit: bool,
    timer: Callable[..., Alone] = time_alone,
) -> Anatomy:
    """`found` with the whole model timed alone, checking the trace's forward/backward split (a
    rule's where ops overlap or fuse), else a note why; `calls`: how often the step called it."""
    if found.error or model is None:
        return found
    own = [f"{k.__name__}.{m}" for m in _STEP for k in [own_method(model, m)] if k is not None]
    if calls < 1:
        why = "the step never called the model itself (a custom train_step)"
    elif own:  # a Distiller's teacher runs in its compute_loss: not the model's call
        why = f"its step does more than call it (its own {' and '.join(own)})"
    elif not inputs:
        why = "its call takes more than one tensor (a dict or list of inputs)"
    else:
        why, specs = _why_not(_Called(model, inputs), batch)
    if not why:
        try:
            alone = timer(model, specs, jit=jit, input_grads=False)
        except Exception as e:  # noqa: BLE001 - a model that will not run alone says so
            why = _failed_alone(e)
        else:
            if alone.both_s <= alone.forward_s:  # a trained model's backward is never free
                why = ("its forward alone read no faster than with its gradients (a noisy "
                       "machine): the trace's split is kept")  # fmt: skip
    if why:
        note = f"forward and backward not checked against the model timed alone: {why}"
        return dataclasses.replace(found, notes=(*found.notes, note))
    return dataclasses.replace(
        found, model_alone_s=alone.both_s, model_alone_forward_s=alone.forward_s
    )


def fed_by_data(model: Any) -> frozenset[int]:
    """Ids of `model`'s (and nested models') layers whose inputs depend on no trainable weight, so
    timed and counted without their inputs' gradient; empty where the model keeps no graph."""
    out: set[int] = set()
    try:
        _no_input_gradient(model, out)
    except Exception:  # noqa: BLE001 - no graph to read: every layer with its inputs' grads
        return frozenset()
    return frozenset(out)


def _no_input_gradient(model: Any, out: set[int]) -> None:
    """Adds the layers of `model`'s graph whose inputs carry no gradient (``_keras_history``)."""
    graph = getattr(model, "_functional", None) or model  # Keras 3's Sequential
    inputs = {id(t) for t in (graph.inputs or ())}
    carried: dict[int, bool] = {}

    def carries(tensor: Any) -> bool:
        key = id(tensor)
        if key in inputs:
            return False
        if key not in carried:
            history = getattr(tensor, "_keras_history", None)
            if history is None:  # not a graph's tensor: as if it did
                return True
            maker, node = history[0], history[1]
            if type(maker).__name__ == "InputLayer":
                carried[key] = False
            elif maker.trainable_weights:
                carried[key] = True
            else:
                made_of = _node_inputs(maker._inbound_nodes[node])
                carried[key] = any(carries(t) for t in made_of)
        return carried[key]

    for layer in graph.layers:
        if type(layer).__name__ == "InputLayer":  # tf_keras's is its own input's node
            continue
        nodes = list(getattr(layer, "_inbound_nodes", None) or ())
        tensors = [t for n in nodes for t in _node_inputs(n)]
        if nodes and tensors and not any(carries(t) for t in tensors):
            out.add(id(layer))
            if hasattr(layer, "layers"):  # a nested model fed so: its layers too
                with contextlib.suppress(Exception):
                    _no_input_gradient(layer, out)


def _node_inputs(node: Any) -> list[Any]:
    """The tensors a graph node's call took (``input_tensors``, or tf_keras's ``keras_inputs``)."""
    found = getattr(node, "input_tensors", None)
    if found is None:
        found = getattr(node, "keras_inputs", None)
    if found is None:
        return []
    return list(found) if isinstance(found, list | tuple) else [found]


@dataclasses.dataclass(frozen=True)
class _Called:
    """A layer and the specs of its call, as a scope's ``LayerEntry`` holds them."""

    layer: Any
    inputs: Any


def _order(
    layers: Sequence[LayerTime], by_name: Mapping[str, Any], names: Sequence[str]
) -> list[LayerTime]:
    """The trace's slowest AT_LEAST, the named, weighted layers (FLOPs, then slowest), the rest."""
    ranked = sorted(layers, key=lambda x: x.seconds, reverse=True)
    first = ranked[:AT_LEAST] + [x for x in ranked[AT_LEAST:] if x.name in names]
    rest = [x for x in ranked if x not in first]

    def weighted(x: LayerTime) -> bool:
        entry = by_name.get(x.name)
        return bool(entry is not None and getattr(entry.layer, "weights", None))

    rest.sort(key=lambda x: (not weighted(x), -(x.flops or 0.0), -x.seconds))
    return first + rest


def _failed_alone(error: Exception) -> str:
    """Why a run alone failed, in one line (TensorFlow's runtime errors: type and first words)."""
    if not type(error).__module__.startswith("tensorflow.python.framework.errors"):
        return one_line(error)
    words = str(getattr(error, "message", "") or error).split()
    said = " ".join(w for w in words[:8] if len(w) <= 40)
    return f"TensorFlow's runtime failed to run it ({type(error).__name__}: {said} ...)"


def _why_not(entry: Any, batch: int | None) -> tuple[str, Specs]:
    """Why `entry`'s layer cannot be timed alone (empty: it can), and its inputs' specs."""
    if entry is None or entry.layer is None:
        return "the scopes did not hold it", ()
    if not entry.inputs:
        return "its call takes more than tensors", ()
    specs = []
    for shape, dtype in entry.inputs:
        dims = [batch if (d is None and j == 0) else d for j, d in enumerate(shape)]
        if any(d is None for d in dims):
            return "its input's shape is not fixed", ()
        specs.append((tuple(int(d) for d in dims), dtype))
    return "", tuple(specs)


def _signature(layer: Any, specs: Specs) -> str:
    """Layers of one class, configuration (less their names) and inputs cost the same."""
    try:
        config = dict(layer.get_config())
        config.pop("name", None)
        text = json.dumps(config, sort_keys=True, default=str)
    except Exception:  # noqa: BLE001 - no config: this layer alone
        text = f"id:{id(layer)}"
    return f"{type(layer).__module__}.{type(layer).__qualname__}|{text}|{specs}"
