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
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core.stats import whole_percents
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
    def from_dict(cls, d: Any, where: str) -> Compile:
        d = fields.mapping(where, d, optional=False)
        return cls(
            function=fields.string(f"{where}.function", d.get("function") or "?"),
            first=fields.flag(f"{where}.first", d.get("first")),
            epoch=fields.number(f"{where}.epoch", d.get("epoch"), optional=True, counts=True),
            step=fields.number(f"{where}.step", d.get("step"), optional=True, counts=True),
            seconds=fields.number(f"{where}.seconds", d.get("seconds")),
            backend_seconds=_seconds(d, "backend_seconds", where),
            cause=fields.string(f"{where}.cause", d.get("cause"), optional=True),
            outside_steps=fields.flag(f"{where}.outside_steps", d.get("outside_steps")),
            samples=_count(d, "samples", where),
            step_spread_s=_seconds(d, "step_spread_s", where),
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
        build_compile_s: what the backend timed compiling while the model was built, before
            the fit (JAX compiles each weight's initializer; None: none timed). The compile
            cache keeps those too: a later run builds the model sooner, outside the fit.
    """

    runner: bool = False
    compile_cache: bool = False
    build_compile_s: float | None = None


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
    unjitted_by: tuple[str, ...] = ()  # a step not jitted: the layers that ruled XLA out
    unseen: tuple[str, ...] = ()
    input_read_s: float | None = None
    other_where: tuple[OtherSpan, ...] = ()
    # Of "other": the seconds before the first step of epochs 2 on (each epoch's new input
    # iterator; on TensorFlow the last one's teardown waits for tf.data's autotune thread).
    epoch_starts_s: float | None = None
    adapter: str | None = None  # the Keras data adapter fit read through (ArrayDataAdapter)
    reader: Reader = Reader()
    # Each part's memory, and growth (``_memory_records``); left out of the repr, which
    # would print every reading (``print(timer.ledger())`` ran to 38 KB): read `.memory`.
    memory: RunMemory | None = dataclasses.field(default=None, repr=False)

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

    def percents(self) -> dict[str, int]:
        """Each timed part's whole percent of the wall, rounded as one (``whole_percents``:
        they add up as the parts do): the one rounding of a part's share on every screen, the
        table, the line, the fixes and the bar alike (17.5 % is 18 % on all of them)."""
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
            "unjitted_by": list(self.unjitted_by),
            "unseen": list(self.unseen),
            "input_read_s": self.input_read_s,
            "other_where": [{"seconds": o.seconds, "where": o.where} for o in self.other_where],
            "epoch_starts_s": self.epoch_starts_s,
            "adapter": self.adapter,
            "memory": self.memory.to_dict() if self.memory is not None else None,
        }

    @classmethod
    def read(cls, d: Any) -> Ledger:
        """A ledger from report.json, which anyone may have edited: each field checked as
        :meth:`from_dict` reads it, then the ledger's promises: its parts add up to the wall
        time, the spans of "other" lie within it, and the report's fixes are well formed.

        Raises:
            ReportError: the first field not of its kind, named (``ledger.parts.steps``).
        """
        ledger = cls.from_dict(fields.mapping("ledger", d, optional=False))
        parts = {p.name: p.seconds for p in ledger.parts if p.seconds is not None}
        _adds_up(fields.mapping("ledger.parts", d.get("parts"), optional=False), ledger.wall_s)
        other = sum(o.seconds for o in ledger.other_where)
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
    def from_dict(cls, d: Mapping[str, Any], reader: Reader | None = None) -> Ledger:
        """A ledger from its JSON, written by this toolkit or an older one (a field it lacks
        takes its default; ``fixes`` is the report's, and read again from the figures).
        A field of the wrong kind raises ReportError naming it (``ledger.parts.steps``)."""
        runs = _each(d, "validation_runs_s", lambda v, at: fields.number(at, v))
        calls = _each(d, "validation_calls", lambda v, at: fields.number(at, v, counts=True))
        validations = _count(d, "validations", "ledger")
        if not calls:  # before each validation's calls were kept: its count, if any
            calls = (0,) * max(validations, len(runs))
        unseen = _each(d, "unseen", lambda v, at: fields.string(at, v))
        jit = d.get("jit_compile")
        return cls(
            source=FIT_CALL if d.get("from") == FIT_CALL else TRAIN_BEGIN,
            partial=fields.flag("ledger.partial", d.get("partial")),
            wall_s=fields.number("ledger.wall_s", d.get("wall_s")),
            parts=_parts_of(d),
            callbacks=tuple(_callback(str(k), c) for k, c in _named(d, "callbacks").items()),
            overlapped=_pairs(d, "overlapped"),
            compiles=_each(d, "compiles", Compile.from_dict),
            recompiles=_count(d, "recompiles", "ledger"),
            signal=fields.string("ledger.signal", d.get("signal"), optional=True),
            epochs=_count(d, "epochs", "ledger"),
            epochs_planned=_count(d, "epochs_planned", "ledger"),
            steps=_count(d, "steps", "ledger"),
            steps_per_epoch=fields.number(
                "ledger.steps_per_epoch", d.get("steps_per_epoch"), optional=True, counts=True
            ),
            validation_calls=calls,
            validation_runs_s=runs,
            step_s=_pairs(d, "step_s"),
            backend=fields.string("ledger.backend", d.get("backend") or ""),
            jit_compile=None if jit is None else str(jit),  # an older report's: a bool
            unjitted_by=_each(d, "unjitted_by", lambda v, at: fields.string(at, v)),
            unseen=unseen,
            input_read_s=_seconds(d, "input_read_s", "ledger"),
            other_where=_each(d, "other_where", _other),
            epoch_starts_s=_seconds(d, "epoch_starts_s", "ledger"),
            adapter=fields.string("ledger.adapter", d.get("adapter"), optional=True),
            reader=reader or Reader(),
            memory=RunMemory.from_dict(d.get("memory"), "ledger.memory"),
        )


def _seconds(d: Mapping[str, Any], key: str, where: str) -> float | None:
    return fields.number(f"{where}.{key}", d.get(key), optional=True)


def _count(d: Mapping[str, Any], key: str, where: str) -> int:
    """A count (0 where it is missing or null: not counted)."""
    return fields.number(f"{where}.{key}", d.get(key), optional=True, counts=True) or 0


def _named(d: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return fields.mapping(f"ledger.{key}", d.get(key))


def _each(d: Mapping[str, Any], key: str, read: Any) -> tuple[Any, ...]:
    at = f"ledger.{key}"
    return tuple(read(v, f"{at}[{i}]") for i, v in enumerate(fields.items(at, d.get(key))))


def _pairs(d: Mapping[str, Any], key: str) -> tuple[tuple[str, float], ...]:
    return tuple((str(k), fields.number(f"ledger.{key}.{k}", v))
                 for k, v in _named(d, key).items())  # fmt: skip


def _callback(name: str, c: Any) -> CallbackTime:
    where = f"ledger.callbacks.{name}"
    c = fields.mapping(where, c, optional=False)
    seconds = fields.number(f"{where}.seconds", c.get("seconds"))
    return CallbackTime(name, seconds, _count(c, "calls", where), _seconds(c, "spread_s", where))


def _other(o: Any, where: str) -> OtherSpan:
    o = fields.mapping(where, o, optional=False)
    return OtherSpan(fields.number(f"{where}.seconds", o.get("seconds")),
                     fields.string(f"{where}.where", o.get("where") or ""))  # fmt: skip


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


def _adds_up(parts: Mapping[str, Any], wall_s: float) -> None:
    """The ledger's promise: its parts add up to the fit's wall time."""
    total = sum(v for v in parts.values() if v is not None)
    if parts and abs(total - wall_s) > _tolerance(wall_s):
        raise fields.bad(
            "ledger.parts", f"{total:.6f} s in all", f"parts adding up to wall_s ({wall_s} s)"
        )
