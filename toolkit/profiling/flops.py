"""Model FLOPs per training step, the machine's measured matmul peak, and MFU.

* :func:`count_flops` has the backend count one forward and one forward + backward pass at the real
  batch size (the optimizer update, negligible next to the gradients, left out).
* :func:`matmul_peak` measures a large matmul on a device in a compute dtype, cached per machine,
  backend, device, dtype and threads: MFU is a share of what this machine really does (a known GPU's
  datasheet dense peak is recorded beside it). The arithmetic is ``toolkit.core.stats``'."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Mapping
from typing import Any

from toolkit import backend
from toolkit.core import _fields as fields
from toolkit.core import machine
from toolkit.core.cache import Cache
from toolkit.core.stats import reliable_peak
from toolkit.profiling._compute import Compute

__all__ = [
    "Compute",
    "FlopCount",
    "Peak",
    "compute_facts",
    "count_flops",
    "matmul_peak",
]

PEAK_FILE = "matmul_peak.json"
MAX_MEASUREMENTS = 3  # times a peak spread over RELIABLE_SPREAD_PCT (no MFU) is measured
_CACHE = Cache(PEAK_FILE)


@dataclasses.dataclass(frozen=True)
class FlopCount(fields.Record):
    """FLOPs of one step at a given batch size, or why they could not be counted.

    Attributes:
        forward, train_step: FLOPs of one forward, and one forward + backward pass (no optimizer).
        method, note: how counted; caveats, or why missing (then the counts are `None`)."""

    batch_size: int
    forward: int | None
    train_step: int | None
    method: str = ""
    note: str | None = None


def count_flops(model: Any, batch_size: int) -> FlopCount:
    """FLOPs of one forward pass and one training step of a built model (never raises: a `note`)."""
    try:
        forward, train_step, method, note = backend.get().count_flops(model, batch_size)
    except backend.BackendError as e:
        return FlopCount(batch_size, None, None, "", f"not counted: {e}")
    return FlopCount(batch_size, forward, train_step, method, note)


@dataclasses.dataclass(frozen=True)
class Peak:
    """A device's measured matmul peak in a dtype, as cached per machine.

    Attributes:
        flops_per_s: the best timed run's FLOP/s.
        spread_pct: the median run's slowness vs the best (over ``RELIABLE_SPREAD_PCT``: no MFU).
        runs: timed runs; measurements: how many times it was measured.
        dtype, size: the matmuls'; key, facts: the cache's key and what it is keyed by.
        measured_utc: when; source: ``"cache"`` or ``"measured"``; settled: whether it stands."""

    flops_per_s: float
    spread_pct: float
    runs: int
    measurements: int = 1
    dtype: str = "float32"
    size: int = 0
    key: str = ""
    facts: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    measured_utc: str = ""
    source: str = "measured"

    @property
    def settled(self) -> bool:
        """Whether it stands (else remeasured, to MAX_MEASUREMENTS: one low reading sets no MFU)."""
        return reliable_peak(self.spread_pct) or self.measurements >= MAX_MEASUREMENTS

    @classmethod
    def from_cache(cls, stored: Mapping[str, Any]) -> Peak:
        names = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in stored.items() if k in names}
        kept.setdefault("spread_pct", 100.0)  # unknown: not to be trusted
        kept.setdefault("runs", 0)
        return cls(**{**kept, "flops_per_s": float(stored["flops_per_s"]), "source": "cache"})

    def to_cache(self) -> dict[str, object]:
        out = dataclasses.asdict(self)
        out.pop("source")
        return out


def _peak_facts(device: Any, dtype: str) -> Mapping[str, Any]:
    return machine.machine_facts(
        backend=backend.name(),
        device=f"{device.kind}:{device.index} {device.human_name}",
        dtype=dtype,
        intra_op=backend.get().intra_op_threads() or "default",
    )


def matmul_peak(device: Any = None, dtype: str = "float32", *, refresh: bool = False) -> Peak:
    """The measured matmul peak of `device` in `dtype`, from the cache or measured now.

    Args:
        device: a `toolkit.devices.DeviceInfo` (default: the selected device).
        dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"``.
        refresh: measure again even when cached (the cache keeps the higher)."""
    from toolkit import devices

    device = device or devices.select("auto")
    facts = _peak_facts(device, dtype)
    key = _CACHE.key(facts)
    cached = _cached(key)
    if not refresh and cached is not None and cached.settled:
        return cached
    size = 2048 if device.kind == "cpu" else 8192
    run = backend.get().measure_matmul_peak(devices.framework_device(device), dtype, size)
    best, spread = run.flops_per_s, run.spread_pct
    if cached is not None and cached.flops_per_s > best:  # a peak is the best seen: keep it
        best, spread = cached.flops_per_s, min(spread, cached.spread_pct)
    peak = Peak(
        best, spread, run.runs, (cached.measurements if cached else 0) + 1, dtype, size, key,
        facts, _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )  # fmt: skip
    _CACHE.put(key, facts, peak.to_cache())  # a read-only home still gets the number
    return peak


def _cached(key: str) -> Peak | None:
    stored = _CACHE.get(key)
    try:
        return Peak.from_cache(stored) if stored is not None else None
    except (KeyError, TypeError, ValueError):  # an entry this version cannot read: measure
        return None


def cached_peak(device: Any, dtype: str = "float32") -> Peak | None:
    """The cached matmul peak of `device` in `dtype`, settled or not, or None (runs no op)."""
    return _cached(_CACHE.key(_peak_facts(device, dtype)))


def compute_facts(
    model: Any, batch_size: int, precision: str, device: Any, *, measure_peak: bool = True
) -> Compute:
    """FLOPs per step of `model` and the device's matmul peak in `precision`'s compute dtype.

    `measure_peak=False` reads the peak from the cache only, measuring in :func:`recheck_peak` after
    ``fit``: each TensorFlow op takes a number from the counter naming the functions traced next,
    and XLA's persistent cache keys programs by it (measuring first would miss the cache)."""
    count = count_flops(model, batch_size)
    dtype = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}.get(precision, "float32")
    facts = Compute(count.train_step, count.forward, batch_size, count.method, count.note, dtype)
    if count.train_step is None:
        return facts
    facts = _datasheet(facts, device)
    try:
        peak = matmul_peak(device, dtype) if measure_peak else cached_peak(device, dtype)
    except Exception as e:  # noqa: BLE001 - MFU is a nicety; training goes on
        return dataclasses.replace(facts, note=f"no matmul peak: {type(e).__name__}: {e}")
    if peak is not None:
        facts = _with_peak(facts, peak)
    pending = not measure_peak and (peak is None or not peak.settled)
    return dataclasses.replace(facts, peak_pending=pending)  # the runner: recheck after fit


def _with_peak(facts: Compute, peak: Peak) -> Compute:
    return dataclasses.replace(
        facts,
        peak_flops_per_s=peak.flops_per_s,
        peak_source=peak.source,
        peak_spread_pct=peak.spread_pct,
    )


def _datasheet(facts: Compute, device: Any) -> Compute:
    """The GPU's datasheet peak for the math the step runs, beside the measured one, where known."""
    from toolkit.devices._datasheet import datasheet_peak

    if device is None:
        return facts
    math = "float32"
    if facts.peak_dtype == "float32":
        try:
            math = backend.get().float32_matmul_precision()
        except Exception:  # noqa: BLE001 - a nicety: the measured MFU stands without it
            math = "float32"
    sheet = datasheet_peak(device, facts.peak_dtype, math)
    if sheet is None:
        return facts
    return dataclasses.replace(
        facts,
        datasheet_peak_flops_per_s=sheet["flops_per_s"],
        datasheet_peak=f"{sheet['product']}, dense {sheet['math']}",
    )


def recheck_peak(compute: Compute, step_s: float | None, device: Any) -> Compute:
    """`compute` with the peak measured where pending, and again where the step beats a cached one
    (a busy machine's); where the step still beats it, a note instead of MFU > 100 %."""
    if compute.peak_pending:
        compute = dataclasses.replace(compute, peak_pending=False)
        try:
            compute = _with_peak(compute, matmul_peak(device, compute.peak_dtype))
        except Exception as e:  # noqa: BLE001 - MFU is a nicety
            return dataclasses.replace(compute, note=f"no matmul peak: {type(e).__name__}: {e}")
    peak, work = compute.peak_flops_per_s, compute.flops_per_step
    if not peak or not work or not step_s or work / step_s <= peak:
        return compute
    if compute.peak_source == "cache":
        try:
            fresh = matmul_peak(device, compute.peak_dtype, refresh=True)
        except Exception:  # noqa: BLE001 - MFU is a nicety
            fresh = None
        if fresh is not None and fresh.flops_per_s > peak:
            peak = fresh.flops_per_s
            compute = dataclasses.replace(
                compute,
                peak_flops_per_s=peak,
                peak_source="measured again (the cached peak was lower than the run)",
            )
    if work / step_s > peak:
        compute = dataclasses.replace(
            compute,
            note=(
                "the run's median step beat the measured matmul peak (MFU over 100 %): the "
                "peak is a lower bound here (a busy machine when measured, or a count that "
                "misses the work); read MFU as relative"
            ),
        )
    return compute
