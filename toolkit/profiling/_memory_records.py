"""The memory ledger's records: what crosses from the sampler (``toolkit.profiling._memory``,
which builds them) to the report (which renders them), and back from ``report.json``.

Pure Python, as the other ledger records (``_ledger_records``): the report side reads them
where no framework can be imported. :meth:`RunMemory.to_dict` / :meth:`RunMemory.from_dict`
are the JSON edge (``report.json``'s ``ledger.memory``, the schema in ``docs/report.md``); a
field an older report lacks takes its default, and one of the wrong kind is refused by name
(``toolkit.core._fields``, every record's wording).

Memory is in MiB throughout ("MB" in what a person reads, as ``toolkit.core.stats.format_mb``
prints it). "Host" is the process's resident memory; "device" the accelerator's allocator as
the backend counts it (summed over the process's devices), None where the backend gives
nothing (a CPU device): then ``device_unseen`` says why.
"""

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
    def from_dict(cls, name: str, d: Any, where: str) -> PartMemory:
        d = fields.mapping(where, d, optional=False)
        keys = ("host_peak_mb", "host_end_mb", "device_peak_mb", "device_end_mb")
        mb = {k: fields.number(f"{where}.{k}", d.get(k), optional=True) for k in keys}
        readings = fields.number(f"{where}.readings", d.get("readings", 0), counts=True)
        return cls(name, **mb, readings=readings)


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
    def from_dict(cls, d: Any, where: str) -> Growth:
        d = fields.mapping(where, d, optional=False)
        return cls(
            fields.string(f"{where}.part", d.get("part")),
            fields.string(f"{where}.memory", d.get("memory") or "host"),
            fields.number(f"{where}.mb", d.get("mb")),
            fields.number(f"{where}.steps", d.get("steps", 0), counts=True),
            fields.number(f"{where}.epoch", d.get("epoch", 0), counts=True),
            *(fields.string(f"{where}.{k}", d.get(k), optional=True)
              for k in ("what", "held_by", "fix")),
        )  # fmt: skip


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

    @classmethod
    def from_dict(cls, d: Any, where: str = "ledger.memory") -> RunMemory | None:
        """A ledger's ``memory`` (None where it has none), written by this toolkit or an
        older one (a field it lacks takes its default), or edited by anyone: ReportError
        names the first field not of its kind (MiB as numbers >= 0 or null, each part's and
        callback's figures, the growth and epoch records, the timeline's rows)."""
        if d is None:
            return None
        m = fields.mapping(where, d, optional=False)
        every_s = fields.number(f"{where}.every_s", m.get("every_s"))
        if every_s <= 0:
            raise fields.bad(f"{where}.every_s", every_s, "a number > 0")

        def parts(group: str) -> tuple[PartMemory, ...]:
            at = f"{where}.{group}"
            return tuple(PartMemory.from_dict(str(k), v, f"{at}.{k}")
                         for k, v in fields.mapping(at, m.get(group)).items())  # fmt: skip

        def each(key: str, read: Any) -> tuple[Any, ...]:
            at = f"{where}.{key}"
            return tuple(read(x, f"{at}[{i}]") for i, x in enumerate(fields.items(at, m.get(key))))

        unseen = m.get("device_unseen")
        return cls(
            every_s=every_s,
            parts=parts("parts"),
            callbacks=parts("callbacks"),
            devices=each("devices", lambda v, at: fields.string(at, v)),
            device_unseen=fields.string(f"{where}.device_unseen", unseen, optional=True),
            host_start_mb=fields.number(f"{where}.host_start_mb", m.get("host_start_mb"), True),
            host_peak_mb=fields.number(f"{where}.host_peak_mb", m.get("host_peak_mb"), True),
            device_peak_mb=fields.number(f"{where}.device_peak_mb", m.get("device_peak_mb"), True),
            growth=each("growth", Growth.from_dict),
            timeline=each("timeline", _sample),
            readings=fields.number(f"{where}.readings", m.get("readings", 0), counts=True),
            epochs=each("epochs", EpochMemory.from_dict),
        )


def _sample(row: Any, where: str) -> Sample:
    """One timeline row, ``[seconds, step, host MiB, device MiB or null, part]`` (an older
    report's rows end after the host's or the device's figure)."""
    if not isinstance(row, list | tuple) or not 3 <= len(row) <= 5:
        raise fields.bad(where, row, "a [seconds, step, host MiB, device MiB, part] row")
    part = fields.string(where, row[4]) if len(row) > 4 else ""
    device = fields.number(where, row[3] if len(row) > 3 else None, optional=True)
    step = fields.number(where, row[1], counts=True)
    return Sample(fields.number(where, row[0]), step, fields.number(where, row[2]), device, part)


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
    def from_dict(cls, d: Any, where: str) -> EpochMemory:
        d = fields.mapping(where, d, optional=False)
        return cls(
            fields.number(f"{where}.epoch", d.get("epoch"), optional=True, counts=True),
            fields.number(f"{where}.step", d.get("step", 0), counts=True),
            fields.number(f"{where}.host_mb", d.get("host_mb")),
            *(fields.number(f"{where}.{k}", d.get(k), optional=True)
              for k in ("device_mb", "device_peak_mb")),
        )  # fmt: skip
