"""The memory ledger's records: what crosses from the sampler (``toolkit.profiling._memory``,
which builds them) to the report (which renders them), and back from ``report.json``.

Pure Python, as the other ledger records (``_ledger_records``): the report side reads them
where no framework can be imported. :meth:`RunMemory.to_dict` / :meth:`RunMemory.from_dict`
are the JSON edge (``report.json``'s ``ledger.memory``, the schema in ``docs/report.md``); a
field an older report lacks takes its default.

Memory is in MiB throughout ("MB" in what a person reads, as ``toolkit.core.stats.format_mb``
prints it). "Host" is the process's resident memory; "device" the accelerator's allocator as
the backend counts it (summed over the process's devices), None where the backend gives
nothing (a CPU device): then ``device_unseen`` says why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.core import _fields as fields

# The ledger's parts in its order (``_ledger_records.PARTS``), the fit's own order of events.
_PARTS = ("start_up", "compile", "steps", "input", "validation", "callbacks", "exit", "other")
_ORDER = {name: i for i, name in enumerate(_PARTS)}


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


@dataclasses.dataclass(frozen=True)
class PartMemory:
    """One part of the run (a ledger part, or a callback by its class name): the most memory
    reached in it and what was held when it last ended. `readings`: how many readings fell
    in it (0: the part was too short to be read; its figures are None)."""

    name: str
    host_peak_mb: float | None
    host_end_mb: float | None
    device_peak_mb: float | None = None
    device_end_mb: float | None = None
    readings: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "host_peak_mb": self.host_peak_mb,
            "host_end_mb": self.host_end_mb,
            "device_peak_mb": self.device_peak_mb,
            "device_end_mb": self.device_end_mb,
            "readings": self.readings,
        }

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> PartMemory:
        readings = _float(d.get("readings"))
        return cls(
            name,
            _float(d.get("host_peak_mb")),
            _float(d.get("host_end_mb")),
            _float(d.get("device_peak_mb")),
            _float(d.get("device_end_mb")),
            int(readings) if readings is not None else 0,
        )


@dataclasses.dataclass(frozen=True)
class Growth:
    """Memory that grew inside one part of the run and stayed: `mb` over `steps` training
    steps (the rate per 1,000 steps where the part is the steps), `memory` "host" or
    "device", `epoch` where it was found. `what`: what grew, where the backend can tell
    (live arrays by shape and dtype, tensors, retraced programs), and `held_by` the object
    and attribute holding them where found; `fix` what to do, where one is known."""

    part: str
    memory: str
    mb: float
    steps: int
    epoch: int
    what: str | None = None
    held_by: str | None = None
    fix: str | None = None

    @property
    def per_1k_steps(self) -> float | None:
        return self.mb * 1000.0 / self.steps if self.steps else None

    def to_dict(self) -> dict[str, object]:
        return {
            "part": self.part,
            "memory": self.memory,
            "mb": self.mb,
            "steps": self.steps,
            "mb_per_1k_steps": _round(self.per_1k_steps),
            "epoch": self.epoch,
            "what": self.what,
            "held_by": self.held_by,
            "fix": self.fix,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Growth | None:
        mb, steps, epoch = _float(d.get("mb")), _float(d.get("steps")), _float(d.get("epoch"))
        if mb is None or not isinstance(d.get("part"), str):
            return None
        return cls(
            d["part"],
            str(d.get("memory") or "host"),
            mb,
            int(steps or 0),
            int(epoch or 0),
            *(str(d[k]) if d.get(k) is not None else None for k in ("what", "held_by", "fix")),
        )


@dataclasses.dataclass(frozen=True)
class Sample:
    """One reading: seconds since the fit began, training steps begun by then, host MiB,
    device MiB (None: not seen), and the part of the run it fell in (the ledger's part,
    or a callback's name)."""

    t_s: float
    step: int
    host_mb: float
    device_mb: float | None = None
    part: str = ""


@dataclasses.dataclass(frozen=True)
class RunMemory:
    """One fit's memory: each part's peak and what it held at its end, the growth found,
    and a thinned timeline of the readings (for the plot and TensorBoard)."""

    every_s: float
    parts: tuple[PartMemory, ...]
    callbacks: tuple[PartMemory, ...] = ()
    devices: tuple[str, ...] = ()
    device_unseen: str | None = None
    host_peak_mb: float | None = None
    device_peak_mb: float | None = None
    host_start_mb: float | None = None
    growth: tuple[Growth, ...] = ()
    timeline: tuple[Sample, ...] = ()
    readings: int = 0
    epochs: tuple[EpochMemory, ...] = ()

    def part(self, name: str) -> PartMemory | None:
        return next((p for p in self.parts if p.name == name), None)

    def peak_part(self, memory: str = "host") -> PartMemory | None:
        """The part that reached the run's peak of `memory` ("host" or "device"): of the
        parts within 1 % of it, the first in the ledger's order (memory stays at its high
        after it is reached: the parts after it hold it, they did not reach it)."""
        key = "host_peak_mb" if memory == "host" else "device_peak_mb"
        seen = [p for p in self.parts if getattr(p, key) is not None]
        if not seen:
            return None
        top = max(getattr(p, key) for p in seen)
        near = [p for p in seen if getattr(p, key) >= top * 0.99]
        return min(near, key=lambda p: _ORDER.get(p.name, len(_ORDER)))

    def to_dict(self) -> dict[str, object]:
        return {
            "every_s": self.every_s,
            "readings": self.readings,
            "devices": list(self.devices),
            "device_unseen": self.device_unseen,
            "host_start_mb": self.host_start_mb,
            "host_peak_mb": self.host_peak_mb,
            "device_peak_mb": self.device_peak_mb,
            "parts": {p.name: p.to_dict() for p in self.parts},
            "callbacks": {c.name: c.to_dict() for c in self.callbacks},
            "growth": [g.to_dict() for g in self.growth],
            "timeline": [[s.t_s, s.step, s.host_mb, s.device_mb, s.part] for s in self.timeline],
            "epochs": [e.to_dict() for e in self.epochs],
        }

    @staticmethod
    def check(d: Any) -> None:
        """Raises ReportError naming the first field of `d` (report.json's ``ledger.memory``)
        not of its kind: MiB as numbers >= 0 or null, each part's and callback's figures, the
        growth records and the timeline's rows."""
        _check(d)

    @classmethod
    def from_dict(cls, d: Any) -> RunMemory | None:
        """A ledger's ``memory`` (lenient: :meth:`check` checks one from a file); None where
        it has none."""
        if not isinstance(d, Mapping) or _float(d.get("every_s")) is None:
            return None

        def parts(value: Any) -> tuple[PartMemory, ...]:
            items = value.items() if isinstance(value, Mapping) else ()
            return tuple(
                PartMemory.from_dict(str(k), v) for k, v in items if isinstance(v, Mapping)
            )

        growth = d.get("growth") if isinstance(d.get("growth"), list) else []
        found = (Growth.from_dict(g) for g in growth if isinstance(g, Mapping))
        devices = d.get("devices") if isinstance(d.get("devices"), list) else []
        readings = _float(d.get("readings"))
        return cls(
            every_s=float(d["every_s"]),
            parts=parts(d.get("parts")),
            callbacks=parts(d.get("callbacks")),
            devices=tuple(str(x) for x in devices),
            device_unseen=d.get("device_unseen") if isinstance(d.get("device_unseen"), str)
            else None,
            host_peak_mb=_float(d.get("host_peak_mb")),
            device_peak_mb=_float(d.get("device_peak_mb")),
            host_start_mb=_float(d.get("host_start_mb")),
            growth=tuple(g for g in found if g is not None),
            timeline=_timeline(d.get("timeline")),
            readings=int(readings) if readings is not None else 0,
            epochs=_epochs(d.get("epochs")),
        )  # fmt: skip


def _epochs(value: Any) -> tuple[EpochMemory, ...]:
    found = (
        (EpochMemory.from_dict(e) for e in value if isinstance(e, Mapping))
        if isinstance(value, list)
        else ()
    )
    return tuple(e for e in found if e is not None)


def _timeline(value: Any) -> tuple[Sample, ...]:
    out = []
    for row in value if isinstance(value, list) else []:
        if not isinstance(row, Sequence) or len(row) < 3:
            continue
        t, step, host = (_float(v) for v in row[:3])
        device = _float(row[3]) if len(row) > 3 else None
        part = str(row[4]) if len(row) > 4 and isinstance(row[4], str) else ""
        if t is not None and step is not None and host is not None:
            out.append(Sample(t, int(step), host, device, part))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class EpochMemory:
    """The run's memory at train begin (`epoch` None) and at each epoch's end, after its
    validation: the training steps begun by then, the process's resident MiB, and the
    device's in use and at its most so far (None: no device counters)."""

    epoch: int | None
    step: int
    host_mb: float
    device_mb: float | None = None
    device_peak_mb: float | None = None

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EpochMemory | None:
        host, epoch = _float(d.get("host_mb")), d.get("epoch")
        if host is None or not (epoch is None or isinstance(epoch, int)):
            return None
        step = _float(d.get("step"))
        return cls(
            epoch, int(step or 0), host, _float(d.get("device_mb")), _float(d.get("device_peak_mb"))
        )


def _check(value: Any) -> None:
    """The ledger's ``memory`` object (``docs/report.md``): MiB as numbers >= 0 or null, each
    part's and callback's figures, the growth records and the timeline's rows."""
    if value is None:
        return
    m = fields.mapping("ledger.memory", value)
    fields.number("ledger.memory.every_s", m.get("every_s"))
    if m["every_s"] <= 0:
        raise fields.bad("ledger.memory.every_s", m["every_s"], "a number > 0")
    fields.number("ledger.memory.readings", m.get("readings", 0), counts=True)
    for key in ("host_start_mb", "host_peak_mb", "device_peak_mb"):
        fields.number(f"ledger.memory.{key}", m.get(key), optional=True)
    for group in ("parts", "callbacks"):
        for name, p in fields.mapping(f"ledger.memory.{group}", m.get(group)).items():
            where = f"ledger.memory.{group}.{name}"
            p = fields.mapping(where, p, optional=False)
            for key in ("host_peak_mb", "host_end_mb", "device_peak_mb", "device_end_mb"):
                fields.number(f"{where}.{key}", p.get(key), optional=True)
            fields.number(f"{where}.readings", p.get("readings", 0), counts=True)
    for i, g in enumerate(fields.records("ledger.memory.growth", m.get("growth"))):
        fields.string(f"ledger.memory.growth[{i}].part", g.get("part"))
        fields.number(f"ledger.memory.growth[{i}].mb", g.get("mb"))
        for key in ("steps", "epoch"):
            fields.number(f"ledger.memory.growth[{i}].{key}", g.get(key, 0), counts=True)
    for i, e in enumerate(fields.records("ledger.memory.epochs", m.get("epochs"))):
        where = f"ledger.memory.epochs[{i}]"
        fields.number(f"{where}.epoch", e.get("epoch"), optional=True, counts=True)
        fields.number(f"{where}.step", e.get("step", 0), counts=True)
        fields.number(f"{where}.host_mb", e.get("host_mb"))
        for key in ("device_mb", "device_peak_mb"):
            fields.number(f"{where}.{key}", e.get(key), optional=True)
    for i, row in enumerate(fields.items("ledger.memory.timeline", m.get("timeline"))):
        where = f"ledger.memory.timeline[{i}]"
        if not isinstance(row, list) or len(row) < 3:
            raise fields.bad(where, row, "a [seconds, step, host MiB, device MiB, part] row")
        fields.number(where, row[0])
        fields.number(where, row[1], counts=True)
        fields.number(where, row[2])
        fields.number(where, row[3] if len(row) > 3 else None, optional=True)
