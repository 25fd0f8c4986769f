"""The report's diagnosis section: what ``--diagnose`` (``toolkit.search.diagnose``) found
before the run, as a record (``report.json``'s ``diagnosis``), and its lines. The report keeps
what the diagnosis found, so it shows without the search; its advice and ledger keep the words
spelled for the reader who asked (flags or Python), not the settings behind them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core._anatomy import Anatomy
from toolkit.core.errors import one_line


@dataclasses.dataclass(frozen=True)
class SecondOpinion(fields.Record):
    """XProf's reading of a trace of the fit beside the rates' verdict (``diagnosis.xprof``).

    Attributes:
        verdict: XProf's (``highly input-bound``, ...); None where it gave none.
        agrees: XProf's verdict agrees with the rates' (None: no verdict); `line` says why not."""

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
    """report.json's ``diagnosis``, each field checked as read: the three rates (steps/s), the
    verdict and why it is uncertain, the pipeline, XProf's opinion, the advice, ledger, anatomy."""

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
