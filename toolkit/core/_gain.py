"""A measured speed-up with its range, below the rooms that measure it and the report saying it."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

from toolkit.core import _fields as fields
from toolkit.core.stats import jitter, median

# A pick must beat the defaults by more than this (a ratio of 1.02) head to head: below it a
# shared machine's noise decides, and handing back something no faster is worse than nothing.
MIN_GAIN = 0.02
THIS_PROCESS, FRESH = "this process", "fresh processes"
ROBUST_ROUNDS = 5  # from this many rounds on, the range is the median's (robust to one)
MEDIAN_SPREAD = 1.2533  # a median's standard error over a mean's, normal data (sqrt(pi / 2))
# Student's t, one-sided 95 %, for 1 to 10 degrees of freedom (then the last: conservative).
_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812)


def t95(df: int) -> float:
    """Student's t quantile, one-sided 95 %, for `df` >= 1 degrees of freedom."""
    return _T95[min(max(df, 1), len(_T95)) - 1]


@dataclasses.dataclass(frozen=True)
class Gain(fields.Record):
    """A pick's speed-up over the defaults: median paired ratio, one-sided 95 % bounds, `rounds`,
    `where` they ran, their `noise`; for an in-process gain, `why` no fresh process checked it."""

    LENIENT = True  # what a cache or a report holds: one this version cannot read is None

    ratio: float
    low: float
    high: float
    rounds: int
    where: str
    noise: float | None = None
    why: str = ""

    @classmethod
    def of(cls, ratios: Sequence[float], where: str) -> Gain | None:
        ratios = [r for r in ratios if r > 0 and math.isfinite(r)]
        if not ratios:
            return None
        mid, n = median(ratios), len(ratios)
        if n < 2:
            return cls(mid, mid, mid, 1, where)
        logs = [math.log(r) for r in ratios]
        if n < ROBUST_ROUNDS:  # Student's t on the mean and standard deviation
            centre, sd, spread = statistics.fmean(logs), statistics.stdev(logs), 1.0
        else:  # the median and 1.4826·MAD: one disturbed round does not hold it open
            centre, sd, spread = math.log(mid), jitter(logs), MEDIAN_SPREAD
        half = t95(n - 1) * spread * sd / math.sqrt(n)
        low, high = math.exp(centre - half), math.exp(centre + half)
        return cls(mid, min(low, mid), max(high, mid), n, where, math.exp(sd) - 1)

    @property
    def confirmed(self) -> bool:
        """Two rounds or more whose range lies above 1, the median above the noise line."""
        return self.rounds >= 2 and self.low > 1.0 and self.ratio > 1 + MIN_GAIN

    @property
    def refused(self) -> bool:
        """Two rounds or more whose range lies below ``1 + MIN_GAIN``: not faster."""
        return self.rounds >= 2 and self.high < 1 + MIN_GAIN

    @property
    def answered(self) -> bool:
        return self.confirmed or self.refused

    @property
    def trusted(self) -> bool:
        """Confirmed in fresh processes: it holds outside this one (in-process rounds overstate)."""
        return self.confirmed and self.where == FRESH

    def resolvable(self, rounds: int | None = None) -> float | None:
        """The smallest gain `rounds` rounds (default: these) could confirm at this noise."""
        n = rounds or self.rounds
        if self.noise is None or n < 2:
            return None
        return math.exp(t95(n - 1) * math.log1p(self.noise) / math.sqrt(n))

    def words(self) -> str:
        """``1.27× (1.22–1.31, 3 rounds in fresh processes)``; else unconfirmed, with why."""
        why = self.why if self.why and self.where != FRESH else ""
        if self.rounds < 2:
            return f"{self.ratio:.2f}× (1 round in {self.where}: {why or 'not confirmed'})"
        spread = f"{self.low:.2f}–{self.high:.2f}"
        said = f"{self.ratio:.2f}× ({spread}, {self.rounds} rounds in {self.where}"
        if self.trusted:
            return said + ")"
        return said + f": {why or ('not confirmed' if self.where == FRESH else 'unconfirmed')})"
