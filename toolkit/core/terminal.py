"""What a person reads on a terminal: its width, lines folded to fit it, and tables.

Off a terminal the width is `None` and nothing is folded: a log keeps one line per thing. Tables
are drawn with rich, which Keras 3 draws its summaries with, so it is always installed."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, TextIO

__all__: list[str] = []  # the toolkit's own helpers (fit, fit_groups, show, table, width)

MIN_WIDTH = 40  # narrower than this, folding helps nobody: lines are left as they are
# A figure and its unit (``27.2 %``) fold as one word: their space is held as a private-use char.
_UNIT = re.compile(r"(?<=\d) (?=(?:%|×|[kMGT]?i?B|[kMGT]?FLOP(?:/s)?|[mµun]?s|steps?/s)(?!\w))")
_HELD = "\ue000"


def width(stream: TextIO | None = None) -> int | None:
    """The width of terminal `stream` (default stdout; ``COLUMNS`` wins), or `None` off one."""
    stream = sys.stdout if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return None
    if not tty:
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size((80, 24)).columns


def fit(text: str, columns: int | None = None, indent: str = "  ") -> str:
    """`text`'s lines folded at spaces to `columns`, rows indented `indent` past the line's own."""
    if columns is None or columns < MIN_WIDTH:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= columns:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        rows = textwrap.wrap(
            _UNIT.sub(_HELD, line),
            width=columns,
            initial_indent="",
            subsequent_indent=lead + indent,
            break_on_hyphens=False,
            break_long_words=False,  # a path or a command stays whole
        )
        out += [row.replace(_HELD, " ") for row in rows] or [line]
    return "\n".join(out)


def fit_command(text: str, columns: int | None = None, indent: str = "  ") -> str:
    """A command line (or call) folded like :func:`fit`, rows ending in `` \\`` to paste whole."""
    if columns is None or columns < MIN_WIDTH or len(text) <= columns:
        return text
    rows = textwrap.wrap(
        text, width=columns - 2, subsequent_indent=indent, break_on_hyphens=False,
        break_long_words=False,
    )  # fmt: skip
    return " \\\n".join(rows)


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    columns: int | None = None,
    right: Sequence[int] = (),
    title: str | None = None,
) -> str:
    """`rows` under `headers`, at most `columns` wide (default: the terminal's); text wraps at
    spaces, never inside a number, else the table comes in parts repeating the first column."""
    heads = [str(h) for h in headers]
    body = [["" if cell is None else str(cell) for cell in row] for row in rows]
    if columns is None:
        columns = width()
    need = [_least(n, heads, body, n in right) for n in range(len(heads))]
    parts: list[list[int]] = [list(range(len(heads)))]
    if columns is not None and sum(need) + GAP * (len(need) - 1) > columns and len(heads) > 2:
        parts, used = [[0]], need[0]
        for n in range(1, len(heads)):
            if len(parts[-1]) > 1 and used + GAP + need[n] > columns:
                parts.append([0])
                used = need[0]
            parts[-1].append(n)
            used += GAP + need[n]
    return "\n\n".join(
        _render(
            [heads[n] for n in part],
            [[row[n] if n < len(row) else "" for n in part] for row in body],
            _widths(part, heads, body, need, columns),
            [i for i, n in enumerate(part) if n in right],
            columns,
            title if k == 0 else None,
        )
        for k, part in enumerate(parts)
    )


def _widths(
    part: list[int],
    heads: list[str],
    body: list[list[str]],
    need: list[int],
    columns: int | None,
) -> list[int]:
    """Each column's widest cell, narrowed widest-first (never below its least) to fit `columns`."""
    widths = [max([len(heads[n]), *(len(r[n]) for r in body if n < len(r))]) for n in part]
    least = [need[n] for n in part]
    if columns is None:
        return widths
    while sum(widths) + GAP * (len(widths) - 1) > columns:
        slack = [w - m for w, m in zip(widths, least, strict=True)]
        if max(slack) <= 0:
            break
        widths[slack.index(max(slack))] -= 1
    return widths


GAP = 2  # spaces between two columns


def _least(n: int, heads: list[str], body: list[list[str]], number: bool) -> int:
    """The narrowest column `n` can be: its longest number (whole), or its longest word."""
    cells = [row[n] for row in body if n < len(row)]
    words = [w for text in [heads[n], *cells] for w in text.split()]
    if number:
        words += cells
    return min(max((len(w) for w in words), default=1), 30)


def _render(
    heads: list[str],
    body: list[list[str]],
    widths: list[int],
    right: list[int],
    columns: int | None,
    title: str | None,
) -> str:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    shown = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        title_justify="left",
    )
    for i, header in enumerate(heads):
        shown.add_column(
            header,
            justify="right" if i in right else "left",
            overflow="fold",
            width=widths[i],
        )
    for row in body:
        shown.add_row(*row)
    out = io.StringIO()
    console = Console(
        file=out,
        width=columns or 10_000,
        color_system=None,
        force_terminal=False,
        highlight=False,
        emoji=False,
        markup=False,
        legacy_windows=False,
    )
    console.print(shown, crop=columns is not None)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").split("\n"))


def widest(text: str) -> int:
    """The longest line of `text`, in characters."""
    return max((len(line) for line in text.split("\n")), default=0)


def markdown_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()
) -> str:
    """The same rows as a Markdown table (for ``.md`` files)."""
    line = "| " + " | ".join(str(h) for h in headers) + " |"
    rule = "|" + "|".join("---:" if i in right else "---" for i in range(len(headers))) + "|"
    body = ["| " + " | ".join("" if c is None else str(c) for c in row) + " |" for row in rows]
    return "\n".join([line, rule, *body])


def fit_groups(groups: Sequence[Sequence[str]], columns: int | None, indent: str = "  ") -> str:
    """Groups as ``a, b; c, d``, folded to `columns` at groups, then items, never inside one."""
    groups = [list(g) for g in groups if g]
    line = "; ".join(", ".join(g) for g in groups)
    if columns is None or len(line) <= columns or columns < MIN_WIDTH:
        return line
    rows: list[str] = []
    for n, group in enumerate(groups):
        row = indent if n else ""
        for i, item in enumerate(group):
            piece = item + ("," if i < len(group) - 1 else "")
            if row.strip() and len(row) + 1 + len(piece) > columns:
                rows.append(row)
                row = indent * (2 if n else 1) + piece
            else:
                row = f"{row} {piece}" if row.strip() else row + piece
        rows.append(row)
    return "\n".join(rows)


@dataclasses.dataclass(frozen=True)
class Table:
    """A table from the room that measured it (cells formatted once) to the edges rendering it."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    right: tuple[int, ...] = ()

    @classmethod
    def of(
        cls, headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()
    ) -> Table:
        """A table from any sequences; a ``None`` cell is an empty one."""
        cells = tuple(tuple("" if c is None else str(c) for c in row) for row in rows)
        return cls(tuple(str(h) for h in headers), cells, tuple(right))

    def markdown(self) -> str:
        return markdown_table(self.headers, self.rows, self.right)

    def terminal(self, columns: int | None = None) -> str:
        return table(self.headers, self.rows, columns=columns, right=self.right)


# A screen: lines of words and tables, rendered at the edge by :func:`show` or :func:`markdown`.
Block = str | Table


def _blocks(text: Block | Sequence[Block]) -> list[Block]:
    return [text] if isinstance(text, (str, Table)) else list(text)


def show(text: Block | Sequence[Block], columns: int | None = None) -> str:
    """A screen for a terminal: tables by :func:`table`, lines by :func:`fit`, to `columns`."""
    columns = columns if columns is not None else width()
    out = []
    for block in _blocks(text):
        if isinstance(block, Table):
            out.append(block.terminal(columns))
        else:
            out += [fit(line, columns) for line in block.split("\n")]
    return "\n".join(out)


def markdown(text: Block | Sequence[Block]) -> str:
    """The same screen for a ``.md`` file: tables as Markdown tables, lines as they are."""
    return "\n".join(b.markdown() if isinstance(b, Table) else b for b in _blocks(text))


# Non-ASCII the toolkit prints, spelled for a stream that cannot encode it (a C locale).
_ASCII = {
    "×": "x", "—": "-", "–": "-", "→": "->", "±": "+/-", "…": "...", "·": "-", "²": "^2",
    "−": "-", "∇": "grad ", "≤": "<=", "≥": ">=", "√": "sqrt", "÷": "/", "µ": "u", "█": "#",
    "░": ".", "━": "-", "╸": "-", "╺": "-", "│": "|", "─": "-", "┃": "|",
}  # fmt: skip
_ERRORS = "toolkit-ascii"


def _spelled(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    return "".join(_ASCII.get(c, "?") for c in text), error.end


def plain_streams() -> None:
    """Makes stdout and stderr spell what they cannot encode (``×`` as ``x``) instead of raising."""
    import codecs

    try:
        codecs.lookup_error(_ERRORS)
    except LookupError:
        codecs.register_error(_ERRORS, _spelled)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not encoding or not hasattr(stream, "reconfigure"):
            continue
        try:
            "×µ→".encode(encoding)
        except (UnicodeEncodeError, LookupError):
            stream.reconfigure(errors=_ERRORS)
