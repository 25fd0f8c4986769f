"""merge_reports(): the workers' reports of one multi-worker run, side by side.

Reads only the reports (each worker's RunContext says which worker it was): no framework is
imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit.report.run_report import COMPLETE, RunReport

__all__ = ["merge_reports", "render_merged"]


def merge_reports(reports: Sequence[RunReport]) -> dict[str, Any]:
    """The workers' reports of one multi-worker run, side by side.

    Each worker's StepTimer counts the global batch per step (what the whole cluster trained),
    so the cluster's examples/sec is the *slowest* worker's (synchronous training goes at the
    pace of the last replica to finish a step), and a worker much slower than the others is
    named as the straggler.

    Args:
        reports: the workers' reports (load them with ``RunReport.load``).

    Raises:
        ValueError: reports that are not the workers of one cluster's run (no cluster record,
            different clusters or runs, or one worker twice), naming what differs.
    """
    _check_one_cluster(reports)
    rows = []
    for report in reports:
        cluster = report.context.cluster if report.context is not None else None
        rows.append(
            {
                "task_index": cluster.task_index if cluster else None,
                "is_chief": cluster.is_chief if cluster else None,
                "status": report.status,
                "steps": report.steps.total_steps,
                "p50_ms": (report.steps.p50_s or 0) * 1e3 or None,
                "examples_per_sec": report.steps.examples_per_sec,
            }
        )
    rows.sort(key=lambda r: (r["task_index"] is None, r["task_index"]))
    rates = [r["examples_per_sec"] for r in rows if r["examples_per_sec"]]
    p50s = [r["p50_ms"] for r in rows if r["p50_ms"]]
    straggler = None
    if len(p50s) > 1:
        slowest = max(rows, key=lambda r: r["p50_ms"] or 0)
        others = sorted(p for p in p50s if p != slowest["p50_ms"]) or p50s
        if slowest["p50_ms"] > 1.2 * others[len(others) // 2]:
            straggler = slowest["task_index"]
    return {
        "workers": rows,
        "num_workers": len(rows),
        "cluster_examples_per_sec": min(rates) if rates else None,
        "straggler": straggler,
        "all_complete": all(r["status"] == COMPLETE for r in rows),
    }


def _check_one_cluster(reports: Sequence[RunReport]) -> None:
    clusters = [r.context.cluster if r.context is not None else None for r in reports]
    if any(c is None or len(c.workers) < 2 for c in clusters):
        alone = [
            r.name
            for r, c in zip(reports, clusters, strict=True)
            if c is None or len(c.workers) < 2
        ]
        raise ValueError(
            f"merge: {', '.join(alone)} ran on one machine, not as a worker of a cluster: merge "
            "takes the reports of one multi-worker run (--worker_hosts)"
        )
    hosts = {tuple(c.workers) for c in clusters}
    names = {r.name for r in reports}
    if len(hosts) > 1 or len(names) > 1:
        raise ValueError(
            f"merge: these reports come from different runs ({len(names)} run names, "
            f"{len(hosts)} clusters): give the workers' reports of one run"
        )
    indices = [c.task_index for c in clusters]
    if len(set(indices)) < len(indices):
        raise ValueError(f"merge: worker {max(indices, key=indices.count)} is given twice")


def render_merged(merged: dict[str, Any]) -> str:
    """A Markdown table of :func:`merge_reports`' result."""
    lines = [
        "| worker | chief | status | steps | p50 ms | examples/s |",
        "|---|---|---|---|---|---|",
    ]
    for r in merged["workers"]:
        rate = f"{r['examples_per_sec']:,.1f}" if r["examples_per_sec"] else "n/a"
        p50 = f"{r['p50_ms']:.2f}" if r["p50_ms"] else "n/a"
        lines.append(
            f"| {r['task_index']} | {'yes' if r['is_chief'] else ''} | {r['status']} | "
            f"{r['steps']} | {p50} | {rate} |"
        )
    rate = merged["cluster_examples_per_sec"]
    lines.append("")
    lines.append(
        f"cluster: {merged['num_workers']} workers, "
        f"{f'{rate:,.1f}' if rate else 'n/a'} examples/s (the slowest worker's pace)"
        + (f"; straggler: worker {merged['straggler']}" if merged["straggler"] is not None else "")
    )
    return "\n".join(lines)
