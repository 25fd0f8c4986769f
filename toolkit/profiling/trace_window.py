"""TraceWindow: a profiler trace of a chosen range of training steps, each in a step marker.

Without step markers XProf says "No step marker observed": Keras 3's ``fit`` makes none (tf_keras's
does, so none is added there). A marker spans a batch begin to the next (or validation, epoch or
train end), StepTimer's boundaries, off Keras's batch-end thread; it holds one call of steps."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from absl import logging

from toolkit import backend
from toolkit.core import compat, native_logs
from toolkit.core.events import PROFILER
from toolkit.core.stats import DEFAULT_WARMUP_STEPS
from toolkit.profiling._timing import Traced

__all__ = [
    "TraceWindow",
]


DEFAULT_TRACE_STEPS = 5


class TraceWindow(compat.keras().callbacks.Callback):
    """Captures a profiler trace of steps ``[start_step, stop_step)`` of a ``fit``.

    For a step's detail in TensorBoard's Profile tab or XProf without tracing the whole run. Steps
    count across epochs from 0; the default window starts after StepTimer's warm-up, and StepTimer
    leaves traced steps out. A profiler failing to start or stop sets `error`, never stops training.

    Args:
        logdir: directory for the trace (read from ``logdir/plugins/profile``).
        stop_step: step at which tracing stops (exclusive; default `start_step + 5`).
        host_tracer_level: 1 (user events) to 3 (verbose).
        python_tracer_level: 1 traces Python calls (slow).
        device_tracer_level: 1 traces GPU kernels.

    Example: ``model.fit(dataset, callbacks=[StepTimer(), TraceWindow("logs/train")])``, then
    ``tensorboard --logdir logs`` (Profile tab)."""

    # Its traces are counted in PROFILER: StepTimer sees them without probing every begin.
    starts_untold_profiler = False

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        start_step: int = DEFAULT_WARMUP_STEPS + 1,
        stop_step: int | None = None,
        host_tracer_level: int = 2,
        python_tracer_level: int = 0,
        device_tracer_level: int = 1,
    ) -> None:
        super().__init__()
        if stop_step is None:
            stop_step = start_step + DEFAULT_TRACE_STEPS
        if start_step < 0 or stop_step <= start_step:
            raise ValueError(
                f"TraceWindow needs 0 <= start_step < stop_step, got {start_step} and {stop_step}"
            )
        self.logdir = os.fspath(logdir)
        self.start_step = start_step
        self.stop_step = stop_step
        self._levels = (host_tracer_level, python_tracer_level, device_tracer_level)
        self._supports_tf_logs = True
        self.error: str | None = None
        self.traced_steps: tuple[int, int] | None = None
        self._active = False
        self._done = False
        self._offset = 0  # steps in earlier epochs
        self._next_offset = 0
        self._started_at = 0
        self._marker: Any = None  # the open step marker, while a traced step runs
        self.marked_steps = 0
        self.began_at: float | None = None  # outside clock: when the profiler had started
        self.ended_at: float | None = None  # and when the device caught up after the window

    def on_train_begin(self, logs: compat.Logs = None) -> None:
        self._offset = self._next_offset = 0

    def on_epoch_begin(self, epoch: int, logs: compat.Logs = None) -> None:
        self._offset = self._next_offset

    def on_train_batch_begin(self, batch: int, logs: compat.Logs = None) -> None:
        step = self._offset + batch
        self._next_offset = step + 1
        self._close_marker()
        if self._active and step >= self.stop_step:
            self._stop(step)
        elif not self._active and not self._done and step >= self.start_step:
            self._start(step)
        if self._active:
            self._open_marker(step)

    def on_test_begin(self, logs: compat.Logs = None) -> None:
        self._close_marker()  # validation is not part of the step

    def on_epoch_end(self, epoch: int, logs: compat.Logs = None) -> None:
        self._close_marker()
        steps = (self.params or {}).get("steps")
        if steps:
            self._next_offset = self._offset + steps

    def on_train_end(self, logs: compat.Logs = None) -> None:
        self._close_marker()
        if self._active:
            self._stop(self._next_offset)

    def _open_marker(self, step: int) -> None:
        if compat.keras_flavor() != "keras3":
            return  # tf_keras's fit marks its steps itself
        try:
            marker = backend.get().step_marker(step)
            marker.__enter__()
        except Exception as e:  # noqa: BLE001 - a marker is a nicety; the trace goes on
            logging.warning("TraceWindow: no step marker for step %d: %s", step, e)
            return
        self._marker = marker
        self.marked_steps += 1

    def _close_marker(self) -> None:
        marker, self._marker = self._marker, None
        if marker is not None:
            with contextlib.suppress(Exception):
                marker.__exit__(None, None, None)

    def _start(self, step: int) -> None:
        self._done = True  # one window per fit, whatever happens
        try:
            os.makedirs(self.logdir, exist_ok=True)
            seam = backend.get()
            synced_at = _waited(seam)  # else an async backend's queued steps run in the trace
        except Exception as e:  # noqa: BLE001 - a profiler failure must never kill training
            self._failed(step, e)
            return
        # Announced before the profiler runs: a batch-end hook on Keras's thread may read the probe.
        PROFILER.started(synced_at)
        try:
            with native_logs.held():  # the profiler's C++ notes stay out of Keras's bar
                seam.start_trace(self.logdir, *self._levels)
        except Exception as e:  # noqa: BLE001
            PROFILER.stopped(synced_at)  # the attempt's cost stays in this step, left out
            self._failed(step, e)
            return
        self._active = True
        self._started_at = step
        self.began_at = time.perf_counter()

    def _failed(self, step: int, e: Exception) -> None:
        self.error = f"profiler failed to start at step {step}: {type(e).__name__}: {e}"
        logging.warning("TraceWindow: %s; training continues without a trace", self.error)

    def _stop(self, step: int) -> None:
        self._active = False
        synced_at = None
        try:
            seam = backend.get()
            synced_at = _waited(seam)  # the traced steps' device work ends inside the trace
            self.ended_at = synced_at
            with native_logs.held():
                seam.stop_trace()
            self.traced_steps = (self._started_at, step)
        except Exception as e:  # noqa: BLE001
            self.error = f"profiler failed to stop at step {step}: {type(e).__name__}: {e}"
            logging.warning("TraceWindow: %s", self.error)
        finally:
            PROFILER.stopped(synced_at)

    def trace_files(self) -> list[str]:
        """The trace files under `logdir` (XSpace, or PyTorch's Chrome trace JSON)."""
        found = []
        for root, _, files in os.walk(self.logdir):
            try:
                ours = backend.get().trace_files(sorted(files))
            except backend.BackendError:
                ours = []
            found += [os.path.join(root, f) for f in ours]
        return sorted(found)

    def result(self) -> Traced:
        """What the report records about the trace."""
        return Traced(
            self.logdir,
            (self.start_step, self.stop_step),
            self.traced_steps,
            tuple(self.trace_files()),
            self.marked_steps,
            self.error,
        )


def _waited(seam: Any) -> float | None:
    """Waits for the device; the time it had caught up, or None when the wait failed (the edge
    goes on, and StepTimer trusts no step to have ended before it)."""
    try:
        seam.wait_for_device()
    except Exception as e:  # noqa: BLE001 - a trace edge never fails on the wait
        logging.warning("TraceWindow: could not wait for the device: %s: %s", type(e).__name__, e)
        return None
    return time.perf_counter()
