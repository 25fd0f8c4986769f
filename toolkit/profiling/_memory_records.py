"""The memory ledger's records: what crosses from the sampler (``toolkit.profiling._memory``) to
the report, and back from ``report.json`` (pure Python; :class:`RunMemory` is the JSON edge).

Memory is in MiB throughout ("MB" on screen). "Host" is resident memory; "device" the accelerator's
allocator summed over the process's devices, None where unseen (``device_unseen`` says why)."""

from __future__ import annotations

import dataclasses
from typing import Any

from toolkit.core import _fields as fields

# The ledger's parts in its order (``_ledger_records.PARTS``), the fit's own order of events.
_PARTS = ("start_up", "compile", "steps", "input", "validation", "callbacks", "exit", "other")
_ORDER = {name: i for i, name in enumerate(_PARTS)}


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


@dataclasses.dataclass(frozen=True)
class PartMemory(fields.Record):
    """One part (or callback): its peak and what it held as it last ended; 0 `readings`: unread."""

    name: str = fields.field("", json=False)  # its key in the parts' mapping (_by_name)
    host_peak_mb: float | None = None
    host_end_mb: float | None = None
    device_peak_mb: float | None = None
    device_end_mb: float | None = None
    readings: int = 0


def _by_name(parts: tuple[PartMemory, ...]) -> dict[str, object]:
    return {p.name: p.to_dict() for p in parts}


def _named(d: Any, where: str) -> tuple[PartMemory, ...]:
    return tuple(
        dataclasses.replace(PartMemory.from_dict(v, f"{where}.{k}"), name=str(k))
        for k, v in fields.mapping(where, d).items()
    )


@dataclasses.dataclass(frozen=True)
class Growth(fields.Record):
    """Memory that grew inside one part and stayed: `mb` over `steps` steps, `memory` "host" or
    "device", `epoch` where found; `what` grew, `held_by` whom, and `fix`, where known."""

    EXTRA = ("mb_per_1k_steps",)

    part: str
    memory: str = fields.field(missing="host")
    mb: float
    steps: int = fields.field(missing=0)
    epoch: int = fields.field(missing=0)
    what: str | None = None
    held_by: str | None = None
    fix: str | None = None

    @property
    def per_1k_steps(self) -> float | None:
        return self.mb * 1000.0 / self.steps if self.steps else None

    @property
    def mb_per_1k_steps(self) -> float | None:
        return _round(self.per_1k_steps)


@dataclasses.dataclass(frozen=True)
class Sample:
    """One reading: seconds since the fit began, steps begun, host and device MiB, and its part."""

    t_s: float
    step: int
    host_mb: float
    device_mb: float | None = None
    part: str = ""


def _every(value: Any, where: str) -> float:
    if fields.number(where, value) <= 0:
        raise fields.bad(where, value, "a number > 0")
    return value


def _rows(timeline: tuple[Sample, ...]) -> list[list[object]]:
    return [[s.t_s, s.step, s.host_mb, s.device_mb, s.part] for s in timeline]


def _samples(rows: Any, where: str) -> tuple[Sample, ...]:
    return tuple(_sample(row, f"{where}[{i}]") for i, row in enumerate(fields.items(where, rows)))


def _sample(row: Any, where: str) -> Sample:
    """One timeline row, ``[seconds, step, host MiB, device MiB or null, part]``."""
    if not isinstance(row, list | tuple) or not 3 <= len(row) <= 5:
        raise fields.bad(where, row, "a [seconds, step, host MiB, device MiB, part] row")
    part = fields.string(where, row[4]) if len(row) > 4 else ""
    device = fields.number(where, row[3] if len(row) > 3 else None, optional=True)
    step = fields.number(where, row[1], counts=True)
    return Sample(fields.number(where, row[0]), step, fields.number(where, row[2]), device, part)


@dataclasses.dataclass(frozen=True)
class RunMemory(fields.Record):
    """One fit's memory: each part's peak and held-at-end, the growth found, a thinned timeline."""

    every_s: float = fields.field(read=_every)
    parts: tuple[PartMemory, ...] = fields.field(write=_by_name, read=_named)
    callbacks: tuple[PartMemory, ...] = fields.field((), write=_by_name, read=_named)
    devices: tuple[str, ...] = ()
    device_unseen: str | None = None
    host_peak_mb: float | None = None
    device_peak_mb: float | None = None
    host_start_mb: float | None = None
    growth: tuple[Growth, ...] = ()
    timeline: tuple[Sample, ...] = fields.field((), write=_rows, read=_samples)
    readings: int = 0
    epochs: tuple[EpochMemory, ...] = ()

    def part(self, name: str) -> PartMemory | None:
        return next((p for p in self.parts if p.name == name), None)

    def peak_part(self, memory: str = "host") -> PartMemory | None:
        """The part that reached the run's peak of `memory`: of those within 1 % of it, the first
        (the parts after it hold it, they did not reach it)."""
        key = "host_peak_mb" if memory == "host" else "device_peak_mb"
        seen = [p for p in self.parts if getattr(p, key) is not None]
        if not seen:
            return None
        top = max(getattr(p, key) for p in seen)
        near = [p for p in seen if getattr(p, key) >= top * 0.99]
        return min(near, key=lambda p: _ORDER.get(p.name, len(_ORDER)))

    WHERE = "ledger.memory"

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> RunMemory | None:
        """A ledger's ``memory``, this toolkit's or older (None: absent); ReportError: malformed."""
        return None if d is None else super().from_dict(d, where)


@dataclasses.dataclass(frozen=True)
class EpochMemory(fields.Record):
    """Memory at train begin (`epoch` None) and each epoch's end: steps, host and device MiB."""

    epoch: int | None = fields.field(missing=None)
    step: int = fields.field(missing=0)
    host_mb: float
    device_mb: float | None = None
    device_peak_mb: float | None = None
