"""HopelessStop: ends a measurement ``fit`` that cannot win, or that runs past a deadline, and
keeps the rate it showed after its first call (the compile).

```python
stop = HopelessStop(examples_per_call=32 * 8, limit_s=10.0, deadline=time.perf_counter() + 60)
model.fit(dataset, epochs=1, steps_per_epoch=800, callbacks=[stop])
rate = stop.rate if stop.stopped else None  # examples/s after the first call; 0: stopped in it
```

tune's search stops a candidate whose run has taken a few times what the best so far needed
for its whole window: it cannot win, and its rate so far says by how much it lost."""

from __future__ import annotations

import time
from typing import Any

from toolkit.core import compat

__all__ = ["HopelessStop"]


class HopelessStop(compat.keras().callbacks.Callback):
    """Stops ``fit`` once it has run `limit_s` after its first call, or at `deadline`
    (``time.perf_counter``): ``.stopped``, and ``.rate`` (examples/s after the first call; 0
    when it stopped at the first call). Keras ends a batch once an execution: each end is a
    call of `examples_per_call` examples."""

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
