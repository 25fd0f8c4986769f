"""Grain pipelines (JAX's loader; Keras 3's ``fit`` reads them on every backend) built with the
tf.data builder's rules; the one module that imports ``grain``, and only when building.

Not Grain's ``shuffle``: epoch `e` reads ``default_rng([seed, e, 0]).permutation(n)``, as
:func:`toolkit.data.array_batches` does, so both loaders feed the same batches from a seed. Keras's
Grain adapter knows no batch count (a finite dataset warns "ran out of data" every epoch):
``endless=True`` gives one stream of epochs whose ``len(ds)`` is ``fit``'s ``steps_per_epoch``."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from toolkit.core.checks import ConfigError, argument, check_batch_fits, check_number
from toolkit.data._array_record import ArrayRecords
from toolkit.data._grain_readers import MAX_THREADS
from toolkit.data.arrays import ArraySource

# Private: the front is ``pipeline(..., loader="grain")`` and ``image_folder(..., loader="grain")``.

GRAIN_EXTRA = "pip install 'keras-perf-toolkit[grain]'"


def has_grain() -> bool:
    """Whether Grain is installed, without importing it."""
    return importlib.util.find_spec("grain") is not None


def require_grain() -> Any:
    """The ``grain`` module, or ImportError in one line naming the extra."""
    try:
        import grain
    except ImportError:
        raise ImportError(
            f"Grain pipelines need the grain package, which is not installed: {GRAIN_EXTRA}"
        ) from None
    return grain


def is_grain_dataset(data: Any) -> bool:
    """Whether `data` is a Grain dataset or loader (what Keras's Grain adapter takes)."""
    return any(c.__module__.split(".")[0] == "grain" for c in type(data).__mro__)


_GRAIN_STAGES = {
    "SourceMapDataset": "source",
    "RangeMapDataset": "range",
    "ShuffleMapDataset": "shuffle",
    "MapMapDataset": "map",
    "MapIterDataset": "map",
    "RandomMapMapDataset": "random_map",
    "RandomMapIterDataset": "random_map",
    "FilterMapDataset": "filter",
    "FilterIterDataset": "filter",
    "RepeatMapDataset": "repeat",
    "SliceMapDataset": "slice",
    "BatchMapDataset": "batch",
    "BatchIterDataset": "batch",
    "PrefetchIterDataset": "prefetch",
    "InterleaveIterDataset": "mp_prefetch",
}
_HIDDEN = {"WithOptionsIterDataset", "_WithSeedMapDataset", "_WithSeedIterDataset"}


def describe_grain(dataset: Any) -> str:
    """The stages of a Grain dataset, source to end, in words (first parents); nothing runs."""
    if isinstance(getattr(dataset, "description", None), str):
        return dataset.description
    stages: list[str] = []
    node, hops = dataset, 0
    while node is not None and hops < 256:
        cls = type(node).__name__
        if cls not in _HIDDEN:
            stage = _GRAIN_STAGES.get(cls, cls)
            size = getattr(node, "_batch_size", None)
            threads = getattr(getattr(node, "_read_options", None), "num_threads", None)
            stage += f"({size})" if size is not None else ""
            stage += f"({threads} threads)" if threads is not None else ""
            stages.append(stage)
        parents = getattr(node, "parents", ())
        node, hops = (parents[0] if parents else None), hops + 1
    return " → ".join(reversed(stages)) + " (grain)"


def grain_batch_size(dataset: Any) -> int | None:
    """The batch size of a Grain dataset's nearest batching stage, without reading it."""
    node, hops = dataset, 0
    while node is not None and hops < 256:
        size = getattr(node, "_batch_size", None)
        if isinstance(size, int):
            return size
        parents = getattr(node, "parents", ())
        node, hops = (parents[0] if parents else None), hops + 1
    return None


def _grain_flags_readable() -> None:
    """Marks unparsed Grain absl flags given (a notebook, pytest): Grain's workers read them."""
    from absl import flags

    if flags.FLAGS.is_parsed():
        return
    for name in flags.FLAGS:
        if name.startswith("grain_") and not flags.FLAGS[name].present:
            flags.FLAGS[name].present = 1


def _worker_ignores_interrupts(_index: int, _count: int) -> None:
    """A Grain worker's start: it ignores the terminal's group signals (killed mid-batch, it leaks
    shared memory); the parent takes the interrupt and stops it, and it ends with its parent."""
    import signal

    from toolkit.core import children

    for signum in _group_signals():
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _blocked_signals())
    children.end_with_parent()


def _group_signals() -> list[int]:
    """The signals a terminal sends to its whole foreground process group."""
    import signal

    return [getattr(signal, n) for n in ("SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, n)]


def _blocked_signals() -> list[int]:
    """Every signal that ends a program here (``toolkit.core.interrupts``)."""
    from toolkit.core import interrupts

    return list(interrupts.SIGNALS)


@contextlib.contextmanager
def _signals_blocked() -> Any:
    """Holds the signals that end a program, here and in all it starts: a worker killed as it starts
    hangs the parent for good. The resource tracker starts first: its start unblocks them."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):  # Windows: no masks (and no fork)
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _blocked_signals())
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _own_arrays(batch: Any) -> Any:
    """A worker's batch copied out, its shared memory unlinked now (held at exit, it leaked)."""
    if isinstance(batch, dict):
        return type(batch)((k, _own_arrays(v)) for k, v in batch.items())
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(_own_arrays(v) for v in batch))
    if isinstance(batch, tuple | list):
        return type(batch)(_own_arrays(v) for v in batch)
    shm = getattr(batch, "shm", None)
    if shm is None or not isinstance(batch, np.ndarray):
        return batch
    own = np.array(batch)  # a plain ndarray: no shared memory behind it
    if getattr(batch, "_unlink_on_del", False):
        batch._unlink_on_del = False  # no public API: Grain's own flag (its delete now closes)
        with contextlib.suppress(OSError):
            shm.unlink()  # the name goes now; the mapping closes when `batch` goes
    return own


_OPEN_STREAMS: Any = None  # weakref.WeakSet of the pipelines whose stream is open


def _close_at_exit(owner: Any) -> None:
    """Closes `owner` at exit if alive, before ``multiprocessing``'s (Grain's comes too late)."""
    global _OPEN_STREAMS
    if _OPEN_STREAMS is None:
        import atexit
        import weakref

        _OPEN_STREAMS = weakref.WeakSet()
        atexit.register(_close_open_streams)
    _OPEN_STREAMS.add(owner)


_CLOSE_AT_EXIT_S = 60.0  # at most this long to stop the readers at exit; then exit anyway


def _close_open_streams() -> None:
    """Closes what is open, bounded: an exit never hangs on Grain's stop."""
    import threading

    def close_all() -> None:
        for owner in list(_OPEN_STREAMS or ()):
            with contextlib.suppress(Exception):  # exiting: the next one still gets closed
                owner.close()

    closing = threading.Thread(target=close_all, name="toolkit-grain-close", daemon=True)
    closing.start()
    closing.join(_CLOSE_AT_EXIT_S)


class _Order:
    """Example indices of epoch `e`: the seed's permutation, cached one epoch at a time."""

    def __init__(self, count: int, shuffle: bool, seed: int | None) -> None:
        self.count, self.shuffle, self.seed = count, shuffle, seed or 0
        self._cached: tuple[int, np.ndarray] | None = None

    def epoch(self, epoch: int) -> np.ndarray:
        cached = self._cached  # one read: reader threads call this concurrently
        if cached is not None and cached[0] == epoch:
            return cached[1]
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch, 0]).permutation(self.count)
        else:
            order = np.arange(self.count)
        self._cached = (epoch, order)
        return order

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cached": None}


def _stack(examples: list[Any]) -> Any:
    """Examples (tuples, dicts or arrays of the same structure) stacked into one batch."""
    first = examples[0]
    if isinstance(first, dict):
        return {k: _stack([e[k] for e in examples]) for k in first}
    if isinstance(first, tuple | list):
        return tuple(_stack(list(column)) for column in zip(*examples, strict=True))
    return np.stack([np.asarray(e) for e in examples])


def _batches(
    grain: Any,
    source: Any,
    order: _Order,
    stream: tuple[int, int],
    batch_size: int,
    per_epoch: int,
    gathered: bool,
    maps: tuple[Callable[..., Any] | None, Callable[..., Any] | None],
) -> Any:
    """Batches ``stream[0]:stream[1]`` of all epochs as one ``grain.MapDataset`` (element `i`: batch
    ``i % per_epoch`` of epoch ``i // per_epoch``), so worker processes outlive an epoch."""
    preprocess, augment = maps

    def positions(i: int) -> tuple[int, int, np.ndarray]:
        epoch, j = divmod(int(i), per_epoch)
        return epoch, j * batch_size, order.epoch(epoch)[j * batch_size : (j + 1) * batch_size]

    def gather(i: int) -> Any:
        return source.take(positions(i)[2])

    if isinstance(source, ArraySource):
        read = lambda i: tuple(part[0] for part in source.take(np.asarray([i])))  # noqa: E731
    else:
        read = source.__getitem__

    def build(i: int) -> Any:
        epoch, start, indices = positions(i)
        examples = []
        for k, index in enumerate(indices):
            example = read(int(index))
            if preprocess is not None:
                example = preprocess(*example)
            if augment is not None:  # a generator per example: the seed, epoch, position
                rng = np.random.default_rng([order.seed, epoch, start + k])
                example = augment(*example, rng)
            examples.append(example)
        return _stack(examples)

    return grain.MapDataset.range(*stream).map(gather if gathered else build)


def grain_pipeline(
    source: Any,
    batch_size: int,
    *,
    preprocess: Callable[..., Any] | None = None,
    augment: Callable[..., Any] | None = None,
    batch_map: Callable[..., Any] | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    drop_remainder: bool = True,
    endless: bool = False,
    num_threads: int | None = None,
    workers: int | str = 0,
    prefetch: int | None = None,
    batches_per_epoch: int | None = None,
) -> Any:
    """A Grain pipeline of ``(features, labels)`` batches, an ``IterDataset`` ``fit`` takes.

    Args:
        source: random access: an ``ArraySource``, ``(features, labels)`` arrays, ``ImageFiles``,
            ``ArrayRecords`` or any sequence of ``(features, label)``.
        preprocess: ``f(features, label)`` per example, no randomness.
        augment: ``f(features, label, rng)`` per example; `rng` from seed, epoch and position.
        batch_map: ``f(batch)`` on whole batches (vectorized NumPy).
        endless: epoch after epoch; ``len(ds)`` is an epoch's batches (``steps_per_epoch``).
        num_threads: threads making batches (default: one per core, up to 16).
        workers: processes of `num_threads` threads (0: this process); ``"auto"``: one thread if
            the step computes on the CPU, else the faster of threads or processes (measured once).
        prefetch: batches read ahead, per worker (default: two per thread).
        batches_per_epoch: ``len(ds)`` of an endless pipeline when an epoch is not one pass.

    Raises:
        ImportError: Grain is not installed (names the ``[grain]`` extra).
        ValueError: a bad size, or a source that is not random access."""
    grain = require_grain()
    check_number(argument("pipeline", "batch_size"), batch_size, integer=True, least=1)
    if batch_size is None:
        raise ConfigError("pipeline: batch_size must be an integer >= 1, got None")
    source = _random_access(source)
    _check_readers(num_threads, prefetch, workers)
    count = len(source)
    if drop_remainder:
        check_batch_fits("pipeline", batch_size, count)
    per_epoch = count // batch_size if drop_remainder else -(-count // batch_size)
    threads = num_threads or max(1, min(MAX_THREADS, os.cpu_count() or 1))
    # Arrays and ArrayRecord files read a batch in one call (ArrayRecords.take: one read).
    batched = isinstance(source, ArraySource | ArrayRecords)
    gathered = batched and preprocess is None and augment is None
    chosen = ""
    if workers == "auto":
        again = functools.partial(
            grain_pipeline, source, batch_size, preprocess=preprocess, augment=augment,
            batch_map=batch_map, shuffle=shuffle, seed=seed, drop_remainder=drop_remainder,
            endless=True, prefetch=prefetch,
        )  # fmt: skip
        maps = (preprocess, augment, batch_map)
        readers = _auto_readers(again, source, batch_size, num_threads, gathered, maps, prefetch)
        threads, workers, chosen = readers.threads, readers.workers, f"; auto: {readers.why}"
    make = _Streams(
        grain, source, _Order(count, shuffle, seed), batch_size, per_epoch, gathered,
        (preprocess, augment), batch_map, threads, workers, prefetch or 2 * threads,
    )  # fmt: skip
    length = batches_per_epoch if endless and batches_per_epoch else per_epoch
    return _epochs_class(grain)(make, length, batch_size, endless, make.describe(chosen, endless))


def _random_access(source: Any) -> Any:
    """`source` as Grain reads it, by index (arrays as an ``ArraySource``), or ValueError."""
    if isinstance(source, tuple):
        if len(source) != 2:
            raise ValueError(f"source: a tuple must be (features, labels), got {len(source)} items")
        source = ArraySource(np.asarray(source[0]), np.asarray(source[1]))
    readable = isinstance(source, ArraySource) or hasattr(source, "__getitem__")
    if not (readable and hasattr(source, "__len__")):
        raise ValueError(
            f"source: Grain reads examples by index; {type(source).__name__} has no len() and "
            "[i]: give arrays, an ImageFiles or a sequence (a tf.data.Dataset: use tf.data)"
        )
    return source


def _check_readers(num_threads: int | None, prefetch: int | None, workers: int | str) -> None:
    """Refuses under one thread or batch ahead, and workers neither a count nor ``"auto"``."""
    for name, value in (("num_threads", num_threads), ("prefetch", prefetch)):
        if value is not None and value < 1:
            raise ValueError(f"{name}: must be >= 1, got {value}")
    if workers != "auto" and (not isinstance(workers, int) or workers < 0):
        raise ValueError(f"workers: must be >= 0 or 'auto', got {workers!r}")


def _auto_readers(
    again: Callable[..., Any],
    source: Any,
    batch_size: int,
    num_threads: int | None,
    gathered: bool,
    maps: tuple[Any, ...],
    prefetch: int | None,
) -> Any:
    """``workers="auto"``'s readers, each measured on the same pipeline rebuilt by `again`."""
    from toolkit.data._grain_readers import choose_readers

    def trial(t: int, w: int) -> Any:
        return again(num_threads=t, workers=w)

    return choose_readers(source, batch_size, num_threads, gathered, maps, trial, prefetch)


@dataclasses.dataclass(frozen=True, eq=False)
class _Streams:
    """How a pipeline's batches are made and read; a record, not a closure (the epochs hold it)."""

    grain: Any
    source: Any
    order: _Order
    batch_size: int
    per_epoch: int
    gathered: bool  # a batch in one read (arrays, ArrayRecord files; no per-example map)
    maps: tuple[Callable[..., Any] | None, Callable[..., Any] | None]  # preprocess, augment
    batch_map: Callable[..., Any] | None
    threads: int
    workers: int  # worker processes; 0: the threads of this process
    ahead: int  # batches read ahead, per reader

    def __call__(self, epoch: int, endless: bool = False) -> Any:
        """Epoch `epoch`'s batches; `endless`: every epoch's from `epoch` on, without end."""
        grain, per_epoch, ahead = self.grain, self.per_epoch, self.ahead
        first = epoch * per_epoch
        stream = (first, sys.maxsize if endless else first + per_epoch)
        ds = _batches(
            grain, self.source, self.order, stream, self.batch_size, per_epoch, self.gathered,
            self.maps,
        )  # fmt: skip
        if self.batch_map is not None:
            ds = ds.map(self.batch_map)
        it = ds.to_iter_dataset(
            grain.ReadOptions(num_threads=self.threads, prefetch_buffer_size=ahead)
        )
        if self.workers:
            _grain_flags_readable()
            it = _started_masked(grain)(
                it.mp_prefetch(
                    grain.MultiprocessingOptions(
                        num_workers=self.workers, per_worker_buffer_size=ahead
                    ),
                    worker_init_fn=_worker_ignores_interrupts,
                )
            ).map(_own_arrays)  # in this process, as each batch arrives
        return it

    def describe(self, chosen: str, endless: bool) -> str:
        """The stages in words; `chosen`: why ``workers="auto"`` chose these readers, if it did."""
        source, preprocess, augment = self.source, *self.maps
        read = f"{type(source).__name__} (by index)"
        if isinstance(source, ArrayRecords):
            files = f"ArrayRecord files ({len(source.paths)})"
            read = f"{files} (one read per batch)" if self.gathered else f"{files} (by index)"
        elif self.gathered:
            read = "arrays (one gather per batch)"
        shuffled = f"shuffle(per epoch, seed {self.order.seed})" if self.order.shuffle else None
        stages = [read, shuffled]
        stages += [
            "map(preprocess)" if preprocess else None,
            "random_map(augment)" if augment else None,
        ]
        stages += [f"batch({self.batch_size})", "map(batch_map)" if self.batch_map else None]
        threads, workers = self.threads, self.workers
        where = f"{workers} processes × {threads} threads" if workers else f"{threads} threads"
        where += chosen
        stages += [f"prefetch({self.ahead}, {where})", "endless" if endless else None]
        return " → ".join(s for s in stages if s) + " (grain)"


def from_builder(
    dataset: Any,
    batch_size: int,
    *,
    num_parallel_calls: int | None,
    cpu_budget: int | None,
    repeat: bool,
    loader: str,
    workers: int | str,
    **settings: Any,
) -> Any:
    """``pipeline(..., loader="grain")``'s settings as a Grain pipeline's; tf.data-only refused."""
    tf_only = ("cache", "shuffle_buffer", "deterministic", "private_threads", "ram_budget")
    given = [name for name in tf_only if settings.pop(name) not in (None, False)]
    if given:
        raise ValueError(f"{given[0]}: a tf.data setting, which a Grain pipeline has not")
    threads = num_parallel_calls if num_parallel_calls and num_parallel_calls > 0 else None
    return grain_pipeline(
        dataset,
        batch_size,
        endless=repeat,
        num_threads=threads or cpu_budget,
        workers=workers,
        **settings,
    )


_EPOCHS: dict[Any, type] = {}  # per Grain module: its epochs' class, its masked start


def _started_masked(grain: Any) -> type:
    """A ``grain.IterDataset`` that starts Grain's workers with the signals blocked."""
    if ("masked", id(grain)) in _EPOCHS:
        return _EPOCHS[("masked", id(grain))]

    class MaskedStartIterator(grain.DatasetIterator):
        def __init__(self, parent: Any) -> None:
            super().__init__(parent)
            self._started = False

        def __next__(self) -> Any:
            if self._started:
                return next(self._parent)
            with _signals_blocked():
                item = next(self._parent)
            self._started = True
            return item

        def get_state(self) -> dict[str, Any]:
            return self._parent.get_state()

        def set_state(self, state: dict[str, Any]) -> None:
            with _signals_blocked():
                self._parent.set_state(state)

        def close(self) -> None:
            close = getattr(self._parent, "close", None)
            if close is not None:
                close()

    class MaskedStart(grain.IterDataset):
        def __iter__(self) -> Any:
            with _signals_blocked():
                return MaskedStartIterator(self._parent.__iter__())

    _EPOCHS[("masked", id(grain))] = MaskedStart
    return MaskedStart


def _epochs_class(grain: Any) -> type:
    """The ``grain.IterDataset`` of epochs on Grain's bases, built once Grain is imported."""
    if id(grain) in _EPOCHS:
        return _EPOCHS[id(grain)]

    class EpochIterator(_EpochReader, grain.DatasetIterator):
        __doc__ = _EpochReader.__doc__

    class EndlessIterator(_EndlessReader, grain.DatasetIterator):
        __doc__ = _EndlessReader.__doc__

    class GrainEpochs(_Epochs, grain.IterDataset):
        __doc__ = _Epochs.__doc__
        _epoch_reader = EpochIterator
        _endless_reader = EndlessIterator

    _EPOCHS[id(grain)] = GrainEpochs
    return GrainEpochs


class _EpochReader:
    """One epoch from the dataset's one stream; only a read to its end moves the epoch on."""

    def __init__(self, owner: Any) -> None:
        self._owner = owner
        self._left = owner._batches
        super().__init__(owner._stream_at(owner.epoch))
        owner._reader = self  # the stream's one reader: an older one may not read on

    def __next__(self) -> Any:
        if self._left <= 0:
            raise StopIteration
        if self._owner._reader is not self:
            raise RuntimeError(
                "a later iter() of this Grain pipeline reads its stream now: read its "
                "epochs one at a time (or give each reader a pipeline of its own)"
            )
        item = next(self._parents[0])
        self._left -= 1
        self._owner._at += 1
        if self._left == 0:
            self._owner.epoch += 1
        return item

    def get_state(self) -> dict[str, Any]:
        """Grain's checkpoint: epoch, batches left, where the stream began, and its state."""
        owner = self._owner
        return {
            "epoch": owner.epoch, "left": self._left, "stream_from": owner._from,
            "inner": self._parents[0].get_state(),
        }  # fmt: skip

    def set_state(self, state: dict[str, Any]) -> None:
        """Back to a :meth:`get_state` checkpoint: a new stream from that one's start."""
        owner = self._owner
        owner.close()
        owner._from = int(state["stream_from"])
        owner._stream = owner._make(owner._from, True).__iter__()
        _close_at_exit(owner)
        owner._stream.set_state(state["inner"])
        owner.epoch, self._left = int(state["epoch"]), int(state["left"])
        owner._reader = self
        # Where the stream reads next (an epoch read to its end has moved `epoch` on).
        done = owner._batches - self._left if self._left else 0
        owner._at = owner.epoch * owner._batches + done
        self._parents = (owner._stream,)

    def close(self) -> None:
        """Nothing to stop: the stream serves the next epoch; the dataset's ``close()`` stops it."""


class _EndlessReader:
    """Every epoch from the first, on a stream of its own, closed at exit at the latest."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        _close_at_exit(self)

    def _stream(self) -> Any:
        parents = self._parents  # once: the exit's close may run on another thread
        if not parents:
            raise ValueError("this Grain pipeline's endless stream was closed")
        return parents[0]

    def __next__(self) -> Any:
        return next(self._stream())

    def get_state(self) -> dict[str, Any]:
        return self._stream().get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._stream().set_state(state)

    def close(self) -> None:
        parents, self._parents, self._closed = self._parents, (), True
        for parent in parents:
            parent.close()


class _Epochs:
    """A toolkit Grain pipeline (``len()``: an epoch's batches). All epochs read one stream, so
    workers start once and read ahead across epoch ends, as a repeated ``tf.data`` does."""

    _epoch_reader: type  # this Grain's EpochIterator and EndlessIterator (_epochs_class)
    _endless_reader: type

    def __init__(
        self,
        make: Callable[[int, bool], Any],
        batches: int,
        size: int,
        endless: bool,
        text: str,
    ) -> None:
        super().__init__()
        self._make, self._batches = make, batches
        self.batch_size, self.endless, self.description = size, endless, text
        self.epoch = 0
        self._stream: Any = None  # the iterator of every epoch from epoch `_from` on
        self._from = 0
        self._at = 0  # the position (batches since epoch 0) the stream reads next
        self._starts: dict[int, Any] = {}  # position: the stream's state there
        self._reader: Any = None  # the EpochIterator reading the stream

    def __len__(self) -> int:
        return self._batches

    def _stream_at(self, epoch: int) -> Any:
        """The stream, reading epoch `epoch`'s first batch next."""
        start = epoch * self._batches
        if self._stream is not None and self._at != start:
            saved = self._starts.get(start)
            try:
                if saved is None:
                    raise LookupError(start)
                self._stream.set_state(saved)
                self._at = start
            except Exception:  # noqa: BLE001 - no state kept there: a new stream
                self.close()
        if self._stream is None:
            self._stream = self._make(epoch, True).__iter__()
            self._from, self._at = epoch, start
            _close_at_exit(self)
        if start not in self._starts:
            self._starts = {start: self._stream.get_state()}  # this epoch's start only
        return self._stream

    def close(self) -> None:
        """Stops the stream's readers and workers; the next epoch starts them again."""
        stream, self._stream, self._starts = self._stream, None, {}
        if stream is not None:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def repeat(self, count: int | None = None) -> Any:
        """Endless, as ``tf.data.Dataset.repeat()``, so tf.data timing code reads it too."""
        if count is not None:
            raise ValueError("repeat: a toolkit Grain pipeline repeats endlessly or not")
        if self.endless:
            return self
        text = self.description.replace(" (grain)", " → endless (grain)")
        return type(self)(self._make, self._batches, self.batch_size, True, text)

    def map_batches(self, fn: Callable[[Any], Any], note: str, size: int) -> Any:
        """This pipeline with `fn` on each batch after the prefetch, here (`fn` need not pickle)."""
        make = self._make
        text = self.description.replace(" (grain)", f" → {note} (grain)")
        return type(self)(
            lambda epoch, endless=False: make(epoch, endless).map(fn),
            self._batches, size, self.endless, text,
        )  # fmt: skip

    def __iter__(self) -> Any:
        # Endless: a stream of its own; else the next epoch from the dataset's one stream.
        if not self.endless:
            return self._epoch_reader(self)
        return self._endless_reader(self._make(0, True).__iter__())

    def __str__(self) -> str:
        return self.description
