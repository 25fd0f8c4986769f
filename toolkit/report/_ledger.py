"""The run's ledger (``toolkit.profiling._ledger``) in words, in a table, beside another run's,
with its fixes spelled for its reader (``_fixes``); and its JSON edge. The runner's flag
spelling is handed in (``flags=``) or looked up where the runner is loaded, never imported: the
runner sits above the report. Every function takes the ledger as a record or its JSON."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.core._advice import Spell
from toolkit.core.stats import format_s
from toolkit.profiling._fixes import MIN_S, SHARE, Fix, part_share, read_fixes, share, unfixed
from toolkit.profiling._ledger_records import PARTS, Ledger, LedgerPart, Reader
from toolkit.profiling._timing import MODEL, ProcessTime
from toolkit.report._fixes import fix_json, fix_words, unfixed_words

LABELS = {
    "start_up": "start-up",
    "compile": "compile",
    "steps": "steps",
    "input": "input",
    "validation": "validation",
    "callbacks": "callbacks",
    "exit": "exit",
    "other": "other",
}
NOISE_SIGMAS = 2.0  # a part moved beyond its noise: by this many of its difference's spreads
MOVED_SHARE = 0.1  # ... and by this share of A's, and by MIN_S


def as_ledger(ledger: Ledger | Mapping[str, Any] | None) -> Ledger | None:
    """`ledger` as a record: itself, or read from its JSON (None: None)."""
    if ledger is None or isinstance(ledger, Ledger):
        return ledger
    return Ledger.from_dict(ledger)


def report_ledger(
    ledger: Ledger | None,
    context: Any,
    args: Mapping[str, Any] | None,
    process: ProcessTime | None = None,
    partial: bool = False,
) -> Ledger | None:
    """A report's ledger with its reader, compile cache and build compile; `partial`: cut short."""
    if ledger is None:
        return None
    built = next(
        (s.compile_s for s in (process.stages if process else ()) if s.name == MODEL), None
    )
    reader = Reader(
        runner=context is not None,
        compile_cache=bool((args or {}).get("compile_cache")),
        build_compile_s=built,
    )
    if ledger.reader != reader or (partial and not ledger.partial):
        ledger = dataclasses.replace(ledger, reader=reader, partial=ledger.partial or partial)
    return ledger


def spelling(ledger: Ledger, flags: Spell | None = None) -> Spell | None:
    """How `ledger`'s fixes are spelled: the runner's flags (`flags`, else looked up), else None."""
    if not ledger.reader.runner:
        return None
    if flags is not None:
        return flags
    config = sys.modules.get("toolkit.runner.config")
    return getattr(config, "as_flags", None)


def ledger_json(ledger: Ledger, flags: Spell | None = None) -> dict[str, Any]:
    """``report.json``'s ``ledger``: the record's JSON and its fixes, spelled for its reader."""
    how = spelling(ledger, flags)
    return {**ledger.to_dict(), "fixes": [fix_json(f, how) for f in fixes(ledger)]}


def fixes(ledger: Ledger) -> list[Fix]:
    """The ledger's fixes (``toolkit.profiling._fixes.read_fixes``)."""
    return read_fixes(ledger)


def ledger_line(ledger: Ledger) -> str:
    """The whole fit in words, largest part first: ``run ledger (fit call T): steps 49 %, ...``."""
    wall = ledger.wall_s
    seen = [p for p in ledger.parts if p.seconds is not None]
    pct = ledger.percents()
    shown = sorted(seen, key=lambda p: -float(p.seconds or 0.0))
    # Rounded to 0 %: in the table, not the line; the shares shown add up to 100.
    bits = [_part_bit(ledger, p, pct[p.name]) for p in shown if p.name == "steps" or pct[p.name]]
    head = "fit call" if ledger.timed_call else "from train begin"
    partial = ", partial" if ledger.partial else ""
    line = f"run ledger ({head} {format_s(wall)}{partial}): " + ", ".join(bits)
    if ledger.seconds("input") is None and ledger.input_read_s:
        line += (
            f"; input read in the steps {share(ledger.input_read_s, wall)} (overlapping the device)"
        )
    elif ledger.seconds("input") is None:
        line += "; input inside the steps"
    if not ledger.timed_call:
        line += "; exit not timed: call fit through profile().fit"
    elif ledger.seconds("exit") is None:
        line += "; the fit raised before its end"
    return line


def _part_bit(ledger: Ledger, part: LedgerPart, pct: int) -> str:
    """One part in the line: ``compile 17% (1 recompile)``, ``callbacks 6% (Heavy 0.61 s)``."""
    bit = f"{LABELS[part.name]} {pct}%"
    n = ledger.recompiles
    if part.name == "compile" and n:
        bit += f" ({n} recompile{'s' if n != 1 else ''})"
    if part.name == "callbacks" and ledger.callbacks:
        top = ledger.callbacks[0]
        bit += f" ({top.name} {format_s(top.seconds)})"
    return bit


def fix_lines(ledger: Ledger, limit: int = 3, flags: Spell | None = None) -> list[str]:
    """``fix: ...`` for the largest items, spelled for the run's reader."""
    how = spelling(ledger, flags)
    return [f"fix: {fix_words(f, how)}" for f in fixes(ledger)[:limit]]


def whole_run_lines(ledger: Ledger, flags: Spell | None = None) -> list[str]:
    """A whole run's ledger line, its fixes, and for each large unfixed part the rule applied."""
    how = spelling(ledger, flags)
    proposed = fixes(ledger)
    lines = [ledger_line(ledger)]
    lines += [f"fix: {fix_words(f, how)}" for f in proposed]
    lines += [f"fix: {unfixed_words(u, ledger, how)}" for u in unfixed(ledger, proposed)]
    if len(lines) == 1:
        lines.append(
            f"fix: none: no part took {SHARE:.0%} of the run and {MIN_S} s (the ledger "
            "proposes a fix from there)"
        )
    return lines


def ledger_markdown(ledger: Ledger, flags: Spell | None = None) -> str:
    """The ledger's section of report.md: its parts, callbacks, compiles and fixes."""
    wall = ledger.wall_s
    out = [f"{ledger_line(ledger)}\n", "| part | seconds | share |", "|---|---:|---:|"]
    for part in ledger.parts:
        said = part_share(ledger, part.name)
        out.append(f"| {LABELS[part.name]} | {format_s(part.seconds)} | {said} |")
    out.append(f"| **fit** | **{format_s(wall)}** | 100% |")
    if ledger.callbacks:
        out += ["", "| callback | seconds | hook calls |", "|---|---:|---:|"]
        out += [f"| {c.name} | {format_s(c.seconds)} | {c.calls:,} |" for c in ledger.callbacks]
    for name, seconds in ledger.overlapped:
        out.append(f"\n{name}: {format_s(seconds)} on Keras's callback thread (overlapped)")
    out += _compiles_markdown(ledger)
    how = spelling(ledger, flags)
    proposed = fixes(ledger)
    lines = [f"- fix: {fix_words(f, how)}" for f in proposed]
    lines += [f"- fix: {unfixed_words(u, ledger, how)}" for u in unfixed(ledger, proposed)]
    out += ["", *lines] if lines else []
    for o in ledger.other_where:
        if o.seconds >= 0.01 * wall:
            out.append(f"\nOther: {format_s(o.seconds)} at {o.where}.")
    out += [f"\n_Not seen: {what}._" for what in ledger.unseen]
    return "\n".join(out) + "\n"


def _compiles_markdown(ledger: Ledger) -> list[str]:
    """The compiles' table, and how they were found."""
    if not ledger.compiles:
        return []
    out = ["", "| compile | epoch | step | seconds | cause |", "|---|---:|---:|---:|---|"]
    for c in ledger.compiles:
        epoch = str(c.epoch + 1) if c.epoch is not None else "—"
        step = c.step if c.step is not None else "—"
        cause = str(c.cause or "—").replace("|", "\\|")
        out.append(f"| {c.function} | {epoch} | {step} | {format_s(c.seconds)} | {cause} |")
    out.append(f"\nCompiles found by: {ledger.signal or '—'}.")
    return out


@dataclasses.dataclass(frozen=True)
class PartChange:
    """One part of two runs' ledgers, B against A, and whether the change is told from noise.

    Attributes:
        label: the part's label, or ``fit`` for the wall time.
        noise_s: the difference's spread from each run's samples; None where either has under 3."""

    label: str
    a_s: float
    b_s: float
    noise_s: float | None

    @property
    def delta_s(self) -> float:
        return self.b_s - self.a_s

    @property
    def moved(self) -> bool:
        """By at least :data:`MIN_S` and :data:`MOVED_SHARE` of A's: worth a word."""
        d = abs(self.delta_s)
        return d >= MIN_S and not (self.a_s and d < MOVED_SHARE * abs(self.a_s))

    @property
    def judged(self) -> bool:
        """The runs' own samples say how much this part varies."""
        return self.noise_s is not None

    @property
    def beyond_noise(self) -> bool:
        """Judged, and moved by more than :data:`NOISE_SIGMAS` of the difference's spread."""
        return self.noise_s is not None and abs(self.delta_s) > NOISE_SIGMAS * self.noise_s

    def words(self) -> str:
        sign = "+" if self.delta_s >= 0 else "−"
        bit = f"{self.label} {sign}{format_s(abs(self.delta_s))}"
        return bit + (f" ({sign}{abs(self.delta_s) / abs(self.a_s):.0%})" if self.a_s else "")


def _noise(a: LedgerPart, b: LedgerPart) -> float | None:
    if a.spread_s is None or b.spread_s is None or a.samples < 3 or b.samples < 3:
        return None
    return math.sqrt(a.samples * a.spread_s**2 + b.samples * b.spread_s**2)


def part_changes(a: Ledger, b: Ledger) -> list[PartChange]:
    """Each part both runs saw, and the wall time, B against A, with its noise from the samples."""
    out = []
    for name in PARTS:
        pa, pb = a.part(name), b.part(name)
        if pa.seconds is not None and pb.seconds is not None:
            out.append(PartChange(LABELS[name], pa.seconds, pb.seconds, _noise(pa, pb)))
    return [*out, PartChange("fit", a.wall_s, b.wall_s, None)]


def compare_ledgers(a: Ledger | None, b: Ledger | None) -> str | None:
    """Parts that moved (0.1 s and 10 %), B vs A, in a line, beyond their noise; None: no ledger."""
    if not a or not b:
        return None
    moved = [c for c in part_changes(a, b) if c.moved]
    changed = [c.words() for c in moved if c.beyond_noise]
    noise = [c.words() for c in moved if c.judged and not c.beyond_noise]
    single = [c.words() for c in moved if not c.judged]
    bits = [", ".join(changed) if changed else "no part moved beyond its noise"]
    if noise:
        bits.append("within noise: " + ", ".join(noise))
    if single:
        bits.append("not told from noise (one sample a run): " + ", ".join(single))
    if not moved:
        return "ledger, B vs A: no part moved by 0.1 s and 10 %"
    return "ledger, B vs A: " + "; ".join(bits)


def bar_segments(ledger: Ledger) -> Sequence[tuple[str, float, int]]:
    """``(label, seconds, whole percent)`` of each part that took time, in the ledger's order."""
    pct = ledger.percents()
    return [(LABELS[p.name], p.seconds, pct[p.name]) for p in ledger.parts
            if p.seconds and p.seconds > 0]  # fmt: skip
