"""The report's step-time chart (``steps.png``), drawn with matplotlib (the ``[report]``
extra, imported only here and only when a chart is drawn)."""

from __future__ import annotations

import io
from typing import Any

from toolkit.core.stats import format_ms

__all__: list[str] = []


def steps_png(report: Any) -> bytes:
    """``RunReport.plot_png``'s chart of `report` (a RunReport: its timeline and step
    statistics), as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(11, 4.2), dpi=100)
    ax_t, ax_h = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
    styles = {  # kind: (label, marker, size, colour)
        "timed": ("timed", ".", 3, "tab:blue"),
        "warmup": ("warm-up (left out)", "o", 5, "tab:orange"),
        "excluded": ("profiled (left out)", "X", 7, "tab:red"),
    }
    per = report.steps.steps_per_execution  # > 1: a dot is a call of several steps
    x, epoch, bounds = 0, None, []
    series: dict[str, tuple[list[int], list[float]]] = {k: ([], []) for k in styles}
    for seconds, steps, at, kind in report.timeline:
        if epoch is not None and at != epoch:
            bounds.append(x)  # an epoch ends after step x
        epoch = at
        x += steps
        if kind in series:
            series[kind][0].append(x)
            series[kind][1].append(seconds / steps * 1e3)
    for kind, (xs, ys) in series.items():
        if xs:
            label, marker, size, colour = styles[kind]
            small = kind == "timed" and len(xs) > 500
            ax_t.plot(
                xs, ys, marker, ms=2 if small else size, color=colour,
                label=f"{label}{' calls' if per > 1 else ''}: {len(xs):,}",
                zorder=3 if kind != "timed" else 2,
            )  # fmt: skip
    if report.steps.p50_s:
        p50 = report.steps.p50_s * 1e3
        ax_t.axhline(p50, color="k", lw=0.8, ls="--", label=f"p50 {p50:.3g} ms")
    for n, at in enumerate(bounds):  # where each epoch ends (validation, the data's start)
        label = f"epoch ends ({len(bounds) + 1} epochs)" if n == 0 else None
        ax_t.axvline(at, color="0.6", lw=0.6, ls=":", zorder=1, label=label)
    ax_t.set_xlabel("training step")
    ax_t.set_ylabel("ms per step" + (f" (a dot: one call of up to {per} steps)" if per > 1 else ""))
    ax_t.xaxis.set_major_locator(MaxNLocator(integer=True))
    first = report.steps.first_step_s
    left_out = f"\n(the first call, {format_ms(first)} with compiling, is left out)"
    title = f"{report.name}: time per training step{left_out if first else ''}"
    ax_t.set_title(title, fontsize=10)
    if ax_t.get_legend_handles_labels()[0]:  # a run stopped before its first step has none
        ax_t.legend(loc="upper right", fontsize=8)
    timed = series["timed"][1]
    if timed:
        bins = min(60, max(5, len(timed) // 10)) if len(timed) >= 20 else max(1, len(timed))
        ax_h.hist(timed, bins=bins, color="tab:blue")
        for q, val, style in (
            ("p50", report.steps.p50_s, "--"),
            ("p90", report.steps.p90_s, ":"),
            ("p99", report.steps.p99_s, "-."),
        ):
            if val:
                label = f"{q} {val * 1e3:.3g} ms"
                ax_h.axvline(val * 1e3, color="k", lw=0.8, ls=style, label=label)
        ax_h.legend(fontsize=8)
    ax_h.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_h.set_xlabel("ms per step")
    what = "calls" if per > 1 else "steps"  # one value per call: a fused call is one
    ax_h.set_ylabel(f"timed {what}")
    of = f" ({report.steps.timed_steps:,} steps)" if per > 1 else ""
    ax_h.set_title(f"spread of the {len(timed):,} timed {what}{of}", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
