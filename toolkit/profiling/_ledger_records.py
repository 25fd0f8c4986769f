"""The ledger's records: what crosses the door from the ledger (``toolkit.profiling._ledger``,
which builds them) to the report (``toolkit.report._ledger``, which renders them).

Small frozen dataclasses, pure Python (the report side reads them where no framework can be
imported). :class:`Ledger` is one fit's whole ledger; its :meth:`Ledger.to_dict` and
:meth:`Ledger.from_dict` are the JSON edge (``report.json``'s ``ledger`` object, the schema in
``docs/report.md``), and a ledger read from an older report reads as one written today (a
field it lacks takes its default). A ledger's fixes are the report's reading of it
(``toolkit.profiling._fixes``), not part of this record.

Each part and compile says how many samples it is made of and, where these repeat one thing,
their spread (``samples``, ``spread_s``): what a comparison of two runs needs to tell a change
from noise. A part of one sample (the start-up, a function's first compile) has no spread:
one run cannot say how much it varies.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from toolkit.core import _fields as fields
from toolkit.profiling._memory_records import RunMemory

PARTS = ("start_up", "compile", "steps", "input", "validation", "callbacks", "exit", "other")
FIT_CALL, TRAIN_BEGIN = "fit call", "train begin"  # where the ledger's clock starts


def spread(values: Sequence[float]) -> float | None:
    """1.4826 × the median absolute deviation of `values` (a standard deviation's estimate
    that one outlier does not move), or None under 3 values: too few to say."""
    if len(values) < 3:
        return None
    mid = statistics.median(values)
    return round(1.4826 * statistics.median(abs(v - mid) for v in values), 6)


# ---------------------------------------------------------------------------- tolerant reading


def _float(value: Any) -> float | None:
    """A finite number of a report, or None (a report is anyone's file: the reader checks
    the fields it must have, :meth:`Ledger.read`; the others are read leniently)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    number = _float(value)
    return int(number) if number is not None else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _records(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


# ---------------------------------------------------------------------------- the records


@dataclasses.dataclass(frozen=True)
class LedgerPart:
    """One part of the fit's wall time.

    Attributes:
        name: one of :data:`PARTS`.
        seconds: its seconds; None where it could not be seen (the input inside a traced
            step, the exit of a fit not timed around its call).
        samples: how many intervals it adds up (validation runs, executions, hook calls,
            compiles); 1 for a part that happens once a fit; 0: not counted (a report
            written before the ledger counted them).
        spread_s: the spread of one such interval (:func:`spread`) where at least three
            repeat one thing (a validation run, a step); None where one run cannot say.
    """

    name: str
    seconds: float | None
    samples: int = 1
    spread_s: float | None = None


@dataclasses.dataclass(frozen=True)
class Compile:
    """One compile, timed as its execution's excess over the function's median execution.

    Attributes:
        function: ``train``, ``evaluate``, or a function of Keras's own compiled outside the
            steps (``validation``, ``start-up``).
        first: the function's first call (else a recompile).
        epoch, step: where it happened (0-based); None outside the steps.
        seconds: its excess (the compile's cost to the run).
        backend_seconds: what the backend's own signal timed (JAX's compile events), or None.
        cause: why, in words (``first call``, ``input shape (17, 8) (was (32, 8))``).
        outside_steps: compiled by Keras outside any step (timed by the backend alone).
        samples: the executions the function's median came from (the excess's baseline).
        step_spread_s: their spread per step (:func:`spread`); None under three.
    """

    function: str
    first: bool
    epoch: int | None
    step: int | None
    seconds: float
    backend_seconds: float | None = None
    cause: str | None = None
    outside_steps: bool = False
    samples: int = 0
    step_spread_s: float | None = None

    def to_dict(self) -> dict[str, object]:
        out = {
            "function": self.function,
            "first": self.first,
            "epoch": self.epoch,
            "step": self.step,
            "seconds": self.seconds,
            "backend_seconds": self.backend_seconds,
            "cause": self.cause,
        }
        if self.outside_steps:
            out["outside_steps"] = True
        out.update(samples=self.samples, step_spread_s=self.step_spread_s)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Compile:
        return cls(
            function=str(d.get("function") or "?"),
            first=bool(d.get("first")),
            epoch=_int(d.get("epoch")),
            step=_int(d.get("step")),
            seconds=_float(d.get("seconds")) or 0.0,
            backend_seconds=_float(d.get("backend_seconds")),
            cause=_str(d.get("cause")),
            outside_steps=bool(d.get("outside_steps")),
            samples=_int(d.get("samples")) or 0,
            step_spread_s=_float(d.get("step_spread_s")),
        )


@dataclasses.dataclass(frozen=True)
class CallbackTime:
    """One callback's hooks on the fit's thread: its class name, seconds and hook calls;
    `spread_s` the spread of one call (:func:`spread`)."""

    name: str
    seconds: float
    calls: int
    spread_s: float | None = None


@dataclasses.dataclass(frozen=True)
class OtherSpan:
    """Unexplained time (the ``other`` part) and where in the fit it lies, in words."""

    seconds: float
    where: str


@dataclasses.dataclass(frozen=True)
class Reader:
    """Who acts on the ledger's fixes, and what the run had on: the report's facts about the
    run (its context and arguments), not the ledger's. Not written in the ledger's JSON: the
    report derives it when it is built or read.

    Attributes:
        runner: the toolkit's runner set the run up (a recipe, ``--model_fn``): its settings
            are the runner's, spelled as flags.
        compile_cache: the run kept compiled programs on disk already (``--compile_cache``).
    """

    runner: bool = False
    compile_cache: bool = False


@dataclasses.dataclass(frozen=True)
class Ledger:
    """One fit's ledger: its wall time in parts that add up to it, its callbacks by name, its
    compiles, and the counts a fix is predicted from.

    Read it by attribute (:attr:`part_seconds`: each part's seconds by name); its JSON, as
    ``report.json`` holds it, is :meth:`to_dict`.
    """

    source: str  # FIT_CALL: timed around the fit call; TRAIN_BEGIN: from train begin
    partial: bool
    wall_s: float
    parts: tuple[LedgerPart, ...]
    callbacks: tuple[CallbackTime, ...] = ()
    overlapped: tuple[tuple[str, float], ...] = ()  # (name, seconds) on Keras's callback thread
    compiles: tuple[Compile, ...] = ()  # the first calls and the largest recompiles
    recompiles: int = 0  # every recompile, counted
    signal: str | None = None  # how compiles were found, in words
    epochs: int = 0
    epochs_planned: int = 0
    steps: int = 0
    steps_per_epoch: int | None = None
    validation_calls: tuple[int, ...] = ()  # each finished validation's executions
    validation_runs_s: tuple[float, ...] = ()  # each validation's seconds (the first: no compile)
    step_s: tuple[tuple[str, float], ...] = ()  # (function, the median execution's s a step)
    backend: str = ""
    jit_compile: str | None = None  # as Keras holds it: "True", "False", "auto"
    unseen: tuple[str, ...] = ()
    input_read_s: float | None = None
    other_where: tuple[OtherSpan, ...] = ()
    reader: Reader = Reader()
    memory: RunMemory | None = None  # each part's memory, and growth (``_memory_records``)

    # ------------------------------------------------------------ reading

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

    @property
    def part_seconds(self) -> dict[str, float | None]:
        """Each part's seconds by name, in :data:`PARTS`' order (None: not seen)."""
        return {p.name: p.seconds for p in self.parts}

    def jit(self) -> bool:
        """The step was compiled with XLA (``jit_compile`` True, as Keras held it)."""
        return str(self.jit_compile).lower() == "true"

    # ------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, object]:
        """The ledger's JSON (``report.json``'s ``ledger``, less the report's ``fixes``)."""
        return {
            "from": self.source,
            "partial": self.partial,
            "wall_s": self.wall_s,
            "parts": self.part_seconds,
            "part_samples": {p.name: p.samples for p in self.parts},
            "part_spread_s": {p.name: p.spread_s for p in self.parts},
            "callbacks": {
                c.name: {"seconds": c.seconds, "calls": c.calls, "spread_s": c.spread_s}
                for c in self.callbacks
            },
            "overlapped": dict(self.overlapped),
            "compiles": [c.to_dict() for c in self.compiles],
            "recompiles": self.recompiles,
            "signal": self.signal,
            "epochs": self.epochs,
            "epochs_planned": self.epochs_planned,
            "steps": self.steps,
            "steps_per_epoch": self.steps_per_epoch,
            "validations": self.validations,
            "validation_calls": list(self.validation_calls),
            "validation_runs_s": list(self.validation_runs_s),
            "step_s": dict(self.step_s),
            "backend": self.backend,
            "jit_compile": self.jit_compile,
            "unseen": list(self.unseen),
            "input_read_s": self.input_read_s,
            "other_where": [{"seconds": o.seconds, "where": o.where} for o in self.other_where],
            "memory": self.memory.to_dict() if self.memory is not None else None,
        }

    @classmethod
    def read(cls, d: Mapping[str, Any]) -> Ledger:
        """A ledger from report.json, which anyone may have edited: each figure checked, and
        the parts adding up to the wall time (the ledger's promise), before it is read (its
        memory, by :meth:`RunMemory.from_dict`, which checks its own fields).

        Raises:
            ReportError: the first field not of its kind, named (``ledger.parts.steps``).
        """
        _check(d)
        return cls.from_dict(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], reader: Reader | None = None) -> Ledger:
        """A ledger from its JSON, written by this toolkit or an older one (a field it lacks
        takes its default; ``fixes`` is the report's, and read again from the figures).
        Lenient but for its memory, for a ledger this process wrote; :meth:`read` checks one
        from a file."""
        runs = [v for v in (_float(x) for x in d.get("validation_runs_s") or []) if v is not None]
        calls = [_int(x) or 0 for x in d.get("validation_calls") or []]
        if not calls:  # before each validation's calls were kept: its count, if any
            calls = [0] * max(_int(d.get("validations")) or 0, len(runs))
        return cls(
            source=FIT_CALL if d.get("from") == FIT_CALL else TRAIN_BEGIN,
            partial=bool(d.get("partial")),
            wall_s=_float(d.get("wall_s")) or 0.0,
            parts=_parts_of(d),
            callbacks=tuple(
                CallbackTime(
                    str(name),
                    _float(_mapping(c).get("seconds")) or 0.0,
                    _int(_mapping(c).get("calls")) or 0,
                    _float(_mapping(c).get("spread_s")),
                )
                for name, c in _mapping(d.get("callbacks")).items()
            ),
            overlapped=_pairs(d.get("overlapped")),
            compiles=tuple(Compile.from_dict(c) for c in _records(d.get("compiles"))),
            recompiles=_int(d.get("recompiles")) or 0,
            signal=_str(d.get("signal")),
            epochs=_int(d.get("epochs")) or 0,
            epochs_planned=_int(d.get("epochs_planned")) or 0,
            steps=_int(d.get("steps")) or 0,
            steps_per_epoch=_int(d.get("steps_per_epoch")),
            validation_calls=tuple(calls),
            validation_runs_s=tuple(runs),
            step_s=_pairs(d.get("step_s")),
            backend=str(d.get("backend") or ""),
            jit_compile=_str(d.get("jit_compile")),
            unseen=tuple(str(u) for u in d.get("unseen") or [] if u is not None),
            input_read_s=_float(d.get("input_read_s")),
            other_where=tuple(
                OtherSpan(_float(o.get("seconds")) or 0.0, str(o.get("where") or ""))
                for o in _records(d.get("other_where"))
            ),
            reader=reader or Reader(),
            memory=RunMemory.from_dict(d.get("memory")),
        )


def _parts_of(d: Mapping[str, Any]) -> tuple[LedgerPart, ...]:
    """The parts of a ledger's JSON, in :data:`PARTS`' order (a part it lacks: None)."""
    parts = _mapping(d.get("parts"))
    samples, spreads = _mapping(d.get("part_samples")), _mapping(d.get("part_spread_s"))
    return tuple(
        LedgerPart(
            name,
            _float(parts.get(name)),
            _int(samples.get(name)) or 0,  # 0: not counted (a report older than this)
            _float(spreads.get(name)),
        )
        for name in PARTS
    )


def _pairs(value: Any) -> tuple[tuple[str, float], ...]:
    pairs: Iterable[tuple[Any, Any]] = _mapping(value).items()
    return tuple((str(k), v) for k, v in ((k, _float(v)) for k, v in pairs) if v is not None)


# ---------------------------------------------------------------------------- strict reading


def _check(value: Any) -> None:
    """The ``ledger`` object (``docs/report.md``): its wall time and each part a number of
    seconds (a part may be null: not seen), its callbacks and compiles records."""
    ledger = fields.mapping("ledger", value)
    if not ledger:
        return
    fields.number("ledger.wall_s", ledger.get("wall_s"))
    for key in ("recompiles", "epochs", "epochs_planned", "steps", "steps_per_epoch",
                "validations"):  # fmt: skip
        fields.number(f"ledger.{key}", ledger.get(key), optional=True, counts=True)
    parts = fields.mapping("ledger.parts", ledger.get("parts"), optional=False)
    for key, part in parts.items():
        if part is not None and (isinstance(part, bool) or not isinstance(part, int | float)):
            raise fields.bad(f"ledger.parts.{key}", part, "a number of seconds or null")
        fields.number(f"ledger.parts.{key}", part, optional=True)
    _adds_up(parts, ledger["wall_s"])
    for key in ("part_samples", "part_spread_s"):
        for name, v in fields.mapping(f"ledger.{key}", ledger.get(key)).items():
            fields.number(f"ledger.{key}.{name}", v, optional=True, counts=key == "part_samples")
    for name, c in fields.mapping("ledger.callbacks", ledger.get("callbacks")).items():
        c = fields.mapping(f"ledger.callbacks.{name}", c, False)
        fields.number(f"ledger.callbacks.{name}.seconds", c.get("seconds"))
        fields.number(f"ledger.callbacks.{name}.calls", c.get("calls"), optional=True, counts=True)
    for name, seconds in fields.mapping("ledger.overlapped", ledger.get("overlapped")).items():
        fields.number(f"ledger.overlapped.{name}", seconds)
    for i, c in enumerate(fields.records("ledger.compiles", ledger.get("compiles"))):
        for key in ("seconds", "backend_seconds", "step_spread_s"):
            fields.number(f"ledger.compiles[{i}].{key}", c.get(key), optional=key != "seconds")
    for key in ("validation_runs_s", "validation_calls"):
        for i, v in enumerate(fields.items(f"ledger.{key}", ledger.get(key))):
            fields.number(f"ledger.{key}[{i}]", v, counts=key == "validation_calls")
    for name, v in fields.mapping("ledger.step_s", ledger.get("step_s")).items():
        fields.number(f"ledger.step_s.{name}", v)
    fields.number("ledger.input_read_s", ledger.get("input_read_s"), optional=True)
    other = 0.0
    for i, o in enumerate(fields.records("ledger.other_where", ledger.get("other_where"))):
        fields.number(f"ledger.other_where[{i}].seconds", o.get("seconds"))
        other += o["seconds"]
    if other > (parts.get("other") or 0.0) + _tolerance(ledger["wall_s"]):
        raise fields.bad(
            "ledger.other_where", other, f"spans within the other part's {parts.get('other')} s"
        )
    for i, f in enumerate(fields.records("ledger.fixes", ledger.get("fixes"))):
        if not isinstance(f.get("words"), str):
            raise fields.bad(f"ledger.fixes[{i}].words", f.get("words"), "a string")
        for key in ("saves_s", "seconds", "break_even_ms"):
            fields.number(f"ledger.fixes[{i}].{key}", f.get(key), optional=True)


def _tolerance(wall_s: float) -> float:
    """How far a ledger's parts may sum from its wall time: each is rounded to the µs."""
    return max(1e-3, 1e-4 * wall_s)


def _adds_up(parts: Mapping[str, Any], wall_s: float) -> None:
    """The ledger's promise: its parts add up to the fit's wall time."""
    total = sum(v for v in parts.values() if v is not None)
    if parts and abs(total - wall_s) > _tolerance(wall_s):
        raise fields.bad(
            "ledger.parts", f"{total:.6f} s in all", f"parts adding up to wall_s ({wall_s} s)"
        )
