"""The cluster from its workers' figures: examples/s, slowest worker, spread, straggler; one line
and one table. What ``keras-perf merge`` shows and what a data-parallel chief reports. Records
built where measured, rendered at the edge."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.core import _fields as fields
from toolkit.core import terminal


@dataclasses.dataclass(frozen=True)
class WorkerRow(fields.Record):
    """A worker's (or process's) figures at the end; `weights`: its weights' fingerprint."""

    task_index: int | None = fields.field(missing=None)
    is_chief: bool | None = fields.field(missing=None)
    status: str
    steps: int
    p50_ms: float | None = fields.field(missing=None)
    examples_per_sec: float | None = fields.field(missing=None)
    weights: str | None = fields.field(None, omit=fields.omit_none)


def _workers(rows: Any, where: str) -> tuple[WorkerRow, ...]:
    if not isinstance(rows, list) or not all(isinstance(w, Mapping) for w in rows):
        raise ValueError(f"its workers are {type(rows).__name__}, not a list of records")
    return tuple(WorkerRow.from_dict(w, f"{where}[{i}]") for i, w in enumerate(rows))


@dataclasses.dataclass(frozen=True)
class ClusterView(fields.Record):
    """The cluster: workers, examples/s (the slowest's), slowest, spread, straggler (>1.2×)."""

    WHERE = "cluster"

    workers: tuple[WorkerRow, ...] = fields.field(read=_workers)
    num_workers: int = fields.field(missing=0)  # 0: as many as its workers
    cluster_examples_per_sec: float | None = fields.field(missing=None)
    slowest: int | None = fields.field(missing=None)
    spread: float | None = fields.field(missing=None)
    straggler: int | None = fields.field(missing=None)
    all_complete: bool | None = fields.field(None, omit=fields.omit_none)
    process_index: int | None = fields.field(None, omit=fields.omit_none)
    same_weights: bool | None = fields.field(None, omit=fields.omit_none)

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> ClusterView | None:
        """report.json's ``cluster`` (docs/report.md; None: none), each field checked."""
        if not isinstance(d, Mapping):
            return None
        view = super().from_dict(d, where)
        return dataclasses.replace(view, num_workers=view.num_workers or len(view.workers))

    def table(self) -> terminal.Table:
        """The workers as a table: a terminal's, or a ``.md`` file's (``.markdown()``)."""
        rows = [
            (
                w.task_index, "yes" if w.is_chief else "", w.status, w.steps,
                f"{w.p50_ms:.2f}" if w.p50_ms else "n/a",
                f"{w.examples_per_sec:,.1f}" if w.examples_per_sec else "n/a",
            )
            for w in self.workers
        ]  # fmt: skip
        heads = ("worker", "chief", "status", "steps", "p50 ms", "examples/s")
        return terminal.Table.of(heads, rows, right=(3, 4, 5))


def cluster_view(rows: Sequence[WorkerRow]) -> ClusterView:
    """The cluster from its workers' rows: its examples/s is the *slowest* worker's (synchronous
    training goes at the last replica's pace); spread: the slowest median step over the fastest."""
    rows = sorted(rows, key=lambda r: (r.task_index is None, r.task_index or 0))
    rates = [r.examples_per_sec for r in rows if r.examples_per_sec]
    p50s = [r.p50_ms for r in rows if r.p50_ms]
    straggler = slowest = None
    if len(p50s) > 1:
        worst = max(rows, key=lambda r: r.p50_ms or 0)
        slowest = worst.task_index
        others = sorted(p for p in p50s if p != worst.p50_ms) or p50s
        if (worst.p50_ms or 0) > 1.2 * others[len(others) // 2]:
            straggler = slowest
    return ClusterView(
        tuple(rows), len(rows), min(rates) if rates else None, slowest,
        max(p50s) / min(p50s) if len(p50s) > 1 else None, straggler,
    )  # fmt: skip


def render_cluster(view: ClusterView, unit: str = "worker") -> list[terminal.Block]:
    """The workers' table and the cluster's line, for ``terminal.show`` or ``terminal.markdown``."""
    return [view.table(), "", cluster_line(view, unit)]


def cluster_line(view: ClusterView, unit: str = "worker") -> str:
    """One line: the workers (or `unit`s), the cluster's examples/s, the slowest one, the spread."""
    rate = view.cluster_examples_per_sec
    many = f"{unit}es" if unit.endswith("s") else f"{unit}s"
    line = f"cluster: {view.num_workers} {many}"
    line += f", {f'{rate:,.1f}' if rate else 'n/a'} examples/s (the slowest {unit}'s pace)"
    if view.slowest is not None and view.spread:
        line += f"; slowest: {unit} {view.slowest}, median step {view.spread:.2f}× the fastest's"
    if view.straggler is not None:
        line += f"; straggler: {unit} {view.straggler}"
    return line
