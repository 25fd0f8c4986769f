"""The ledger of one ``fit``: where its wall time went, in parts that add up to it.

StepTimer knows the steps; the ledger lays the rest of the call beside them:
* **start-up**: fit called -> first batch begins; **exit**: train end -> the fit returned;
* **compile**: each function's first call, and every retrace or recompile the backend's signal
  found (``CompileWatch``), timed as its execution's excess over the median, with epoch, step and
  cause; **steps**: the training executions, less all of the above inside them;
* **input**: where timeable without a device sync (JAX's reads inside the train function, the gaps
  between PyTorch's steps); on TensorFlow only a profiler sees it (``None``);
* **validation**: on_test_begin -> on_test_end, less its callbacks and its compile;
* **callbacks**: other callbacks' hooks on the fit's thread, by class name (time on Keras's
  callback thread overlapped the steps and is shown apart); **other**: the rest, never hidden.

The intervals tile the call, so the parts add up to its wall time by construction."""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import math
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from absl import logging

from toolkit.core import compat
from toolkit.core.stats import FIRST
from toolkit.profiling import _memory
from toolkit.profiling._ledger_records import (
    FIT_CALL,
    PARTS,
    TRAIN_BEGIN,
    CallbackTime,
    Compile,
    Ledger,
    LedgerPart,
    OtherSpan,
    spread,
)
from toolkit.profiling._memory_records import EpochMemory, Growth

if TYPE_CHECKING:
    from toolkit.backend._common import CompileEvent

HOOKS = (
    "on_train_begin",
    "on_train_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_begin",
    "on_test_batch_end",
    "on_batch_begin",
    "on_batch_end",
)
_MISSING = object()
# The hooks Keras runs between two training steps (tf_keras's ``on_batch_*`` too).
BETWEEN_STEPS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")


def keras_callbacks(me: Any) -> list[Any] | None:
    """The callback list Keras is calling `me` from (up from the hook's frame), or None."""
    owner = dispatcher_of(me)
    return None if owner is None else owner.callbacks


def dispatcher_of(me: Any) -> Any:
    """Keras's ``CallbackList`` calling `me` (up from the hook's frame), or None."""
    frame = sys._getframe(1)
    for _ in range(10):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        found = getattr(owner, "callbacks", None) if owner is not me else None
        if isinstance(found, list) and any(c is me for c in found):
            return owner
        frame = frame.f_back
    return None


def on_stack(owner: Any) -> bool:
    """Whether a method of `owner` is running on this thread (a frame up the stack is its)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_locals.get("self") is owner:
            return True
        frame = frame.f_back
    return False


def _restore(cb: Any, hook: str, previous: Any) -> None:
    with contextlib.suppress(AttributeError):
        if previous is _MISSING:
            delattr(cb, hook)
        else:
            setattr(cb, hook, previous)


def _base(cb: Any, hook: str) -> bool:
    """Whether `hook` of `cb` is the base ``Callback``'s no-op (tf_keras does not mark them)."""
    if hook in getattr(cb, "__dict__", {}):
        return False
    owner = next((k for k in type(cb).__mro__ if hook in vars(k)), None)
    return owner is not None and owner.__name__ == "Callback"


def overrides(cb: Any, hook: str) -> bool:
    """Whether `cb` runs code of its own at `hook` (not Keras's no-op, marked or not)."""
    method = getattr(cb, hook, None)
    return method is not None and not getattr(method, "_is_default", False) and not _base(cb, hook)


def _handed_off(dispatcher: Any, hook: str) -> bool:
    """Whether Keras 3's list runs batch end `hook` on its callback threads (JAX, PyTorch)."""
    which = "_async_test" if hook == "on_test_batch_end" else "_async_train"
    return bool(getattr(dispatcher, which, False))


class CallbackClock:
    """Times other callbacks' overridden hooks in place, by class name: an instance attribute wraps
    each bound method until train end. Nothing joins Keras's list, so it dispatches as before."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.records: list[tuple[float, float, str]] = []  # (start, seconds, name), fit thread
        self.off: list[tuple[str, float]] = []  # (name, seconds) on another thread
        self._patched: list[tuple[Any, str, Any]] = []
        # Memory read at each non-batch hook's end, inside its span: what each callback held.
        self.read: Callable[[], None] | None = None

    def watch(self, callbacks: Sequence[Any], skip: Any, dispatcher: Any = None) -> None:
        """Wraps the overridden hooks of `callbacks` but `skip`; `dispatcher`: Keras's list calling
        them (it says which batch ends it hands to its callback threads)."""
        main = threading.get_ident()
        # Keras 3 passes a batch hook's logs by keyword; tf_keras's list passes them by position
        # (its base class then calls ``on_batch_*`` by keyword): each wrapper calls on the same way.
        legacy = compat.keras_flavor() != "keras3"
        for cb in callbacks:
            if cb is skip:
                continue
            name = type(cb).__name__
            for hook in HOOKS:
                if not overrides(cb, hook):
                    continue  # Keras's no-op: nothing to time, and its async choice stays
                method = getattr(cb, hook)
                if getattr(method, "_toolkit_timed", False):
                    continue
                previous = vars(cb).get(hook, _MISSING) if hasattr(cb, "__dict__") else _MISSING
                if "batch" not in hook or (hook.endswith("end") and _handed_off(dispatcher, hook)):
                    timed = self._timed(method, name, main, cb, hook)
                else:
                    positional = legacy and not hook.startswith("on_batch")
                    timed = self._timed_batch(method, name, positional)
                timed._toolkit_timed = True  # type: ignore[attr-defined]
                timed.__wrapped__ = method  # type: ignore[attr-defined]
                try:
                    setattr(cb, hook, timed)
                except (AttributeError, TypeError):  # __slots__, a frozen object: untimed
                    continue
                self._patched.append((cb, hook, previous))

    def _timed_batch(
        self, method: Callable[..., Any], name: str, positional: bool
    ) -> Callable[..., Any]:
        """A batch hook on the fit's thread, called every step: the least a timing can be. Named
        arguments, not ``*args, **kwargs`` (packing them and a thread check cost 3 of its 4 µs a
        call inside a fit; issue 77's benchmarks/README.md); a call as Keras makes it, or with
        the batch alone, reaches the hook as it would have."""
        clock, record = self._clock, self.records.append

        if positional:

            def timed(batch: int, logs: Any = _MISSING) -> Any:
                t0 = clock()
                try:
                    return method(batch) if logs is _MISSING else method(batch, logs)
                finally:  # a hook that raised is timed too
                    record((t0, clock() - t0, name))

        else:

            def timed(batch: int, logs: Any = _MISSING) -> Any:
                t0 = clock()
                try:
                    return method(batch) if logs is _MISSING else method(batch, logs=logs)
                finally:  # a hook that raised is timed too
                    record((t0, clock() - t0, name))

        return timed

    def _timed(
        self, method: Callable[..., Any], name: str, main: int, cb: Any, hook: str
    ) -> Callable[..., Any]:
        """A hook called a few times a fit (train, epoch, validation): its memory read too; or a
        batch end Keras 3 may run on its callback threads (no reading): timed apart when it does."""
        clock, ident = self._clock, threading.get_ident
        record, off_record = self.records.append, self.off.append
        reads = "batch" not in hook

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return method(*args, **kwargs)
            finally:  # a hook that raised is timed too
                if ident() != main:
                    off_record((name, clock() - t0))
                else:
                    if reads and self.read is not None:
                        self.read()  # inside the hook's span: the callback's reading
                    record((t0, clock() - t0, name))
                if hook == "on_train_end":  # the fit's last hook: out it goes
                    self._take_out(cb)

        return timed

    def _take_out(self, owner: Any) -> None:
        for entry in list(self._patched):
            cb, hook, previous = entry
            if cb is owner and hook == "on_train_end":
                _restore(cb, hook, previous)
                self._patched.remove(entry)

    def release(self, but_train_end: bool = False) -> None:
        """Takes every wrapper out; `but_train_end`: the ``on_train_end`` ones stay, not yet run."""
        kept = []
        for cb, hook, previous in reversed(self._patched):
            if but_train_end and hook == "on_train_end":
                kept.append((cb, hook, previous))
                continue
            _restore(cb, hook, previous)
        self._patched = kept[::-1]


class Execution(NamedTuple):
    """One execution of a compiled function, as the ledger places it in the fit."""

    start: float
    seconds: float
    steps: int
    function: str  # "train" or "evaluate"
    epoch: int | None
    run: int  # its run's index among the fit's runs (an epoch's steps, a validation)
    index: int  # its index in its run
    batch: int  # the batch it began at


class _Counts(NamedTuple):
    """The fit's counts, as the :class:`Ledger` holds them."""

    epochs: int
    epochs_planned: int
    steps: int
    steps_per_epoch: int | None
    validation_calls: tuple[int, ...]


class Tile(NamedTuple):
    """One interval of the fit, of one part; the tiles cover the fit, end to end."""

    start: float
    end: float
    part: str


class EpochSpan(NamedTuple):
    """One epoch's clock readings: begin, its first step's begin, its last step's end, end."""

    epoch: int
    begin: float | None
    first: float | None
    steps_end: float | None
    end: float | None = None


@dataclasses.dataclass
class ValidationSpan:
    """One validation: the epoch it followed, its begin and end, each execution's begin."""

    epoch: int
    begin: float
    end: float | None = None
    begins: list[tuple[int, float]] = dataclasses.field(default_factory=list)  # (batch, at)


@dataclasses.dataclass(frozen=True)
class Interval:
    """What a poll of the backend's counters covered: an epoch's training or a validation."""

    kind: str  # TRAINING or VALIDATION
    index: int  # the epoch, or the validation's index


TRAINING, VALIDATION = "train epoch", "validation"


@dataclasses.dataclass
class _Fit:
    """The fit as the ledger reads it: where its clock starts and stops, and its intervals."""

    called: float | None  # the fit call (None: not timed around it)
    returned: float | None
    start: float
    stop: float
    train_end: float | None  # None: never reached, or after the call returned
    epochs: list[EpochSpan]
    validations: list[ValidationSpan]


class _Book:
    """The fit's tiles, and each part's seconds as time is moved from part to part."""

    def __init__(self, tiles: list[Tile]) -> None:
        self.tiles = tiles
        self._starts = [t.start for t in tiles]
        self.totals = dict.fromkeys(PARTS, 0.0)
        self.moved_from_other: list[tuple[float, float]] = []  # (at, seconds)
        for t in tiles:
            self.totals[t.part] += t.end - t.start

    def part_at(self, t: float) -> str | None:
        i = bisect.bisect_right(self._starts, t) - 1
        return self.tiles[i].part if i >= 0 and t < self.tiles[i].end else None

    def move(
        self,
        part: str | None,
        seconds: float,
        to: str,
        capped: bool = False,
        at: float | None = None,
    ) -> float:
        """Moves `seconds` from `part` (None: none) to `to`, `capped` at its total; returns them."""
        if part is not None:
            if capped:
                seconds = min(seconds, max(0.0, self.totals[part]))
            self.totals[part] -= seconds
            if part == "other" and at is not None:
                self.moved_from_other.append((at, seconds))
        self.totals[to] += seconds
        return seconds


@dataclasses.dataclass(frozen=True)
class _Steady:
    """A function's median execution a step, and the executions it came from."""

    median: float
    samples: int
    spread_s: float | None


class FitLedger:
    """One fit's clock readings, kept by StepTimer's hooks, and the ledger made of them."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        # Memory is read on a thread: only on the real clock (a test's clock is its own).
        self.memory_every_s: float | None = _memory.EVERY_S
        self.steps_begun: Callable[[], int] = lambda: 0
        self.sampler: _memory.MemorySampler | None = None
        self.clear()

    def clear(self) -> None:
        self.train_begin: float | None = None
        self.train_end: float | None = None
        self.epochs: list[EpochSpan] = []  # each epoch's readings (StepTimer reads them)
        self.validations: list[ValidationSpan] = []
        self.gaps: list[tuple[float, float]] = []  # (start, seconds): input between steps
        self.adapter: str | None = None  # the Keras data adapter fit reads through
        self._test: ValidationSpan | None = None
        self.callbacks = CallbackClock(self._clock)
        self.found_callbacks = False
        self.model: Any = None
        self.watch: Any = None
        self._stopped: Any = None  # the watch after finish(), for the result's reading
        self.backend = ""
        self.overlaps = False  # the backend dispatches asynchronously: reads overlap steps
        self._polls: dict[str, Interval] = {}  # each poll's label: the interval it covered
        self._epoch = 0
        self.sampler = None
        self._named: tuple[tuple[Growth, ...], list[Growth]] | None = None  # census, once
        self._warned: set[str] = set()  # the memories said to grow across epochs, once each
        self.memory_ends: list[EpochMemory] = []  # read at train begin and each epoch's end

    def begin(self, timer: Any, model: Any, at: float) -> None:
        self.finish()
        self.clear()
        self.train_begin = at
        self.model = model
        from toolkit import backend
        from toolkit.backend._common import CompileWatch

        try:
            seam = backend.get()
            self.backend = backend.name()
            self.overlaps = bool(seam.dispatches_asynchronously())
            self.watch = seam.compile_watch(model, self._clock)
        except Exception:  # noqa: BLE001 - a backend the toolkit does not measure: no signal
            self.watch = CompileWatch(model, self._clock)
        try:
            self.watch.start()
        except Exception:  # noqa: BLE001 - the signal is a view; training goes on
            self.watch = CompileWatch(model, self._clock)
        dispatcher = dispatcher_of(timer)
        found = None if dispatcher is None else dispatcher.callbacks
        if found is not None:
            self.found_callbacks = True
            self.callbacks.watch(found, skip=timer, dispatcher=dispatcher)
        if self.memory_every_s and self._clock is time.perf_counter:
            self.sampler = _memory.MemorySampler(self._clock, self.steps_begun,
                                                 self.memory_every_s, model)  # fmt: skip
            if found is not None:  # the callbacks' containers are counted too
                self.sampler.owners += [c for c in found if c is not timer]
            self.callbacks.read = self.sampler.read
            self.sampler.start()
            if self.sampler.readings:  # start() read it: train begin
                self.memory_ends.append(_memory.at_end(None, self.sampler.readings[0]))

    def _read_memory(self, steps_end: bool = False) -> _memory.Reading | None:
        """A memory reading at a fit boundary; `steps_end`: the first epoch's steps just ended."""
        if self.sampler is None:
            return None
        reading = self.sampler.read()
        if steps_end and self._epoch == 0 and self.sampler.censuses:
            self.sampler.census_now()
        return reading

    def _poll(self, interval: Interval) -> None:
        """Reads the backend's counters for `interval`, kept under a label (nothing parsed back)."""
        if self.watch is not None:
            label = f"{interval.kind} {interval.index}"
            self._polls[label] = interval
            with contextlib.suppress(Exception):  # never stops training
                self.watch.poll(label)

    def epoch_begin(self, epoch: int) -> None:
        self._epoch = epoch

    def epoch_end(
        self,
        epoch: int,
        begin: float,
        first: float | None,
        steps_end: float | None,
        end: float,
        gaps: list[tuple[float, float]],
    ) -> None:
        self._poll(Interval(TRAINING, epoch))
        reading = self._read_memory(steps_end=True)
        if reading is not None:
            self.memory_ends.append(_memory.at_end(epoch, reading))
            self._say_growth()
        self.epochs.append(EpochSpan(epoch, begin, first, steps_end, end))
        self.gaps.extend(gaps)

    def _say_growth(self) -> None:
        """Warns once of memory risen at each of the last epoch ends: a leak, said in time."""
        ends = self.memory_ends
        with contextlib.suppress(Exception):  # a warning is a view; training goes on
            for g in _memory.epochs_growth(ends):
                if g.memory in self._warned:
                    continue
                self._warned.add(g.memory)
                now = ends[-1].host_mb if g.memory == "host" else ends[-1].device_mb
                label = "host RSS" if g.memory == "host" else "device memory"
                logging.warning(
                    "StepTimer: %s grew at each of the last %d epoch ends, by %.0f MiB in all "
                    "(now %.0f MiB): a leak would look like this; look for tensors kept in "
                    "Python lists, a growing cache, or retracing",
                    label, _memory.GROWTH_EPOCHS, g.mb, now or 0.0,
                )  # fmt: skip

    def test_begin(self, at: float) -> None:
        self._read_memory(steps_end=not self.validations)
        self._poll(Interval(TRAINING, self._epoch))
        if self.watch is not None:
            with contextlib.suppress(Exception):  # never stops training
                self.watch.test_begin()
        self._test = ValidationSpan(self._epoch, at)

    def memory_due(self, at: float, batch: int, steps_in_epoch: int | None) -> tuple[float, float]:
        """Reads at a batch begin (`batch` -1: a validation's); returns the next (time, batch)."""
        if self.sampler is None:
            return math.inf, math.inf
        return self.sampler.due(at, batch, not self.epochs, steps_in_epoch)

    def test_batch(self, batch: int, at: float) -> None:
        if self._test is not None:
            self._test.begins.append((batch, at))

    def test_end(self, at: float) -> None:
        if self._test is None:
            return
        # Read inside it, its end after: else a fast validation had no reading of its own.
        self._read_memory()
        self._test.end = max(at, self._clock())
        self.validations.append(self._test)
        self._test = None
        self._poll(Interval(VALIDATION, len(self.validations) - 1))

    def end(self, at: float) -> None:
        self.train_end = at
        self._poll(Interval(TRAINING, self._epoch))
        self.finish(but_train_end=True)  # the callbacks after StepTimer end the fit after it

    def finish(self, but_train_end: bool = False) -> None:
        """Stops the backend's watch and the callback timers (idempotent; also after a raise)."""
        watch, self.watch = self.watch, None
        if self.sampler is not None:
            self.sampler.stop()
        if watch is not None:
            with contextlib.suppress(Exception):  # never stops training
                watch.stop()
            self._stopped = watch
        self.callbacks.release(but_train_end)

    def result(
        self,
        calls: Sequence[tuple[float, int, int, str]],
        span: tuple[float | None, float | None],
        current: EpochSpan | None,
        params: Mapping[str, Any] | None,
        now: float,
    ) -> Ledger | None:
        """The ledger (``docs/report.md``); None: no fit timed. `current`: the epoch stopped in."""
        if self.train_begin is None:
            return None
        watch = self.watch or self._stopped
        fit = self._fit(span, current, now)
        spans, runs_s = self._spans(fit)
        book = _Book(_tile(spans, fit.start, fit.stop))
        callbacks = self._move_callbacks(book)
        input_seen, inputs = self._move_input(book, watch)
        found = _Compiles(calls, fit, watch, book, self._polls).found()
        runs_s = _without_first_compile(runs_s, found.compiles)
        wall = fit.stop - fit.start
        book.totals["other"] = wall - sum(v for k, v in book.totals.items() if k != "other")
        unexplained = _others(book, fit.epochs)  # every unexplained span, the largest first
        others = unexplained[:3]
        starts = _epoch_starts(unexplained)
        samples = _Samples(calls, found, runs_s, callbacks, inputs)
        return Ledger(
            source=FIT_CALL if fit.called is not None else TRAIN_BEGIN,
            partial=self.train_end is None,  # never reached train end (raised, or running)
            wall_s=round(wall, 6),
            parts=_parts(book.totals, samples, input_seen, fit),
            callbacks=callbacks,
            overlapped=self._overlapped(),
            compiles=tuple(_largest(found.compiles)),
            recompiles=sum(1 for c in found.compiles if not c.first),
            signal=getattr(watch, "signal", None) if watch is not None else None,
            **self._counts(calls, params, fit)._asdict(),
            validation_runs_s=tuple(runs_s),
            step_s=tuple((k, round(v.median, 6)) for k, v in found.steady.items()),
            backend=self.backend,
            jit_compile=_jit(self.model),
            unjitted_by=compat.unjitted_by(self.model),
            unseen=tuple(self._unseen(fit, input_seen, _read_s(self.gaps, watch))),
            input_read_s=round(_read_s(self.gaps, watch), 6) or None,
            other_where=tuple(OtherSpan(round(d, 6), _words(where)) for d, where in others),
            epoch_starts_s=round(sum(starts), 6) if fit.epochs[1:] else None,
            epoch_start_max_s=round(max(starts, default=0.0), 6) if fit.epochs[1:] else None,
            adapter=self.adapter,
            memory=self._memory(calls, fit, book, found),
        )

    def _memory(self, calls: Sequence[Any], fit: _Fit, book: _Book, found: Any) -> Any:
        """The fit's memory by part, or None where it was not read."""
        if self.sampler is None:
            return None
        over = [_memory.Overlay(t0, t0 + dt, name) for t0, dt, name in self.callbacks.records]
        first = next((e.first for e in fit.epochs if e.first is not None), None)
        if first is not None and calls:
            over.append(_memory.Overlay(first, first + calls[0][0], "compile"))
        if fit.validations and fit.validations[0].begins:
            v = fit.validations[0]
            end = v.begins[1][1] if len(v.begins) > 1 else v.end
            if end is not None:
                over.append(_memory.Overlay(v.begins[0][1], end, "compile"))
        recompiles = sum(1 for c in found.compiles if not c.first)

        def name(growth: list[Growth], grown: _memory.Grown) -> list[Growth]:
            key = tuple(growth)
            if self._named is None or self._named[0] != key:  # the census runs once a fit
                try:  # a search of the process's objects: what it cannot read costs the name
                    named = _memory.name_growth(growth, self.model, recompiles, grown)
                except Exception as e:  # noqa: BLE001 - never the ledger
                    logging.warning("StepTimer: who holds the memory that grew: not found (%s)", e)
                    named = growth
                self._named = (key, named)
            return self._named[1]

        return _memory.run_memory(
            self.sampler,
            fit.start,
            book.tiles,
            over,
            fit.epochs,
            fit.validations,
            name,
            self.memory_ends,
            _memory.traced_steps(calls),
        )

    def _fit(
        self, span: tuple[float | None, float | None], current: EpochSpan | None, now: float
    ) -> _Fit:
        """Where the fit's clock starts and stops, and its epochs and validations."""
        called, returned = span
        begin = self.train_begin
        if called is None or returned is None or not called <= begin <= returned:
            called = returned = None
        train_end = self.train_end
        if train_end is not None and returned is not None and train_end > returned:
            train_end = None
        stop = returned if returned is not None else train_end if train_end is not None else now
        epochs = list(self.epochs)
        if current is not None and current.first is not None:
            epochs.append(current)
        validations = list(self.validations)
        if self._test is not None:  # stopped inside a validation
            validations.append(dataclasses.replace(self._test, end=stop))
        start = called if called is not None else begin
        return _Fit(called, returned, start, stop, train_end, epochs, validations)

    def _spans(self, fit: _Fit) -> tuple[list[Tile], list[float]]:
        """Each part's intervals in time order (for :func:`_tile`); each validation's seconds."""
        first = next((e.first for e in fit.epochs if e.first is not None), None)
        spans = [Tile(fit.start, first if first is not None else (fit.train_end or fit.stop),
                      "start_up")]  # fmt: skip
        # Queued steps: the host reads ahead while the device runs, no wait (said as input_read_s).
        gaps = [] if self.overlaps else sorted(self.gaps)
        for e in fit.epochs:
            if e.first is not None and e.steps_end is not None:
                spans += _steps_and_gaps(e.first, e.steps_end, gaps)
        ends = {e.epoch: e.steps_end for e in fit.epochs}
        runs_s = []
        for v in fit.validations:
            # From the epoch's last step: Keras builds its iterator before on_test_begin.
            after = ends.get(v.epoch)
            begin = after if after is not None and after <= v.begin else v.begin
            spans.append(Tile(begin, v.end, "validation"))
            runs_s.append(round(v.end - begin, 6))
        if fit.train_end is not None and fit.returned is not None:
            spans.append(Tile(fit.train_end, fit.returned, "exit"))
        return sorted(spans, key=lambda s: s.start), runs_s

    def _move_callbacks(self, book: _Book) -> tuple[CallbackTime, ...]:
        """Each callback's hooks, by name, moved out of the part they ran in."""
        by_name: dict[str, list[float]] = {}
        for t0, dt, name in self.callbacks.records:
            part = book.part_at(t0)
            if part is not None:
                book.move(part, dt, "callbacks", at=t0)
                by_name.setdefault(name, []).append(dt)
        timed = [
            CallbackTime(name, round(sum(each), 6), len(each), spread(each))
            for name, each in by_name.items()
        ]
        return tuple(sorted(timed, key=lambda c: -c.seconds))

    def _overlapped(self) -> tuple[tuple[str, float], ...]:
        """Each callback's seconds on Keras's callback thread (overlapping the steps)."""
        off: dict[str, float] = {}
        for name, dt in self.callbacks.off:
            off[name] = off.get(name, 0.0) + dt
        return tuple((k, round(v, 6)) for k, v in off.items())

    def _move_input(self, book: _Book, watch: Any) -> tuple[str, list[float]]:
        """JAX's input reads in the train function, out of the steps: where seen, each's seconds."""
        gaps = [t.end - t.start for t in book.tiles if t.part == "input"]
        input_seen = getattr(watch, "input_seen", "") if watch is not None else ""
        if self.overlaps or not input_seen:
            return "", gaps
        for t0, dt in getattr(watch, "input_spans", []):
            part = book.part_at(t0)
            if part is not None:
                book.move(part, dt, "input", at=t0)
                gaps.append(dt)
        return input_seen, gaps

    def _counts(
        self, calls: Sequence[tuple[float, int, int, str]], params: Mapping[str, Any] | None,
        fit: _Fit,
    ) -> _Counts:  # fmt: skip
        """The fit's counts: epochs done and planned, steps, each validation's executions."""
        done = len(self.epochs)
        return _Counts(
            epochs=done,
            epochs_planned=int((params or {}).get("epochs") or done or 0),
            steps=sum(n for _, n, _, _ in calls),
            steps_per_epoch=(params or {}).get("steps"),
            validation_calls=tuple(len(v.begins) for v in fit.validations),
        )

    def _unseen(self, fit: _Fit, input_seen: str, read_s: float) -> list[str]:
        """What the ledger could not see, in words."""
        unseen = []
        if fit.called is None:
            unseen.append(
                "the fit call before train begin and after train end (call fit through "
                "profile().fit, or wrap it in StepTimer.around_fit())"
            )
        if self.overlaps:
            unseen.append(
                f"the input's wait: the host read its batches for {read_s:.3f} s while the "
                "device ran queued steps (an asynchronous backend), so how long the steps "
                "waited for them is not known without a device sync (diagnose measures it)"
            )
        elif not input_seen:
            unseen.append(
                "the input: read inside the traced step, in its time (diagnose measures the "
                "pipeline alone; a trace shows it)"
            )
        if not self.found_callbacks:
            unseen.append("the callbacks by name (Keras's callback list was not found)")
        return unseen


def _steps_and_gaps(first: float, steps_end: float, gaps: list[tuple[float, float]]) -> list[Tile]:
    """An epoch's steps, first begin to last end, cut by the input's gaps between them."""
    out = []
    i = bisect.bisect_left(gaps, (first, 0.0))
    cur = first
    while i < len(gaps) and gaps[i][0] < steps_end:
        g0, gd = gaps[i]
        out.append(Tile(cur, g0, "steps"))
        out.append(Tile(g0, min(steps_end, g0 + gd), "input"))
        cur = min(steps_end, g0 + gd)
        i += 1
    out.append(Tile(cur, steps_end, "steps"))
    return out


def _tile(spans: list[Tile], start: float, stop: float) -> list[Tile]:
    """`spans` made into tiles of ``[start, stop]``; what no span covers is ``other``."""
    tiles: list[Tile] = []
    cursor = start
    for a, b, part in spans:
        a, b = max(a, cursor), min(b, stop)
        if b <= a:
            continue
        if a > cursor:
            tiles.append(Tile(cursor, a, "other"))
        tiles.append(Tile(a, b, part))
        cursor = b
    if cursor < stop:
        tiles.append(Tile(cursor, stop, "other"))
    return tiles


def _others(book: _Book, epochs: list[EpochSpan]) -> list[tuple[float, tuple[str, int | None]]]:
    """Each ``other`` tile less what was moved out of it, largest first, with its place."""
    found = []
    for t in book.tiles:
        if t.part != "other":
            continue
        moved = sum(s for at, s in book.moved_from_other if t.start <= at < t.end)
        seconds = t.end - t.start - moved
        if seconds > 0:
            found.append((seconds, _where(t.start, t.end, epochs)))
    return sorted(found, key=lambda o: -o[0])


def _epoch_starts(unexplained: list[tuple[float, tuple[str, int | None]]]) -> list[float]:
    """Each of epochs 2 on: its seconds before its first step."""
    by_epoch: dict[int, float] = {}
    for seconds, (place, n) in unexplained:
        if place == _STARTS and n is not None and n >= 2:
            by_epoch[n] = by_epoch.get(n, 0.0) + seconds
    return list(by_epoch.values())


def _read_s(gaps: list[tuple[float, float]], watch: Any) -> float:
    """The host's seconds reading batches: gaps between steps, reads inside the train function."""
    read = sum(d for _, d in gaps)
    return read + sum(d for _, d in getattr(watch, "input_spans", []) if watch is not None)


def _without_first_compile(runs_s: list[float], compiles: list[Compile]) -> list[float]:
    """Each validation's own seconds: the first without the evaluation function's compile."""
    if not runs_s:
        return runs_s
    first = sum(c.seconds for c in compiles if c.function == "evaluate" and c.first)
    return [round(max(0.0, runs_s[0] - first), 6), *runs_s[1:]]


@dataclasses.dataclass(frozen=True)
class _Samples:
    """What each part adds up, for its samples and spread (:class:`LedgerPart`)."""

    calls: Sequence[tuple[float, int, int, str]]
    found: _Found
    runs_s: list[float]
    callbacks: tuple[CallbackTime, ...]
    inputs: list[float]

    def of(self, part: str) -> tuple[int, float | None]:
        if part == "steps":
            steady = [d for d, _, _, kind in self.calls if kind != FIRST]
            return len(self.calls), spread(steady)
        if part == "compile":
            return len(self.found.compiles), None  # each compile once: no spread
        if part == "validation":
            return len(self.runs_s), spread(self.runs_s)
        if part == "callbacks":
            calls = sum(c.calls for c in self.callbacks)
            alone = self.callbacks[0].spread_s if len(self.callbacks) == 1 else None
            return calls, alone
        if part == "input":
            return len(self.inputs), spread(self.inputs)
        return 1, None


def _parts(
    totals: dict[str, float], samples: _Samples, input_seen: str, fit: _Fit
) -> tuple[LedgerPart, ...]:
    """Each part's seconds, samples and spread; None for a part not seen."""
    out = []
    for name in PARTS:
        seconds: float | None = round(totals[name], 6)
        if name == "input" and not input_seen:
            seconds = None  # nothing was moved into it: the input is inside the steps, unseen
        if name == "exit" and (fit.returned is None or fit.train_end is None):
            seconds = None
        out.append(LedgerPart(name, seconds, *samples.of(name)))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class _Found:
    """The compiles found, and each function's median execution a step."""

    compiles: list[Compile]
    steady: dict[str, _Steady]


class _Compiles:
    """Each compile of one fit, timed and moved out of its part: first calls, recompiles the signal
    placed (for a counter, its interval's slowest executions), Keras's own outside the steps."""

    def __init__(
        self,
        calls: Sequence[tuple[float, int, int, str]],
        fit: _Fit,
        watch: Any,
        book: _Book,
        polls: Mapping[str, Interval],
    ) -> None:
        self.calls, self.book, self.polls = calls, book, polls
        self.events = list(getattr(watch, "events", []) if watch is not None else [])
        self.train_runs = _train_runs(calls, fit.epochs)
        self.val_runs = _validation_runs(fit.validations, len(self.train_runs))
        self.runs = self.train_runs + self.val_runs
        self.steady = self._steady()
        self.out: list[Compile] = []
        self._taken: set[tuple[str, int, int]] = set()
        self.firsts: dict[str, Execution] = {}
        for run in self.runs:
            if run and run[0].function not in self.firsts:
                self.firsts[run[0].function] = run[0]

    def found(self) -> _Found:
        for x in self.firsts.values():
            self._add(x, True, "first call", self._own(x))
        polled = self._placed()
        self._polled(polled)
        compiles = [c for c in self.out if c.seconds > 0 or c.first]
        return _Found(compiles, self.steady)

    def _steady(self) -> dict[str, _Steady]:
        """Each function's median execution a step: StepTimer's steady steps for train; else all but
        the first and last execution; for a one-execution validation, the later validations'."""
        out = {}
        for function in ("train", "evaluate"):
            rest = [
                x.seconds / x.steps
                for run in self.runs
                for x in run[1:]
                if x.function == function and (x.index < len(run) - 1 or len(run) <= 2)
            ]
            if function == "train":
                rest = [d / n for d, n, _, kind in self.calls if kind != FIRST and n] or rest
            elif not rest:
                rest = [x.seconds / x.steps for run in self.val_runs[1:] for x in run]
            if rest:
                out[function] = _Steady(statistics.median(rest), len(rest), spread(rest))
        return out

    def _own(self, x: Execution) -> float | None:
        """What the backend's own events timed inside execution `x` (None: nothing)."""
        own = sum(
            ev.seconds or 0.0
            for ev in self.events
            if ev.at is not None and x.start <= ev.at < x.start + x.seconds
        )
        return own or None

    def _add(self, x: Execution, first: bool, cause: Any, own: float | None) -> None:
        """Execution `x` as a compile: its excess over the median, moved out of its part (once)."""
        key = (x.function, x.run, x.index)
        if key in self._taken:
            return
        self._taken.add(key)
        steady = self.steady.get(x.function)
        if steady is None and not first:
            return
        if steady is None:
            # Only a first call: all of it is the compile, as the summary's first-step line says.
            steady = _Steady(0.0, 0, None)
        excess = max(0.0, x.seconds - x.steps * steady.median)
        excess = self.book.move(
            self.book.part_at(x.start), excess, "compile", capped=True, at=x.start
        )
        self.out.append(
            Compile(
                function=x.function,
                first=first,
                epoch=x.epoch,
                step=x.batch,
                seconds=round(excess, 6),
                backend_seconds=round(own, 6) if own is not None else None,
                cause=None if cause is None else str(cause),
                samples=steady.samples,
                step_spread_s=steady.spread_s,
            )
        )

    def _placed(self) -> dict[str, list[CompileEvent]]:
        """Places clock-stamped events in their executions (or outside); the rest by poll label."""
        flat = sorted((x for run in self.runs for x in run), key=lambda x: x.start)
        starts = [x.start for x in flat]
        polled: dict[str, list[CompileEvent]] = {}
        for ev in self.events:
            at = ev.at
            if at is None:
                polled.setdefault(ev.where or "", []).append(ev)
                continue
            i = bisect.bisect_right(starts, at) - 1
            if i >= 0 and at < flat[i].start + flat[i].seconds:
                x = flat[i]
                if x is not self.firsts.get(x.function):
                    self._add(x, False, ev.cause or "a new trace", self._own(x))
            else:
                self._outside(at, ev)
        return polled

    def _outside(self, at: float, ev: CompileEvent) -> None:
        """A compile outside any step (Keras's own, timed by JAX), out of its part."""
        part = self.book.part_at(at)
        seconds = float(ev.seconds or 0.0)
        if part is None or seconds <= 0:
            return
        seconds = self.book.move(part, seconds, "compile", capped=True, at=at)
        named = part.replace("_", "-")
        self.out.append(
            Compile(
                function=ev.function or named,
                first=True,  # a function of Keras's own, compiled once
                epoch=None,
                step=None,
                seconds=round(seconds, 6),
                backend_seconds=round(seconds, 6),
                cause=ev.cause or f"compiled in the {named}",
                outside_steps=True,
            )
        )

    def _polled(self, polled: Mapping[str, list[CompileEvent]]) -> None:
        """A counter read at an interval's end: its slowest executions are its compiles."""
        for label, found in polled.items():
            interval = self.polls.get(label)
            if interval is None:
                continue
            if interval.kind == TRAINING:
                pool = [x for run in self.train_runs for x in run if x.epoch == interval.index]
            else:
                index = interval.index
                pool = list(self.val_runs[index]) if 0 <= index < len(self.val_runs) else []
            pool = [x for x in pool if x is not self.firsts.get(x.function)]
            slowest = sorted(pool, key=lambda x: -x.seconds / x.steps)[: len(found)]
            for x, ev in zip(sorted(slowest, key=lambda x: x.start), found, strict=False):
                self._add(x, False, _first_line(ev.cause) or "a new trace", None)


def _train_runs(
    calls: Sequence[tuple[float, int, int, str]], epochs: list[EpochSpan]
) -> list[list[Execution]]:
    """Each epoch's training executions, placed end to end from its first step's begin."""
    by_epoch: dict[int, list[tuple[float, int]]] = {}
    for d, n, epoch, _ in calls:
        by_epoch.setdefault(epoch, []).append((d, n))
    runs = []
    for e in epochs:
        if e.first is None:
            continue
        t, batch, run = e.first, 0, []
        for k, (d, n) in enumerate(by_epoch.get(e.epoch, [])):
            run.append(Execution(t, d, n, "train", e.epoch, len(runs), k, batch))
            t, batch = t + d, batch + n
        runs.append(run)
    return runs


def _validation_runs(validations: list[ValidationSpan], offset: int) -> list[list[Execution]]:
    """Each validation's executions, from one begin to the next (the last to its end)."""
    runs = []
    for r, v in enumerate(validations):
        begins, run = v.begins, []
        for k, (batch, t) in enumerate(begins):
            later = k + 1 < len(begins)
            t_next = begins[k + 1][1] if later else v.end
            n = begins[k + 1][0] - batch if later else 1
            run.append(
                Execution(t, t_next - t, max(1, n), "evaluate", v.epoch, offset + r, k, batch)
            )
        runs.append(run)
    return runs


MAX_COMPILES = 100  # compiles listed in a ledger at most (the largest; all are counted)


# Where in the fit an unexplained span lies (with its epoch, counted from 1).
_STARTS, _ENDS, _AFTER, _BETWEEN = "starts", "ends", "after", "between"
_PLACES = {
    _STARTS: "the start of epoch {n}: its input iterator, before the first step",
    _ENDS: "the end of epoch {n}: Keras's epoch logs and the callbacks before StepTimer",
    _AFTER: "after epoch {n}: the callbacks after StepTimer and Keras's epoch end",
    _BETWEEN: "between the fit's parts",
}


def _where(a: float, b: float, epochs: list[EpochSpan]) -> tuple[str, int | None]:
    """Where in the fit the unexplained span ``[a, b)`` lies: its place and epoch."""
    mid = (a + b) / 2
    for k, e in enumerate(epochs):
        n = e.epoch + 1
        if e.first is not None and e.begin is not None and e.begin <= mid < e.first:
            return _STARTS, n
        if e.end is not None and e.first is not None and e.first <= mid < e.end:
            return _ENDS, n
        following = epochs[k + 1].begin if k + 1 < len(epochs) else None
        if e.end is not None and mid >= e.end and (following is None or mid < following):
            return _AFTER, n
    return _BETWEEN, None


def _words(where: tuple[str, int | None]) -> str:
    """A span's place in words (report.json's ``other_where``)."""
    return _PLACES[where[0]].format(n=where[1])


def _largest(compiles: list[Compile]) -> list[Compile]:
    """The first calls and the :data:`MAX_COMPILES` largest recompiles, in order."""
    if len(compiles) <= MAX_COMPILES:
        return compiles
    ranked = sorted(
        range(len(compiles)), key=lambda i: (not compiles[i].first, -compiles[i].seconds)
    )
    keep = set(ranked[:MAX_COMPILES])
    return [c for i, c in enumerate(compiles) if i in keep]


def _first_line(cause: Any) -> str | None:
    """A backend's reason in one line (TorchDynamo's ``1/0: reason`` and its stack dropped)."""
    if not cause:
        return None
    line = str(cause).strip().splitlines()[0]
    head, sep, rest = line.partition(": ")
    return rest if sep and head.replace("/", "").isdigit() else line


def _jit(model: Any) -> str | None:
    """How the model compiles its step (``True``, ``False``, ``auto``), as Keras holds it."""
    value = getattr(model, "jit_compile", None)
    return None if value is None else str(value)


def epoch_gaps(
    begins: Sequence[tuple[Any, ...]], ends: Sequence[tuple[Any, ...]]
) -> list[tuple[float, float]]:
    """``(start, seconds)`` from each step's end to the next begin: Keras's PyTorch loop's fetch."""
    end_of = {m[0]: m[1] for m in ends}
    out = []
    for k in range(len(begins) - 1):
        last = begins[k + 1][0] - 1
        t = end_of.get(last, end_of.get(begins[k][0]))
        if t is not None and begins[k + 1][1] > t:
            out.append((t, begins[k + 1][1] - t))
    return out
