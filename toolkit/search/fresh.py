"""A pick confirmed where the user will run it: in fresh processes, and its gain with its range.

One process measuring every candidate in turn flatters some: the defaults run first on a cold
machine, the finalists stay warm, and a short window sees none of what a new run pays. So before a
pick is cached, :func:`confirm_fresh` runs the defaults and the pick in new processes, in paired,
interleaved rounds, until their :class:`~toolkit.core._gain.Gain`'s range answers or time ends: a
low end above 1 **confirms**, a high end below ``1 + MIN_GAIN`` **refuses**; else the defaults stay.
A model in memory cannot be rebuilt elsewhere: its claim comes from in-process rounds."""

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
    """What `seconds` of fresh rounds can confirm at this noise, and what more rounds would."""
    smallest = gain.resolvable() if gain is not None else None
    if gain is None or gain.noise is None or smallest is None:
        return ""
    said = (
        f"on this machine's noise (±{gain.noise:.0%}) a gain under {smallest:.2f}× cannot be "
        f"confirmed in {seconds:.0f} s"
    )
    more = next(  # two rounds' Student's t is wide: winning every round can read unconfirmed
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
    """A fresh run's timed window: `budget_s` / 20, within MIN_WINDOW_S and FRESH_WINDOW_S."""
    return min(FRESH_WINDOW_S, max(MIN_WINDOW_S, budget_s / 20))


def fresh_steps(
    candidate: Candidate, rate: float | None, batch_size: int, steps: int, window: float = 0.0
) -> int:
    """A fresh run's timed steps: `window` s at the search's rate (or `steps`), at least 5 calls."""
    window = window or FRESH_WINDOW_S
    enough = math.ceil(window * rate / batch_size) if rate and batch_size else steps
    return max(enough, 5 * candidate.per_call)


def start_estimate() -> float:
    """A fresh process's start before training: this one's, within 3-30 s (or FRESH_START_S)."""
    from toolkit.profiling._timing import process_start

    started = process_start()
    if started is None:
        return FRESH_START_S
    return min(max(time.perf_counter() - started, 3.0), 30.0)


@dataclasses.dataclass(frozen=True)
class Confirmation:
    """What :func:`confirm_fresh` found: the pick that stands, its :class:`Gain`, rounds and why."""

    pick: Candidate
    gain: Gain | None
    rounds: list[dict[str, float]]
    words: tuple[str, ...]
    out_of_time: bool = False
    overran_s: float | None = None  # the longest run the timeout stopped, in seconds
    longest_s: float | None = None  # the longest run, stopped or not (one run's cost here)


@dataclasses.dataclass(frozen=True)
class Timing:
    """Fresh rounds' time: `deadline` on `clock` (None: no bound), `run_s` first-run estimates."""

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
    """Runs the defaults and `pick` in paired, interleaved rounds of fresh processes, `steps` timed
    steps each, until the gain's range answers or a round would pass `timing`'s deadline; the
    defaults stand unless the pick is confirmed. `runner` ``(candidate, round)`` returns Figures or
    a ``ChildResult`` (default: a child stopped at the deadline); runs a signal or timeout ended
    join `interrupted` (uncached)."""
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
    """The default runner: a new ``python -m toolkit._child`` per run, stopped at run_timeout."""
    from toolkit.search._processes import ChildSpec, run_child

    # The searching process still holds its device memory: a child takes only what it needs.
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
    """A fresh run's timeout: time left + GRACE_S; after one ran, <= OVERRUN × it or `estimate`."""
    budget = FRESH_TIMEOUT_S if left is None else max(left + GRACE_S, 1.0)
    if not first:
        return budget
    return min(budget, OVERRUN * max(first[0], estimate or 0.0) + GRACE_S)


class _FreshRounds:
    """The fresh rounds as :func:`interleaved_rounds` calls them, and their :meth:`verdict`."""

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
        """The next round's seconds: the last round's, or the estimates; None: neither known."""
        known = {**self.timing.run_s, **self.walls}
        if self.defaults not in known or self.pick not in known:
            return None
        return known[self.defaults] + known[self.pick]

    def settled(self, done: list[dict[Candidate, float]]) -> bool:
        """Whether the rounds so far end them: the pick failed, or the range answers."""
        lost = self.pick not in done[-1] and self.defaults in done[-1]
        lost = lost and self.pick not in self.stopped  # the time ran out, not the pick
        gain = Gain.of(paired_ratios(done, self.defaults, self.pick), FRESH)
        return lost or (gain is not None and gain.answered)

    def verdict(self, done: list[dict[Candidate, float]], out_of_time: bool) -> Confirmation:
        """:meth:`_verdict`, with the longest run the timeout stopped and the longest of all."""
        longest = max(self.longest, self.overran or 0.0) or None
        said = self._verdict(done, out_of_time)
        return dataclasses.replace(said, overran_s=self.overran, longest_s=longest)

    def _verdict(self, done: list[dict[Candidate, float]], out_of_time: bool) -> Confirmation:
        """The pick if the rounds confirm it and the never-slower rule agrees; else the defaults."""
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
    """``(figures, error, interrupted)`` of what a runner returned."""
    from toolkit.search._processes import ChildResult
    from toolkit.search.standings import Figures

    if isinstance(got, Figures):
        return got, None, False
    if isinstance(got, ChildResult):
        return got.figures(), got.error, got.interrupted
    raise TypeError(f"a fresh run answered {type(got).__name__}, not Figures or a ChildResult")
