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
from collections.abc import Callable, Sequence
from typing import Any

from toolkit import backend
from toolkit.core import machine
from toolkit.core import progress as tk_progress
from toolkit.core.cache import Cache
from toolkit.report._ledger import format_s
from toolkit.runner.config import SEARCHED_SETTINGS, SearchContext, TrainConfig
from toolkit.search.engine import (
    FINALISTS,
    Candidate,
    Space,
    Trial,
    Untried,
    figure,
    search,
    whole_run,
)
from toolkit.search.fresh import FRESH, THIS_PROCESS, Gain, confirm_fresh, fresh_steps
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
SEARCH_SHARE = 0.7  # of the budget for the search; the rest is for the head-to-head
SEARCH_CALLS = 1  # timed executions per candidate in the search (at least `steps` steps)


def default_space(
    device: Any, step_s: float | None = None, batch_sizes: Sequence[int] = (), loader: str = ""
) -> Space:
    """The search space for a device, each axis from its setting's rule in the settings table
    (``toolkit.runner.config``): float32 plus the device's fast policy, what the backend
    compiles, steps per execution and fused steps where the measured default step time
    `step_s` says the per-step overhead is a real share of the step, and optionally batch
    sizes. `loader` (what feeds fit) decides where a backend's loops pay."""
    ctx = SearchContext(device, step_s, backend.name(), tuple(batch_sizes), loader)
    return Space(**{name: how.values(ctx) for name, how in SEARCHED_SETTINGS})


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
    # What it claims: the pick's gain over the defaults with its spread and rounds, from fresh
    # processes where it could run them, else from this process's rounds (None: no pick).
    gain: Gain | None = None
    # The fresh-process rounds that confirmed (or refused) the pick: [{label: examples/s}].
    fresh_rounds: list[dict[str, float]] = dataclasses.field(default_factory=list)
    # The fastest step and the defaults over the whole run (``engine.whole_run``): each one's
    # compile plus its steps, and where a longer compile pays for itself; None where the
    # run's length or a compile cost is unknown (ranked by the steady state, and said so).
    run: dict[str, Any] | None = None
    # For the target it answers (not kept in the cache or the report): how to apply the
    # winner (a recipe's flags, or your model's compile arguments) and the batch in words.
    # What the budget had no room for (``engine.Untried``): said in `why` with the budget
    # that would try it.
    untried: list[Untried] = dataclasses.field(default_factory=list)
    how_to_apply: str = dataclasses.field(default="", compare=False)
    batch_size: int | None = dataclasses.field(default=None, compare=False)
    batch_words: str = dataclasses.field(default="", compare=False)

    def applied_to(self, work: Workload) -> TuneResult:
        """This result, saying how to apply it to `work` and with its batch size."""
        return dataclasses.replace(
            self,
            how_to_apply=work.how_to_apply(self.best),
            batch_size=work.batch_size,
            batch_words=work.batch_words(),
        )

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
            "gain": self.gain.to_dict() if self.gain is not None else None,
            # What is claimed: only for a pick handed back (a refused pick's figures stay in
            # "gain" and "why", not as a claim).
            "gain_words": self.gain.words() if self.gain is not None and self.picked else None,
            "fresh_rounds": self.fresh_rounds,
            "run": self.run,
            "untried": [u.to_dict() for u in self.untried],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], cache_hit: bool = True) -> TuneResult:
        trials = [
            Trial(
                Candidate.from_dict(t["candidate"], f"trials[{i}].candidate"),
                figure(t["examples_per_sec"], f"trials[{i}].examples_per_sec", optional=True),
                figure(t["seconds"], f"trials[{i}].seconds"),
                t["error"],
                [figure(r, f"trials[{i}].rates[{j}]") for j, r in enumerate(t.get("rates") or [])],
                figure(t.get("compile_s"), f"trials[{i}].compile_s", optional=True),
            )
            for i, t in enumerate(d["trials"])
        ]
        return cls(
            Candidate.from_dict(d["best"], "best"), trials, d["key"], cache_hit,
            figure(d["seconds"], "seconds"),
            d.get("budget_exhausted", False), list(d.get("confirm_rounds") or []),
            d.get("why", ""), Gain.from_dict(d.get("gain")), list(d.get("fresh_rounds") or []),
            d.get("run") if isinstance(d.get("run"), dict) else None,
            _untried_of(d.get("untried")),
        )  # fmt: skip

    def table(self) -> str:
        """The trials as a Markdown table, fastest first, failures last."""
        base = self.defaults_rate
        rows = sorted(
            self.trials,
            key=lambda t: -(t.examples_per_sec or -1.0),
        )
        lines = [
            "| settings | examples/s | spread | runs | vs defaults | compile | note |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for t in rows:
            if t.examples_per_sec is None:
                lines.append(f"| {t.candidate.label()} | — | — | 0 | — | — | failed: {t.error} |")
                continue
            ratio = f"{t.examples_per_sec / base:.2f}×" if base else "—"
            note = "defaults" if t is self.trials[0] else ""
            if t.candidate == self.best:
                note = (note + ", " if note else "") + "**chosen**"
            compiled = format_s(t.compile_s) if t.compile_s is not None else "—"
            lines.append(
                f"| {t.candidate.label()} | {t.examples_per_sec:,.1f} | {t.spread() or '—'} | "
                f"{len(t.rates)} | {ratio} | {compiled} | {note} |"
            )
        if self.confirm_rounds:
            lines.append(
                f"\n{len(self.confirm_rounds)} head-to-head round(s) after the search "
                f"(examples/s: median of every run; vs defaults: of all runs). {self.why}"
            )
        elif self.why:
            lines.append(f"\n{self.why}")
        if self.gain is not None and self.picked:
            lines.append(f"claimed gain: {self.gain.words()}")
        return "\n".join(lines)


def _untried_of(entries: Any) -> list[Untried]:
    """The untried candidates a cached result holds (a malformed entry is dropped)."""
    out = []
    for u in entries if isinstance(entries, list) else []:
        try:
            compile_s = None if u.get("compile_s") is None else float(u["compile_s"])
            needs, spent, reserve = (
                float(u.get(k) or 0.0) for k in ("needs_s", "spent_s", "reserve_s")
            )
            out.append(Untried(Candidate(**u["candidate"]), needs, compile_s, spent, reserve))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def untried_words(untried: Sequence[Untried], defaults: Candidate) -> str:
    """What the budget left untried, each with what it needs and the budget that tries it:
    ``xla not tried: its compile needs about 9 s; a 60 s budget tries it``."""
    said = []
    for u in sorted(untried, key=lambda u: u.needs_s)[:3]:
        needs = (
            f"its compile needs about {u.compile_s:.0f} s"
            if u.compile_s is not None and u.compile_s >= u.needs_s / 2
            else f"it needs about {u.needs_s:.0f} s"
        )
        budget = 10 * math.ceil(u.budget_s() / 10)
        tries = f"a {budget} s budget tries it"
        said.append(f"{u.candidate.changes(defaults)} not tried: {needs}; {tries}")
    more = len(untried) - len(said)
    return "; ".join(said) + (f" (and {more} more)" if more > 0 else "")


def check_budget(budget_s: Any, steps: Any = 1) -> None:
    """ValueError naming the argument (and its flag) for a budget or step count a search
    cannot run on: below --tune_budget's least, not finite, not a number."""
    import math

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
    progress: Callable[[str], Any] | None = None,
    fresh: Any = None,
) -> TuneResult:
    """Finds the fastest settings for a recipe's Task, or for your own compiled model on your
    own batched data (see the module docstring).

    ``tune(task, config)`` searches precision, XLA, steps per execution and fused steps with
    the runner; ``tune(model, data)`` searches what a compiled model can change without being
    rebuilt (XLA and steps per execution, from its current settings as the defaults), on
    exactly your pipeline, and restores the model's compile settings and weights afterwards:
    apply the winner with ``model.compile(..., **result.best.compile_kwargs())``.

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
        budget_s: seconds the search may take (the defaults are always measured). The
            fresh-process check of a pick comes after it: 3–5 rounds of two runs.
        steps: timed steps per candidate. Defaults to `48`.
        use_cache: read and write the cache. Defaults to `True`.
        progress: called with one line per candidate. Defaults to ``toolkit.core.progress.say``
            (stderr) with a bar of the budget on a terminal.
        fresh: where the pick is confirmed in fresh processes before it is cached
            (``toolkit.search.fresh``): the recipe's name, ``"module:function"`` returning
            your compiled model and data, that function, or a ``Target`` with the recipe's
            arguments and settings. The verbs and ``--autotune`` pass it. None: your model in
            memory cannot be rebuilt elsewhere, so the gain claimed is this process's rounds,
            and says so.

    Only settings the run they are for can time are searched, picked and applied: a loop
    longer than an epoch, or one whose run is a first call and a warm-up, is left out
    (``engine.RunShape``, from ``config.epochs`` and the epoch's length).
    """
    check_budget(budget_s, steps)  # as the command line refuses them, before anything runs
    fresh_target = _fresh_target(fresh)  # a bad one is refused now, not after the search
    target, data, fresh_target, no_fresh = _built(target, data, fresh_target)
    # A Task's data is made once for the search, and its finalists stay built for the rounds.
    work = workload(target, data, config, resident=True, keep=FINALISTS)
    run = _Tuning(
        work, budget_s, steps, progress, length_known=work.length_known(config is not None)
    )
    run.no_fresh = no_fresh or work.fresh_words()
    try:
        hit = run.cached() if use_cache else None
        if hit is not None:
            return hit.applied_to(work)
        trials, best, rounds, why, untried = run.search(space)
    finally:
        run.close()
    result = run.settle(trials, best, rounds, why, untried, fresh_target)
    if use_cache:
        run.store(result)
    return result.applied_to(work)


class _Tuning:
    """One :func:`tune`'s phases over its workload, in order: the cached answer, if it
    answers this run; the search and its head-to-head rounds; the pick settled over the whole
    run and in fresh processes; the answer cached. Holds what they share: the clock, the
    budget, the progress lines and the bar of the budget's seconds (on a terminal)."""

    def __init__(
        self,
        work: Workload,
        budget_s: float,
        steps: int,
        progress: Callable[[str], Any] | None,
        length_known: bool,
    ) -> None:
        self.work, self.budget_s, self.steps = work, budget_s, steps
        self.start = time.perf_counter()
        self.defaults = work.defaults()
        self.key, self.facts = cache_key(work)
        self.shape = work.run_shape()
        self.length_known = length_known  # your model's run is as long as its config says
        self.bar = tk_progress.bar(round(budget_s), "tune", unit="s", enabled=progress is None)
        self.say = progress or tk_progress.say
        self.interrupted: list[str] = []  # fresh runs a signal or the timeout ended
        self.no_fresh = work.fresh_words()  # why no fresh process confirms a pick

    def report(self, line: str) -> None:
        """A progress line, and the bar moved to the seconds spent (whole ones)."""
        self.say(line)
        self.bar.advance_to(int(min(time.perf_counter() - self.start, self.budget_s)))

    def measure(self, candidate: Candidate, calls: int = 3) -> float:
        return self.work.rate(candidate, self.steps, calls)

    def close(self) -> None:
        self.bar.close()
        self.work.close()

    def cached(self) -> TuneResult | None:
        """The cached answer when it fits this run and came from a search no shallower."""
        hit = cached(self.key)
        if hit is None:
            return None
        why_not = self.shape.why_not(hit.best) if self.shape is not None else None
        shallower = _shallower(self.key, self.budget_s)
        if why_not is None and shallower is None:
            self.report(f"tune: cached result for this model, input and machine ({self.key})")
            return hit
        if why_not is not None:
            self.report("tune: the cached pick does not fit this run: searching")
            self.report(f"  ({why_not})")  # its own line: each fits an 80-column terminal
        else:
            self.report(f"tune: the cached search {shallower}: searching again")
        return None

    def search(
        self, space: Space | None
    ) -> tuple[list[Trial], Candidate, list[dict[str, float]], str, list[Untried] | None]:
        """The search in its share of the budget, then the head-to-head rounds in the rest:
        ``(trials, pick, rounds, why, what the budget left untried)``: None where only the
        rounds ran out of it."""
        work, budget_s = self.work, self.budget_s
        work.prepare(self.steps)  # (your generator: read once here, replayed by every candidate)
        first = None
        if space is None:  # measure the defaults first: their step time shapes the space
            self.say(f"tune: measuring the defaults first (budget {budget_s:.0f} s)")
            first, space = _defaults_then_space(work, self.measure, budget_s, self.report)
        if self.shape is not None and space.run is None:  # only loops the run can time
            space = dataclasses.replace(space, run=self.shape)
        own = (self.defaults, space.defaults())

        pace = {}  # the defaults' rate: a sampled window's seconds in steps

        def searching(candidate: Candidate, steps: int | None = None) -> float:
            # A run past the search's share of the budget stops after its current call
            # (the defaults always run whole: every pick is judged against them).
            if candidate not in own:  # (the rounds' share, where nothing beat the defaults)
                work.deadline = self.start + budget_s
            rate = self.work.rate(candidate, steps or self.steps, SEARCH_CALLS)
            pace.setdefault("rate", rate)  # finalists: 3 calls head to head
            return rate

        def sampling(candidate: Candidate, window_s: float) -> float:
            """A window of about `window_s` at the defaults' pace (its steps and warm-up)."""
            batch = candidate.batch_size or work.batch_size or work.config.batch_size
            steps = int(window_s * pace.get("rate", 0.0) / max(batch, 1) / 2)
            return searching(candidate, max(1, min(steps, self.steps)))

        if first is not None:
            pace["rate"] = first.examples_per_sec
        trials, untried = search(
            searching, space, budget_s=budget_s, progress=self.report, first=first,
            spent_s=time.perf_counter() - self.start, compile_of=work.compile_s,
            sample=sampling, reserve_s=budget_s * (1 - SEARCH_SHARE),
        )  # fmt: skip
        work.deadline = self.start + budget_s
        best, rounds, why, out_of_time = confirm(
            self.measure, trials, budget_s=budget_s, progress=self.report,
            spent_s=time.perf_counter() - self.start,
        )  # fmt: skip
        return trials, best, rounds, why, untried if untried or not out_of_time else None

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
        back), then confirmed in fresh processes where the target can be rebuilt there."""
        work, defaults = self.work, self.defaults
        for t in trials:
            t.compile_s = work.compile_s(t.candidate)
        batch = defaults.batch_size or work.batch_size or work.config.batch_size
        steps_run = work.run_steps(defaults) if self.length_known else None
        fastest = best
        best, run_words, run_facts = whole_run_choice(trials, defaults, best, steps_run, batch)
        if best != fastest and why.startswith("chosen: "):  # the rounds' winner, not chosen
            why = "head to head: " + why.removeprefix("chosen: ")
        why = _joined(_joined(why, run_words), untried_words(untried or [], defaults))
        gain = _in_process_gain(rounds, defaults, best, trials)
        fresh_rounds: list[dict[str, float]] = []
        if best != defaults and fresh_target is not None:
            best, gain, fresh_rounds, words = _confirm_fresh(
                fresh_target, work, trials, defaults, best, self.steps, self.say,
                self.interrupted,
            )  # fmt: skip
            why = _joined(why, words)
        elif best != defaults:
            why = _joined(why, f"not run in fresh processes ({self.no_fresh})")
        return TuneResult(
            best, trials, self.key, False, time.perf_counter() - self.start, untried != [],
            rounds, why, gain, fresh_rounds, run_facts, list(untried or []),
        )  # fmt: skip

    def store(self, result: TuneResult) -> None:
        """Caches `result` with the budget it had (a more thorough search is not answered
        by it), unless a signal or the timeout ended one of its fresh runs."""
        if self.interrupted:
            self.say(
                f"tune: not cached: {len(self.interrupted)} fresh run(s) ended by a signal or "
                "the timeout measured nothing; run again for an answer to keep"
            )
            return
        entry = {**result.to_dict(), "cache_hit": False, "budget_s": self.budget_s}
        if not _CACHE.put(result.key, self.facts, entry):
            self.say(f"tune: not cached: cannot write {_CACHE.path} (set TOOLKIT_CACHE_DIR)")


def _joined(why: str, words: str) -> str:
    return f"{why}; {words}" if why and words else why or words


def whole_run_choice(
    trials: Sequence[Trial],
    defaults: Candidate,
    best: Candidate,
    steps: int | None,
    batch: int,
) -> tuple[Candidate, str, dict[str, Any] | None]:
    """The pick against the defaults over a whole run of `steps` steps of `batch` examples
    (``engine.whole_run``): a pick whose longer compile the run is too short to pay back
    hands the defaults back. Returns the choice, its words and the figures (None: ranked by
    the steady state, the words say why)."""
    if best == defaults:
        return best, "", None
    by = {t.candidate: t for t in trials}
    mine, base = by.get(best), by.get(defaults)
    examples = steps * batch if steps else None
    facts = whole_run(base, mine, examples, best.batch_size or batch) if mine and base else None
    if facts is None:
        why = "the run's length is unknown" if not steps else "a compile cost was not measured"
        return best, f"ranked by the steady state ({why})", None
    run = f"whole run of {facts['steps']:,} steps: {format_s(facts['pick_s'])} vs the defaults' "
    run += format_s(facts["defaults_s"])
    even, extra = facts["break_even_steps"], facts["extra_compile_s"]
    if not facts["pick_wins"]:
        after = f"after {even:,} steps" if even else "never"
        return (
            defaults,
            (
                f"{best.label()} is faster a step, but its compile costs {format_s(extra)} more "
                f"and pays for itself {after}: the defaults finish this run first ({run})"
            ),
            facts,
        )
    if extra > 0 and even:
        return (
            best,
            (
                f"its compile costs {format_s(extra)} more and pays for itself after {even:,} "
                f"steps ({run})"
            ),
            facts,
        )
    return best, run, facts


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
    if best == defaults:
        return None
    base, mine = defaults.label(), best.label()
    ratios = [r[mine] / r[base] for r in rounds if r.get(base) and r.get(mine)]
    if not ratios and trials:  # no round fit the budget: the search's one window each
        by = {t.candidate: t.examples_per_sec for t in trials}
        if by.get(defaults) and by.get(best):
            ratios = [by[best] / by[defaults]]
    return Gain.of(ratios, THIS_PROCESS)


def _confirm_fresh(
    fresh: Any,
    work: Workload,
    trials: list[Trial],
    defaults: Candidate,
    best: Candidate,
    steps: int,
    say: Callable[[str], Any],
    interrupted: list[str],
) -> tuple[Candidate, Gain | None, list[dict[str, float]], str]:
    """The pick against the defaults in fresh processes (``toolkit.search.fresh``); runs a
    signal or the timeout ended go to `interrupted`."""
    rates = {t.candidate: t.examples_per_sec for t in trials}
    batch = work.batch_size or work.config.batch_size
    # Each run's window at its own rate (sized at the defaults', a 2× pick timed half of it)
    # and its own batch; a candidate the search did not time takes the slower known rate.
    timed = [r for r in (rates.get(defaults), rates.get(best)) if r]
    length = {
        c: fresh_steps(c, rates.get(c) or min(timed, default=None), c.batch_size or batch, steps)
        for c in (defaults, best)
    }
    say(f"tune: confirming {best.label()} in {FRESH}")
    return confirm_fresh(
        fresh, defaults, best, backend=backend.name(), device=work.config.device,
        steps=length, progress=say, interrupted=interrupted,
    )  # fmt: skip


def _defaults_then_space(
    work: Workload,
    measure: Callable[[Candidate], float],
    budget_s: float,
    report: Callable[[str], Any],
) -> tuple[Trial, Space]:
    """The defaults' trial, and the space their step time shapes (cut, for your compiled
    model, to what it can change without a rebuild)."""
    defaults = work.defaults()
    t0 = time.perf_counter()
    rate = measure(defaults)
    first = Trial(defaults, rate, time.perf_counter() - t0, compile_s=work.compile_s(defaults))
    report(f"[1 | {first.seconds:.0f}/{budget_s:.0f} s] {defaults.label()}: {rate:,.1f} examples/s")
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
