"""The search engine: candidates and spaces (derived from the settings table), the search, and the
never-slower choice. Framework-free: it measures through a function it is handed, so every rule is
tested with injected clocks. ``tune`` (one process) and ``chooser`` (fresh processes) share
:data:`MIN_GAIN`: a pick must beat the defaults by more, head to head, or the defaults stay."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core._advice import Setting
from toolkit.core._gain import MIN_GAIN  # the one minimum gain, said with the Gain record
from toolkit.core.stats import DEFAULT_WARMUP_STEPS, whole_calls
from toolkit.runner.config import (
    LOOP,
    SEARCHED_SETTINGS,
    SETTINGS,
    Searched,
    as_flags,
    set_model_settings,
)

__all__ = [
    "Candidate",
    "Space",
    "Trial",
    "search",
]

FINALISTS = 3  # the search's fastest candidates measured again against the defaults
# The first XLA (or torch.compile) compile is expected to take this many times the longest without
# (a first call cannot be stopped: err long); none measured, XLA_FIRST_COST × the slowest run.
XLA_COMPILE_FACTOR = 4.0
XLA_FIRST_COST = 3.0
# A window the budget cannot fit runs shorter where this share of the others' fits; else untried.
SAMPLE_SHARE = 0.25
MIN_TIMED_CALLS = 3  # timed calls a pick must leave its run (after the first and the warm-up)


@dataclasses.dataclass(frozen=True)
class RunShape(fields.Record):
    """The run a pick is for: its epochs and an epoch's length (fixed, or `examples` at
    `batch_size`). The search offers only loops it can time (:meth:`allows`): none longer than an
    epoch (Keras ends a call with it), none leaving only a first call and warm-up. Unknown: any."""

    epochs: int = 1
    steps_per_epoch: int | None = None
    examples: int | None = None
    batch_size: int | None = None
    warmup_steps: int = DEFAULT_WARMUP_STEPS

    def epoch_batches(self, candidate: Any) -> int | None:
        """Keras batches an epoch under `candidate` (a one-pass epoch drops its partial last)."""
        fused = max(1, candidate.fused_steps or 1)
        if self.steps_per_epoch is not None:
            return self.steps_per_epoch // fused
        batch = candidate.batch_size or self.batch_size
        if self.examples is None or not batch:
            return None
        return self.examples // (batch * fused)

    def timed_calls(self, candidate: Any) -> int | None:
        """Calls StepTimer times in the whole run (None: the run's length is unknown)."""
        batches = self.epoch_batches(candidate)
        if batches is None:
            return None
        if batches < 1:
            return 0
        per_execution = min(max(1, candidate.steps_per_execution or 1), batches)
        calls = self.epochs * -(-batches // per_execution)
        per_call = per_execution * max(1, candidate.fused_steps or 1)
        return max(0, calls - 1 - -(-self.warmup_steps // per_call))

    def why_not(self, candidate: Any) -> str | None:
        """Why the run cannot take `candidate`, in words; None if it can (the config's own can)."""
        if candidate.per_call == 1 and not candidate.batch_size:
            return None
        fused = max(1, candidate.fused_steps or 1)
        if self.steps_per_epoch is not None and self.steps_per_epoch % fused:
            return f"{self.steps_per_epoch} steps an epoch are not a multiple of {fused} fused"
        batches = self.epoch_batches(candidate)
        spe = max(1, candidate.steps_per_execution or 1)
        if batches is not None and 0 < batches < spe:  # Keras would cut every call short
            return f"{spe} steps per execution are more than an epoch's {batches} batches"
        timed = self.timed_calls(candidate)
        if timed is not None and timed < MIN_TIMED_CALLS:
            return (
                f"{candidate.per_call} steps a call leave the run {timed} timed call(s) "
                f"after its first and warm-up (at least {MIN_TIMED_CALLS})"
            )
        return None

    def allows(self, candidate: Any) -> bool:
        return self.why_not(candidate) is None


class _Candidate(fields.Record):
    """One setting of the searched knobs, a field each (label, flags, compile args: derived)."""

    SEARCHED: tuple[tuple[str, Searched], ...] = ()

    @property
    def per_call(self) -> int:
        """Training steps in one call of the compiled function: the product of its loops."""
        calls = 1
        for name, how in self.SEARCHED:
            if how.role == LOOP:
                calls *= getattr(self, name) or 1
        return calls

    def values(self) -> dict[str, Setting]:
        """Each searched setting's value, by name (None: the config's own)."""
        return {name: getattr(self, name) for name, _how in self.SEARCHED}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], field: str = "candidate") -> Any:
        """The candidate :meth:`to_dict` wrote, each value checked against its setting's kind (a
        cache file may hold JSON of any kind).

        Raises:
            ValueError: one line naming the field and its value."""
        if not isinstance(values, dict):
            raise fields.bad(field, values, "an object")
        unknown = sorted(set(values) - {name for name, _how in cls.SEARCHED})
        if unknown:
            raise ValueError(f"field {field}.{unknown[0]} is no searched setting")
        for name, value in values.items():
            kind = _KIND_OF[name]
            if not _of_kind(value, kind):
                raise fields.bad(f"{field}.{name}", value, _words(kind))
        return cls(**values)

    def compile_kwargs(self) -> dict[str, Setting]:
        """The ``model.compile`` arguments that select these settings for your own model."""
        return {name: getattr(self, name) for name, how in self.SEARCHED if how.compile_arg}

    def apply(self, model: Any) -> None:
        """Sets these in compiled `model` without recompiling (for a ``compile`` refusing them)."""
        set_model_settings(model, {k: v for k, v in self.compile_kwargs().items() if v is not None})

    def flags(self) -> str:
        """The recipe flags that select these settings, for people to read."""
        return as_flags(self.values())

    def label(self) -> str:
        shown = (how.label(getattr(self, name)) for name, how in self.SEARCHED)
        return " ".join(part for part in shown if part is not None)

    def changes(self, base: Any) -> str:
        """What it sets other than `base`, as its label says it (``xla spe=4``)."""
        shown = (
            how.label(getattr(self, name))
            for name, how in self.SEARCHED
            if getattr(self, name) != getattr(base, name)
        )
        return " ".join(part for part in shown if part is not None) or self.label()


_KIND_OF = {f.name: str(f.type) for f in SETTINGS}  # as TrainConfig says: "int", "bool | None"
_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int, "float": (int, float), "str": str, "bool": bool
}  # fmt: skip


def _of_kind(value: Any, kind: str) -> bool:
    """Whether `value` (from JSON) is None or of `kind`, a count at least 1 (unknown kinds pass)."""
    if value is None:
        return True
    for name in (part.strip() for part in kind.split("|")):
        if name not in _TYPES:
            return name != "None"
        if isinstance(value, bool) and name != "bool":
            continue
        if isinstance(value, _TYPES[name]):
            return name != "int" or value >= 1
    return False


def _words(kind: str) -> str:
    """`kind` as a person reads it: ``true, false or null``."""
    words = {"int": "an integer >= 1", "float": "a number", "str": "a string"}
    words["bool"] = "true, false"
    said = [words.get(part.strip(), part.strip()) for part in kind.split("|")]
    return ", ".join(s for s in said if s != "None") + " or null"


class _Space:
    """The values each knob may take, the Keras default first. A field per searched setting, and
    ``max_steps_per_call`` (longer calls cost more to measure than they gain), ``run`` (the
    :class:`RunShape` the pick is for; None: unknown), ``cut`` (why axes hold the default alone)."""

    SEARCHED: tuple[tuple[str, Searched], ...] = ()
    CANDIDATE: type = _Candidate

    def axes(self) -> list[tuple[str, Sequence[Any]]]:
        return [(name, getattr(self, name)) for name, _how in self.SEARCHED]

    def allows(self, candidate: Any) -> bool:
        """Within ``max_steps_per_call``, and a loop `run` can time (None: any)."""
        run = self.run  # type: ignore[attr-defined]
        if run is not None and not run.allows(candidate):
            return False
        return candidate.per_call == 1 or candidate.per_call <= self.max_steps_per_call  # type: ignore[attr-defined]

    def grid(self) -> list[Any]:
        """Every combination the space allows (what an exhaustive sweep measures)."""
        out = [self.CANDIDATE()]
        for name, values in self.axes():
            out = [dataclasses.replace(c, **{name: v}) for c in out for v in values]
        return [c for c in out if self.allows(c)]

    def defaults(self) -> Any:
        return self.CANDIDATE(**{name: values[0] for name, values in self.axes()})


def knob_types(searched: Sequence[tuple[str, Searched]]) -> tuple[type, type]:
    """``(Candidate, Space)`` for a settings table: a setting added to it is a knob everywhere."""
    table = tuple(searched)
    candidate = dataclasses.make_dataclass(
        "Candidate",
        [(name, Any, dataclasses.field(default=how.default)) for name, how in table],
        bases=(_Candidate,),
        frozen=True,
        namespace={"SEARCHED": table, "__module__": __name__, "__doc__": _Candidate.__doc__},
    )
    space = dataclasses.make_dataclass(
        "Space",
        [
            *(
                (name, Sequence[Any], dataclasses.field(default=how.values(None)))
                for name, how in table
            ),
            ("max_steps_per_call", int, dataclasses.field(default=256)),
            ("run", Any, dataclasses.field(default=None)),
            ("cut", tuple, dataclasses.field(default=())),
        ],
        bases=(_Space,),
        frozen=True,
        namespace={
            "SEARCHED": table,
            "CANDIDATE": candidate,
            "__module__": __name__,
            "__doc__": _Space.__doc__,
        },
    )
    return candidate, space


Candidate, Space = knob_types(SEARCHED_SETTINGS)


@dataclasses.dataclass(frozen=True)
class Untried(fields.Record):
    """A candidate left untried: ``needs_s`` to measure (``compile_s`` of it), ``spent_s`` then."""

    LENIENT = True  # a cached result's: one this version cannot read is left out

    candidate: Candidate
    needs_s: float = fields.field(missing=0.0)
    compile_s: float | None = fields.field(missing=None)
    spent_s: float = fields.field(missing=0.0)
    reserve_s: float = 0.0  # held back then for the head-to-head rounds

    def budget_s(self) -> float:
        """The budget that would have measured it."""
        return self.spent_s + self.needs_s + self.reserve_s


@dataclasses.dataclass
class Trial(fields.Record):
    """One measured (or failed) candidate (its JSON: its fields and its label)."""

    EXTRA = ("label",)

    candidate: Candidate
    examples_per_sec: float | None
    seconds: float
    error: str | None = None
    rates: list[float] = dataclasses.field(default_factory=list)  # every measurement
    compile_s: float | None = None  # its first call beyond its steps (None: not measured)
    sampled: bool = False  # measured over a window shorter than the others' (the budget's)

    def __post_init__(self) -> None:
        if not self.rates and self.examples_per_sec is not None:
            self.rates = [self.examples_per_sec]

    def add(self, rate: float, seconds: float) -> None:
        """One more measurement: the rate becomes the median of all of them."""
        self.rates.append(rate)
        self.examples_per_sec = statistics.median(self.rates)
        self.seconds += seconds

    def spread(self) -> str:
        """``"±4%"``: half the min-max range of the rates, relative to their median."""
        if len(self.rates) < 2 or not self.examples_per_sec:
            return ""
        return f"±{(max(self.rates) - min(self.rates)) / 2 / self.examples_per_sec:.0%}"

    @property
    def label(self) -> str:
        return self.candidate.label()


def order(trial: Trial) -> tuple[float, int]:
    """Faster first; at the same rate, the shorter loop (control back to Python sooner)."""
    return (trial.examples_per_sec or 0.0, -trial.candidate.per_call)


def choose(trials: Sequence[Trial], min_gain: float = MIN_GAIN) -> Candidate:
    """The fastest measured, unless it beats the defaults (``trials[0]``) by <= `min_gain`."""
    defaults = trials[0]
    measured = [t for t in trials if t.examples_per_sec is not None]
    if not measured:
        return defaults.candidate
    best = max(measured, key=order)
    if defaults.examples_per_sec is None:
        return best.candidate
    if best.examples_per_sec > defaults.examples_per_sec * (1 + min_gain):
        return best.candidate
    return defaults.candidate


# A shorter steps_per_execution is not measured where the per-call overhead says it would lose by
# more than this: it changes no per-step work, so only noise could make it win.
PRUNE_LOSS = 0.04


@dataclasses.dataclass(frozen=True)
class WholeRun(fields.Record):
    """The defaults and a pick over a whole run (compile plus steps), and where the pick pays."""

    LENIENT = True

    examples: int
    steps: int
    defaults_s: float
    pick_s: float
    extra_compile_s: float = fields.field(read=fields.signed)  # < 0: the pick compiles sooner
    break_even_steps: int | None = fields.field(missing=None)
    pick_wins: bool


def whole_run(defaults: Trial, best: Trial, examples: int | None, batch: int) -> WholeRun | None:
    """The two over a whole run of `examples` (:class:`WholeRun`); None: length/compile unknown."""
    if not examples or defaults.examples_per_sec is None or best.examples_per_sec is None:
        return None
    if defaults.compile_s is None or best.compile_s is None:
        return None
    defaults_s = defaults.compile_s + examples / defaults.examples_per_sec
    pick_s = best.compile_s + examples / best.examples_per_sec
    extra = best.compile_s - defaults.compile_s
    gain = 1 / defaults.examples_per_sec - 1 / best.examples_per_sec  # s an example
    even = None
    if extra > 0:
        even = math.ceil(extra / gain / batch) if gain > 0 else None
    steps = -(-examples // batch)
    return WholeRun(examples, steps, defaults_s, pick_s, extra, even, pick_s < defaults_s)


def call_overhead(a: Trial, b: Trial) -> float | None:
    """Seconds per example a call costs, from two trials differing only in their loops (``t = s + o
    / L``); None when the longer loop was not faster."""
    la, lb = (t.candidate.per_call for t in (a, b))
    if la == lb or not a.examples_per_sec or not b.examples_per_sec:
        return None
    o = (1 / a.examples_per_sec - 1 / b.examples_per_sec) / (1 / la - 1 / lb)
    return o if o > 0 else None


def search(
    measure: Callable[[Candidate], float],
    space: Space,
    *,
    budget_s: float = 120.0,
    passes: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[str], Any] | None = None,
    first: Trial | None = None,
    spent_s: float = 0.0,
    shown_budget_s: float | None = None,
    compile_of: Callable[[Candidate], float | None] | None = None,
    sample: Callable[[Candidate, float], float] | None = None,
    reserve_s: float = 0.0,
) -> tuple[list[Trial], list[Untried]]:
    """Loops first, at their longest; then each other knob; then the loops shorter.

    1. The defaults (`first` when already measured).
    2. The loops' corner: fused steps at their longest, then steps per execution within
       ``space.max_steps_per_call``, where overhead no longer hides the other knobs' effect.
    3. Each other knob (XLA, precision, batch size), every value, the rest at the best so far;
       again while one changed the best (they interact).
    4. Each loop one value shorter while not slower (control back to Python sooner); steps per
       execution not where the call overhead says it loses by more than :data:`PRUNE_LOSS`.

    With `passes` > 1, steps 3 and 4 again while the best changes; ``rounds.confirm`` then settles
    the fastest. A candidate starts only where its :func:`expected_cost` ends within the budget,
    else runs a shorter window (`sample`, at least :data:`SAMPLE_SHARE`) or is left untried.

    Args:
        measure: returns examples/s or raises (a failed trial).
        first: the defaults' trial when already measured; `spent_s` the budget it used.
        shown_budget_s: the budget the progress lines count against.
        compile_of: a measured candidate's compile cost (None: unknown).
        sample: ``sample(candidate, window_s)``, examples/s over a shorter window.
        reserve_s: held back for the head-to-head rounds while a candidate beats the defaults.

    Returns:
        The trials in the order run (defaults first) and the candidates left untried."""
    state = _Search(
        measure, space, budget_s, clock, progress, first, spent_s, shown_budget_s,
        compile_of=compile_of, sample=sample, reserve_s=reserve_s,
    )  # fmt: skip
    axes = dict(space.axes())
    loops = [name for name, how in space.SEARCHED if how.role == LOOP and len(axes[name]) > 1]
    state.corner(loops, axes)
    knobs = [
        name
        for name, how in sorted(space.SEARCHED, key=lambda item: item[1].order)
        if how.role != LOOP
    ]
    for _ in range(passes):
        before = state.best.candidate
        state.knobs(knobs, axes)
        for name in loops:
            state.loop(name, axes[name])
        if state.best.candidate == before:
            break
    return state.trials, list(state.untried.values())


def _faster(trial: Trial | None, than: Trial) -> bool:
    if trial is None or trial.examples_per_sec is None:
        return False
    return than.examples_per_sec is None or trial.examples_per_sec > than.examples_per_sec


class _Search:
    """One :func:`search`'s state: the trials, the best, the corner's call overhead, the untried."""

    def __init__(
        self,
        measure: Callable[[Candidate], float],
        space: Space,
        budget_s: float,
        clock: Callable[[], float],
        progress: Callable[[str], Any] | None,
        first: Trial | None,
        spent_s: float,
        shown_budget_s: float | None = None,
        *,
        compile_of: Callable[[Candidate], float | None] | None = None,
        sample: Callable[[Candidate, float], float] | None = None,
        reserve_s: float = 0.0,
    ) -> None:
        self.measure, self.space, self.budget_s = measure, space, budget_s
        self.shown_budget_s = shown_budget_s or budget_s
        self.clock, self.progress = clock, progress
        self.start = clock() - spent_s
        self.trials: list[Trial] = [first] if first else []
        self.seen: dict[Candidate, Trial] = {first.candidate: first} if first else {}
        self.untried: dict[Candidate, Untried] = {}
        self.compile_of, self.sample, self.reserve_s = compile_of, sample, reserve_s
        self.overhead: float | None = None
        best = self.run(space.defaults())
        assert best is not None  # the first candidate is always measured
        self.best = best

    @property
    def exhausted(self) -> bool:
        """Whether the budget left a candidate the search wanted untried."""
        return bool(self.untried)

    def run(self, candidate: Candidate) -> Trial | None:
        """The candidate's trial (measured now or before); None: the budget has no room for it."""
        if candidate in self.seen:
            return self.seen[candidate]
        if candidate in self.untried:
            return None
        # The budget is a promise, not a start deadline: an overrun is shortened or not started.
        trials, clock = self.trials, self.clock
        window_s = None
        if trials:
            spent = clock() - self.start
            compile_s, window = expected_cost(candidate, trials)
            reserve = self.reserve_s if self.best.candidate != trials[0].candidate else 0.0
            left = self.budget_s - reserve - spent
            if compile_s + window > left:
                short = left - compile_s
                if self.sample is None or window <= 0 or short < SAMPLE_SHARE * window:
                    cost = Untried(candidate, compile_s + window, compile_s or None, spent, reserve)
                    self.untried[candidate] = cost
                    return None
                window_s = short
        t0 = clock()
        try:
            if window_s is None:
                rate, error = float(self.measure(candidate)), None
            else:
                rate, error = float(self.sample(candidate, window_s)), None  # type: ignore[misc]
        except Exception as e:  # noqa: BLE001 - a failing candidate is a result, not a crash
            rate, error = None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        trial = Trial(candidate, rate, clock() - t0, error, sampled=window_s is not None)
        if self.compile_of is not None and rate is not None:
            trial.compile_s = self.compile_of(candidate)
        self.seen[candidate] = trial
        trials.append(trial)
        if self.progress is not None:
            shown = f"{rate:,.1f} examples/s" if rate is not None else f"failed ({error})"
            if window_s is not None and rate is not None:
                shown += f" (a {window_s:.0f} s window: what the budget held)"
            spent = clock() - self.start
            self.progress(
                f"[{len(trials)} | {spent:.0f}/{self.shown_budget_s:.0f} s] {candidate.label()}: "
                + shown
            )
        return trial

    def at_best(self, **changes: Any) -> Trial | None:
        candidate = dataclasses.replace(self.best.candidate, **changes)
        return self.run(candidate) if self.space.allows(candidate) else None

    def take_if_faster(self, trial: Trial | None) -> None:
        if _faster(trial, self.best):
            self.best = trial  # type: ignore[assignment]

    def corner(self, loops: list[str], axes: dict[str, Sequence[Any]]) -> None:
        """Fused steps longest, then steps per execution as long as allowed; sets the overhead."""
        if not loops:
            return
        longest = dataclasses.replace(self.best.candidate, steps_per_execution=1, fused_steps=1)
        for name in reversed(loops):
            fits = [
                v for v in axes[name]
                if self.space.allows(dataclasses.replace(longest, **{name: v}))
            ]  # fmt: skip
            longest = dataclasses.replace(longest, **{name: max(fits)})
        corner = self.at_best(**{name: getattr(longest, name) for name in loops})
        self.overhead = call_overhead(self.best, corner) if corner is not None else None
        self.take_if_faster(corner)

    def knobs(self, knobs: list[str], axes: dict[str, Sequence[Any]]) -> None:
        """Other knobs at the best, again while it changes (they interact: XLA fuses the casts)."""
        settled = None
        while settled != self.best.candidate:
            settled = self.best.candidate
            for name in knobs:
                for value in axes[name]:
                    self.take_if_faster(self.at_best(**{name: value}))

    def loop(self, name: str, axis: Sequence[Any]) -> None:
        """One loop down from the best while not slower; from a best short of it, longest first."""
        values = [
            v for v in sorted(axis)
            if self.space.allows(dataclasses.replace(self.best.candidate, **{name: v}))
        ]  # fmt: skip
        if getattr(self.best.candidate, name) != values[-1]:
            for value in reversed(values):
                self.take_if_faster(self.at_best(**{name: value}))
            return
        for value in reversed(values[:-1]):
            if self.slower_for_sure(name, value):
                break
            trial = self.at_best(**{name: value})
            if trial is None or trial.examples_per_sec is None:
                break
            if self.best.examples_per_sec is not None and (
                trial.examples_per_sec < self.best.examples_per_sec
            ):
                break
            self.best = trial

    def slower_for_sure(self, name: str, value: int) -> bool:
        """Whether the call overhead says `name` = `value` loses (steps per execution only)."""
        best = self.best
        if name != "steps_per_execution" or self.overhead is None or not best.examples_per_sec:
            return False
        now, then = best.candidate.per_call, value * best.candidate.fused_steps
        return self.overhead * (1 / then - 1 / now) * best.examples_per_sec > PRUNE_LOSS


def expected_cost(candidate: Candidate, trials: Sequence[Trial]) -> tuple[float, float]:
    """``(compile, window)`` to measure `candidate`: its kind's median in `trials`; for the first
    XLA one XLA_COMPILE_FACTOR × the longest compile without, else XLA_FIRST_COST × the slowest."""
    whole = [t for t in trials if t.seconds > 0 and not t.sampled] or list(trials)
    same = [t for t in whole if t.candidate.jit_compile == candidate.jit_compile]
    compiles = [t.compile_s for t in (same or whole) if t.compile_s is not None]
    if same or not candidate.jit_compile:
        total = statistics.median(t.seconds for t in (same or whole))
        compile_s = min(statistics.median(compiles), total) if compiles else 0.0
        return compile_s, total - compile_s
    if not compiles:
        return XLA_FIRST_COST * max(t.seconds for t in whole), 0.0
    windows = [max(t.seconds - (t.compile_s or 0.0), 0.0) for t in whole]
    return XLA_COMPILE_FACTOR * max(compiles), statistics.median(windows)


def window_steps(candidate: Candidate, steps: int, calls: int = 3) -> tuple[int, int]:
    """``(warm-up, total)`` steps: first call (two if short) untimed, then >= `steps`, `calls`."""
    per_call = candidate.per_call
    timed = whole_calls(max(steps, calls * per_call), per_call)
    warmup = per_call if per_call < steps else 0
    return warmup, per_call + warmup + timed
