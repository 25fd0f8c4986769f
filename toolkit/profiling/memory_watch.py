"""MemoryWatch: host and device memory per epoch, with a warning on steady growth."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from absl import logging

from toolkit import backend
from toolkit.core import compat
from toolkit.core._host_memory import resident_mb
from toolkit.profiling._memory_records import DeviceMemory, EpochMemory, WatchedMemory

__all__ = [
    "MemoryWatch",
]


def steady_growth(values: Sequence[float], min_points: int, threshold: float) -> float | None:
    """Growth over the last `min_points` readings when every one rose, and by more than threshold.

    Returns the growth (last minus first of those readings), or None when memory did not grow
    steadily: a plateau, a drop, or fewer readings than `min_points`.
    """
    if min_points < 2 or len(values) < min_points:
        return None
    tail = values[-min_points:]
    if all(b > a for a, b in itertools.pairwise(tail)) and tail[-1] - tail[0] > threshold:
        return tail[-1] - tail[0]
    return None


class MemoryWatch(compat.keras().callbacks.Callback):
    """Records host RSS and device memory at train begin and at each epoch end.

    Use it to catch a leak (a Python list of tensors, a growing cache, a retracing function)
    before it kills a long run: it warns once when host or device memory rose at each of the
    last `min_epochs` readings by more than `growth_warn_mb` in total. Device memory comes from
    the backend (``toolkit.backend``; on TensorFlow ``tf.config.experimental.get_memory_info``,
    where it is exposed: CUDA GPUs).

    Args:
        growth_warn_mb: total growth over the window that triggers the warning. Defaults to `64`.
        min_epochs: readings in the window; at least 2. Defaults to `3`.
        rss_fn: returns host RSS in MiB. Defaults to the reading StepTimer's memory takes
            (``toolkit.core._host_memory``).
        device_fn: returns ``{device: {"current_mb", "peak_mb"}}``. Defaults to
            the backend's ``device_memory`` (peaks reset per epoch).

    Example:

    ```python
    watch = MemoryWatch()
    model.fit(dataset, epochs=10, callbacks=[watch])
    print(watch.readings[-1], watch.warnings)
    ```
    """

    def __init__(
        self,
        growth_warn_mb: float = 64.0,
        min_epochs: int = 3,
        rss_fn: Callable[[], float] | None = None,
        device_fn: Callable[[], Mapping[str, Mapping[str, float]]] | None = None,
    ) -> None:
        super().__init__()
        if min_epochs < 2:
            raise ValueError(f"min_epochs must be >= 2, got {min_epochs}")
        if growth_warn_mb < 0:
            raise ValueError(f"growth_warn_mb must be >= 0, got {growth_warn_mb}")
        self.growth_warn_mb = growth_warn_mb
        self.min_epochs = min_epochs
        self._rss_fn = rss_fn or resident_mb
        self._device_fn = device_fn or _device_memory_reset
        self._supports_tf_logs = True
        self.readings: list[EpochMemory] = []
        self.warnings: list[str] = []

    def read(self, epoch: int | None) -> EpochMemory:
        """Takes one reading now and checks for steady growth."""
        try:
            devices = {
                k: DeviceMemory(float(v["current_mb"]), float(v["peak_mb"]))
                for k, v in self._device_fn().items()
            }
        except Exception as e:  # noqa: BLE001 - memory info is best effort
            logging.warning("MemoryWatch: device memory unavailable: %s", e)
            devices = {}
        reading = EpochMemory(epoch, float(self._rss_fn()), devices)
        self.readings.append(reading)
        self._check()
        return reading

    def _check(self) -> None:
        series = {"host RSS": [r.host_rss_mb for r in self.readings]}
        for name in self.readings[-1].devices:
            series[f"{name} memory"] = [
                r.devices[name].current_mb for r in self.readings if name in r.devices
            ]
        for label, values in series.items():
            growth = steady_growth(values, self.min_epochs, self.growth_warn_mb)
            if growth is None or any(w.startswith(label) for w in self.warnings):
                continue
            message = (
                f"{label} grew at each of the last {self.min_epochs} readings, by "
                f"{growth:.0f} MiB in all (now {values[-1]:.0f} MiB): a leak would look like "
                "this; look for tensors kept in Python lists, a growing cache, or retracing"
            )
            self.warnings.append(message)
            logging.warning("MemoryWatch: %s", message)

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        self.readings = []
        self.warnings = []
        self.read(None)

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self.read(epoch)

    def result(self) -> WatchedMemory:
        """What the report records about memory."""
        return WatchedMemory(tuple(self.readings), tuple(self.warnings))


def _device_memory_reset() -> dict[str, dict[str, float]]:
    return backend.get().device_memory(reset_peak=True)
