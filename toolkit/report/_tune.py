"""The report's tune section: what ``--autotune`` searched before the run, and what it picked.
The search's record (``toolkit.search.tune.TuneResult``) lives above the report, which cannot
import it; report.json keeps its JSON whole (`search`), read here, once and checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core._gain import Gain


@dataclasses.dataclass(frozen=True)
class TunedTrial:
    """One candidate measured: its settings in words, its examples/s (None: failed, `error`)."""

    label: str
    examples_per_sec: float | None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class TuneSection:
    """report.json's ``tune``: the pick (`best_label`), `seconds` (`cache_hit`: from the cache), the
    trials, the gain claimed (None: no pick kept), `search` (``TuneResult.to_dict``) kept whole."""

    best_label: str
    seconds: float
    cache_hit: bool
    trials: tuple[TunedTrial, ...]
    gain: Gain | None
    search: Mapping[str, Any]

    def line(self) -> str:
        """The search in one line, with the gain it claims, where it claims one."""
        source = "from the cache" if self.cache_hit else f"searched in {self.seconds:.1f} s"
        line = f"tune: {self.best_label} ({source}, {len(self.trials)} trials)"
        return f"{line}; claimed {self.gain.words()}" if self.gain is not None else line

    def markdown(self) -> str:
        rows = [f"\n## Tune\n\n{self.line()}\n\n| settings | examples/s | note |\n|---|---:|---|\n"]
        for t in self.trials:
            rate = t.examples_per_sec
            shown = f"{rate:,.1f}" if rate is not None else "—"
            note = f"failed: {t.error}" if rate is None else ""
            rows.append(f"| {t.label} | {shown} | {note} |\n")
        return "".join(rows)

    def to_dict(self) -> dict[str, object]:
        return dict(self.search)

    @classmethod
    def from_dict(cls, d: Any) -> TuneSection | None:
        """A ``TuneResult.to_dict()`` (or a report's ``tune``); None where the run had none.

        Raises:
            ReportError: a figure the views show not of its kind, named (``tune.seconds``)."""
        if not d:
            return None
        d = fields.mapping("tune", d)
        trials = []
        for i, t in enumerate(fields.records("tune.trials", d.get("trials"))):
            rate = fields.number(f"tune.trials[{i}].examples_per_sec", t.get("examples_per_sec"),
                                 optional=True)  # fmt: skip
            error = t.get("error")
            trials.append(
                TunedTrial(str(t.get("label")), rate, None if error is None else str(error))
            )
        # A gain is claimed only for a pick handed back; an older report says so by its words.
        picked = d.get("picked", bool(d.get("gain_words")))
        return cls(
            best_label=str(d.get("best_label")),
            seconds=fields.number("tune.seconds", d.get("seconds", 0.0)),
            cache_hit=bool(d.get("cache_hit")),
            trials=tuple(trials),
            gain=Gain.from_dict(d.get("gain")) if picked is True else None,
            search=dict(d),
        )
