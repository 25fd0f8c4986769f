"""The report's diagnosis section: what ``--diagnose`` (``toolkit.search.diagnose``) found
before the run, as a record (``report.json``'s ``diagnosis``), and its lines.

The diagnosis measures above the report (the search room); the report keeps what it found,
so a report read elsewhere shows it without the search. Its advice and its ledger come
spelled for the reader who asked (flags for a recipe, Python for a script), as the diagnosis
said them: the record keeps those words, not the settings behind them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core._anatomy import Anatomy
from toolkit.core.errors import one_line


@dataclasses.dataclass(frozen=True)
class SecondOpinion(fields.Record):
    """XProf's reading of a trace of the fit set beside the rates' verdict (report.json's
    ``diagnosis.xprof``).

    Attributes:
        verdict: XProf's (``highly input-bound``, ...); None where it gave none.
        input_percent: the share of the traced steps' time spent waiting for input.
        agrees: whether XProf's verdict agrees with the rates'; None where it gave none.
        line: one sentence that says which, and why they may differ."""

    verdict: str | None = fields.field(missing=None)
    input_percent: float | None = fields.field(missing=None)
    agrees: bool | None = fields.field(missing=None)
    line: str = fields.field(missing="")


def _anatomy(value: Any, where: str) -> Anatomy | None:
    if value is None:
        return None
    try:
        return Anatomy.from_dict(value)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        what = f"field {where} holds a value this toolkit cannot show ({one_line(e)})"
        raise fields.ReportError(what) from None


@dataclasses.dataclass(frozen=True)
class DiagnosisSection(fields.Record):
    """A diagnosis as the report keeps it: the three rates (steps/s), the verdict and why it
    is uncertain ("" where it is not), the pipeline measured, XProf's second opinion, the
    advice in its reader's words, and the rest the diagnosis measured (the run's ledger as
    JSON spelled for that reader, the step's anatomy). report.json's ``diagnosis``, each field
    checked as it is read (``field diagnosis.fit_rate is 'fast', not a number``)."""

    WHERE = "diagnosis"

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
    anatomy: Anatomy | None = fields.field(None, read=_anatomy)
    noise: float | None = None
    uncertain: str = ""

    def line(self) -> str:
        """The verdict and its rates; an uncertain one with why (no advice came from it)."""
        return (
            f"diagnosis: {self.verdict} (input {self.input_rate:,.1f}, step "
            f"{self.compute_rate:,.1f}, fit {self.fit_rate:,.1f} steps/s)"
        ) + (f": {self.uncertain}" if self.uncertain else "")
