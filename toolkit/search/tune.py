"""A measured search for the fastest training settings, cached per model, input and machine.

XLA and mixed precision often slow a small CPU down, so :func:`tune` measures: each candidate is
a short real ``fit`` of a :class:`~toolkit.search.workload.Workload`. The Keras defaults come
first and a pick must beat them head to head (``engine``, ``rounds``), so one lucky window wins
nothing. The budget is the whole call's wall time, fresh-process confirmation
(``toolkit.search.fresh``) included where it fits in half, else announced (:class:`Plan`). The
winner is cached keyed by model, input, backend and machine; ``autotune`` uses the cache."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolkit import backend
from toolkit.core import _fields as fields
from toolkit.core import machine
from toolkit.core import progress as tk_progress
from toolkit.core._gain import FRESH, THIS_PROCESS, Gain
from toolkit.core.cache import Cache
from toolkit.core.terminal import Block, markdown
from toolkit.report._tune import TuneSection
from toolkit.runner.config import SEARCHED_SETTINGS, SearchContext, TrainConfig
from toolkit.search import _tune_screen as screen
from toolkit.search import fresh as fr
from toolkit.search.engine import (
    FINALISTS,
    Candidate,
    Space,
    Trial,
    Untried,
    WholeRun,
    search,
    whole_run,
)
from toolkit.search.rounds import confirm
from toolkit.search.workload import Workload, apply, workload

__all__ = [
    "TuneResult",
    "autotune",
    "default_space",
    "tune",
]

CACHE_FILE = "tune.json"
_CACHE = Cache(CACHE_FILE)
SEARCH_SHARE = 0.7  # of the search's budget for the search; the rest is for the head-to-head
SEARCH_CALLS = 1  # timed executions per candidate in the search (at least `steps` steps)
CONFIRM_SHARE = 0.5  # the fresh rounds fit inside the budget when at most this share of it
SKIP = "confirm=False"  # how a caller skips the fresh rounds, as the first line says it


def default_space(
    device: Any, step_s: float | None = None, batch_sizes: Sequence[int] = (), loader: str = ""
) -> Space:
    """The search space for a device from ``toolkit.runner.config``'s settings table."""
    ctx = SearchContext(device, step_s, backend.name(), tuple(batch_sizes), loader)
    cut = (how.cut(ctx) for _name, how in SEARCHED_SETTINGS if how.cut is not None)
    return Space(
        **{name: how.values(ctx) for name, how in SEARCHED_SETTINGS},
        cut=tuple(dict.fromkeys(c for c in cut if c)),
    )


def compile_in_question(
    first: float | None, won: float | None, others: Sequence[float | None]
) -> bool:
    """Whether to time the defaults' compile again (the first paid the process's start too)."""
    if first is None:
        return False
    return won is not None or any(c is not None and c < first for c in others)


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one :func:`tune` spends its time: `budget_s`, and the fresh rounds' `confirm_s` (0:
    none) inside it or after it; `run_s`, one fresh run's estimate, with its `window_s`."""

    budget_s: float
    confirm_s: float = 0.0
    inside: bool = True
    run_s: float = 0.0
    window_s: float = fr.FRESH_WINDOW_S

    @classmethod
    def of(cls, budget_s: float, fresh: bool, start_s: float | None = None) -> Plan:
        """The plan: :data:`fresh.PLANNED_ROUNDS` rounds of two runs of `start_s` + 3 windows."""
        window = fr.window_s(budget_s)
        if not fresh:
            return cls(budget_s, window_s=window)
        run = (fr.start_estimate() if start_s is None else start_s) + 3 * window
        need = fr.PLANNED_ROUNDS * 2 * run
        return cls(budget_s, need, need <= CONFIRM_SHARE * budget_s, run, window)

    @property
    def search_s(self) -> float:
        """The search's and its head-to-head's share."""
        return self.budget_s - self.confirm_s if self.inside else self.budget_s

    @property
    def total_s(self) -> float:
        """The whole call, as announced: the budget, or the budget and the fresh rounds."""
        return self.budget_s if self.inside else self.budget_s + self.confirm_s

    def first_line(self, skip: str = SKIP) -> str:
        """What the call will take, said before anything runs (empty: just the budget)."""
        if not self.confirm_s:
            return ""
        if self.inside:
            return (
                f"tune: {self.budget_s:.0f} s in all: a search, then its pick confirmed in "
                "fresh processes"
            )
        return (
            f"tune: {self.budget_s:.0f} s search + up to {self.confirm_s:.0f} s confirming the "
            f"pick ({skip} skips it)"
        )


def _untried_of(entries: Any, where: str) -> list[Untried]:
    """The untried candidates a cached result holds (a malformed entry is dropped)."""
    read = (
        Untried.from_dict(u, f"{where}[{i}]") for i, u in enumerate(fields.items(where, entries))
    )
    return [u for u in read if u is not None]


def _budget(value: Any, where: str) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _kept_beside(value: Any) -> bool:
    """Never written in the result: the cache's entry keeps it beside it (``store``)."""
    return True


@dataclasses.dataclass
class TuneResult(fields.Record):
    """The winner, every trial, and where the answer came from; its JSON is the cache's entry."""

    EXTRA = ("best_label", "picked")

    best: Candidate
    trials: list[Trial]
    key: str
    cache_hit: bool  # read back: from_dict's, not the JSON's
    seconds: float  # the whole call: search, head to head and fresh rounds
    budget_exhausted: bool = False
    confirm_rounds: list[dict[str, float]] = dataclasses.field(default_factory=list)
    # Why, in short "\n"-separated lines; no gain figure (that is `gain`, the one claimed).
    why: str = ""
    gain: Gain | None = None  # from fresh rounds where run, else this process's
    fresh_rounds: list[dict[str, float]] = dataclasses.field(default_factory=list)
    run: WholeRun | None = None  # pick and defaults over the whole run; None: unknown
    untried: list[Untried] = fields.field(default_factory=list, read=_untried_of)
    budget_s: float | None = fields.field(None, read=_budget, omit=_kept_beside)
    announced_s: float = fields.field(0.0, omit=_kept_beside)  # fresh rounds beyond the budget
    # For the target it answers (not cached):
    how_to_apply: str = fields.field("", compare=False, json=False)
    # A pick faster here the fresh rounds neither confirmed nor refused: the defaults stand.
    unconfirmed: Candidate | None = fields.field(None, compare=False, json=False)
    try_how: str = fields.field("", compare=False, json=False)
    batch_size: int | None = fields.field(None, compare=False, json=False)
    batch_words: str = fields.field("", compare=False, json=False)

    def applied_to(self, work: Workload) -> TuneResult:
        """This result, saying how to apply it to `work` and with its batch size."""
        return dataclasses.replace(
            self,
            how_to_apply=work.how_to_apply(self.best),
            try_how=work.how_to_apply(self.unconfirmed) if self.unconfirmed else "",
            batch_size=work.batch_size,
            batch_words=work.batch_words(),
        )

    @property
    def best_label(self) -> str:
        return self.best.label()

    @property
    def picked(self) -> bool:
        """Whether it hands back settings other than the defaults."""
        return bool(self.trials) and self.best != self.trials[0].candidate

    @property
    def defaults_rate(self) -> float | None:
        return self.trials[0].examples_per_sec if self.trials else None

    @property
    def best_rate(self) -> float | None:
        rates = [t.examples_per_sec for t in self.trials if t.candidate == self.best]
        return rates[0] if rates else None

    def section(self) -> TuneSection:
        """What the run's report keeps of the search."""
        section = TuneSection.from_dict(self.to_dict())
        assert section is not None  # from_dict's None is for a report without a search
        return section

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None, cache_hit: bool = True) -> TuneResult:
        """A result the cache (or a fresh process) holds, each field checked."""
        return dataclasses.replace(super().from_dict(d, where), cache_hit=cache_hit)

    def table(self) -> list[Block]:
        """The screen (``_tune_screen.screen``): the trials' table, the pick, why, the gain."""
        return screen.screen(self)

    def markdown(self) -> str:
        """:meth:`table` as Markdown."""
        return markdown(self.table())

    def took(self) -> str:
        """How long the call took against its budget: ``29.4 s of a 30 s budget``."""
        if self.cache_hit:
            return "cache"
        if self.budget_s is None:
            return f"searched in {self.seconds:.1f} s"
        if self.announced_s and self.fresh_rounds:
            return (
                f"{self.seconds:.1f} s: a search of {self.budget_s:.0f} s, then up to "
                f"{self.announced_s:.0f} s confirming"
            )
        took = f"{self.seconds:.1f} s of a {self.budget_s:.0f} s budget"
        # Ended early: every candidate was measured, not a budget that ran out.
        if self.untried or self.seconds > self.budget_s:
            return took
        tried = len({t.candidate for t in self.trials})
        said = f"all {tried} candidates tried" if tried > 1 else "the defaults alone"
        return f"{took}: {said}"


def untried_words(untried: Sequence[Untried], defaults: Candidate) -> str:
    """What the budget left untried, a line each, with the budget that would try it."""
    said = []
    for u in sorted(untried, key=lambda u: u.needs_s)[:3]:
        needs = (
            f"its compile needs about {u.compile_s:.0f} s"
            if u.compile_s is not None and u.compile_s >= u.needs_s / 2
            else f"it needs about {u.needs_s:.0f} s"
        )
        budget = 10 * math.ceil(u.budget_s() / 10)
        tries = f"a {budget} s budget tries it"
        # "with": a comma read as two candidates
        what = " with ".join(screen.keras_words(u.candidate, defaults)) or u.candidate.label()
        said.append(f"not tried: {what} ({needs}; {tries})")
    more = len(untried) - len(said)
    return "\n".join(said) + (f" (and {more} more)" if more > 0 else "")


def check_budget(budget_s: Any, steps: Any = 1) -> None:
    """ValueError naming the argument and flag for a budget or step count a search cannot use."""
    from toolkit.core.checks import ConfigError, argument, check_number
    from toolkit.runner.flags import MIN_TUNE_BUDGET_S

    number = isinstance(budget_s, int | float) and not isinstance(budget_s, bool)
    if not (number and math.isfinite(budget_s) and budget_s >= MIN_TUNE_BUDGET_S):
        raise ValueError(
            f"tune: budget_s must be a number of seconds >= {MIN_TUNE_BUDGET_S:g} (as "
            f"--tune_budget), got {budget_s!r}"
        )
    check_number(argument("tune", "steps"), steps, integer=True, least=1)
    if steps is None:
        raise ConfigError("tune: steps must be an integer >= 1, got None")


def tune(
    target: Any,
    data: Any = None,
    *,
    config: TrainConfig | None = None,
    space: Space | None = None,
    budget_s: float = 120.0,
    steps: int = 48,
    use_cache: bool = True,
    refresh: bool = False,
    progress: Callable[[str], Any] | None = None,
    fresh: Any = None,
    confirm: bool = True,
    skip_words: str = SKIP,
    clock: Callable[[], float] = time.perf_counter,
    class_weight: Mapping[int, float] | None = None,
) -> TuneResult:
    """Finds the fastest settings for a recipe's Task, or your compiled model on your data.

    ``tune(model, data)`` searches only what a compiled model changes without a rebuild, and
    restores it afterwards; apply the winner with ``result.best.compile_kwargs()`` in
    ``model.compile`` (or ``result.best.apply(model)``). ``tune(build)``, `build` a top-level
    function returning both, also confirms the pick in fresh processes, as rounds in the
    searching process favour the pick.

    Args:
        target: a ``toolkit.runner.train.Task``, a compiled Keras model, or a function
            returning ``(compiled model, data)``.
        data: with a model, its batched data (required); with a Task, may stand for `config`.
        config: the base ``TrainConfig``. Defaults to ``TrainConfig()``.
        space: what to search. Defaults to :func:`default_space` for the device.
        budget_s: seconds the whole call may take, the fresh check included (:class:`Plan`).
        steps: timed steps per candidate. Defaults to `48`.
        use_cache: read and write the cache. Defaults to `True`.
        refresh: search again and replace the cached answer. Defaults to `False`.
        progress: called with one line per candidate. Defaults to ``progress.say`` and a bar.
        fresh: what fresh processes rebuild to confirm the pick (a recipe's name,
            ``"module:function"``, a function, a ``Target``); None: the gain is this process's.
        confirm: False skips the fresh-process check.
        skip_words: how your caller skips the check, as the first line says it.
        clock: seconds, for the budget (tests inject one).
        class_weight: with your model, as ``fit`` takes it, in every fit (fresh ones too)."""
    from toolkit.core import children

    children.refuse_while_importing()  # a fresh process importing your module: not again
    start = clock()
    check_budget(budget_s, steps)
    fresh_target = _fresh_target(fresh)  # a bad one is refused now, not after the search
    target, data, fresh_target, no_fresh = _built(target, data, fresh_target)
    if class_weight is not None and fresh_target is not None:
        fresh_target = dataclasses.replace(fresh_target, class_weight=dict(class_weight))
    # A Task's data is made once, and its finalists stay built for the rounds.
    work = workload(target, data, config, class_weight=class_weight, resident=True, keep=FINALISTS)
    run = _Tuning(work, budget_s, steps, progress, work.length_known(config is not None),
                  clock=clock, start=start)  # fmt: skip
    run.no_fresh = no_fresh or work.fresh_words()
    if not confirm:
        fresh_target, run.no_fresh = None, f"{skip_words} skipped it"
    try:
        return _tuned(run, work, space, fresh_target, use_cache, refresh, skip_words)
    finally:
        run.close()


def _tuned(
    run: _Tuning,
    work: Workload,
    space: Space | None,
    fresh_target: Any,
    use_cache: bool,
    refresh: bool,
    skip_words: str,
) -> TuneResult:
    """:func:`tune`'s phases, in :class:`_Tuning`'s order."""
    hit, said = run.cached(fresh_target is not None) if use_cache and not refresh else (None, [])
    if hit is not None:
        return hit.applied_to(work)
    run.begin(Plan.of(run.budget_s, fresh_target is not None), skip_words)
    for line in said:
        run.report(line)
    try:
        trials, best, rounds, why, untried = run.search(space)
    finally:
        work.close()  # let go before the fresh processes start
    result = run.settle(trials, best, rounds, why, untried, fresh_target)
    if use_cache:
        run.store(result)
    return result.applied_to(work)


class _Tuning:
    """One :func:`tune`'s phases: the cached answer if it fits; else the plan, the search, the
    pick settled over the whole run and in fresh processes, cached. Holds clock, plan and bar."""

    def __init__(
        self,
        work: Workload,
        budget_s: float,
        steps: int,
        progress: Callable[[str], Any] | None,
        length_known: bool,
        *,
        clock: Callable[[], float] = time.perf_counter,
        start: float | None = None,
    ) -> None:
        self.work, self.budget_s, self.steps = work, budget_s, steps
        self.clock = _Clock(clock)
        self.start = clock() if start is None else start
        self.defaults = work.defaults()
        self.key, self.facts = cache_key(work)
        self.shape = work.run_shape()
        self.length_known = length_known
        self.plan = Plan(budget_s)
        self.bar_wanted = progress is None
        self.bar = tk_progress.bar(None, "tune", unit="s", enabled=False)
        self.say = progress or tk_progress.say
        self.interrupted: list[str] = []  # fresh runs a signal or the timeout ended
        self.no_fresh = work.fresh_words()  # why no fresh process confirms a pick

    def begin(self, plan: Plan, skip_words: str = SKIP) -> None:
        """The search starts under `plan`: its first line said, the bar of its seconds."""
        self.plan = plan
        self.bar = tk_progress.bar(round(plan.total_s), "tune", unit="s", enabled=self.bar_wanted)
        first = plan.first_line(skip_words)
        if first:
            self.report(first)

    def elapsed(self) -> float:
        """Seconds since the call began at the clock's latest reading (the latest line's)."""
        return self.clock.last - self.start

    def report(self, line: str) -> None:
        """A progress line, and the bar moved to the seconds its ``t/T s`` says."""
        self.say(line)
        self.bar.advance_to(min(int(f"{max(self.elapsed(), 0.0):.0f}"), round(self.plan.total_s)))

    def measure(self, candidate: Candidate, calls: int = 3) -> float:
        return self.work.rate(candidate, self.steps, calls)

    def close(self) -> None:
        self.bar.close()
        self.work.close()

    def cached(self, confirms: bool = False) -> tuple[TuneResult | None, list[str]]:
        """The cached answer where it fits this run and is as deep; else None and why not."""
        hit = cached(self.key)
        if hit is None:
            return None, []
        if confirms and hit.picked and (hit.gain is None or not hit.gain.trusted):
            return None, ["tune: the cached pick was not confirmed in fresh processes: searching"]
        why_not = self.shape.why_not(hit.best) if self.shape is not None else None
        shallower = _shallower(self.key, self.budget_s)
        if why_not is None and shallower is None:
            self.report(f"tune: cached result for this model, input and machine ({self.key})")
            return hit, []
        if why_not is not None:  # two lines: each fits 80 columns
            return None, [
                "tune: the cached pick does not fit this run: searching",
                f"  ({why_not})",
            ]
        return None, [f"tune: the cached search {shallower}: searching again"]

    def search(
        self, space: Space | None
    ) -> tuple[list[Trial], Candidate, list[dict[str, float]], str, list[Untried] | None]:
        """``(trials, pick, rounds, why, untried)`` of the search and head-to-head (untried
        None: only the rounds ran out); the fresh rounds' time is held while a pick leads."""
        work, plan, clock = self.work, self.plan, self.clock
        work.prepare(self.steps)  # (a generator: read once, replayed by every candidate)
        first = None
        if space is None:  # measure the defaults first: their step time shapes the space
            if not plan.confirm_s:
                self.report(f"tune: measuring the defaults first (budget {plan.budget_s:.0f} s)")
            first, space = _defaults_then_space(work, self.measure, self.clock, self.start,
                                                plan.total_s, self.report)  # fmt: skip
        if self.shape is not None and space.run is None:  # only loops the run can time
            space = dataclasses.replace(space, run=self.shape)
        searching, sampling = self._measurers(first, (self.defaults, space.defaults()))
        fresh_inside = plan.confirm_s if plan.inside else 0.0
        trials, untried = search(
            searching, space, budget_s=plan.budget_s,
            progress=self.report, first=first, spent_s=clock() - self.start,
            shown_budget_s=plan.total_s, compile_of=work.compile_s, sample=sampling,
            reserve_s=plan.search_s * (1 - SEARCH_SHARE) + fresh_inside, clock=clock,
        )  # fmt: skip
        work.deadline = self._real_deadline(plan.search_s)
        best, rounds, why, out_of_time = confirm(
            self.measure, trials, budget_s=plan.search_s, progress=self.report,
            spent_s=clock() - self.start, clock=clock, shown_budget_s=plan.total_s,
            cut=space.cut,
        )  # fmt: skip
        return trials, best, rounds, why, untried if untried or not out_of_time else None

    def _measurers(
        self, first: Trial | None, own: tuple[Candidate, Candidate]
    ) -> tuple[Callable[[Candidate, int | None], float], Callable[[Candidate, float], float]]:
        """The search's measuring (the defaults always run whole: every pick is judged against
        them) and its sampling at their pace."""
        work, plan = self.work, self.plan
        pace = {"rate": first.examples_per_sec} if first is not None else {}
        beaten: list[bool] = []  # whether a candidate beat the defaults' rate so far

        def searching(candidate: Candidate, steps: int | None = None) -> float:
            if candidate not in own:  # (the reserves too, where nothing beat the defaults)
                work.deadline = self._real_deadline(plan.search_s if beaten else plan.budget_s)
            rate = self.work.rate(candidate, steps or self.steps, SEARCH_CALLS)
            pace.setdefault("rate", rate)  # finalists: 3 calls head to head
            if candidate not in own and rate > pace["rate"]:
                beaten.append(True)
            return rate

        def sampling(candidate: Candidate, window_s: float) -> float:
            """A window of about `window_s` at the defaults' pace (its steps and warm-up)."""
            batch = candidate.batch_size or work.batch_size or work.config.batch_size
            steps = int(window_s * pace.get("rate", 0.0) / max(batch, 1) / 2)
            return searching(candidate, max(1, min(steps, self.steps)))

        return searching, sampling

    def _real_deadline(self, seconds: float) -> float:
        """`seconds` after the call began, on ``time.perf_counter`` (the workload's clock)."""
        return time.perf_counter() + (self.start + seconds - self.clock())

    def settle(
        self,
        trials: list[Trial],
        best: Candidate,
        rounds: list[dict[str, float]],
        why: str,
        untried: list[Untried] | None,
        fresh_target: Any,
    ) -> TuneResult:
        """The pick over the whole run, then confirmed in fresh processes where possible."""
        work, defaults = self.work, self.defaults
        # The defaults, measured first, paid the process's own first compile too: again
        first = work.compile_s(defaults)
        others = [work.compile_s(t.candidate) for t in trials if t.candidate != defaults]
        won = work.compile_s(best) if best != defaults else None
        if compile_in_question(first, won, others):
            work.compile_again(defaults, self._real_deadline(self.plan.total_s))
        for t in trials:
            t.compile_s = work.compile_s(t.candidate)
        if untried is not None:  # one measured after all is a row of the table
            measured = {t.candidate for t in trials}
            untried = [u for u in untried if u.candidate not in measured]
        batch = defaults.batch_size or work.batch_size or work.config.batch_size
        steps_run = work.run_steps(defaults) if self.length_known else None
        fastest = best
        best, run_words, run_facts = whole_run_choice(trials, defaults, best, steps_run, batch)
        lines = [ln.replace("chosen: ", "in this process: ") for ln in why.split("; ") if ln]
        if best != fastest:  # the rounds' winner, not chosen
            winner = f"the fastest ({fastest.changes(defaults)}) "
            lines = [ln.replace("in this process: ", winner) for ln in lines]
        lines += [
            run_words,
            screen.compiled_again(first, work.compile_s(defaults)),
            untried_words(untried or [], defaults),
        ]
        gain = _in_process_gain(rounds, defaults, best, trials)
        fresh_rounds: list[dict[str, float]] = []
        exhausted = untried != []
        unconfirmed = None
        if best != defaults and fresh_target is not None:
            found = self.confirm_fresh(fresh_target, trials, best)
            faster = found.gain is not None and found.gain.ratio > 1 and not found.gain.refused
            unconfirmed = best if found.pick == defaults and faster else None
            best, gain, fresh_rounds = found.pick, found.gain, found.rounds
            lines += [*found.words, *self.fresh_words(found)]
            exhausted = exhausted or found.out_of_time
        elif best != defaults:
            lines.append(f"not run in fresh processes ({self.no_fresh})")
            if gain is not None:
                gain = dataclasses.replace(gain, why=self.no_fresh)
        return TuneResult(
            best, trials, self.key, False, self.clock() - self.start, exhausted, rounds,
            "\n".join(ln for ln in lines if ln), gain, fresh_rounds, run_facts,
            list(untried or []), self.budget_s,
            0.0 if self.plan.inside else self.plan.confirm_s, unconfirmed=unconfirmed,
        )  # fmt: skip

    def confirm_fresh(self, fresh: Any, trials: list[Trial], best: Candidate) -> fr.Confirmation:
        """The pick against the defaults in fresh processes; interrupted runs noted."""
        work, defaults, plan = self.work, self.defaults, self.plan
        rates = {t.candidate: t.examples_per_sec for t in trials}
        batch = work.batch_size or work.config.batch_size
        # Each run's window at its own rate and batch (an untimed one: the slower rate).
        timed = [r for r in (rates.get(defaults), rates.get(best)) if r]
        length, run_s = {}, {}
        for c in (defaults, best):
            rate = rates.get(c) or min(timed, default=None)
            length[c] = fr.fresh_steps(c, rate, c.batch_size or batch, self.steps, plan.window_s)
            compile_s = next((t.compile_s for t in trials if t.candidate == c), None)
            run_s[c] = (plan.run_s or fr.FRESH_START_S) + (compile_s or 0.0)
        timing = fr.Timing(self.start + plan.total_s, self.clock, run_s, self.start, plan.total_s)
        self.report(f"tune: confirming {best.label()} in {FRESH}")
        return fr.confirm_fresh(
            fresh, defaults, best, backend=backend.name(), device=work.config.device,
            steps=length, progress=self.report, interrupted=self.interrupted, timing=timing,
        )  # fmt: skip

    def fresh_words(self, found: fr.Confirmation) -> list[str]:
        """Why the fresh rounds did not confirm the pick, and what budget or gain would."""
        if found.pick != self.defaults or (found.gain is not None and found.gain.answered):
            return []
        plan = self.plan
        if found.overran_s is not None:
            needs = _holding(plan, max(found.overran_s, found.longest_s or 0.0))
            return [
                f"a fresh run was stopped after {found.overran_s:.0f} s, past the time left; "
                f"a {needs} s budget holds {fr.PLANNED_ROUNDS} rounds of such runs"
            ]
        if not found.rounds and found.out_of_time:
            needs = _holding(plan, plan.run_s)
            return [
                f"no fresh round fit the time left (a round here takes about "
                f"{2 * plan.run_s:.0f} s); a {needs} s budget confirms it"
            ]
        return [fr.noise_words(found.gain, plan.confirm_s or plan.total_s)]

    def store(self, result: TuneResult) -> None:
        """Caches `result` with its budget, unless a fresh run was interrupted."""
        if self.interrupted:
            self.say(
                f"tune: not cached: {len(self.interrupted)} fresh run(s) ended by a signal or "
                "the timeout measured nothing; run again for an answer to keep"
            )
            return
        entry = {
            **result.to_dict(), "cache_hit": False, "budget_s": self.budget_s,
            "announced_s": result.announced_s,
        }  # fmt: skip
        if not _CACHE.put(result.key, self.facts, entry):
            self.say(f"tune: not cached: cannot write {_CACHE.path} (set TOOLKIT_CACHE_DIR)")


def _holding(plan: Plan, run_s: float) -> int:
    """The budget (tens of seconds) holding `plan`'s search and the fresh rounds of `run_s`."""
    return 10 * math.ceil((plan.budget_s + 2 * fr.PLANNED_ROUNDS * run_s) / 10)


class _Clock:
    """A clock that keeps its latest reading (`last`), for the bar."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.read, self.last = clock, clock()

    def __call__(self) -> float:
        self.last = self.read()
        return self.last


def whole_run_choice(
    trials: Sequence[Trial],
    defaults: Candidate,
    best: Candidate,
    steps: int | None,
    batch: int,
) -> tuple[Candidate, str, WholeRun | None]:
    """``(choice, words, figures)`` over a whole run (``engine.whole_run``): a compile the run
    cannot pay back hands the defaults back. Figures None: ranked by the steady state."""
    if best == defaults:
        return best, "", None
    by = {t.candidate: t for t in trials}
    mine, base = by.get(best), by.get(defaults)
    examples = steps * batch if steps else None
    facts = whole_run(base, mine, examples, best.batch_size or batch) if mine and base else None
    if facts is None:
        why = "the run's length is unknown" if not steps else "a compile cost was not measured"
        return best, f"ranked by the steady state ({why})", None
    words = "\n".join(screen.whole_run_lines(facts, facts.pick_wins))
    return (best if facts.pick_wins else defaults), words, facts


def _built(target: Any, data: Any, fresh: Any) -> tuple[Any, Any, Any, str | None]:
    """``(target, data, fresh target, why none)``: a function `target` called, kept for fresh."""
    from toolkit.runner import train
    from toolkit.search.standings import ChooserError, Target

    if data is not None or not callable(target) or hasattr(target, "fit"):
        return target, data, fresh, None
    if isinstance(target, train.Task):
        return target, data, fresh, None
    built = target()
    if not (isinstance(built, tuple) and len(built) == 2):
        raise train.SetupError(
            f"tune({getattr(target, '__name__', target)!r}): a function given to tune must "
            f"return (compiled model, data), got {type(built).__name__}"
        )
    if fresh is not None:
        return *built, fresh, None
    try:
        return *built, Target.of(target), None
    except ChooserError as e:
        return *built, None, str(e)


def _fresh_target(fresh: Any) -> Any:
    """The ``standings.Target`` `fresh` names (None: none); ChooserError if not importable."""
    if fresh is None:
        return None
    from toolkit.search.standings import Target

    return Target.of(fresh)


def _in_process_gain(
    rounds: list[dict[str, float]],
    defaults: Candidate,
    best: Candidate,
    trials: Sequence[Trial] = (),
) -> Gain | None:
    """The pick's paired ratios over this process's rounds (none ran: the search's window)."""
    from toolkit.search.rounds import paired_ratios

    if best == defaults:
        return None
    ratios = paired_ratios(rounds, defaults.label(), best.label())
    if not ratios and trials:
        by = {t.candidate: t.examples_per_sec for t in trials}
        if by.get(defaults) and by.get(best):
            ratios = [by[best] / by[defaults]]
    return Gain.of(ratios, THIS_PROCESS)


def _defaults_then_space(
    work: Workload,
    measure: Callable[[Candidate], float],
    clock: Callable[[], float],
    start: float,
    shown_s: float,
    report: Callable[[str], Any],
) -> tuple[Trial, Space]:
    """The defaults' trial, and the space their step time shapes (``Workload.space``)."""
    defaults = work.defaults()
    t0 = clock()
    rate = measure(defaults)
    first = Trial(defaults, rate, clock() - t0, compile_s=work.compile_s(defaults))
    report(
        f"[1 | {clock() - start:.0f}/{shown_s:.0f} s] {defaults.label()}: {rate:,.1f} examples/s"
    )
    space = default_space(
        work.device,
        step_s=(defaults.batch_size or work.config.batch_size) / rate,
        loader=work.loader(),
    )
    return first, work.space(space, defaults)


def cache_key(work: Workload) -> tuple[str, dict[str, Any]]:
    """``(hash, what was hashed)``: model, input, backend (winners differ) and this machine."""
    facts = {**work.cache_facts(), "machine": _machine_facts()}
    return _CACHE.key(facts), facts


def _machine_facts() -> dict[str, Any]:
    from toolkit import devices

    return machine.machine_facts(
        devices=[f"{d.kind}:{d.index} {d.human_name}" for d in devices.detect()]
    )


def _shallower(key: str, budget_s: float) -> str | None:
    """Why the cached search for `key` does not answer one of `budget_s` (None: it does)."""
    entry = _CACHE.get(key) or {}
    had = entry.get("budget_s") if isinstance(entry, dict) else None
    if not isinstance(had, (int, float)) or isinstance(had, bool) or not math.isfinite(had):
        had = None  # a cache from elsewhere: its budget unknown
    if (
        not isinstance(entry, dict)
        or not entry.get("budget_exhausted")
        or (had is not None and had >= budget_s)
    ):
        return None
    return f"ran out of {had:.0f} s" if had is not None else "ran out of its budget"


def cached(key: str) -> TuneResult | None:
    """The cached result for `key`, if any (a damaged entry: a miss, named in one line)."""
    return _CACHE.read(key, TuneResult.from_dict)


def autotune(task: Any, config: Any, **kwargs: Any) -> tuple[Any, TuneResult]:
    """``(config with the best settings, the TuneResult)``: from the cache, or searched."""
    result = tune(task, config=config, **kwargs)
    return apply(config, result.best), result
