"""The report's diagnosis section: what ``--diagnose`` (``toolkit.search.diagnose``) found
before the run, as a record (``report.json``'s ``diagnosis``), and its lines.

The diagnosis measures above the report (the search room); the report keeps what it found,
so a report read elsewhere shows it without the search. Its advice and its ledger come
spelled for the reader who asked (flags for a recipe, Python for a script), as the diagnosis
said them: the record keeps those words, not the settings behind them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from toolkit.core._anatomy import Anatomy
from toolkit.core._fields import field_said
from toolkit.core.errors import one_line


@dataclasses.dataclass(frozen=True)
class SecondOpinion:
    """XProf's reading of a trace of the fit set beside the rates' verdict (report.json's
    ``diagnosis.xprof``).

    Attributes:
        verdict: XProf's (``highly input-bound``, ...); None where it gave none.
        input_percent: the share of the traced steps' time spent waiting for input.
        agrees: whether XProf's verdict agrees with the rates'; None where it gave none.
        line: one sentence that says which, and why they may differ.
    """

    verdict: str | None
    input_percent: float | None
    agrees: bool | None
    line: str


RATES = ("input_rate", "compute_rate", "fit_rate")


@dataclasses.dataclass(frozen=True)
class DiagnosisSection:
    """A diagnosis as the report keeps it: the three rates (steps/s), the verdict and why it
    is uncertain ("" where it is not), the pipeline measured, XProf's second opinion, the
    advice in its reader's words, and the rest the diagnosis measured (the run's ledger as
    JSON spelled for that reader, the step's anatomy)."""

    input_rate: float
    compute_rate: float
    fit_rate: float
    verdict: str
    overlap_ok: bool = True
    advice: tuple[str, ...] = ()
    batch_size: int | None = None
    steps: int = 0
    pipeline: str = ""
    xprof: SecondOpinion | None = None
    python: bool = False
    ledger: Mapping[str, Any] | None = None
    anatomy: Anatomy | None = None
    noise: float | None = None
    uncertain: str = ""

    def line(self) -> str:
        """The verdict and its rates; an uncertain one with why (no advice came from it)."""
        return (
            f"diagnosis: {self.verdict} (input {self.input_rate:,.1f}, step "
            f"{self.compute_rate:,.1f}, fit {self.fit_rate:,.1f} steps/s)"
        ) + (f": {self.uncertain}" if self.uncertain else "")

    def to_dict(self) -> dict[str, object]:
        out = dataclasses.asdict(dataclasses.replace(self, anatomy=None, ledger=None))
        out["advice"] = list(self.advice)
        out["ledger"] = dict(self.ledger) if self.ledger is not None else None
        out["anatomy"] = self.anatomy.to_dict() if self.anatomy is not None else None
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DiagnosisSection:
        """The record of ``report.json``'s section. Raises ValueError naming the field whose
        value it cannot show (``diagnosis.fit_rate is 'fast', not a number``)."""
        if not isinstance(d, Mapping):
            raise ValueError(field_said("diagnosis", d, "an object or null"))
        verdict = d.get("verdict")
        if not isinstance(verdict, str):
            raise ValueError(field_said("diagnosis.verdict", verdict, "a string"))
        rates = {}
        for name in RATES:
            value = d.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(field_said(f"diagnosis.{name}", value, "a number"))
            if not math.isfinite(value) or value < 0:
                raise ValueError(field_said(f"diagnosis.{name}", value, "a number >= 0"))
            rates[name] = float(value)
        xprof, ledger = d.get("xprof"), d.get("ledger")
        anatomy = d.get("anatomy")
        if isinstance(anatomy, Mapping):
            try:
                anatomy = Anatomy.from_dict(anatomy)
            except (TypeError, ValueError, KeyError, AttributeError) as e:
                raise ValueError(
                    f"diagnosis.anatomy holds a value this toolkit cannot show ({one_line(e)})"
                ) from None
        advice = d.get("advice") or ()
        uncertain = d.get("uncertain")
        return cls(
            **rates,
            verdict=verdict,
            overlap_ok=bool(d.get("overlap_ok", True)),
            advice=tuple(str(a) for a in advice) if isinstance(advice, list) else (),
            batch_size=_count(d.get("batch_size")),
            steps=_count(d.get("steps")) or 0,
            pipeline=str(d.get("pipeline") or ""),
            xprof=_opinion(xprof) if isinstance(xprof, Mapping) else None,
            python=bool(d.get("python", False)),
            ledger=dict(ledger) if isinstance(ledger, Mapping) else None,
            anatomy=anatomy if isinstance(anatomy, Anatomy) else None,
            noise=float(d["noise"]) if isinstance(d.get("noise"), int | float) else None,
            uncertain=uncertain if isinstance(uncertain, str) else "",
        )


def _count(value: Any) -> int | None:
    """A count as the JSON holds it (not a bool, not a string), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opinion(d: Mapping[str, Any]) -> SecondOpinion:
    share = d.get("input_percent")
    return SecondOpinion(
        d.get("verdict") if isinstance(d.get("verdict"), str) else None,
        float(share) if isinstance(share, int | float) else None,
        d.get("agrees") if isinstance(d.get("agrees"), bool) else None,
        str(d.get("line") or ""),
    )
