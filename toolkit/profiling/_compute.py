"""The compute facts record (import-light): ``flops.compute_facts``' and the median step's MFU."""

from __future__ import annotations

import dataclasses
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core.stats import reliable_peak, utilization


@dataclasses.dataclass(frozen=True)
class Compute(fields.Record):
    """FLOPs per step and the peak they are measured against.

    Attributes:
        flops_per_step: a training step's FLOPs; None: not counted.
        flops_forward: a forward pass's; batch_size: what they are counted at.
        method, note: how they were counted; caveats, or why missing.
        peak_dtype, peak_flops_per_s, peak_source, peak_spread_pct: the measured peak.
        datasheet_peak_flops_per_s, datasheet_peak: a GPU datasheet's dense peak, and whose.
        achieved_flops_per_s, mfu, datasheet_mfu: at the run's median step."""

    WHERE = "compute"

    flops_per_step: float | None = None
    flops_forward: float | None = None
    batch_size: int | None = None
    method: str = ""
    note: str | None = None
    peak_dtype: str = "float32"
    peak_flops_per_s: float | None = None
    peak_source: str | None = None
    peak_spread_pct: float | None = None
    datasheet_peak_flops_per_s: float | None = None
    datasheet_peak: str | None = None
    achieved_flops_per_s: float | None = None
    mfu: float | None = None
    datasheet_mfu: float | None = None
    peak_pending: bool = fields.field(False, json=False)  # to measure after fit; never saved

    @property
    def reliable_peak(self) -> bool:
        """Whether MFU may be given from the peak (its runs within ``RELIABLE_SPREAD_PCT``)."""
        return bool(self.peak_flops_per_s) and reliable_peak(self.peak_spread_pct)

    def at_step(self, step_s: float | None) -> Compute:
        """With the achieved FLOP/s and MFU at `step_s`; no MFU from a busy machine's peak."""
        done = utilization(self.flops_per_step, step_s, self.peak_flops_per_s)
        sheet = utilization(self.flops_per_step, step_s, self.datasheet_peak_flops_per_s)
        return dataclasses.replace(
            self,
            achieved_flops_per_s=done["achieved_flops_per_s"],
            mfu=done["mfu"] if self.reliable_peak else None,
            datasheet_mfu=sheet["mfu"] if self.datasheet_peak_flops_per_s else None,
        )

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> Compute | None:
        """A report's ``compute`` (None: none); ReportError names a figure not >= 0 or null."""
        return super().from_dict(d, where) if d else None
