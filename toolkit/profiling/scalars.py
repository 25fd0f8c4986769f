"""StepTimer's figures as TensorBoard scalars, laid out as Keras's own, where a Keras user looks.

`logdir` is a run's TensorBoard directory holding Keras's ``train/`` and ``validation/`` runs (the
trace goes into ``train/`` too, as Keras puts it); ``tensorboard --logdir`` on the parent of many
runs shows them side by side (:func:`viewing_hint`). Given the same ``log_dir`` as
``keras.callbacks.TensorBoard``, StepTimer's points join Keras's. Tags, each described on its card:
* ``Step time/ms``: ms per step of every timed execution (or ``log_steps`` window; at most
  :data:`MAX_POINTS` an epoch), warm-up and traced steps left out; ``p50_ms``/``p90_ms`` per epoch;
* ``Throughput/examples_per_sec`` and ``Throughput/mfu_percent`` per epoch;
* ``Ledger/where the time went`` and ``anatomy`` (Images tab), written when the run ends;
* ``memory/host_mb`` (and ``device_mb``), the most read at each step; ``memory/host_rss_mb`` and
  ``device_peak_mb`` per epoch;
* ``epoch_<metric>`` when asked, as Keras names them, so one card overlays train and validation.
The headline groups are capitalized: TensorBoard sorts upper case first and opens the first two.

Not TensorBoard's ``EventFileWriter``: its writer thread frames every event with a pure-Python CRC,
CPU that competes with training. Here its protos are framed as its ``RecordWriter`` does, with
``google-crc32c``'s C code, appended in the caller's thread: no TensorFlow op, so any backend
works. Nothing is written per step: each epoch's steps go at its end, in one write."""

from __future__ import annotations

import itertools
import os
import shlex
import socket
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from toolkit.core.stats import TIMED, epoch_figures, utilization

__all__ = [
    "Scalars",
]

INSTALL_HINT = "pip install 'keras-perf-toolkit[profile]' (or pip install tensorboard)"
MAX_POINTS = 100  # Step time/ms points per epoch at most
TRAIN, VALIDATION = "train", "validation"  # Keras's TensorBoard callback's run names

STEP_MS = "Step time/ms"
STEP_P50 = "Step time/p50_ms"
STEP_P90 = "Step time/p90_ms"
EXAMPLES = "Throughput/examples_per_sec"
MFU = "Throughput/mfu_percent"
HOST_RSS = "memory/host_rss_mb"
DEVICE_PEAK = "memory/device_peak_mb"
HOST_MB, DEVICE_MB = "memory/host_mb", "memory/device_mb"

_DESCRIPTIONS = {
    STEP_MS: "Milliseconds per training step, from StepTimer: each timed execution (or each "
    "`log_steps` window) at the global step it ended on. Warm-up, the first step (tracing and "
    "compilation) and profiler-traced steps are left out.",
    STEP_P50: "The epoch's median ms per step (StepTimer), at its last global step: the "
    "figure the report and the search compare.",
    STEP_P90: "The epoch's 90th-percentile ms per step: far above the median, some steps "
    "wait (input, host sync, garbage collection).",
    EXAMPLES: "Examples per second over the epoch's timed steps (batch size over step time).",
    MFU: "Model FLOPs utilization per epoch, in percent: the model's FLOPs per step over the "
    "epoch's median step time, as a share of the matmul peak the toolkit measured on this "
    "machine (not a datasheet figure).",
    HOST_RSS: "The process's resident memory in MiB at each epoch's end (StepTimer's reading "
    "there, after the epoch's validation).",
    DEVICE_PEAK: "The device's most allocated memory in MiB so far (the backend's counters, "
    "summed over the process's devices), at each epoch's end.",
    HOST_MB: "The process's resident memory in MiB as StepTimer read it during the fit "
    "(every 200 ms by default), the most read at each training step: the ledger's memory.",
    DEVICE_MB: "The device's allocated memory in MiB (the backend's counters, summed over "
    "the process's devices), the most read at each training step.",
}
_METRIC = (
    "The model's `{name}` at each epoch's end, from Keras's epoch logs (x: the epoch, from 0). "
    "The `train` run has it on the training data, `validation` on the validation data."
)

_FILES = itertools.count()  # tells apart the event files one process opens in one second


def viewing_hint(logdir: str | os.PathLike[str]) -> str:
    """The one command that shows the runs under `logdir` in TensorBoard."""
    return f"tensorboard --logdir {shlex.quote(os.fspath(logdir))}"


def describe(tag: str) -> str:
    """What a tag means, for its card in TensorBoard."""
    if tag in _DESCRIPTIONS:
        return _DESCRIPTIONS[tag]
    return _METRIC.format(name=tag.removeprefix("epoch_"))


class Scalars:
    """Event files in ``logdir/train`` and ``logdir/validation`` for TensorBoard's Scalars tab.

    Points are kept until :meth:`flush`, appended in one write per run; a write after :meth:`close`
    appends to the same files.

    Raises:
        ImportError: TensorBoard is not installed (one line, naming what installs it)."""

    def __init__(self, logdir: str | os.PathLike[str], log_steps: int | None = None) -> None:
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary
            from tensorboard.compat.proto.tensor_pb2 import TensorProto
            from tensorboard.compat.proto.types_pb2 import DT_FLOAT
        except ImportError:
            raise ImportError(f"TensorBoard scalars need TensorBoard: {INSTALL_HINT}") from None
        self.logdir = os.fspath(logdir)
        os.makedirs(self.logdir, exist_ok=True)
        self._event = Event
        # One event, refilled per point (cheaper than a new proto); a tensor keeps its description.
        scalar = TensorProto(dtype=DT_FLOAT, float_val=[0.0])
        self._point = Event(summary=Summary(value=[Summary.Value(tag="", tensor=scalar)]))
        self._value = self._point.summary.value[0]
        self._scalar = self._value.tensor.float_val
        self._crc = masked_crc32c_function()
        self._pending: dict[str, list[bytes]] = {}
        self._described: set[tuple[str, str]] = set()  # (run, tag): the first point carries it
        self.paths: dict[str, str] = {}  # run -> its event file, named at its first flush
        self.log_steps = log_steps
        self.written = 0
        self.epoch_ends: list[tuple[int, float]] = []  # (global step, mean ms) of each epoch

    @property
    def runs(self) -> list[str]:
        """The runs written so far (``train``, ``validation``)."""
        return sorted(set(self.paths) | {r for r, p in self._pending.items() if p})

    def _record(self, event: Any) -> bytes:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        crc = self._crc
        return b"".join(
            (header, struct.pack("<I", crc(header)), data, struct.pack("<I", crc(data)))
        )

    def write(self, tag: str, value: float, step: int, run: str = TRAIN) -> None:
        """One scalar at step `step` of `run`; each tag's first point carries its description."""
        event, point = self._point, self._value
        event.wall_time, event.step = time.time(), int(step)
        point.tag = tag
        self._scalar[0] = float(value)
        if (run, tag) not in self._described:
            self._described.add((run, tag))
            metadata = point.metadata
            metadata.summary_description = describe(tag)
            metadata.plugin_data.plugin_name = "scalars"
            record = self._record(event)
            point.ClearField("metadata")
        else:
            record = self._record(event)
        self._pending.setdefault(run, []).append(record)
        self.written += 1

    def image(self, tag: str, png: bytes, step: int, description: str, run: str = TRAIN) -> None:
        """One PNG picture at step `step` of `run` (TensorBoard's Images tab), written now."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        size = _png_size(png)
        value = Summary.Value(
            tag=tag,
            image=Summary.Image(
                height=size[1], width=size[0], colorspace=4, encoded_image_string=png
            ),
        )
        value.metadata.summary_description = description
        value.metadata.plugin_data.plugin_name = "images"
        event = self._event(wall_time=time.time(), step=int(step), summary=Summary(value=[value]))
        self._pending.setdefault(run, []).append(self._record(event))
        self.flush()

    def metrics(self, values: Mapping[str, float], epoch: int) -> None:
        """Epoch metrics as Keras writes them (``val_loss``: ``validation``'s ``epoch_loss``)."""
        for name, value in values.items():
            if name.startswith("val_"):
                self.write(f"epoch_{name[4:]}", value, epoch, VALIDATION)
            else:
                self.write(f"epoch_{name}", value, epoch)

    def steps(self, calls: Iterable[tuple[float, int, int, str]], first_step: int) -> int:
        """Writes ``Step time/ms`` for the timed `calls` (the first ends at `first_step` + its
        steps), a point per execution or window. Returns the global step after the last call."""
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
                self.write(STEP_MS, window_s / window_n * 1e3, step)
                window_s, window_n, window_calls = 0.0, 0, 0
        if window_n:
            self.write(STEP_MS, window_s / window_n * 1e3, step)
        return step

    def epoch(
        self,
        calls: list[tuple[float, int, int, str]],
        first_step: int,
        batch_size: int | None,
        metrics: Mapping[str, float] | None = None,
        figures: Mapping[str, float] | None = None,
        epoch: int | None = None,
    ) -> int:
        """An epoch's step times, p50/p90 and examples/s (`figures`, else from `calls`), and the
        model's `metrics` at step `epoch`. Returns the global step at the epoch's end."""
        end = self.steps(calls, first_step)
        if figures is None:
            figures = epoch_figures(calls, batch_size)
        for key, tag in _EPOCH_TAGS:
            if key in figures:
                self.write(tag, figures[key], end)
        if "step_ms_mean" in figures:  # MFU's step, as examples/s's
            self.epoch_ends.append((end, figures["step_ms_mean"]))
        if metrics:
            self.metrics(metrics, len(self.epoch_ends) - 1 if epoch is None else epoch)
        self.flush()
        return end

    def utilization(self, flops_per_step: float | None, peak_flops: float | None) -> None:
        """``Throughput/mfu_percent`` at each epoch written so far: a line, not a single dot."""
        for step, mean_ms in self.epoch_ends:
            mfu = utilization(flops_per_step, mean_ms / 1e3, peak_flops)["mfu"]
            if mfu is not None:
                self.write(MFU, 100.0 * mfu, step)

    def flush(self) -> None:
        """Appends the points since the last flush to each run's event file (made at the first)."""
        for run, records in self._pending.items():
            if records:
                self._append(run, records)
                self._pending[run] = []

    def _append(self, run: str, records: list[bytes]) -> None:
        path = self.paths.get(run)
        if path is None:
            wall = time.time()
            name = (
                f"events.out.tfevents.{int(wall):010d}.{socket.gethostname()}.{os.getpid()}."
                f"{next(_FILES)}.steptimer"
            )
            directory = os.path.join(self.logdir, run)
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, name)
            # TensorBoard reads a file whose first event names the format's version.
            version = self._event(wall_time=wall, file_version=_VERSION)
            records = [self._record(version), *records]
        with open(path, "ab") as f:  # an OSError leaves the points pending, the file unnamed
            f.write(b"".join(records))
        self.paths[run] = path

    def close(self) -> None:
        """Writes what is pending. (No file handle or thread stays open between flushes.)"""
        self.flush()


_VERSION = "brain.Event:2"
_EPOCH_TAGS = (
    ("step_ms_p50", STEP_P50),
    ("step_ms_p90", STEP_P90),
    ("examples_per_sec", EXAMPLES),
)


def _png_size(png: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or len(png) < 24:
        return (0, 0)
    return struct.unpack(">II", png[16:24])


def masked_crc32c_function() -> Callable[[bytes], int]:
    """TFRecord's masked CRC-32C: ``google-crc32c``'s C code, else TensorBoard's pure Python."""
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
