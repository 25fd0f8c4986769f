"""A measured search for the fastest training settings, cached per model, input and machine.

Folklore says XLA and mixed precision make training faster; on a small CPU they often make it
slower, while for a small MLP ``jit_compile`` with many steps per call can be several times
faster (benchmarks/README.md has the figures). So :func:`tune` measures, and this module is its
front end over two shared parts:

* the target is a :class:`~toolkit.search.workload.Workload` (a recipe's Task, or your compiled
  model on your data): each candidate (precision policy, ``jit_compile``,
  ``steps_per_execution``, ``fused_steps``, optionally the batch size) is a short real ``fit``,
  its own warm-up, then a timed window; the rate is examples/s over the window;
* the search and the never-slower choice are the engine's (``toolkit.search.engine``), the
  head-to-head rounds ``toolkit.search.rounds``'s: the Keras defaults are always the first
  candidate, and a pick must beat them by more than ``MIN_GAIN`` head to head, so the search
  never hands back settings slower than the defaults and one lucky window wins nothing; a
  candidate that fails (XLA not available on the device, a precision the device can't run...)
  is recorded with the reason and skipped; a run that cannot win is stopped early;
* the budget is the wall time of the whole call: where the target can be rebuilt in fresh
  processes, the pick is confirmed there (``toolkit.search.fresh``) inside the budget when
  the rounds fit in half of it; where they do not, the first line says how long confirming
  will take, and how to skip it, and that time bounds it (:class:`Plan`);
* the winner is cached (``toolkit.core.cache``, ``$TOOLKIT_CACHE_DIR/tune.json``) under a key of
  the model's configuration, the input's spec and batch size, the backend, and the machine (CPU
  model, devices, framework and toolkit versions): a new TF version is a new key.
  ``autotune`` uses the cache or runs the search.

The device is the config's: visible devices are fixed once TensorFlow's runtime starts, so
comparing CPU with GPU takes one process per device (``python -m toolkit tune --recipe R
--device=cpu`` and ``--device=gpu``, each cached under its own key).
"""

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
CONFIRM_SHARE = 0.5  # the fresh rounds' planned time fits the budget when at most this share
SKIP = "confirm=False"  # how a caller skips the fresh rounds, as the first line says it


def default_space(
    device: Any, step_s: float | None = None, batch_sizes: Sequence[int] = (), loader: str = ""
) -> Space:
    """The search space for a device, each axis from its setting's rule in the settings table
    (``toolkit.runner.config``): float32 plus the device's fast policy, what the backend
    compiles, steps per execution and fused steps where the measured default step time
    `step_s` says the per-step overhead is a real share of the step, and optionally batch
    sizes. `loader` (what feeds fit) decides where a backend's loops pay."""
    ctx = SearchContext(device, step_s, backend.name(), tuple(batch_sizes), loader)
    cut = (how.cut(ctx) for _name, how in SEARCHED_SETTINGS if how.cut is not None)
    return Space(
        **{name: how.values(ctx) for name, how in SEARCHED_SETTINGS},
        cut=tuple(dict.fromkeys(c for c in cut if c)),
    )


def compile_in_question(
    first: float | None, won: float | None, others: Sequence[float | None]
) -> bool:
    """Whether the defaults' compile, measured first (and so with the process's own first
    trace and compile), is measured again: where another candidate wins with a compile of
    its own (`won`), which the whole run's sums weigh against it, or where another's
    compile (`others`) reads less, as the compile column would show it (a table with no
    winner put the defaults' 6.54 s beside steps_per_execution=4's 3.43 s)."""
    if first is None:
        return False
    return won is not None or any(c is not None and c < first for c in others)


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one :func:`tune` spends its time, said in its first line: the `budget_s` asked
    for, and the fresh rounds' time `confirm_s` (0: none), inside the budget (`inside`) or,
    where they do not fit half of it, after it, announced. `run_s`: one fresh run, estimated;
    `window_s`: a fresh run's timed window."""

    budget_s: float
    confirm_s: float = 0.0
    inside: bool = True
    run_s: float = 0.0
    window_s: float = fr.FRESH_WINDOW_S

    @classmethod
    def of(cls, budget_s: float, fresh: bool, start_s: float | None = None) -> Plan:
        """The plan for a budget, with fresh rounds or without: :data:`fresh.PLANNED_ROUNDS`
        rounds of two runs, each a fresh process's start (`start_s`; default: this
        process's, :func:`fresh.start_estimate`), its compile and warm-up, and its window."""
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
    """The winner, every trial, and where the answer came from. Its JSON (the cache's
    entry, the report's ``tune``): its fields, with the pick's label and whether it picked."""

    EXTRA = ("best_label", "picked")

    best: Candidate
    trials: list[Trial]
    key: str
    cache_hit: bool  # where this answer came from (read back: from_dict's, not the JSON's)
    seconds: float  # the whole call: search, head to head and fresh rounds
    budget_exhausted: bool = False
    # The head-to-head rounds after the search: [{label: examples/s}] per round.
    confirm_rounds: list[dict[str, float]] = dataclasses.field(default_factory=list)
    # Why, in short lines ("\n"-separated, each at most 80 columns): no gain figure (the
    # table holds the search's and the head-to-head's, `gain` the one claimed).
    why: str = ""
    # What it claims: the pick's gain over the defaults with its range and rounds, from fresh
    # processes where it could run them, else from this process's rounds (None: no pick).
    gain: Gain | None = None
    # The fresh-process rounds that confirmed (or refused) the pick: [{label: examples/s}].
    fresh_rounds: list[dict[str, float]] = dataclasses.field(default_factory=list)
    # The fastest step and the defaults over the whole run (``engine.whole_run``): each one's
    # compile plus its steps, and where a longer compile pays for itself; None where the
    # run's length or a compile cost is unknown (ranked by the steady state, and said so).
    run: WholeRun | None = None
    # What the budget had no room for (``engine.Untried``): said in `why` with the budget
    # that would try it.
    untried: list[Untried] = fields.field(default_factory=list, read=_untried_of)
    # The budget asked for, and the fresh rounds' time announced beyond it (0: none).
    budget_s: float | None = fields.field(None, read=_budget, omit=_kept_beside)
    announced_s: float = fields.field(0.0, omit=_kept_beside)
    # For the target it answers (not kept in the cache or the report): how to apply the
    # winner (a recipe's flags, or your model's compile arguments) and the batch in words.
    how_to_apply: str = fields.field("", compare=False, json=False)
    # A pick faster here that the fresh rounds did not confirm (nor refuse): the defaults
    # stand, and this is what to try (None: none such); `try_how` applies it as `how_to_apply`.
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
        """What the run's report keeps of the search (its record whole, with the pick, its
        trials and the gain claimed, read once)."""
        section = TuneSection.from_dict(self.to_dict())
        assert section is not None  # from_dict's None is for a report without a search
        return section

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None, cache_hit: bool = True) -> TuneResult:
        """A result the cache (or a fresh process) holds, each field checked."""
        return dataclasses.replace(super().from_dict(d, where), cache_hit=cache_hit)

    def table(self) -> list[Block]:
        """The screen: the trials as a table (fastest first, failures last: the search's and
        the head-to-head's figures, labelled), then the pick in Keras's words, why in short
        lines, and the one claimed gain. ``terminal.show`` renders it for a terminal,
        ``terminal.markdown`` for a file."""
        return screen.screen(self)

    def markdown(self) -> str:
        """:meth:`table` as Markdown."""
        return markdown(self.table())

    def took(self) -> str:
        """How long the call took against what it was given: ``29.4 s of a 30 s budget``, or
        with the fresh rounds announced beyond it."""
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
        # Ended early: every candidate of the space was measured (a compiled model of yours
        # has only what it can change without a rebuild), not a budget that ran out.
        if self.untried or self.seconds > self.budget_s:
            return took
        tried = len({t.candidate for t in self.trials})
        said = f"all {tried} candidates tried" if tried > 1 else "the defaults alone"
        return f"{took}: {said}"


def untried_words(untried: Sequence[Untried], defaults: Candidate) -> str:
    """What the budget left untried, a line each in Keras's words, with what it needs and the
    budget that tries it: ``not tried: jit_compile=True (XLA) (its compile needs about 9 s;
    a 60 s budget tries it)``."""
    said = []
    for u in sorted(untried, key=lambda u: u.needs_s)[:3]:
        needs = (
            f"its compile needs about {u.compile_s:.0f} s"
            if u.compile_s is not None and u.compile_s >= u.needs_s / 2
            else f"it needs about {u.needs_s:.0f} s"
        )
        budget = 10 * math.ceil(u.budget_s() / 10)
        tries = f"a {budget} s budget tries it"
        # settings together as one candidate ("jit_compile=True, steps_per_execution=4" read as
        # two, the second in the table above, tried)
        what = " with ".join(screen.keras_words(u.candidate, defaults)) or u.candidate.label()
        said.append(f"not tried: {what} ({needs}; {tries})")
    more = len(untried) - len(said)
    return "\n".join(said) + (f" (and {more} more)" if more > 0 else "")


def check_budget(budget_s: Any, steps: Any = 1) -> None:
    """ValueError naming the argument (and its flag) for a budget or step count a search
    cannot run on: below --tune_budget's least, not finite, not a number."""
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
    """Finds the fastest settings for a recipe's Task, or for your own compiled model on your
    own batched data (see the module docstring).

    ``tune(task, config)`` searches precision, XLA, steps per execution and fused steps with
    the runner; ``tune(model, data)`` searches what a compiled model can change without being
    rebuilt (XLA and steps per execution, from its current settings as the defaults), on
    exactly your pipeline, and restores the model's compile settings and weights afterwards:
    apply the winner with ``model.compile(..., **result.best.compile_kwargs())``, or, where
    your model's class has a ``compile`` of its own, ``result.best.apply(model)``.

    ``tune(build)``, with `build` a function at the top of your module that returns your
    compiled model and its data, does the same and confirms the pick in fresh processes that
    call `build` again (``result.gain.trusted``): what one process measures alone is said as
    unconfirmed, since rounds in the process that searched favoured the pick by up to 1.4×.

    Args:
        target: a ``toolkit.runner.train.Task``, a compiled Keras model, or a function
            returning ``(compiled model, data)`` (`data` then left out).
        data: with a model, its batched ``tf.data`` pipeline or ``(x, y)`` arrays (required);
            with a Task, a TrainConfig may stand here for `config`.
        config: the base ``TrainConfig`` (device, batch size, data...). Defaults to
            ``TrainConfig()``.
        space: what to search. Defaults to :func:`default_space` for the device.
        budget_s: seconds the whole call may take, the fresh-process check of a pick
            included. Where that check does not fit half of it, the first line says how long
            it will take after the budget (and `skip_words`, how to skip it), and that bounds
            it (:class:`Plan`).
        steps: timed steps per candidate. Defaults to `48`.
        use_cache: read and write the cache. Defaults to `True`.
        refresh: search again, and cache what it finds in place of the cached answer.
            Defaults to `False`.
        progress: called with one line per candidate. Defaults to ``toolkit.core.progress.say``
            (stderr) with a bar of the call's seconds on a terminal.
        fresh: where the pick is confirmed in fresh processes before it is cached
            (``toolkit.search.fresh``): the recipe's name, ``"module:function"`` returning
            your compiled model and data, that function, or a ``Target`` with the recipe's
            arguments and settings. The verbs and ``--autotune`` pass it. None: your model in
            memory cannot be rebuilt elsewhere, so the gain claimed is this process's rounds,
            and says so.
        confirm: False skips the fresh-process check: the gain claimed is this process's.
        skip_words: how your caller skips the check, as the first line says it (the tune
            verb: ``--no_confirm``).
        clock: seconds, for the budget (tests inject one).
        class_weight: with your model, ``{class index: weight}`` as ``fit`` takes it: every
            fit the search runs (and each fresh process's) weighs its batches with it.
            Defaults to `None`.

    Only settings the run they are for can time are searched, picked and applied: a loop
    longer than an epoch, or one whose run is a first call and a warm-up, is left out
    (``engine.RunShape``, from ``config.epochs`` and the epoch's length).
    """
    from toolkit.core import children

    children.refuse_while_importing()  # a fresh process importing your module: not again
    start = clock()
    check_budget(budget_s, steps)  # as the command line refuses them, before anything runs
    fresh_target = _fresh_target(fresh)  # a bad one is refused now, not after the search
    target, data, fresh_target, no_fresh = _built(target, data, fresh_target)
    if class_weight is not None and fresh_target is not None:  # the children's fits weigh too
        fresh_target = dataclasses.replace(fresh_target, class_weight=dict(class_weight))
    # A Task's data is made once for the search, and its finalists stay built for the rounds.
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
    """:func:`tune`'s phases: the cached answer, if it answers this run; else the plan said,
    the search and its head-to-head rounds, the pick settled over the whole run and in fresh
    processes, the answer cached."""
    hit, said = run.cached(fresh_target is not None) if use_cache and not refresh else (None, [])
    if hit is not None:
        return hit.applied_to(work)
    run.begin(Plan.of(run.budget_s, fresh_target is not None), skip_words)
    for line in said:
        run.report(line)
    try:
        trials, best, rounds, why, untried = run.search(space)
    finally:
        work.close()  # its models and data let go before the fresh processes start
    result = run.settle(trials, best, rounds, why, untried, fresh_target)
    if use_cache:
        run.store(result)
    return result.applied_to(work)


class _Tuning:
    """One :func:`tune`'s phases over its workload, in order: the cached answer, if it
    answers this run; the plan said; the search and its head-to-head rounds; the pick settled
    over the whole run and in fresh processes; the answer cached. Holds what they share: the
    clock, the budget and its plan, the progress lines and the bar of the call's seconds (on
    a terminal), which counts what the lines' ``[k | t/T s]`` count."""

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
        self.length_known = length_known  # your model's run is as long as its config says
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
        """Seconds since the call began, by the clock's latest reading: what the latest
        progress line counted."""
        return self.clock.last - self.start

    def report(self, line: str) -> None:
        """A progress line, and the bar moved to the seconds its ``t/T s`` says (the clock's
        latest reading, rounded as the line rounds it)."""
        self.say(line)
        self.bar.advance_to(min(int(f"{max(self.elapsed(), 0.0):.0f}"), round(self.plan.total_s)))

    def measure(self, candidate: Candidate, calls: int = 3) -> float:
        return self.work.rate(candidate, self.steps, calls)

    def close(self) -> None:
        self.bar.close()
        self.work.close()

    def cached(self, confirms: bool = False) -> tuple[TuneResult | None, list[str]]:
        """The cached answer when it fits this run and came from a search no shallower, its
        pick confirmed in fresh processes where this call would confirm one (an in-process
        ``tune(model, data)`` caches a pick its own rounds measured); else None and why the
        search runs again (lines, said after the plan's)."""
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
        if why_not is not None:  # each its own line: each fits an 80-column terminal
            return None, [
                "tune: the cached pick does not fit this run: searching",
                f"  ({why_not})",
            ]
        return None, [f"tune: the cached search {shallower}: searching again"]

    def search(
        self, space: Space | None
    ) -> tuple[list[Trial], Candidate, list[dict[str, float]], str, list[Untried] | None]:
        """The search in its share of the plan's, then the head-to-head rounds in the rest:
        ``(trials, pick, rounds, why, what the budget left untried)``: None where only the
        rounds ran out of it. The fresh rounds' time, inside the budget, is held back only
        while a candidate beats the defaults (with nothing to confirm, the search may use
        it)."""
        work, plan, clock = self.work, self.plan, self.clock
        work.prepare(self.steps)  # (your generator: read once here, replayed by every candidate)
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
        """The search's measuring of a candidate (a run past what the plan gives the search
        stops after its current call; the defaults always run whole: every pick is judged
        against them), and its sampling over a shorter window at the defaults' pace."""
        work, plan = self.work, self.plan
        pace = {"rate": first.examples_per_sec} if first is not None else {}
        beaten: list[bool] = []  # whether a candidate beat the defaults' rate so far

        def searching(candidate: Candidate, steps: int | None = None) -> float:
            if candidate not in own:  # (the reserves' share, where nothing beat the defaults)
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
        """`seconds` after the call began, on ``time.perf_counter`` (what the workload's runs
        read), whatever clock the plan counts on."""
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
        """The pick over the whole run (a compile the run cannot pay back hands the defaults
        back), then confirmed in fresh processes where the target can be rebuilt there, in
        what the plan left of the call."""
        work, defaults = self.work, self.defaults
        # The defaults, measured first, paid the process's own first compile too: again
        first = work.compile_s(defaults)
        others = [work.compile_s(t.candidate) for t in trials if t.candidate != defaults]
        won = work.compile_s(best) if best != defaults else None
        if compile_in_question(first, won, others):
            work.compile_again(defaults, self._real_deadline(self.plan.total_s))
        for t in trials:
            t.compile_s = work.compile_s(t.candidate)
        if untried is not None:  # one the search came back to is a row of the table
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
        """The pick against the defaults in fresh processes (``toolkit.search.fresh``), in
        what the plan left of the call; runs a signal or the timeout ended go to
        `interrupted`."""
        work, defaults, plan = self.work, self.defaults, self.plan
        rates = {t.candidate: t.examples_per_sec for t in trials}
        batch = work.batch_size or work.config.batch_size
        # Each run's window at its own rate (sized at the defaults', a 2× pick timed half of
        # it) and its own batch; a candidate the search did not time takes the slower rate.
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
        """What the time given let the fresh rounds tell, where they did not confirm the
        pick: none fit (and the budget that fits them), or the smallest gain this machine's
        noise lets that time confirm."""
        if found.pick != self.defaults or (found.gain is not None and found.gain.answered):
            return []
        plan = self.plan
        if found.overran_s is not None:  # a fresh run here takes longer than the plan had
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
        """Caches `result` with the budget it had (a more thorough search is not answered
        by it), unless a signal or the timeout ended one of its fresh runs."""
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
    """The budget, in tens of seconds, that holds `plan`'s search and
    :data:`fresh.PLANNED_ROUNDS` rounds of two fresh runs of `run_s` each."""
    return 10 * math.ceil((plan.budget_s + 2 * fr.PLANNED_ROUNDS * run_s) / 10)


class _Clock:
    """A clock that keeps its latest reading (`last`): the bar moves to what the latest
    progress line counted."""

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
    """The pick against the defaults over a whole run of `steps` steps of `batch` examples
    (``engine.whole_run``): a pick whose longer compile the run is too short to pay back
    hands the defaults back. Returns the choice, its words (short lines) and the figures
    (None: ranked by the steady state, the words say why)."""
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
    """``(target, data, fresh target, why none)``: a `target` that is your function returning
    ``(compiled model, data)`` is called, and is what fresh processes call again unless
    `fresh` names another (one they cannot import leaves the pick unconfirmed, said why)."""
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
    """The ``standings.Target`` that `fresh` names (None: none).

    Raises:
        toolkit.search.standings.ChooserError: one a fresh process could not import."""
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
    """The pick's paired ratios over this process's head-to-head rounds (none ran: its
    search window's, one round, said as not confirmed)."""
    from toolkit.search.rounds import paired_ratios

    if best == defaults:
        return None
    ratios = paired_ratios(rounds, defaults.label(), best.label())
    if not ratios and trials:  # no round fit the budget: the search's one window each
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
    """The defaults' trial, and the space their step time shapes (cut, for your compiled
    model, to what it can change without a rebuild). Its line counts the call's seconds
    against `shown_s`, as every line of one tune does."""
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
    """``(hash, what was hashed)`` for a workload's model, input, backend and this machine.

    The backend is part of the key: the same model and input give the same signature under
    every backend, and one backend's winner can be far slower on another (TensorFlow's
    ``--nojit_compile --steps_per_execution=8`` means eager execution on JAX)."""
    facts = {**work.cache_facts(), "machine": _machine_facts()}
    return _CACHE.key(facts), facts


def _machine_facts() -> dict[str, Any]:
    from toolkit import devices

    return machine.machine_facts(
        devices=[f"{d.kind}:{d.index} {d.human_name}" for d in devices.detect()]
    )


def _shallower(key: str, budget_s: float) -> str | None:
    """Why the cached search for `key` does not answer a search of `budget_s` (None: it
    does): it ran out of a smaller budget (a search that covered its whole space within its
    budget answers any larger one)."""
    entry = _CACHE.get(key) or {}
    had = entry.get("budget_s") if isinstance(entry, dict) else None
    if not isinstance(had, (int, float)) or isinstance(had, bool) or not math.isfinite(had):
        had = None  # a cache from elsewhere (hand-edited, another version): its budget unknown
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
