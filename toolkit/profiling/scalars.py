"""StepTimer's figures as TensorBoard scalars, beside Keras's own in the Scalars tab.

The events are TensorBoard's own protos (``tensorboard.compat.proto``), framed as TensorBoard's
``RecordWriter`` frames them (length, masked CRC-32C of the length, data, masked CRC-32C of the
data) and appended to one ``events.out.tfevents...`` file per :class:`Scalars`: no TensorFlow
op, so it works under every Keras backend. Nothing is written per step: StepTimer hands over
each epoch's recorded steps at the epoch's end, and they are written then, in one write, at
their own global step numbers, so the chart is per step (or per ``log_steps`` window) all the
same.

Why not TensorBoard's ``EventFileWriter``: it hands every event to a writer thread and frames
it there with a pure-Python CRC and a ``tf.io.gfile`` write, about 25 µs of CPU a point, 2.5 ms
an epoch of points, competing with the training on a small machine (0.4 % of a 0.7 s fit on one
core). Here the CRC is ``google-crc32c``'s C code (the ``[profile]`` extra installs it;
TensorBoard's pure-Python one otherwise) and an epoch's points cost about 5 µs each.

Tags (the x axis is the global training step):

* ``step_time/ms``: ms per step of every timed execution, or the mean of each ``log_steps``
  window; an epoch of more than :data:`MAX_POINTS` timed executions is written in that many
  equal windows (TensorBoard keeps 1,000 points per tag anyway). Warm-up, the first step
  and profiler-traced steps are left out, as in the statistics;
* ``step_time/p50_ms``, ``step_time/p90_ms``, ``throughput/examples_per_sec``: per epoch;
* ``compute/mfu_percent`` and ``memory/...`` (MiB) when the run measured them
  (``toolkit.profile`` writes those at its end);
* ``epoch/<metric>``: the model's epoch metrics, when asked (the recipes' ``--tensorboard``,
  so that their Scalars tab has the loss without Keras's TensorBoard callback).
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from toolkit.core.stats import TIMED, epoch_figures

__all__ = [
    "Scalars",
]

INSTALL_HINT = "pip install 'keras-perf-toolkit[profile]' (or pip install tensorboard)"
MAX_POINTS = 100  # step_time/ms points per epoch at most


_FILES = itertools.count()  # tells apart the event files one process opens in one second


class Scalars:
    """An event file in `logdir` that TensorBoard's Scalars tab reads.

    Points are kept in memory until :meth:`flush` (StepTimer flushes at each epoch's end) and
    appended then in one write; :meth:`close` flushes. A later write after :meth:`close`
    appends to the same file, which TensorBoard reads as one run.

    Raises:
        ImportError: TensorBoard is not installed (one line, naming what installs it).
    """

    def __init__(self, logdir: str | os.PathLike[str], log_steps: int | None = None) -> None:
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary
        except ImportError:
            raise ImportError(f"TensorBoard scalars need TensorBoard: {INSTALL_HINT}") from None
        self.logdir = os.fspath(logdir)
        os.makedirs(self.logdir, exist_ok=True)
        self._event = Event
        # One event, refilled for every point: building a fresh proto costs ~6x more.
        self._point = Event(summary=Summary(value=[Summary.Value(tag="", simple_value=0.0)]))
        self._value = self._point.summary.value[0]
        self._crc = masked_crc32c_function()
        self._pending: list[bytes] = []
        self.path: str | None = None  # the event file, named at the first flush
        self.log_steps = log_steps
        self.written = 0

    def _record(self, event: Any) -> bytes:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        crc = self._crc
        return b"".join(
            (header, struct.pack("<I", crc(header)), data, struct.pack("<I", crc(data)))
        )

    def write(self, tag: str, value: float, step: int) -> None:
        """One scalar at global step `step` (in the file at the next :meth:`flush`)."""
        event, point = self._point, self._value
        event.wall_time, event.step = time.time(), int(step)
        point.tag, point.simple_value = tag, float(value)
        self._pending.append(self._record(event))
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
        figures: Mapping[str, float] | None = None,
    ) -> int:
        """An epoch's per-step times, its p50/p90 and examples/s (`figures`, as
        :func:`~toolkit.core.stats.epoch_figures` gives them, computed from `calls` when
        not given), and (when given) the model's `metrics`. Returns the global step at the
        epoch's end."""
        end = self.steps(calls, first_step)
        if figures is None:
            figures = epoch_figures(calls, batch_size)
        for key, tag in _EPOCH_TAGS:
            if key in figures:
                self.write(tag, figures[key], end)
        if metrics:
            self.write_many(metrics, end, prefix="epoch/")
        self.flush()
        return end

    def flush(self) -> None:
        """Appends the points written since the last flush to the event file (creating it,
        named as TensorBoard names its own, at the first one)."""
        if not self._pending:
            return
        records = self._pending
        path = self.path
        if path is None:
            wall = time.time()
            name = (
                f"events.out.tfevents.{int(wall):010d}.{socket.gethostname()}.{os.getpid()}."
                f"{next(_FILES)}.steptimer"
            )
            path = os.path.join(self.logdir, name)
            # TensorBoard reads a file whose first event names the format's version.
            version = self._event(wall_time=wall, file_version=_VERSION)
            records = [self._record(version), *records]
        with open(path, "ab") as f:  # an OSError leaves the points pending, the file unnamed
            f.write(b"".join(records))
        self.path = path
        self._pending = []

    def close(self) -> None:
        """Writes what is pending. (No file handle or thread stays open between flushes.)"""
        self.flush()


_VERSION = "brain.Event:2"
_EPOCH_TAGS = (
    ("step_ms_p50", "step_time/p50_ms"),
    ("step_ms_p90", "step_time/p90_ms"),
    ("examples_per_sec", "throughput/examples_per_sec"),
)


def masked_crc32c_function() -> Callable[[bytes], int]:
    """TFRecord's masked CRC-32C: ``google-crc32c``'s C implementation where installed, else
    TensorBoard's own (pure Python, the same numbers, ~50x slower)."""
    try:
        import google_crc32c
    except ImportError:
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

        return masked_crc32c
    value = google_crc32c.value

    def masked_crc32c(data: bytes) -> int:
        x = value(data)
        return (((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    return masked_crc32c
