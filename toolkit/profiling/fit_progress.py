"""FitProgress: a progress bar for ``fit`` that never reads a tensor per step.

Keras's own bar (``verbose=1``) reads the loss after every step: a device sync per step on a GPU.
This one (use ``verbose=0``) counts steps from the batch index: tqdm's bar on a terminal (none in a
log or with ``TOOLKIT_PROGRESS=0``), one per epoch, and a line per epoch above it, as the summary
formats it. ``async_safe``; with ``--fused_steps=K``, K steps per batch, as StepTimer counts."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from toolkit.core import compat, progress, terminal
from toolkit.core.events import FUSED_STEPS_ATTR
from toolkit.core.stats import format_figure, format_s

__all__ = ["FitProgress"]

TIMING_KEYS = ("step_ms_p50", "examples_per_sec")  # StepTimer's, first after the epoch's count
# Label, percentage, bar, count, time and rate; no postfix, so the bar never shrinks to a sliver.
BAR_FORMAT = (
    "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"
)
COUNT_FORMAT = "{desc}: {n_fmt} steps [{elapsed}, {rate_fmt}]"  # an epoch of unknown length


def epoch_line(
    name: str,
    epoch: int,
    epochs: int | None,
    steps: int,
    seconds: float,
    logs: Any,
    columns: int | None = None,
    aside: Sequence[tuple[str, float]] = (),
) -> str:
    """The line kept for one epoch (``mlp epoch 3/20: 44 steps in 0.1 s, ...``), folded to
    `columns`; `aside`: parts of `seconds` not steady steps, said so the step figures multiply."""
    numbers = {}
    for key, value in (logs or {}).items():
        try:
            numbers[key] = float(value)
        except (TypeError, ValueError):
            continue
    head = [f"{name} epoch {epoch}/{epochs or '?'}: {steps} steps in {format_s(seconds)}"]
    # said where it moves the arithmetic: 50 ms, or 5 % of the epoch
    outside = [f"{what} {format_s(t)}" for what, t in aside if t >= min(0.05, 0.05 * seconds)]
    if outside:  # "(first call 1.55 s, validation 0.376 s)": items the line may fold between
        head[0] += f" ({outside[0]}"
        head += outside[1:]
        head[-1] += ")"
    head += [format_figure(k, numbers[k]) for k in TIMING_KEYS if k in numbers]
    rest = [
        format_figure(k, v)
        for k, v in numbers.items()
        if k not in TIMING_KEYS and not k.startswith("step_ms_")
    ]
    return terminal.fit_groups([head, rest], columns)


class FitProgress(compat.keras().callbacks.Callback):
    """A bar of each epoch's steps, a line per epoch kept above it; `name` is the bar's label."""

    # Its batch hooks start no profiler (StepTimer then probes for one once an epoch).
    starts_untold_profiler = False

    async_safe = True

    def __init__(self, name: str = "fit") -> None:
        super().__init__()
        self.name = name
        self._supports_tf_logs = True  # tf_keras: leave the logs alone (no conversion per step)
        self.bar: progress.Bar | None = None
        self.steps_done = 0  # training steps finished, all epochs
        self._in_epoch = 0  # Keras batches finished in this epoch
        self._epochs = 0
        self._per_epoch: int | None = None  # training steps in an epoch, when Keras knows
        self._fused = 1  # training steps per Keras batch
        self._epoch_began = 0.0
        self._first_call_s = 0.0  # the run's first call (it compiles), in the first epoch
        self._validation_s = 0.0  # this epoch's validation
        self._test_began: float | None = None

    def on_train_begin(self, logs: Any = None) -> None:
        params = self.params or {}
        self._epochs = int(params.get("epochs") or 0)
        self._fused = max(1, int(getattr(self.model, FUSED_STEPS_ATTR, 1) or 1))
        steps = params.get("steps")
        self._per_epoch = steps * self._fused if steps else None
        self.steps_done = 0
        # smoothing=0: the rate is the epoch's steps over its time so far, not a moving average.
        self.bar = progress.bar(
            self._per_epoch, self.name, unit="step", smoothing=0, bar_format=self._format()
        )

    def _format(self) -> str:
        return BAR_FORMAT if self._per_epoch else COUNT_FORMAT

    def _label(self, epoch: int) -> str:
        return f"{self.name} epoch {epoch + 1}/{self._epochs or '?'}"

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        steps = (self.params or {}).get("steps")
        if steps:
            self._per_epoch = steps * self._fused
        elif self._in_epoch:  # a dataset of unknown length: as long as the epoch before
            self._per_epoch = self._in_epoch * self._fused
        self._in_epoch = 0
        self._epoch_began = time.perf_counter()
        self._first_call_s = self._validation_s = 0.0
        if self.bar is not None:
            self.bar.reset(self._per_epoch, self._label(epoch), self._format())

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        done = batch + 1  # Keras passes the index of the call's last batch
        if self._per_epoch:  # ...past the epoch's end for a last call that ran short of it
            done = min(done, self._per_epoch // self._fused)
        if done <= self._in_epoch:
            return
        steps = (done - self._in_epoch) * self._fused
        if not self.steps_done:  # the run's first call compiles: said apart in the epoch line
            self._first_call_s = time.perf_counter() - self._epoch_began
        if self.bar is not None:
            if not self.steps_done:  # ... and out of the bar's rate and ETA
                self.bar.skip_elapsed()
            self.bar.update(steps)
        self.steps_done += steps
        self._in_epoch = done

    def on_test_begin(self, logs: Any = None) -> None:
        self._test_began = time.perf_counter() if self.bar is not None else None

    def on_test_end(self, logs: Any = None) -> None:
        if self._test_began is not None:  # validation inside fit (not an evaluate call)
            self._validation_s += time.perf_counter() - self._test_began
            self._test_began = None

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.bar is None:
            return
        took = time.perf_counter() - self._epoch_began
        aside = (("first call", self._first_call_s), ("validation", self._validation_s))
        line = epoch_line(
            self.name,
            epoch + 1,
            self._epochs,
            self._in_epoch * self._fused,
            took,
            logs,
            terminal.width(sys.stderr),
            aside,
        )
        self.bar.keep(line)

    def on_train_end(self, logs: Any = None) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
