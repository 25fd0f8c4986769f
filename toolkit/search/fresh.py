"""A pick confirmed where the user will run it: in fresh processes, and its gain with its spread.

One process measuring every candidate in turn flatters some of them: the defaults run first,
on a cold machine, the finalists stay built and warm, and a short window in a long-lived
process sees none of what a new run pays. On a mixup pipeline the search's head-to-head said
1.74× where alternating fresh-process runs measured 1.20×. So before a pick is cached,
:func:`confirm_fresh` runs the defaults and the pick in new processes (``python -m
toolkit._child``, the backends chooser's entry point: the same recipe and settings, or
``module:function``, and the candidate, as one typed spec), alternating them in rounds
(``rounds.interleaved_rounds``), and judges them by the one never-slower rule
(``rounds.decide``): the pick stays only when it beat the defaults in most rounds by more than
``MIN_GAIN`` and was faster in every one of them (a pick that lost a fresh round is not yet
shown faster than the defaults). What tune then claims is :class:`Gain`: the median of the
paired ratios with their range and the number of rounds, and where they were measured, never
one lucky number.

How long and how often: a fit whose input and step share two cores moves by ±15 % from one
second to the next within one process (a contrastive model's pick, 1-s windows: 52k to 68k
examples/s; its step alone, the input cached: ±3 %), so each run times at least
:data:`FRESH_WINDOW_S` at its own rate (a window sized at the defaults' rate gave a 2× pick
1.5 s), and rounds go on until the claim is known to about ±5 %
(:data:`PRECISION`), :data:`FRESH_ROUNDS` at most.

Your own model in memory cannot be rebuilt in another process: there the claim comes from
the in-process rounds and says so ("this process"). Hand tune a ``module:function`` that
returns the model and data (``tune(..., fresh="mytrain:make")``, ``--model_fn``) for the
fresh-process check.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolkit.search.engine import MIN_GAIN, Candidate
from toolkit.search.rounds import decide, interleaved_rounds, paired_ratios

__all__: list[str] = []  # the search's own: tune hands back its Gain (TuneResult.gain)

FRESH_ROUNDS = 5  # fresh-process rounds at most (fewer once PRECISION is reached)
MIN_CONFIRMING_ROUNDS = 3  # rounds a claim stands on at least (see known())
PRECISION = 0.025  # rounds end when the mean log-ratio's standard error is at most this (a
# claim known to about ±5 %; two rounds meet it when within 5 % of each other: two 9 % apart,
# 2.35× and 2.56×, left a claim 12 % off what five more fresh processes measured)
FRESH_WINDOW_S = 6.0  # a fresh run's timed window, at least (seconds at its own rate)
FRESH_TIMEOUT_S = 600.0  # one fresh run, at most
THIS_PROCESS, FRESH = "this process", "fresh processes"


@dataclasses.dataclass(frozen=True)
class Gain:
    """A claimed speed-up: the median paired ratio to the defaults, the lowest and highest
    round's, how many rounds, and where they ran (:data:`FRESH` or :data:`THIS_PROCESS`)."""

    ratio: float
    low: float
    high: float
    rounds: int
    where: str

    @classmethod
    def of(cls, ratios: Sequence[float], where: str) -> Gain | None:
        if not ratios:
            return None
        return cls(statistics.median(ratios), min(ratios), max(ratios), len(ratios), where)

    @property
    def confirmed(self) -> bool:
        """Measured in two rounds or more, every one of them faster than the defaults."""
        return self.rounds >= 2 and self.low > 1.0

    @property
    def trusted(self) -> bool:
        """Whether it holds outside this process: :attr:`confirmed`, in fresh processes. Rounds
        in the process that searched measured picks up to 1.4× faster than fresh processes
        then did (XLA claimed 1.52×, fresh 1.06×): each is said as unconfirmed."""
        return self.confirmed and self.where == FRESH

    def words(self) -> str:
        """``1.27× (1.22–1.31, 3 rounds in fresh processes)``; one round, or rounds in this
        process, are said as unconfirmed."""
        if self.rounds < 2:
            return f"{self.ratio:.2f}× (1 round in {self.where}: not confirmed)"
        spread = f"{self.low:.2f}–{self.high:.2f}"
        said = f"{self.ratio:.2f}× ({spread}, {self.rounds} rounds in {self.where}"
        return said + (")" if self.where == FRESH else ": unconfirmed)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> Gain | None:
        try:
            return cls(
                float(d["ratio"]), float(d["low"]), float(d["high"]), int(d["rounds"]),
                str(d["where"]),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None


def fresh_steps(candidate: Candidate, rate: float | None, batch_size: int, steps: int) -> int:
    """Timed steps for `candidate`'s fresh run: at least `steps`, and enough for
    :data:`FRESH_WINDOW_S` at `rate`, the rate the search measured for it (a new process's
    short window is noisier still)."""
    enough = math.ceil(FRESH_WINDOW_S * rate / batch_size) if rate and batch_size else steps
    return max(steps, enough, 5 * candidate.per_call)


def known(ratios: Sequence[float]) -> bool:
    """Whether fresh rounds with these paired ratios (pick / defaults) can end: the pick lost
    one (it cannot be confirmed, whatever follows: two rounds at least), or three at least,
    all on one side of ``1 + MIN_GAIN``, with the mean log-ratio's standard error at most
    :data:`PRECISION`. Two rounds that agree say little of the spread (one degree of
    freedom): on a busy machine two at 1.35× and 1.37× claimed 1.36× where interleaved fresh
    processes then measured 1.12×."""
    if len(ratios) < 2:
        return False
    if min(ratios) <= 1.0:
        return True
    if len(ratios) < MIN_CONFIRMING_ROUNDS:
        return False
    faster = [x > 1 + MIN_GAIN for x in ratios]
    logs = [math.log(x) for x in ratios]
    error = statistics.stdev(logs) / math.sqrt(len(logs))
    return (all(faster) or not any(faster)) and error <= PRECISION


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
    runner: Callable[[Candidate, int], dict[str, Any]] | None = None,
    interrupted: list[str] | None = None,
) -> tuple[Candidate, Gain | None, list[dict[str, float]], str]:
    """Runs the defaults and `pick` alternately in fresh processes, `rounds` rounds at most,
    fewer once :func:`known` says the rounds so far settle it (a median of two ratios far
    apart is no better than either), each a run of `steps` timed steps of `target` (a
    ``standings.Target``): one count for both, or each candidate's own (its
    :func:`fresh_steps`).

    `runner` ``(candidate, round)`` returns a run's figures (tests inject it); by default a
    ``python -m toolkit._child`` process. Each run a signal or the timeout ended is added to
    `interrupted` (its candidate's label): such an answer is not the candidates' own, and tune
    does not cache it.

    Returns:
        ``(the pick that stands, its fresh Gain or None, rounds as {label: examples/s}, why in
        words)``; the defaults stand when the pick's median gain is not above ``MIN_GAIN``,
        when it lost any round, or when no round measured both.
    """
    child = _child_runner(target, backend=backend, device=device, steps=steps)
    fresh = _FreshRounds(runner or child, defaults, pick, rounds, progress, interrupted)
    done, _ = interleaved_rounds(
        [defaults, pick], fresh.measure, max_rounds=rounds, settled=fresh.settled
    )
    gain = Gain.of(paired_ratios(done, defaults, pick), FRESH)
    labelled = [{c.label(): rate for c, rate in got.items()} for got in done]
    if gain is None:
        last = f" ({fresh.errors[-1]})" if fresh.errors else ""
        return defaults, None, labelled, (
            f"the pick could not be measured against the defaults in fresh processes{last}: "
            "the defaults stay"
        )  # fmt: skip
    verdict = decide(defaults, [pick], done)
    if verdict.pick == pick and gain.confirmed:  # and faster in every round, not most
        return pick, gain, labelled, f"confirmed in fresh processes: {gain.words()}"
    return defaults, gain, labelled, (
        f"not confirmed in fresh processes ({pick.label()}: {gain.words()}): the defaults stay"
    )  # fmt: skip


def _child_runner(
    target: Any, *, backend: str, device: str, steps: int | Mapping[Candidate, int]
) -> Callable[[Candidate, int], dict[str, Any]]:
    """The default runner of :func:`confirm_fresh`: ``(candidate, round)`` runs `candidate`
    on `target` in a new ``python -m toolkit._child`` process and returns its figures."""
    from toolkit.search._processes import ChildSpec, run_child

    # The searching process still holds its device memory: a child must take only what it
    # needs (JAX would otherwise reserve 75 % of a GPU up front and fail on what is left).
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}

    def child(candidate: Candidate, _round: int) -> dict[str, Any]:
        n = steps[candidate] if isinstance(steps, Mapping) else steps
        spec = ChildSpec("figures", backend, device, target, candidate.to_dict(), steps=n)
        return run_child(spec, env, FRESH_TIMEOUT_S)

    return child


class _FreshRounds:
    """The defaults and the pick's fresh rounds, as :func:`interleaved_rounds` calls them:
    `measure` turns one run's figures into its rate (a run without one raises, so it has no
    result that round, and its error is kept for the words), and `settled` ends the rounds
    once :func:`known` says they settle it."""

    def __init__(
        self,
        run: Callable[[Candidate, int], dict[str, Any]],
        defaults: Candidate,
        pick: Candidate,
        rounds: int,
        progress: Callable[[str], Any] | None,
        interrupted: list[str] | None,
    ) -> None:
        self.run, self.defaults, self.pick, self.rounds = run, defaults, pick, rounds
        self.progress, self.interrupted = progress, interrupted
        self.errors: list[str] = []

    def measure(self, candidate: Candidate, r: int) -> float:
        """`candidate`'s rate in round `r`, said; raises where its run measured none."""
        figures = self.run(candidate, r)
        rate = figures.get("examples_per_sec")
        if figures.get("interrupted") and self.interrupted is not None:
            self.interrupted.append(candidate.label())
        if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
            self.errors.append(f"{candidate.label()}: {figures.get('error') or 'no timed steps'}")
            raise RuntimeError(self.errors[-1])
        if self.progress is not None:
            self.progress(
                f"[fresh round {r + 1} of ≤{self.rounds}] {candidate.label()}: "
                f"{rate:,.1f} examples/s"
            )
        return float(rate)

    def settled(self, done: list[dict[Candidate, float]]) -> bool:
        """Whether the rounds so far end them: the pick lost the latest, or they are known."""
        # A pick that failed where the defaults ran cannot be confirmed: no more rounds.
        lost = self.pick not in done[-1] and self.defaults in done[-1]
        return lost or known(paired_ratios(done, self.defaults, self.pick))
