"""The ledger's memory in words: the summary's memory and growth lines, report.md's memory
table, and compare's memory change, rendered at the edge from the sampler's ``RunMemory``."""

from __future__ import annotations

from toolkit.core.stats import format_mb
from toolkit.profiling._memory_records import Growth, PartMemory, RunMemory
from toolkit.report._ledger import LABELS


def part_label(name: str) -> str:
    """A ledger part as the ledger's own lines name it, a callback's name as it is, and
    growth over the epoch ends (``epochs``) as across them."""
    return "across epochs" if name == "epochs" else LABELS.get(name, name)


def growth_words(g: Growth) -> str:
    """A growth in words: ``KeepOutputs: 126 tensors float32[32, 10] more after 125 steps``."""
    where = part_label(g.part)
    if g.steps and g.per_1k_steps is not None:
        rate = f"{format_mb(g.mb, signed=True)}, {format_mb(g.per_1k_steps)} per 1,000 steps"
    else:
        rate = f"{format_mb(g.mb, signed=True)} held after it"
    memory = {"host": "host ", "device": "device "}.get(g.memory, "")
    head = f"{where}: {g.what} ({rate})" if g.what else f"{where}: {memory}{rate}"
    return head + (f", held by {g.held_by}" if g.held_by else "")


def _shown_growth(memory: RunMemory) -> list[Growth]:
    """One growth a part: the counted one (it names what grew) over the readings' rise."""
    seen: dict[str, Growth] = {}
    for g in memory.growth:
        if g.part not in seen or (g.what and not seen[g.part].what):
            seen[g.part] = g
    return list(seen.values())


def memory_lines(memory: RunMemory | None) -> list[str]:
    """The summary's lines: ``memory: host peak ...``, ``memory grows: ...`` and ``fix: ...``."""
    if memory is None or memory.host_peak_mb is None:
        return []
    top = memory.peak_part("host")
    where = f" in {part_label(top.name)}" if top is not None else ""
    end = memory.timeline[-1].host_mb if memory.timeline else None
    line = (
        f"memory: host peak {format_mb(memory.host_peak_mb)}{where} (start "
        f"{format_mb(memory.host_start_mb)}, end {format_mb(end)})"
    )
    if memory.device_peak_mb is not None:
        top = memory.peak_part("device")
        where = f" in {part_label(top.name)}" if top is not None else ""
        line += f"; device peak {format_mb(memory.device_peak_mb)}{where}"
    elif memory.device_unseen:
        line += "; no device counters (host memory is all)"
    lines = [line]
    for g in _shown_growth(memory):
        lines.append(f"memory grows: {growth_words(g)}")
        if g.fix:
            lines.append(f"fix: {g.fix}")
    return lines


def _row(p: PartMemory) -> str:
    cells = (p.host_peak_mb, p.host_end_mb, p.device_peak_mb, p.device_end_mb)
    shown = " | ".join(format_mb(v) for v in cells)
    return f"| {part_label(p.name)} | {shown} | {p.readings} |"


def memory_markdown(memory: RunMemory | None) -> str:
    """report.md's memory section: each part's peak and held, callbacks, growth, epoch ends."""
    if memory is None:
        return ""
    out = [
        "\n".join(memory_lines(memory)) + "\n",
        "| part | host peak | host at its end | device peak | device at its end | readings |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    out += [_row(p) for p in memory.parts]
    out += [_row(c) for c in memory.callbacks]
    out.append(
        f"\n_Read every {memory.every_s * 1000:.0f} ms and at each validation and epoch end "
        f"({memory.readings:,} readings); host is the resident set, its peak the kernel's "
        "high-water mark where it rose between readings; MB are MiB._"
    )
    if memory.device_unseen:
        out.append(f"\n_Device: {memory.device_unseen}._")
    if memory.epochs:
        out += ["", "| epoch | steps | host | device | device peak |", "|---|---:|---:|---:|---:|"]
        for e in memory.epochs:
            epoch = "start" if e.epoch is None else e.epoch + 1  # as Keras's progress counts
            cells = (format_mb(e.host_mb), format_mb(e.device_mb), format_mb(e.device_peak_mb))
            out.append(f"| {epoch} | {e.step:,} | " + " | ".join(cells) + " |")
        out.append(
            "\n_At train begin and at each epoch's end, after its validation; steps: the "
            "training steps begun by then; device peak: the most so far._"
        )
    return "\n".join(out) + "\n"


def memory_change(a: RunMemory | None, b: RunMemory | None) -> str | None:
    """compare's line: ``B: peak host memory +310 MB (+22 %)`` (and the device's)."""
    if a is None or b is None or a.host_peak_mb is None or b.host_peak_mb is None:
        return None
    bits = [_change("peak host memory", a.host_peak_mb, b.host_peak_mb)]
    if a.device_peak_mb is not None and b.device_peak_mb is not None:
        bits.append(_change("peak device memory", a.device_peak_mb, b.device_peak_mb))
    return "B: " + "; ".join(bits)


def _change(what: str, a: float, b: float) -> str:
    pct = f" ({(b - a) / a * 100:+.0f} %)" if a > 0 else ""
    if abs(b - a) < 0.005:
        return f"{what} unchanged ({format_mb(b)})"
    return f"{what} {format_mb(b - a, signed=True)}{pct}, {format_mb(a)} -> {format_mb(b)}"
