"""merge_reports(): the workers' reports of one multi-worker run, side by side. Reads only the
reports (each worker's RunContext says which worker it was): no framework is imported."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.core import terminal
from toolkit.report._cluster import ClusterView, WorkerRow, cluster_view, render_cluster
from toolkit.report.run_report import COMPLETE, RunReport

__all__: list[str] = []  # offered through toolkit.report


def merge_reports(reports: Sequence[RunReport]) -> ClusterView:
    """The workers' reports of one multi-worker run, side by side (:func:`cluster_view`).

    Raises:
        ValueError: not one run's workers (no cluster record, another run, a worker twice)."""
    _check_one_cluster(reports)
    rows = []
    for report in reports:
        cluster = report.context.cluster if report.context is not None else None
        rows.append(
            WorkerRow(
                task_index=cluster.task_index if cluster else None,
                is_chief=cluster.is_chief if cluster else None,
                status=report.status,
                steps=report.steps.total_steps,
                p50_ms=(report.steps.p50_s or 0) * 1e3 or None,
                examples_per_sec=report.steps.examples_per_sec,
            )
        )
    merged = cluster_view(rows)
    return dataclasses.replace(merged, all_complete=all(r.status == COMPLETE for r in rows))


def render_merged(merged: ClusterView | Mapping[str, Any]) -> str:
    """:func:`merge_reports`' result as Markdown: the workers' table and the cluster's line."""
    view = merged if isinstance(merged, ClusterView) else ClusterView.from_dict(merged)
    return terminal.markdown(render_cluster(view))


def _check_one_cluster(reports: Sequence[RunReport]) -> None:
    clusters = [r.context.cluster if r.context is not None else None for r in reports]
    if any(c is None or c.num_workers < 2 for c in clusters):
        alone = [
            r.name for r, c in zip(reports, clusters, strict=True) if c is None or c.num_workers < 2
        ]
        raise ValueError(
            f"merge: {', '.join(alone)} ran on one machine, not as a worker of a cluster: merge "
            "takes the reports of one multi-worker run (--worker_hosts)"
        )
    hosts = {(tuple(c.workers), c.num_workers) for c in clusters}
    names = {r.name for r in reports}
    if len(hosts) > 1 or len(names) > 1:
        raise ValueError(
            f"merge: these reports come from different runs ({len(names)} run names, "
            f"{len(hosts)} clusters): give the workers' reports of one run"
        )
    indices = [c.task_index for c in clusters]
    if len(set(indices)) < len(indices):
        raise ValueError(f"merge: worker {max(indices, key=indices.count)} is given twice")
