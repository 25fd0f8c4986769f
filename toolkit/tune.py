"""A measured search for the fastest training settings, cached per model, input and machine.

Folklore says XLA and mixed precision make training faster; on a 2-core CPU they often make it
slower (a small ResNet here: ``jit_compile`` 0.85×, ``mixed_bfloat16`` 0.5×), while for a small
MLP ``jit_compile`` with many steps per call is 3.9× faster. So :func:`tune` measures:

* each candidate (precision policy, ``jit_compile``, ``steps_per_execution``, ``fused_steps``,
  optionally the batch size) is a short real ``fit`` through the runner: its own warm-up
  (the first call, and one more where calls are short), then a timed window; the rate is
  examples/s over the window (:class:`TaskMeasure`: the data made once for the search);
* the Keras defaults are always the first candidate, and a pick must beat them by more than
  `min_gain` (2 %) head to head, in rounds of the finalists kept built (:func:`confirm`), so
  the search never hands back settings slower than the defaults and one lucky window wins
  nothing;
* a candidate that fails (XLA not available on the device, a precision the device can't
  run...) is recorded with the reason and skipped;
* the search goes to the loops' longest corner first, then tries each other setting (again
  while one changes the best), then shortens the loops while that is not slower and could
  win (:func:`search`: 4-6 builds where the grid of the seed MLP's space has 16-32), within
  a time budget, with a progress line per candidate and a result table; a run that cannot
  win (already 4x what the best needed for its whole window) is stopped early;
* the winner is cached in ``$TOOLKIT_CACHE_DIR/tune.json`` under a key of the model's
  configuration, the input's spec and batch size, and the machine (CPU model, devices,
  TensorFlow, Keras and toolkit versions): a new TF version is a new key. ``autotune`` uses
  the cache or runs the search.

The device is the config's: visible devices are fixed once TensorFlow's runtime starts, so
comparing CPU with GPU takes one process per device (``python -m toolkit tune --recipe R
--device=cpu`` and ``--device=gpu``, each cached under its own key).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from toolkit import backend, compat, machine
from toolkit import progress as tk_progress
from toolkit.config import TrainConfig
from toolkit.files import read_json, update_json

__all__ = [
    "Candidate",
    "Space",
    "TaskMeasure",
    "Trial",
    "TuneResult",
    "apply",
    "autotune",
    "cache_key",
    "choose",
    "confirm",
    "default_space",
    "measure_candidate",
    "model_signature",
    "search",
    "tune",
]

CACHE_FILE = "tune.json"
MIN_GAIN = 0.02
FINALISTS = 3  # the search's fastest candidates measured again against the defaults
MAX_ROUNDS = 4  # head-to-head rounds at most (at least 2 when the budget allows)
SEARCH_SHARE = 0.7  # of the budget for the search; the rest is for the head-to-head
UNCONFIRMED_GAIN = 0.10  # the gain one window must show when no head-to-head fit the budget
SEARCH_CALLS = 1  # timed executions per candidate in the search (at least `steps` steps)
LIVE_WINDOW_S = 0.25  # a kept finalist's window when measured again, at least (seconds)
LIVE_PARAMS = 50_000_000  # models with more weights are rebuilt, not kept, for the rounds
NEAR_LEADER = 0.8  # a finalist's search rate is at least this share of the leader's
DECISIVE_GAIN = 0.25  # won by this much in the search and in round 1: one round is enough
# A candidate whose run has taken this many times what the best so far needed for its whole
# window is stopped: it cannot win (a small CNN's XLA candidate ran 35× slower, for 46 s).
HOPELESS = 4.0
HOPELESS_FLOOR_S = 2.0  # ...and never before this much of its run (after the first call)
# The first jit_compile candidate's cost (XLA; on PyTorch, torch.compile), unknown until one
# is measured, is taken as this many times the slowest candidate without: a compile takes far
# longer than a graph trace, and a first call cannot be stopped (here a small CNN's first XLA
# trial took 22 s after trials of 3-5 s, and ran a 20 s budget 9 s over; an LSTM's took 1.6x).
XLA_FIRST_COST = 3.0


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One setting of the knobs the search turns."""

    precision: str = "float32"
    jit_compile: bool = False
    steps_per_execution: int = 1
    fused_steps: int = 1
    batch_size: int | None = None  # None: the config's

    def compile_kwargs(self) -> dict[str, Any]:
        """The ``model.compile`` arguments that select these settings for your own model."""
        return {"jit_compile": self.jit_compile, "steps_per_execution": self.steps_per_execution}

    def flags(self) -> str:
        """The recipe flags that select these settings."""
        out = (
            f"--precision={self.precision} --{'' if self.jit_compile else 'no'}jit_compile "
            f"--steps_per_execution={self.steps_per_execution} --fused_steps={self.fused_steps}"
        )
        return out + (f" --batch_size={self.batch_size}" if self.batch_size else "")

    def label(self) -> str:
        parts = [
            self.precision,
            "xla" if self.jit_compile else "no-xla",
            f"spe={self.steps_per_execution}",
            f"fused={self.fused_steps}",
        ]
        if self.batch_size:
            parts.append(f"batch={self.batch_size}")
        return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class Space:
    """The values each knob may take; the first value of each is the Keras default."""

    precision: Sequence[str] = ("float32",)
    jit_compile: Sequence[bool] = (False, True)
    steps_per_execution: Sequence[int] = (1, 8, 32)
    fused_steps: Sequence[int] = (1, 8, 32)
    batch_size: Sequence[int | None] = (None,)
    # Steps in one call at most (steps per execution × fused steps): a call's fixed cost
    # (~1 ms here) spread over 256 steps is ~4 µs a step, and a longer call costs more to
    # measure (one call is the shortest window) than it could gain. Not an axis.
    max_steps_per_call: int = 256

    def axes(self) -> list[tuple[str, Sequence[Any]]]:
        return [
            (f.name, getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name != "max_steps_per_call"
        ]

    def allows(self, candidate: Candidate) -> bool:
        per_call = candidate.steps_per_execution * candidate.fused_steps
        return per_call == 1 or per_call <= self.max_steps_per_call

    def grid(self) -> list[Candidate]:
        """Every combination the space allows (what an exhaustive sweep measures)."""
        out = [Candidate()]
        for name, values in self.axes():
            out = [dataclasses.replace(c, **{name: v}) for c in out for v in values]
        return [c for c in out if self.allows(c)]

    def defaults(self) -> Candidate:
        return Candidate(**{name: values[0] for name, values in self.axes()})


def default_space(
    device: Any, step_s: float | None = None, batch_sizes: Sequence[int] = ()
) -> Space:
    """The search space for a device: float32 plus the device's fast policy, XLA on/off, and
    optionally batch sizes. Steps per execution and fused steps only pay where per-step
    overhead (~0.3-1 ms a step here) is a real share of the step, so their values follow the
    measured default step time `step_s`: up to 32 below 10 ms, up to 4 below 50 ms, none
    above."""
    from toolkit import backend
    from toolkit.devices import recommend_precision

    fast, _why = recommend_precision(device)
    precisions = ("float32", fast) if fast != "float32" else ("float32",)
    loops: tuple[int, ...] = (1, 8, 32)
    if step_s is not None and step_s >= 0.05:
        loops = (1,)
    elif step_s is not None and step_s >= 0.01:
        loops = (1, 4)
    # What each backend runs, its Keras default first: JAX jits every step (XLA off is far
    # slower, not a setting anyone wants); PyTorch has no steps_per_execution, and
    # torch.compile's first step (tens of seconds) outlasts a tune budget: measure it by hand.
    # Fused steps are a loop inside the compiled step (a tf.while_loop, a jax.lax.scan).
    name = backend.name()
    jit = {"jax": (True,), "torch": (False,)}.get(name, (False, True))
    return Space(
        precision=precisions,
        jit_compile=jit,
        steps_per_execution=(1,) if name == "torch" else loops,
        fused_steps=(1,) if name == "torch" else loops,
        batch_size=(None, *batch_sizes),
    )


@dataclasses.dataclass
class Trial:
    """One measured (or failed) candidate."""

    candidate: Candidate
    examples_per_sec: float | None
    seconds: float
    error: str | None = None
    rates: list[float] = dataclasses.field(default_factory=list)  # every measurement

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

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "label": self.candidate.label()}


@dataclasses.dataclass
class TuneResult:
    """The winner, every trial, and where the answer came from."""

    best: Candidate
    trials: list[Trial]
    key: str
    cache_hit: bool
    seconds: float
    budget_exhausted: bool = False
    # The head-to-head rounds after the search: [{label: examples/s}] per round.
    confirm_rounds: list[dict[str, float]] = dataclasses.field(default_factory=list)
    why: str = ""

    @property
    def defaults_rate(self) -> float | None:
        return self.trials[0].examples_per_sec if self.trials else None

    @property
    def best_rate(self) -> float | None:
        rates = [t.examples_per_sec for t in self.trials if t.candidate == self.best]
        return rates[0] if rates else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "best": dataclasses.asdict(self.best),
            "best_label": self.best.label(),
            "trials": [t.to_dict() for t in self.trials],
            "key": self.key,
            "cache_hit": self.cache_hit,
            "seconds": self.seconds,
            "budget_exhausted": self.budget_exhausted,
            "confirm_rounds": self.confirm_rounds,
            "why": self.why,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], cache_hit: bool = True) -> TuneResult:
        trials = [
            Trial(
                Candidate(**t["candidate"]),
                t["examples_per_sec"],
                t["seconds"],
                t["error"],
                list(t.get("rates") or []),
            )
            for t in d["trials"]
        ]
        return cls(
            Candidate(**d["best"]), trials, d["key"], cache_hit, d["seconds"],
            d.get("budget_exhausted", False), list(d.get("confirm_rounds") or []),
            d.get("why", ""),
        )  # fmt: skip

    def table(self) -> str:
        """The trials as a Markdown table, fastest first, failures last."""
        base = self.defaults_rate
        rows = sorted(
            self.trials,
            key=lambda t: -(t.examples_per_sec or -1.0),
        )
        lines = [
            "| settings | examples/s | spread | runs | vs defaults | note |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for t in rows:
            if t.examples_per_sec is None:
                lines.append(f"| {t.candidate.label()} | — | — | 0 | — | failed: {t.error} |")
                continue
            ratio = f"{t.examples_per_sec / base:.2f}×" if base else "—"
            note = "defaults" if t is self.trials[0] else ""
            if t.candidate == self.best:
                note = (note + ", " if note else "") + "**chosen**"
            lines.append(
                f"| {t.candidate.label()} | {t.examples_per_sec:,.1f} | {t.spread() or '—'} | "
                f"{len(t.rates)} | {ratio} | {note} |"
            )
        if self.confirm_rounds:
            lines.append(
                f"\n{len(self.confirm_rounds)} head-to-head round(s) after the search "
                f"(examples/s: median of every run; vs defaults: of all runs). {self.why}"
            )
        elif self.why:
            lines.append(f"\n{self.why}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------- the search


def _order(trial: Trial) -> tuple[float, int]:
    """Faster first; at the same rate, the shorter loop (control back to Python sooner)."""
    c = trial.candidate
    return (trial.examples_per_sec or 0.0, -c.steps_per_execution * c.fused_steps)


def choose(trials: Sequence[Trial], min_gain: float = MIN_GAIN) -> Candidate:
    """The fastest measured candidate, unless it beats the defaults (``trials[0]``) by no
    more than `min_gain`: then the defaults (never hand back something slower)."""
    defaults = trials[0]
    measured = [t for t in trials if t.examples_per_sec is not None]
    if not measured:
        return defaults.candidate
    best = max(measured, key=_order)
    if defaults.examples_per_sec is None:
        return best.candidate
    if best.examples_per_sec > defaults.examples_per_sec * (1 + min_gain):
        return best.candidate
    return defaults.candidate


LOOPS = ("steps_per_execution", "fused_steps")  # knobs that cut per-step overhead
# The other knobs, in the order the search sets them: XLA first (it moves the step most, and
# what it fuses changes what a precision costs), then precision, then the batch size.
KNOBS = ("jit_compile", "precision", "batch_size")
# A shorter steps_per_execution is not measured where the per-call overhead (estimated from
# the defaults and the corner) says it would be slower by more than this: that loop changes
# no per-step work, so only noise could make it win. (Where the corner's gain came from
# fused steps alone, the estimate is too high and the longer loop stays: no slower, only
# handing control back to Python less often.)
PRUNE_LOSS = 0.04


def call_overhead(a: Trial, b: Trial) -> float | None:
    """Seconds per example a call costs over its steps, from two trials that differ only in
    their loops (``t = s + o / L`` with L steps a call, t seconds an example); None when
    the longer loop was not faster (nothing to estimate)."""
    la, lb = (t.candidate.steps_per_execution * t.candidate.fused_steps for t in (a, b))
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
) -> tuple[list[Trial], bool]:
    """Loops first, at their longest; then each other knob; then the loops shorter.

    1. The defaults (always; `first` when they are already measured).
    2. The loops' corner: fused steps at their longest, then steps per execution as long as
       ``space.max_steps_per_call`` allows. Loops cut the per-step overhead, and
       :func:`default_space` offers them only where a step is short enough for that
       overhead to matter: there the longest loop usually wins, and the other knobs are
       judged where overhead no longer hides their effect.
    3. Each other knob (XLA, then precision, then batch size), every value, the rest at the
       best so far; again while one of them changed the best (they interact: the order
       they are set in must not decide).
    4. Each loop one value shorter, the rest at the best so far, and on down while that is
       not slower: a shorter loop hands control back to Python (callbacks, logs) more
       often. A shorter steps per execution changes no per-step work, so it is not measured
       where the call overhead the defaults and the corner show says it would lose by more
       than :data:`PRUNE_LOSS`. From a best whose loop is not the longest (the corner failed
       or lost), the axis's other values are tried longest first.

    With `passes` > 1, steps 3 and 4 again from the best while it changes. Each new
    candidate is a build, a trace and a compile: this measures 4–6 where the grid of the
    default space holds 16–32, and :func:`confirm` then settles the order of the fastest.

    `measure` returns examples/s or raises; a raise is recorded as a failed trial. `first`
    is the defaults' trial when already measured, `spent_s` the budget it used.

    Returns:
        The trials in the order run (defaults first) and whether the budget ran out.
    """
    start = clock() - spent_s
    trials: list[Trial] = [first] if first else []
    seen: dict[Candidate, Trial] = {first.candidate: first} if first else {}
    exhausted = False

    def run(candidate: Candidate) -> Trial | None:
        """The candidate's trial (measured now, or before); None when the budget is out."""
        nonlocal exhausted
        if candidate in seen:
            return seen[candidate]
        # A candidate costs about what the median one of its kind (XLA or not) did: one that
        # would end past the budget is not started (the budget is a promise, not a start
        # deadline).
        if trials and clock() - start + _expected_cost(candidate, trials) > budget_s:
            exhausted = True
            return None
        t0 = clock()
        try:
            rate, error = float(measure(candidate)), None
        except Exception as e:  # noqa: BLE001 - a failing candidate is a result, not a crash
            rate, error = None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        trial = Trial(candidate, rate, clock() - t0, error)
        seen[candidate] = trial
        trials.append(trial)
        if progress is not None:
            shown = f"{rate:,.1f} examples/s" if rate is not None else f"failed ({error})"
            spent = clock() - start
            progress(f"[{len(trials)} | {spent:.0f}/{budget_s:.0f} s] {candidate.label()}: {shown}")
        return trial

    best = run(space.defaults())
    assert best is not None  # the first candidate is always measured

    def faster(trial: Trial | None, than: Trial, by: float = 0.0) -> bool:
        if trial is None or trial.examples_per_sec is None:
            return False
        return than.examples_per_sec is None or trial.examples_per_sec > than.examples_per_sec * (
            1 + by
        )

    def at_best(**changes: Any) -> Trial | None:
        candidate = dataclasses.replace(best.candidate, **changes)
        return run(candidate) if space.allows(candidate) else None

    axes = dict(space.axes())
    loops = [name for name in LOOPS if len(axes.get(name, ())) > 1]
    # The corner: the in-program loop (fused steps) at its longest first, then the runtime
    # loop (steps per execution) as long as the space allows with it.
    longest = dataclasses.replace(best.candidate, steps_per_execution=1, fused_steps=1)
    for name in reversed(loops):
        fits = [
            v for v in axes[name] if space.allows(dataclasses.replace(longest, **{name: v}))
        ]  # fmt: skip
        longest = dataclasses.replace(longest, **{name: max(fits)})
    corner = at_best(**{name: getattr(longest, name) for name in loops}) if loops else None
    overhead = call_overhead(best, corner) if corner is not None else None
    if faster(corner, best):
        best = corner
    knobs = sorted(
        (name for name, _ in space.axes() if name not in loops),
        key=lambda n: KNOBS.index(n) if n in KNOBS else len(KNOBS),
    )

    def slower_for_sure(name: str, value: int) -> bool:
        """Whether the call overhead says `name` = `value` loses (steps per execution only)."""
        if name != "steps_per_execution" or overhead is None or not best.examples_per_sec:
            return False
        c = best.candidate
        now = c.steps_per_execution * c.fused_steps
        then = value * c.fused_steps
        return overhead * (1 / then - 1 / now) * best.examples_per_sec > PRUNE_LOSS

    for _ in range(passes):
        before = best.candidate
        # Each other knob at the best so far, and again while one changed the best: they
        # interact (XLA fuses a precision's casts), so the order they are set in does not
        # decide. Settings already measured cost nothing.
        settled = None
        while settled != best.candidate and not exhausted:
            settled = best.candidate
            for name in knobs:
                for value in axes[name]:
                    trial = at_best(**{name: value})
                    if faster(trial, best):
                        best = trial
        for name in loops:
            if exhausted:
                break
            values = [
                v for v in sorted(axes[name])
                if space.allows(dataclasses.replace(best.candidate, **{name: v}))
            ]  # fmt: skip
            current = getattr(best.candidate, name)
            if current != values[-1]:  # not at the longest: the others, longest first
                for value in reversed(values):
                    trial = at_best(**{name: value})
                    if faster(trial, best):
                        best = trial
                continue
            # Down one value at a time while not slower: a shorter loop hands control back
            # to Python (callbacks, logs) more often, and a peak below the longest (a fused
            # batch that no longer fits a cache) is found where it usually is, near the top.
            for value in reversed(values[:-1]):
                if slower_for_sure(name, value):
                    break
                trial = at_best(**{name: value})
                if trial is None or trial.examples_per_sec is None:
                    break
                if best.examples_per_sec is not None and (
                    trial.examples_per_sec < best.examples_per_sec
                ):
                    break
                best = trial
        if exhausted or best.candidate == before:
            break
    return trials, exhausted


def _expected_cost(candidate: Candidate, trials: Sequence[Trial]) -> float:
    """What measuring `candidate` should take, from the `trials` so far: the median of those
    with its XLA setting; for the first XLA candidate, :data:`XLA_FIRST_COST` times the
    slowest without."""
    same = [t.seconds for t in trials if t.candidate.jit_compile == candidate.jit_compile]
    if same:
        return statistics.median(same)
    if candidate.jit_compile:
        return XLA_FIRST_COST * max(t.seconds for t in trials)
    return statistics.median(t.seconds for t in trials)


def _decide(
    defaults: Trial, finalists: Sequence[Trial], rounds: Sequence[dict[str, float]], min_gain: float
) -> tuple[Candidate, str]:
    """The finalist with the best median ratio to the defaults over the head-to-head rounds,
    when that median exceeds ``1 + min_gain`` and it won most rounds; else the defaults."""
    base = defaults.candidate.label()
    best, best_ratio, best_wins = defaults.candidate, 0.0, 0
    for t in finalists:
        label = t.candidate.label()
        ratios = [
            r[label] / r[base] for r in rounds if r.get(label) and r.get(base)
        ]  # fmt: skip
        if not ratios:
            continue
        ratio, wins = statistics.median(ratios), sum(x > 1 for x in ratios)
        if ratio > 1 + min_gain and wins * 2 > len(ratios) and ratio > best_ratio:
            best, best_ratio, best_wins = t.candidate, ratio, wins
    n = len(rounds)
    if best == defaults.candidate:
        return best, (
            f"no finalist beat the defaults by > {min_gain:.0%} in most of {n} head-to-head "
            "round(s): the defaults stay"
        )
    return best, f"chosen: {best_ratio:.2f}× the defaults head to head, won {best_wins} of {n}"


def _decisive(
    defaults: Trial, pick: Candidate, trials: Sequence[Trial], got: dict[str, float]
) -> bool:
    """Whether `pick` beat the defaults by more than :data:`DECISIVE_GAIN` in its search
    window and again in the first head-to-head round, and every other finalist in both (by
    more than the noise, :data:`MIN_GAIN`, in the round): the two windows agree on the whole
    order, so a second round would not change it. (One slow window of a runner-up is no
    verdict: a shared machine gave one finalist 36k examples/s in a round, 60k in the search.)"""
    searched = {t.candidate.label(): t.rates[0] for t in trials if t.rates}
    base, label = defaults.candidate.label(), pick.label()
    first, mine = searched.get(label), got.get(label)
    if (
        not mine
        or not first
        or not got.get(base)
        or first <= defaults.rates[0] * (1 + DECISIVE_GAIN)
    ):
        return False
    others = [k for k in got if k not in (base, label)]
    return mine > got[base] * (1 + DECISIVE_GAIN) and all(
        mine > got[k] * (1 + MIN_GAIN) and first > searched.get(k, 0.0) for k in others
    )


def confirm(
    measure: Callable[[Candidate], float],
    trials: list[Trial],
    *,
    budget_s: float,
    min_gain: float = MIN_GAIN,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[str], Any] | None = None,
    spent_s: float = 0.0,
) -> tuple[Candidate, list[dict[str, float]], str, bool]:
    """Measures the search's :data:`FINALISTS` fastest candidates again, interleaved with the
    defaults (each round in a rotated order), until the pick is the same two rounds running,
    :data:`MAX_ROUNDS` rounds, or the budget ends; picks with :func:`_decide`. One window per
    candidate cannot tell a 10 % gain from a 10 % swing of a shared machine; the paired,
    repeated rounds can.

    Returns:
        ``(pick, rounds as {label: examples/s}, why in words, whether the budget ran out)``.
        The trials get the new measurements (their rate becomes the median).
    """
    start = clock() - spent_s
    defaults = trials[0]
    if defaults.examples_per_sec is None:
        return choose(trials, min_gain), [], "the defaults failed: the fastest measured", False
    finalists = sorted(
        (t for t in trials[1:] if t.examples_per_sec and t.examples_per_sec > defaults.rates[0]),
        key=_order,
        reverse=True,
    )[:FINALISTS]
    # A runner-up far behind the leader cannot overtake it on noise: not measured again.
    lead = finalists[0].rates[0] if finalists else 0.0
    finalists = [t for t in finalists if t.rates[0] >= NEAR_LEADER * lead]
    if not finalists:  # (the filter keeps the leader: empty only when nothing beat them)
        return defaults.candidate, [], "nothing beat the defaults in the search", False
    rounds: list[dict[str, float]] = []
    previous, exhausted = None, False
    pick, why = defaults.candidate, ""
    for r in range(MAX_ROUNDS):
        group = [defaults, *finalists]
        cost = sum(t.seconds / max(1, len(t.rates)) for t in group)
        if clock() - start + cost > budget_s:
            exhausted = True
            break
        got: dict[str, float] = {}
        for t in group[r % len(group) :] + group[: r % len(group)]:
            t0 = clock()
            try:
                rate = float(measure(t.candidate))
            except Exception:  # noqa: BLE001 - it ran in the search: a flaky candidate loses
                continue
            t.add(rate, clock() - t0)
            got[t.candidate.label()] = rate
            if progress is not None:
                progress(
                    f"[head to head {r + 1} | {clock() - start:.0f}/{budget_s:.0f} s] "
                    f"{t.candidate.label()}: {rate:,.1f} examples/s"
                )
        rounds.append(got)
        pick, why = _decide(defaults, finalists, rounds, min_gain)
        if r >= 1 and pick == previous:
            break
        if r == 0 and pick != defaults.candidate and _decisive(defaults, pick, trials, got):
            why += f" (by > {DECISIVE_GAIN:.0%} in the search and head to head: one round)"
            break
        previous = pick
    if not rounds:
        pick = choose(trials, UNCONFIRMED_GAIN)
        why = (
            "no head-to-head round fit the budget: the search's fastest, only if it beat the "
            f"defaults by > {UNCONFIRMED_GAIN:.0%} in its one window"
        )
    return pick, rounds, why, exhausted


# ---------------------------------------------------------------------------- keys and cache


def _machine_facts() -> dict[str, Any]:
    from toolkit import devices

    return machine.machine_facts(
        devices=[f"{d.kind}:{d.index} {d.human_name}" for d in devices.detect()]
    )


def model_signature(model: Any) -> str:
    """The architecture as text: every layer's class and configuration (layer names left out:
    Keras numbers them per process) and the shapes of the weights."""
    parts: list[Any] = []
    skip = {"name", "layers", "input_layers", "output_layers"}

    def walk(layer: Any) -> None:
        try:
            config = {k: v for k, v in layer.get_config().items() if k not in skip}
        except Exception:  # noqa: BLE001 - a subclassed layer may not serialize its config
            config = {}
        parts.append([type(layer).__qualname__, config])
        for sub in getattr(layer, "layers", None) or []:
            walk(sub)

    walk(model)
    parts.append([list(w.shape) for w in model.weights])
    return json.dumps(parts, sort_keys=True, default=str)


def cache_key(model: Any, element_spec: Any, batch_size: int, device: Any) -> tuple[str, dict]:
    """``(hash, what was hashed)`` for a model, its input, the Keras backend and this machine.

    The backend is part of the key: the same model and input give the same signature under
    every backend, and one backend's winner can be far slower on another (TensorFlow's
    ``--nojit_compile --steps_per_execution=8`` ran the MLP recipe 25x slower on JAX, where it
    means eager execution)."""
    facts = {
        "model": hashlib.sha256(model_signature(model).encode()).hexdigest()[:16],
        "params": int(model.count_params()),
        "input": str(element_spec),
        "batch_size": batch_size,
        "backend": backend.name(),
        "device": f"{device.kind}:{device.index}",
        "machine": _machine_facts(),
    }
    return machine.machine_key(facts), facts


def _cache_path() -> str:
    return os.path.join(machine.cache_dir(), CACHE_FILE)


def cached(key: str) -> TuneResult | None:
    """The cached result for `key`, if any."""
    entry = read_json(_cache_path()).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        return TuneResult.from_dict(entry["result"])
    except (KeyError, TypeError):
        return None


def store(result: TuneResult, facts: dict[str, Any]) -> None:
    """Caches `result` under its key (atomically; a read-only cache is skipped)."""
    entry = {"facts": facts, "result": {**result.to_dict(), "cache_hit": False}}
    update_json(_cache_path(), result.key, entry)


# ---------------------------------------------------------------------------- with the runner


def apply(config: Any, candidate: Candidate) -> Any:
    """`config` with the candidate's settings."""
    changes = {
        "precision": candidate.precision,
        "jit_compile": candidate.jit_compile,
        "steps_per_execution": candidate.steps_per_execution,
        "fused_steps": candidate.fused_steps,
    }
    if candidate.batch_size:
        changes["batch_size"] = candidate.batch_size
    return dataclasses.replace(config, **changes)


def window_steps(candidate: Candidate, steps: int, calls: int = 3) -> tuple[int, int]:
    """``(warm-up steps, total steps)`` for a candidate: the first call is left out, and one
    more execution where calls are shorter than `steps` (a call of a few steps still
    settles after the first); then at least `steps` steps and `calls` executions are timed
    (the search times 1 where a call is long: its finalists are measured again)."""
    per_call = candidate.steps_per_execution * candidate.fused_steps
    timed = max(steps, calls * per_call)
    timed += -timed % per_call
    warmup = per_call if per_call < steps else 0
    return warmup, per_call + warmup + timed


def _rate(stats: Any) -> float:
    if not stats.timed_steps or not stats.batch_size:
        raise RuntimeError("no timed steps (or no batch size) in the window")
    return stats.batch_size * stats.timed_steps / stats.total_s


class TaskMeasure:
    """Measures candidates of a Task with short real runs through the runner, in this
    process: ``measure(candidate, calls=3)`` returns examples/s over the timed window after
    the candidate's own warm-up (:func:`window_steps`), or raises what the run raised.

    What does not change between candidates is made once: the training data (in-memory
    arrays become tensors once, a data function is called once), and the validation
    split is left out (a window times training steps only).

    With `keep`, the first candidate measured (the defaults) and the `keep` fastest stay
    built. Measuring one of those again runs its compiled step on its own pipeline for a
    fresh window of at least :data:`LIVE_WINDOW_S` (its first call left out): no rebuild,
    retrace or recompile, so :func:`confirm`'s rounds cost their windows, not builds. A
    model with more than :data:`LIVE_PARAMS` weights is never kept (memory); it is rebuilt.
    :meth:`close` lets the kept models go.
    """

    def __init__(self, task: Any, config: Any, steps: int = 48, keep: int = 0) -> None:
        from toolkit import train
        from toolkit.data import has_tensorflow

        data = task.train() if callable(task.train) else task.train
        if has_tensorflow():
            data = train.resident(data)
        self.task = dataclasses.replace(task, train=data, validation=None)
        self.config, self.steps, self.keep = config, steps, keep
        self.live: dict[Candidate, tuple[Any, Any]] = {}
        self.rates: dict[Candidate, float] = {}  # each candidate's first (built) window
        self.first: Candidate | None = None
        # A run still going at this time.perf_counter() stops after its current call (a
        # budget's end; None: no end). One that has not finished its first call by then
        # raises: it has no rate to show.
        self.deadline: float | None = None

    def __call__(self, candidate: Candidate, calls: int = 3) -> float:
        if candidate in self.live:
            return self._again(candidate)
        from toolkit import train

        warmup, total = window_steps(candidate, self.steps, calls)
        cfg = apply(self.config, candidate).for_measurement(total, warmup)
        per_call = candidate.steps_per_execution * candidate.fused_steps
        batch = candidate.batch_size or self.config.batch_size
        best = max(self.rates.values(), default=None)
        limit = math.inf
        if best:  # what the best so far needed for this whole window, times HOPELESS
            limit = max(HOPELESS * total * batch / best, HOPELESS_FLOOR_S)
        deadline = math.inf if self.deadline is None else self.deadline
        stop = _hopeless_stop(per_call * batch, limit, deadline)
        try:
            with backend.get().quiet_retracing():  # each candidate is a new model, not a retrace
                result = train.run(self.task, cfg, callbacks=[stop])
            if stop.stopped and not stop.rate:
                raise RuntimeError("the budget ended in its first call (the compile)")
            rate = stop.rate if stop.stopped else _rate(result.report.steps)
            self._hold(candidate, rate, result)
        finally:
            compat.keras().backend.clear_session()
        return rate

    def _hold(self, candidate: Candidate, rate: float, result: Any) -> None:
        """Keeps the candidate built when it is the first or among the `keep` fastest."""
        self.rates[candidate] = rate
        if self.first is None:
            self.first = candidate
        elif not self.keep:
            return
        if int(result.model.count_params()) > LIVE_PARAMS or result.train_data is None:
            return
        self.live[candidate] = (result.model, result.train_data)
        others = sorted(
            (c for c in self.live if c != self.first), key=lambda c: self.rates[c], reverse=True
        )
        for c in others[self.keep :]:
            del self.live[c]

    def _again(self, candidate: Candidate) -> float:
        from toolkit import train

        model, data = self.live[candidate]
        per_call = candidate.steps_per_execution * candidate.fused_steps
        batch = candidate.batch_size or self.config.batch_size
        long_enough = math.ceil(LIVE_WINDOW_S * self.rates[candidate] / batch)
        timed = max(self.steps, per_call, long_enough)
        timed += -timed % per_call
        with backend.get().quiet_retracing():
            report = train.measured_fit(
                model, data, (per_call + timed) // candidate.fused_steps, 0, batch_size=batch
            )
        return _rate(report.steps)

    def close(self) -> None:
        if self.live:
            self.live.clear()
            compat.keras().backend.clear_session()


def _hopeless_stop(examples_per_call: int, limit_s: float, deadline: float) -> Any:
    """A Keras callback that stops a measurement run once it has run `limit_s` after its
    first call (the compile), or at the `deadline` (``time.perf_counter``), and keeps the
    rate it showed after the first call: ``.stopped``, ``.rate`` (examples/s; 0 when it
    stopped at the first call). Keras ends a batch once an execution: each end is a call."""

    class HopelessStop(compat.keras().callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.stopped, self.rate = False, 0.0
            self.start: float | None = None
            self.calls = 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            now = time.perf_counter()
            if self.start is None:  # the first call ends: its compile is not the rate
                self.start = now
                if now > deadline:
                    self.stopped = self.model.stop_training = True
                return
            self.calls += 1
            if now - self.start > limit_s or now > deadline:
                self.stopped = True
                self.rate = self.calls * examples_per_call / (now - self.start)
                self.model.stop_training = True

    return HopelessStop()


def measure_candidate(
    task: Any, config: Any, candidate: Candidate, steps: int = 48, calls: int = 3
) -> float:
    """Examples/s of a short real run of `task` with the candidate's settings (the timed
    window after its own warm-up). Raises what the run raises. To measure many, make one
    :class:`TaskMeasure`: it makes the data once."""
    return TaskMeasure(task, config, steps)(candidate, calls)


def tune(
    target: Any,
    data: Any = None,
    *,
    config: TrainConfig | None = None,
    space: Space | None = None,
    budget_s: float = 120.0,
    steps: int = 48,
    use_cache: bool = True,
    progress: Callable[[str], Any] | None = None,
) -> TuneResult:
    """Finds the fastest settings for a recipe's Task, or for your own compiled model on your
    own batched data (see the module docstring).

    ``tune(task, config)`` searches precision, XLA, steps per execution and fused steps with
    the runner; ``tune(model, data)`` searches what a compiled model can change without being
    rebuilt (XLA and steps per execution, from its current settings as the defaults), on
    exactly your pipeline, and restores the model's compile settings and weights afterwards:
    apply the winner with ``model.compile(..., **result.best.compile_kwargs())``.

    Args:
        target: a ``toolkit.train.Task``, or a compiled Keras model.
        data: with a model, its batched ``tf.data`` pipeline or ``(x, y)`` arrays (required);
            with a Task, a TrainConfig may stand here for `config`.
        config: the base ``TrainConfig`` (device, batch size, data...). Defaults to
            ``TrainConfig()``.
        space: what to search. Defaults to :func:`default_space` for the device.
        budget_s: seconds the search may take (the defaults are always measured).
        steps: timed steps per candidate. Defaults to `48`.
        use_cache: read and write the cache. Defaults to `True`.
        progress: called with one line per candidate. Defaults to ``toolkit.progress.say``
            (stderr) with a bar of the budget on a terminal.
    """
    from toolkit import train

    if isinstance(data, TrainConfig):
        config, data = data, None
    config = (config or TrainConfig()).validate()
    start = time.perf_counter()
    if isinstance(target, train.Task):
        measure, defaults, key, facts, device = _task_measure(target, config, steps)
    elif data is None:
        raise train.SetupError("tune(model, data): give the training data your model fits on")
    else:
        measure, defaults, key, facts, device = _model_measure(target, data, config, steps)
    # A bar of the budget's seconds on a terminal; the lines above it (or alone, in a log).
    budget_bar = tk_progress.bar(round(budget_s), "tune", unit="s", enabled=progress is None)
    say = progress or tk_progress.say

    def report(line: str) -> None:
        say(line)
        budget_bar.advance_to(min(time.perf_counter() - start, budget_s))

    try:
        if use_cache:
            hit = cached(key)
            if hit is not None:
                report(f"tune: cached result for this model, input and machine ({key})")
                return hit
        first = None
        if space is None:  # measure the defaults first: their step time shapes the space
            say(f"tune: measuring the defaults first (budget {budget_s:.0f} s)")
            t0 = time.perf_counter()
            rate = measure(defaults)
            first = Trial(defaults, rate, time.perf_counter() - t0)
            report(
                f"[1 | {first.seconds:.0f}/{budget_s:.0f} s] {defaults.label()}: "
                f"{rate:,.1f} examples/s"
            )
            space = default_space(device, step_s=(defaults.batch_size or config.batch_size) / rate)
            if not isinstance(target, train.Task):
                space = _model_space(space, defaults)

        def searching(candidate: Candidate) -> float:
            # A run past the search's share of the budget stops after its current call
            # (the defaults always run whole: every pick is judged against them).
            if isinstance(measure, TaskMeasure) and candidate not in (defaults, space.defaults()):
                measure.deadline = start + budget_s * SEARCH_SHARE
            return measure(candidate, calls=SEARCH_CALLS)  # finalists: 3 calls head to head

        trials, exhausted = search(
            searching,
            space,
            budget_s=budget_s * SEARCH_SHARE,
            progress=report,
            first=first,
            spent_s=time.perf_counter() - start,
        )
        if isinstance(measure, TaskMeasure):
            measure.deadline = start + budget_s
        best, rounds, why, out_of_time = confirm(
            measure,
            trials,
            budget_s=budget_s,
            progress=report,
            spent_s=time.perf_counter() - start,
        )
    finally:
        budget_bar.close()
        measure.close()
    result = TuneResult(
        best, trials, key, False, time.perf_counter() - start, exhausted or out_of_time,
        rounds, why,
    )  # fmt: skip
    if use_cache:
        store(result, facts)
    return result


def _task_measure(task: Any, config: TrainConfig, steps: int) -> tuple[Any, ...]:
    from toolkit import train

    device, _findings = train.setup_device(config)
    measure = TaskMeasure(task, config, steps, keep=FINALISTS)
    with train.precision_policy("float32"):
        model = task.build_model()
    key, facts = cache_key(model, train.examples(measure.task.train).element_spec,
                           config.batch_size, device)  # fmt: skip
    del model
    compat.keras().backend.clear_session()
    # The Keras defaults as this backend runs them (JAX jits the step).
    return measure, Candidate(jit_compile=backend.name() == "jax"), key, facts, device


class _ModelMeasure:
    """Measures candidates on a user's compiled model by recompiling it with each candidate's
    settings (same optimizer, loss and metrics); :meth:`close` puts back its compile
    settings, weights and optimizer state."""

    def __init__(self, model: Any, dataset: Any, batch_size: int | None, steps: int) -> None:
        from toolkit.train import snapshot

        self.model, self.dataset, self.batch_size, self.steps = model, dataset, batch_size, steps
        self.compile_args = _compile_args(model)
        self.saved = snapshot(model)

    def __call__(self, candidate: Candidate, calls: int = 3) -> float:
        from toolkit import train

        self.model.compile(**{**self.compile_args, **candidate.compile_kwargs()})
        warmup, total = window_steps(candidate, self.steps, calls)
        with backend.get().quiet_retracing():
            stats = train.measured_fit(
                self.model, self.dataset, total, warmup, batch_size=self.batch_size
            ).steps
        return _rate(stats)

    def close(self) -> None:
        from toolkit.train import restore

        self.model.compile(**self.compile_args)
        restore(self.model, self.saved)


def _compile_args(model: Any) -> dict[str, Any]:
    """The arguments `model` was compiled with (Keras 3 keeps them in ``_compile_config``,
    tf_keras returns them from ``_get_compile_args``: neither has a public accessor)."""
    config = getattr(model, "_compile_config", None)
    if config is not None and getattr(config, "config", None):
        return dict(config.config)
    getter = getattr(model, "_get_compile_args", None)
    if getter is not None:
        return dict(getter())
    from toolkit.train import SetupError

    raise SetupError("tune(model, data): compile the model first (model.compile(...))")


def _model_measure(model: Any, data: Any, config: TrainConfig, steps: int) -> tuple[Any, ...]:
    from toolkit import devices, train
    from toolkit.data import infer_batch_size

    dataset, _described = train.as_batches(data, config.batch_size)
    batch_size = infer_batch_size(dataset)
    args = _compile_args(model)
    defaults = Candidate(
        precision=str(getattr(getattr(model, "dtype_policy", None), "name", None) or "float32"),
        jit_compile=args.get("jit_compile") is True,
        steps_per_execution=int(args.get("steps_per_execution") or 1),
    )
    device = devices.resolve("auto")
    key, facts = cache_key(model, dataset.element_spec, batch_size or 0, device)
    return _ModelMeasure(model, dataset, batch_size, steps), defaults, key, facts, device


def _model_space(space: Space, defaults: Candidate) -> Space:
    """`space` cut to what a compiled model can change without a rebuild, with the model's
    own settings as each knob's first value (the defaults)."""

    def first(value: Any, values: Sequence[Any]) -> tuple[Any, ...]:
        return (value, *(v for v in values if v != value))

    return Space(
        precision=(defaults.precision,),
        jit_compile=first(defaults.jit_compile, space.jit_compile),
        steps_per_execution=first(defaults.steps_per_execution, space.steps_per_execution),
        fused_steps=(1,),
        batch_size=(None,),
    )


def autotune(task: Any, config: Any, **kwargs: Any) -> tuple[Any, TuneResult]:
    """``(config with the best settings, the TuneResult)``: from the cache, or searched."""
    result = tune(task, config=config, **kwargs)
    return apply(config, result.best), result
