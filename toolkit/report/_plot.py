"""The report's step-time chart (``steps.png``), drawn with matplotlib (the ``[report]``
extra, imported only here and only when a chart is drawn)."""

from __future__ import annotations

import io
from typing import Any

from toolkit.core.stats import format_ms

COLOURS = {  # one colour per part of the ledger, the same in every picture
    "start-up": "tab:gray",
    "compile": "tab:red",
    "steps": "tab:blue",
    "input": "tab:orange",
    "validation": "tab:green",
    "callbacks": "tab:purple",
    "exit": "tab:brown",
    "other": "0.8",
}


def ledger_bar(ax: Any, ledger: Any) -> None:
    """The ledger as a stacked bar on `ax`: parts labelled where wide enough, all in its legend."""
    from toolkit.core.stats import format_s
    from toolkit.report._ledger import bar_segments

    wall = ledger.wall_s
    left = 0.0
    for label, seconds, pct in bar_segments(ledger):
        share = seconds / wall if wall else 0.0
        ax.barh(
            0, seconds, left=left, color=COLOURS.get(label, "0.5"), edgecolor="white",
            label=f"{label} {format_s(seconds)} ({pct}%)",  # as the table rounds it
        )  # fmt: skip
        if share >= 0.08:
            ax.text(left + seconds / 2, 0, label, ha="center", va="center", fontsize=8,
                    color="white" if label not in ("other",) else "black")  # fmt: skip
        left += seconds
    ax.set_xlim(0, max(wall, left) or 1.0)
    ax.set_yticks([])
    whole = "the fit call" if ledger.timed_call else "the fit from train begin"
    ax.set_xlabel(f"seconds of {whole}, each part's added up (not in time order)")
    partial = " (partial: the fit stopped early)" if ledger.partial else ""
    n = ledger.recompiles
    recompiles = f", {n} recompile{'s' if n != 1 else ''}" if n else ""
    ax.set_title(f"where the fit's {format_s(wall)} went{partial}{recompiles}", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.55), ncol=4, fontsize=8,
              frameon=False)  # fmt: skip


def ledger_png(ledger: Any, name: str) -> bytes:
    """The ledger's bar alone, as PNG bytes (TensorBoard's Images tab shows it)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 2.5), dpi=100)
    ledger_bar(fig.add_axes((0.03, 0.48, 0.94, 0.3)), ledger)  # its legend goes below
    fig.suptitle(name, fontsize=10, x=0.01, ha="left")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def steps_png(report: Any) -> bytes:
    """``RunReport.plot_png``'s chart: the steps over the run, their spread, the ledger's bar."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    ledger = getattr(report, "ledger", None)
    memory = getattr(ledger, "memory", None) if ledger else None
    if memory is not None and len(memory.timeline) < 2:
        memory = None
    if ledger and ledger.wall_s:
        rows = [4.2, 2.2, 1.4] if memory is not None else [4.2, 1.4]
        fig = Figure(figsize=(11, 5.6 + (2.4 if memory is not None else 0)), dpi=100)
        grid = fig.add_gridspec(len(rows), 2, width_ratios=[2, 1], height_ratios=rows)
        ax_t, ax_h = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
        if memory is not None:
            _memory_curve(fig.add_subplot(grid[1, :]), memory, ledger.wall_s)
        ledger_bar(fig.add_subplot(grid[-1, :]), ledger)
    else:
        fig = Figure(figsize=(11, 4.2), dpi=100)
        ax_t, ax_h = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
    timed = _timeline(ax_t, report)
    _spread(ax_h, report, timed)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _memory_curve(ax: Any, memory: Any, wall: float) -> None:
    """Host (and device) memory over the fit, on the ledger bar's x axis, shaded by part."""
    from toolkit.core.stats import format_mb
    from toolkit.report._memory import part_label

    samples = memory.timeline
    xs = [s.t_s for s in samples]
    ax.plot(xs, [s.host_mb for s in samples], color="k", lw=1.2,
            label=f"host (resident), peak {format_mb(memory.host_peak_mb)}")  # fmt: skip
    device = [(s.t_s, s.device_mb) for s in samples if s.device_mb is not None]
    if device:
        ax.plot(*zip(*device, strict=True), color="tab:red", lw=1.2, ls="--",
                label=f"device, peak {format_mb(memory.device_peak_mb)}")  # fmt: skip
    shaded: set[str] = set()
    start = 0
    for i in range(1, len(samples) + 1):  # one span per run of readings in one part
        if i < len(samples) and samples[i].part == samples[start].part:
            continue
        label = part_label(samples[start].part) if samples[start].part else "other"
        end = samples[i].t_s if i < len(samples) else wall
        ax.axvspan(samples[start].t_s, end, color=COLOURS.get(label, "0.9"), alpha=0.18,
                   lw=0, label=None if label in shaded else f"read in {label}")  # fmt: skip
        shaded.add(label)
        start = i
    ax.set_xlim(0, max(wall, xs[-1]) or 1.0)
    ax.set_xlabel("seconds of the fit, in time order (the bar below sums each part: no timeline)")
    ax.set_ylabel("MB (2²⁰ bytes)")
    grows = f"; grows in {', '.join(sorted({part_label(g.part) for g in memory.growth}))}"
    ax.set_title(f"memory over the fit, read every {memory.every_s * 1000:.0f} ms, shaded by "
                 f"the part each reading fell in{grows if memory.growth else ''}",
                 fontsize=10)  # fmt: skip
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)


_STYLES = {  # kind: (label, marker, size, colour)
    "timed": ("timed", ".", 3, "tab:blue"),
    "warmup": ("warm-up (left out)", "o", 5, "tab:orange"),
    "excluded": ("profiled (left out)", "X", 7, "tab:red"),
    "compiled": ("compiled again (left out)", "D", 6, "tab:purple"),
}


def _timeline(ax_t: Any, report: Any) -> list[float]:
    """Each execution's time per step by kind, the p50, epoch ends; returns the timed (ms/step)."""
    from matplotlib.ticker import MaxNLocator

    per = report.steps.steps_per_execution  # > 1: a dot is a call of several steps
    x, epoch, bounds = 0, None, []
    series: dict[str, tuple[list[int], list[float]]] = {k: ([], []) for k in _STYLES}
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
            label, marker, size, colour = _STYLES[kind]
            small = kind == "timed" and len(xs) > 500
            ax_t.plot(
                xs, ys, marker, ms=2 if small else size, color=colour,
                label=f"{label}{' calls' if per > 1 else ''}: {len(xs):,}",
                zorder=3 if kind != "timed" else 2,
            )  # fmt: skip
    if report.steps.p50_s:
        p50 = report.steps.p50_s
        ax_t.axhline(p50 * 1e3, color="k", lw=0.8, ls="--", label=f"p50 {format_ms(p50)}")
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
    return series["timed"][1]


def _spread(ax_h: Any, report: Any, timed: list[float]) -> None:
    """How the timed steps' times spread (integer counts), with p50, p90 and p99 marked."""
    from matplotlib.ticker import MaxNLocator

    per = report.steps.steps_per_execution
    if timed:
        bins = min(60, max(5, len(timed) // 10)) if len(timed) >= 20 else max(1, len(timed))
        ax_h.hist(timed, bins=bins, color="tab:blue")
        for q, val, style in (
            ("p50", report.steps.p50_s, "--"),
            ("p90", report.steps.p90_s, ":"),
            ("p99", report.steps.p99_s, "-."),
        ):
            if val:
                ax_h.axvline(val * 1e3, color="k", lw=0.8, ls=style, label=f"{q} {format_ms(val)}")
        ax_h.legend(fontsize=8)
    ax_h.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_h.set_xlabel("ms per step")
    what = "calls" if per > 1 else "steps"  # one value per call: a fused call is one
    ax_h.set_ylabel(f"timed {what}")
    of = f" ({report.steps.timed_steps:,} steps)" if per > 1 else ""
    ax_h.set_title(f"spread of the {len(timed):,} timed {what}{of}", fontsize=10)
