"""StepTimer's figures as TensorBoard scalars, beside Keras's own in the Scalars tab.

Written with TensorBoard's own event-file writer
(``tensorboard.summary.writer.event_file_writer``, pure Python: no TensorFlow op, so it works
under every Keras backend and costs a training step nothing). Nothing is written per step:
StepTimer hands over each epoch's recorded steps at the epoch's end, and they are written then,
at their own global step numbers, so the chart is per step (or per ``log_steps`` window) all
the same.

Tags (the x axis is the global training step):

* ``step_time/ms``: ms per step of every timed execution, or the mean of each ``log_steps``
  window; an epoch of more than :data:`MAX_POINTS` timed executions is written in that many
  equal windows (a point costs ~20 µs to write, and TensorBoard keeps 1,000 points per tag
  anyway). Warm-up, the first step and profiler-traced steps are left out, as in the
  statistics;
* ``step_time/p50_ms``, ``step_time/p90_ms``, ``throughput/examples_per_sec``: per epoch;
* ``compute/mfu`` (percent) and ``memory/...`` (MiB) when the run measured them
  (``toolkit.profile`` writes those at its end);
* ``epoch/<metric>``: the model's epoch metrics, when asked (the recipes' ``--tensorboard``,
  so that their Scalars tab has the loss without Keras's TensorBoard callback).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from toolkit.profiling.stats import TIMED, summarize_calls

__all__ = ["INSTALL_HINT", "Scalars"]

INSTALL_HINT = "pip install 'keras-perf-toolkit[profile]' (or pip install tensorboard)"
MAX_POINTS = 100  # step_time/ms points per epoch at most


class Scalars:
    """An event file in `logdir` that TensorBoard's Scalars tab reads.

    Raises:
        ImportError: TensorBoard is not installed (one line, naming what installs it).
    """

    def __init__(self, logdir: str | os.PathLike[str], log_steps: int | None = None) -> None:
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            raise ImportError(f"TensorBoard scalars need TensorBoard: {INSTALL_HINT}") from None
        self.logdir = os.fspath(logdir)
        os.makedirs(self.logdir, exist_ok=True)
        self._event, self._summary, self._file_writer = Event, Summary, EventFileWriter
        self._writer: Any = None  # opened at the first write, closed by close()
        self.log_steps = log_steps
        self.written = 0

    def write(self, tag: str, value: float, step: int) -> None:
        """One scalar at global step `step`."""
        if self._writer is None:
            # A queue that holds an epoch's points: writing them never waits on the writer's
            # thread (TensorBoard's default of 10 made each point a thread hand-off).
            self._writer = self._file_writer(self.logdir, max_queue_size=MAX_POINTS + 32)
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=float(value))])
        self._writer.add_event(self._event(wall_time=time.time(), step=int(step), summary=summary))
        self.written += 1

    def write_many(self, values: Mapping[str, float], step: int, prefix: str = "") -> None:
        for tag, value in values.items():
            self.write(prefix + tag, value, step)

    def steps(self, calls: Iterable[tuple[float, int, int, str]], first_step: int) -> int:
        """Writes ``step_time/ms`` for the timed ones of `calls` (``(seconds, steps, epoch,
        kind)``, StepTimer's records), the first of which ends at global step `first_step` +
        its steps; one point per execution (per window of several when there are more than
        :data:`MAX_POINTS`), or per ``log_steps`` window. Returns the global step after the
        last call."""
        calls = list(calls)
        timed = sum(1 for _, n, _, kind in calls if kind == TIMED and n > 0)
        per_point = -(-timed // MAX_POINTS)  # executions per point when there are many
        step = first_step
        window_s, window_n, window_calls = 0.0, 0, 0
        for seconds, n, _, kind in calls:
            step += n
            if kind != TIMED or n <= 0:
                continue
            window_s, window_n, window_calls = window_s + seconds, window_n + n, window_calls + 1
            full = window_n >= self.log_steps if self.log_steps else window_calls >= per_point
            if full:
                self.write("step_time/ms", window_s / window_n * 1e3, step)
                window_s, window_n, window_calls = 0.0, 0, 0
        if window_n:
            self.write("step_time/ms", window_s / window_n * 1e3, step)
        return step

    def epoch(
        self,
        calls: list[tuple[float, int, int, str]],
        first_step: int,
        batch_size: int | None,
        metrics: Mapping[str, float] | None = None,
    ) -> int:
        """An epoch's per-step times, its p50/p90 and examples/s, and (when given) the model's
        `metrics`. Returns the global step at the epoch's end."""
        end = self.steps(calls, first_step)
        stats = summarize_calls(calls, batch_size)  # the report's own arithmetic
        if stats.timed_steps:
            self.write("step_time/p50_ms", stats.p50_s * 1e3, end)
            self.write("step_time/p90_ms", stats.p90_s * 1e3, end)
            if stats.examples_per_sec:
                self.write("throughput/examples_per_sec", stats.examples_per_sec, end)
        if metrics:
            self.write_many(metrics, end, prefix="epoch/")
        self.flush()
        return end

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Writes what is pending and closes the event file (and its writer thread); a later
        write opens a new file in the same directory, which TensorBoard reads as one run."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
