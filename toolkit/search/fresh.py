"""A pick confirmed where the user will run it: in fresh processes, and its gain with its range.

One process measuring every candidate in turn flatters some of them: the defaults run first,
on a cold machine, the finalists stay built and warm, and a short window in a long-lived
process sees none of what a new run pays. On a mixup pipeline the search's head-to-head said
1.74× where alternating fresh-process runs measured 1.20×. So before a pick is cached,
:func:`confirm_fresh` runs the defaults and the pick in new processes (``python -m
toolkit._child``, the backends chooser's entry point: the same recipe and settings, or
``module:function``, and the candidate, as one typed spec), in paired, interleaved rounds
(``rounds.interleaved_rounds``), until the range of the gain answers the question or the time
given ends:

* the range is a :class:`~toolkit.core._gain.Gain`'s: the median of the paired ratios (pick
  / defaults, one a round), and one-sided 95 % bounds (Student's t on the log ratios: two
  rounds far apart say little, five that agree say much); from ``ROBUST_ROUNDS`` rounds on,
  about their median with the robust spread (``toolkit.core.stats``: 1.4826·MAD), so that
  one round a busy machine disturbed (0.49× among rounds of 1.23×) does not hold the
  question open;
* its low end above 1 (and the median above ``1 + MIN_GAIN``, the never-slower rule): the pick
  is **confirmed**; its high end below ``1 + MIN_GAIN``: it is **refused** (no faster than the
  defaults by more than the noise); either way the rounds end there;
* the time ran out with neither: the defaults stay, and :meth:`Gain.resolvable` says the
  smallest gain this machine's noise lets that many rounds confirm.

Each run times its own window at its own rate (a window sized at the defaults' rate gave a 2×
pick 1.5 s, where one second moves by ±15 % on two shared cores): :func:`window_s` seconds,
shorter for a short budget, at most :data:`FRESH_WINDOW_S`.

Your own model in memory cannot be rebuilt in another process: there the claim comes from
the in-process rounds and says so ("this process"). Hand tune a ``module:function`` that
returns the model and data (``tune(..., fresh="mytrain:make")``, ``--model_fn``) for the
fresh-process check.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolkit.core._gain import FRESH, MIN_GAIN, Gain
from toolkit.search.engine import Candidate
from toolkit.search.rounds import decide, interleaved_rounds, paired_ratios

__all__: list[str] = []  # the search's own: tune hands back its Gain (TuneResult.gain)

FRESH_ROUNDS = 8  # fresh-process rounds at most (fewer once the range answers)
PLANNED_ROUNDS = 3  # the rounds a plan makes room for (a clear gain needs two or three)
FRESH_WINDOW_S = 6.0  # a fresh run's timed window, at most (seconds at its own rate)
MIN_WINDOW_S = 1.0  # ... and at least
FRESH_START_S = 8.0  # a fresh process's start (Python, the framework, the data), when unknown
FRESH_TIMEOUT_S = 600.0  # one fresh run, at most, where no deadline bounds it
OVERRUN = 3.0  # a fresh run taking this many times the first one's time is stopped
GRACE_S = 2.0  # a run may end this long past the deadline before it is stopped


def noise_words(gain: Gain | None, seconds: float) -> str:
    """What this machine's noise lets `seconds` of fresh rounds confirm: ``on this machine's
    noise (±12 %) a gain under 1.15× cannot be confirmed in 30 s``, and where more rounds
    would confirm the gain measured, how many (``; 3 rounds, about 50 s, would confirm the
    4.35× measured at this noise``: two rounds that both won at 6.0× and 2.7× read as
    "under 12.54× cannot be confirmed" alone). Empty: unknown."""
    smallest = gain.resolvable() if gain is not None else None
    if gain is None or gain.noise is None or smallest is None:
        return ""
    said = (
        f"on this machine's noise (±{gain.noise:.0%}) a gain under {smallest:.2f}× cannot be "
        f"confirmed in {seconds:.0f} s"
    )
    # Two rounds' Student's t is wide (6.3 standard errors): a gain that won every round can
    # read as far from confirmed when a few more rounds would confirm it. Say how many.
    more = next(
        (n for n in range(gain.rounds + 1, FRESH_ROUNDS + 1)
         if (gain.resolvable(n) or math.inf) < gain.ratio),
        None,
    )  # fmt: skip
    if more is not None and gain.ratio > 1 + MIN_GAIN:
        budget = 10 * math.ceil(seconds * more / gain.rounds / 10)
        said += (
            f"; {more} rounds, about {budget} s, would confirm the {gain.ratio:.2f}× measured "
            "at this noise"
        )
    return said


def window_s(budget_s: float) -> float:
    """A fresh run's timed window for a tune of `budget_s`: a twentieth of it, within
    :data:`MIN_WINDOW_S` and :data:`FRESH_WINDOW_S` (a 30 s tune times 1.5 s a run)."""
    return min(FRESH_WINDOW_S, max(MIN_WINDOW_S, budget_s / 20))


def fresh_steps(
    candidate: Candidate, rate: float | None, batch_size: int, steps: int, window: float = 0.0
) -> int:
    """Timed steps for `candidate`'s fresh run: enough for `window` seconds (default
    :data:`FRESH_WINDOW_S`) at `rate`, the rate the search measured for it (a new process's
    short window is noisier still), `steps` where the rate is unknown, and 5 calls at least."""
    window = window or FRESH_WINDOW_S
    enough = math.ceil(window * rate / batch_size) if rate and batch_size else steps
    return max(enough, 5 * candidate.per_call)


def start_estimate() -> float:
    """What a fresh process should take before it trains: this process's own start (it
    imported the same framework and made the same data), within 3 s and 30 s;
    :data:`FRESH_START_S` where that is unknown."""
    from toolkit.profiling._timing import process_start

    started = process_start()
    if started is None:
        return FRESH_START_S
    return min(max(time.perf_counter() - started, 3.0), 30.0)


@dataclasses.dataclass(frozen=True)
class Confirmation:
    """What :func:`confirm_fresh` found: the pick that stands (the defaults unless confirmed),
    the fresh :class:`Gain` (None: no round measured both), the rounds as ``{label:
    examples/s}``, why in short lines, whether the time given ended the rounds, and the
    longest run :func:`run_timeout` stopped (None: none)."""

    pick: Candidate
    gain: Gain | None
    rounds: list[dict[str, float]]
    words: tuple[str, ...]
    out_of_time: bool = False
    overran_s: float | None = None  # the longest run the timeout stopped, in seconds
    longest_s: float | None = None  # the longest run, stopped or not (one run's cost here)


@dataclasses.dataclass(frozen=True)
class Timing:
    """The time fresh rounds may take: the `deadline` on `clock` (None: no bound), each
    candidate's run estimated in seconds (`run_s`, for the first round; later rounds cost what
    the last one did), and how a progress line counts time (`start`, `shown_s`: ``[fresh 1 |
    45/92 s]``; `shown_s` 0: ``[fresh round 1]``)."""

    deadline: float | None = None
    clock: Callable[[], float] = time.perf_counter
    run_s: Mapping[Candidate, float] = dataclasses.field(default_factory=dict)
    start: float = 0.0
    shown_s: float = 0.0

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.clock()

    def stamp(self) -> str:
        return f"{self.clock() - self.start:.0f}/{self.shown_s:.0f} s" if self.shown_s else ""


def confirm_fresh(
    target: Any,
    defaults: Candidate,
    pick: Candidate,
    *,
    backend: str,
    device: str,
    steps: int | Mapping[Candidate, int],
    rounds: int = FRESH_ROUNDS,
    progress: Callable[[str], Any] | None = None,
    runner: Callable[[Candidate, int], Any] | None = None,
    interrupted: list[str] | None = None,
    timing: Timing | None = None,
) -> Confirmation:
    """Runs the defaults and `pick` in paired, interleaved rounds of fresh processes, `rounds`
    at most, until the gain's range answers (:attr:`Gain.answered`) or `timing`'s deadline
    would pass (a round that would end past it is not started). Each run is `steps` timed
    steps of `target` (a ``standings.Target``): one count for both, or each candidate's own.

    `runner` ``(candidate, round)`` returns a run's ``standings.Figures`` or a
    ``_processes.ChildResult`` (tests inject it); by default a ``python -m toolkit._child``
    process, stopped at the deadline. Each run a signal or the timeout ended is added to
    `interrupted` (its candidate's label): such an answer is not the candidates' own, and tune
    does not cache it. The defaults stand unless the pick is confirmed."""
    timing = timing or Timing()
    child = _child_runner(
        target, backend=backend, device=device, steps=steps, timing=timing, progress=progress
    )
    fresh = _FreshRounds(runner or child, defaults, pick, rounds, progress, interrupted, timing)
    left = timing.left()
    done, out_of_time = interleaved_rounds(
        [defaults, pick], fresh.measure, max_rounds=rounds, settled=fresh.settled,
        budget_s=left, round_cost=fresh.cost, clock=timing.clock,
    )  # fmt: skip
    return fresh.verdict(done, out_of_time)


def _child_runner(
    target: Any,
    *,
    backend: str,
    device: str,
    steps: int | Mapping[Candidate, int],
    timing: Timing,
    progress: Callable[[str], Any] | None = None,
) -> Callable[[Candidate, int], Any]:
    """The default runner of :func:`confirm_fresh`: ``(candidate, round)`` runs `candidate`
    on `target` in a new ``python -m toolkit._child`` process, stopped at
    :func:`run_timeout`, saying to `progress` at least every ten seconds that it still runs,
    and returns its ``ChildResult``. It counts no FLOPs: only its rate is read."""
    from toolkit.search._processes import ChildSpec, run_child

    # The searching process still holds its device memory: a child must take only what it
    # needs (JAX would otherwise reserve 75 % of a GPU up front and fail on what is left).
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    if hasattr(target, "config"):
        target = dataclasses.replace(target, config={**target.config, "count_flops": False})

    first: list[float] = []  # the first run's seconds (its process's start, build, steps)

    def child(candidate: Candidate, r: int) -> Any:
        n = steps[candidate] if isinstance(steps, Mapping) else steps
        spec = ChildSpec("figures", backend, device, target, candidate, steps=n)
        left = timing.left()
        budget = run_timeout(left, [], None)
        timeout = run_timeout(left, first, timing.run_s.get(candidate))

        def still(seconds: float) -> str:
            stamp = timing.stamp()
            head = f"[fresh {r + 1} | {stamp}]" if stamp else f"[fresh round {r + 1}]"
            return f"{head} {candidate.label()}: still running ({seconds:.0f} s)"

        t0 = time.perf_counter()
        got = run_child(spec, env, timeout, progress, still=still)
        if got.ok and not first:
            first.append(time.perf_counter() - t0)
        if got.overran_s is not None and timeout < budget:  # the first run's multiple: not
            said = (  # the time left, which a larger budget would give it
                f"stopped after {timeout:.0f} s, over {OVERRUN:.0f}× the first fresh run "
                f"({first[0]:.0f} s): this run takes far longer than the first did"
            )
            got = dataclasses.replace(got, error=said, overran_s=None)
        return got

    return child


def run_timeout(left: float | None, first: Sequence[float], estimate: float | None) -> float:
    """How long one fresh run may take: what the call has left (`left`, and
    :data:`GRACE_S`; :data:`FRESH_TIMEOUT_S` where nothing bounds it), and, once a first run
    measured what one takes here (`first`: its process's start, the build, the steps),
    :data:`OVERRUN` times that or the run's own `estimate` (its compile differs), whichever
    is longer. A run past it is stopped and said: past the time left (``ChildResult.overran_s``:
    tune says the budget that would hold such runs), or past the first run's multiple (said
    as that: a larger budget would not hold it)."""
    budget = FRESH_TIMEOUT_S if left is None else max(left + GRACE_S, 1.0)
    if not first:
        return budget
    return min(budget, OVERRUN * max(first[0], estimate or 0.0) + GRACE_S)


class _FreshRounds:
    """The defaults and the pick's fresh rounds, as :func:`interleaved_rounds` calls them:
    `measure` turns one run into its rate (a run without one raises, so it has no result that
    round, and its error is kept for the words), `cost` estimates the next round, `settled`
    ends the rounds once the pick failed or the range answers, and `verdict` says what
    they found."""

    def __init__(
        self,
        run: Callable[[Candidate, int], Any],
        defaults: Candidate,
        pick: Candidate,
        rounds: int,
        progress: Callable[[str], Any] | None,
        interrupted: list[str] | None,
        timing: Timing,
    ) -> None:
        self.run, self.defaults, self.pick, self.rounds = run, defaults, pick, rounds
        self.progress, self.interrupted, self.timing = progress, interrupted, timing
        self.errors: list[str] = []
        self.walls: dict[Candidate, float] = {}  # each candidate's latest run, in seconds
        self.overran: float | None = None  # the longest run the timeout stopped
        self.stopped: set[Candidate] = set()  # stopped by the time left in the latest round
        self.longest = 0.0  # the longest run's seconds

    def measure(self, candidate: Candidate, r: int) -> float:
        """`candidate`'s rate in round `r`, said; raises where its run measured none."""
        clock = self.timing.clock
        t0 = clock()
        got = self.run(candidate, r)
        self.walls[candidate] = clock() - t0
        self.longest = max(self.longest, self.walls[candidate])
        figures, error, interrupted = _read(got)
        if interrupted and self.interrupted is not None:
            self.interrupted.append(candidate.label())
        overran = getattr(got, "overran_s", None)
        self.stopped.discard(candidate)
        if overran is not None:
            self.overran = max(self.overran or 0.0, overran)
            self.stopped.add(candidate)  # out of time: no measure of it, not a failure
        rate = figures.examples_per_sec if figures is not None else None
        if rate is None or not math.isfinite(rate) or rate <= 0:
            self.errors.append(f"{candidate.label()}: {error or 'no timed steps'}")
            raise RuntimeError(self.errors[-1])
        if self.progress is not None:
            stamp = self.timing.stamp()
            head = f"[fresh {r + 1} | {stamp}]" if stamp else f"[fresh round {r + 1}]"
            self.progress(f"{head} {candidate.label()}: {rate:,.1f} examples/s")
        return float(rate)

    def cost(self, r: int) -> float | None:
        """The next round's seconds: the last round's runs, or (the first) the estimates;
        None where neither is known (the round runs)."""
        known = {**self.timing.run_s, **self.walls}
        if self.defaults not in known or self.pick not in known:
            return None
        return known[self.defaults] + known[self.pick]

    def settled(self, done: list[dict[Candidate, float]]) -> bool:
        """Whether the rounds so far end them: the pick failed where the defaults ran, or the
        gain's range answers."""
        lost = self.pick not in done[-1] and self.defaults in done[-1]
        lost = lost and self.pick not in self.stopped  # the time ran out, not the pick
        gain = Gain.of(paired_ratios(done, self.defaults, self.pick), FRESH)
        return lost or (gain is not None and gain.answered)

    def verdict(self, done: list[dict[Candidate, float]], out_of_time: bool) -> Confirmation:
        """:meth:`_verdict`, with the longest run the timeout stopped and the longest of
        all (what a run costs here: a stopped one's time is only a floor)."""
        longest = max(self.longest, self.overran or 0.0) or None
        said = self._verdict(done, out_of_time)
        return dataclasses.replace(said, overran_s=self.overran, longest_s=longest)

    def _verdict(self, done: list[dict[Candidate, float]], out_of_time: bool) -> Confirmation:
        """The pick when the rounds confirmed it (and the never-slower rule agrees), else the
        defaults, with why in short lines."""
        defaults, pick = self.defaults, self.pick
        gain = Gain.of(paired_ratios(done, defaults, pick), FRESH)
        labelled = [{c.label(): rate for c, rate in got.items()} for got in done]
        if gain is None:
            if not done:
                return Confirmation(defaults, None, [], (), out_of_time)
            last = f": {self.errors[-1]}" if self.errors else ""
            said = f"the pick could not be measured in fresh processes{last}"
            return Confirmation(defaults, None, labelled, (said, "the defaults stay"), out_of_time)
        if gain.confirmed and decide(defaults, [pick], done).pick == pick:
            return Confirmation(pick, gain, labelled, (), out_of_time)
        both = len(paired_ratios(done, defaults, pick))
        if gain.refused:
            said = "not faster than the defaults in fresh processes: the defaults stay"
        elif self.pick not in done[-1] and self.pick in self.stopped:
            said = (
                f"not confirmed in {both} fresh round(s): round {len(done)}'s run of it was "
                "stopped, out of time: the defaults stay"
            )
        elif self.pick not in done[-1]:
            said = f"the pick failed in a fresh process ({self.errors[-1]}): the defaults stay"
        else:
            said = f"not confirmed in {len(done)} fresh round(s): the defaults stay"
        return Confirmation(defaults, gain, labelled, (said,), out_of_time)


def _read(got: Any) -> tuple[Any, str | None, bool]:
    """``(figures, error, interrupted)`` of what a runner returned: a ``ChildResult`` (its
    figures read from its answer), or ``standings.Figures`` themselves."""
    from toolkit.search._processes import ChildResult
    from toolkit.search.standings import Figures

    if isinstance(got, Figures):
        return got, None, False
    if isinstance(got, ChildResult):
        return got.figures(), got.error, got.interrupted
    raise TypeError(f"a fresh run answered {type(got).__name__}, not Figures or a ChildResult")
