"""The ledger's records: what crosses from the ledger to the report, which renders them.

Small frozen dataclasses, pure Python, built by ``toolkit.profiling._ledger`` and rendered by
``toolkit.report._ledger``. :meth:`Ledger.to_dict` and :meth:`Ledger.from_dict` are the JSON edge
(schema in ``docs/report.md``); an older report's ledger reads as one written today. Each part and
compile says its samples and, where they repeat one thing, their spread: what a comparison needs
to tell a change from noise."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core.stats import whole_percents
from toolkit.profiling._memory_records import RunMemory

PARTS = ("start_up", "compile", "steps", "input", "validation", "callbacks", "exit", "other")
FIT_CALL, TRAIN_BEGIN = "fit call", "train begin"  # where the ledger's clock starts


def spread(values: Sequence[float]) -> float | None:
    """1.4826 × the MAD of `values` (one outlier does not move it); None under 3 values."""
    if len(values) < 3:
        return None
    mid = statistics.median(values)
    return round(1.4826 * statistics.median(abs(v - mid) for v in values), 6)


@dataclasses.dataclass(frozen=True)
class LedgerPart:
    """One part of the fit's wall time: `name` (one of :data:`PARTS`), `seconds` (None: not seen),
    the `samples` (intervals) it adds up (0: not counted, an older report), and `spread_s`, one
    interval's spread where at least three repeat one thing."""

    name: str
    seconds: float | None
    samples: int = 1
    spread_s: float | None = None


@dataclasses.dataclass(frozen=True)
class Compile(fields.Record):
    """One compile, timed as its execution's excess over the function's median execution.

    Attributes:
        function: ``train``, ``evaluate``, or a function of Keras's own compiled outside the steps.
        first: the function's first call (else a recompile).
        epoch, step: where it happened (0-based); None outside the steps.
        seconds: its excess (the compile's cost to the run).
        backend_seconds: what the backend's own signal timed, or None.
        cause: why, in words (``input shape (17, 8) (was (32, 8))``).
        outside_steps: compiled by Keras outside any step.
        samples, step_spread_s: the executions the median came from, their spread per step."""

    function: str = fields.field(missing="?")
    first: bool = fields.field(missing=False)
    epoch: int | None = fields.field(missing=None)
    step: int | None = fields.field(missing=None)
    seconds: float
    backend_seconds: float | None = None
    cause: str | None = None
    outside_steps: bool = fields.field(False, omit=fields.omit_empty)
    samples: int = 0
    step_spread_s: float | None = None


@dataclasses.dataclass(frozen=True)
class CallbackTime:
    """One callback's hooks on the fit's thread: its class, seconds, calls, one call's spread."""

    name: str
    seconds: float
    calls: int
    spread_s: float | None = None


@dataclasses.dataclass(frozen=True)
class OtherSpan(fields.Record):
    """Unexplained time (the ``other`` part) and where in the fit it lies, in words."""

    seconds: float
    where: str = fields.field(missing="")


@dataclasses.dataclass(frozen=True)
class Reader:
    """Who acts on the ledger's fixes and what the run had on: derived, not in the ledger's JSON.
    `runner`: the toolkit's runner set the run up (settings spelled as flags); `compile_cache`:
    compiled programs were on disk already; `build_compile_s`: the backend's compile seconds
    while the model was built (None: none timed)."""

    runner: bool = False
    compile_cache: bool = False
    build_compile_s: float | None = None


def _pairs(pairs: Any, where: str) -> tuple[tuple[str, float], ...]:
    """``{name: seconds}`` as (name, seconds) pairs, each checked."""
    return tuple((str(k), fields.number(f"{where}.{k}", v))
                 for k, v in fields.mapping(where, pairs).items())  # fmt: skip


def _callbacks_json(callbacks: tuple[CallbackTime, ...]) -> dict[str, object]:
    return {c.name: {"seconds": c.seconds, "calls": c.calls, "spread_s": c.spread_s}
            for c in callbacks}  # fmt: skip


def _callbacks(named: Any, where: str) -> tuple[CallbackTime, ...]:
    return tuple(_callback(str(k), c, f"{where}.{k}")
                 for k, c in fields.mapping(where, named).items())  # fmt: skip


def _source(value: Any, where: str) -> str:
    return FIT_CALL if value == FIT_CALL else TRAIN_BEGIN


def _jit(value: Any, where: str) -> str | None:
    return None if value is None else str(value)  # an older report's: a bool


@dataclasses.dataclass(frozen=True)
class Ledger(fields.Record):
    """One fit's ledger: its wall time in parts that add up to it, its callbacks by name, its
    compiles, and the counts a fix is predicted from. Its JSON is :meth:`to_dict`."""

    WHERE = "ledger"
    EXTRA = ("validations",)

    source: str = fields.field(key="from", read=_source)  # FIT_CALL or TRAIN_BEGIN
    partial: bool = fields.field(missing=False)
    wall_s: float
    parts: tuple[LedgerPart, ...] = fields.field((), json=False)  # three mappings by name
    callbacks: tuple[CallbackTime, ...] = fields.field((), write=_callbacks_json, read=_callbacks)
    # (name, seconds) on Keras's callback thread
    overlapped: tuple[tuple[str, float], ...] = fields.field((), write=dict, read=_pairs)
    compiles: tuple[Compile, ...] = ()  # the first calls and the largest recompiles
    recompiles: int = 0  # every recompile, counted
    signal: str | None = None  # how compiles were found, in words
    epochs: int = 0
    epochs_planned: int = 0
    steps: int = 0
    steps_per_epoch: int | None = None
    validation_calls: tuple[int, ...] = ()  # each finished validation's executions
    validation_runs_s: tuple[float, ...] = ()  # each validation's seconds (the first: no compile)
    # (function, the median execution's s a step)
    step_s: tuple[tuple[str, float], ...] = fields.field((), write=dict, read=_pairs)
    backend: str = ""
    jit_compile: str | None = fields.field(None, read=_jit)  # as Keras: "True", "False", "auto"
    unjitted_by: tuple[str, ...] = ()  # a step not jitted: the layers that ruled XLA out
    unseen: tuple[str, ...] = ()
    input_read_s: float | None = None
    other_where: tuple[OtherSpan, ...] = ()
    # Of "other": seconds before the first step of epochs 2 on (each's new input iterator).
    epoch_starts_s: float | None = None
    # The longest of those waits: one epoch's is not every epoch's, and the fix says which.
    epoch_start_max_s: float | None = None
    adapter: str | None = None  # the Keras data adapter fit read through (ArrayDataAdapter)
    reader: Reader = fields.field(default_factory=Reader, json=False)
    # Each part's memory, and growth; left out of the repr, which would print every reading.
    memory: RunMemory | None = dataclasses.field(default=None, repr=False)

    @property
    def timed_call(self) -> bool:
        """Timed around the fit call (else from train begin: its start and exit unseen)."""
        return self.source == FIT_CALL

    @property
    def validations(self) -> int:
        return len(self.validation_calls)

    def part(self, name: str) -> LedgerPart:
        """The part `name` (seconds None where the ledger has none of that name)."""
        return next((p for p in self.parts if p.name == name), LedgerPart(name, None, 0))

    def seconds(self, name: str) -> float | None:
        return self.part(name).seconds

    def percents(self) -> dict[str, int]:
        """Each timed part's whole percent of the wall, rounded to add up: every screen's share."""
        seen = [p for p in self.parts if p.seconds is not None]
        shares = whole_percents([float(p.seconds or 0.0) for p in seen], self.wall_s)
        return dict(zip((p.name for p in seen), shares, strict=True))

    @property
    def part_seconds(self) -> dict[str, float | None]:
        """Each part's seconds by name, in :data:`PARTS`' order (None: not seen)."""
        return {p.name: p.seconds for p in self.parts}

    def jit(self) -> bool:
        """The step was compiled with XLA (``jit_compile`` True, as Keras held it)."""
        return str(self.jit_compile).lower() == "true"

    def to_dict(self) -> dict[str, object]:
        """The ledger's JSON (``report.json``'s ``ledger``, less the report's ``fixes``)."""
        out = super().to_dict()
        head = {key: out.pop(key) for key in ("from", "partial", "wall_s")}
        return {
            **head,  # then the parts, as report.json has always read
            "parts": self.part_seconds,
            "part_samples": {p.name: p.samples for p in self.parts},
            "part_spread_s": {p.name: p.spread_s for p in self.parts},
            **out,
        }

    @classmethod
    def read(cls, d: Any) -> Ledger:
        """A ledger from report.json, which anyone may have edited: each field checked, then its
        promises (parts add up to the wall, "other"'s spans within it, fixes well formed).

        Raises:
            ReportError: the first field not of its kind, named (``ledger.parts.steps``)."""
        ledger = cls.from_dict(fields.mapping("ledger", d, optional=False))
        parts = {p.name: p.seconds for p in ledger.parts if p.seconds is not None}
        _adds_up(fields.mapping("ledger.parts", d.get("parts"), optional=False), ledger.wall_s)
        other = sum(o.seconds for o in ledger.other_where)
        if (ledger.epoch_start_max_s or 0.0) > (ledger.epoch_starts_s or 0.0) + 1e-6:
            raise fields.bad(
                "ledger.epoch_start_max_s", ledger.epoch_start_max_s,
                f"one epoch's wait within epoch_starts_s ({ledger.epoch_starts_s} s)",
            )  # fmt: skip
        for key, within in (("other_where", other), ("epoch_starts_s", ledger.epoch_starts_s)):
            if (within or 0.0) > (parts.get("other") or 0.0) + _tolerance(ledger.wall_s):
                raise fields.bad(
                    f"ledger.{key}", within, f"spans within the other part's {parts.get('other')} s"
                )
        for i, f in enumerate(fields.records("ledger.fixes", d.get("fixes"))):
            fields.string(f"ledger.fixes[{i}].words", f.get("words"))
            for key in ("saves_s", "seconds", "break_even_ms"):
                _seconds(f, key, f"ledger.fixes[{i}]")
        return ledger

    @classmethod
    def from_dict(cls, d: Any, reader: Reader | None = None) -> Ledger:  # type: ignore[override]
        """A ledger from its JSON, ours or older (missing: default; wrong kind: ReportError)."""
        ledger = super().from_dict(d, "ledger")
        validations = _count(d, "validations", "ledger")
        # before each validation's calls were kept: its count, if any
        calls = ledger.validation_calls or (0,) * max(validations, len(ledger.validation_runs_s))
        return dataclasses.replace(
            ledger, parts=_parts_of(d), validation_calls=calls, reader=reader or Reader()
        )


def _seconds(d: Mapping[str, Any], key: str, where: str) -> float | None:
    return fields.number(f"{where}.{key}", d.get(key), optional=True)


def _count(d: Mapping[str, Any], key: str, where: str) -> int:
    """A count (0 where it is missing or null: not counted)."""
    return fields.number(f"{where}.{key}", d.get(key), optional=True, counts=True) or 0


def _named(d: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return fields.mapping(f"ledger.{key}", d.get(key))


def _callback(name: str, c: Any, where: str) -> CallbackTime:
    c = fields.mapping(where, c, optional=False)
    seconds = fields.number(f"{where}.seconds", c.get("seconds"))
    return CallbackTime(name, seconds, _count(c, "calls", where), _seconds(c, "spread_s", where))


def _parts_of(d: Mapping[str, Any]) -> tuple[LedgerPart, ...]:
    """The parts of a ledger's JSON, in :data:`PARTS`' order (a part it lacks: None)."""
    parts = fields.mapping("ledger.parts", d.get("parts"))
    for key, part in parts.items():  # a part may be null: not seen
        fields.number(f"ledger.parts.{key}", part, optional=True)
    samples, spreads = _named(d, "part_samples"), _named(d, "part_spread_s")
    return tuple(
        LedgerPart(
            name,
            parts.get(name),
            _count(samples, name, "ledger.part_samples"),  # 0: not counted (an older report)
            _seconds(spreads, name, "ledger.part_spread_s"),
        )
        for name in PARTS
    )


def _tolerance(wall_s: float) -> float:
    """How far a ledger's parts may sum from its wall time: each is rounded to the µs."""
    return max(1e-3, 1e-4 * wall_s)


def _adds_up(parts: Mapping[str, float | None], wall_s: float) -> None:
    """The ledger's promise: its parts add up to the fit's wall time."""
    total = sum(v for v in parts.values() if v is not None)
    if parts and abs(total - wall_s) > _tolerance(wall_s):
        raise fields.bad(
            "ledger.parts", f"{total:.6f} s in all", f"parts adding up to wall_s ({wall_s} s)"
        )
