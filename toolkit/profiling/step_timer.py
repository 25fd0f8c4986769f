"""StepTimer: per-step wall times of a Keras ``fit`` or of a custom training loop.

It stays out of the way of the step it measures: stamps are taken in ``on_train_batch_begin``,
right before the training function (two begins span one trip of the loop: input, step, callbacks,
what throughput sees). The batch-end hook only records an index and a clock reading, so it is
``async_safe`` (Keras 3 may run it on a worker thread); under tf_keras ``_supports_tf_logs = True``
spares a per-step log conversion (a sync). No hook calls a TensorFlow op or reads a tensor (tested).

Steps under a profiler, or during which one starts or stops, are "excluded", whoever started it
(TraceWindow, ``TensorBoard(profile_batch=...)``, a user's; the backend's ``profiler_probe``, at
every batch begin only where another callback's batch hooks could start one: `_probe_every_begin`);
a profiler *server* capture leaves nothing to read, so its steps stay timed.

Where a step ends (``StepTimer.boundary``, per epoch): on TensorFlow at the next batch *begin*
(Keras reads the logs at each batch end, which waits for the step). JAX and PyTorch dispatch
asynchronously: a begin says when a step was *queued*, a batch end (callback thread) when its
results existed. At each epoch's end the backlog (last begin to last end) decides: small, begins
stay the boundaries; the device behind, the epoch is timed at its ends. Either way steps tile it.

``step_ms_p50`` and ``examples_per_sec`` go into Keras's epoch logs (:data:`LOG_KEYS`) unless
``add_to_logs=False``. With ``steps_per_execution > 1`` the steps per execution come from
consecutive batch indices, so every figure is per step."""

from __future__ import annotations

import bisect
import contextlib
import itertools
import math
import operator
import os
import statistics
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, NamedTuple

from absl import logging

from toolkit.core import compat
from toolkit.core.checks import ConfigError, argument, check_number
from toolkit.core.events import FUSED_STEPS_ATTR, PROFILER
from toolkit.core.stats import (
    COMPILED,
    DEFAULT_WARMUP_STEPS,
    EXCLUDED,
    FIRST,
    SECONDS_OF,
    STEPS_OF,
    TIMED,
    WARMUP,
    StepStats,
    epoch_figures,
    format_ms,
    summarize_calls,
)
from toolkit.profiling._ledger import (
    BETWEEN_STEPS,
    EpochSpan,
    FitLedger,
    dispatcher_of,
    epoch_gaps,
    keras_callbacks,
    on_stack,
    overrides,
)
from toolkit.profiling._ledger_records import Ledger
from toolkit.profiling._memory import EVERY_S
from toolkit.profiling._timing import (
    Epoch,
    FitCall,
    fit_call_parts,
    floats,
    never,
    profiler_probe,
    settled,
    to_stderr,
)
from toolkit.profiling.scalars import Scalars

__all__ = ["StepTimer"]

# StepTimer's batch-end hook while no end is stamped: C-level, so no Python frame, and it takes
# Keras 3's call (batch, logs=logs) and tf_keras's (batch, logs) alike.
_SKIP_END = "".format

# What StepTimer adds to Keras's epoch logs (History, CSVLogger, EarlyStopping read them).
LOG_KEYS = {"step_ms_p50": 3, "examples_per_sec": 1}  # each rounded to these decimals


class StepTimer(compat.keras().callbacks.Callback):
    """Measures per-step training time, with warm-up and the first (tracing) step apart.

    p50/p90/p99, jitter, examples/sec, epoch times; also a custom loop's (``start``/``step``).

    Args:
        warmup_steps: steps after the first execution left out of the statistics (still counted).
        batch_size: examples per step (default: from `data`, and per fit from Keras's data adapter).
        data, clock: a `tf.data.Dataset` to read the batch size from; a function returning seconds.
        log_steps, log_fn: print step time and examples/sec every this many steps (Model Garden's
            ``--log_steps``) to `log_fn` (default stderr: stdout is for results).
        add_to_logs: add ``step_ms_p50`` and ``examples_per_sec`` to Keras's epoch logs.
        tensorboard_dir: write step time, p50/p90 and examples/s as TensorBoard scalars at each
            epoch's end, into this directory's ``train`` run laid out as Keras's TensorBoard's.
        tensorboard_metrics: also write the model's epoch metrics (no Keras TensorBoard callback).
        memory_every_s: read host and device memory this often in a ``fit`` (at batch begins,
            on a thread where none begins for a while, at its boundaries, and at ten batches of
            the first epoch), for the ledger's memory by part; `None`: never. Default clock
            only. At 0.2 s it costs a fit of 0.7 ms steps on one core about 0.1 %.

    Example: ``timer = StepTimer(batch_size=64)``, ``model.fit(ds, callbacks=[timer])``, then
    ``print(timer.summary())``."""

    # Another timer's batch hooks start no profiler (see `_probe_every_begin`).
    starts_untold_profiler = False

    def __init__(
        self,
        warmup_steps: int = DEFAULT_WARMUP_STEPS,
        batch_size: int | None = None,
        data: Any = None,
        clock: Callable[[], float] = time.perf_counter,
        log_steps: int | None = None,
        log_fn: Callable[[str], Any] | None = None,
        add_to_logs: bool = True,
        tensorboard_dir: str | os.PathLike[str] | None = None,
        tensorboard_metrics: bool = False,
        memory_every_s: float | None = EVERY_S,
    ) -> None:
        super().__init__()
        check_number(argument("StepTimer", "memory_every_s"), memory_every_s, least=0.001)
        self.add_to_logs = add_to_logs
        check_number(argument("StepTimer", "log_steps"), log_steps, integer=True, least=1)
        check_number(argument("StepTimer", "warmup_steps"), warmup_steps, integer=True, least=0)
        if warmup_steps is None:
            raise ConfigError("StepTimer: warmup_steps must be an integer >= 0, got None")
        check_number(argument("StepTimer", "batch_size"), batch_size, integer=True, least=1)
        if batch_size is None and data is not None:
            from toolkit.data.builder import infer_batch_size  # tf.data's internals

            batch_size = infer_batch_size(data)
        self.warmup_steps = warmup_steps
        # Examples per step: given or from `data`; per fit, scaled as the first fit relates them.
        self.batch_size = self._batch_size_given = batch_size
        self._batch_reference: tuple[int, int] | None = None  # (examples/step, fit's batch)
        # Each finished fit's executions and batch size, summarized when `fits` is read.
        self._fits: list[StepStats | tuple[list[tuple[float, int, int, str]], int | None]] = []
        self._clock = clock
        self.log_steps = log_steps
        self._log_fn = log_fn or to_stderr
        self._supports_tf_logs = True  # tf_keras: logs stay tensors (no conversion, no sync)
        self.async_safe = True  # Keras 3: the batch-end hook may run on its callback thread
        self.scalars: Scalars | None = None
        if tensorboard_dir is not None:
            self.scalars = Scalars(tensorboard_dir, log_steps=log_steps)
        self.tensorboard_metrics = tensorboard_metrics
        self.global_step = 0  # steps written to TensorBoard so far, across fits
        # (called, returned) of the last fit timed by `around_fit`; kept across reset().
        self._fit_span: tuple[float | None, float | None] = (None, None)
        # Callback lists of fits begun while this timer timed another: left untimed.
        self._foreign: set[int | None] = set()
        self._said_second = False
        self._ledger = FitLedger(clock)  # the whole fit's parts (``toolkit.profiling._ledger``)
        self._ledger.memory_every_s = memory_every_s
        self._ledger.steps_begun = self._steps_begun
        self.reset()

    def reset(self) -> None:
        """Forgets everything measured so far, earlier fits' statistics (:attr:`fits`) too."""
        self._fits = []
        self._new_fit()

    def _new_fit(self) -> None:
        """Starts a new fit's (or custom loop's) statistics; earlier fits' stay in :attr:`fits`."""
        # One tuple per execution: (duration_s, steps, epoch, kind); read through `calls`.
        self._calls: list[tuple[float, int, int, str]] = []
        self.epochs: list[Epoch] = []
        self.last_logs: dict[str, float] = {}
        self.train_begin_time: float | None = None
        self.first_begin_time: float | None = None  # the fit's first batch begin
        self.train_end_time: float | None = None
        self._warmup_left = self.warmup_steps
        self._seen_first = False
        self._epoch = 0
        # This epoch's batch begins: (batch, time, profiler running, profiler start/stop count),
        # made `calls` at its boundaries; `_drained` of them so far, the last one open (`_open`).
        self._begins: list[tuple[int, float, bool, int]] = []
        self._drained = 0
        self._open: tuple[int, float, bool, int] | None = None
        self._open_time, self._open_trace = 0.0, (False, 0)  # a custom loop's open step
        self._prev_gap = 0  # steps between the last two begins in this epoch
        self._spe = 1
        self._fused = 1  # training steps per Keras batch (see the backend's fuse_train_steps)
        self._epoch_start, self._epoch_calls_start = 0.0, 0
        self._end_marks: list[tuple[Any, ...]] = []  # (batch, time[, profiler state])
        self._compiles_seen = 0  # of the ledger's compile watch's events, those placed
        # The next memory reading at a batch begin: at this time or this batch, whichever first.
        self._memory_due = self._memory_batch = math.inf
        # Sync backends with a known step count stamp only the epoch's last end (`_at_due`).
        self._last_end_only = False
        self._ends_from = math.inf  # the batch from which ends are stamped again
        self._due_batch = math.inf  # the begin hook's one batch check: the earlier of the two
        self._boundary_time: float | None = None
        self._running = False
        self._fit_list: tuple[int, weakref.ref[Any]] | None = None  # (thread, its CallbackList)
        self._log_steps_done = 0  # steps finished in this fit
        self._steps_base = 0  # training steps in this fit's finished epochs (memory readings)
        self._begins_counted = 0  # of this epoch's begins, those in `_steps_base`
        self._log_mark = (0, 0.0)  # (steps, seconds) at the last log line
        self._ends_log: EndsLog | None = None  # log_steps' lines on an asynchronous backend
        # Asynchronous backends: where steps end, and the state to re-time this epoch from.
        self.boundary = "begin"
        self._async = False
        self._epoch_state: tuple[Any, ...] = (self.warmup_steps, False)
        self._quiet = False
        self._probe: Callable[[], bool] = never  # set per fit: is any profiler running?
        # Whether every batch begin asks `_probe` (see `_probe_every_begin`), or only each
        # epoch's first, the rest reading its answer (`_traced`); `_probe_now`: this begin asks.
        self._probe_steps = self._probe_now = True
        self._traced = False
        self._scalars_done = 0  # calls already written to TensorBoard
        self._steady = False  # first step and warm-up done, nothing to log: the fast path
        self._fit_kept = False  # this fit's statistics are in `fits`
        vars(self).pop("on_train_batch_begin", None)  # the per-fit hooks (see on_train_begin)
        vars(self).pop("on_train_batch_end", None)

    def _mark(self) -> tuple[bool, int]:
        """The profiler's state now: (a trace is running, the toolkit's start/stop count)."""
        return (PROFILER.active or self._probe(), PROFILER.generation)

    def _record(
        self,
        duration: float,
        steps: int,
        trace_mark: tuple[bool, int],
        end_mark: tuple[bool, int] | None = None,
    ) -> None:
        """Records an execution; marks: the profiler's (active, generation) at begin, end (now)."""
        was_active, generation = trace_mark
        now_active, now_generation = end_mark or self._mark()
        tainted = was_active or now_active or generation != now_generation
        if not self._seen_first:
            kind = FIRST
            self._seen_first = True
        elif self._warmup_left > 0:
            kind = WARMUP
            self._warmup_left -= steps
        elif tainted:
            kind = EXCLUDED
        else:
            kind = TIMED
        self._calls.append((duration, steps, self._epoch, kind))
        # From here on a plain timed step needs none of this (`_drain`'s fast path).
        self._steady = self._warmup_left <= 0 and not self.log_steps and not self._quiet
        if self._quiet:
            return
        if kind == FIRST:
            self._log_steps_done = steps
        elif self.log_steps and self._ends_log is None:
            self._log(duration, steps)

    def _log(self, duration: float, steps: int) -> None:
        """Prints once `log_steps` steps after the first execution have gathered."""
        self._log_steps_done += steps
        count, seconds = self._log_mark
        count, seconds = count + steps, seconds + duration
        if count < self.log_steps:
            self._log_mark = (count, seconds)
            return
        self._log_mark = (0, 0.0)
        rate = f", {self.batch_size * count / seconds:,.1f} examples/s" if self.batch_size else ""
        self._log_fn(
            f"step {self._log_steps_done}: {format_ms(seconds / count)}/step "
            f"over the last {count} steps{rate}"
        )

    def _close_last_in_epoch(self, now: float) -> None:
        """Closes the epoch's last execution at epoch or train end: Keras 3 flushes its batch-end
        thread before those hooks (not ``on_test_begin``), so the finished count is complete."""
        self._note_first_begin()
        self._drain()
        if self._open is None:
            return
        begin, begin_time, active, generation = self._open
        self._open = None
        boundary = self._boundary_time if self._boundary_time is not None else now
        self._boundary_time = None
        marks = list(self._end_marks)
        ends_after = [m[1] for m in marks if m[0] >= begin]
        if not ends_after and len(marks) < len(self._begins) and not self._unstamped():
            # Begun but never finished (a dataset's end-of-data probe, or a raise): nothing to time.
            return
        end = min([boundary, *ends_after])
        spe = max(self._spe, self._prev_gap)
        steps_in_epoch = (self.params or {}).get("steps")
        steps = min(spe, steps_in_epoch - begin) if steps_in_epoch else spe
        self._record(end - begin_time, max(1, steps) * self._fused, (active, generation))

    def _unstamped(self) -> bool:
        """Whether the last begin's end went unstamped (`_SKIP_END`): its step ran (the data
        fed every begin, :class:`FitInput`) and the epoch ended early, as when a callback sets
        ``stop_training``; its end is the epoch's boundary."""
        return vars(self).get("on_train_batch_end") is _SKIP_END

    def _steps_begun(self) -> int:
        """Training steps begun in this fit so far (read by the memory thread: a count)."""
        begun = len(self._begins) - self._begins_counted
        return self._steps_base + max(0, begun) * self._spe * self._fused

    def _note_first_begin(self) -> None:  # the first epoch's begins go at its end
        if self.first_begin_time is None and self._begins:
            self.first_begin_time = self._begins[0][1]

    def _drain(self) -> None:
        """Turns new batch begins into executions: each ends the one the previous begin opened."""
        begins = self._begins
        done = self._drained
        if done >= len(begins):
            return
        prev, calls, epoch, fused = self._open, self._calls, self._epoch, self._fused
        if self._steady and prev is not None and self._drain_steady(begins[done:]):
            return
        was_steady = self._steady
        try:
            for cur in begins[done:]:
                # Consumed before recorded: an interrupt loses a step, never records one twice.
                last, prev, done = prev, cur, done + 1
                if last is None:
                    continue
                gap = cur[0] - last[0]
                if gap > 0:
                    self._prev_gap = gap
                    # Timed: no profiler at either end, and none started or stopped between.
                    if self._steady and not (last[2] or cur[2]) and last[3] == cur[3]:
                        calls.append((cur[1] - last[1], gap * fused, epoch, TIMED))
                    else:
                        self._record(
                            cur[1] - last[1], gap * fused, (last[2], last[3]), (cur[2], cur[3])
                        )
                if self._steady and not was_steady:
                    break  # the warm-up just ended: the rest of the epoch goes the fast way
        finally:
            self._open, self._drained = prev, done
        if self._steady and not was_steady:
            self._drain()

    def _drain_steady(self, chunk: list[tuple[int, float, bool, int]]) -> bool:
        """`_drain`'s common case in C-level passes (``zip``, ``map``): no profiler at any begin and
        none started or stopped since. False, with nothing recorded, otherwise."""
        opened = self._open
        batches, times, active, generations = zip(opened, *chunk, strict=True)
        gaps = list(map(operator.sub, batches[1:], batches[:-1]))
        if any(active) or generations.count(opened[3]) != len(generations) or min(gaps) <= 0:
            return False
        # The drain's place moves first: an interrupt loses executions, never records one twice.
        self._open, self._drained, self._prev_gap = chunk[-1], len(self._begins), gaps[-1]
        self._calls.extend(
            zip(
                map(operator.sub, times[1:], times[:-1]),
                map(operator.mul, gaps, itertools.repeat(self._fused)),
                itertools.repeat(self._epoch),
                itertools.repeat(TIMED),
            )
        )
        return True

    def _retime_at_ends(self) -> None:
        """Async backends: re-times the closed epoch at its batch ends if the device was behind."""
        self.boundary = "begin"
        begins, marks = self._begins, sorted(self._end_marks[:])
        calls = self._calls[self._epoch_calls_start :]
        if len(begins) < 2 or len(calls) != len(begins) or not marks:
            return
        intervals = [b[1] - a[1] for a, b in itertools.pairwise(begins)][1:]
        backlog = max(m[1] for m in marks) - begins[-1][1]
        if not _device_behind(backlog, intervals, begins, marks):
            return  # the host was the bottleneck: its begins are the boundaries
        stamps: list[tuple[float, tuple[bool, int]]] = []
        edges = sorted(PROFILER.synced.items())  # the trace edges that waited for the device
        for k, (batch, *_) in enumerate(begins):
            following = begins[k + 1] if k + 1 < len(begins) else None
            mine = [
                m for m in marks if m[0] >= batch and (following is None or m[0] < following[0])
            ]
            if not mine:
                return  # an execution without its end: keep the begins
            end = max(mine, key=lambda m: m[1])
            stamps.append(settled(end, following, edges, self._clock is time.perf_counter))
        for k in range(len(stamps) - 2, -1, -1):  # a step ends no later than any later one
            if stamps[k + 1][0] < stamps[k][0]:
                stamps[k] = stamps[k + 1]
        bounds = _spread_ties([b[1] for b in begins], [s[0] for s in stamps])
        self._warmup_left, self._seen_first = self._epoch_state
        del self._calls[self._epoch_calls_start :]
        self._quiet = True
        try:
            start, start_trace = begins[0][1], (begins[0][2], begins[0][3])
            for call, end, (_, end_trace) in zip(calls, bounds, stamps, strict=True):
                self._record(end - start, call[1], start_trace, end_trace)
                start, start_trace = end, end_trace
        finally:
            self._quiet = False
        self.boundary = "end"

    def set_params(self, params: Mapping[str, Any]) -> None:
        if self._busy():  # another fit's callback list, while this timer times one
            return
        self.params = dict(params or {})

    def set_model(self, model: Any) -> None:
        if self._busy():  # another fit's callback list (see on_train_begin)
            return
        super().set_model(model)

    def _busy(self) -> bool:
        """Whether this timer times a fit now. A fit that raised never reached its train end:
        once its callback list runs nothing on the thread it ran on, it is over (its steps are
        kept at the next train begin), and the next fit is timed, not refused as a second."""
        if self._running and self._fit_list is not None:
            thread, ref = self._fit_list
            owner = ref()
            if thread == threading.get_ident() and (owner is None or not on_stack(owner)):
                self._running, self._fit_list = False, None
                self._ledger.finish()
        return self._running

    def _second_fit(self) -> bool:
        """At train begin: a fit began while this timer times another. Left untimed, said once:
        mixing two fits' steps would make both wrong, and raising would stop the user's training."""
        if not self._busy():
            return False
        self._foreign.add(self._caller_list())
        if not self._said_second:
            self._said_second = True
            logging.warning(
                "StepTimer: a second fit began while this timer times another (a fit inside "
                "a callback, or one on another thread); it is not timed: give each fit its "
                "own StepTimer"
            )
        return True

    def _caller_list(self) -> int | None:
        found = keras_callbacks(self)
        return id(found) if found is not None else None

    def _not_mine(self) -> bool:
        """Whether the hook being called is a second fit's (only asked while one runs)."""
        return self._caller_list() in self._foreign

    def on_train_begin(self, logs: compat.Logs = None) -> None:
        if self._second_fit():
            return
        if not self._fit_kept and self.calls:  # a fit that raised: keep what it measured
            self._fits.append((self.calls, self.batch_size))
        self._new_fit()
        self._running = True
        dispatcher = dispatcher_of(self)
        if dispatcher is not None:  # (not found: a later fit on this thread is a second one)
            self._fit_list = (threading.get_ident(), weakref.ref(dispatcher))
        model = getattr(self, "model", None)
        self._spe = compat.steps_per_execution(model)
        self._fused = max(1, int(getattr(model, FUSED_STEPS_ATTR, 1) or 1))
        size, adapter, fed = fit_input(model)
        self.batch_size = self._per_step(size)
        self._async = _asynchronous()
        self._probe = profiler_probe()
        listed = None if dispatcher is None else dispatcher.callbacks
        self._probe_steps = _probe_every_begin(self, listed)
        self._ends_log = None
        if self.log_steps and self._async:  # the lines come as the steps end (the device's)
            steps = (self.params or {}).get("steps")
            self._ends_log = EndsLog(self, self._spe, steps)
        elif self.log_steps:  # its lines come as the steps do: each begin is drained at once
            self.on_train_batch_begin = self._begin_and_drain
        self.train_begin_time = self._clock()
        self._ledger.begin(self, model, self.train_begin_time)
        self._ledger.adapter = adapter
        self._memory_due = self.train_begin_time  # the first batch begin reads
        # Where steps don't overlap the host (TensorFlow) the begins are the boundaries, and
        # where the data feeds every begun step (Keras 3, `FitInput.fed`) each begin has its end:
        # only the epoch's last end is stamped; skipping the hook until then saves 2-3 µs a
        # step inside a fit (issue 77). Not where the input is the gap from each step's end to
        # the next begin (PyTorch's loop reads its batches there: `epoch_gaps`).
        between = getattr(self._ledger.watch, "input_seen", "") == "between"
        self._last_end_only = (
            fed and not self._async and not between and bool((self.params or {}).get("steps"))
        )

    def on_epoch_begin(self, epoch: int, logs: compat.Logs = None) -> None:
        if self._foreign and self._not_mine():
            return
        self._epoch = epoch
        self._epoch_start = self._clock()
        self._epoch_calls_start = len(self._calls)
        self._prev_gap = 0
        self._end_marks = []
        self._boundary_time = None
        self._open = None
        self._begins = []
        self._begins_counted = 0
        self._drained = 0
        self._epoch_state = (self._warmup_left, self._seen_first)
        if self._last_end_only:
            self.on_train_batch_end = _SKIP_END
            self._ends_from = (self.params or {}).get("steps", 1) - max(1, self._spe)
            self._due_batch = min(self._memory_batch, self._ends_from)
        self._probe_now, self._traced = True, False
        if not self._probe_steps:
            self._due_batch = -math.inf  # the epoch's first begin probes (`_at_due`)
        self._ledger.epoch_begin(epoch)

    def on_train_batch_begin(self, batch: int, logs: compat.Logs = None) -> None:
        # The hottest code: a clock read, the profiler's state, an append; the rest waits (_drain).
        if self._foreign and self._not_mine():
            return
        now = self._clock()
        traced = PROFILER.active or self._traced or (self._probe_now and self._probe())
        self._begins.append((batch, now, traced, PROFILER.generation))
        if now >= self._memory_due or batch >= self._due_batch:
            self._at_due(now, batch)

    def _at_due(self, now: float, batch: int) -> None:
        """A begin with work due: a memory reading, the epoch's last execution, whose end is
        stamped (the hook back from `_SKIP_END`), or the epoch's first begin, whose probe of
        a profiler nobody told the toolkit of holds for the epoch's other begins."""
        if self._probe_now and not self._probe_steps:
            self._probe_now = False
            # The toolkit's own trace (PROFILER) is read at every begin; the probe sees it too.
            self._traced = not PROFILER.active and bool(self._probe())
        if batch >= self._ends_from:
            vars(self).pop("on_train_batch_end", None)
            self._ends_from = math.inf
        if now >= self._memory_due or batch >= self._memory_batch:
            steps = (self.params or {}).get("steps")
            self._memory_due, self._memory_batch = self._ledger.memory_due(now, batch, steps)
        self._due_batch = min(self._memory_batch, self._ends_from)

    def _begin_and_drain(self, batch: int, logs: compat.Logs = None) -> None:
        """The begin hook with ``log_steps``: each step is recorded as it ends."""
        StepTimer.on_train_batch_begin(self, batch, logs)
        self._drain()

    def on_train_batch_end(self, batch: int, logs: compat.Logs = None) -> None:
        if self._foreign and self._not_mine():
            return
        # Maybe on Keras 3's callback thread: append only (atomic); profiler state for re-timing.
        if self._async:
            self._end_marks.append(
                (batch, self._clock(), PROFILER.active or self._probe(), PROFILER.generation)
            )
            if self._ends_log is not None:
                self._ends_log.ended(batch)
        else:
            self._end_marks.append((batch, self._clock()))

    def on_test_begin(self, logs: compat.Logs = None) -> None:
        if self._foreign and self._not_mine():
            return
        if not self._running:  # validation inside fit: the epoch's last step ended before this
            return
        now = self._clock()
        if self._begins and self._boundary_time is None:
            self._boundary_time = now
        self._ledger.test_begin(now)

    def on_test_batch_begin(self, batch: int, logs: compat.Logs = None) -> None:
        if self._foreign and self._not_mine():
            return
        if self._running:  # the ledger's validation executions (a clock read and an append)
            now = self._clock()
            self._ledger.test_batch(batch, now)
            if now >= self._memory_due:  # by time only (the batches are the validation's)
                self._memory_due = self._ledger.memory_due(now, -1, None)[0]

    def on_test_end(self, logs: compat.Logs = None) -> None:
        if self._foreign and self._not_mine():
            return
        if self._running:
            self._ledger.test_end(self._clock())

    def on_epoch_end(self, epoch: int, logs: compat.Logs = None) -> None:
        if self._foreign and self._not_mine():
            return
        now = self._clock()
        self._close_last_in_epoch(now)
        if self._async:
            self._retime_at_ends()
        self._mark_compiled()
        calls = self._calls[self._epoch_calls_start :]
        metrics = floats(logs)  # the model's: read before ours are added
        self.last_logs = metrics
        figures = None  # one sort for the logs and the scalars, none when neither is on
        if self.add_to_logs or self.scalars is not None:
            figures = epoch_figures(calls, self.batch_size)
        if self.add_to_logs and isinstance(logs, MutableMapping):
            logs.update({k: round(figures[k], LOG_KEYS[k]) for k in LOG_KEYS if k in figures})
        self._write_scalars(metrics, figures, epoch)
        # One pass each, in C (`map`): generators cost a third of the epoch end.
        steps, seconds = sum(map(STEPS_OF, calls)), sum(map(SECONDS_OF, calls))
        self._ledger_epoch(epoch, seconds, now)
        self._steps_base += steps
        self._begins_counted = len(self._begins)
        self.epochs.append(Epoch(epoch, now - self._epoch_start, steps, seconds, metrics))

    def _mark_compiled(self) -> None:
        """Timed executions in which the backend compiled the train function again (a new input
        shape, e.g. JAX's ragged last batch) become ``compiled``: counted, not timed. Placed by
        each compile's clock stamp; one known only from a counter has no step (the ledger's)."""
        events = getattr(self._ledger.watch, "events", None) or []
        fresh, self._compiles_seen = events[self._compiles_seen :], len(events)
        stamps = [e.at for e in fresh if e.at is not None and e.function == "train"]
        start, calls = self._epoch_calls_start, self._calls
        if not stamps or len(calls) == start:
            return
        begins = [b[1] for b in self._begins[: len(calls) - start]]  # one per execution
        for at in stamps:
            k = bisect.bisect_right(begins, at) - 1
            if k >= 0 and calls[start + k][3] == TIMED:
                calls[start + k] = (*calls[start + k][:3], COMPILED)

    def _epoch_span(self, seconds: float) -> tuple[Any, Any]:
        """The epoch's first batch begin and the end of its last recorded execution."""
        if not self._begins:
            return None, None
        first = self._begins[0][1]
        return first, first + seconds

    def _ledger_epoch(self, epoch: int, seconds: float, now: float) -> None:
        first, steps_end = self._epoch_span(seconds)
        watch = self._ledger.watch
        between = getattr(watch, "input_seen", "") == "between"
        gaps = epoch_gaps(self._begins, self._end_marks) if between else []
        self._ledger.epoch_end(epoch, self._epoch_start, first, steps_end, now, gaps)

    def _write_scalars(
        self,
        metrics: Mapping[str, float] | None = None,
        figures: Mapping[str, float] | None = None,
        epoch: int | None = None,
    ) -> None:
        """Writes calls since the last write to TensorBoard; a failing writer is dropped, warned."""
        if self.scalars is None:
            return
        calls = self._calls[self._scalars_done :]
        self._scalars_done = len(self._calls)
        try:
            self.global_step = self.scalars.epoch(
                calls,
                self.global_step,
                self.batch_size,
                metrics if self.tensorboard_metrics else None,
                figures,
                epoch,
            )
        except Exception as e:  # noqa: BLE001 - a full disk must not stop training
            logging.warning("StepTimer: TensorBoard scalars stopped: %s: %s", type(e).__name__, e)
            self.scalars = None

    def on_train_end(self, logs: compat.Logs = None) -> None:
        if self._foreign and self._not_mine():
            self._foreign.discard(self._caller_list())
            return
        now = self._clock()
        self._close_last_in_epoch(now)
        if self._scalars_done < len(self._calls):  # a fit stopped inside an epoch
            self._write_scalars()  # (each write ends in the file: nothing is left open)
        self.train_end_time = now
        self._running = False
        self._ledger.end(now)
        if logs:
            model = {k: v for k, v in floats(logs).items() if k not in LOG_KEYS}
            self.last_logs = {**self.last_logs, **model}
        self._fits.append((self.calls, self.batch_size))
        self._fit_kept = True
        sampler = self._ledger.sampler
        if sampler is not None and sampler.rising():
            # What holds the growth is named now, while it is alive; the ledger keeps the names.
            with contextlib.suppress(Exception):  # a view: never fails the fit
                self.ledger()

    def _per_step(self, read: int | None) -> int | None:
        """Examples per step from `read` (one Keras batch's; None: unknown), scaled as the first fit
        that knew it related it to the given batch size (a global batch's slice, fused steps)."""
        given = self._batch_size_given
        if read is None or read < 1:
            return given
        if self._batch_reference is None:
            per_step = given or (read // self._fused if read % self._fused == 0 else read)
            self._batch_reference = (per_step, read)
        per_step, first = self._batch_reference
        scaled, left = divmod(per_step * read, first)
        return scaled if not left and scaled >= 1 else given

    def start(self) -> StepTimer:
        """Starts timing a custom loop; the next :meth:`step` ends the first step."""
        self._new_fit()
        self._running = True
        self._probe = profiler_probe()
        self.train_begin_time = self._open_time = self._epoch_start = self._clock()
        self._open_trace = self._mark()
        return self

    def step(self, steps: int = 1) -> None:
        """Marks the end of ``steps`` training steps done since the previous mark."""
        now = self._clock()
        if not self._running:
            raise RuntimeError("StepTimer.step() called before start(); use `with timer:`")
        self._record(now - self._open_time, steps, self._open_trace)
        self._open_time = now
        self._open_trace = self._mark()

    def stop(self) -> None:
        """Stops timing a custom loop. Time after the last :meth:`step` is not counted."""
        self._ledger.finish()
        if self._running:
            self.train_end_time = self._clock()
            self._running = False
            self._write_scalars()

    def __enter__(self) -> StepTimer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def calls(self) -> list[tuple[float, int, int, str]]:
        """One ``(duration_s, steps, epoch, kind)`` per finished execution. Read during a fit, it
        records the steps begun so far (a fit that raised keeps the steps it finished)."""
        self._drain()
        return self._calls

    @property
    def measured_s(self) -> float:
        """Seconds of every recorded execution after the first (warm-up included)."""
        return sum(c[0] for c in self.calls if c[3] != FIRST)

    @property
    def fit_seconds(self) -> float | None:
        """Wall time from train begin to train end (or to now while running)."""
        if self.train_begin_time is None:
            return None
        end = self.train_end_time if self.train_end_time is not None else self._clock()
        return end - self.train_begin_time

    @contextlib.contextmanager
    def around_fit(self) -> Iterator[StepTimer]:
        """Times the ``fit`` call it wraps (raising or not) for :meth:`fit_call`."""
        self._fit_span = (self._clock(), None)
        try:
            yield self
        finally:
            self._fit_span = (self._fit_span[0], self._clock())
            self._ledger.finish()  # a fit that raised never reached train end

    @property
    def fit_span(self) -> tuple[float, float] | None:
        """``(called, returned)`` of the last fit :meth:`around_fit` timed; None: none yet."""
        called, returned = self._fit_span
        return None if called is None or returned is None else (called, returned)

    def fit_call(self) -> FitCall | None:
        """The last fit's call: start-up, steps and exit (if :meth:`around_fit` timed it)."""
        if not getattr(self, "params", None):  # a custom loop: no fit (Keras sets params)
            return None
        self._note_first_begin()
        begin, end = self.train_begin_time, self.train_end_time
        return fit_call_parts(begin, self.first_begin_time, end, *self._fit_span)

    def ledger(self) -> Ledger | None:
        """The last fit's ledger (see ``_ledger``), partial if it raised; None: a custom loop."""
        if not getattr(self, "params", None):
            return None
        calls = self.calls
        current: EpochSpan | None = None
        if self._ledger.train_end is None and self._begins:  # stopped inside an epoch
            done = {e.epoch for e in self._ledger.epochs}
            if self._epoch not in done and self._begins:
                mine = [c for c in calls if c[2] == self._epoch]
                first, steps_end = self._epoch_span(sum(map(SECONDS_OF, mine)))
                current = EpochSpan(self._epoch, self._epoch_start, first, steps_end)
        return self._ledger.result(calls, self._fit_span, current, self.params, self._clock())

    @property
    def fits(self) -> list[StepStats]:
        """Each finished fit's statistics, oldest first (:meth:`summary` is the last fit's).
        Summarized when first read, not at train end: sorting a fit's thousands of steps there
        cost every fit 0.8 ms (0.05 % of a 1,500-step one, issue 77) whether read or not."""
        for k, kept in enumerate(self._fits):
            if not isinstance(kept, StepStats):
                self._fits[k] = summarize_calls(*kept)
        return self._fits

    def summary(self) -> StepStats:
        """The step statistics of everything recorded so far."""
        return summarize_calls(self.calls, self.batch_size)


class EndsLog:
    """``log_steps``' lines on an asynchronous backend: a window of steps takes the longer of its
    ends' and its begins' span (device behind: a begin says only when a step was queued; host
    behind: callback threads stamp ends late and bunched). Keras hands the ends to a thread pool,
    in any order: an end is matched to the execution whose begin it follows, and executions count
    in begin order once all before have ended. One lock, with the clock read under it, keeps the
    windows in order."""

    def __init__(self, timer: StepTimer, spe: int, steps_in_epoch: int | None) -> None:
        import threading

        self._timer, self._spe, self._steps = timer, spe, steps_in_epoch
        self._lock = threading.Lock()
        self._epoch: int | None = None
        self._start: float | None = None
        self._first = 0  # the batch index the open window began at
        self._last = -1  # the last batch index of the executions counted so far
        self._next = 0  # the begin (its index in the epoch's begins) of the next to count
        self._ended: dict[int, int] = {}  # begin index -> its last batch, ended, not counted
        self._end_step = False  # Keras passes an execution's last step (3.x), not its first
        self._count = 0
        self._done = 0  # steps counted in this fit

    def _begins_span(self, first: int, last: int) -> float:
        """The begins' span of batches `first`..`last`; 0 if the next has not begun (lagging)."""
        begins = list(self._timer._begins)
        start = next((b[1] for b in begins if b[0] == first), None)
        end = next((b[1] for b in begins if b[0] > last), None)
        return end - start if start is not None and end is not None else 0.0

    def _steps_of(self, begin: int, last: int) -> int:
        """Steps of the execution begun at `begin` whose end said `last` (Keras 3: its last)."""
        if last > begin:
            self._end_step = True
            return last - begin + 1
        if self._end_step or self._spe == 1:
            return 1
        return max(1, min(self._spe, self._steps - begin)) if self._steps else self._spe

    def ended(self, batch: int) -> None:
        timer = self._timer
        with self._lock:
            now = timer._clock()
            if self._epoch != timer._epoch:
                first = self._epoch is None
                self._epoch, self._count, self._first, self._last = timer._epoch, 0, 0, -1
                self._next, self._ended = 0, {}
                begins = timer._begins
                self._start = None if first or not begins else begins[0][1]
            # Read in place (a copy per end is quadratic); the fit's thread only appends.
            begins = timer._begins
            k = bisect.bisect_right(begins, batch, key=operator.itemgetter(0)) - 1
            self._ended[max(k, self._next)] = batch
            while self._next in self._ended:  # every execution before it has ended
                last = self._ended.pop(self._next)
                begin = begins[self._next][0] if self._next < len(begins) else last
                self._next += 1
                self._count_execution(now, begin, last)

    def _count_execution(self, now: float, begin: int, last: int) -> None:
        """Counts one execution, in order, and says a line when the window is full."""
        timer = self._timer
        steps = self._steps_of(begin, last) * timer._fused
        self._done += steps
        self._last = max(self._last, last)
        if self._start is None:  # the fit's first execution: it opens the first window
            self._start, self._first = now, self._last + 1
            return
        self._count += steps
        if self._count < (timer.log_steps or 1):
            return
        seconds = max(now - self._start, self._begins_span(self._first, self._last))
        count = self._count
        self._start, self._count, self._first = now, 0, self._last + 1
        per_s = timer.batch_size * count / seconds if timer.batch_size and seconds > 0 else 0
        rate = f", {per_s:,.1f} examples/s" if per_s else ""
        timer._log_fn(  # under the lock: the lines come in their steps' order
            f"step {self._done}: {format_ms(seconds / count)}/step over the last {count} "
            f"steps{rate}"
        )


# Below this a backlog is the callback thread's lateness (Python's switch interval), unless spread.
BACKLOG_FLOOR_S = 0.02
# The share of time over which the ends must spread for the device to have been behind.
SPREAD_SHARE = 0.2


def _probe_every_begin(timer: StepTimer, callbacks: list[Any] | None) -> bool:
    """Whether each batch begin of this fit asks the backend's profiler probe, rather than each
    epoch's first. Between two steps of a fit Keras runs nothing of the user's but callbacks'
    batch hooks: where none beside the timer has one that could start or stop a profiler
    without counting it in ``PROFILER`` (Keras's progress bar cannot; the toolkit's callbacks
    say so with ``starts_untold_profiler = False``), a profiler changes state only at an epoch,
    validation or fit boundary, and a probe at each epoch's first begin sees it. The probe reads
    the framework's state, cold inside a fit: 1.1-1.4 µs of a step's 3 µs in the timer's begin
    hook (issue 77). Not seen then: a profiler started and stopped mid-epoch by another thread
    or by a PyTorch ``train_step`` (a profiler *server*'s capture is never seen). Unknown
    callbacks (`callbacks` None): every begin."""
    if callbacks is None:
        return True
    progbar = compat.keras().callbacks.ProgbarLogger
    for cb in callbacks:
        if cb is timer or type(cb) is progbar or not getattr(cb, "starts_untold_profiler", True):
            continue
        if any(overrides(cb, hook) for hook in BETWEEN_STEPS):
            return True
    return False


def _device_behind(
    backlog: float, intervals: list[float], begins: list[Any], marks: list[Any]
) -> bool:
    """Whether the device ran behind the host this epoch: a backlog past twice the median begin
    interval, ends spread out as a queue runs out (bunched: a busy host held Keras's callback
    threads back). Too few ends to tell: a backlog past :data:`BACKLOG_FLOOR_S`."""
    if backlog <= 2 * statistics.median(intervals or [0.0]):
        return False
    later = [m[1] for m in marks if len(begins) > 1 and m[0] >= begins[1][0]]
    if len(later) < 2:
        return backlog > BACKLOG_FLOOR_S
    whole = max(later) - begins[1][1]
    return whole > 0 and max(later) - min(later) > SPREAD_SHARE * whole


def _spread_ties(begins: list[float], stamps: list[float]) -> list[float]:
    """Each execution's end when the device was behind: its (non-decreasing) end stamp, not before
    the next begin. Keras 3's callback threads stamp late and out of order, so executions sharing
    an end split its span evenly (the device runs steps in turn); the total stays the stamps'."""
    bounds, start = [], begins[0]
    for k, stamp in enumerate(stamps):
        start = max(stamp, start, begins[k + 1] if k + 1 < len(begins) else stamp)
        bounds.append(start)
    k = 0
    while k < len(bounds):
        last = k
        while last + 1 < len(bounds) and bounds[last + 1] <= bounds[k]:
            last += 1
        if last > k:  # executions k..last ended together: share (bounds[k-1], bounds[k]]
            low = bounds[k - 1] if k else begins[0]
            share = (bounds[k] - low) / (last - k + 1)
            for j in range(k, last + 1):
                floor = begins[j + 1] if j + 1 < len(begins) else low
                bounds[j] = max(low + share * (j - k + 1), floor)
        k = last + 1
    return bounds


class FitInput(NamedTuple):
    """What the running ``fit`` reads: Keras hands callbacks none of it."""

    batch_size: int | None  # examples in one batch
    adapter: str | None  # the data adapter's class
    # Keras 3 knows the data's length (or it is endless): no step begins that the data cannot
    # feed, so every begin is followed by its end (tf_keras and unknown lengths probe the data).
    fed: bool = False


def fit_input(model: Any) -> FitInput:
    """The running ``fit``'s input (:class:`FitInput`), read from ``fit``'s frame's epoch
    iterator, once per fit; all None where there is none."""
    import sys

    frame, hops = sys._getframe(1), 0
    while frame is not None and hops < 16:
        if frame.f_code.co_name == "fit" and frame.f_locals.get("self") is model:
            break
        frame, hops = frame.f_back, hops + 1
    else:
        return FitInput(None, None)
    if frame is None:
        return FitInput(None, None)
    found = frame.f_locals
    epochs = found.get("epoch_iterator")
    adapter = getattr(epochs, "data_adapter", None)
    name = type(adapter).__name__ if adapter is not None else None
    try:
        size = getattr(adapter, "batch_size", None)
    except Exception:  # noqa: BLE001 - a hint for examples/s, never a failed fit
        size = None
    if not isinstance(size, int):
        data = getattr(adapter, "_dataset", None)
        data = data if data is not None else found.get("x")
        if getattr(data, "element_spec", None) is not None or isinstance(
            getattr(data, "batch_size", None), int
        ):
            from toolkit.data.builder import infer_batch_size

            size = infer_batch_size(data)
    size = size if isinstance(size, int) and not isinstance(size, bool) else None
    return FitInput(size, name, _fed(epochs, adapter))


def _fed(epochs: Any, adapter: Any) -> bool:
    """Whether Keras 3's epoch iterator knows the data's length, or the data is endless."""
    if epochs is None or compat.keras_flavor() != "keras3":
        return False
    known = getattr(epochs, "_num_batches", None)
    if isinstance(known, int) and known > 0:
        return True
    try:  # tf.data: -1 is endless (Keras reads it as unknown, as it does -2)
        return int(adapter._dataset.cardinality()) == -1
    except Exception:  # noqa: BLE001 - not a tf.data input: unknown
        return False


def _asynchronous() -> bool:
    """Whether Keras's backend queues steps ahead of the device (Keras 3 on JAX or PyTorch)."""
    from toolkit import backend

    seam = backend.find()  # None: a Keras backend the toolkit does not measure on (numpy)
    return (
        compat.keras_flavor() == "keras3" and seam is not None and seam.dispatches_asynchronously()
    )
