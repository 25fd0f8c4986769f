"""JAX's compiles, for the ledger: ``jax.monitoring``'s events, and each batch read timed.

JAX reports every trace, lowering and compile as an event on the asking thread; one process-wide
listener hands each to the fits watched, stamped on arrival, its cause read from the batch's shapes
against the last compile's. Wrapping the train function's iterator times each read (no sync)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from toolkit.backend._common import CompileEvent, CompileWatch, shape_change

# The phases of one compile, each its own event, one after the other.
PHASES = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
_watching: list[JaxCompiles] = []
_registered = threading.Lock()
_listening = [False]


def _on_event(event: str, seconds: float, **_: Any) -> None:
    if event not in PHASES or not _watching:
        return
    now = time.perf_counter()
    for watch in list(_watching):
        watch._event(event, seconds, now)


def _listen() -> None:
    with _registered:
        if _listening[0]:
            return
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(_on_event)
        _listening[0] = True


def signature(batch: Any) -> tuple[tuple[tuple[int, ...], str], ...] | None:
    """The ``((shape, dtype), ...)`` of a batch's arrays (what JAX compiles for)."""
    try:
        import jax

        leaves = jax.tree_util.tree_leaves(batch)
    except Exception:  # noqa: BLE001 - not a tree JAX reads
        return None
    return tuple(
        (tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x).__name__))) for x in leaves
    )


class _TimedBatches:
    """An iterator's ``next`` timed; keeps the last batch for a compile's cause."""

    def __init__(self, it: Iterator[Any], spans: list[tuple[float, float]] | None) -> None:
        self._it, self._spans, self.last = it, spans, None

    def __iter__(self) -> _TimedBatches:
        return self

    def __next__(self) -> Any:
        clock = time.perf_counter
        t0 = clock()
        batch = next(self._it)
        if self._spans is not None:
            self._spans.append((t0, clock() - t0))
        self.last = batch
        return batch


class JaxCompiles(CompileWatch):
    """JAX: compile events as they happen, and each training batch's read timed."""

    signal = "JAX: jax.monitoring's compile events (trace, lowering, XLA compile)"
    input_seen = "inside"

    def __init__(self, model: Any = None, clock: Callable[[], float] | None = None) -> None:
        super().__init__(model, clock)
        self._wrapped: dict[str, tuple[Any, Any]] = {}  # attr -> (original, wrapper)
        self._current: tuple[str, _TimedBatches] | None = None  # the function running now
        self._last_sig: dict[str, Any] = {}
        self._pending: CompileEvent | None = None  # the compile being reported, phase by phase

    def _event(self, phase: str, seconds: float, now: float) -> None:
        if threading.get_ident() != self._thread:
            return  # another thread's compile: not this fit's
        current = self._current
        function = current[0] if current is not None else None
        pending = self._pending
        if pending is not None and phase != PHASES[0] and pending.function == function:
            pending.seconds = (pending.seconds or 0.0) + seconds  # a later phase of one compile
            pending.at = now
            return
        cause = None
        if current is not None:
            sig = signature(current[1].last)
            cause = shape_change(self._last_sig.get(function), sig)
            self._last_sig[function] = sig
        self._pending = CompileEvent(function, now, seconds, cause)
        self.events.append(self._pending)

    def _wrap(self, attr: str, function: str, timed: bool) -> None:
        fn = getattr(self.model, attr, None)
        if fn is None or attr in self._wrapped:
            return
        spans = self.input_spans if timed else None

        def watched(state: Any, iterator: Any, *args: Any, **kwargs: Any) -> Any:
            batches = _TimedBatches(iter(iterator), spans)
            self._current = (function, batches)
            try:
                return fn(state, batches, *args, **kwargs)
            finally:
                self._current = None
                self._pending = None
                if function not in self._last_sig:
                    # The first call's shapes (even if nothing compiled): a later cause's baseline
                    self._last_sig[function] = signature(batches.last)

        watched._toolkit_watched = True  # type: ignore[attr-defined]
        setattr(self.model, attr, watched)
        self._wrapped[attr] = (fn, watched)

    def start(self) -> None:
        self._thread = threading.get_ident()
        try:
            _listen()
        except Exception:  # noqa: BLE001 - a JAX without monitoring: first calls only
            self.signal = CompileWatch.signal
        _watching.append(self)
        self._wrap("train_function", "train", timed=True)

    def test_begin(self) -> None:
        self._wrap("test_function", "evaluate", timed=False)

    def stop(self) -> None:
        if self in _watching:
            _watching.remove(self)
        for attr, (original, wrapper) in self._wrapped.items():
            if getattr(self.model, attr, None) is wrapper:  # not rebuilt by Keras since
                setattr(self.model, attr, original)
        self._wrapped = {}
