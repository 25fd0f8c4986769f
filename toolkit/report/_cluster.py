"""The cluster from its workers' figures: the cluster's examples/s, the slowest worker, the
spread, the straggler; one line and one table of them. What ``keras-perf merge`` shows for the
workers' reports (``toolkit.report.merge``) and what the chief of a data-parallel run reports
from the figures every process sent it (``RunReport.cluster``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["cluster_line", "cluster_view", "render_cluster"]


def cluster_view(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The cluster from its workers' rows (``task_index``, ``is_chief``, ``status``,
    ``steps``, ``p50_ms``, ``examples_per_sec``; more are kept): the workers' reports merged
    (:func:`merge_reports`), or the figures every process of a data-parallel run sent its
    chief when training ended (``toolkit.runner.session``).

    Each worker counts the global batch per step (what the whole cluster trained), so the
    cluster's examples/sec is the *slowest* worker's (synchronous training goes at the pace
    of the last replica to finish a step); the spread is the slowest median step over the
    fastest, and a worker much slower than the others is named as the straggler.
    """
    rows = sorted(rows, key=lambda r: (r["task_index"] is None, r["task_index"]))
    rates = [r["examples_per_sec"] for r in rows if r["examples_per_sec"]]
    p50s = [r["p50_ms"] for r in rows if r["p50_ms"]]
    straggler = slowest = None
    if len(p50s) > 1:
        worst = max(rows, key=lambda r: r["p50_ms"] or 0)
        slowest = worst["task_index"]
        others = sorted(p for p in p50s if p != worst["p50_ms"]) or p50s
        if worst["p50_ms"] > 1.2 * others[len(others) // 2]:
            straggler = slowest
    return {
        "workers": list(rows),
        "num_workers": len(rows),
        "cluster_examples_per_sec": min(rates) if rates else None,
        "slowest": slowest,
        "spread": max(p50s) / min(p50s) if len(p50s) > 1 else None,
        "straggler": straggler,
    }


def render_cluster(merged: dict[str, Any]) -> str:
    """A Markdown table of :func:`cluster_view`'s result, and its :func:`cluster_line`."""
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
    lines.append("")
    lines.append(cluster_line(merged))
    return "\n".join(lines)


def cluster_line(merged: dict[str, Any], unit: str = "worker") -> str:
    """One line: the workers (or processes: `unit`), the cluster's examples/s, the slowest
    one and the spread."""
    rate = merged["cluster_examples_per_sec"]
    line = (
        f"cluster: {merged['num_workers']} {unit}es"
        if unit.endswith("s")
        else f"cluster: {merged['num_workers']} {unit}s"
    )
    line += f", {f'{rate:,.1f}' if rate else 'n/a'} examples/s (the slowest {unit}'s pace)"
    if merged.get("slowest") is not None and merged.get("spread"):
        line += (
            f"; slowest: {unit} {merged['slowest']}, median step {merged['spread']:.2f}× the "
            "fastest's"
        )
    if merged["straggler"] is not None:
        line += f"; straggler: {unit} {merged['straggler']}"
    return line
