"""The step's anatomy, measured: scope tokens around a model's layers and phases, a short trace
window, and the sweep that turns the trace into seconds per phase and per layer.

1. :class:`Scopes` wraps each layer's ``call``, the loss, metrics, optimizer ``apply`` and step in
a token scope (``kpl<N>``; a name could be uniquified, collide, or be shared by two models).
2. ``TraceWindow`` traces a few steps in step markers, syncing the device at both ends only.
3. The seam's ``anatomy_trace`` reads the trace into :class:`~toolkit.core._anatomy.Span`\\ s.
4. :func:`sweep` shares the window among phases and layers, checked against the outside clock."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from toolkit import backend
from toolkit.core import compat
from toolkit.core._anatomy import (
    Anatomy,
    LayerTime,
    Phase,
    PhaseTime,
    Span,
    SpanKind,
    StepTrace,
)
from toolkit.core._trace_events import layer_token
from toolkit.core.events import FUSED_STEPS_ATTR
from toolkit.profiling.layers_alone import fed_by_data
from toolkit.profiling.step_timer import fit_input
from toolkit.profiling.trace_window import TraceWindow

__all__: list[str] = []  # toolkit.anatomy is the API; AnatomyWindow, for your own fit

Key = tuple[Phase, str | None, bool]  # (phase, layer token or None, fused)
BETWEEN_OPS = "between ops"  # other's key where no op ran, the host inside the step's call
_ABSENT = object()


@dataclasses.dataclass
class LayerEntry:
    """One layer the scopes wrap: token, ``model.summary()`` name, class, and what its calls saw."""

    token: str
    name: str
    kind: str
    calls: int = 0
    outside: int = 0  # of those, calls outside the model's own call (a compute_loss's)
    flops: float | None = None  # forward FLOPs of one call, from the shapes it saw
    # (shape, dtype) per positional argument of its first call; None: one was not a tensor.
    inputs: tuple[tuple[tuple[int | None, ...], str], ...] | None = None
    layer: Any = dataclasses.field(default=None, repr=False)  # the layer, to time it alone
    holds_layers: bool = False  # a layer of layers: the trace gives it its own glue only


def _children(layer: Any) -> list[Any]:
    try:
        return list(layer._flatten_layers(include_self=False, recursive=False))
    except (AttributeError, TypeError):
        return list(getattr(layer, "layers", ()))


def _batched(tensor: Any, batch: int | None) -> tuple[Any, ...]:
    """`tensor`'s shape, its open batch dimension (a traced graph's) read as `batch`."""
    shape = tuple(getattr(tensor, "shape", ()) or ())
    return (batch, *shape[1:]) if shape and shape[0] is None and batch else shape


def _forward_flops(layer: Any, inputs: Any, output: Any, batch: int | None = None) -> float | None:
    """Forward FLOPs of one call of a layer whose count is plain (a dense or convolutional
    product), from this call's shapes; None for the rest. An open batch dimension is `batch`."""
    kernel = getattr(layer, "kernel", None)
    recurrent = getattr(layer, "recurrent_kernel", None)
    if kernel is not None and recurrent is not None:
        return _time_step_flops(kernel, recurrent, _batched(inputs, batch))
    cell = getattr(layer, "cell", None)
    if getattr(cell, "kernel", None) is not None and hasattr(cell, "recurrent_kernel"):
        seq = _batched(inputs, batch)  # an RNN run as one fused op, cell never called: all steps
        if len(seq) == 3 and seq[1] is None:  # an open time dimension: the model's own
            seq = (seq[0], _declared_time_steps(layer) or None, seq[2])
        if len(seq) != 3 or seq[1] is None:
            return None
        step = _time_step_flops(cell.kernel, cell.recurrent_kernel, (seq[0], seq[2]))
        return None if step is None else seq[1] * step
    out_shape = _batched(output, batch)
    if not out_shape or any(d is None for d in out_shape):
        return None
    kind = type(layer).__name__
    if kind.startswith(("Depthwise", "Separable")):
        return _depthwise_flops(layer, out_shape)
    if kernel is None:
        return None
    k_shape = tuple(int(d) for d in kernel.shape)
    if kind == "Dense" and len(k_shape) == 2:
        return 2.0 * math.prod(out_shape[:-1]) * k_shape[0] * k_shape[1]
    if kind == "EinsumDense":  # each output element sums over the kernel's axes the output lacks
        inputs_spec, _, out_spec = str(getattr(layer, "equation", "")).partition("->")
        kernel_spec = inputs_spec.partition(",")[2]
        if not out_spec or len(kernel_spec) != len(k_shape):
            return None
        summed = math.prod(
            d for c, d in zip(kernel_spec, k_shape, strict=True) if c not in out_spec
        )
        return 2.0 * math.prod(out_shape) * summed
    if kind.startswith("Conv") and kind.endswith("Transpose") and len(k_shape) >= 3:
        # kernel (window..., filters, input channels): each input element spreads over each filter
        in_shape = _batched(inputs, batch)
        if not in_shape or any(d is None for d in in_shape):
            return None
        positions = _positions(layer, in_shape)
        return 2.0 * positions * math.prod(k_shape[:-2]) * k_shape[-2] * k_shape[-1]
    if kind.startswith("Conv") and "Transpose" not in kind and len(k_shape) >= 3:
        positions = _positions(layer, out_shape)  # kernel (window..., channels/group, filters)
        return 2.0 * positions * math.prod(k_shape[:-1]) * k_shape[-1]
    return None


def _positions(layer: Any, shape: tuple[Any, ...]) -> int:
    """The positions a convolution's `shape` holds: every dimension but the channels'."""
    if getattr(layer, "data_format", "channels_last") == "channels_first":
        return math.prod(shape[:1] + shape[2:])
    return math.prod(shape[:-1])


def _depthwise_flops(layer: Any, out_shape: tuple[Any, ...]) -> float | None:
    """Depthwise: one window of one input channel per output; separable adds its ``1×1`` product."""
    depthwise = getattr(layer, "depthwise_kernel", None)
    depthwise = getattr(layer, "kernel", None) if depthwise is None else depthwise
    pointwise = getattr(layer, "pointwise_kernel", None)
    if depthwise is None or len(depthwise.shape) < 3:
        return None
    positions = _positions(layer, out_shape)
    products = math.prod(int(d) for d in depthwise.shape)
    if pointwise is not None:
        products += math.prod(int(d) for d in pointwise.shape)
    return 2.0 * positions * products


def _time_step_flops(kernel: Any, recurrent: Any, in_shape: tuple[Any, ...]) -> float | None:
    """One time step of a recurrent cell: input and carried state times their kernels, all gates
    (not element-wise work); its calls per step are the time steps. A convolutional cell: None."""
    k_shape = tuple(int(d) for d in kernel.shape)
    r_shape = tuple(int(d) for d in recurrent.shape)
    if len(in_shape) != 2 or in_shape[0] is None or len(k_shape) != 2 or len(r_shape) != 2:
        return None
    return 2.0 * in_shape[0] * (k_shape[0] * k_shape[1] + r_shape[0] * r_shape[1])


class Scopes:
    """Scope tokens around `model`'s layers and phases while open; ``entries``: token to entry."""

    # tf_keras spells the loss compute_loss and the optimizer's update apply_gradients
    PHASE_METHODS = (("_compute_loss", "kploss"), ("compute_loss", "kploss"),
                     ("compute_metrics", "kpmetrics"), ("train_step", "kpstep"))  # fmt: skip
    OPTIMIZER_METHODS = ("apply", "apply_gradients")

    def __init__(self, model: Any, batch: int | None = None) -> None:
        self.model = model
        self.batch = batch  # examples a step: a traced graph's open batch dimension
        self.entries: dict[str, LayerEntry] = {}
        self.model_calls = 0
        self.step_calls = 0  # traces of the model's train_step (its calls, as Python sees them)
        self._in_model = 0  # how deep inside the model's own call a layer's call is
        # the model's own inputs' specs, as LayerEntry.inputs: to time the whole model alone
        self.model_inputs: tuple[tuple[tuple[int | None, ...], str], ...] | None = None
        self._undo: list[tuple[Any, str, Any]] = []
        self._seam = backend.get()

    def _layers(self) -> Iterator[tuple[Any, str]]:
        seen: set[int] = set()

        def walk(layer: Any, prefix: str) -> Iterator[tuple[Any, str]]:
            for child in _children(layer):
                if id(child) in seen or type(child).__name__ == "InputLayer":
                    continue
                seen.add(id(child))
                name = f"{prefix}{child.name}"
                yield child, name
                yield from walk(child, f"{name}/")

        yield from walk(self.model, "")

    def _patch(self, owner: Any, attr: str, replacement: Any) -> None:
        # Past Keras's attribute tracking; undone on exit to what the instance held before.
        self._undo.append((owner, attr, owner.__dict__.get(attr, _ABSENT)))
        owner.__dict__[attr] = replacement

    def _scoped_call(self, layer: Any, entry: LayerEntry | None, token: str) -> Any:
        original = layer.call
        scope = self._seam.layer_scope

        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if entry is None:
                self.model_calls += 1
                if self.model_calls == 1:
                    self.model_inputs = _specs(args)
            else:
                entry.calls += 1
                entry.outside += not self._in_model
            self._in_model += entry is None
            try:
                with scope(token):
                    out = original(*args, **kwargs)
            finally:
                self._in_model -= entry is None
            if entry is not None and entry.flops is None:
                with contextlib.suppress(Exception):  # a count is a nicety
                    entry.flops = _forward_flops(layer, args[0] if args else None, out, self.batch)
            if entry is not None and entry.calls == 1:
                entry.inputs = _specs(args)
            return out

        return call

    def _scoped_method(self, owner: Any, name: str, token: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        scope = self._seam.layer_scope

        @functools.wraps(original)
        def method(*args: Any, **kwargs: Any) -> Any:
            self.step_calls += name == "train_step" and owner is self.model
            with scope(token):
                return original(*args, **kwargs)

        self._patch(owner, name, method)

    def __enter__(self) -> Scopes:
        try:
            for i, (layer, name) in enumerate(self._layers()):
                token = f"kpl{i}"
                entry = LayerEntry(token, name, type(layer).__name__, layer=layer,
                                   holds_layers=bool(_children(layer)))  # fmt: skip
                self.entries[token] = entry
                self._patch(layer, "call", self._scoped_call(layer, entry, token))
            self._patch(self.model, "call", self._scoped_call(self.model, None, "kpmodel"))
            for name, token in self.PHASE_METHODS:
                self._scoped_method(self.model, name, token)
            for optimizer in _optimizers(self.model):
                for name in self.OPTIMIZER_METHODS:
                    self._scoped_method(optimizer, name, "kpopt")
            _rebuild(self.model)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        while self._undo:
            owner, attr, before = self._undo.pop()
            if before is _ABSENT:
                owner.__dict__.pop(attr, None)
            else:
                owner.__dict__[attr] = before
        _rebuild(self.model)

    def calls_per_step(self, token: str) -> int:
        """How many times a forward pass calls the layer (2: shared). A step of your own calling it
        also outside the model (keras.io's VAE) runs it the more of the two ways, not both; a step
        never calling the model (keras.io's GAN) is counted by its own traces."""
        entry = self.entries[token]
        traced = self.model_calls or self.step_calls
        if not traced:
            return 1
        rnn = self._rnn_of(entry)
        if rnn is not None:  # a recurrent layer's cell: once a time step, in a compiled loop
            return self.calls_per_step(rnn.token) * _time_steps(rnn)
        most = max(entry.calls - entry.outside, entry.outside)
        return max(1, round(most / traced))

    def cell_called(self, entry: LayerEntry) -> bool:
        """Whether `entry` is a recurrent layer whose cell was called, not one fused op."""
        cell = getattr(entry.layer, "cell", None)
        return cell is not None and any(e.layer is cell and e.calls for e in self.entries.values())

    def _rnn_of(self, entry: LayerEntry) -> LayerEntry | None:
        """The recurrent layer whose cell `entry` is, where its time steps are known (Python calls a
        cell once per trace of the loop; the compiled loop, once a time step)."""
        outer = entry.name.rpartition("/")[0]
        parent = (
            next((e for e in self.entries.values() if e.name == outer), None) if outer else None
        )
        if parent is None or getattr(parent.layer, "cell", None) is not entry.layer:
            return None
        return parent if _time_steps(parent) else None


def _time_steps(rnn: LayerEntry) -> int:
    """An RNN's input ``(batch, time, features)`` time steps, as seen or declared; else 0."""
    shape = rnn.inputs[0][0] if rnn.inputs else ()
    if len(shape) >= 3 and shape[1]:
        return int(shape[1])
    return _declared_time_steps(rnn.layer)


def _declared_time_steps(layer: Any) -> int:
    """The time steps `layer`'s input has in the functional graph; 0 where none or open."""
    try:
        declared = tuple(layer.input.shape)
    except (AttributeError, ValueError, TypeError):
        return 0
    return int(declared[1] or 0) if len(declared) >= 3 else 0


def _specs(args: Sequence[Any]) -> tuple[tuple[tuple[int | None, ...], str], ...] | None:
    """``(shape, dtype)`` of each positional argument; None where one is not a tensor."""
    out = []
    for x in args:
        try:
            shape = tuple(None if d is None else int(d) for d in x.shape)
        except (AttributeError, TypeError, ValueError):
            return None
        dtype = getattr(x, "dtype", None)
        out.append((shape, str(getattr(dtype, "name", dtype)).removeprefix("torch.")))
    return tuple(out) or None


def _optimizers(model: Any) -> list[Any]:
    """The model's optimizer and any other it holds (a GAN compiles two of its own)."""
    found: dict[int, Any] = {}
    for value in (getattr(model, "optimizer", None), *vars(model).values()):
        if (
            value is not None
            and callable(getattr(value, "apply_gradients", None))
            and hasattr(value, "learning_rate")
        ):
            found.setdefault(id(value), value)
    return list(found.values())


def _rebuild(model: Any) -> None:
    """Lets Keras build the model's step functions again at the next fit."""
    for attr in ("train_function", "test_function", "predict_function"):
        if hasattr(model, attr):
            with contextlib.suppress(AttributeError):
                setattr(model, attr, None)


# ---------------------------------------------------------------------------- the sweep


def _key(span: Span) -> Key:
    layer = layer_token(span.tokens)
    tokens = set(span.tokens)
    if "kpopt" in tokens:
        return Phase.OPTIMIZER, None, False
    if span.backward:
        return Phase.BACKWARD, layer, span.fused
    if layer is not None:  # a layer called inside the loss (keras.io's Distiller's teacher)
        return Phase.FORWARD, layer, span.fused
    if tokens & {"kploss", "kpmetrics"}:
        return Phase.METRICS, None, False
    if "kpmodel" in tokens:
        return Phase.FORWARD, None, False  # the model's own glue between its layers
    return Phase.OTHER, None, False


def sweep(spans: Sequence[Span], start: float, end: float) -> dict[Key, float]:
    """Microseconds of ``[start, end]`` by ``(phase, layer token, fused)``, adding up to the span:
    the computing ops share each instant (equal per lane); where none computes, input, then the
    host inside a call (its innermost scope's, or other), then Keras between steps."""
    points: list[tuple[float, int, int]] = []
    for i, s in enumerate(spans):
        a, b = max(s.start, start), min(s.end, end)
        if b > a:
            points += [(a, 1, i), (b, -1, i)]
    points.sort(key=lambda p: (p[0], p[1]))
    out: dict[Key, float] = collections.defaultdict(float)
    ops: dict[str, set[int]] = collections.defaultdict(set)
    waiting = 0
    calls: list[int] = []  # the host inside a call or a scope range, innermost last
    t = start
    keys = [_key(s) for s in spans]

    def spend(dt: float) -> None:
        lanes = [lane for lane, held in ops.items() if held]
        if lanes:
            for lane in lanes:
                held = ops[lane]
                for i in held:
                    out[keys[i]] += dt / len(lanes) / len(held)  # type: ignore[index]
        elif waiting:
            out[(Phase.INPUT, None, False)] += dt
        elif calls:
            # the host's innermost range: a layer's call, a phase's method, or the step call (other)
            phase, layer, _ = keys[max(calls, key=lambda i: spans[i].start)]
            out[(phase, BETWEEN_OPS if phase == Phase.OTHER else layer, False)] += dt
        else:
            out[(Phase.HOST, None, False)] += dt

    for when, delta, i in points:
        if when > t:
            spend(when - t)
            t = when
        span = spans[i]
        if span.kind == SpanKind.OP:
            (ops[span.lane].add if delta > 0 else ops[span.lane].discard)(i)
        elif span.kind == SpanKind.INPUT:
            waiting += delta
        elif delta > 0:
            calls.append(i)
        else:
            calls.remove(i)
    if end > t:
        spend(end - t)
    return dict(out)


def window(trace: StepTrace) -> tuple[float, float] | None:
    """The traced steps on the trace's clock: first marker's start to the last marker's or op's end
    (the device was synced at both edges: every op after the first marker is the steps')."""
    if not trace.markers:
        return None
    start, end = trace.markers[0][0], trace.markers[-1][1]
    ops = (s.end for s in trace.spans if s.kind == SpanKind.OP and s.end > start)
    return start, max(end, max(ops, default=end))


def assemble(
    trace: StepTrace,
    scopes: Scopes,
    *,
    steps: int,
    outside_s: float,
    outside_steps: int | None = None,
    untraced_s: float | None = None,
    backend_name: str = "",
    device: str = "",
    notes: Sequence[str] = (),
) -> Anatomy:
    """The :class:`Anatomy` of a read trace, per step; `outside_s` covers `outside_steps` steps."""
    base = Anatomy(backend=backend_name, device=device, steps=steps, signal=trace.signal)
    span = window(trace)
    if trace.error and not trace.spans:
        return dataclasses.replace(base, error=trace.error)
    if span is None:
        return dataclasses.replace(base, error="the trace holds no step marker")
    if not any(s.kind == SpanKind.OP for s in trace.spans):
        return dataclasses.replace(base, error="the trace holds no op of the traced steps")
    per_step = 1e-6 / max(1, steps)  # microseconds in the window -> seconds per step
    spent = sweep(trace.spans, *span)
    by_phase: dict[Phase, float] = collections.defaultdict(float)
    forward: dict[str, float] = collections.defaultdict(float)
    backward: dict[str, float] = collections.defaultdict(float)
    fused: dict[str, float] = collections.defaultdict(float)
    fused_total = 0.0
    for (phase, layer, is_fused), us in spent.items():
        by_phase[phase] += us * per_step
        if layer is not None and layer in scopes.entries:
            (forward if phase == Phase.FORWARD else backward)[layer] += us * per_step
            if is_fused:
                fused[layer] += us * per_step
        if is_fused:
            fused_total += us * per_step
    unseen = _unseen(trace, by_phase)
    compiled = getattr(scopes.model, "jit_compile", False) is True
    notes = [*notes, *_unscoped(trace, compiled)]
    phases = tuple(PhaseTime(p, by_phase.get(p, 0.0), unseen.get(p, "")) for p in Phase)
    layers = _layer_rows(scopes, forward, backward, fused, _calls_seen(trace.spans))
    return dataclasses.replace(
        base,
        step_s=outside_s / max(1, outside_steps or steps),
        traced_s=(span[1] - span[0]) * per_step,
        untraced_s=untraced_s,
        phases=phases,
        layers=tuple(layers),
        fused_s=fused_total,
        notes=(*trace.notes, *notes),
        other_between_s=spent.get((Phase.OTHER, BETWEEN_OPS, False), 0.0) * per_step,
        ops_per_step=_ops_in(trace, span) / max(1, steps),
    )


def _layer_rows(
    scopes: Scopes,
    forward: Mapping[str, float],
    backward: Mapping[str, float],
    fused: Mapping[str, float],
    seen: Mapping[str, tuple[set[str], set[str]]],
) -> list[LayerTime]:
    """Each scoped layer the trace saw, its seconds per step, slowest first."""
    layers = []
    gradients = any(v > 0 for v in backward.values())  # the trace marks a gradient's ops
    on_data = fed_by_data(scopes.model)
    for token, entry in scopes.entries.items():
        f, b = forward.get(token, 0.0), backward.get(token, 0.0)
        if f + b <= 0:
            continue
        calls = scopes.calls_per_step(token)
        # none of its own: a layer with weights took one outside its scopes (Embedding's sparse one)
        none = gradients and b <= 0 and not getattr(entry.layer, "trainable_weights", None)
        back = _backward_calls(calls, *seen.get(token, (set(), set())), none)
        # forward + a backward per gradient: its weights' (if any train), input's (if any before)
        grads = bool(getattr(entry.layer, "trainable_weights", None)) + (
            id(entry.layer) not in on_data
        )
        flops = (
            entry.flops * (calls + grads * (calls if back is None else back))
            if entry.flops and not scopes.cell_called(entry)
            else None
        )
        layers.append(
            LayerTime(entry.name, entry.kind, f, b, calls, flops, fused.get(token, 0.0), back)
        )
    return sorted(layers, key=lambda x: x.seconds, reverse=True)


def _calls_seen(spans: Sequence[Span]) -> dict[str, tuple[set[str], set[str]]]:
    """Each layer token's calls told apart: those its forward ops ran in, and its gradient's."""
    seen: dict[str, tuple[set[str], set[str]]] = {}
    for s in spans:
        layer = layer_token(s.tokens)
        if s.call and layer is not None and s.kind == SpanKind.OP:
            seen.setdefault(layer, (set(), set()))[s.backward].add(s.call)
    return seen


def _backward_calls(
    calls: int, forward: set[str], backward: set[str], none: bool = False
) -> int | None:
    """How many of `calls` a gradient went through where its gradient ops cover fewer than its
    forward; 0: no gradient op of its own (a frozen teacher); None: all calls, or not told apart."""
    if none:  # no gradient op of its own: no call of it took one
        return 0
    if not forward or not backward or len(backward) >= len(forward):
        return None
    return max(1, round(calls * len(backward) / len(forward)))


def _ops_in(trace: StepTrace, span: tuple[float, float]) -> int:
    """The ops the trace ran in `span`, each once (a fused op's spans share its lane and start)."""
    return len({(s.lane, s.start) for s in trace.spans if s.kind == SpanKind.OP
                and s.end > span[0] and s.start < span[1]})  # fmt: skip


def _unscoped(trace: StepTrace, compiled: bool) -> list[str]:
    """Words where most of the ops' time carries no layer's scope: the step ran op by op, the
    compiled program's ops kept none, or the ops ran outside the layers' calls."""
    total = scoped = 0.0
    for s in trace.spans:
        if s.kind == SpanKind.OP:
            total += s.end - s.start
            scoped += (s.end - s.start) if s.tokens else 0.0
    if total <= 0 or scoped >= 0.5 * total:
        return []
    why = (
        "the compiled program's ops kept none (a gradient's ops, fusions across layers)"
        if compiled
        else "the step ran op by op (not compiled, or a layer that rules XLA out: an op "
        "compiled alone keeps no scope of its caller)"
    )
    return [
        f"{1 - scoped / total:.0%} of the ops' time carries no layer's scope: {why}, or its "
        "ops ran outside the layers' calls (a compute_loss or train_step of its own); that "
        "time stays in its phase where the trace gives one, else other, and no layer's row "
        "holds it"
    ]


def _unseen(trace: StepTrace, by_phase: dict[Phase, float]) -> dict[Phase, str]:
    """Words for the phases this trace cannot show where it shows none of them."""
    out = {}
    if by_phase.get(Phase.INPUT, 0.0) <= 0 and not any(
        s.kind == SpanKind.INPUT for s in trace.spans
    ):
        out[Phase.INPUT] = "no input event in this backend's trace: in Keras between steps"
    if by_phase.get(Phase.BACKWARD, 0.0) <= 0:
        out[Phase.BACKWARD] = "no gradient op marked in this trace"
    if by_phase.get(Phase.METRICS, 0.0) <= 0:  # a keras.io VAE's own train_step: its losses
        out[Phase.METRICS] = (
            "no op under Keras's loss or metric scopes (a train_step of your own computes "
            "them in its own code: their ops count in other, or in the layer that ran them)"
        )
    return out


# ---------------------------------------------------------------------------- the callback


class AnatomyWindow(TraceWindow):
    """A :class:`~toolkit.profiling.trace_window.TraceWindow` that also takes the step apart: scope
    tokens on at fit start (step functions rebuilt under them), off at its end; see :meth:`anatomy`.

    Args: as TraceWindow's; `stop_if_refused`: end the fit after a step if the backend refuses.

    Example: ``fit(..., callbacks=[StepTimer(), w := AnatomyWindow("logs")])``; ``w.anatomy()``."""

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        start_step: int = 6,
        stop_step: int | None = None,
        stop_if_refused: bool = False,
    ) -> None:
        super().__init__(logdir, start_step, stop_step)
        self.stop_if_refused = stop_if_refused
        self.scopes: Scopes | None = None
        self.scope_error: str | None = None
        self._input_mark: Any = None
        self.batch: int | None = None  # examples a step, as fit's data adapter says it

    def on_train_begin(self, logs: Any = None) -> None:
        super().on_train_begin(logs)
        self.batch = fit_input(self.model)[0]
        refused = backend.get().anatomy_refusal(self.model)
        if refused:  # said as the anatomy's error
            self.scope_error = refused
            if self.stop_if_refused:
                self.model.stop_training = True
            return
        try:
            self.scopes = Scopes(self.model, self.batch).__enter__()
            self.model.make_train_function(force=True)
            self._input_mark = backend.get().mark_input(self.model)
            self._input_mark.__enter__()
        except Exception as e:  # noqa: BLE001 - the fit goes on, the anatomy says why not
            self.scopes = None
            self.scope_error = f"the model's layers could not be scoped: {type(e).__name__}: {e}"

    def on_train_end(self, logs: Any = None) -> None:
        super().on_train_end(logs)
        if self._input_mark is not None:
            self._input_mark.__exit__(None, None, None)
            self._input_mark = None
        if self.scopes is not None:
            self.scopes.__exit__(None, None, None)

    def steps_per_marker(self) -> int:
        """Training steps in one marked call (``steps_per_execution``, fused steps)."""
        model = self.model
        return max(1, compat.steps_per_execution(model)) * max(
            1, int(getattr(model, FUSED_STEPS_ATTR, 1) or 1)
        )

    def anatomy(self, untraced_s: float | None = None, device: str = "") -> Anatomy:
        """The traced steps taken apart; `untraced_s`: the median step outside the window."""
        name = backend.name() if compat.keras_flavor() == "keras3" else "tf_keras"
        base = Anatomy(backend=name, device=device)
        if self.scope_error or self.scopes is None:
            return dataclasses.replace(base, error=self.scope_error or "the fit never began")
        if self.error:
            return dataclasses.replace(base, error=self.error)
        if self.traced_steps is None or self.began_at is None or self.ended_at is None:
            return dataclasses.replace(
                base, error="the fit ended before the trace window (too few steps)"
            )
        trace = backend.get().anatomy_trace(self.trace_files())
        per_marker = self.steps_per_marker()
        steps = len(trace.markers) * per_marker
        notes = []
        if per_marker > 1:
            notes.append(f"{per_marker} steps per marked call: its times are per step")
        start, stop = self.traced_steps
        if compat.keras_flavor() != "keras3":
            notes.append(
                "tf_keras marks its steps itself: the first traced step goes unmarked and "
                "each step's batch-end callbacks fall outside its marker, so the outside "
                "clock's step (its mean over every traced step) may be longer"
            )
        elif len(trace.markers) * per_marker != stop - start and trace.markers:
            notes.append(f"the trace marks {len(trace.markers)} calls of the {stop - start} "
                         "steps traced: its steps are the marked ones")  # fmt: skip
        taken = assemble(
            trace,
            self.scopes,
            steps=steps,
            outside_s=self.ended_at - self.began_at,
            outside_steps=stop - start,
            untraced_s=untraced_s,
            backend_name=name,
            device=device,
            notes=notes,
        )
        return dataclasses.replace(taken, batch=self.batch)
