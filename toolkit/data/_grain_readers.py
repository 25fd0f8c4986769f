"""Who makes a Grain pipeline's batches, chosen by measurement (``workers="auto"``): reader
threads in this process, or worker processes.

Threads cost nothing to start but share the GIL: a batch made in Python (Pillow's decode and a
NumPy resize hold the GIL for much of their time) gains little from a second thread. Worker
processes scale past the GIL but start in seconds and copy every batch back. Which wins
depends on the source, the maps and the machine, so it is measured, not guessed: the same
pipeline read for a window with threads, then with workers, and the workers kept only when
their steady rate beats the threads' by :data:`WORKER_GAIN` (they pay their start once, since an
endless pipeline keeps them from epoch to epoch). Arrays gathered a batch at a time (no
per-example map) are one NumPy call per batch: threads, without measuring.

The answer is cached per machine (``toolkit.core.cache``, ``grain_readers.json``) under the
source's kind and size, the batch size and the maps' names, so it is measured once.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

from toolkit.core.cache import Cache

__all__ = ["Readers", "choose_readers"]

_CACHE = Cache("grain_readers.json")
WINDOW_S = 1.5  # each side's steady window, at least (seconds), after its warm-up
MIN_BATCHES = 5  # and at least this many batches
# Read untimed after the first batch: every buffer ahead of the reader (threads: the prefetch;
# workers: one buffer in each worker and one here), filled while the rest started, would
# otherwise count as made in the window; workers' first windows swung from 0.4× to 1.2× their
# steady rate here (2,000 JPEGs, 2 cores).
MIN_WARMUP = 4
MAX_WORKERS = 4
# Workers must beat threads by this much to be kept: they hold a process each and copy every
# batch; within a few percent the two are the same to the fit, and threads start at once.
WORKER_GAIN = 0.10


@dataclasses.dataclass(frozen=True)
class Readers:
    """The readers a pipeline gets: `threads` per reader, `workers` processes (0: none), and
    why, in words (the measured rates, or the rule)."""

    threads: int
    workers: int
    why: str


def _name(fn: Callable[..., Any] | None) -> str | None:
    if fn is None:
        return None
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _facts(source: Any, batch_size: int, maps: tuple[Any, ...], threads: int) -> dict[str, Any]:
    """What the answer depends on: the source's kind and size (an image folder's image size),
    the batch, the maps, the threads and the cores."""
    return {
        "what": "grain readers",
        "source": type(source).__name__,
        "examples": len(source),
        "image_size": list(getattr(source, "size", ()) or ()),
        "batch_size": batch_size,
        "maps": [_name(fn) for fn in maps],
        "threads": threads,
        "cpus": os.cpu_count(),
    }


def _rate(build: Callable[[], Any], warmup: int) -> tuple[float, float]:
    """``(batches per second after a warm-up, seconds to the first batch)`` of the endless
    pipeline `build` makes, read for at least :data:`WINDOW_S` and :data:`MIN_BATCHES`."""
    start = time.perf_counter()
    it = iter(build())
    try:
        next(it)
        first_s = time.perf_counter() - start
        for _ in range(max(MIN_WARMUP, warmup)):
            next(it)
        count, begin = 0, time.perf_counter()
        while count < MIN_BATCHES or time.perf_counter() - begin < WINDOW_S:
            next(it)
            count += 1
        return count / (time.perf_counter() - begin), first_s
    finally:
        close = getattr(it, "close", None)
        if close is not None:  # worker processes end here, not at garbage collection
            close()


def choose_readers(
    source: Any,
    batch_size: int,
    threads: int,
    gathered: bool,
    maps: tuple[Any, ...],
    build: Callable[[int, int], Any],
    ahead: int,
) -> Readers:
    """The readers for a pipeline over `source`: `build(threads, workers)` makes it endless
    with those readers (``grain_pipeline``), `ahead` batches prefetched per reader. Cached
    per machine (module docstring)."""
    if gathered:
        return Readers(threads, 0, "arrays gathered a batch at a time: threads")
    facts = _facts(source, batch_size, maps, threads)
    key = _CACHE.key(facts)
    known = _CACHE.get(key)
    if known is not None and {"threads", "workers", "why"} <= set(known):
        return Readers(int(known["threads"]), int(known["workers"]), f"{known['why']}, cached")
    workers = max(2, min(MAX_WORKERS, os.cpu_count() or 1))
    on_threads, _ = _rate(lambda: build(threads, 0), ahead)
    each = batch_size
    try:
        on_workers, start_s = _rate(lambda: build(threads, workers), 2 * workers * ahead)
    except Exception as e:  # noqa: BLE001 - a source that cannot go to a process: threads
        why = f"threads: {workers} processes could not read it ({type(e).__name__}: {e})"
        return Readers(threads, 0, why.splitlines()[0])  # not cached: may be passing
    measured = (
        f"measured {on_threads * each:,.0f} examples/s on {threads} threads, "
        f"{on_workers * each:,.0f} on {workers} processes (first batch {start_s:.1f} s)"
    )
    if on_workers > on_threads * (1 + WORKER_GAIN):
        chosen = Readers(threads, workers, f"{workers} processes: {measured}")
    else:
        chosen = Readers(threads, 0, f"threads: {measured}")
    _CACHE.put(key, facts, dataclasses.asdict(chosen))  # a read-only home: measured next time
    return chosen
