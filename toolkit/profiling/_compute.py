"""The run's compute facts as a record: what ``flops.compute_facts`` measured and what the report
adds from the median step (achieved FLOP/s, MFU). Import-light."""

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
        achieved_flops_per_s, mfu, datasheet_mfu: at the run's median step.
        peak_pending: the peak is still to be measured after fit (never saved)."""

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
    peak_pending: bool = fields.field(False, json=False)  # the runner's, never saved

    @property
    def reliable_peak(self) -> bool:
        """Whether MFU may be given from the peak (its runs within ``RELIABLE_SPREAD_PCT``)."""
        return bool(self.peak_flops_per_s) and reliable_peak(self.peak_spread_pct)

    def at_step(self, step_s: float | None) -> Compute:
        """With the achieved FLOP/s and MFU at `step_s`; no MFU from a peak measured on a busy
        machine."""
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
        """A report's ``compute`` (None: none), its figures checked.

        Raises:
            ReportError: a figure not a number >= 0 or null, named."""
        return super().from_dict(d, where) if d else None
