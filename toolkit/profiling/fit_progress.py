"""FitProgress: a progress bar for ``fit`` that never reads a tensor per step.

Keras's own bar (``verbose=1``) reads the loss after every step, which converts it to a
Python number: a device sync per step on a GPU, and one more thing on the timed path
everywhere. This callback counts steps from the batch index Keras hands every callback, draws
tqdm's bar on a terminal (``toolkit.core.progress``: nothing in a log or when
``TOOLKIT_PROGRESS=0``) and shows the loss and metrics only at each epoch's end, where Keras
has already read them: beside the bar, and in a line kept above it, one per epoch, as Keras's
own bar leaves them. ``async_safe``: Keras 3 keeps dispatching batch ends off the training
thread with it in the list.

```python
model.fit(dataset, epochs=3, verbose=0, callbacks=[FitProgress("my-model")])
```
"""

from __future__ import annotations

import time
from typing import Any

from toolkit.core import compat, progress

__all__ = ["FitProgress"]

SHOWN_METRICS = 4  # loss, accuracy, val_loss, val_accuracy: the first few fit logs


class FitProgress(compat.keras().callbacks.Callback):
    """A bar of the run's steps, ``epoch E/N`` beside it, the epoch's metrics after it.

    Args:
        name: the bar's label (e.g. the recipe's name). Defaults to `"fit"`.
    """

    async_safe = True

    def __init__(self, name: str = "fit") -> None:
        super().__init__()
        self.name = name
        self._supports_tf_logs = True  # tf_keras: leave the logs alone (no conversion per step)
        self.bar: progress.Bar | None = None
        self.steps_done = 0  # Keras steps finished, all epochs
        self._in_epoch = 0  # Keras steps finished in this epoch
        self._epochs = 0
        self._epoch_began = 0.0

    def on_train_begin(self, logs: Any = None) -> None:
        params = self.params or {}
        self._epochs = int(params.get("epochs") or 0)
        steps = params.get("steps")
        total = steps * self._epochs if steps and self._epochs else None
        self.steps_done = 0
        # smoothing=0: the rate is steps over the time since the first call (validation
        # passes included, as in the time left), not a moving average of a few redraws.
        self.bar = progress.bar(total, self.name, unit="step", smoothing=0)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._in_epoch = 0
        self._epoch_began = time.perf_counter()
        if self.bar is not None:
            self.bar.describe(f"{self.name} epoch {epoch + 1}/{self._epochs or '?'}")

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        done = batch + 1  # Keras passes the index of the call's last step
        if done <= self._in_epoch:
            return
        if self.bar is not None:
            if not self.steps_done:  # the run's first call compiles: out of the rate and ETA
                self.bar.skip_elapsed()
            self.bar.update(done - self._in_epoch)
        self.steps_done += done - self._in_epoch
        self._in_epoch = done

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.bar is None:
            return
        shown = []
        for key, value in (logs or {}).items():
            try:
                shown.append(f"{key} {float(value):.4g}")
            except (TypeError, ValueError):
                continue
        self.bar.postfix(", ".join(shown[:SHOWN_METRICS]))
        took = time.perf_counter() - self._epoch_began
        kept = f"{self.name} epoch {epoch + 1}/{self._epochs or '?'}: {self._in_epoch} steps"
        kept += f" in {took:.1f} s" + (f"; {', '.join(shown)}" if shown else "")
        self.bar.keep(kept)

    def on_train_end(self, logs: Any = None) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
