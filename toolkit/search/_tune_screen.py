"""What a tune result shows a person: the table of what was measured, then short lines (80
columns) in a Keras user's words, and one claimed gain. Every figure comes from the result's
records (``Trial``, ``Gain``, ``WholeRun``); ``toolkit.core.terminal`` renders the blocks."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

from toolkit.core._gain import Gain
from toolkit.core.stats import median
from toolkit.core.terminal import Block, Table
from toolkit.report._ledger import format_s
from toolkit.search.engine import Candidate, Trial, WholeRun
from toolkit.search.rounds import paired_ratios

WIDTH = 80  # a line of words at most this wide: an 80-column terminal shows it whole
HEADERS = (
    "settings", "examples/s", "spread", "runs", "vs defaults (medians)",
    "head to head (paired)", "compile", "note",
)  # fmt: skip
RIGHT = (1, 2, 3, 4, 5, 6)


def table(trials: Sequence[Trial], best: Candidate, rounds: Sequence[dict[str, float]]) -> Table:
    """The trials, fastest first, failures last: median examples/s, spread, runs, ratio to the
    defaults' median, median paired ratio over the head-to-head rounds, compile."""
    base = trials[0].examples_per_sec if trials else None
    defaults = trials[0].candidate.label() if trials else ""
    rows = []
    for t in sorted(trials, key=lambda t: -(t.examples_per_sec or -1.0)):
        shown = setting_words(t.candidate, trials[0].candidate)
        if t.examples_per_sec is None:
            rows.append((shown, "—", "—", "0", "—", "—", "—", f"failed: {t.error}"))
            continue
        note = ["chosen"] if t.candidate == best else []
        paired = paired_ratios(rounds, defaults, t.candidate.label())
        rows.append((
            shown, f"{t.examples_per_sec:,.1f}", t.spread() or "—",
            str(len(t.rates)), times(t.examples_per_sec / base if base else None),
            times(median(paired) if paired and t is not trials[0] else None),
            format_s(t.compile_s) if t.compile_s is not None else "—", ", ".join(note),
        ))  # fmt: skip
    return Table.of(HEADERS, rows, RIGHT)


def setting_words(candidate: Candidate, defaults: Candidate) -> str:
    """A row's changes from the defaults (``xla fused=32``); the defaults' row is ``defaults``,
    spelled out under the table (`defaults_line`) as in the row they wrapped a word a line."""
    return "defaults" if candidate == defaults else candidate.changes(defaults)


def defaults_line(defaults: Candidate) -> str:
    """What the defaults' row ran, in Keras's words."""
    said = ", ".join(keras_words(defaults, None))
    return f"defaults: {said}"


def times(ratio: float | None) -> str:
    """A ratio to the defaults as the table says it: ``1.23×`` (``—``: none)."""
    return "—" if ratio is None else f"{ratio:.2f}×"


def keras_words(candidate: Candidate, defaults: Candidate | None) -> list[str]:
    """What `candidate` sets other than `defaults` (all of it, with None), in the words of
    Keras's arguments: ``jit_compile=True (XLA)``, ``the mixed_bfloat16 precision policy``."""
    said = []
    for name, value in candidate.values().items():
        if value is None or (defaults is not None and value == getattr(defaults, name)):
            continue
        if name == "precision":
            said.append(f"the {value} precision policy")
        elif name == "jit_compile":
            said.append(f"jit_compile={value}" + (" (XLA)" if value else ""))
        elif name == "fused_steps":
            said.append(f"{value} steps fused into one call" if value != 1 else "no fused steps")
        else:
            said.append(f"{name}={value}")
    return said


def folded(head: str, parts: Iterable[str], width: int = WIDTH) -> list[str]:
    """`head` then `parts` joined by ``, `` in lines of `width` columns, broken between parts."""
    parts = list(parts)
    lines, line = [], head
    indent = " " * min(len(head), 8)
    for i, part in enumerate(parts):
        piece = part + ("," if i < len(parts) - 1 else "")
        if line.strip() and len(line) + 1 + len(piece) > width and line != head:
            lines.append(line)
            line = indent + piece
        else:
            line = f"{line} {piece}" if line else piece
    lines.append(line)
    return lines


def chosen_lines(best: Candidate, defaults: Candidate, picked: bool) -> list[str]:
    """``chosen: jit_compile=True (XLA), ...``: the pick in Keras's words, or the defaults."""
    if not picked:
        return ["chosen: the defaults (Keras's own settings)"]
    return folded("chosen:", keras_words(best, defaults))


def whole_run_lines(run: WholeRun, pick_wins: bool) -> list[str]:
    """A pick over the whole run: its longer compile, when that pays off, the run's seconds."""
    after = f"after {run.break_even_steps:,} steps" if run.break_even_steps else "never"
    totals = (
        f"(whole run of {run.steps:,} steps: {format_s(run.pick_s)} vs the defaults' "
        f"{format_s(run.defaults_s)})"
    )
    if not pick_wins:
        return [
            f"the pick is faster a step, but its compile costs {format_s(run.extra_compile_s)} "
            "more",
            f"and pays for itself {after}: the defaults finish this run first",
            totals,
        ]
    if run.extra_compile_s > 0 and run.break_even_steps:
        return [
            f"its compile costs {format_s(run.extra_compile_s)} more and pays for itself {after}",
            totals,
        ]
    return [totals.strip("()")]


def gain_line(gain: Gain | None, picked: bool) -> str:
    """The one gain the screen claims (``gain: 2.77× (2.28–5.36, 5 rounds ...)``); for an
    unconfirmed pick, what was measured. Empty: nothing was measured against the defaults."""
    if gain is None:
        return ""
    if picked:
        return f"gain: {gain.words()}"
    if gain.trusted:  # confirmed, yet the whole-run or never-slower rule kept the defaults
        return f"measured {gain.words()}, not applied: the defaults stay"
    return f"measured {gain.words()}"


def screen(result: Any) -> list[Block]:
    """A :class:`~toolkit.search.tune.TuneResult` as a screen: table, pick, gain, and why."""
    defaults = result.trials[0].candidate if result.trials else result.best
    lines = chosen_lines(result.best, defaults, result.picked)
    lines += [said for said in (gain_line(result.gain, result.picked),) if said]
    lines += [line for line in result.why.split("\n") if line]
    lines.append(defaults_line(defaults))
    return [table(result.trials, result.best, result.confirm_rounds), "\n".join(short(lines))]


def short(lines: Iterable[str], width: int = WIDTH) -> list[str]:
    """Each line folded at spaces to `width` columns (a figure never split), the rest indented."""
    out = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False) or [""]
    return out


def compiled_again(first: float | None, now: float | None) -> str:
    """The defaults' compile measured again (``Workload.compile_again``) where it read less than
    the first, which held the process's own start; "" otherwise."""
    if first is None or now is None or now >= first:
        return ""
    return (
        f"the defaults' compile {format_s(now)}, measured again after this process's first "
        f"({format_s(first)}, which held the process's own start)"
    )
