"""Each layer timed alone: the anatomy's check of its own layer figures.

A trace's time for a layer can be far from what the layer costs: the profiler's own cost
falls on layers of many small ops, ops of other layers run beside its ops on other threads
(XLA's CPU runtime runs independent thunks at once), a fused program's time is split by a
rule, not a measurement. So the layers that matter (the trace's slowest, the ones a user
names, then every layer with weights, as time allows) are each timed alone through the
backend seam's ``layer_alone``: the same layer object, compiled as the model's step is
compiled, on inputs of the shapes its calls saw, forward and forward+backward. Layers of one
class, configuration and input shapes (a Transformer's blocks) cost the same: timed once.

:func:`toolkit.core._anatomy.reconcile` then shows, for each layer, the figure that holds.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from toolkit import backend
from toolkit.core._anatomy import Anatomy, LayerTime
from toolkit.core.errors import one_line
from toolkit.core.stats import warmed_calls

__all__ = ["time_alone"]  # check_layers is the anatomy's (toolkit.search.anatomy)

BUDGET_S = 8.0  # wall time for the checks past the first AT_LEAST layers
AT_LEAST = 3  # layers always checked (the trace's slowest), with any the user named
RUN_S = 0.03  # each timed run, at least
RUNS = 3  # timed runs, their median kept
WARM_S = 0.06  # calls before the timed runs, at least

Specs = tuple[tuple[tuple[int, ...], str], ...]


def time_alone(
    layer: Any,
    inputs: Specs,
    *,
    jit: bool,
    backward: bool = True,
    runs: int = RUNS,
    input_grads: bool = True,
) -> float:
    """Seconds of one call of `layer` alone (its forward, and with `backward` its gradients
    too: of its floating inputs as well unless `input_grads` is False, as for a whole model,
    whose step needs none of its data's), the median of `runs` timed runs after its compile
    (``layer_alone`` of the seam)."""
    seam = backend.get()
    timed = seam.layer_alone(layer, inputs, backward=backward, jit=jit, input_grads=input_grads)
    n = warmed_calls(timed, RUN_S, WARM_S, most=1000)
    return statistics.median(timed(n) / n for _ in range(max(1, runs)))


def check_layers(
    found: Anatomy,
    entries: Iterable[Any],
    *,
    batch: int | None,
    jit: bool,
    names: Sequence[str] = (),
    budget_s: float = BUDGET_S,
    clock: Callable[[], float] = time.perf_counter,
    timer: Callable[..., float] = time_alone,
) -> Anatomy:
    """`found` with its layers timed alone (``LayerTime.alone_s``, ``alone_forward_s``), or
    in ``check`` why one was not. `entries`: the scopes' ``LayerEntry`` records (the layer
    objects and the shapes their calls saw); `batch`: the batch size, for a dimension a
    traced graph left open; `jit`: the model's ``jit_compile``. Never raises for a layer: a
    layer that cannot be called alone says why."""
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
        key = _signature(entry.layer, specs)
        if key not in done:
            try:
                forward = timer(entry.layer, specs, jit=jit, backward=False)
                both = timer(entry.layer, specs, jit=jit, backward=True)
                done[key] = (forward, max(both, forward))
            except Exception as e:  # noqa: BLE001 - a layer that will not run alone says so
                done[key] = f"not timed alone: {one_line(e)}"
        got = done[key]
        if isinstance(got, str):
            out[x.name] = dataclasses.replace(x, check=got)
        else:
            calls = max(1, x.calls)
            out[x.name] = dataclasses.replace(
                x, alone_s=got[1] * calls, alone_forward_s=got[0] * calls,
                alone_with_held=any(n.startswith(x.name + "/") for n in held),
            )  # fmt: skip
    missing = [n for n in names if n not in held]
    notes = found.notes
    if missing:
        notes = (*notes, f"no layer named {', '.join(missing)} ran in the traced steps")
    return dataclasses.replace(
        found, layers=tuple(out.get(x.name, x) for x in found.layers), notes=notes
    )


def check_model(
    found: Anatomy,
    model: Any,
    inputs: Any,
    *,
    calls: int,
    batch: int | None,
    jit: bool,
    timer: Callable[..., float] = time_alone,
) -> Anatomy:
    """`found` with the whole model timed alone (``Anatomy.model_alone_s``, forward and its
    gradients; ``model_alone_forward_s``, forward alone), the check of its forward and
    backward phases: a trace splits the model's work by scopes, and where its ops run beside
    each other (XLA's CPU runtime) or in one fusion, its forward/backward split is a rule's,
    not a measurement. `inputs`: the specs of the model's own call (``Scopes.model_inputs``);
    `calls`: how often the step called the model (a custom ``train_step`` may call only
    models it holds). Where it cannot be timed, a note says why."""
    if found.error or model is None:
        return found
    if calls < 1:
        why = "the step never called the model itself (a custom train_step)"
    elif not inputs:
        why = "its call takes more than one tensor (a dict or list of inputs)"
    else:
        why, specs = _why_not(_Called(model, inputs), batch)
    if not why:
        try:
            forward = timer(model, specs, jit=jit, backward=False, input_grads=False)
            both = timer(model, specs, jit=jit, backward=True, input_grads=False)
        except Exception as e:  # noqa: BLE001 - a model that will not run alone says so
            why = one_line(e)
    if why:
        note = f"forward and backward not checked against the model timed alone: {why}"
        return dataclasses.replace(found, notes=(*found.notes, note))
    return dataclasses.replace(
        found, model_alone_s=max(both, forward), model_alone_forward_s=forward
    )


@dataclasses.dataclass(frozen=True)
class _Called:
    """A layer and the specs of its call, as a scope's ``LayerEntry`` holds them."""

    layer: Any
    inputs: Any


def _order(
    layers: Sequence[LayerTime], by_name: Mapping[str, Any], names: Sequence[str]
) -> list[LayerTime]:
    """The trace's slowest AT_LEAST, the named, then layers with weights (most FLOPs, then
    slowest traced), then the rest, slowest first."""
    ranked = sorted(layers, key=lambda x: x.seconds, reverse=True)
    first = ranked[:AT_LEAST] + [x for x in ranked[AT_LEAST:] if x.name in names]
    rest = [x for x in ranked if x not in first]

    def weighted(x: LayerTime) -> bool:
        entry = by_name.get(x.name)
        return bool(entry is not None and getattr(entry.layer, "weights", None))

    rest.sort(key=lambda x: (not weighted(x), -(x.flops or 0.0), -x.seconds))
    return first + rest


def _why_not(entry: Any, batch: int | None) -> tuple[str, Specs]:
    """Why `entry`'s layer cannot be timed alone (empty: it can), and its inputs' specs. A
    layer holding others is timed with them (``LayerTime.alone_with_held``)."""
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
