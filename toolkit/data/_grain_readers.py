"""Who makes a Grain pipeline's batches (``workers="auto"``): reader threads or worker processes,
judged by the fit the pipeline feeds, not the pipeline read alone: the step needs cores too (workers
faster alone ran the fit slower), and threads contend for the GIL.

- **Arrays gathered a batch at a time**: threads, nothing to measure.
- **The step computes on the CPU** (its pools take every core), or **one usable core**: one thread.
- **The step computes on an accelerator:** one core feeds the device; the pipeline is measured with
  threads on the rest, then a worker per spare core (up to :data:`MAX_WORKERS`), kept only if they
  beat threads by :data:`WORKER_GAIN`; cached per machine under what the answer depends on.

Threads given are kept; ``workers=N`` is the user's. Every answer says why (:attr:`Readers.why`)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

from toolkit.core.cache import Cache

_CACHE = Cache("grain_readers.json")
MAX_THREADS = 16
WINDOW_S = 1.5  # each side's steady window, at least (seconds), after its warm-up
MIN_BATCHES = 5  # and at least this many batches
# Read untimed after the first batch: buffers filled at the start would count in the window.
MIN_WARMUP = 4
MAX_WORKERS = 4
# Workers must beat threads by this much to be kept: they hold a process each and copy every batch.
WORKER_GAIN = 0.10


@dataclasses.dataclass(frozen=True)
class Readers:
    """The readers a pipeline gets: `threads` per reader, `workers` processes, and why, in words."""

    threads: int
    workers: int
    why: str


def _name(fn: Callable[..., Any] | None) -> str | None:
    if fn is None:
        return None
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)


def step_device() -> str:
    """Where the step computes: the first GPU's kind, or ``"cpu"`` (also if unknown)."""
    try:
        from toolkit.devices import detect

        gpus = [d for d in detect() if d.is_gpu]
    except Exception:  # noqa: BLE001 - any failure to ask: the CPU, the cautious answer
        return "cpu"
    return gpus[0].kind if gpus else "cpu"


@dataclasses.dataclass(frozen=True)
class _Facts:
    """What the answer depends on; its JSON (:meth:`as_json`) is the cache's key."""

    source: str
    examples: int
    image_size: tuple[int, ...]
    batch_size: int
    maps: tuple[str | None, ...]  # each map's qualified name (None: no such map)
    threads: int
    cores: int
    step_device: str

    @classmethod
    def of(
        cls,
        source: Any,
        batch_size: int,
        maps: tuple[Any, ...],
        threads: int,
        cores: int,
        device: str,
    ) -> _Facts:
        """The facts of a pipeline over `source` with these maps and readers."""
        size = tuple(getattr(source, "size", ()) or ())
        names = tuple(_name(fn) for fn in maps)
        return cls(
            type(source).__name__, len(source), size, batch_size, names, threads, cores, device
        )

    def as_json(self) -> dict[str, object]:
        """The facts as the cache keys and stores them (tuples as lists, as JSON reads them)."""
        return {
            "what": "grain readers",
            "source": self.source,
            "examples": self.examples,
            "image_size": list(self.image_size),
            "batch_size": self.batch_size,
            "maps": list(self.maps),
            "threads": self.threads,
            "cores": self.cores,
            "step_device": self.step_device,
        }


def _rate(build: Callable[[], Any], warmup: int) -> tuple[float, float]:
    """``(batches/s after a warm-up, seconds to the first batch)`` of `build`'s endless pipeline."""
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
    num_threads: int | None,
    gathered: bool,
    maps: tuple[Any, ...],
    build: Callable[[int, int], Any],
    prefetch: int | None,
) -> Readers:
    """The readers by the module's rule; `build(threads, workers)` makes the endless pipeline."""
    cores = usable_cores()
    if gathered:
        threads = num_threads or min(cores, MAX_THREADS)
        return Readers(threads, 0, "arrays gathered a batch at a time: threads")
    device = step_device()
    if device == "cpu":
        threads = num_threads or 1
        given = "worker processes" if num_threads else "another reader"
        why = (
            f"{threads} thread{'s' if threads > 1 else ''}: the step computes on the CPU's "
            f"{cores} core{'s' if cores > 1 else ''}, none spare for {given}"
        )
        return Readers(threads, 0, why)
    spare = cores - 1  # one core feeds the device
    if spare < 1:
        threads = num_threads or 1
        return Readers(threads, 0, f"{threads} thread: 1 usable core, none spare beside the step")
    threads = num_threads or min(spare, MAX_THREADS)
    facts = _Facts.of(source, batch_size, maps, threads, cores, device).as_json()
    key = _CACHE.key(facts)
    known = _CACHE.get(key)
    if known is not None and {"threads", "workers", "why"} <= set(known):
        return Readers(int(known["threads"]), int(known["workers"]), f"{known['why']}, cached")
    workers = min(MAX_WORKERS, spare)
    ahead = prefetch or 2 * threads
    on_threads, _ = _rate(lambda: build(threads, 0), ahead)
    try:
        on_workers, start_s = _rate(lambda: build(threads, workers), 2 * workers * ahead)
    except Exception as e:  # noqa: BLE001 - a source that cannot go to a process: threads
        why = f"threads: {workers} processes could not read it ({type(e).__name__}: {e})"
        return Readers(threads, 0, why.splitlines()[0])  # not cached: may be passing
    measured = (
        f"measured {on_threads * batch_size:,.0f} examples/s on {threads} threads, "
        f"{on_workers * batch_size:,.0f} on {workers} processes (first batch {start_s:.1f} s; "
        f"the step on {device}, {spare} of {cores} cores spare)"
    )
    if on_workers > on_threads * (1 + WORKER_GAIN):
        chosen = Readers(threads, workers, f"{workers} processes: {measured}")
    else:
        chosen = Readers(threads, 0, f"threads: {measured}")
    _CACHE.put(key, facts, dataclasses.asdict(chosen))  # a read-only home: measured next time
    return chosen
