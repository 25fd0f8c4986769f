"""Head to head: finalists vs the defaults (:func:`confirm`), interleaved rounds, :func:`decide`."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

from toolkit.search.engine import FINALISTS, MIN_GAIN, Candidate, Trial, choose, order

__all__ = [
    "Verdict",
    "confirm",
    "decide",
]

E = TypeVar("E", bound=Hashable)

MAX_ROUNDS = 4  # head-to-head rounds at most (at least 2 when the budget allows)
UNCONFIRMED_GAIN = 0.10  # the gain one window must show when no head-to-head fit the budget
NEAR_LEADER = 0.8  # a finalist's search rate is at least this share of the leader's
DECISIVE_GAIN = 0.25  # won by this much in the search and in round 1: one round is enough


def _decisive(
    defaults: Trial, pick: Candidate, trials: Sequence[Trial], got: dict[str, float]
) -> bool:
    """Whether `pick` led the defaults by > DECISIVE_GAIN, and all others, in search and round 1."""
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
    shown_budget_s: float | None = None,
    cut: Sequence[str] = (),
) -> tuple[Candidate, list[dict[str, float]], str, bool]:
    """Measures the search's :data:`FINALISTS` fastest again, interleaved with the defaults, until
    the pick holds two rounds running, :data:`MAX_ROUNDS`, or the budget ends; picks with
    :func:`decide` (one window cannot tell a gain from a shared machine's swing; paired rounds
    can). `shown_budget_s`: what progress lines count against; `cut`: why only the defaults.

    Returns:
        ``(pick, rounds as {label: examples/s}, why, budget ran out)``; trials' rates: medians."""
    start = clock() - spent_s
    defaults = trials[0]
    if defaults.examples_per_sec is None:
        return choose(trials, min_gain), [], "the defaults failed: the fastest measured", False
    finalists = _finalists(defaults, trials)
    if not finalists:  # (the filter keeps the leader: empty only when nothing beat them)
        others = [t for t in trials[1:] if t.examples_per_sec is not None]
        failed = len(trials) - 1 - len(others)
        if others:
            return defaults.candidate, [], "nothing beat the defaults in the search", False
        said = f" ({failed} other setting(s) failed)" if failed else ""
        said += f": {'; '.join(cut)}" if cut and not failed else ""
        return defaults.candidate, [], f"only the defaults were measured{said}", False
    head = _HeadToHead(
        measure, defaults, finalists, trials, budget_s=shown_budget_s or budget_s,
        min_gain=min_gain, clock=clock, start=start, progress=progress,
    )  # fmt: skip
    rounds, exhausted = interleaved_rounds(
        list(head.group), head.again, max_rounds=MAX_ROUNDS, budget_s=budget_s,
        round_cost=head.cost, settled=head.settled, clock=clock, spent_s=clock() - start,
    )  # fmt: skip
    if not rounds:
        return choose(trials, UNCONFIRMED_GAIN), [], (
            "no head-to-head round fit the budget; the search's fastest, only if it beat the "
            f"defaults by > {UNCONFIRMED_GAIN:.0%} in its one window"
        ), exhausted  # fmt: skip
    labelled = [{c.label(): rate for c, rate in got.items()} for got in rounds]
    return head.verdict.pick, labelled, head.why, exhausted


def _finalists(defaults: Trial, trials: Sequence[Trial]) -> list[Trial]:
    """The search's :data:`FINALISTS` fastest that beat the defaults, within :data:`NEAR_LEADER`."""
    finalists = sorted(
        (t for t in trials[1:] if t.examples_per_sec and t.examples_per_sec > defaults.rates[0]),
        key=order,
        reverse=True,
    )[:FINALISTS]
    lead = finalists[0].rates[0] if finalists else 0.0  # one far behind can't overtake on noise
    return [t for t in finalists if t.rates[0] >= NEAR_LEADER * lead]


class _HeadToHead:
    """The rounds of :func:`confirm` as :func:`interleaved_rounds` calls them; keeps the verdict."""

    def __init__(
        self,
        measure: Callable[[Candidate], float],
        defaults: Trial,
        finalists: Sequence[Trial],
        trials: Sequence[Trial],
        *,
        budget_s: float,
        min_gain: float,
        clock: Callable[[], float],
        start: float,
        progress: Callable[[str], Any] | None,
    ) -> None:
        self.measure, self.defaults, self.trials = measure, defaults, trials
        self.budget_s, self.min_gain, self.clock, self.start = budget_s, min_gain, clock, start
        self.progress = progress
        self.group = {t.candidate: t for t in (defaults, *finalists)}
        self.base = defaults.candidate
        self.verdict = Verdict(self.base, None, None, 0, 0)
        self.why = ""

    def again(self, candidate: Candidate, r: int) -> float:
        """`candidate` measured once more in round `r`, added to its trial, and said."""
        clock = self.clock
        t0 = clock()
        rate = float(self.measure(candidate))
        self.group[candidate].add(rate, clock() - t0)
        if self.progress is not None:
            self.progress(
                f"[head to head {r + 1} | {clock() - self.start:.0f}/{self.budget_s:.0f} s] "
                f"{candidate.label()}: {rate:,.1f} examples/s"
            )
        return rate

    def cost(self, r: int) -> float:
        """A round's seconds: every entrant's mean window so far."""
        return sum(t.seconds / max(1, len(t.rates)) for t in self.group.values())

    def settled(self, rounds: list[dict[Candidate, float]]) -> bool:
        """Whether the pick holds two rounds running, or one round agrees with a decisive search."""
        previous = self.verdict.pick
        self.verdict = decide(self.base, self.group, rounds, min_gain=self.min_gain)
        self.why = _why(self.verdict, self.min_gain)
        if len(rounds) >= 2 and self.verdict.pick == previous:
            return True
        if (
            len(rounds) == 1
            and self.verdict.pick != self.base
            and _decisive(
                self.defaults,
                self.verdict.pick,
                self.trials,
                {c.label(): v for c, v in rounds[0].items()},
            )
        ):
            self.why += (
                f"; one round: it led by > {DECISIVE_GAIN:.0%} in the search and head to head"
            )
            return True
        return False


def _why(verdict: Verdict, min_gain: float) -> str:
    """The rounds' outcome in words, a clause a line."""
    if not verdict.won:
        return (
            f"no finalist beat the defaults by > {min_gain:.0%} in most of {verdict.rounds} "
            "round(s) head to head; the defaults stay"
        )
    return f"chosen: won {verdict.wins} of {verdict.rounds} round(s) head to head"


def interleaved_rounds(
    entrants: Sequence[E],
    measure: Callable[[E, int], Any],
    *,
    max_rounds: int,
    budget_s: float | None = None,
    round_cost: Callable[[int], float | None] | None = None,
    settled: Callable[[list[dict[E, Any]]], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    spent_s: float = 0.0,
) -> tuple[list[dict[E, Any]], bool]:
    """Measures every entrant once a round, round ``r`` in the order rotated by ``r``.

    `measure` ``(entrant, round)`` returns a result or raises (a flaky entrant loses that round; the
    rounds go on). `round_cost` ``(r)`` estimates a round (None: it runs); a round that would end
    past `budget_s` is not started, so the pairs stay paired. `settled` ``(rounds)`` may end them.

    Returns:
        ``(rounds as [{entrant: result}], whether the budget ended them)``."""
    start = clock() - spent_s
    rounds: list[dict[E, Any]] = []
    for r in range(max_rounds):
        cost = round_cost(r) if round_cost is not None else None
        if budget_s is not None and cost is not None and clock() - start + cost > budget_s:
            return rounds, True
        got: dict[E, Any] = {}
        shift = r % len(entrants) if entrants else 0
        for entrant in [*entrants[shift:], *entrants[:shift]]:
            try:
                got[entrant] = measure(entrant, r)
            except Exception:  # noqa: BLE001 - no result this round; the others go on
                continue
        rounds.append(got)
        if settled is not None and settled(rounds):
            break
    return rounds, False


def paired_ratios(
    rounds: Iterable[dict[Any, Any]],
    base: Any,
    entrant: Any,
    speed: Callable[[Any], float | None] = lambda x: x,
) -> list[float]:
    """``speed(entrant) / speed(base)`` in each round where both have one (> 1: entrant faster)."""
    out = []
    for got in rounds:
        if base not in got or entrant not in got:
            continue
        a, b = speed(got[base]), speed(got[entrant])
        if a and b:
            out.append(b / a)
    return out


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What :func:`decide` found: `pick` (the base unless one won), the leader, its ratio, wins."""

    pick: Any
    leader: Any
    ratio: float | None
    wins: int
    rounds: int

    @property
    def won(self) -> bool:
        return self.leader is not None and self.pick == self.leader


def decide(
    base: Any,
    entrants: Iterable[Any],
    rounds: Sequence[dict[Any, Any]],
    *,
    speed: Callable[[Any], float | None] = lambda x: x,
    min_gain: float = MIN_GAIN,
    eligible: Callable[[Any], bool] | None = None,
) -> Verdict:
    """The never-slower rule: of the entrants faster than `base` in most rounds, the best median
    paired ratio leads, and is picked where it exceeds ``1 + min_gain``; else `base` stays."""
    leader, best, wins = None, 0.0, 0
    for entrant in entrants:
        if entrant == base or (eligible is not None and not eligible(entrant)):
            continue
        ratios = paired_ratios(rounds, base, entrant, speed)
        won = sum(x > 1 for x in ratios)
        if ratios and won * 2 > len(ratios) and statistics.median(ratios) > best:
            leader, best, wins = entrant, statistics.median(ratios), won
    pick = leader if leader is not None and best > 1 + min_gain else base
    return Verdict(pick, leader, best if leader is not None else None, wins, len(rounds))
