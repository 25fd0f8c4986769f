"""The step's anatomy as records, from a backend's trace reader to the report and the verbs.

* :class:`Span`: one trace interval in backend-neutral terms; backend readers make them and
  ``toolkit.profiling.anatomy`` sweeps them into an :class:`Anatomy`.
* :class:`Anatomy`: one step split into :class:`Phase` parts and layers, with the outside clock and
  the raw step Keras's own cost is measured against.
* :class:`Contrast`: two anatomies side by side, largest differences first.

Pure Python; seconds per step everywhere."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core._advice import Advice
from toolkit.core.files import ReportError
from toolkit.core.stats import format_ms

# How far the phases' sum, and the trace's step, may be off the outside clock before it is said.
AGREEMENT = 0.05
# Most steps one anatomy traces: a trace holds every op in memory; ten give a steady median.
MAX_STEPS = 100
# How far a layer's traced time may be off it timed alone before the alone figure is shown.
BAND = 0.25
OTHER_LARGE = 0.25  # an "other" past this share of the step is taken apart, its fix checked
# Untraced steps slower than traced by more than this ran in a slower stretch of the fit.
UNTRACED_SLOWER = 0.40


class Phase(str, enum.Enum):
    """The parts of one training step, in the order a step runs them."""

    INPUT = "input"
    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    METRICS = "metrics and loss"
    HOST = "Keras between steps"
    OTHER = "other"

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    Phase.INPUT: "the batch reaching the step",
    Phase.FORWARD: "the layers' forward pass",
    Phase.BACKWARD: "the gradients",
    Phase.OPTIMIZER: "the optimizer's update of the weights",
    Phase.METRICS: "the loss and the metrics' bookkeeping",
    Phase.HOST: "Keras's trainer on the host between steps (callbacks, logs, data adapter)",
    Phase.OTHER: "what no signal attributes (dispatch, executor, idle waits)",
}


class SpanKind(str, enum.Enum):
    """What a trace interval is: computing work, the batch arriving, or the host in the step's
    call with nothing computing."""

    OP = "op"
    INPUT = "input"
    CALL = "call"


@dataclasses.dataclass(frozen=True)
class Span:
    """One interval of a trace, in microseconds on the trace's clock.

    Attributes:
        start, end: the interval.
        lane: the thread or device stream it ran on (one lane's spans do not overlap).
        kind: :class:`SpanKind`.
        tokens: the toolkit's scope tokens, outermost first.
        backward: a gradient computation, by the backend's own mark.
        fused: holds several tokens' work (XLA fusion), its time split between them.
        name: the backend's name for it.
        call: which call of its innermost layer it ran in, where scopes tell calls apart; else "".
    """

    start: float
    end: float
    lane: str
    kind: SpanKind
    tokens: tuple[str, ...] = ()
    backward: bool = False
    fused: bool = False
    name: str = ""
    call: str = ""


@dataclasses.dataclass(frozen=True)
class StepTrace:
    """What a backend's reader makes of a trace window (the seam's ``anatomy_trace``).

    Attributes:
        spans: every interval the sweep attributes.
        markers: ``(start, end)`` of each traced step's marker, in time order.
        signal, notes: how the signal was read, and what it cannot see or split.
        error: why nothing could be read, or None."""

    spans: tuple[Span, ...] = ()
    markers: tuple[tuple[float, float], ...] = ()
    signal: str = ""
    notes: tuple[str, ...] = ()
    error: str | None = None


def _per_step_s(value: Any, where: str) -> float:
    """Seconds per step: a number >= 0 that no training step passes (a day)."""
    fields.per_step(where, fields.number(where, value))
    return value


def _advice(value: Any, where: str) -> Advice | None:
    try:
        return Advice.from_dict(value) if value else None
    except ValueError:
        raise fields.bad(where, value, "advice: {text, tries} or null") from None


@dataclasses.dataclass(frozen=True)
class PhaseTime(fields.Record):
    """One phase of the step: seconds per step, and where the backend cannot see it, why."""

    phase: Phase
    seconds: float = fields.field(read=_per_step_s)
    unseen: str = ""  # words: why this backend's signal shows none of it here


@dataclasses.dataclass(frozen=True)
class LayerTime(fields.Record):
    """One Keras layer's share of a step (seconds per step).

    Attributes:
        name: as ``model.summary()`` names it (``outer/inner`` inside a nested model).
        kind: its class.
        forward_s, backward_s: its forward pass and its gradients, all calls together.
        calls: how many times a step calls it.
        backward_calls: of those, how many took a gradient, where fewer; None: every call.
        flops: FLOPs per step of forward and backward (None: not countable).
        fused_s: of its time, the seconds in fused programs shared with other layers.
        traced_forward_s, traced_backward_s: the trace's figures where :func:`reconcile` replaced
            them; else None.
        alone_s: its calls of one step timed alone; None where not timed (`check` says why).
        alone_forward_s: of `alone_s`, the forward; None where it read no faster (noise).
        alone_with_held: `alone_s` includes the layers it holds.
        held_traced_s: with `alone_with_held`, the trace's figure for those layers.
        check: why not timed alone, or why the trace is off the alone figure by more than
            :data:`BAND`; empty where they agree."""

    name: str
    kind: str = fields.field(missing="")
    forward_s: float = fields.field(read=_per_step_s)
    backward_s: float = fields.field(read=_per_step_s)
    calls: int = 1
    flops: float | None = None
    fused_s: float = 0.0
    backward_calls: int | None = None
    traced_forward_s: float | None = None
    traced_backward_s: float | None = None
    alone_s: float | None = None
    alone_forward_s: float | None = None
    alone_with_held: bool = False
    held_traced_s: float | None = None
    check: str = ""

    @property
    def seconds(self) -> float:
        return self.forward_s + self.backward_s

    @property
    def traced_s(self) -> float:
        """The trace's figure (the profiler's cost taken out where reconciled)."""
        if self.traced_forward_s is None or self.traced_backward_s is None:
            return self.seconds
        return self.traced_forward_s + self.traced_backward_s

    def against_alone(self) -> float | None:
        """The trace's figure over the layer timed alone (1.0: agree); None: not timed. A layer
        timed with those it holds: its figure and theirs."""
        if not self.alone_s or self.alone_s <= 0:
            return None
        return (self.traced_s + (self.held_traced_s or 0.0)) / self.alone_s

    def holds_alone(self) -> bool:
        """Whether the figure shown is the alone one (the trace's differed past the band)."""
        r = self.against_alone()
        return r is not None and abs(r - 1.0) > BAND

    def flop_rate(self) -> float | None:
        """Achieved FLOP/s (None: FLOPs not countable, or no time seen)."""
        if self.flops is None or self.seconds <= 0:
            return None
        return self.flops / self.seconds


@dataclasses.dataclass(frozen=True)
class Anatomy(fields.Record):
    """One training step taken apart (seconds per step).

    Attributes:
        backend: Keras's backend (or ``tf_keras``).
        device: what trained, in words.
        steps: training steps traced.
        batch: examples per step as ``fit``'s data adapter says (None: cannot say).
        step_s: the traced steps on the outside clock.
        traced_s: the same steps on the trace's own clock.
        untraced_s: the fit's median untraced step; None: not timed.
        phases: every :class:`Phase`, in order; reconciled, they add up to the untraced step, else
            to `traced_s`.
        traced_phases: the trace's own split where `phases` were reconciled; else empty.
        layers: the layers, slowest first.
        fused_s: seconds per step in fused programs holding several layers' work.
        signal: how it was measured, in words.
        notes: what the backend could not see or split (never guessed).
        raw_s: the model's step without Keras's trainer (`raw_how` says how); None: not measured.
        fit_s: ``fit``'s median step on one batch, the raw step's comparison.
        fed_s: ``fit``'s median step on your data, timed in turn with `fit_s`: the input's cost.
        model_alone_s, model_alone_forward_s: the whole model timed alone, with gradients and
            forward only.
        other_between_s: of "other", the host in the step's call with no op running; None: not
            split.
        ops_per_step: ops the trace saw per step.
        other_fix: advice for a large "other"; None: none.
        other_fixed_s: ``fit``'s one-batch step with `other_fix` applied; None: not measured.
        error: why the anatomy could not be taken, or None."""

    WHERE = "anatomy"

    backend: str
    device: str = ""
    steps: int = 0
    batch: int | None = None
    step_s: float = 0.0
    traced_s: float = 0.0
    untraced_s: float | None = None
    phases: tuple[PhaseTime, ...] = ()
    traced_phases: tuple[PhaseTime, ...] = ()
    layers: tuple[LayerTime, ...] = ()
    fused_s: float = 0.0
    signal: str = ""
    notes: tuple[str, ...] = ()
    raw_s: float | None = None
    raw_how: str = ""
    fit_s: float | None = None
    fed_s: float | None = None
    model_alone_s: float | None = None
    model_alone_forward_s: float | None = None
    other_between_s: float | None = None
    ops_per_step: float | None = None
    other_fix: Advice | None = fields.field(None, read=_advice)
    other_fixed_s: float | None = None
    error: str | None = None

    def phase(self, phase: Phase) -> float:
        """Seconds per step in `phase`."""
        return sum(p.seconds for p in self.phases if p.phase == phase)

    def phases_sum(self) -> float:
        return sum(p.seconds for p in self.phases)

    def traced_sum(self) -> float:
        """The trace's phases' sum: the traced step as the trace splits it."""
        return sum(p.seconds for p in self.traced_phases or self.phases)

    def traced_phase(self, phase: Phase) -> float:
        return sum(p.seconds for p in self.traced_phases or self.phases if p.phase == phase)

    def agreement(self) -> float | None:
        """The trace's phases' sum over the outside clock's step (1.0: they agree)."""
        if self.step_s <= 0:
            return None
        return self.traced_sum() / self.step_s

    def untraced_off(self) -> bool:
        """Whether the untraced step exceeds the traced by :data:`UNTRACED_SLOWER` (reconcile)."""
        return bool(self.untraced_s and self.step_s > 0
                    and self.untraced_s > self.step_s * (1 + UNTRACED_SLOWER))  # fmt: skip

    def shown_step_s(self) -> float:
        """The step the shown phases add up to: the untraced step where reconciled."""
        return self.phases_sum() or self.step_s

    def agrees(self) -> bool:
        a = self.agreement()
        return a is not None and abs(a - 1.0) <= AGREEMENT

    def trainer_cost(self) -> float | None:
        """What Keras's trainer adds per step over the raw step, as a fraction; None where not
        measured."""
        if not self.raw_s or not self.fit_s:
            return None
        return self.fit_s / self.raw_s - 1.0

    def other_large(self) -> bool:
        """Whether "other" is over :data:`OTHER_LARGE` of the shown step."""
        step = self.shown_step_s()
        return step > 0 and self.phase(Phase.OTHER) > OTHER_LARGE * step

    def other_gaps_s(self) -> float | None:
        """Of the shown "other", the host in the step with no op running: what :attr:`other_fix`
        is predicted to save. None: not split."""
        traced = self.traced_phase(Phase.OTHER)
        if self.other_between_s is None or traced <= 0:
            return None
        return self.phase(Phase.OTHER) * min(1.0, self.other_between_s / traced)

    def other_saving_checked(self) -> float | None:
        """The fix's measured saving a step (negative: it slowed the step); None: not measured."""
        if self.fit_s is None or self.other_fixed_s is None:
            return None
        return self.fit_s - self.other_fixed_s

    def other_fix_held(self) -> bool | None:
        """Whether the fix's check bore it out: True, saved more than :data:`SAME_STEP`; False,
        cost as much; None, noise or not measured."""
        saved = self.other_saving_checked()
        if saved is None or not self.fit_s or abs(saved) <= SAME_STEP * self.fit_s:
            return None
        return saved > 0

    def attributed_layers_s(self) -> float:
        return sum(layer.seconds for layer in self.layers)

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> Anatomy:
        """``report.json``'s ``anatomy``, each field checked: ReportError names the first bad
        one."""
        a = super().from_dict(d, where)
        if a.error is None:
            if d.get("phases") is None:
                raise ReportError("field anatomy.phases is missing")
            for key in ("step_s", "traced_s"):
                if getattr(a, key) == 0:
                    raise fields.bad(
                        f"anatomy.{key}", d.get(key), "a time above 0 (seconds per step)"
                    )
        return a


def reconcile(a: Anatomy) -> Anatomy:
    """`a` as the user's untraced step sees it: the phases add up to `a.untraced_s` (else
    `a.step_s`), and a layer off its time alone by more than :data:`BAND` shows the alone
    figure.

    1. The profiler's cost is taken out: computed phases scaled by ``k = (untraced - input) /
    (traced - input)``; the input wait is kept where it fits.
    2. Layers outside ``alone × (1 ± BAND)`` show the alone figure; the difference moves to or from
    "other".
    3. Where the whole model was timed alone, forward and backward are its figures (a trace's split
    is arbitrary where ops overlap or fuse); the layers are fitted inside them.
    4. Forward and backward needing more than "other" holds take from "Keras between steps", then
    outside the layers; still short, every computed part is scaled, with a note.
    5. The input and "Keras between steps" are checked against what isolates them
    (:func:`_keras_host`).

    Pure; an anatomy without phases, with an error, or already reconciled is returned as is."""
    if a.error or not a.phases or a.traced_phases:
        return a
    notes = list(a.notes)
    step = a.untraced_s if a.untraced_s and a.untraced_s > 0 else a.step_s
    if a.untraced_off():
        notes.append(
            f"the untraced steps ran slower than the traced ones ({format_ms(step)} vs "
            f"{format_ms(a.step_s)}): a profiler never makes a step faster, so the rest of "
            "the fit ran in a slower stretch (load, or still warming); the phases add up "
            "to the traced step"
        )
        step = a.step_s
    traced = a.phases_sum()
    if step <= 0 or traced <= 0:
        return a
    waited = a.phase(Phase.INPUT)
    # An input wait past the step was slowed by the profiler too (Python reading): scaled too.
    held_input = waited if waited < step else waited * step / traced
    k = (step - held_input) / (traced - waited) if traced > waited else step / traced
    parts = {p.phase: p.seconds * k for p in a.phases}
    parts[Phase.INPUT] = held_input
    layers, gained = _held_layers(a.layers, k)
    # A custom train_step has no model timed alone: the trace's split stands.
    measured = _model_phases(a)
    takers: tuple[tuple[Phase, float], ...]
    if measured is None:
        parts[Phase.FORWARD] = parts.get(Phase.FORWARD, 0.0) + gained[0]
        parts[Phase.BACKWARD] = parts.get(Phase.BACKWARD, 0.0) + gained[1]
        parts[Phase.OTHER] = parts.get(Phase.OTHER, 0.0) - gained[0] - gained[1]
        takers = ((Phase.HOST, 0.0), (Phase.FORWARD, sum(x.forward_s for x in layers)),
                  (Phase.BACKWARD, sum(x.backward_s for x in layers)))  # fmt: skip
    else:
        seen = (parts.get(Phase.FORWARD, 0.0), parts.get(Phase.BACKWARD, 0.0))
        parts[Phase.FORWARD], parts[Phase.BACKWARD] = measured
        parts[Phase.OTHER] = parts.get(Phase.OTHER, 0.0) - sum(measured) + sum(seen)
        notes.append(
            f"forward and backward are the model's own, timed alone ({format_ms(measured[0])} "
            f"forward, {format_ms(sum(measured))} with its gradients: backward "
            f"{measured[1] / max(sum(measured), 1e-12):.0%} of the two); the trace, its cost "
            f"taken out, saw {format_ms(seen[0])} and {format_ms(seen[1])}"
        )
        layers = _inside(layers, measured, notes)
        takers = ((Phase.HOST, 0.0),)  # the measured split is kept: scaled, never cut
    short = max(0.0, -parts[Phase.OTHER])
    parts[Phase.OTHER] = max(0.0, parts[Phase.OTHER])
    for phase, floor in takers:
        take = min(short, max(0.0, parts.get(phase, 0.0) - floor))
        parts[phase] = parts.get(phase, 0.0) - take
        short -= take
    if short > 1e-12:
        computed = step - held_input
        total = sum(v for p, v in parts.items() if p != Phase.INPUT)
        shrink = computed / total if total > 0 else 1.0
        parts = {p: v if p == Phase.INPUT else v * shrink for p, v in parts.items()}
        layers = [_scaled(x, shrink) for x in layers]
        what = "the layers timed alone" if measured is None else "the model timed alone"
        if shrink < 0.98:  # past what two clocks differ by
            notes.append(
                f"{what} and the step's other parts add up to more than the step "
                f"({format_ms(total)} vs {format_ms(computed)} computed): the step runs them "
                f"faster together ({FASTER_TOGETHER}); every "
                f"part is scaled by {shrink:.2f}"
            )
    _keras_host(a, step, parts, notes)
    phases = tuple(
        PhaseTime(p.phase, max(0.0, parts.get(p.phase, 0.0)), p.unseen) for p in a.phases
    )
    return dataclasses.replace(
        a,
        phases=phases,
        traced_phases=a.phases,
        layers=tuple(sorted(layers, key=lambda x: x.seconds, reverse=True)),
        fused_s=a.fused_s * k,
        notes=tuple(notes),
    )


def _held_layers(layers: Sequence[LayerTime], k: float) -> tuple[list[LayerTime], list[float]]:
    """Each layer's figure that holds, and what forward and backward gained over the scaled
    trace. A layer timed with those it holds comes after them; its row is the rest past
    theirs."""
    out: dict[str, LayerTime] = {}
    gained = [0.0, 0.0]
    order = sorted(layers, key=lambda x: (x.alone_with_held, -x.name.count("/")))
    for x in order:
        tf, tb = x.forward_s * k, x.backward_s * k
        held = (
            [y for n, y in out.items() if n.startswith(x.name + "/")] if x.alone_with_held else []
        )
        traced = dataclasses.replace(
            x, forward_s=tf, backward_s=tb, traced_forward_s=tf, traced_backward_s=tb,
            fused_s=x.fused_s * k,
            held_traced_s=sum(y.traced_s for y in held) if x.alone_with_held else None,
        )  # fmt: skip
        if not traced.holds_alone() or x.alone_s is None:
            out[x.name] = traced
            continue
        alone = max(0.0, x.alone_s - sum(y.seconds for y in held))
        share = x.alone_forward_s / x.alone_s if x.alone_forward_s is not None else None
        if share is not None:
            hf = alone * min(1.0, share)
        else:
            hf = alone * (tf / (tf + tb)) if tf + tb > 0 else alone
        hb = alone - hf
        gained[0] += hf - tf
        gained[1] += hb - tb
        words = x.check or _why_differs(traced)
        out[x.name] = dataclasses.replace(traced, forward_s=hf, backward_s=hb, check=words)
    return [out[x.name] for x in layers], gained


def _keras_host(a: Anatomy, step: float, parts: dict[Phase, float], notes: list[str]) -> None:
    """Reconcile's step 5, where ``fit_s`` was measured:

    * the input is ``fed_s`` (else `step`) less ``fit_s``; where the trace's wait is off that by
      more than :data:`INPUT_BAND` of the step, that figure holds;
    * with ``raw_s``, "Keras between steps" is at most the trainer's cost over the raw step; the
      rest is unseen work: "other"."""
    if a.fit_s is None:
        return
    # fed_s and fit_s are timed in turn so a slow spell hits both.
    fed = a.fed_s if a.fed_s is not None else step
    isolated = min(step, max(0.0, fed - a.fit_s))
    waited = parts.get(Phase.INPUT, 0.0)
    if abs(isolated - waited) > INPUT_BAND * step:
        more = isolated - waited
        parts[Phase.INPUT] = isolated
        for phase in (Phase.OTHER, Phase.HOST):
            take = min(more, parts.get(phase, 0.0)) if more > 0 else more
            parts[phase] = parts.get(phase, 0.0) - take
            more -= take
            if more <= 1e-12:
                break
        if more > 1e-12:  # the rest could not come from other or the host: less input
            parts[Phase.INPUT] -= more
        timed = (f"fit's step on your data over fit's on one batch repeated "
                 f"({format_ms(fed)} vs {format_ms(a.fit_s)})")  # fmt: skip
        shown = parts[Phase.INPUT]
        if abs(shown - waited) <= 1e-9:  # the step had nothing outside its computed phases
            notes.append(
                f"input is the trace's wait ({format_ms(waited)}), not what the data costs "
                f"the step by {timed}, {format_ms(isolated)}: the step has no time outside "
                "its computed phases to hold it (the two timings differ by noise, or the "
                "input's work overlaps the compute)"
            )
        elif more > 1e-12:
            notes.append(
                f"input is what the data costs the step by {timed}, {format_ms(isolated)}, "
                f"as far as the step's time outside its computed phases holds it: "
                f"{format_ms(shown)}; the trace's wait was {format_ms(waited)}"
            )
        else:
            notes.append(
                f"input is what the data costs the step: {timed}; the trace's wait was "
                f"{format_ms(waited)}"
            )
    if a.raw_s is None:  # your model adds its own losses: no raw step to hold the host to
        return
    most = max(0.0, a.fit_s - a.raw_s)
    host = parts.get(Phase.HOST, 0.0)
    if host <= most + 1e-12:
        return
    parts[Phase.HOST] = most
    parts[Phase.OTHER] = parts.get(Phase.OTHER, 0.0) + host - most
    notes.append(
        f"Keras between steps is held to what Keras's trainer costs over the raw step "
        f"({format_ms(most)}): the host's other {format_ms(host - most)} between steps is "
        "work the trace did not see, in other"
    )


# Why layers timed alone add up to more than the step, on any backend.
FASTER_TOGETHER = (
    "fused across layers where compiled, the cores overlap them, or each alone pays its own call"
)
INPUT_BAND = 0.10  # the trace's input further than this share of the step from the isolated


def _model_phases(a: Anatomy) -> tuple[float, float] | None:
    """Forward and backward per step from the whole model timed alone (None: not timed)."""
    if a.model_alone_s is None or a.model_alone_forward_s is None or a.model_alone_s <= 0:
        return None
    forward = min(a.model_alone_forward_s, a.model_alone_s)
    return forward, a.model_alone_s - forward


def _inside(
    layers: Sequence[LayerTime], measured: tuple[float, float], notes: list[str]
) -> list[LayerTime]:
    """`layers` fitted inside the model's own forward and backward: a phase whose rows add up to
    more is scaled per phase, with a note."""
    inside = (sum(x.forward_s for x in layers), sum(x.backward_s for x in layers))
    factors = [m / s if s > m > 0 else 1.0 for m, s in zip(measured, inside, strict=True)]
    over = [(name, m, s, f) for name, m, s, f in zip(("forward", "backward"), measured, inside,
                                                      factors, strict=True) if f < 1.0]  # fmt: skip
    if not over:
        return list(layers)
    said = " and ".join(f"{name} {format_ms(s)} vs {format_ms(m)}" for name, m, s, _ in over)
    scaled = "; ".join(f"every row's {name} is scaled by {f:.2f}" for name, _, _, f in over)
    notes.append(
        f"the layers' rows add up to more than the model timed alone ({said}): in the step "
        f"they run faster together ({FASTER_TOGETHER}); "
        f"{scaled}"
    )
    return [_scaled(x, *factors) for x in layers]


def _why_differs(x: LayerTime) -> str:
    """Why a layer's traced figure differs from its time alone, in words."""
    r = x.against_alone() or 1.0
    fused = x.traced_s > 0 and x.fused_s > 0.5 * x.traced_s
    if x.alone_with_held:
        found = (
            "the trace booked more to it and the layers it holds than they cost together"
            if r > 1
            else "it and the layers it holds cost more together than the trace saw"
        )
        return f"{found}; its own row is the rest of their time alone past theirs"
    if r > 1:
        if fused:
            return "the trace split fused code it shares with other layers onto it"
        return ("the trace booked more to it than it costs: the profiler's cost on its ops, "
                "or other work running beside them on other threads")  # fmt: skip
    if fused:
        return "XLA fused it with its neighbours: part of its work is in their code"
    return ("the trace saw less of it than it costs alone: in the step its work is shared "
            "or overlapped with other layers, or ran outside its scope")  # fmt: skip


def _scaled(x: LayerTime, f: float, backward: float | None = None) -> LayerTime:
    """`x` with its forward scaled by `f` and its backward by `backward` (else `f` too)."""
    b = f if backward is None else backward
    return dataclasses.replace(x, forward_s=x.forward_s * f, backward_s=x.backward_s * b)


@dataclasses.dataclass(frozen=True)
class Part:
    """One part two anatomies differ in: a phase, or a kind of layer (all Conv2D layers)."""

    what: str  # "the Conv2D layers (4)", "the optimizer"
    a_s: float
    b_s: float

    @property
    def ratio(self) -> float:
        """b over a (2.0: twice as slow in b); inf where a spent nothing on it."""
        if self.a_s <= 0:
            return math.inf if self.b_s > 0 else 1.0
        return self.b_s / self.a_s

    @property
    def gap_s(self) -> float:
        return self.b_s - self.a_s


@dataclasses.dataclass(frozen=True)
class Contrast:
    """Anatomy `b` against `a`: the step's ratio and the parts making it up, largest gap first;
    ``a_name``/``b_name`` say what each is."""

    a_name: str
    b_name: str
    a_step_s: float
    b_step_s: float
    parts: tuple[Part, ...]
    fix: str | None = None  # what to try on the slower side, where the backend names one
    rest: Part | None = None  # the parts not shown, together: with `parts`, the whole gap
    notes: tuple[str, ...] = ()  # how the two were put on one footing, in words

    @property
    def ratio(self) -> float:
        return self.b_step_s / self.a_step_s if self.a_step_s > 0 else math.inf


def contrast(
    a: Anatomy,
    b: Anatomy,
    a_name: str,
    b_name: str,
    fix: str | None = None,
    top: int = 3,
    steps: tuple[float, float] | None = None,
) -> Contrast:
    """`b`'s step against `a`'s in parts: each phase outside the layers, and the layers grouped
    by kind, largest gap first, `top` of them.

    Both sides are measured alike (untraced where both were reconciled). `steps`: each side's step
    from another measurement, with a note where the shares differ by more than :data:`SAME_STEP`.
    The host's time is Keras's only where the slower side's raw step says so."""
    both = bool(a.traced_phases and b.traced_phases)
    # what the parts add up to, and the steps said (those, else the outside clock's)
    basis = (a.shown_step_s(), b.shown_step_s()) if both else (a.phases_sum(), b.phases_sum())
    own = basis if both else (a.step_s, b.step_s)
    notes: list[str] = []
    if steps is not None and min(steps) > 0:
        for name, mine, theirs in zip((a_name, b_name), own, steps, strict=True):
            if mine > 0 and abs(theirs / mine - 1.0) > SAME_STEP:
                notes.append(f"{name}'s anatomy measured {format_ms(mine)} a step where the "
                             f"speed table measured {format_ms(theirs)}: its parts are put on "
                             "the table's step, in the shares it measured")  # fmt: skip
        own = steps
        scale = [o / x if x > 0 else 1.0 for o, x in zip(own, basis, strict=True)]
    else:  # each as it was measured
        scale = [1.0, 1.0]
    parts: list[Part] = []
    kinds_a, kinds_b = _by_kind(a.layers), _by_kind(b.layers)
    for kind in sorted(set(kinds_a) | set(kinds_b)):
        (na, sa), (nb, sb) = kinds_a.get(kind, (0, 0.0)), kinds_b.get(kind, (0, 0.0))
        n = max(na, nb)
        parts.append(Part(f"the {kind} layer{'s' if n != 1 else ''} ({n})", sa, sb))
    names = {**_PART_NAMES, Phase.HOST: _host_name(a if own[0] > own[1] else b)}
    for phase in (Phase.INPUT, Phase.OPTIMIZER, Phase.METRICS, Phase.HOST, Phase.OTHER):
        parts.append(Part(names[phase], a.phase(phase), b.phase(phase)))
    # Forward and backward outside any layer (the loss's gradient, glue between layers).
    outside = [
        a.phase(Phase.FORWARD) + a.phase(Phase.BACKWARD) - a.attributed_layers_s(),
        b.phase(Phase.FORWARD) + b.phase(Phase.BACKWARD) - b.attributed_layers_s(),
    ]
    parts.append(Part("forward/backward outside the layers", *(max(0.0, s) for s in outside)))
    parts = [Part(p.what, p.a_s * scale[0], p.b_s * scale[1]) for p in parts]
    ranked = sorted(parts, key=lambda p: abs(p.gap_s), reverse=True)
    shown, left = ranked[:top], ranked[top:]
    rest = Part("the rest", sum(p.a_s for p in left), sum(p.b_s for p in left)) if left else None
    return Contrast(a_name, b_name, *own, tuple(shown), fix, rest, tuple(notes))


SAME_STEP = 0.10  # two measurements of one step further apart than this are said
TRAINER_NOISE = 0.05  # a trainer cost under this fraction of the raw step is none to blame


def _host_name(slower: Anatomy) -> str:
    """Names the host's time between steps Keras's only where the slower side's trainer costs."""
    cost = slower.trainer_cost()
    if cost is not None and cost >= TRAINER_NOISE:
        return "Keras between steps"
    why = "not measured" if cost is None else "none over the raw step"
    return f"the host between steps (Keras's trainer cost: {why})"


_PART_NAMES = {
    Phase.INPUT: "the input",
    Phase.OPTIMIZER: "the optimizer",
    Phase.METRICS: "the loss and metrics",
    Phase.HOST: "Keras between steps",
    Phase.OTHER: "other (unattributed)",
}


_MODELS = frozenset({"Functional", "Sequential", "Model"})


def _by_kind(layers: Sequence[LayerTime]) -> dict[str, tuple[int, float]]:
    """Layers by kind, a held layer counted as its holder's (backends split that time
    differently)."""
    rows = {layer.name: layer for layer in layers}
    out: dict[str, tuple[int, float]] = {}
    counted: dict[str, set[str]] = {}
    for layer in layers:
        parts = layer.name.split("/")
        holder = next(
            (rows[h] for h in ("/".join(parts[:i]) for i in range(1, len(parts)))
             if h in rows and rows[h].kind not in _MODELS),
            layer,
        )  # fmt: skip
        key = holder.kind or "other"
        n, s = out.get(key, (0, 0.0))
        seen = counted.setdefault(key, set())
        out[key] = (n + (holder.name not in seen), s + layer.seconds)
        seen.add(holder.name)
    return out
