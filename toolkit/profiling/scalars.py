"""StepTimer's figures as TensorBoard scalars, laid out as Keras's TensorBoard callback lays
out its own, so that a Keras user finds them where they look.

Layout: `logdir` is a run's TensorBoard directory (the recipes' and ``toolkit.profile``'s run
directory), holding Keras's two runs, ``train/`` and ``validation/``; the profiler trace goes
into ``train/`` too (``train/plugins/profile``), as Keras puts it. ``tensorboard --logdir`` on
the parent of many run directories (the recipes' ``--report_dir``) shows every run side by
side: :func:`viewing_hint` is that one command, written the same wherever the toolkit names it.
Given the same ``log_dir`` as ``keras.callbacks.TensorBoard``, StepTimer's points join Keras's
``train`` run.

Tags, each with a description (TensorBoard shows it on the card):

* ``Step time/ms``: ms per step of every timed execution (x: the global training step), or
  the mean of each ``log_steps`` window; an epoch of more than :data:`MAX_POINTS` timed
  executions is written in that many equal windows (TensorBoard keeps 1,000 points per tag
  anyway). Warm-up, the first step and profiler-traced steps are left out, as in the
  statistics. ``Step time/p50_ms`` and ``Step time/p90_ms``: per epoch, at its last step;
* ``Throughput/examples_per_sec`` per epoch, and ``Throughput/mfu_percent`` per epoch when the
  run measured FLOPs and the peak (``toolkit.profile`` writes it at the end);
* ``Ledger/where the time went`` (Images tab): the run's ledger as one stacked bar, written
  when the run ends (``toolkit.profile``);
* ``anatomy`` (Images tab): the traced step taken apart (``anatomy.png``: the slowest layers
  and the step's phases), written when a run with a trace window ends (``toolkit.profile``
  with ``trace_steps``, the recipes' ``--profile_steps``);
* ``memory/host_mb`` (and ``memory/device_mb`` where the backend counts it): the memory
  StepTimer read during the fit, the most at each step it was read at;
* ``memory/host_rss_mb`` and ``memory/device_peak_mb`` at each epoch's end;
* ``epoch_<metric>``: the model's epoch metrics when asked (the recipes' ``--tensorboard``), as
  Keras names them: ``epoch_loss`` in ``train/``, and ``val_loss`` as ``epoch_loss`` in
  ``validation/``, x the epoch (from 0, as Keras counts), so that one card overlays the two.

Why the two headline groups are capitalized: TensorBoard groups cards by the tag's first
``/`` part, sorts the groups with upper case before lower case, and opens only the first two;
``Step time`` and ``Throughput`` are the two, ahead of Keras's ``epoch_*`` and ``memory``.

Why not TensorBoard's ``EventFileWriter``: it hands every event to a writer thread and frames
it there with a pure-Python CRC and a ``tf.io.gfile`` write, CPU that competes with training
on a small machine. Here the events are TensorBoard's own protos (``tensorboard.compat.proto``),
framed as its ``RecordWriter`` frames them (length, masked CRC-32C of the length, data, masked
CRC-32C of the data) with ``google-crc32c``'s C code (the ``[profile]`` extra installs it;
TensorBoard's pure-Python one otherwise), and appended to one ``events.out.tfevents...`` file
per run, in the caller's thread: no TensorFlow op, so it works under every Keras backend.
Nothing is written per step: StepTimer hands over each epoch's recorded steps at the epoch's
end, and they are written then, in one write, at their own global step numbers.
"""

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
    "(every 50 ms by default), the most read at each training step: the ledger's memory.",
    DEVICE_MB: "The device's allocated memory in MiB (the backend's counters, summed over "
    "the process's devices), the most read at each training step.",
}
_METRIC = (
    "The model's `{name}` at each epoch's end, from Keras's epoch logs (x: the epoch, from 0). "
    "The `train` run has it on the training data, `validation` on the validation data."
)

_FILES = itertools.count()  # tells apart the event files one process opens in one second


def viewing_hint(logdir: str | os.PathLike[str]) -> str:
    """The one command that shows the runs under `logdir` in TensorBoard (the Scalars tab and,
    with ``[profile]`` installed, the Profile tab)."""
    return f"tensorboard --logdir {shlex.quote(os.fspath(logdir))}"


def describe(tag: str) -> str:
    """What a tag means, for its card in TensorBoard."""
    if tag in _DESCRIPTIONS:
        return _DESCRIPTIONS[tag]
    return _METRIC.format(name=tag.removeprefix("epoch_"))


class Scalars:
    """Event files in ``logdir/train`` and ``logdir/validation`` that TensorBoard's Scalars tab
    reads, as Keras's TensorBoard callback lays them out.

    Points are kept in memory until :meth:`flush` (StepTimer flushes at each epoch's end) and
    appended then in one write per run; :meth:`close` flushes. A later write after
    :meth:`close` appends to the same files, which TensorBoard reads as the same runs.

    Raises:
        ImportError: TensorBoard is not installed (one line, naming what installs it).
    """

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
        # One event, refilled for every point: building a fresh proto costs ~6x more. A
        # scalar tensor, as tf.summary.scalar writes it: TensorBoard's data server keeps the
        # description of a tensor's metadata, and drops it for an old-style simple_value.
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
        """One scalar at step `step` of `run` (in its file at the next :meth:`flush`); the first
        point of each tag carries the tag's description."""
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
        """The model's epoch metrics as Keras writes them: ``loss`` as ``epoch_loss`` in
        ``train``, ``val_loss`` as ``epoch_loss`` in ``validation``, at step `epoch`."""
        for name, value in values.items():
            if name.startswith("val_"):
                self.write(f"epoch_{name[4:]}", value, epoch, VALIDATION)
            else:
                self.write(f"epoch_{name}", value, epoch)

    def steps(self, calls: Iterable[tuple[float, int, int, str]], first_step: int) -> int:
        """Writes ``Step time/ms`` for the timed ones of `calls` (``(seconds, steps, epoch,
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
        """An epoch's per-step times, its p50/p90 and examples/s (`figures`, as
        :func:`~toolkit.core.stats.epoch_figures` gives them, computed from `calls` when
        not given), and (when given) the model's `metrics` at step `epoch` (the epochs
        written so far when not given). Returns the global step at the epoch's end."""
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
        """``Throughput/mfu_percent`` at each epoch written so far, from its mean step time:
        a line over the run, where one figure at the end would be a single dot."""
        for step, mean_ms in self.epoch_ends:
            mfu = utilization(flops_per_step, mean_ms / 1e3, peak_flops)["mfu"]
            if mfu is not None:
                self.write(MFU, 100.0 * mfu, step)

    def flush(self) -> None:
        """Appends the points written since the last flush to each run's event file (creating
        it, named as TensorBoard names its own, at the first one)."""
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
