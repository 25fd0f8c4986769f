"""Model FLOPs per training step, the machine's measured matmul peak, and MFU.

* :func:`count_flops` asks the backend (``toolkit.backend``) to count one forward pass and one
  forward + backward pass of the model at the real batch size. On TensorFlow that is the graph
  profiler's registered FLOP statistics of every op (MatMul, Conv2D and their gradients,
  element-wise ops...); the optimizer update is left out (a few FLOPs per weight: negligible
  next to the gradients); recurrent layers are counted on an unrolled clone of the model.
* :func:`matmul_peak` measures what a large matmul achieves on a device in a compute dtype,
  once per machine: the result is cached in ``$TOOLKIT_CACHE_DIR`` (default
  ``~/.cache/keras-perf-toolkit``) under the machine key (``toolkit.machine``) with the backend
  that measured it, the device, dtype and thread setting. A measured peak, not a datasheet one:
  MFU then says how much of what this machine really does on its best-case kernel the training
  step gets.
* The arithmetic (achieved FLOP/s, MFU, formatting) is pure and lives beside the step
  statistics: ``toolkit.profiling.stats.utilization`` and ``format_flops``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import os
from typing import Any

from toolkit import backend, machine
from toolkit.files import atomic_write, read_json

__all__ = ["PEAK_FILE", "FlopCount", "count_flops", "matmul_peak"]

PEAK_FILE = "matmul_peak.json"


@dataclasses.dataclass(frozen=True)
class FlopCount:
    """FLOPs of one step at a given batch size, or why they could not be counted.

    Attributes:
        batch_size: examples the count is for.
        forward: FLOPs of one forward pass (inference).
        train_step: FLOPs of one forward + backward pass (a training step without the
            optimizer update).
        method: how the numbers were obtained.
        note: caveats, or why the count is missing (then the numbers are `None`).
    """

    batch_size: int
    forward: int | None
    train_step: int | None
    method: str = ""
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def count_flops(model: Any, batch_size: int) -> FlopCount:
    """FLOPs of one forward pass and one training step of a built Keras model.

    Never raises: a model the backend cannot count gets `None` numbers and a `note` saying why.
    """
    try:
        forward, train_step, method, note = backend.get().count_flops(model, batch_size)
    except backend.BackendError as e:
        return FlopCount(batch_size, None, None, "", f"not counted: {e}")
    return FlopCount(batch_size, forward, train_step, method, note)


def _peak_facts(device: Any, dtype: str) -> dict[str, Any]:
    return machine.machine_facts(
        backend=backend.name(),
        device=f"{device.kind}:{device.index} {device.human_name}",
        dtype=dtype,
        intra_op=backend.get().intra_op_threads() or "default",
    )


def matmul_peak(
    device: Any = None, dtype: str = "float32", *, refresh: bool = False
) -> dict[str, Any]:
    """The measured matmul peak of `device` in `dtype`, from the cache or measured now (~2 s).

    Args:
        device: a `toolkit.devices.DeviceInfo`. Defaults to `None` (the selected device).
        dtype: compute dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"``.
        refresh: measure again even when cached (the cache keeps the higher of the two: a
            busy machine measures low).

    Returns:
        ``{"flops_per_s", "dtype", "size", "key", "facts", "measured_utc", "source"}``, source being
        ``"cache"`` or ``"measured"``.
    """
    from toolkit import devices

    device = device or devices.select("auto")
    facts = _peak_facts(device, dtype)
    key = machine.machine_key(facts)
    path = os.path.join(machine.cache_dir(), PEAK_FILE)
    cached = read_json(path)
    if not refresh and isinstance(cached.get(key), dict):
        return {**cached[key], "source": "cache"}
    size = 2048 if device.kind == "cpu" else 8192
    measured = backend.get().measure_matmul_peak(device, dtype, size)
    if isinstance(cached.get(key), dict):  # a peak is the most the device did: keep the higher
        measured = max(measured, float(cached[key].get("flops_per_s") or 0.0))
    record = {
        "flops_per_s": measured,
        "dtype": dtype,
        "size": size,
        "key": key,
        "facts": facts,
        "measured_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    with contextlib.suppress(OSError):  # a read-only home still gets the number
        atomic_write(path, json.dumps({**read_json(path), key: record}, indent=1))
    return {**record, "source": "measured"}
