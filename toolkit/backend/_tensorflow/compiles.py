"""TensorFlow's compiles, for the ledger: the traced functions' tracing counts (Keras 3's inner
``tf.function``s, tf_keras's train function), read at epoch and validation ends without a sync: a
retrace is timed as its epoch's slowest execution's excess; its cause and the input go unseen."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolkit.backend._common import CompileEvent, CompileWatch


def _traced(fn: Any) -> list[Any]:
    """The ``tf.function``s behind a Keras function: itself (tf_keras), or those it closes over."""
    if fn is None:
        return []
    if hasattr(fn, "experimental_get_tracing_count"):
        return [fn]
    found = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        inner = getattr(value, "__wrapped__", value)  # Keras's optional-converting wrapper
        if hasattr(inner, "experimental_get_tracing_count"):
            found.append(inner)
    return found


def _count(fns: list[Any]) -> int:
    total = 0
    for f in fns:
        try:
            total += int(f.experimental_get_tracing_count())
        except Exception:  # noqa: BLE001 - a function TensorFlow has let go of
            continue
    return total


class TracingCounts(CompileWatch):
    """Each Keras function's tracing count at the ledger's polls, from the end of its first call
    (Keras 3 traces its step twice there); every later trace is a retrace."""

    signal = "TensorFlow: the traced functions' tracing counts, read at each epoch's end"
    input_seen = ""

    def __init__(self, model: Any = None, clock: Callable[[], float] | None = None) -> None:
        super().__init__(model, clock)
        self._seen: dict[str, int] = {}  # function -> its tracing count after its first call
        self._held: dict[str, list[Any]] = {}  # function -> its tf.functions
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    def _wrap(self, name: str, attr: str) -> None:
        fn = getattr(self.model, attr, None)
        if fn is None or attr in self._wrapped or getattr(fn, "_toolkit_watched", False):
            return
        traced = _traced(fn)
        if not traced:
            return
        self._held[name] = traced
        if _count(traced):  # called before this fit: counted from now
            self._seen[name] = _count(traced)
            return

        def watched(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                if name not in self._seen:  # the first call's traces are the first call's
                    self._seen[name] = _count(traced)

        watched._toolkit_watched = True  # type: ignore[attr-defined]
        setattr(self.model, attr, watched)
        self._wrapped[attr] = (fn, watched)

    def start(self) -> None:
        self._wrap("train", "train_function")

    def test_begin(self) -> None:
        self._wrap("evaluate", "test_function")

    def poll(self, where: str) -> None:
        for name, traced in self._held.items():
            if name not in self._seen:
                continue
            count = _count(traced)
            new, self._seen[name] = count - self._seen[name], count
            for _ in range(max(0, new)):
                self.events.append(CompileEvent(name, where=where))

    def stop(self) -> None:
        for attr, (original, wrapper) in self._wrapped.items():
            if getattr(self.model, attr, None) is wrapper:
                setattr(self.model, attr, original)
        self._wrapped = {}
