"""The backends comparison's result: targets, contenders, runs, table, chart, JSON; no framework."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections.abc import Sequence
from typing import Any

from toolkit.core import _extras as extras
from toolkit.core import _fields as fields
from toolkit.core.files import atomic_write
from toolkit.core.stats import format_duration
from toolkit.core.terminal import Block, Table, markdown
from toolkit.runner.config import as_flags
from toolkit.search.engine import MIN_GAIN
from toolkit.search.rounds import paired_ratios

__all__ = [
    "BackendsResult",
    "ChooserError",
    "Contender",
    "Target",
]

HEADERS = (
    "backend", "device", "first step s", "p50 ms/step", "mean ms/step (spread)", "examples/s",
    "MFU (of measured peak)", "vs defaults", "final loss", "note",
)  # fmt: skip
LOSS_RTOL = 0.05  # a final loss off the defaults' by more (not rounding) is never chosen


class ChooserError(ValueError):
    """A comparison that cannot run (nothing to compare, a bad target): one line."""


@dataclasses.dataclass(frozen=True)
class Target(fields.Record):
    """What to train, as a fresh process rebuilds it: a recipe (``params``: changed ``build_task``
    args) or ``module:function`` (your compiled model and data), ``config``, ``class_weight``."""

    recipe: str | None = None
    model_fn: str | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    class_weight: dict[Any, float] | None = fields.field(None, omit=fields.omit_none)

    def label(self) -> str:
        return f"recipe {self.recipe}" if self.recipe else f"--model_fn {self.model_fn}"

    @property
    def name(self) -> str:
        """The recipe's name or ``module:function``."""
        return str(self.recipe or self.model_fn)

    def source_digest(self) -> str | None:
        """Digest of the target's file: cached answers hold while it is unchanged. None: no file."""
        import hashlib
        import importlib.util

        module = self.model_fn.rpartition(":")[0] if self.model_fn else f"recipes.{self.recipe}"
        path: str | None = module
        if not module.endswith(".py"):
            try:
                path = getattr(importlib.util.find_spec(module), "origin", None)
            except (ImportError, ValueError):  # a package above it missing or broken
                path = None
        try:
            with open(str(path), "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()[:16]
        except OSError:
            return None

    @classmethod
    def of(cls, what: Any, params: dict[str, Any] | None = None, config: Any = None) -> Target:
        """A Target from a recipe name, ``"module:function"`` or a top-level model function."""
        if isinstance(what, Target):
            return what
        settings = config.to_dict() if hasattr(config, "to_dict") else dict(config or {})
        if callable(what):
            return cls(None, function_spec(what), {}, settings)
        if isinstance(what, str) and ":" in what:
            return cls(None, what, {}, settings)
        return cls(str(what), None, dict(params or {}), settings)


def function_spec(fn: Any) -> str:
    """How a fresh process finds `fn`: ``module:function``, or ``/path/mytrain.py:function`` for
    your script, imported under another name than ``__main__`` (as spawn does).

    Raises:
        ChooserError: no fresh process can find it (nested, lambda, interactive), with the fix."""
    import sys

    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    shown = name or repr(fn)
    if not module or not name or "<" in name or "." in name:
        raise ChooserError(
            f"fresh processes cannot import {shown} (a method, a partial, or nested in a "
            "function or a lambda): define a function at the top of a module"
        )
    if module != "__main__":
        return f"{module}:{name}"
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":  # python -m mytrain
        return f"{spec.name}:{name}"  # (pkg.__main__ for a package: imported by that name)
    path = getattr(main, "__file__", None)
    if path and path.endswith(".py") and os.path.isfile(path):  # python mytrain.py
        return f"{os.path.abspath(path)}:{name}"
    raise ChooserError(
        f"fresh processes cannot import {shown}: it was defined in an interactive session "
        "or python -c; move it to a module (mytrain.py) and run that"
    )


@dataclasses.dataclass(frozen=True)
class Contender(fields.Record):
    """One backend on one kind of device, maybe with tuned settings (``tune --across_backends``)."""

    backend: str
    device: str = "cpu"
    settings: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        pairs = self.settings.items() if isinstance(self.settings, dict) else self.settings
        object.__setattr__(self, "settings", tuple((str(k), v) for k, v in pairs))

    def label(self) -> str:
        return f"{self.backend} {self.device}" + (" tuned" if self.settings else "")

    def flags(self) -> str:
        """How a user selects it, as flags to read (``--backend=jax --device=cpu ...``)."""
        return as_flags({"backend": self.backend, "device": self.device, **dict(self.settings)})

    def settings_words(self) -> str:
        """Its tuned settings as the flags that select them (empty: Keras's defaults)."""
        return as_flags(dict(self.settings))


def _number(value: Any) -> float | None:
    """A figure read back from JSON: a number (a NaN loss kept), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclasses.dataclass(frozen=True)
class Figures(fields.Record):
    """One run's figures as a fresh process measures them."""

    backend: str | None = None
    first_step_s: float | None = None
    p50_s: float | None = None
    mean_s: float | None = None
    examples_per_sec: float | None = None
    timed_steps: int | None = None
    steps_per_call: int | None = None
    batch_size: int | None = None
    mfu: float | None = None
    loss: float | None = None

    @classmethod
    def from_dict(cls, d: Any) -> Figures | None:
        """The figures in `d` (their JSON); None where `d` is no object."""
        if not isinstance(d, dict):
            return None
        counts = ("timed_steps", "steps_per_call", "batch_size")
        values = {
            f.name: (d.get(f.name) if f.name == "backend" else _number(d.get(f.name)))
            for f in dataclasses.fields(cls)
        }
        for name in counts:
            values[name] = None if values[name] is None else int(values[name])
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class Run:
    """A contender's run in a round: figures or error (`interrupted`: not its answer), wall time."""

    figures: Figures | None = None
    error: str | None = None
    interrupted: bool = False
    round: int = 0
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.figures is not None and bool(self.figures.mean_s)

    def figure(self, name: str) -> Any:
        """One of its :class:`Figures` by name (None: it has none)."""
        return getattr(self.figures, name) if self.figures is not None else None

    def to_dict(self) -> dict[str, object]:
        """As the cache holds it: figures, ``error``, ``interrupted``, ``round`` and ``wall_s``."""
        out = self.figures.to_dict() if self.figures is not None else {}
        if self.error is not None:
            out["error"] = self.error
        if self.interrupted:
            out["interrupted"] = True
        return {**out, "round": self.round, "wall_s": self.wall_s}

    @classmethod
    def from_dict(cls, d: Any, place: int = 0) -> Run:
        """What :meth:`to_dict` wrote (`place`: its round where the entry has none)."""
        error = d.get("error")
        figures = None if error else Figures.from_dict(d)
        return cls(
            figures, None if error is None else str(error), bool(d.get("interrupted")),
            int(d.get("round", place)), float(d.get("wall_s") or 0.0),
        )  # fmt: skip


def _runs(value: Any, where: str) -> list[Run]:
    return [Run.from_dict(r, i) for i, r in enumerate(fields.records(where, value))]


@dataclasses.dataclass
class Row(fields.Record):
    """One contender's runs (one per round; a failed run has its ``error``)."""

    contender: Contender
    runs: list[Run] = fields.field(default_factory=list, read=_runs)

    def ok(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    def median(self, key: str) -> float | None:
        values = [r.figure(key) for r in self.ok() if r.figure(key) is not None]
        return statistics.median(values) if values else None

    def spread(self, key: str = "mean_s") -> tuple[float, float] | None:
        values = [r.figure(key) for r in self.ok() if r.figure(key) is not None]
        return (min(values), max(values)) if values else None

    @property
    def error(self) -> str | None:
        return None if self.ok() else next((r.error for r in self.runs if r.error), None)

    @property
    def failed(self) -> int:
        """Runs that measured nothing: a contender with one is never chosen."""
        return len(self.runs) - len(self.ok())

    @property
    def interrupted(self) -> int:
        """Runs a signal or the timeout ended: a result holding one is not cached."""
        return sum(1 for r in self.runs if r.interrupted)


@dataclasses.dataclass
class BackendsResult(fields.Record):
    """Every contender's runs, the winner and the answer's source; ``rows[0]`` is the defaults."""

    target: Target
    rows: list[Row]
    best: Contender
    key: str
    steps: int
    rounds: int
    seconds: float
    cache_hit: bool = fields.field(False, json=False)  # where this answer came from
    why: str = ""

    @property
    def defaults(self) -> Row:
        return self.rows[0]

    def row(self, contender: Contender) -> Row:
        return next(r for r in self.rows if r.contender == contender)

    def ratio(self, row: Row) -> float | None:
        """The median over rounds of the defaults' mean step / this row's (> 1: faster)."""
        return paired_ratio(self.defaults, row)

    def loss_agrees(self, row: Row) -> bool | None:
        return loss_agrees(self.defaults, row)

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "loss_rtol": LOSS_RTOL, "min_gain": MIN_GAIN}

    @classmethod
    def from_dict(cls, d: Any, where: str | None = None, cache_hit: bool = True) -> BackendsResult:
        """A cached or saved result (its answer came from there: `cache_hit`)."""
        return dataclasses.replace(super().from_dict(d, where), cache_hit=cache_hit)

    def block(self) -> Table:
        """The contenders as a table, fastest first, failures last."""

        def order(row: Row) -> float:
            mean = row.median("mean_s")
            return mean if mean is not None else float("inf")

        rows = [self._cells(row) for row in sorted(self.rows, key=order)]
        return Table.of(HEADERS, rows, right=(2, 3, 4, 5, 6, 7, 8))

    def _cells(self, row: Row) -> tuple[str, ...]:
        """One contender's cells: its figures (medians over the rounds), and notes."""
        c = row.contender
        if row.error is not None:
            return (c.backend, c.device, *["—"] * 7, f"failed: {row.error}")
        lo, hi = row.spread() or (0.0, 0.0)
        p50, mean = row.median("p50_s"), row.median("mean_s") or 0.0
        mfu, ratio = row.median("mfu"), self.ratio(row)
        notes = ["defaults"] if row is self.defaults else []
        notes += ["chosen"] if c == self.best else []
        notes += [c.settings_words()] if c.settings else []
        if self.loss_agrees(row) is False:
            notes.append(f"loss differs > {LOSS_RTOL:.0%}")
        if row.failed:
            notes.append(f"{row.failed} run(s) failed: not chosen")
        return (
            c.backend, c.device, num(row.median("first_step_s"), ".3f"),
            num(p50 and p50 * 1e3, ".3f"), f"{mean * 1e3:.3f} ({lo * 1e3:.3f}–{hi * 1e3:.3f})",
            num(row.median("examples_per_sec"), ",.0f"), "n/a" if mfu is None else f"{mfu:.1%}",
            "—" if ratio is None else f"{ratio:.2f}×", num(row.median("loss"), ".4g"),
            ", ".join(notes),
        )  # fmt: skip

    def table(self) -> str:
        """The contenders as a Markdown table (:meth:`block`)."""
        return self.block().markdown()

    def summary(self) -> list[Block]:
        """The comparison as a screen: what ran, the table, the losses, the pick."""
        source = "cache" if self.cache_hit else f"measured in {self.seconds:.0f} s"
        return [
            f"backends: {self.target.label()}, {self.steps} steps per run, medians of "
            f"{self.rounds} interleaved rounds, each run a fresh process ({source})",
            self.block(),
            f"{self.loss_line()}\nchosen: {self.best.flags()} ({self.why})",
        ]

    def loss_line(self) -> str:
        """Whether every contender's final loss agrees with the defaults' within ``LOSS_RTOL``."""
        base = self.defaults.median("loss")
        if base is None or base != base:
            return "losses: the defaults have no final loss to compare with"
        differ, unknown = [], []
        for row in self.rows[1:]:
            agrees = self.loss_agrees(row)
            if agrees is None:
                unknown.append(row.contender.label())
            elif not agrees:
                loss = row.median("loss")
                gap = "NaN" if loss != loss else f"{abs(loss - base) / max(abs(base), 1e-12):.1%}"
                differ.append(f"{row.contender.label()} ({gap} off)")
        line = f"losses: the defaults' final loss {base:.4g}; "
        if len(unknown) == len(self.rows) - 1:  # (none besides the defaults, or none ran)
            line += "no other contender ran to compare it with"
        elif differ:
            line += f"more than {LOSS_RTOL:.0%} off: {', '.join(differ)}"
        else:
            line += f"every other agrees within {LOSS_RTOL:.0%}"
        if unknown:
            line += f"; no loss from {', '.join(unknown)}"
        return line

    def write(self, out_dir: str, plot: bool = True) -> dict[str, str]:
        """``backends.json``, ``.md`` and ``.png`` under `out_dir`, each written atomically."""
        paths = {
            "json": atomic_write(
                os.path.join(out_dir, "backends.json"), json.dumps(self.to_dict(), indent=1)
            ),
            "markdown": atomic_write(
                os.path.join(out_dir, "backends.md"),
                f"# Backends\n\n{markdown(self.summary())}\n",
            ),
        }
        if plot and not extras.note_missing("report", "backends: no PNG chart", ("matplotlib",)):
            paths["png"] = atomic_write(os.path.join(out_dir, "backends.png"), self._png())
        return paths

    def _png(self) -> bytes:
        import io

        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure

        rows = [r for r in self.rows if r.error is None]
        rows.sort(key=lambda r: r.median("mean_s") or 0.0)
        fig = Figure(figsize=(8, 1.6 + 0.5 * max(1, len(rows))))
        ax = fig.subplots()
        labels = [r.contender.label() for r in rows]
        p50 = [1e3 * (r.median("mean_s") or 0.0) for r in rows]
        spread = [r.spread() or (0.0, 0.0) for r in rows]
        err = [
            [p - 1e3 * lo for p, (lo, _) in zip(p50, spread, strict=True)],
            [1e3 * hi - p for p, (_, hi) in zip(p50, spread, strict=True)],
        ]
        colors = ["tab:green" if r.contender == self.best else "tab:blue" for r in rows]
        bars = ax.barh(labels, p50, xerr=err, color=colors, capsize=3)
        # As every screen writes a step: never "1.23e+03 ms" for a step past a second
        ax.bar_label(bars, labels=[format_duration(v / 1e3) for v in p50], padding=4, fontsize=8)
        shown = [v for v in p50 if v > 0]
        log = bool(shown) and max(shown) > 10 * min(shown)  # slivers on a linear axis
        if log:
            ax.set_xscale("log")
        if shown:  # room right of the longest bar for its value, and for the legend
            ax.set_xlim(right=max(shown) * (4 if log else 1.3))
        ax.invert_yaxis()
        from matplotlib.patches import Patch

        keys = [Patch(color="tab:green", label="chosen"), Patch(color="tab:blue", label="other")]
        ax.legend(handles=keys, fontsize=8, loc="upper right")
        ax.set_xlabel("mean ms per training step, median of rounds (whiskers: min–max)\n"
                      "lower is better" + ("; log scale" if log else ""))  # fmt: skip
        ax.set_title(f"{self.target.label()}: which backend trains fastest here")
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()


def num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def paired_ratio(base: Row, row: Row) -> float | None:
    """Median over the rounds both ran of base mean step / row mean step."""
    ratios = paired_ratios(rounds_of([base, row]), base.contender, row.contender, speed)
    return statistics.median(ratios) if ratios else None


def loss_agrees(base: Row, row: Row) -> bool | None:
    a, b = base.median("loss"), row.median("loss")
    if a is None or b is None:
        return None
    if a != a or b != b:  # NaN: no agreement
        return False
    return abs(b - a) <= LOSS_RTOL * max(abs(a), 1e-12)


def rounds_of(rows: Sequence[Row]) -> list[dict[Contender, Run]]:
    """The rows' runs as rounds, ``[{contender: run}]``, for the paired ratios."""
    rounds: dict[int, dict[Contender, Run]] = {}
    for row in rows:
        for run in row.runs:
            rounds.setdefault(run.round, {})[row.contender] = run
    return [rounds[r] for r in sorted(rounds)]


def speed(run: Run) -> float | None:
    """Steps per second of a run by its mean step (None: it failed)."""
    mean = run.figure("mean_s")
    return None if run.error or not mean else 1.0 / mean
