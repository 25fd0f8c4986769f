"""LossGuard: the first step whose loss is NaN or infinite, found without a device sync per step.

``fit(ds, callbacks=[guard := LossGuard()])``, then ``guard.found``: ``"LossNotFinite: loss became
nan at step 412 of epoch 2: ..."`` or None. ``LossGuard(stop=False)`` notes it and trains on."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from toolkit.core import compat

__all__ = ["LossGuard"]


class LossGuard(compat.keras().callbacks.Callback):
    """Stops ``fit`` at the first non-finite loss unless `stop` is False, as ``TerminateOnNaN``
    would; the report is then ``diverged`` with the step. Keras's logged loss is the epoch's running
    mean, so its first non-finite value is the first bad step. ``async_safe``: read on Keras 3's
    callback thread, no sync; ``fit`` stops within a few steps. Logs as tensors (tf_keras) are read
    a step later, keeping a step of lead. Validation losses are checked at each epoch's end."""

    # Its batch hooks start no profiler (StepTimer then probes for one once an epoch).
    starts_untold_profiler = False

    async_safe = True

    def __init__(self, stop: bool = True) -> None:
        super().__init__()
        self._supports_tf_logs = True  # tf_keras: tensors, read a step later (above)
        self._pending: tuple[int, Any] | None = None
        self.stop = stop
        self.found: str | None = None
        self._lock = threading.Lock()
        self._epoch = 0
        self._first: tuple[int, int] | None = None  # (epoch, step) of the first bad loss

    def on_train_begin(self, logs: Any = None) -> None:
        self.found, self._first, self._pending = None, None, None

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None and not isinstance(loss, (float, int, np.generic)):
            previous = self._pending  # a tensor: read the step before this one instead
            self._pending = (batch, loss)
            if previous is None:
                return
            batch, loss = previous
        self._check(batch, loss)

    def _check(self, batch: int, loss: Any) -> None:
        value = _float(loss)
        if value is None or math.isfinite(value):
            return
        with self._lock:  # async hooks may run out of order: keep the earliest
            if self._first is None or (self._epoch, batch) < self._first:
                self._first = (self._epoch, batch)
                self._describe("loss", value, f"at step {batch + 1} of epoch {self._epoch + 1}")

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        # Stop from the training thread, at a step boundary: set from Keras's callback thread, the
        # flag races JAX's loop ("Array has been deleted").
        if self.stop and self._first is not None:
            self.model.stop_training = True

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._pending is not None:  # the epoch's last step, not read yet
            self._check(*self._pending)
            self._pending = None
        for key in ("loss", "val_loss"):
            value = _float((logs or {}).get(key))
            if value is None or math.isfinite(value):
                continue
            with self._lock:
                if self.found is None:
                    self._describe(key, value, f"in epoch {epoch + 1}")
            if self.stop:
                self.model.stop_training = True
            return

    def _describe(self, key: str, value: float, where: str) -> None:
        self.found = (
            f"LossNotFinite: {key} became {value} {where}: lower the learning rate, look for "
            "NaN or inf in the data, or train in float32"
        )


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
