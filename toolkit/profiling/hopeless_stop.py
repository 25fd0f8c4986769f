"""HopelessStop: ends a measurement ``fit`` that cannot win, or that runs past a deadline.

tune's search stops a candidate whose run has taken a few times what the best so far needed for its
whole window: it cannot win, and its rate after the first call (the compile) says by how much."""

from __future__ import annotations

import time
from typing import Any

from toolkit.core import compat

__all__ = ["HopelessStop"]


class HopelessStop(compat.keras().callbacks.Callback):
    """Stops ``fit`` once it has run `limit_s` after its first call, or at `deadline` (a
    ``time.perf_counter``): ``.stopped``, ``.rate`` (examples/s after the first call; 0: stopped in
    it). Keras ends a batch once an execution: each end is a call of `examples_per_call`."""

    # Its batch hooks start no profiler (StepTimer then probes for one once an epoch).
    starts_untold_profiler = False

    def __init__(self, examples_per_call: int, limit_s: float, deadline: float) -> None:
        super().__init__()
        self.examples_per_call, self.limit_s, self.deadline = examples_per_call, limit_s, deadline
        self.stopped, self.rate = False, 0.0
        self.start: float | None = None
        self.calls = 0

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        now = time.perf_counter()
        if self.start is None:  # the first call ends: its compile is not the rate
            self.start = now
            if now > self.deadline:
                self.stopped = self.model.stop_training = True
            return
        self.calls += 1
        if now - self.start > self.limit_s or now > self.deadline:
            self.stopped = True
            self.rate = self.calls * self.examples_per_call / (now - self.start)
            self.model.stop_training = True
