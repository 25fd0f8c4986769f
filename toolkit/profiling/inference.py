"""Inference latency and throughput of a compiled model function: latency times every call on its
own including the read-back (a request waits for its answer); throughput issues ``runs`` calls
back to back and reads once. Both leave out the first call (reported apart) and `warmup` more."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core.stats import StepStats, summarize

__all__ = [
    "InferenceTiming",
    "measure_inference",
]


@dataclasses.dataclass(frozen=True)
class InferenceTiming(fields.Record):
    """Latency statistics (per call, synced) and sustained throughput of one input shape."""

    EXTRA = ("examples_per_sec",)

    batch_size: int
    latency: StepStats
    throughput_calls: int
    throughput_s: float

    @property
    def examples_per_sec(self) -> float:
        return self.batch_size * self.throughput_calls / self.throughput_s


def _materialize(result: Any) -> None:
    import tensorflow as tf

    for t in tf.nest.flatten(result):
        t.numpy()


def measure_inference(
    fn: Callable[[Any], Any],
    inputs: Any,
    *,
    batch_size: int,
    warmup: int = 5,
    runs: int = 30,
    clock: Callable[[], float] = time.perf_counter,
) -> InferenceTiming:
    """Latency of `runs` single synced calls and throughput of `runs` back-to-back calls.

    Args:
        fn: the function to time (usually a ``tf.function`` of the model).
        inputs: its argument; the same tensor every call.
        warmup: calls after the first left out.
        runs: timed calls for each of latency and throughput."""
    if runs < 1 or warmup < 0:
        raise ValueError(f"runs must be >= 1 and warmup >= 0, got {runs} and {warmup}")
    start = clock()
    _materialize(fn(inputs))
    first = clock() - start
    for _ in range(warmup):
        _materialize(fn(inputs))
    durations = []
    for _ in range(runs):
        start = clock()
        _materialize(fn(inputs))
        durations.append(clock() - start)
    start = clock()
    results = [fn(inputs) for _ in range(runs)]
    _materialize(results)
    throughput_s = clock() - start
    latency = summarize(
        durations,
        batch_size=batch_size,
        first_step_s=first,
        first_step_steps=1,
        warmup_steps=warmup,
    )
    return InferenceTiming(batch_size, latency, runs, throughput_s)
