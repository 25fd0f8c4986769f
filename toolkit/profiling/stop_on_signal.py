"""StopOnSignal: Ctrl-C or SIGTERM ends a ``fit`` at the next step boundary.

``profile()`` installs its handler; by hand, ``signal.signal(signal.SIGTERM, stop.on_signal)``, pass
``stop`` to ``fit`` and catch ``toolkit.TrainingInterrupted`` (raised between steps: save then)."""

from __future__ import annotations

from typing import Any

from toolkit.core import compat, interrupts
from toolkit.core.interrupts import interruption

__all__ = [
    "StopOnSignal",
]


class StopOnSignal(compat.keras().callbacks.Callback):
    """SIGINT or SIGTERM during a profiled ``fit`` stops it at the next step boundary: the
    handler only records the signal, and this callback raises it from ``on_train_batch_begin``
    (or an epoch hook), where no op is in flight, so the partial report is written. A second
    signal, or one outside ``fit``, raises at once."""

    # Its batch hooks start no profiler (StepTimer then probes for one once an epoch).
    starts_untold_profiler = False

    async_safe = True  # overrides no batch-end hook: Keras keeps its async dispatch

    def __init__(self) -> None:
        super().__init__()
        self._supports_tf_logs = True
        self.pending: int | None = None
        self.in_fit = False

    def on_signal(self, signum: int, frame: Any) -> None:
        if self.pending is not None or not self.in_fit or interrupts.forked():
            # at once, unless Python would drop it there; a forked worker's default action
            interrupts.handle(signum, frame)
            return
        interrupts.note(signum)  # raised again by interrupts.check() if it is dropped
        self.pending = signum

    def _check(self) -> None:
        if self.pending is not None:
            signum, self.pending = self.pending, None
            interrupts.clear()  # raised now, not again by interrupts.check()
            raise interruption(signum)

    def on_train_begin(self, logs: Any = None) -> None:
        self.in_fit = True
        self._check()

    def on_train_end(self, logs: Any = None) -> None:
        self.in_fit = False
        self._check()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._check()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._check()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self._check()
