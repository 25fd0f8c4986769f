"""The per-op results as the seed's two tables (Markdown and CSV), a bar chart, and JSON.

Rows: op and shape, then op averaged over shapes; columns: ms per device and mode, then speedups, a
mode against the one before it on its device (``xla/graph``), a device against the first."""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import io
import itertools
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

from toolkit.core import _extras as extras
from toolkit.core import _fields as fields
from toolkit.core.files import ReportError, atomic_write, jsonable
from toolkit.core.stats import speedup_pct

__all__ = [
    "Measurement",
    "OpTable",
    "Timing",
]

SCHEMA = "toolkit.ops/1"
READABLE = (SCHEMA, "keras_perf.ops/1")  # 0.2 wrote its tables under the package's name then
BASELINE = {  # what each mode's speedup column compares it with on the same device
    "graph": "eager",
    "xla": "graph",
    "jax_jit": "xla",
    "torch_eager": "eager",
    "torch_compile": "torch_eager",
}
NOISY_PCT = 10.0
SCREEN_COLUMNS = 120  # the widest ``ops`` prints, terminal or log (its table comes in parts)
MAX_LISTED = 12
SPEEDUP_LEGEND = "`A/B` = ms of B ÷ ms of A (1.09× means A is 9% faster, 0.50× half as fast)"
FILES = {
    "json": "ops.json",
    "markdown": "ops.md",
    "csv": "ops.csv",
    "average_csv": "ops_average.csv",
    "png": "ops.png",
}


def format_ms(ms: float | None) -> str:
    """Milliseconds as the seed prints them (2 decimals), 3 under 0.1 ms; ``n/a`` if missing."""
    if ms is None:
        return "n/a"
    return f"{ms:.3f}" if ms < 0.1 else f"{ms:.2f}"


def format_speedup(pct: float | None) -> str:
    """A speedup in % as the printed ratio (``+9%``: ``1.09×``); CSV and JSON keep the %."""
    return "n/a" if pct is None else f"{1.0 + pct / 100.0:.2f}×"


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


@dataclasses.dataclass(frozen=True)
class Timing(fields.Record):
    """The per-call time of one computation.

    Attributes:
        ms: median per-call time over the repeats.
        spread_pct: robust spread of the repeats in % of `ms`.
        repeats_ms: each repeat's per-call time.
        calls: calls per timed loop.
        first_call_ms: the first call (tracing, compiling), left out of `ms`."""

    ms: float
    spread_pct: float
    repeats_ms: tuple[float, ...]
    calls: int
    first_call_ms: float


@dataclasses.dataclass(frozen=True)
class Measurement(fields.Record):
    """One cell: an op's case, on one device, in one mode; a timing or why there is none."""

    EXTRA = ("ms", "gflops_per_s")  # derived, for readers of the JSON

    op: str
    case: int
    label: str
    device: str
    mode: str
    timing: Timing | None = None
    reason: str | None = None
    flops: float | None = None

    @property
    def column(self) -> str:
        return f"{self.device}_{self.mode}"

    @property
    def ms(self) -> float | None:
        return self.timing.ms if self.timing else None

    @property
    def gflops_per_s(self) -> float | None:
        if self.flops and self.timing and self.timing.ms > 0:
            return self.flops / (self.timing.ms * 1e-3) / 1e9
        return None


@dataclasses.dataclass
class OpTable(fields.Record):
    """Every cell the benchmark measured, and the views of them.

    Attributes:
        results: one :class:`Measurement` per (case, device, mode).
        columns: ``"<device>_<mode>"`` in display order.
        settings: size preset, dtype, repeats, min_time_s, seed, ops, modes.
        devices: each device's facts and column label.
        floors: per column, the per-call time of ``x + 1`` on a scalar (dispatch cost)."""

    results: list[Measurement]
    columns: list[str]
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    devices: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    floors: dict[str, float | None] = dataclasses.field(default_factory=dict)
    created_utc: str = fields.field(
        default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        missing="",
    )

    def rows(self) -> list[tuple[str, int]]:
        """``(op, case index)`` of every row, in measurement order."""
        seen: dict[tuple[str, int], None] = {}
        for m in self.results:
            seen.setdefault((m.op, m.case), None)
        return list(seen)

    def ops(self) -> list[str]:
        return list(dict.fromkeys(op for op, _ in self.rows()))

    def speedup_pairs(self) -> list[tuple[str, str]]:
        """``(new column, baseline column)`` of every speedup column, in display order."""
        by_device: dict[str, list[str]] = {}
        for column in self.columns:
            device, mode = column.split("_", 1)  # a device label has no "_"; a mode may
            by_device.setdefault(device, []).append(mode)
        pairs = []
        for device, modes in by_device.items():
            for before, mode in itertools.pairwise(modes):
                base = BASELINE.get(mode)
                base = base if base in modes else before
                pairs.append((f"{device}_{mode}", f"{device}_{base}"))
        devices = list(by_device)
        for device in devices[1:]:
            pairs += [
                (f"{device}_{mode}", f"{devices[0]}_{mode}")
                for mode in by_device[device]
                if mode in by_device[devices[0]]
            ]
        return pairs

    def header(self) -> list[str]:
        """The seed's header: Operation, ms columns, speedup columns."""
        speedups = [f"{new}/{base} speedup" for new, base in self.speedup_pairs()]
        return ["Operation", *self.columns, *speedups]

    def _grid(self) -> dict[tuple[str, int], dict[str, Measurement]]:
        grid: dict[tuple[str, int], dict[str, Measurement]] = {}
        for m in self.results:
            grid.setdefault((m.op, m.case), {})[m.column] = m
        return grid

    def detailed(self) -> list[tuple[str, list[float | None], list[float | None]]]:
        """``(label, ms per column, speedup % per pair)`` of every row."""
        grid = self._grid()
        out = []
        for key in self.rows():
            cells = grid[key]
            ms = [cells[c].ms if c in cells else None for c in self.columns]
            by_col = dict(zip(self.columns, ms, strict=True))
            pct = [speedup_pct(by_col[base], by_col[new]) for new, base in self.speedup_pairs()]
            out.append((next(iter(cells.values())).label, ms, pct))
        return out

    def average(self) -> list[tuple[str, list[float | None], list[float | None]]]:
        """``(op, mean ms per column, speedup % per pair)``; a ratio only over shapes both have."""
        grid = self._grid()
        out = []
        for op in self.ops():
            rows = [cells for (row_op, _), cells in grid.items() if row_op == op]

            def col(rows_: list[dict[str, Measurement]], column: str) -> list[float | None]:
                return [r[column].ms if column in r else None for r in rows_]

            ms = [_mean(col(rows, c)) for c in self.columns]
            pct = []
            for new, base in self.speedup_pairs():
                both = [
                    (b, n)
                    for b, n in zip(col(rows, base), col(rows, new), strict=True)
                    if b is not None and n is not None
                ]
                pct.append(
                    speedup_pct(_mean(b for b, _ in both), _mean(n for _, n in both))
                    if both
                    else None
                )
            out.append((op, ms, pct))
        return out

    def unavailable(self) -> list[Measurement]:
        return [m for m in self.results if m.timing is None]

    def noisy(self, threshold_pct: float = NOISY_PCT) -> list[Measurement]:
        return [m for m in self.results if m.timing and m.timing.spread_pct > threshold_pct]

    def _describe(self) -> list[str]:
        s, env = self.settings, self.environment
        devices = ", ".join(f"{d['label']} = {d.get('human_name', '?')}" for d in self.devices)
        lines = [
            f"size preset `{s.get('size', '?')}`, {s.get('dtype', 'float32')}, "
            f"median of {s.get('repeats', '?')} timed loops of >= "
            f"{s.get('min_time_s', 0) * 1e3:g} ms each (first call and calibration excluded)",
            f"devices: {devices or 'n/a'}",
        ]
        if env:
            lines.append(
                f"TensorFlow {env.get('tensorflow', '?')}, Python {env.get('python', '?')}, "
                f"{env.get('cpu_count', '?')} CPU cores ({env.get('cpu_model', '?')}), "
                f"{self.created_utc}"
            )
        if self.floors:
            floors = ", ".join(f"{c} {format_ms(ms)} ms" for c, ms in self.floors.items())
            lines.append(
                f"per-call floor (`x + 1` on a scalar): {floors}; a cell near its column's "
                "floor measures dispatch, not the op"
            )
        return lines

    @staticmethod
    def _md_table(header: Sequence[str], body: Iterable[Sequence[str]]) -> list[str]:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return lines

    def to_markdown(self, png: str | None = None, note: str | None = None) -> str:
        """Both tables in the seed's layout, settings above, n/a reasons and noisy cells below."""
        out = ["# Operation benchmark: milliseconds per call", ""]
        out += [f"- {line}" for line in self._describe()]
        out += [
            f"- speedup columns: {SPEEDUP_LEGEND}",
            "",
        ]
        out += self._md_table(
            self.header(),
            (
                [label, *map(format_ms, ms), *map(format_speedup, pct)]
                for label, ms, pct in self.detailed()
            ),
        )
        out += ["", "Average benchmark:", ""]
        out += self._md_table(
            self.header(),
            (
                [op, *map(format_ms, ms), *map(format_speedup, pct)]
                for op, ms, pct in self.average()
            ),
        )
        missing = self.unavailable()
        if missing:
            out += ["", "n/a cells:", ""]
            reasons: dict[tuple[str, str], list[str]] = {}
            for m in missing:
                reasons.setdefault((m.column, m.reason or "?"), []).append(m.label)
            for (column, reason), labels in reasons.items():
                shown = ", ".join(labels[:3]) + (
                    f" and {len(labels) - 3} more" if labels[3:] else ""
                )
                out.append(f"- `{column}` {shown}: {reason}")
        noisy = self.noisy()
        if noisy:
            out += ["", f"Noisy cells (spread of the repeats > {NOISY_PCT:g}% of the median):", ""]
            out += [
                f"- `{m.column}` {m.label}: {format_ms(m.ms)} ms ± {m.timing.spread_pct:.0f}%"
                for m in noisy[:MAX_LISTED]
                if m.timing
            ]
            if noisy[MAX_LISTED:]:
                out.append(f"- and {len(noisy) - MAX_LISTED} more (the CSV has every spread)")
        if png:
            out += ["", f"![average ms per op]({png})"]
        if note:
            out += ["", note]
        return "\n".join(out) + "\n"

    def to_terminal(self, columns: int | None = None) -> str:
        """What ``ops`` prints: settings, averages, legend, n/a and noisy counts, screen-wide."""
        from toolkit.core import terminal

        columns = columns if columns is not None else terminal.width()
        columns = min(columns or SCREEN_COLUMNS, SCREEN_COLUMNS)
        devices = {c.split("_", 1)[0] for c in self.columns}

        def short(column: str) -> str:  # one device: its name is in the line above
            return column.split("_", 1)[1] if len(devices) == 1 else column

        times = ["op", *map(short, self.columns)]
        ratios = [f"{short(new)}/\n{short(base)}" for new, base in self.speedup_pairs()]
        average = self.average()
        rows = [[op, *map(format_ms, ms), *map(format_speedup, pct)] for op, ms, pct in average]
        right = range(1, len(times) + len(ratios))
        shown = terminal.table([*times, *ratios], rows, columns=columns, right=right)
        described = [line.replace("`", "") for line in self._describe()[:2]]  # no Markdown
        said = [
            "ms per call, each op averaged over its shapes",
            *described,
            shown,
            "ratios: " + SPEEDUP_LEGEND.replace("`", ""),
        ]
        missing, noisy = len(self.unavailable()), len(self.noisy())
        if missing or noisy:
            said.append(
                f"{missing} cell(s) n/a, {noisy} noisy (spread > {NOISY_PCT:g}%): "
                "ops.md lists them, with every shape"
            )
        return terminal.fit("\n".join(said), columns)

    def to_csv(self, average: bool = False) -> str:
        """The detailed (or average) table as CSV: plain numbers, empty for n/a, spreads last."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        pairs = self.speedup_pairs()
        header = [
            "operation",
            *(f"{c} ms" for c in self.columns),
            *(f"{new}/{base} speedup %" for new, base in pairs),
        ]
        if not average:
            header += [f"{c} spread %" for c in self.columns]
        writer.writerow(header)

        def num(value: float | None) -> str:
            return "" if value is None else f"{value:.6g}"

        if average:
            for op, ms, pct in self.average():
                writer.writerow([op, *map(num, ms), *map(num, pct)])
        else:
            grid = self._grid()
            for key, (label, ms, pct) in zip(self.rows(), self.detailed(), strict=True):
                spreads = [
                    grid[key][c].timing.spread_pct  # type: ignore[union-attr]
                    if c in grid[key] and grid[key][c].timing
                    else None
                    for c in self.columns
                ]
                writer.writerow([label, *map(num, ms), *map(num, pct), *map(num, spreads)])
        return buf.getvalue()

    def to_dict(self) -> dict[str, object]:
        """The record, RunReport-like: schema, settings, environment, devices, every cell."""
        return {"schema": SCHEMA, **super().to_dict()}

    def to_json(self) -> str:
        return json.dumps(jsonable(self.to_dict()), indent=1)

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None) -> OpTable:
        if d.get("schema") not in READABLE:
            raise ReportError(f"not an op benchmark record (schema {d.get('schema')!r})")
        return super().from_dict(d, where)

    def plot_png(self) -> bytes:
        """The average table as log-scale bars; near its dashed dispatch floor a bar is dispatch."""
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure

        average = self.average()
        n_ops, n_cols = len(average), max(1, len(self.columns))
        fig = Figure(figsize=(11, 1.8 + 0.28 * n_ops * max(1, n_cols / 2)), dpi=100)
        ax = fig.subplots()
        height = 0.8 / n_cols
        colours = matplotlib.colormaps["tab10"]
        for j, column in enumerate(self.columns):
            ys = [i + (j - (n_cols - 1) / 2) * height for i in range(n_ops)]
            xs = [ms[j] if ms[j] is not None else 0.0 for _, ms, _ in average]
            ax.barh(ys, xs, height=height, label=column, color=colours(j % 10))
            floor = self.floors.get(column)
            if floor:
                ax.axvline(floor, color=colours(j % 10), lw=1, ls="--", alpha=0.8)
        ax.set_yticks(range(n_ops))
        ax.set_yticklabels([op for op, _, _ in average])
        ax.invert_yaxis()
        if any(ms for _, row, _ in average for ms in row):
            ax.set_xscale("log")
        ax.set_xlabel(
            "ms per call, average over the op's shapes (log scale; lower is better)\n"
            "dashed: each column's per-call floor (x + 1 on a scalar): bars near it time dispatch"
        )
        ax.set_title(
            f"Time per op call ({self.settings.get('size', '?')} shapes, "
            f"{self.settings.get('dtype', 'float32')}): lower is better"
        )
        if self.floors:
            ax.plot([], [], color="grey", ls="--", lw=1, label="per-call floor")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()

    def write(self, directory: str | os.PathLike[str], plot: bool = True) -> dict[str, str]:
        """Writes every file atomically, ops.json first; a failed plot loses no other."""
        directory = os.fspath(directory)

        def path(kind: str) -> str:
            return os.path.join(directory, FILES[kind])

        paths = {"json": atomic_write(path("json"), self.to_json())}
        paths["csv"] = atomic_write(path("csv"), self.to_csv())
        paths["average_csv"] = atomic_write(path("average_csv"), self.to_csv(average=True))
        note = None
        if plot:
            try:
                paths["png"] = atomic_write(path("png"), self.plot_png())
            except ImportError as e:
                note = f"no chart: {extras.why_missing('report', ('matplotlib',)) or e}"
            except Exception as e:  # noqa: BLE001 - the chart is a view; the record is safe
                note = f"no chart: {type(e).__name__}: {e}"
        markdown = self.to_markdown(png=FILES["png"] if "png" in paths else None, note=note)
        paths["markdown"] = atomic_write(path("markdown"), markdown)
        return paths
