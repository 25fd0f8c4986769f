"""The step's anatomy as people read it: terminal lines, a summary, a Markdown section and a
picture of one :class:`~toolkit.core._anatomy.Anatomy`, and two (``Contrast``) in words. Every
share is of the step the phases add up to (so they add up to 100): the untraced step where
reconciled, else the traced one. Pure Python (matplotlib only inside :func:`anatomy_png`)."""

from __future__ import annotations

import collections
import math
import os
import re
import textwrap
from collections.abc import Sequence
from typing import Any

from toolkit.core import terminal
from toolkit.core._anatomy import (
    AGREEMENT,
    BAND,
    SAME_STEP,
    Anatomy,
    Contrast,
    LayerTime,
    Phase,
    PhaseTime,
)
from toolkit.core.files import atomic_write
from toolkit.core.stats import format_flops, format_ms

ANATOMY_PNG = "anatomy.png"  # beside steps.png in a run directory
TOP_LAYERS = 10  # rows of the terminal's layer table
PLOT_LAYERS = 15  # bars of the picture
MARKDOWN_LAYERS = 50  # rows of report.md's layer table
NAME_MIN, NAME_MAX, KIND_MAX = 12, 30, 18  # columns a layer's name and kind may take
NOISE = 0.005  # two steps this close read as equally fast
TRAINER_NOISE = 0.02  # Keras's trainer cost under this fraction either way reads as none


def _pct(fraction: float) -> str:
    """A share as every anatomy line writes it: ``45.6 %``."""
    return f"{fraction * 100:.1f} %"


def _ms(seconds: float) -> str:
    """Milliseconds in a table column headed "ms": ``1.234``."""
    return f"{seconds * 1e3:.3f}"


def _rate(layer: LayerTime) -> str:
    """Achieved FLOP/s in a column headed "FLOP/s": ``45.6 G`` (empty: not countable)."""
    rate = layer.flop_rate()
    return "" if rate is None else format_flops(rate, True).removesuffix("FLOP/s").strip()


def _basis(a: Anatomy) -> float:
    """The step every share is of: the untraced step where reconciled, else the traced one."""
    return a.phases_sum() or a.traced_s or a.step_s


def _which(a: Anatomy) -> str:
    """The step the phases add up to, in a word: ``untraced`` where reconciled."""
    return "untraced" if a.traced_phases else "traced"


def _share(seconds: float, basis: float) -> str:
    return _pct(seconds / basis) if basis > 0 else "—"


def _short(text: str, limit: int) -> str:
    """`text` in `limit` characters: a nested layer keeps its name after ``…/``, else ``a…z``."""
    if len(text) <= limit:
        return text
    own = text.rpartition("/")[2]
    if "/" in text:  # the layer's own name tells it apart: its end, where its number is
        return "…/" + own if len(own) + 2 <= limit else "…" + own[len(own) - limit + 1 :]
    head = max(1, (limit - 1) // 3)
    return text[:head] + "…" + text[len(text) - (limit - 1 - head) :]


def _shorts(names: Sequence[str], limit: int) -> list[str]:
    """Each of `names` in `limit` characters, told apart: clashing rows are cut another way."""
    out = [_short(n, limit) for n in names]
    for cut in (_tail, _head_and_tail, _initials):
        seen = collections.Counter(out)
        if all(seen[x] == 1 for x in out):
            break
        tried = [cut(n, limit) if seen[x] > 1 and len(n) > limit else x
                 for n, x in zip(names, out, strict=True)]  # fmt: skip
        clash = collections.Counter(tried)
        out = [t if clash[t] == 1 else x for t, x in zip(tried, out, strict=True)]
    return out


def _tail(text: str, limit: int) -> str:
    return "…" + text[len(text) - limit + 1 :]


def _initials(text: str, limit: int) -> str:
    """`text`'s outer layers as initials and numbers (``b_1/f``), then its own name, cut to fit."""
    *outer, own = text.split("/")
    short = [re.sub(r"^(.)[^_]*(?:_[^_\d]+)*(_\d+)?$", r"\1\2", part) for part in outer]
    said = "/".join([*short, own])
    room = limit - len(said) + len(own)  # what the own name may take
    if len(said) <= limit or room < 4:
        return said if len(said) <= limit else _tail(said, limit)
    return said[: len(said) - len(own)] + own[: room - 1] + "…"


def _head_and_tail(text: str, limit: int) -> str:
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head) :]


def _fold(lines: Sequence[str], width: int) -> list[str]:
    """`lines` folded at spaces to `width`, a word longer than a row cut as a last resort."""
    out: list[str] = []
    for line in terminal.fit("\n".join(lines), width).split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        out += textwrap.wrap(line, width=width, subsequent_indent=lead + "  ") or [line[:width]]
    return out


def _ratio(value: float) -> str:
    """A ratio as the toolkit writes them: ``1.23×``."""
    return f"{value:.2f}×"


def _traced(a: Anatomy) -> str:
    """``5 steps traced, batch 32``: what the step's times are of."""
    steps = f"{a.steps} step{'s' if a.steps != 1 else ''} traced"
    return f"{steps}, batch {a.batch:,}" if a.batch else steps


def _head(a: Anatomy) -> str:
    where = f"{a.backend} on {a.device}" if a.device else a.backend
    steps = _traced(a)
    if a.traced_phases:
        return (f"inside the step: {format_ms(a.phases_sum())}/step as fit runs it untraced "
                f"({steps}, the profiler's cost taken out); {where}")  # fmt: skip
    return f"inside the step: {format_ms(a.step_s)}/step on the outside clock, {steps}; {where}"


def _error_line(a: Anatomy) -> str:
    where = f" ({a.backend}{' on ' + a.device if a.device else ''})"
    return f"inside the step: the anatomy could not be taken{where}: {a.error}"


def _phases(a: Anatomy) -> list[PhaseTime]:
    """The phases in a step's order, "other" always among them."""
    shown = sorted(a.phases, key=lambda p: list(Phase).index(p.phase))
    if not any(p.phase == Phase.OTHER for p in shown):
        shown.append(PhaseTime(Phase.OTHER, 0.0))
    return shown


def _phase_cells(p: PhaseTime, basis: float) -> tuple[str, str, str]:
    """``(ms, share, words)`` of one phase: numbers only where part of it was seen."""
    if p.unseen and p.seconds <= 0:
        return "—", "—", f"not seen: {p.unseen}"
    return _ms(p.seconds), _share(p.seconds, basis), f"not all seen: {p.unseen}" if p.unseen else ""


def _sum_line(a: Anatomy) -> str:
    agreement = a.agreement()
    if agreement is None:
        return "no outside clock to check the phases' sum against"
    whose = "the trace's phases" if a.traced_phases else "phases"
    line = (
        f"{whose} sum to {_ratio(agreement)} the traced step on the outside clock "
        f"({format_ms(a.traced_sum())} vs {format_ms(a.step_s)})"
    )
    if not a.agrees():
        line += (
            f": they disagree by more than {AGREEMENT * 100:.0f} %, so read the shares as the "
            "trace's split, not the outside clock's"
        )
    return line


def _profiler_line(a: Anatomy) -> str | None:
    traced = a.step_s or a.traced_s
    if not a.untraced_s or not traced:
        return None
    if a.untraced_off():
        return None  # no cost to take out: reconcile's note says why
    said = f"{_ratio(traced / a.untraced_s)} an untraced one ({format_ms(traced)} vs " + (
        f"{format_ms(a.untraced_s)})"
    )
    if traced < a.untraced_s:  # a profiler never makes a step faster: the two timings' noise
        return (f"the profiler's own cost: none seen, a traced step took {said}; the phases "
                "are scaled up to the untraced step")  # fmt: skip
    return f"the profiler's own cost: a traced step takes {said}"


def _checked_line(a: Anatomy) -> str | None:
    """How many layers were timed alone, and how many of them the trace got right."""
    timed = [x for x in a.layers if x.alone_s]
    if not timed:
        return None
    held = sum(1 for x in timed if x.holds_alone())
    line = (
        f"{len(timed)} of {len(a.layers)} layers timed alone: the trace within "
        f"±{BAND * 100:.0f} % for {len(timed) - held}"
    )
    if held:
        line += f"; for {held} the alone time is shown (marked a)"
    return line


def _held_of(rest: Sequence[LayerTime]) -> str:
    """Of the layers a table leaves out, those shown at their alone figure."""
    held = sum(1 for x in rest if x.alone_s and x.holds_alone())
    return f", {held} of them at their alone figure" if held else ""


def _why_lines(layers: Sequence[LayerTime], limit: int = 3) -> list[str]:
    """Why the trace differs, for the first `limit` layers shown at their alone figure."""
    held = [x for x in layers if x.holds_alone() and x.check]
    out = [
        f"a {x.name}: traced {_ratio(x.against_alone() or 0.0)} alone: {x.check}"
        for x in held[:limit]
    ]
    if len(held) > limit:
        out.append(
            f"and {len(held) - limit} more at their alone figure (each layer's check, in "
            "the JSON, says why)"
        )
    return out


def _other_line(a: Anatomy) -> str | None:
    """What "other" is (unscoped ops, the host between ops) where large, and its fix's saving."""
    basis = _basis(a)
    if basis <= 0 or not a.other_large():
        return None
    words = f"other is {_share(a.phase(Phase.OTHER), basis)} of the step"
    traced = a.traced_phase(Phase.OTHER)
    if a.other_between_s is not None and traced > 0:
        between = min(1.0, a.other_between_s / traced)
        words += (f": in the trace, {between:.0%} of it the host inside the step with no op "
                  f"running (dispatching the next op, Python in the step), {1 - between:.0%} "
                  "ops outside any layer's scope")  # fmt: skip
        if a.ops_per_step:
            words += f"; {a.ops_per_step:,.0f} ops a step"
            gaps = a.other_gaps_s()
            if between > 0.5 and gaps is not None:  # in the step's figures, as the saving
                words += f", about {format_ms(gaps / a.ops_per_step)} between each two"
    if a.other_fix:
        words += f"; fewer, larger ops shrink it: {a.other_fix}"
        gaps, checked = a.other_gaps_s(), a.other_saving_checked()
        if gaps is not None:
            words += f"; predicted to save {format_ms(gaps)} a step (those gaps)"
        if checked is not None:  # fit_s and other_fixed_s both measured
            words += (f"; measured: fit's step {format_ms(a.fit_s or 0.0)} -> "
                      f"{format_ms(a.other_fixed_s or 0.0)} with it")  # fmt: skip
            held = a.other_fix_held()
            if held:
                words += f" (saves {format_ms(checked)}: try it)"
            elif held is None:
                words += f" (within {SAME_STEP:.0%}, the noise between two runs: no saving)"
            else:
                words += (f" (costs {format_ms(-checked)}: this other is not what it takes "
                          "away here; leave it off)")  # fmt: skip
    return words


def _fused_line(a: Anatomy) -> str | None:
    if a.fused_s <= 0:
        return None
    return (
        "XLA fused several layers' ops together: fused code holds "
        f"{_share(a.fused_s, _basis(a))} of the step (the layers' times split it; marked f)"
    )


def _trainer_lines(a: Anatomy) -> list[str]:
    """Keras's own cost: the trainer's step against the same step written without it."""
    cost = a.trainer_cost()
    if cost is None or a.fit_s is None or a.raw_s is None:
        return []
    if cost <= -TRAINER_NOISE:
        # the raw step runs as fit's, timed at its fastest: where fit beats it, fit runs it better
        head = (
            f"Keras's fit step is {_pct(-cost)} faster than the raw step: the raw step, run "
            "as fit runs its step, is no floor for this model, so Keras's own cost cannot be "
            "read from it"
        )
    elif cost < TRAINER_NOISE:
        head = "Keras's trainer adds nothing measurable per step over the raw step (within noise)"
    else:
        head = f"Keras's trainer adds {_pct(cost)} per step over the raw step"
    how = f"; raw step: {a.raw_how}" if a.raw_how else ""
    return [head, f"  (fit {format_ms(a.fit_s)}/step vs raw {format_ms(a.raw_s)}/step{how})"]


def _ranked(a: Anatomy) -> list[LayerTime]:
    return sorted(a.layers, key=lambda x: x.seconds, reverse=True)


def _calls(layer: LayerTime) -> str:
    """``×2``, or ``×2/1`` where one of its two calls took a gradient (``backward_calls``)."""
    grads = f"/{layer.backward_calls}" if layer.backward_calls is not None else ""
    return f"×{layer.calls}{grads}"


def _marks(layer: LayerTime) -> str:
    marks = [_calls(layer)] if layer.calls > 1 or layer.backward_calls is not None else []
    marks += ["f"] if layer.fused_s > 0 else []
    return " ".join([*marks, "a"] if layer.holds_alone() else marks)


def _vs_alone(layer: LayerTime) -> str:
    r = layer.against_alone()
    return "" if r is None else _ratio(r)


LAYER_HEADS = ("layer", "kind", "fwd ms", "bwd ms", "% step", "FLOP/s", "/alone", "")


def _layer_table(a: Anatomy, width: int) -> list[str]:
    ranked = _ranked(a)
    shown, rest = ranked[:TOP_LAYERS], ranked[TOP_LAYERS:]
    basis = _basis(a)
    cells = [
        [
            layer.name,
            _short(layer.kind or "—", KIND_MAX),
            _ms(layer.forward_s),
            _ms(layer.backward_s),
            f"{layer.seconds / basis * 100:.1f}" if basis > 0 else "—",
            _rate(layer),
            _vs_alone(layer),
            _marks(layer),
        ]
        for layer in shown
    ]
    # The FLOP/s and marks columns only where a row has one; the name takes the room left.
    keep = [n for n in range(len(LAYER_HEADS)) if n < 5 or any(row[n] for row in cells)]
    heads = [LAYER_HEADS[n] for n in keep]
    cells = [[row[n] for n in keep] for row in cells]
    used = [max([len(heads[n]), *(len(r[n]) for r in cells)]) for n in range(1, len(keep))]
    room = width - sum(used) - terminal.GAP * len(used)
    limit = max(NAME_MIN, min(NAME_MAX, room))
    for row, name in zip(cells, _shorts([row[0] for row in cells], limit), strict=True):
        row[0] = name
    right = [i for i, n in enumerate(keep) if 2 <= n <= 6]
    out = terminal.table(heads, cells, columns=width, right=right).split("\n")
    said = []
    if rest:
        left = sum(x.seconds for x in rest)
        said.append(
            f"and {len(rest)} more layer{'s' if len(rest) != 1 else ''} "
            f"({format_ms(left)}, {_share(left, basis)} of the step) left out{_held_of(rest)}"
        )
    legend = []
    if any(x.calls > 1 for x in shown):
        legend.append("×N: called N times a step (its times hold every call)")
    if any(x.backward_calls is not None for x in shown):
        legend.append("×N/M: M of its N calls took a gradient (its backward holds those)")
    if any(x.fused_s > 0 for x in shown):
        legend.append("f: part of its time is in fused code it shares with other layers")
    if any(x.alone_s for x in shown):
        legend.append(
            "/alone: the trace's time (the profiler's cost taken out) over the layer timed "
            f"alone; a: outside ±{BAND * 100:.0f} %, the alone time is shown"
        )
    if any(x.alone_s and x.alone_with_held for x in shown):
        legend.append(
            "a layer that holds others (name/inner rows) is timed with them: its /alone "
            "is its row and theirs together over that time"
        )
    if legend:
        said.append("; ".join(legend))
    return out + _fold([*said, *_why_lines(shown)], width)


def anatomy_lines(a: Anatomy, width: int = 80) -> list[str]:
    """Terminal lines at most `width` wide: step, phases, clock check, layers, Keras's cost, notes.

    Returns:
        The lines; for an anatomy that could not be taken, the one line saying why."""
    if a.error:
        return _fold([_error_line(a)], width)
    basis = _basis(a)
    said = [_head(a)]
    if a.signal:
        said.append(f"measured from: {a.signal}")
    lines = _fold(said, width)
    rows = [[p.phase.value, *_phase_cells(p, basis)] for p in _phases(a)]
    lines += terminal.table(("phase", "ms/step", "% step", ""), rows, columns=width,
                            right=(1, 2)).split("\n")  # fmt: skip
    more = [_sum_line(a), _profiler_line(a), _checked_line(a), _other_line(a)]
    lines += _fold([x for x in more if x], width)
    if a.layers:
        lines += _layer_table(a, width)
    else:
        lines += _fold(["no layer was seen in the trace"], width)
    tail = [_fused_line(a), *_trainer_lines(a), *(f"note: {n}" for n in a.notes)]
    lines += _fold([x for x in tail if x], width)
    return [line.rstrip() for line in lines]


def anatomy_top_lines(a: Anatomy, n: int = 3) -> list[str]:
    """The anatomy in 2-4 lines, as ``diagnose`` and ``doctor`` print it: phases, layers, Keras."""
    if a.error:
        return [_error_line(a)]
    basis = _basis(a)
    phases = sorted(
        (p for p in _phases(a) if p.seconds > 0 or p.phase == Phase.OTHER),
        key=lambda p: p.seconds,
        reverse=True,
    )
    bits = [f"{p.phase.value} {_share(p.seconds, basis)}" for p in phases]
    unseen = [p.phase.value for p in a.phases if p.unseen and p.seconds <= 0]
    line = f"inside the {_which(a)} step ({format_ms(basis)}, {a.backend}): " + ", ".join(bits)
    if unseen:
        line += f"; not seen: {', '.join(unseen)}"
    if a.model_alone_s is None and a.phase(Phase.FORWARD) + a.phase(Phase.BACKWARD) > 0:
        line += "; forward and backward as the trace split them (anatomy times the model alone)"
    if not a.agrees():
        agreement = a.agreement()
        line += (
            f"; the phases sum to {_ratio(agreement)} the outside clock's step"
            if agreement is not None
            else "; no outside clock to check them against"
        )
    out = [line]
    top = _ranked(a)[: max(0, n)]
    if top:
        out.append(
            "slowest layers: "
            + ", ".join(
                f"{x.name} ({x.kind}) {format_ms(x.seconds)} ({_share(x.seconds, basis)})"
                for x in top
            )
        )
    trainer = _trainer_lines(a)
    if trainer:
        out.append(f"{trainer[0]} {trainer[1].strip()}")
    return out


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _sentence(text: str) -> str:
    """`text` as a sentence of report.md: its first letter capital, a full stop at its end."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _check_words(x: LayerTime) -> str:
    if x.holds_alone():
        return f"alone time shown: {x.check}" if x.check else "alone time shown"
    if x.alone_s:
        return f"the trace within ±{BAND * 100:.0f} % of alone"
    return x.check or ""


def anatomy_markdown(a: Anatomy, png: str | None = None) -> str:
    """The anatomy's ``report.md`` section (phases, slowest layers, notes); `png`: its picture."""
    out = ["## Inside the step", ""]
    if a.error:
        return "\n".join([*out, _sentence(_error_line(a)), ""])
    basis = _basis(a)
    out.append(_sentence(_head(a)))
    if a.signal:
        out += ["", f"Measured from: {_cell(a.signal)}."]
    out += ["", "| phase | ms/step | share | what it is |", "|---|---:|---:|---|"]
    for p in _phases(a):
        ms, share, words = _phase_cells(p, basis)
        what = p.phase.meaning + (f" ({words})" if words else "")
        out.append(f"| {p.phase.value} | {ms} | {share} | {_cell(what)} |")
    out.append(f"| **{_which(a)} step** | **{_ms(a.phases_sum())}** | 100 % | |")
    out += ["", _sentence(_sum_line(a))]
    for line in (_profiler_line(a), _checked_line(a)):
        if line:
            out += ["", _sentence(line)]
    ranked = _ranked(a)
    if ranked:
        out += [
            "",
            "| layer | kind | calls | forward ms | backward ms | share | achieved | fused ms "
            "| traced/alone | check |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for x in ranked[:MARKDOWN_LAYERS]:
            rate = x.flop_rate()
            out.append(
                f"| {_cell(x.name)} | {_cell(x.kind or '—')} | {_calls(x)[1:]} | "
                f"{_ms(x.forward_s)} | "
                f"{_ms(x.backward_s)} | {_share(x.seconds, basis)} | "
                f"{format_flops(rate, True) if rate is not None else '—'} | "
                f"{_ms(x.fused_s) if x.fused_s > 0 else '—'} | {_vs_alone(x) or '—'} | "
                f"{_cell(_check_words(x))} |"
            )
        rest = ranked[MARKDOWN_LAYERS:]
        if rest:
            left = sum(x.seconds for x in rest)
            out += [
                "",
                f"And {len(rest)} more layers ({format_ms(left)}) left out{_held_of(rest)}.",
            ]
    else:
        out += ["", "No layer was seen in the trace."]
    fused = _fused_line(a)
    if fused:
        out += ["", _sentence(fused.removesuffix("; marked f)") + ")")]
    trainer = _trainer_lines(a)
    if trainer:
        out += ["", _sentence(f"{trainer[0]} {trainer[1].strip()}")]
    if png:
        out += ["", f"![inside the step]({png})"]
    if a.notes:
        out.append("")
        out += [f"- note: {_cell(n)}" for n in a.notes]
    return "\n".join(out) + "\n"


PHASE_COLOURS = {
    Phase.INPUT: "tab:orange",
    Phase.FORWARD: "tab:blue",
    Phase.BACKWARD: "tab:cyan",
    Phase.OPTIMIZER: "tab:green",
    Phase.METRICS: "tab:purple",
    Phase.HOST: "tab:red",
    Phase.OTHER: "0.8",
}


def anatomy_png(a: Anatomy, path: str | os.PathLike[str]) -> str | None:
    """The anatomy as a picture, written atomically to `path`.

    Returns:
        `path`; None without matplotlib or anything to draw."""
    png = anatomy_png_bytes(a)
    return None if png is None else atomic_write(path, png)


def anatomy_png_bytes(a: Anatomy) -> bytes | None:
    """The anatomy as PNG bytes (layers' and phases' bars); None without matplotlib or anything."""
    if a.error or not a.phases:
        return None
    try:
        fig = anatomy_figure(a)
    except ImportError:
        return None
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


PLOT_TEXT = 8  # points: the picture's small text (ticks, labels, legends)
PLOT_WRAP = 110  # characters of a title line at most
PLOT_NAME = 40  # characters of a layer's name at most


def anatomy_figure(a: Anatomy) -> Any:
    """The picture's ``Figure``, no text overlapping or outside; ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    layers = _ranked(a)[:PLOT_LAYERS]
    phases = _phases(a)
    drawn = [p for p in phases if p.seconds > 0]
    unseen = [p for p in phases if p.seconds <= 0 and p.unseen]
    legend_rows = -(-(len(drawn) + len(unseen)) // 3)
    layer_h = 0.3 * len(layers) + 0.9 if layers else 0.4
    phase_h = 1.2
    legend_h = 0.22 * legend_rows + 0.1
    fig = Figure(figsize=(11, 0.6 + layer_h + phase_h + legend_h), dpi=100,
                 layout="constrained")  # fmt: skip
    FigureCanvasAgg(fig)  # the renderer that measures the labels
    # Two subfigures: the phase bar takes the whole width, not the layer names' column.
    top, bottom = fig.subfigures(2, 1, height_ratios=[layer_h, phase_h + legend_h])
    ax_l, ax_p = top.subplots(), bottom.subplots()
    fig.suptitle("\n".join(_figure_title(a)), fontsize=11)
    ends = _layer_bars(ax_l, a, layers)
    segments = _phase_bar(ax_p, bottom, a, drawn, unseen)
    fig.draw_without_rendering()  # the layout settles the axes' size; then labels are fitted
    _fit_labels(fig, ax_l, ends, ax_p, segments, _basis(a))
    fig.set_layout_engine("none")  # the layout as checked above, kept when saved
    return fig


def _figure_title(a: Anatomy) -> list[str]:
    where = f"{a.backend}, {a.device}" if a.device else a.backend
    steps = _traced(a)
    if a.traced_phases:
        clock = (f"{format_ms(a.phases_sum())}/step untraced ({steps}, the profiler's cost "
                 "taken out; layers checked against each timed alone)")  # fmt: skip
    else:
        clock = f"{format_ms(a.step_s)}/step on the outside clock, {steps}"
    return [
        *textwrap.wrap(f"Inside one training step ({where})", PLOT_WRAP),
        *textwrap.wrap(f"{clock}; every bar in ms per step", PLOT_WRAP),
    ]


def _layer_bars(ax_l: Any, a: Anatomy, layers: list[LayerTime]) -> list[Any]:
    """The slowest layers' forward + backward bars, slowest on top; returns the end labels."""
    if not layers:
        ax_l.set_axis_off()
        ax_l.set_title("no layer was seen in the trace", fontsize=10, loc="left")
        return []
    basis = _basis(a)
    names = [
        _short(x.name, PLOT_NAME) + (f" {_calls(x)}" if x.calls > 1 else "") + f" ({x.kind})"
        for x in layers
    ]
    ys = list(range(len(layers)))
    forward = [x.forward_s * 1e3 for x in layers]
    backward = [x.backward_s * 1e3 for x in layers]
    colour = PHASE_COLOURS[Phase.FORWARD], PHASE_COLOURS[Phase.BACKWARD]
    ax_l.barh(ys, forward, color=colour[0], label="forward")
    ax_l.barh(ys, backward, left=forward, color=colour[1], label="backward")
    ax_l.set_yticks(ys, names, fontsize=PLOT_TEXT)
    ax_l.set_ylim(len(layers) - 0.5, -0.5)  # the slowest on top
    ax_l.tick_params(axis="x", labelsize=PLOT_TEXT)
    ax_l.set_xlabel(f"ms per step (forward + backward; the share is of the {_which(a)} step)",
                    fontsize=9)  # fmt: skip
    ends = []
    for y, x in zip(ys, layers, strict=True):
        label = f" {_ms(x.seconds)} ms ({_share(x.seconds, basis)})"
        text = ax_l.text(x.seconds * 1e3, y, label, va="center", fontsize=PLOT_TEXT - 1)
        text.set_in_layout(False)
        ends.append(text)
    # Above the bars, at the right: never over a bar.
    ax_l.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=PLOT_TEXT,
                frameon=False, borderaxespad=0.2)  # fmt: skip
    n = len(a.layers)
    more = f"the slowest {len(layers)} of {n}" if n > len(layers) else f"all {n}"
    ax_l.set_title(f"layers, forward + backward ({more})", fontsize=10, loc="left")
    return ends


def _phase_bar(
    ax_p: Any, bottom: Any, a: Anatomy, drawn: list[PhaseTime], unseen: list[PhaseTime]
) -> list[tuple[Any, float, float, PhaseTime]]:
    """The phases as one bar with a legend (unseen ones hatched); returns each segment."""
    from matplotlib.patches import Patch

    basis = _basis(a)
    segments: list[tuple[Any, float, float, PhaseTime]] = []  # (text, left, width, phase)
    handles, labels = [], []
    left = 0.0
    for p in drawn:
        ms = p.seconds * 1e3
        share = p.seconds / basis if basis > 0 else 0.0
        bar = ax_p.barh(0, ms, left=left, color=PHASE_COLOURS[p.phase], edgecolor="white")
        handles.append(bar.patches[0])
        labels.append(f"{p.phase.value}: {format_ms(p.seconds)} ({_pct(share)})")
        text = ax_p.text(left + ms / 2, 0, p.phase.value, ha="center", va="center",
                         fontsize=PLOT_TEXT, color=_ink(PHASE_COLOURS[p.phase]))  # fmt: skip
        text.set_in_layout(False)
        segments.append((text, left, ms, p))
        left += ms
    for p in unseen:
        handles.append(Patch(facecolor="white", edgecolor="0.5", hatch="///"))
        labels.append(f"{p.phase.value}: not seen in the trace")
    ax_p.set_xlim(0, left or 1.0)
    ax_p.set_ylim(-0.5, 0.5)
    ax_p.set_yticks([])
    ax_p.tick_params(axis="x", labelsize=PLOT_TEXT)
    ax_p.set_title(f"the {_which(a)} step's phases ({format_ms(a.phases_sum())}, 100 %)",
                   fontsize=10, loc="left")  # fmt: skip
    ax_p.set_xlabel(f"ms per step (the phases add up to the {_which(a)} step)", fontsize=9)
    if handles:
        bottom.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=PLOT_TEXT,
                      frameon=False)  # fmt: skip
    return segments


def _fit_labels(
    fig: Any,
    ax_l: Any,
    ends: list[Any],
    ax_p: Any,
    segments: list[tuple[Any, float, float, PhaseTime]],
    basis: float,
) -> None:
    """Labels fitted once laid out: inside the figure or their segment, else left to the legend."""
    renderer = fig.canvas.get_renderer()
    if ends:
        _room_for_ends(ax_l, ends, renderer)
    for text, start, width, p in segments:
        room = _data_width(ax_p, start, width)
        share = p.seconds / basis if basis > 0 else 0.0
        for words in (p.phase.value, _pct(share)):
            text.set_text(words)
            if text.get_window_extent(renderer).width + 8 <= room:
                break
        else:
            text.set_visible(False)  # the legend says it


def _ink(colour: str) -> str:
    """Black on a light colour, white on a dark one."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(colour)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _data_width(ax: Any, start: float, width: float) -> float:
    """Pixels that `width` data units take on `ax`'s x axis from `start`."""
    (x0, _), (x1, _) = ax.transData.transform([(start, 0.0), (start + width, 0.0)])
    return abs(x1 - x0)


def _room_for_ends(ax: Any, ends: Sequence[Any], renderer: Any) -> None:
    """Widens `ax`'s x range so that every label at a bar's end stays inside it."""
    box = ax.get_window_extent(renderer)
    right = max(t.get_position()[0] for t in ends) or 1.0
    need = right
    for text in ends:
        end = text.get_position()[0]
        wide = text.get_window_extent(renderer).width + 4
        if wide < box.width:
            need = max(need, end * box.width / (box.width - wide))
    ax.set_xlim(0, need * 1.02)


TINY_PART = 0.02  # a part under this share of its step is said as a gap in ms, not a ratio


def _part_words(c: Contrast, what: str, a_s: float, b_s: float) -> str:
    if a_s <= 0 and b_s <= 0:
        return f"{what} (none in either)"
    if a_s <= 0:
        return f"{what} ({format_ms(b_s)} vs none in {c.a_name})"
    if a_s < TINY_PART * c.a_step_s or b_s < TINY_PART * c.b_step_s:
        sign = "+" if b_s >= a_s else "-"  # a ratio of next to nothing says nothing: the gap does
        return f"{what} {sign}{format_ms(abs(b_s - a_s))} ({format_ms(b_s)} vs {format_ms(a_s)})"
    return f"{what} {_ratio(b_s / a_s)} ({format_ms(b_s)} vs {format_ms(a_s)})"


def contrast_lines(c: Contrast, width: int = 80) -> list[str]:
    """Two anatomies' difference in words, folded to `width`: the ratio, its parts, a ``try:``."""
    ratio = c.ratio
    if c.a_step_s <= 0 or c.b_step_s <= 0 or not math.isfinite(ratio):
        head = f"{c.b_name} and {c.a_name} cannot be set side by side (a step time is missing)"
    elif abs(ratio - 1.0) < NOISE:
        head = f"{c.b_name} is as fast as {c.a_name} ({format_ms(c.b_step_s)}/step)"
    elif ratio > 1:
        head = f"{c.b_name} is {_ratio(ratio)} slower than {c.a_name}"
    else:
        head = f"{c.b_name} is {_ratio(1 / ratio)} faster than {c.a_name}"
    parts = [_part_words(c, p.what, p.a_s, p.b_s) for p in c.parts]
    if c.rest is not None and abs(c.rest.gap_s) >= TINY_PART * max(c.a_step_s, c.b_step_s):
        sign = "+" if c.rest.gap_s >= 0 else "-"
        parts.append(f"the rest {sign}{format_ms(abs(c.rest.gap_s))}")
    if parts:
        head += f" ({c.b_name}'s time vs {c.a_name}'s): " + ", ".join(parts)
    said = [head, *(f"note: {n}" for n in c.notes)]
    if c.fix:
        said.append(f"try: {c.fix}")
    return _fold(said, width)
