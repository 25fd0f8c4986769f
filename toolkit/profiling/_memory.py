"""Memory over one ``fit``, read beside the ledger: each part's peak and what it held at its end,
growth inside an epoch found and named, and a timeline for the plot and TensorBoard.

Readings come every `every_s` seconds (not every N steps: compiles and validation are read too) and
at each ledger boundary. Host: the resident set and ``ru_maxrss`` (no new high between readings is
missed; tracemalloc costs too much). Device: the backend's counters, read without a sync, peaks
never reset. What grows: the live arrays besides the model's variables by dtype and shape, and the
object holding the largest group (through the garbage collector's referrers)."""

from __future__ import annotations

import bisect
import contextlib
import gc
import itertools
import math
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from toolkit.core._host_memory import MIB, maxrss_mb, resident_mb
from toolkit.core.stats import EXCLUDED
from toolkit.profiling._ledger_records import PARTS
from toolkit.profiling._memory_records import EpochMemory, Growth, PartMemory, RunMemory, Sample

MB = MIB
EVERY_S = 0.2  # a reading costs a 1-core fit 50-150 µs: at this pace about 0.05 %
GROWTH_FLOOR_MB = 8.0  # growth under this, or under 4x the readings' scatter, is noise (pools)
LONG_RUN_STEPS = 100_000  # census growth counts if a run this long would gain GROWTH_FLOOR_MB
LATER_SHARE = 0.35  # of a rise's rate, what the steps after it must keep for it to be growth
# A rise at each of the last GROWTH_EPOCHS epoch ends, by over GROWTH_WARN_MB: a leak across epochs.
GROWTH_EPOCHS = 3
GROWTH_WARN_MB = 64.0
TIMELINE_POINTS = 600  # the report keeps at most this many readings
CENSUS_STEP = 3  # the first census: once this many steps began (the first one compiled)
BACKOFF = 4  # the thread wakes this many times less while batch begins take the readings
# The first epoch's steps are read this many times, spread over its batches by index (a short first
# epoch tells a leak from noise: a steady rise needs 6), besides the readings by time.
FIRST_EPOCH_READINGS = 10
FIRST_EPOCH_DENSER = 10  # no step count known: its first readings come this many times as often


def host_memory() -> tuple[float, float]:
    """This process's resident memory and its high-water mark, in MiB."""
    rss = resident_mb()
    return rss, max(rss, maxrss_mb())


class Reading(NamedTuple):
    at: float
    step: int
    host_mb: float
    host_high_mb: float
    device_mb: float | None
    device_peak_mb: float | None


Reader = Callable[[], tuple[float, float] | None]


def _device_reader() -> tuple[Reader, tuple[str, ...], str | None]:
    """A reader of the device counters (summed over devices), the devices, and why none if none."""
    from toolkit import backend

    try:
        seam, name = backend.get(), backend.name()
        found = seam.device_memory()
    except Exception:  # noqa: BLE001 - a backend the toolkit does not measure
        return lambda: None, (), "this backend reports no device memory"
    if not found:
        said = f"{backend.title(name)} reports no memory for a CPU device: host memory is all"
        return lambda: None, (), said

    def read() -> tuple[float, float] | None:
        try:
            now = seam.device_memory()
        except Exception:  # noqa: BLE001 - a reading is a view; training goes on
            return None
        return (
            sum(v.get("current_mb", 0.0) for v in now.values()),
            sum(v.get("peak_mb", 0.0) for v in now.values()),
        )

    return read, tuple(found), None


class MemorySampler:
    """Reads memory every `every_s` seconds and at `FIRST_EPOCH_READINGS` batches of the first
    epoch, at batch begins (:meth:`due`), on a daemon thread only where no batch begins for a
    while (a compile, a long step), and on ``read``; `steps` returns the steps begun so far.

    Why so few, and at batch begins: on one core a reading inside a fit costs it 50-150 µs (the
    step's threads wait out its system calls), more from a thread woken for it (which takes the
    interpreter's lock back from the fit). Every 50 ms, the first 20 every 5 ms, on the thread,
    cost a 1,500-step fit 1 %; at this pace, at batch begins, no cost was measurable (issue 77)."""

    def __init__(
        self, clock: Callable[[], float], steps: Callable[[], int], every_s: float, model: Any
    ) -> None:
        self._clock, self._steps, self.every_s = clock, steps, every_s
        self.readings: list[Reading] = []
        self._dense_left = FIRST_EPOCH_READINGS  # readings by time, where no step count is known
        # The first epoch's two live-array counts: after its first steps, and at its end.
        self.model, self.censuses = model, []  # type: list[Census]
        self.owners: list[Any] = [model]  # whose containers a census counts (+ callbacks)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._device, self.devices, self.device_unseen = _device_reader()
        self._lock = threading.Lock()
        # The last reading's time, and whether the thread took it (else hooks read; it backs off).
        self._last_at, self._by_thread = -math.inf, True

    def start(self) -> None:
        self.read(by_thread=True)
        self._thread = threading.Thread(target=self._run, name="toolkit-memory", daemon=True)
        self._thread.start()

    def due(
        self, now: float, batch: int, first_epoch: bool, steps_in_epoch: int | None
    ) -> tuple[float, float]:
        """Reads at a batch begin at `now`; returns when the next is due: ``(time, batch)``. The
        first epoch's first census comes at its batch :data:`CENSUS_STEP` (the first compiled)."""
        if self._stop.is_set():
            return math.inf, math.inf
        if first_epoch and batch >= CENSUS_STEP and not self.censuses:
            self.census_now()
        self.read()
        if not first_epoch:
            return now + self.every_s, math.inf
        if batch < CENSUS_STEP:
            return now + self.every_s, CENSUS_STEP
        if steps_in_epoch:
            return now + self.every_s, batch + max(1, steps_in_epoch // FIRST_EPOCH_READINGS)
        if self._dense_left > 0:
            self._dense_left -= 1
            return now + self.every_s / FIRST_EPOCH_DENSER, math.inf
        return now + self.every_s, math.inf

    def _next_at(self) -> float:
        return self._last_at + self.every_s * (1 if self._by_thread else BACKOFF)

    def _run(self) -> None:
        while True:
            if self._stop.wait(max(0.0, self._next_at() - self._clock())):
                return
            if self._clock() >= self._next_at():
                self.read(by_thread=True)

    def census_now(self) -> None:
        """Counts the live arrays now (the second time: the first epoch's steps ended)."""
        with contextlib.suppress(Exception):  # a census is a view; training goes on
            if len(self.censuses) < 2:
                taken = census(self.model, int(self._steps()), self.owners)
                if taken is not None:
                    self.censuses.append(taken)

    def read(self, by_thread: bool = False) -> Reading | None:
        """One reading now, None where it failed (never raises); `by_thread`: the thread took it."""
        try:
            step = int(self._steps())
        except Exception:  # noqa: BLE001 - the count is read while the fit changes it
            step = self.readings[-1].step if self.readings else 0
        reading = None
        with contextlib.suppress(Exception):
            rss, high = host_memory()
            device = self._device()
            reading = Reading(self._clock(), step, rss, high, *(device or (None, None)))
            with self._lock:
                self.readings.append(reading)
        self._last_at, self._by_thread = self._clock(), by_thread  # even on failure: no busy loop
        return reading

    def stop(self) -> None:
        if self._thread is None or self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.read()

    def rising(self) -> bool:
        """Whether the readings after the first steps rise steadily: then the holder is looked for
        while alive (Keras closes a generator once ``fit`` returns on JAX and PyTorch)."""
        points = [(r.step, r.host_mb) for r in self.snapshot() if r.step >= CENSUS_STEP]
        return steady_rise(points) is not None

    def snapshot(self) -> list[Reading]:
        with self._lock:
            return sorted(self.readings)


# ---------------------------------------------------------------------------- the ledger's view


class Overlay(NamedTuple):
    """A stretch over the ledger's tiles with its own readings: a callback's hook, or a compile."""

    start: float
    end: float
    name: str


class _Where:
    """Which part of the fit a time is in: the ledger's tiles, under the compiles and hooks."""

    def __init__(self, tiles: Sequence[Any], over: Sequence[Overlay]) -> None:
        self.tiles = sorted(tiles, key=lambda t: t.start)
        self._starts = [t.start for t in self.tiles]
        self.over = sorted(over)

    def __call__(self, t: float) -> tuple[str, str | None]:
        """(part, callback name or None)."""
        for s in self.over:
            if s.start <= t <= s.end:
                return ("callbacks", s.name) if s.name not in ("compile",) else ("compile", None)
        i = bisect.bisect_right(self._starts, t) - 1
        if i < 0:
            return "start_up", None
        tile = self.tiles[i]
        return (tile.part if t <= tile.end else "other"), None


def _peaks(readings: Sequence[Reading]) -> list[tuple[float, float | None]]:
    """Each reading's peak since the one before: the high-water mark where it rose, else the reading
    itself; a device peak counter that fell was reset by someone."""
    out: list[tuple[float, float | None]] = []
    prev: Reading | None = None
    for r in readings:
        host = r.host_mb
        if prev is not None and r.host_high_mb > prev.host_high_mb:
            host = max(host, r.host_high_mb)
        device = r.device_mb
        moved = prev is not None and prev.device_peak_mb not in (None, r.device_peak_mb)
        if r.device_peak_mb is not None and moved:
            device = max(device or 0.0, r.device_peak_mb)
        out.append((host, device))
        prev = r
    return out


def _r(mib: float | None) -> float | None:
    """MiB as the record keeps them (to the KiB): what report.json holds, read back equal."""
    return None if mib is None else round(mib, 3)


def _max(values: list[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return max(seen) if seen else None


def parts_memory(
    readings: Sequence[Reading], where: _Where, tiles: Sequence[Any]
) -> tuple[tuple[PartMemory, ...], tuple[PartMemory, ...]]:
    """Each part's peak and held-at-end, and each callback's (by class name)."""
    peaks = _peaks(readings)
    by: dict[tuple[str, str | None], list[int]] = {}
    for i, r in enumerate(readings):
        by.setdefault(where(r.at), []).append(i)
    times = [r.at for r in readings]

    def held(i: int) -> tuple[float, float | None]:
        return readings[i].host_mb, readings[i].device_mb

    def part(name: str, cb: str | None, idx: list[int]) -> PartMemory:
        end_i = idx[-1]
        last = [t for t in tiles if t.part == name]
        if last and cb is None:  # what it held as it ended: the first reading at its end
            j = bisect.bisect_left(times, last[-1].end)
            end_i = j if j < len(readings) else len(readings) - 1
        host, device = held(end_i)
        return PartMemory(
            cb or name,
            _r(_max([peaks[i][0] for i in idx])),
            _r(host),
            _r(_max([peaks[i][1] for i in idx])),
            _r(device),
            len(idx),
        )

    parts, callbacks = [], []
    for (name, cb), idx in by.items():
        (callbacks if cb else parts).append(part(name, cb, idx))
    # The callbacks' part: every reading in any hook (so the run's peak is always a part's).
    in_hooks = sorted(i for (_, cb), idx in by.items() if cb for i in idx)
    if in_hooks:
        parts.append(part("callbacks", None, in_hooks))
    order = {name: i for i, name in enumerate(PARTS)}
    return tuple(sorted(parts, key=lambda p: order.get(p.name, 99))), tuple(callbacks)


# ---------------------------------------------------------------------------- growth


def _fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope and the residuals' standard deviation."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    residual = [y - (my + slope * (x - mx)) for x, y in zip(xs, ys, strict=True)]
    return slope, math.sqrt(sum(r * r for r in residual) / n)


def steady_rise(points: Sequence[tuple[int, float]]) -> tuple[float, int] | None:
    """(MiB, steps) of a steady rise over `points` (step, MiB): a fitted line rising by over
    :data:`GROWTH_FLOOR_MB` and 4x its scatter, still rising in the later half; else None."""
    if len(points) < 6:
        return None
    xs = [float(s) for s, _ in points]
    ys = [m for _, m in points]
    span = int(xs[-1] - xs[0])
    if span < 8:
        return None
    slope, scatter = _fit_line(xs, ys)
    total = slope * span
    if total < max(GROWTH_FLOOR_MB, 4.0 * scatter):
        return None
    half = len(points) // 2
    later, _ = _fit_line(xs[half:], ys[half:])
    if later * (xs[-1] - xs[half]) < LATER_SHARE * total * (xs[-1] - xs[half]) / span:
        return None
    return total, span


def steady_growth(values: Sequence[float], min_points: int, threshold: float) -> float | None:
    """Growth over the last `min_points` readings when each rose, if over `threshold`; else None."""
    if min_points < 2 or len(values) < min_points:
        return None
    tail = values[-min_points:]
    if all(b > a for a, b in itertools.pairwise(tail)) and tail[-1] - tail[0] > threshold:
        return tail[-1] - tail[0]
    return None


def at_end(epoch: int | None, r: Reading) -> EpochMemory:
    """The reading the ledger took at train begin (`epoch` None) or at an epoch's end."""
    return EpochMemory(epoch, r.step, round(r.host_mb, 2), _r(r.device_mb), _r(r.device_peak_mb))


def epochs_growth(ends: Sequence[EpochMemory]) -> list[Growth]:
    """Memory that rose at each of the last :data:`GROWTH_EPOCHS` epoch ends by over
    :data:`GROWTH_WARN_MB` in all; not train begin's: it precedes compiling and one-off buffers."""
    found = []
    for memory, key in (("host", "host_mb"), ("device", "device_mb")):
        seen = [e for e in ends if e.epoch is not None and getattr(e, key) is not None]
        grew = steady_growth([getattr(e, key) for e in seen], GROWTH_EPOCHS, GROWTH_WARN_MB)
        if grew is not None:
            window = seen[-GROWTH_EPOCHS:]
            steps = window[-1].step - window[0].step
            found.append(Growth("epochs", memory, round(grew, 3), steps, window[-1].epoch or 0))
    return found


def traced_steps(calls: Sequence[tuple[float, int, int, str]]) -> tuple[tuple[int, int], ...]:
    """The steps a profiler ran in (StepTimer's excluded executions), as inclusive step ranges."""
    out: list[tuple[int, int]] = []
    at = 0
    for _, n, _, kind in calls:
        if kind == EXCLUDED:
            if out and out[-1][1] >= at:
                out[-1] = (out[-1][0], at + n)
            else:
                out.append((at, at + n))
        at += n
    return tuple(out)


def _outside(inside: Sequence[Reading], traced: Sequence[tuple[int, int]]) -> list[list[Reading]]:
    """`inside` in runs no trace window interrupts (a tracer's buffers are not the fit's)."""
    runs: list[list[Reading]] = [[]]
    for r in inside:
        if any(a <= r.step <= b for a, b in traced):
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(r)
    return [run for run in runs if run]


def _stopped(g: Growth, readings: Sequence[Reading], end: float | None) -> bool:
    """Whether a rise in one epoch's steps stopped after it: the later steps, at least as many, rose
    by under :data:`LATER_SHARE` of its rate (JAX's first steps allocate, then hold level)."""
    key = "host_mb" if g.memory == "host" else "device_mb"
    seen = [(r.at, r.step, getattr(r, key)) for r in readings if getattr(r, key) is not None]
    before = [(step, mb) for at, step, mb in seen if end is not None and at <= end]
    after = [(step, mb) for at, step, mb in seen if end is not None and at > end]
    if not g.steps or not before or not after or after[-1][0] - before[-1][0] < g.steps:
        return False
    later = after[-1][0] - before[-1][0]
    return after[-1][1] - before[-1][1] < LATER_SHARE * g.mb * later / g.steps


def find_growth(
    readings: Sequence[Reading],
    where: _Where,
    epochs: Sequence[Any],
    validations: Sequence[Any],
    traced: Sequence[tuple[int, int]] = (),
) -> list[Growth]:
    """Growth inside each epoch's steps (a steady rise in a run no trace window interrupts), and
    memory a validation left held above its epoch's steps' highest; host and device."""
    found: list[Growth] = []
    steps_of: dict[int, list[Reading]] = {}
    flat: set[tuple[str, int]] = set()  # (memory, epoch) whose steps were read, and held level
    for e in epochs:
        if e.first is None or e.steps_end is None:
            continue
        inside = [r for r in readings if e.first <= r.at <= e.steps_end and where(r.at)[0] in
                  ("steps", "input", "callbacks")]  # fmt: skip
        steps_of[e.epoch] = inside
        for memory, key in (("host", "host_mb"), ("device", "device_mb")):
            for run in _outside(inside, traced):
                points = [(r.step, getattr(r, key)) for r in run if getattr(r, key) is not None]
                rise = steady_rise(points)
                if rise is not None:
                    found.append(Growth("steps", memory, round(rise[0], 3), rise[1], e.epoch))
                    break
                if len(points) >= 6 and points[-1][0] - points[0][0] >= 8:
                    flat.add((memory, e.epoch))
    # A rise a later epoch's steps no longer show filled a buffer and stopped: no growth.
    found = [g for g in found if not any(m == g.memory and k > g.epoch for m, k in flat)]
    ends = {e.epoch: e.steps_end for e in epochs if e.steps_end is not None}
    found = [g for g in found if not _stopped(g, readings, ends.get(g.epoch))]
    times = [r.at for r in readings]
    for i, v in enumerate(validations):
        if v.end is None:
            continue
        # Held is against its epoch's steps' level, not one reading (step buffers swing the resident
        # set); the first validation's build and compile (to its second batch) count in the level.
        if i == 0 and len(v.begins) < 2:
            continue
        until = v.begins[1][1] if i == 0 else v.begin
        level = [*steps_of.get(v.epoch, ()), *(r for r in readings if v.begin <= r.at <= until)]
        if not level:  # no step read: the last reading before it (none: the first one)
            level = readings[max(0, bisect.bisect_right(times, until) - 1) :][:1]
        b = bisect.bisect_left(times, v.end)  # the reading at its end
        if b >= len(readings) or not level:
            continue
        for memory, key in (("host", "host_mb"), ("device", "device_mb")):
            before = [getattr(r, key) for r in level if getattr(r, key) is not None]
            after = getattr(readings[b], key)
            if before and after is not None and after - max(before) >= GROWTH_FLOOR_MB:
                mb = round(after - max(before), 3)
                found.append(Growth("validation", memory, mb, 0, v.epoch))
    return found


# ---------------------------------------------------------------------------- what grows


def _shape_dtype(a: Any) -> tuple[str, int]:
    """``float32[32, 10]`` and its bytes, for an array or tensor of any backend."""
    import numpy as np

    shape = tuple(int(d) for d in getattr(a, "shape", ()) if d is not None)
    dtype = getattr(a, "dtype", "?")
    name = str(getattr(dtype, "name", dtype)).replace("torch.", "")
    try:
        size = np.dtype(name).itemsize
    except TypeError:
        size = 2 if "16" in name else 4
    return f"{name}[{', '.join(map(str, shape))}]", math.prod(shape) * size


def _is_array(obj: Any) -> bool:
    """An instance with a shape and dtype (not a class: ``np.ndarray`` has both as descriptors)."""
    return not isinstance(obj, type) and hasattr(obj, "shape") and hasattr(obj, "dtype")


def _nbytes(obj: Any, depth: int = 2) -> int:
    """Bytes held: an array's buffer, a container's and its items' (`depth` deep), or getsizeof."""
    if _is_array(obj):
        return _shape_dtype(obj)[1]
    size = sys.getsizeof(obj, 0)
    if depth and isinstance(obj, dict):
        size += sum(_nbytes(v, depth - 1) for v in list(obj.values()))
    elif depth and isinstance(obj, list | tuple):
        size += sum(_nbytes(v, depth - 1) for v in list(obj))
    return size


def _item_words(item: Any) -> str:
    """``float32[32, 10]`` for an array or tensor, else its type's name and ``items``."""
    if _is_array(item):
        return _shape_dtype(item)[0]
    return f"{type(item).__name__} items"


def _is_tensor(item: Any) -> bool:
    """A backend's tensor, not NumPy's: what a callback keeps by keeping Keras's logs as given."""
    import numpy as np

    return _is_array(item) and not isinstance(item, np.ndarray | np.generic)


def _ids_of_model(model: Any) -> set[int]:
    """The model's own arrays (weights, optimizer and metric state), left out of a census."""
    ids: set[int] = set()
    optimizer = getattr(model, "optimizer", None)
    groups = [getattr(model, "variables", []), getattr(optimizer, "variables", [])]
    for group in groups:
        with contextlib.suppress(Exception):
            for v in group() if callable(group) else group:
                ids.add(id(v))
                with contextlib.suppress(Exception):
                    ids.add(id(v.value))
    return ids


class Holder(NamedTuple):
    """Who keeps what grew: `words`, the `owner` (instance, module or frame), and the container
    (`kept`) or its attribute (`attr`); a fix is chosen from these objects, never the words."""

    words: str
    owner: Any
    kept: Any = None
    attr: str = ""

    def container(self) -> Any:
        return getattr(self.owner, self.attr, None) if self.attr else self.kept


class Kept(NamedTuple):
    """A container a census counted: its length, its last item's words and bytes, its holder."""

    length: int
    words: str
    nbytes: int
    holder: Holder


class Census(NamedTuple):
    """The live arrays besides the model's by ``dtype[shape]`` where listed cheaply (JAX), and the
    containers the callbacks and model hold; `step`: steps begun when taken."""

    step: int
    kind: str  # "arrays" (JAX) or "tensors"
    groups: dict[str, tuple[int, int]]
    containers: dict[str, Kept]


class Grown(NamedTuple):
    """What grew between two censuses: the growth or None, groups (largest first), holder."""

    growth: Growth | None = None
    groups: tuple[str, ...] = ()
    holder: Holder | None = None


def _live(model: Any, cheap_only: bool) -> tuple[dict[str, list[Any]], str] | None:
    from toolkit import backend

    try:
        live, kind, cheap = backend.get().live_tensors(cheap_only)
    except Exception:  # noqa: BLE001 - a census is a view
        return None
    if cheap_only and not cheap:
        return {}, kind
    own = _ids_of_model(model)
    groups: dict[str, list[Any]] = {}
    for a in live:
        if id(a) not in own:
            groups.setdefault(_shape_dtype(a)[0], []).append(a)
    return groups, kind


def _containers(owners: Sequence[Any]) -> dict[str, Kept]:
    """The non-empty lists, dicts, sets and deques in `owners`' attributes, by ``Owner.attr``."""
    import collections

    out: dict[str, Kept] = {}
    for owner in owners:
        for attr, value in list(getattr(owner, "__dict__", {}).items()):
            if not isinstance(value, list | dict | set | collections.deque) or not value:
                continue
            with contextlib.suppress(Exception):
                last = value[-1] if isinstance(value, list | collections.deque) else None
                if isinstance(value, dict):
                    last = next(reversed(value.values()))
                words = f"{type(owner).__name__}.{attr}"
                out[words] = Kept(
                    len(value), _item_words(last), _nbytes(last), Holder(words, owner, attr=attr)
                )
    return out


def census(model: Any, step: int, owners: Sequence[Any]) -> Census | None:
    """A count, taken after the first epoch's first steps and at their end (see :func:`grown`)."""
    found = _live(model, cheap_only=True)
    groups, kind = found if found is not None else ({}, "tensors")
    counted = {k: (len(v), sum(_shape_dtype(a)[1] for a in v)) for k, v in groups.items()}
    return Census(step, kind, counted, _containers(owners))


def grown(censuses: Sequence[Census]) -> Grown:
    """What grew between the censuses by about one a step, 8 at least (no cache filled once): a
    callback's or the model's container, else the group grown most by bytes; and all such groups."""
    if len(censuses) < 2 or censuses[1].step - censuses[0].step < 8:
        return Grown()
    a, b = censuses[0], censuses[1]
    steps = b.step - a.step
    least = max(8, 0.9 * steps)
    floor = GROWTH_FLOOR_MB * MB * steps / LONG_RUN_STEPS  # bytes that matter over a long run
    held = []
    for name, kept in b.containers.items():
        before = a.containers.get(name)
        more = kept.length - (before.length if before is not None else 0)
        if more >= least and more * kept.nbytes >= floor:
            held.append((more * kept.nbytes, more, name, kept))
    grew = []
    for key, (count, nbytes) in b.groups.items():
        before_group = a.groups.get(key, (0, 0))
        if count - before_group[0] >= least and nbytes - before_group[1] >= floor:
            grew.append((nbytes - before_group[1], count - before_group[0], key))
    grew.sort(reverse=True)
    keys = tuple(k for *_, k in grew)
    if held:
        added, more, name, kept = max(held, key=lambda h: h[:3])
        what = f"{more} {kept.words} more after {steps} steps"
        growth = Growth("steps", b.kind, round(added / MB, 6), steps, 0, what, name)
        return Grown(growth, keys, kept.holder)
    if not grew:
        return Grown()
    added, more, key = grew[0]
    what = f"{more} {b.kind} {key} more after {steps} steps"
    return Grown(Growth("steps", b.kind, round(added / MB, 6), steps, 0, what=what), keys)


def held_by(members: Sequence[Any]) -> Holder | None:
    """The list, dict or attribute holding `members`, with its owner (referrers, two levels up)."""
    ignore = {id(members)}
    for member in members:
        for container in gc.get_referrers(member):
            if id(container) in ignore:
                continue
            found = _attribute_of(container, member)  # an attribute of its own
            if found is None and isinstance(container, list | dict | tuple):
                found = _owner_of(container, ignore | {id(container)})
            if found is not None:
                return found
    return None


def _owner_of(container: Any, ignore: set[int]) -> Holder | None:
    for holder in gc.get_referrers(container):
        found = None if id(holder) in ignore else _attribute_of(holder, container)
        if found is not None:
            return found
    return None


def _attribute_of(ref: Any, target: Any) -> Holder | None:
    """The object whose attribute `target` is, from `ref`: its ``__dict__``, or itself (Python 3.11+
    keeps attributes inline). None for a frame, class, list or anything else."""
    import inspect

    if isinstance(ref, dict):
        owners = [o for o in gc.get_referrers(ref) if getattr(o, "__dict__", None) is ref]
        values = ref
    elif isinstance(ref, type | list | tuple) or inspect.isframe(ref):
        return None
    else:
        try:
            values, owners = vars(ref), [ref]
        except Exception:  # noqa: BLE001 - no __dict__ (slots, a builtin), or one that raises
            return None
    for owner in owners:
        attr = next((k for k, v in values.items() if v is target), None)
        if attr is not None:
            name = owner.__name__ if inspect.ismodule(owner) else type(owner).__name__
            return Holder(f"{name}.{attr}", owner, target)
    return None


def _holder(model: Any, grew: Sequence[str]) -> Holder | None:
    """Who holds the groups that grew (the largest first), found in a census taken now."""
    found = _live(model, cheap_only=False)
    if found is None:
        return None
    groups, _ = found
    for key in grew:
        members = groups.get(key, [])[-3:]
        owner = held_by(members) if members else None
        if owner is not None:
            return owner
    return None


def _largest_groups(model: Any, least: float) -> tuple[str | None, list[str]]:
    """With no count to compare: the live arrays' largest group now, in words, and the groups by
    bytes; none where the largest holds under `least` bytes (it cannot be what grew)."""
    found = _live(model, cheap_only=False)
    if not found or not found[0]:
        return None, []
    groups, kind = found
    sized = sorted(((sum(_shape_dtype(a)[1] for a in v), k) for k, v in groups.items()),
                   reverse=True)  # fmt: skip
    nbytes, key = sized[0]
    if nbytes < least:
        return None, []
    words = f"the most held: {len(groups[key])} {kind} {key} ({nbytes / MB:,.1f} MB)"
    return words, [k for _, k in sized[:3]]


def _python_holder(model: Any, least: float, steps: int) -> tuple[Holder, str] | None:
    """``(holder, what)`` for the largest list or deque, not the model's, of `least` bytes and an
    item about every other step (a generator keeping each NumPy batch), sized by its last 8."""
    import collections
    import itertools

    own, found = _ids_of_model(model), []
    for obj in gc.get_objects():
        # type(), not isinstance: __class__ warns on some objects (torch.distributed.reduce_op).
        if not issubclass(type(obj), list | collections.deque) or len(obj) < max(8, steps // 2):
            continue
        try:
            last = list(itertools.islice(reversed(obj), 8))
            if any(id(item) in own for item in last):
                continue
            total = sum(_nbytes(item) for item in last) / len(last) * len(obj)
        except Exception:  # noqa: BLE001 - a foreign object we cannot size: not the holder
            continue
        if total >= least:
            found.append((total, id(obj), obj, last[0]))
    for total, _, obj, item in sorted(found, key=lambda f: f[0], reverse=True):
        named = _named_holder(obj)
        if named is not None:
            size = f"{total / MB:,.1f} MB"
            return named, f"a {type(obj).__name__} of {len(obj):,} {_item_words(item)} ({size})"
    return None


def _named_holder(container: Any) -> Holder | None:
    """Who holds `container`: a function's or generator's local, an attribute, a global; or None."""
    import inspect

    for ref in gc.get_referrers(container):
        frame = ref.gi_frame if inspect.isgenerator(ref) else ref  # a frame, or a generator's
        if inspect.isframe(frame):
            var = next((k for k, v in frame.f_locals.items() if v is container), None)
            if var is not None:
                code = frame.f_code
                kind = "generator" if code.co_flags & inspect.CO_GENERATOR else "function"
                return Holder(f"{code.co_name}()'s local {var} (a {kind})", frame, container)
            continue
        found = _attribute_of(ref, container)
        if found is not None:
            return found
    return None


def name_growth(growth: list[Growth], model: Any, recompiles: int, found: Grown) -> list[Growth]:
    """Who holds what grew, and a known fix; a callback holding growth in the steps owns it."""
    import dataclasses

    if not growth:
        return growth
    growth = _one_rise(growth)
    counted = next((g for g in growth if g.what), None)
    owner: Holder | None = None
    if counted is not None and counted.held_by:
        owner = found.holder
    elif any(g.part == "steps" for g in growth):
        rise = max((g for g in growth if g.part == "steps"), key=lambda g: g.mb)
        least = max(GROWTH_FLOOR_MB, rise.mb / 4) * MB  # what could be the rise's holder
        what, keys = (None, list(found.groups)) if found.groups else _largest_groups(model, least)
        owner = _holder(model, keys) if keys else None
        if owner is None and what is None:
            found_python = _python_holder(model, least, rise.steps)
            if found_python is not None:
                owner, what = found_python
        counted = counted or (Growth("steps", "host", 0.0, 0, 0, what) if what else None)
    named = []
    for g in growth:
        what, holder, fix, part = g.what, None, None, g.part
        if g.part == "steps":
            what = what or (counted.what if counted else None)
            if owner is not None:
                holder = owner.words
                if _is_callback(owner.owner):
                    part = type(owner.owner).__name__  # the callback is where it grows
                fix = _fix_for(owner)
            elif recompiles >= 3:
                what = what or f"{recompiles} retraced programs"
                fix = "a retrace per batch keeps every program: see the ledger's recompile fix"
            elif getattr(model, "run_eagerly", False):
                fix = "run_eagerly=True: compile(run_eagerly=False) traces the step once"
        named.append(dataclasses.replace(g, part=part, what=what, held_by=holder, fix=fix))
    return named


def _is_callback(obj: Any) -> bool:
    return any(k.__name__ == "Callback" for k in type(obj).__mro__)


def _one_rise(growth: list[Growth]) -> list[Growth]:
    """A container counted growing and the readings' rise over the same steps are one growth: one
    entry, at the larger rate (the resident set counts what an item's estimate leaves out)."""
    import dataclasses

    counted = next((g for g in growth if g.what and g.held_by and g.part == "steps"), None)
    rise = next((g for g in growth if not g.what and g.part == "steps" and g.memory == "host"
                 and counted is not None and g.epoch == counted.epoch), None)  # fmt: skip
    if counted is None or rise is None:
        return growth
    merged = counted  # its steps kept: its words count over them
    if counted.steps and (counted.per_1k_steps or 0.0) < (rise.per_1k_steps or 0.0):
        mb = round((rise.per_1k_steps or 0.0) * counted.steps / 1000.0, 6)
        merged = dataclasses.replace(counted, mb=mb)
    return [merged if g is counted else g for g in growth if g is not rise]


def _fix_for(holder: Holder) -> str:
    """What to do about `holder` keeping an item each step (Keras's tensors, or anything else)."""
    import inspect

    if inspect.isframe(holder.owner):
        return f"{holder.words} grows each step: keep only what you need, or drop it"
    kept = holder.container()
    with contextlib.suppress(Exception):
        last = next(reversed(kept.values())) if isinstance(kept, dict) else kept[-1]
        values = list(last.values()) if isinstance(last, dict) else [last]
        if _is_callback(holder.owner) and any(_is_tensor(v) for v in values):
            return (f"{holder.words} keeps a tensor each batch: keep floats (float(value)) or "
                    "numpy copies, or empty it each epoch")  # fmt: skip
    return (f"{holder.words} keeps an item each step: keep only what you need, or empty it "
            "each epoch")  # fmt: skip


# ---------------------------------------------------------------------------- the record


def _growth(
    readings: Sequence[Reading],
    where: _Where,
    epochs: Sequence[Any],
    validations: Sequence[Any],
    censuses: Sequence[Census],
    traced: Sequence[tuple[int, int]],
) -> tuple[list[Growth], Grown]:
    """The readings' growth after the censuses' (first: it names what grew), and the latter."""
    found = find_growth(readings, where, epochs, validations, traced)
    counted = grown(censuses)
    return ([counted.growth] if counted.growth else []) + found, counted


def run_memory(
    sampler: MemorySampler,
    start: float,
    tiles: Sequence[Any],
    over: Sequence[Overlay],
    epochs: Sequence[Any],
    validations: Sequence[Any],
    name: Callable[[list[Growth], Grown], list[Growth]],
    ends: Sequence[EpochMemory],
    traced: Sequence[tuple[int, int]] = (),
) -> RunMemory | None:
    """The fit's memory record from `sampler`'s readings and the ledger's tiles; `name` names the
    holder; `ends`: train begin's and epoch ends' readings; `traced`: the profiler's steps."""
    readings = sampler.snapshot()
    if not readings:
        return None
    where = _Where(tiles, over)
    parts, callbacks = parts_memory(readings, where, tiles)
    peaks = _peaks(readings)
    step = max(1, math.ceil(len(readings) / TIMELINE_POINTS))
    timeline = tuple(
        Sample(round(r.at - start, 4), r.step, round(r.host_mb, 2), _r(r.device_mb),
               "callbacks" if where(r.at)[1] else where(r.at)[0])
        for r in readings[::step]
    )  # fmt: skip
    return RunMemory(
        every_s=sampler.every_s,
        parts=parts,
        callbacks=callbacks,
        devices=sampler.devices,
        device_unseen=sampler.device_unseen,
        host_peak_mb=_r(_max([p[0] for p in peaks])),
        device_peak_mb=_r(_max([p[1] for p in peaks])),
        host_start_mb=_r(readings[0].host_mb),
        growth=tuple(name(*_growth(readings, where, epochs, validations, sampler.censuses, traced)))
        + tuple(epochs_growth(ends)),
        timeline=timeline,
        readings=len(readings),
        epochs=tuple(ends),
    )
