"""The trace's records: what crosses from the trace reader (``toolkit.report.trace``) to the
views. Small frozen dataclasses; ``to_dict``/``from_dict`` are the JSON edge (``trace.analysis``):
an older report's missing fields take their defaults, a field of the wrong kind raises ReportError
naming it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from toolkit.core import _fields as fields
from toolkit.profiling._timing import Traced

_WHERE = "trace.analysis"  # the field's name in report.json, for what a bad value says


def _field(name: str) -> str:
    """The field's name in report.json, for what a bad value says (``trace.analysis.x``)."""
    return f"{_WHERE}.{name}" if name else _WHERE


def _number(value: Any, name: str, optional: bool = False) -> Any:
    """`value` as a finite float (None where `optional` and null), or a ReportError naming it."""
    if value is None and optional:
        return None
    read = fields.finite(value)
    if read is None:
        raise fields.bad(_field(name), value, "a finite number")
    return read


def _finite(value: Any, where: str) -> float:
    """A finite number of either sign, as a trace's figures have always been read."""
    read = fields.finite(value)
    if read is None:
        raise fields.bad(where, value, "a finite number")
    return read


def _finite_or_none(value: Any, where: str) -> float | None:
    return None if value is None else _finite(value, where)


def _finite_each(value: Any, where: str) -> dict[str, float]:
    return {k: _finite(v, f"{where}.{k}") for k, v in fields.mapping(where, value).items()}


def _required(d: Mapping[str, Any], key: str, name: str) -> str:
    """`d[key]` as a string, or ReportError naming ``name.key`` where it is missing."""
    if d.get(key) is None:
        raise fields.bad(_field(f"{name}.{key}"), None, "a string")
    return str(d[key])


@dataclasses.dataclass(frozen=True)
class Spread(fields.Record):
    """Mean, min and max of per-step times, in ms."""

    mean: float = fields.field(read=_finite)
    min: float = fields.field(read=_finite)
    max: float = fields.field(read=_finite)

    @classmethod
    def of(cls, times: Sequence[float]) -> Spread | None:
        """The spread of `times` (None without any)."""
        if not times:
            return None
        return cls(mean=sum(times) / len(times), min=min(times), max=max(times))


@dataclasses.dataclass(frozen=True)
class TracedStep:
    """One marked step (with ``steps_per_execution`` > 1, one marked call; times per step).

    Attributes:
        breakdown: ms in each of XProf's parts, in its order; empty without one (PyTorch's)."""

    step: str
    step_ms: float
    breakdown: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def ms(self, part: str) -> float:
        """The step's ms in `part` of the breakdown (0 where it has none)."""
        return self.breakdown.get(part, 0.0)

    def to_dict(self) -> dict[str, str | float]:
        return {"step": self.step, "step_ms": self.step_ms, **self.breakdown}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], name: str) -> TracedStep:
        step = _required(d, "step", name)
        parts = {k: _number(v, f"{name}.{k}") for k, v in d.items() if k not in ("step", "step_ms")}
        return cls(step, _number(d.get("step_ms"), f"{name}.step_ms"), parts)


@dataclasses.dataclass(frozen=True)
class OpTime(fields.Record):
    """One op's self time.

    Attributes:
        type: XProf's (``MatMul``, ``fusion``); empty for PyTorch's.
        self_ms: per marked step (in the whole trace where none is marked).
        share: its part of its side's self time, 0 to 1."""

    op: str
    type: str = fields.field(missing="")
    count: int = fields.field(missing=0)
    self_ms: float = fields.field(read=_finite)
    share: float = fields.field(read=_finite)


@dataclasses.dataclass(frozen=True)
class TopOps(fields.Record):
    """The top ops by self time on each side, the longest first."""

    host: tuple[OpTime, ...] = ()
    device: tuple[OpTime, ...] = ()

    @property
    def listed(self) -> bool:
        """Any op is listed, on either side."""
        return bool(self.host or self.device)

    def sides(self) -> Iterator[tuple[str, tuple[OpTime, ...]]]:
        """Each side with its ops, as the views list them: the device's first."""
        yield "device", self.device
        yield "host", self.host


def _traced_steps(value: Any, where: str) -> tuple[TracedStep, ...]:
    return tuple(TracedStep.from_dict(s, f"steps[{i}]")
                 for i, s in enumerate(fields.records(where, value)))  # fmt: skip


def _per_row(value: Any, where: str) -> int:
    return max(1, int(_finite(value, where))) if value is not None else 1


@dataclasses.dataclass(frozen=True)
class TraceAnalysis(fields.Record):
    """What a profiler trace says (``toolkit.report.trace.read_trace``).

    Attributes:
        reader: what read it (``xprof 2.x``, ``chrome trace json``); None: nothing did.
        breakdown_ms: the mean step's time in XProf's parts (those not all zero).
        input_percent: the share of step time waiting for input, 0 to 100.
        collectives_percent: their share of the step; None where the trace shows none.
        verdict: XProf's (``highly input-bound`` ... ``not input-bound``), or None.
        statement: XProf's words on the input, as TensorBoard shows them.
        error: why something could not be read, or how it was read (the rest kept).
        overview: XProf's overview page was read (then its ``bottleneck`` word is in the JSON).
        steps_per_row: steps per marked row (``steps_per_execution``: Keras marks a call)."""

    WHERE = _WHERE

    reader: str | None = None
    steps: tuple[TracedStep, ...] = fields.field((), read=_traced_steps)
    step_ms: Spread | None = None
    breakdown_ms: Mapping[str, float] = fields.field(default_factory=dict, read=_finite_each)
    input_percent: float | None = fields.field(None, read=_finite_or_none)
    collectives_percent: float | None = fields.field(None, read=_finite_or_none)
    verdict: str | None = None
    statement: str | None = None
    top_ops: TopOps = fields.field(default_factory=TopOps)
    error: str | None = None
    overview: bool = fields.field(False, json=False)  # written as bottleneck's presence
    bottleneck: str | None = None
    steps_per_row: int = fields.field(1, omit=lambda n: n <= 1, read=_per_row)

    @property
    def read(self) -> bool:
        """Something was read: a step, or an op."""
        return bool(self.steps) or self.top_ops.listed

    def to_dict(self) -> dict[str, object]:
        """report.json's ``trace.analysis``: the object reports have always held."""
        out = super().to_dict()
        if not self.overview:
            out.pop("bottleneck")
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> TraceAnalysis | None:
        """The analysis a report holds (missing fields take their defaults); None where none."""
        if not d:
            return None
        read = super().from_dict(d, where)
        return dataclasses.replace(read, overview="bottleneck" in d)


@dataclasses.dataclass(frozen=True)
class TraceSection:
    """report.json's ``trace``: what the TraceWindow did, what its files said, how to view them."""

    window: Traced
    analysis: TraceAnalysis | None = None
    view: str | None = None

    def to_dict(self) -> dict[str, object]:
        d = self.window.to_dict()
        if self.view is not None:
            d["view"] = self.view
        if self.analysis is not None:
            d["analysis"] = self.analysis.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Any) -> TraceSection | None:
        """A report's ``trace``; None where the run took none.

        Raises:
            ReportError: a field not of its kind, named (``trace.analysis.steps[0].step_ms``)."""
        if d is None:
            return None
        d = fields.mapping("trace", d)
        analysis = TraceAnalysis.from_dict(d.get("analysis"))
        view = fields.string("trace.view", d.get("view"), optional=True)
        return cls(Traced.from_dict(d), analysis, view)
