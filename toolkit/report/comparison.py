"""compare(): report B against baseline A, figure by figure, with a noise-aware verdict. Reads
only the reports (no framework), so runs from any machine or toolkit compare anywhere."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

from toolkit.core import terminal
from toolkit.core._anatomy import Contrast, contrast
from toolkit.core.stats import format_duration, format_ms, format_rate, format_s
from toolkit.profiling._ledger_records import Ledger
from toolkit.profiling._timing import ProcessTime
from toolkit.report._anatomy import contrast_lines
from toolkit.report._fit_call import processes_line
from toolkit.report._ledger import compare_ledgers
from toolkit.report._memory import memory_change
from toolkit.report.run_report import RunReport, cell, keras_shown

__all__: list[str] = []  # offered through toolkit.report


class Figure(NamedTuple):
    """One row of the comparison: a figure of each run in one unit (``""`` for a count)."""

    label: str
    a: float | None
    b: float | None
    unit: str

    def change(self) -> float | None:
        """B against A, relative (``0.05``: B is 5 % higher); None where either is unknown."""
        return (self.b - self.a) / self.a if (self.a and self.b is not None) else None


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The deltas of report `b` against report `a`, with a noise-aware verdict on the median time
    per example (per step when a batch size is unknown). A difference counts only past both `z`
    standard errors of the two medians (each ``1.2533 · jitter / sqrt(samples)``) and `min_rel` of
    the baseline, the drift between runs no single run's jitter shows. Inside a band of ±100 % or
    wider (which passes a time of zero) a change is "too noisy"; B slower past it is "slower"."""

    a_name: str
    b_name: str
    rows: tuple[Figure, ...]
    verdict: str  # "faster" | "slower" | "within noise" | "too noisy" | "unknown" | DIFFERENT
    ratio: float | None  # a_time / b_time: > 1 means b is faster
    basis: str  # the label of the row the verdict is computed on (its A and B are ta, tb)
    noise: float | None
    notes: tuple[str, ...] = ()
    settings: tuple[tuple[str, object, object], ...] = ()  # (flag, A's, B's) where they differ
    ledger: str | None = None  # the two runs' ledgers, part by part (compare_ledgers)
    ledgers: tuple[Ledger | None, Ledger | None] = (None, None)  # each run's, for to_dict
    anatomy: Contrast | None = None  # the two runs' anatomies side by side, where both took one
    memory: str | None = None  # "B: peak host memory +310 MB (+22 %), ..." (both measured)
    processes: tuple[ProcessTime | None, ProcessTime | None] = (None, None)  # each run's

    def blocks(self) -> list[terminal.Block]:
        """The comparison as a screen: the table, runs, settings, verdict, ledgers and notes."""
        table = terminal.Table.of(
            ("", "A", "B", "B vs A"),
            [
                (
                    f"{r.label} (verdict)" if r.label == self.basis else r.label,
                    _fmt(r.a, r.unit),
                    _fmt(r.b, r.unit),
                    _change(r.change()),
                )
                for r in self.rows
            ],
            right=(1, 2, 3),
        )
        lines = ["", f"A: {self.a_name}", f"B: {self.b_name}"]
        if self.settings:
            lines.append(
                "settings that differ (A → B): "
                + ", ".join(f"--{k} {cell(va)} → {cell(vb)}" for k, va, vb in self.settings)
            )
        lines.append(self.verdict_line())
        if self.ledger:
            lines.append(self.ledger)
        if self.memory:
            lines.append(self.memory)
        if self.processes[0] is not None and self.processes[1] is not None:
            lines.append(processes_line(*self.processes))
        if self.anatomy is not None:
            lines += contrast_lines(self.anatomy)
        lines += [f"note: {n}" for n in self.notes]
        return [table, *lines]

    def verdict_line(self) -> str:
        """The verdict in words, on the table's row it was computed on (:attr:`basis`)."""
        if self.verdict == DIFFERENT:
            return (
                "verdict: none: A and B are different workloads (see the notes); the figures "
                "stand side by side, they do not say which is faster"
            )
        if self.verdict == "unknown":
            return "verdict: unknown (a report has no timed steps)"
        row = f"{self.basis}: B/A {1 / self.ratio:.3f}×"
        if self.verdict == TOO_NOISY:
            return (
                f"verdict: none: the runs are too noisy to tell ({row}, a "
                f"±{self.noise * 100:.1f}% noise band); time more steps for a narrower "
                "band (4× the timed steps halve it)"
            )
        if self.verdict == "within noise":
            return f"verdict: within noise ({row}, inside the ±{self.noise * 100:.1f}% noise band)"
        return (
            f"verdict: B is {self.verdict}: {self.ratio:.2f}× A's speed ({row}, beyond the "
            f"±{self.noise * 100:.1f}% noise band)"
        )

    def render(self, columns: int | None = None) -> str:
        return terminal.show(self.blocks(), columns)

    def to_dict(self) -> dict[str, object]:
        """The comparison as plain data (``keras-perf compare --json``)."""
        return {
            "a": self.a_name,
            "b": self.b_name,
            "figures": [
                {
                    "figure": r.label,
                    "a": r.a,
                    "b": r.b,
                    "unit": "s" if r.unit in ("ms", "dur") else r.unit,  # s, as report.json
                    "change": r.change(),
                }
                for r in self.rows
            ],
            "verdict": self.verdict,
            "speed_ratio": self.ratio,
            "basis": self.basis,
            "noise_band": self.noise,
            "notes": list(self.notes),
            "settings": [{"flag": k, "a": va, "b": vb} for k, va, vb in self.settings],
            "ledger": {
                "line": self.ledger,
                "a": _parts_json(self.ledgers[0]),
                "b": _parts_json(self.ledgers[1]),
            },
            "anatomy": _contrast_dict(self.anatomy),
            "memory": self.memory,
            "process": {
                "a": self.processes[0].to_dict() if self.processes[0] is not None else None,
                "b": self.processes[1].to_dict() if self.processes[1] is not None else None,
            },
        }

    def __str__(self) -> str:
        return self.render(terminal.width())


def _memory_of(report: RunReport) -> Any:
    """A report's memory record, from its ledger."""
    return report.ledger.memory if report.ledger is not None else None


RUN_TO_RUN = 0.10  # runs differ by more than either's jitter says: every band's floor (asv: 1.1×)


def _parts_json(ledger: Ledger | None) -> dict[str, float | None] | None:
    """A run's ledger in ``compare --json``: each part's seconds and the wall time."""
    return {**ledger.part_seconds, "wall_s": ledger.wall_s} if ledger else None


def compare(a: RunReport, b: RunReport, z: float = 3.0, min_rel: float = RUN_TO_RUN) -> Comparison:
    """Compares report `b` with baseline `a` (:class:`Comparison`).

    Args:
        z: standard errors a difference must exceed.
        min_rel: smallest relative difference that counts."""
    rows, basis = _figures(a, b)
    notes, different = _notes(a, b)
    both = {
        "anatomy": _contrast(a, b),
        "ledger": compare_ledgers(a.ledger, b.ledger),
        "memory": memory_change(*(_memory_of(r) for r in (a, b))),
        "ledgers": (a.ledger, b.ledger),
        "processes": (a.process, b.process),
    }
    same = (a.name, b.name, rows)
    sa, sb = a.steps, b.steps
    if not (sa.p50_s and sb.p50_s and sa.samples and sb.samples):
        return Comparison(
            *same, "unknown", None, basis, None, tuple(notes), _settings(a, b), **both
        )
    if different:  # two workloads: no speed verdict
        return Comparison(
            *same, DIFFERENT, None, basis, None, tuple(notes), _settings(a, b), **both
        )
    if basis == STEP_P50 and sa.batch_size != sb.batch_size:
        notes.append("batch size unknown for one report: compared per step, not per example")
    verdict, ratio, noise = _verdict(rows, basis, a, b, z, min_rel)
    notes += _mean_against_median(rows, basis, noise)
    return Comparison(*same, verdict, ratio, basis, noise, tuple(notes), _settings(a, b), **both)


STEP_P50, EXAMPLE_P50 = "step p50", "step p50 per example"


def _figures(a: RunReport, b: RunReport) -> tuple[tuple[Figure, ...], str]:
    """The table's rows and the verdict's row: the median step, per example if batches differ."""
    sa, sb = a.steps, b.steps
    per_example = bool(sa.batch_size and sb.batch_size and sa.batch_size != sb.batch_size)
    first = (
        Figure(EXAMPLE_P50, _per(sa.p50_s, sa.batch_size), _per(sb.p50_s, sb.batch_size), "ms")
        if per_example
        else Figure(STEP_P50, sa.p50_s, sb.p50_s, "ms")
    )
    fit_label, fit_a, fit_b = _fit_time(a, b)
    rows = (
        first,
        *([Figure(STEP_P50, sa.p50_s, sb.p50_s, "ms")] if per_example else []),
        Figure("step mean", sa.mean_s, sb.mean_s, "ms"),
        Figure("step p90", sa.p90_s, sb.p90_s, "ms"),
        Figure("step p99", sa.p99_s, sb.p99_s, "ms"),
        Figure("jitter", sa.jitter_s, sb.jitter_s, "ms"),
        Figure("examples/s (mean step)", sa.examples_per_sec, sb.examples_per_sec, "/s"),
        # The first call as a whole, as the ledger's compile counts it; a fused one also per step.
        Figure("first call", sa.first_step_s, sb.first_step_s, "dur"),
        *(
            [Figure("first call/step", _per_step(sa), _per_step(sb), "ms")]
            if max(sa.first_step_steps or 1, sb.first_step_steps or 1) > 1
            else []
        ),
        Figure("batch size", sa.batch_size, sb.batch_size, ""),
        Figure("timed steps", sa.timed_steps, sb.timed_steps, ""),
        Figure(fit_label, fit_a, fit_b, "s"),
    )
    return rows, first.label


def _fit_time(a: RunReport, b: RunReport) -> tuple[str, float | None, float | None]:
    """The fit's wall time as ``show`` says it: the whole call where both timed it, else fit's."""
    (la, va), (lb, vb) = a.fit_wall(), b.fit_wall()
    if la == lb:
        return la, va, vb
    return "fit from train begin", a.fit_seconds, b.fit_seconds


def _per(seconds: float | None, batch: int | None) -> float | None:
    return seconds / batch if (seconds is not None and batch) else None


def _verdict(
    rows: tuple[Figure, ...], basis: str, a: RunReport, b: RunReport, z: float, min_rel: float
) -> tuple[str, float, float]:
    """The `basis` row's verdict, A/B speed ratio and noise band (`z` SEs, at least `min_rel`)."""
    row = next(r for r in rows if r.label == basis)
    ta, tb = row.a, row.b
    sa, sb = a.steps, b.steps
    scale_a, scale_b = (ta / sa.p50_s, tb / sb.p50_s)  # the row's unit per second of step
    ja, jb = (sa.jitter_s or 0.0) * scale_a, (sb.jitter_s or 0.0) * scale_b
    se = math.hypot(1.2533 * ja / math.sqrt(sa.samples), 1.2533 * jb / math.sqrt(sb.samples))
    noise = max(z * se / ta, min_rel)
    rel = row.change()
    if rel > noise:  # B slower past the band: said whatever its width
        verdict = "slower"
    elif noise >= MAX_BAND:  # "faster" can no longer be told, nor "within noise" be meant
        verdict = TOO_NOISY
    else:
        verdict = "within noise" if abs(rel) <= noise else "faster"
    return verdict, ta / tb, noise


def _mean_against_median(rows: tuple[Figure, ...], basis: str, noise: float) -> list[str]:
    """A note where mean and median disagree about the band: slow steps the median leaves out."""
    by = {r.label: r for r in rows}
    median, mean = by[basis].change(), by["examples/s (mean step)"].change()
    if median is None or mean is None:
        return []
    mean_time = 1 / (1 + mean) - 1  # examples/s up is time down
    held = abs(median) <= noise < abs(mean_time)  # the mean moved, the median did not
    apart = mean_time * median < 0 and abs(mean_time) > noise  # they moved opposite ways
    if not (held or apart):
        return []
    return [
        f"the mean step moved {mean_time * 100:+.1f} % and the median {median * 100:+.1f} %: "
        "some steps of one run were much slower than its usual step (see p99); the verdict "
        "is the median's"
    ]


def _notes(a: RunReport, b: RunReport) -> tuple[list[str], bool]:
    """What differs besides the settings, and whether they are other workloads (then no verdict)."""
    notes = []
    for key in (
        "keras_backend", "tensorflow", "keras", "keras_flavor", "cpu_model", "devices", "hostname"
    ):  # fmt: skip
        va, vb = (_shown(key, r.environment) for r in (a, b))
        if va != vb and va is not None and vb is not None:  # as shown: a note says a difference
            notes.append(f"{key} differs: {va} vs {vb}")
    if a.name != b.name:
        notes.append(
            f"different runs: A is {a.name!r}, B is {b.name!r}; the comparison is between two "
            "models or tasks, not two settings of one"
        )
    fa, fb, per = _flops(a, b)
    different = bool(fa and fb and abs(fa - fb) > 0.01 * max(fa, fb))
    if different:
        step_a, step_b = (r.compute.flops_per_step if r.compute else None for r in (a, b))
        each = f" ({fa:,.0f} vs {fb:,.0f} per example)" if per == "example" else ""
        notes.append(f"the models differ: {step_a:,} vs {step_b:,} FLOPs per step{each}")
    ca, cb = a.context, b.context
    if ca is not None and cb is not None and cell(ca.dataset) != cell(cb.dataset):
        different = True
        notes.append(f"dataset differs: {cell(ca.dataset)} vs {cell(cb.dataset)}")
    if ca is not None and cb is not None:
        for key in ("device", "precision", "strategy"):
            va, vb = getattr(ca, key), getattr(cb, key)
            shown = (va.label(), vb.label()) if key == "device" and va and vb else (va, vb)
            if cell(shown[0]) != cell(shown[1]):
                notes.append(f"{key} differs: {cell(shown[0])} vs {cell(shown[1])}")
    return notes + _run_notes(a, b), different


def _run_notes(a: RunReport, b: RunReport) -> list[str]:
    """Each run's own remarks: fewer batches an epoch (fused steps), a partial run."""
    notes = []
    for report, label in ((a, "A"), (b, "B")):
        for finding in report.context.preflight if report.context is not None else ():
            if finding.code == "fused_steps_remainder":  # it trained fewer batches an epoch
                notes.append(f"{label}: {finding.message}")
        if report.partial:
            an = "an" if report.status[0] in "aeiou" else "a"
            notes.append(f"{label} is {an} {report.status} run ({report.error or 'interrupted'})")
    return notes


DIFFERENT = "different workloads"
TOO_NOISY = "too noisy"
MAX_BAND = 1.0  # the widest band that still bounds a change: at ±100 % its lower edge is 0 s
# Flags that say where a run went or how it was shown, not how it trained.
NOT_SETTINGS = frozenset({"report_dir", "log_steps", "log_verbosity", "tensorboard", "backup_dir"})


def _contrast(a: RunReport, b: RunReport) -> Contrast | None:
    """B's anatomy against A's, named by the runs (``A``, ``B`` if same); None unless both."""
    if a.anatomy is None or b.anatomy is None or a.anatomy.error or b.anatomy.error:
        return None
    names = (a.name, b.name) if a.name != b.name else ("A", "B")
    # on the table's own row, the runs' median steps: the parts then add up to its gap
    steps = (a.steps.p50_s, b.steps.p50_s) if a.steps.p50_s and b.steps.p50_s else None
    return contrast(a.anatomy, b.anatomy, *names, steps=steps)


def _contrast_dict(c: Contrast | None) -> dict[str, object] | None:
    """``compare --json``'s ``anatomy``: the line as printed and each part's seconds."""
    if c is None:
        return None
    return {
        "line": " ".join(line.strip() for line in contrast_lines(c, width=10_000)),
        "a_step_s": c.a_step_s,
        "b_step_s": c.b_step_s,
        "parts": [{"what": p.what, "a_s": p.a_s, "b_s": p.b_s} for p in c.parts],
        "rest": None if c.rest is None else {"a_s": c.rest.a_s, "b_s": c.rest.b_s},
        "notes": list(c.notes),
    }


def _flops(a: RunReport, b: RunReport) -> tuple[float | None, float | None, str]:
    """Each report's FLOPs per example (per step without a batch): twice the batch, same work."""
    flops = [r.compute.flops_per_step if r.compute else None for r in (a, b)]
    batches = [(r.compute.batch_size if r.compute else None) or r.steps.batch_size for r in (a, b)]
    if all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in batches):
        return *(f / n if f else None for f, n in zip(flops, batches, strict=True)), "example"
    return flops[0], flops[1], "step"


def _per_step(steps: object) -> float | None:
    first, n = getattr(steps, "first_step_s", None), getattr(steps, "first_step_steps", 0)
    return first / max(1, n) if first is not None else None


def _shown(key: str, environment: dict) -> str | None:
    """An environment value as a note shows it: devices by name, Keras with whether a nightly."""
    value = environment.get(key)
    if value is None:
        return None
    if key == "keras":
        return keras_shown(environment)
    if key == "devices" and isinstance(value, list):
        names = [d.get("name") or d.get("label") or "?" for d in value if isinstance(d, dict)]
        return ", ".join(map(str, names)) or cell(value)
    return cell(value)


def _ran(report: RunReport) -> dict:
    """The run's recorded flags, with what a ``--smoke`` run really ran (one short epoch)."""
    args = dict(report.args or {})
    epochs = report.epochs
    if args.get("smoke") is True and epochs:
        args["epochs"] = len(epochs)
        if epochs[0].steps > 0:
            args["train_steps"] = epochs[0].steps
    return args


def _settings(ra: RunReport, rb: RunReport) -> tuple[tuple[str, object, object], ...]:
    """The flags both runs recorded with different values (where they went aside)."""
    a, b = _ran(ra), _ran(rb)
    keys = sorted((set(a) & set(b)) - NOT_SETTINGS)
    return tuple((k, a[k], b[k]) for k in keys if a[k] != b[k])


def _fmt(value: float | None, unit: str) -> str:
    """A figure as the other screens format it (``format_ms``, ``format_s``, ``format_rate``)."""
    if value is None:
        return "n/a"
    if unit == "ms":
        return format_ms(value)
    if unit == "dur":  # a step or a compile: as the summary's first step
        return format_duration(value)
    if unit == "s":
        return format_s(value)
    if unit == "/s":
        return f"{format_rate(value)}/s"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _change(rel: float | None) -> str:
    return "n/a" if rel is None else f"{rel * 100:+.1f}%"
