"""Throughput of an input pipeline alone: examples/sec, first batch apart, per-batch spread."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from toolkit.core import _fields as fields
from toolkit.core import progress
from toolkit.core.stats import StepStats, format_ms, summarize
from toolkit.data.builder import infer_batch_size

__all__: list[str] = []  # offered through toolkit.data


@dataclasses.dataclass(frozen=True)
class PipelineBenchmark(fields.Record):
    """What :func:`benchmark` measured; ``to_dict()`` embeds it in a RunReport's ``extra``.

    Attributes:
        num_batches: batches timed after the first.
        examples_per_sec: when the batch size is known."""

    num_batches: int
    first_batch_s: float
    total_s: float
    batches_per_sec: float
    examples_per_sec: float | None
    batch_size: int | None
    batches: StepStats

    def __str__(self) -> str:
        eps = f"{self.examples_per_sec:,.0f} examples/s, " if self.examples_per_sec else ""
        b = self.batches
        return (
            f"pipeline: {eps}{self.batches_per_sec:,.1f} batches/s over {self.num_batches} "
            f"batches; first batch {format_ms(self.first_batch_s)}; per batch p50 "
            f"{format_ms(b.p50_s)}, p90 {format_ms(b.p90_s)}, p99 {format_ms(b.p99_s)}"
        )


def benchmark(
    dataset: Any,
    num_batches: int = 200,
    batch_size: int | None = None,
    *,
    verbose: bool = True,
    progress_after_s: float = 2.0,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> PipelineBenchmark:
    """Iterates `dataset` alone (no model) and times its batches: the first apart, then
    `num_batches` one by one, with a progress bar on a terminal past `progress_after_s`.

    Args:
        dataset: a batched `tf.data.Dataset` (or any iterable of batches).
        batch_size: examples per batch (default: read from the dataset).
        verbose: print the summary line, and a progress bar on a terminal.

    Raises:
        ValueError: `num_batches` < 1, or the dataset ends before the first batch."""
    if num_batches < 1:
        raise ValueError(f"num_batches: must be >= 1, got {num_batches}")
    if batch_size is None:
        batch_size = infer_batch_size(dataset)
    t0 = clock()
    iterator = iter(dataset)
    try:
        next(iterator)
    except StopIteration:
        raise ValueError("dataset: produced no batch at all; is it empty?") from None
    t_prev = first_end = clock()
    durations: list[float] = []
    bar = progress.bar(
        num_batches, "pipeline alone", "batch", enabled=verbose, delay=progress_after_s
    )
    for _ in range(num_batches):
        try:
            next(iterator)
        except StopIteration:
            break
        now = clock()
        durations.append(now - t_prev)
        t_prev = now
        bar.update()
    bar.close()
    if not durations:
        raise ValueError("dataset: ended after its first batch; time more data or repeat()")
    stats = summarize(durations, batch_size=batch_size)
    total = sum(durations)
    result = PipelineBenchmark(
        num_batches=len(durations),
        first_batch_s=first_end - t0,
        total_s=total,
        batches_per_sec=len(durations) / total if total > 0 else float("inf"),
        examples_per_sec=(batch_size * len(durations) / total) if batch_size and total else None,
        batch_size=batch_size,
        batches=stats,
    )
    if verbose:
        print(result, file=stream or sys.stdout)
    return result
