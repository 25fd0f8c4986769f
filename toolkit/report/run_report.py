"""RunReport: what one training run measured, as versioned JSON, Markdown and a PNG plot.
Imports neither TensorFlow nor Keras, so old reports read and compare anywhere, instantly. Files
are written atomically. Schema: ``docs/report.md``; schema-1 files (``context``, ``diagnosis`` and
``tune`` kept in ``extra``) still load and compare."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import io
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from toolkit import backend
from toolkit.core import _extras as extras
from toolkit.core import _fields as fields
from toolkit.core import machine, terminal
from toolkit.core._anatomy import Anatomy
from toolkit.core.errors import one_line
from toolkit.core.files import ReportError, atomic_write, inside_run, jsonable, read_checked
from toolkit.core.stats import (
    RELIABLE_SPREAD_PCT,
    StepStats,
    format_duration,
    format_figure,
    format_flops,
    format_metric,
    format_ms,
    format_rate,
    format_s,
)
from toolkit.core.version import __version__
from toolkit.profiling._compute import Compute
from toolkit.profiling._ledger_records import Ledger
from toolkit.profiling._timing import Epoch, FitCall, ProcessTime, Traced, metrics_of
from toolkit.report._anatomy import ANATOMY_PNG, anatomy_lines, anatomy_markdown, anatomy_png
from toolkit.report._cluster import ClusterView, cluster_line
from toolkit.report._diagnosis import DiagnosisSection
from toolkit.report._fit_call import fit_call_line, process_line, process_markdown
from toolkit.report._ledger import (
    fix_lines,
    ledger_json,
    ledger_line,
    ledger_markdown,
    report_ledger,
)
from toolkit.report._memory import memory_lines, memory_markdown
from toolkit.report._tensorboard import TensorBoardRuns
from toolkit.report._trace_records import TraceAnalysis, TraceSection
from toolkit.report._tune import TuneSection
from toolkit.report.context import RunContext
from toolkit.report.trace import left_out_line, read_trace, trace_lines, traced_range

__all__: list[str] = []  # offered through toolkit.report

SCHEMA = "keras-perf-toolkit/run-report"
SCHEMA_VERSION = 2
MAX_TIMELINE = 50_000
PRIVATE_KEYS = ("hostname",)  # in report.json only: report.md is for sharing
REPORT_JSON, REPORT_MD, REPORT_PNG = "report.json", "report.md", "steps.png"
COMPLETE, PARTIAL, DIVERGED = "complete", "partial", "diverged"
UNTIMED = "untimed"  # it ended, but every step was a first call or warm-up: nothing measured
STATUSES = (COMPLETE, PARTIAL, DIVERGED, UNTIMED)


@dataclasses.dataclass
class RunReport(fields.Record):
    """Everything one run measured (:meth:`from_callbacks`, :meth:`load`); sections are records."""

    name: str
    steps: StepStats
    status: str = fields.field(COMPLETE, read=lambda v, at: _status(v))
    error: str | None = None
    created_utc: str = ""
    fit_seconds: float | None = None
    fit_call: FitCall | None = None  # start-up + steps + exit, read leniently: a view of the run
    # The fit's ledger: parts, callbacks, compiles, fixes and savings; None for a custom loop.
    ledger: Ledger | None = fields.field(
        None,
        write=lambda ledger: None if ledger is None else ledger_json(ledger),
        read=lambda v, at: None if v is None else Ledger.read(v),
    )
    anatomy: Anatomy | None = fields.field(None, read=lambda v, at: _anatomy_of(v))
    process: ProcessTime | None = None  # the process to the report in stages; None: start unknown
    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    args: dict[str, Any] = dataclasses.field(default_factory=dict)
    timeline: list[list[Any]] = fields.field(default_factory=list, read=lambda v, at: _calls(v))
    timeline_truncated: bool = False
    epochs: list[Epoch] = dataclasses.field(default_factory=list)
    metrics: dict[str, float] = fields.field(default_factory=dict, read=metrics_of)
    trace: TraceSection | None = fields.field(None, read=lambda v, at: TraceSection.from_dict(v))
    compute: Compute | None = None
    context: RunContext | None = fields.field(None, read=lambda v, at: _context_of(v))
    diagnosis: DiagnosisSection | None = fields.field(None, read=lambda v, at: _diagnosis_of(v))
    tune: TuneSection | None = fields.field(None, read=lambda v, at: TuneSection.from_dict(v))
    cluster: ClusterView | None = fields.field(None, read=lambda v, at: _cluster_of(v))
    tensorboard: TensorBoardRuns | None = fields.field(None, read=lambda v, at: _tensorboard_of(v))
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    toolkit_version: str = __version__
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not self.created_utc:
            self.created_utc = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        # who reads its fixes, and what the model's build compiled beside them
        self.ledger = report_ledger(self.ledger, self.context, self.args, self.process)

    @classmethod
    def from_callbacks(
        cls,
        name: str,
        timer: Any,
        *,
        trace: Any = None,
        args: Mapping[str, Any] | None = None,
        status: str = COMPLETE,
        error: str | None = None,
        extra: Mapping[str, Any] | None = None,
        compute: Compute | None = None,
        context: RunContext | None = None,
        diagnosis: DiagnosisSection | None = None,
        tune: TuneSection | None = None,
        cluster: ClusterView | None = None,
        anatomy: Anatomy | None = None,
        process: ProcessTime | None = None,
    ) -> RunReport:
        """A report from a StepTimer (and TraceWindow); `compute` gets FLOP/s and MFU."""
        calls = [[round(d, 9), n, e, k] for d, n, e, k in timer.calls]
        steps = timer.summary()
        ledger = None
        try:
            ledger = timer.ledger() if hasattr(timer, "ledger") else None
            ledger = report_ledger(ledger, context, args, process, partial=status != COMPLETE)
            if ledger is not None:
                ledger_json(ledger)  # its fixes read now: a failing reading costs the ledger only
        except Exception as e:  # noqa: BLE001 - a view of the run: never costs the report
            ledger = None
            extra = {**(extra or {}), "ledger_error": f"{type(e).__name__}: {e}"}
        if compute is not None:
            compute = compute.at_step(steps.mean_s)  # as examples/s
        return cls(
            name=name,
            steps=steps,
            status=status,
            error=error,
            fit_seconds=timer.fit_seconds,
            fit_call=timer.fit_call(),
            ledger=ledger,
            environment=machine.capture_environment(backend.framework_facts()),
            args=jsonable(dict(args or {})),
            timeline=calls[:MAX_TIMELINE],
            timeline_truncated=len(calls) > MAX_TIMELINE,
            epochs=list(timer.epochs),
            metrics=dict(timer.last_logs),
            trace=_read_back(trace.result(), steps) if trace is not None else None,
            compute=compute,
            context=context,
            diagnosis=diagnosis,
            tune=tune,
            cluster=cluster,
            anatomy=anatomy,
            process=process,
            extra=jsonable(dict(extra or {})),
        )

    def read_trace(self, run_dir: str | os.PathLike[str] | None = None) -> TraceAnalysis | None:
        """The run's trace read again from its files (when gone, as read when the run ended).

        Only files inside `run_dir` (default: the report.json's directory) are read: the names
        come from a file anyone may have edited.

        Raises:
            ReportError: ``trace.files`` names a file outside the run directory."""
        if self.trace is None:
            return None
        source = getattr(self, "_source", None)
        if run_dir is None and source is None:
            return self.trace.analysis
        where = os.fspath(run_dir) if run_dir is not None else os.path.dirname(source)
        named = self.trace.window.files
        report = source or os.path.join(where, REPORT_JSON)
        real = [inside_run(where, f, f"trace.files[{i}]", report) for i, f in enumerate(named)]
        files = [f for f in real if os.path.isfile(f)]
        if not files:
            return self.trace.analysis
        return read_trace(files, self.steps.steps_per_execution)

    @property
    def partial(self) -> bool:
        """Not a whole, sound run: stopped early, or its loss went NaN or infinite."""
        return self.status != COMPLETE

    def to_dict(self) -> dict[str, object]:
        return {"schema": SCHEMA, **super().to_dict()}

    def to_json(self) -> str:
        return json.dumps(jsonable(self.to_dict()), indent=1, sort_keys=False, allow_nan=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunReport:
        if d.get("schema") != SCHEMA:
            raise ReportError(_not_a_report(d))
        version = d.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ReportError(
                f"report schema_version {version!r} is newer than this toolkit reads "
                f"({SCHEMA_VERSION}): upgrade keras-perf-toolkit"
            )
        report = super().from_dict(d)  # each field checked: one line naming it
        if version < 2:  # schema 1 kept the context, diagnosis and tune in extra
            extra = dict(report.extra)
            report.diagnosis = _diagnosis_of(extra.pop("diagnosis", None))
            report.tune = TuneSection.from_dict(extra.pop("tune", None))
            report.context, report.extra = RunContext.from_v1_extra(extra)
            report.schema_version = SCHEMA_VERSION  # read into this version's fields
        return report

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunReport:
        """Reads a report from its JSON file, or from a run directory holding ``report.json``.

        Raises:
            ReportError: the file is missing, not JSON, or not a run report this version reads."""
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, REPORT_JSON)
        report = read_checked(path, cls.from_dict, lambda r: (r.summary(), r.to_markdown()))
        report._source = os.path.abspath(path)  # where the files it names must lie (read_trace)
        return report

    def write(self, directory: str | os.PathLike[str], plot: bool = True) -> dict[str, str]:
        """Writes ``report.json``, ``report.md``, ``steps.png`` (with matplotlib) and
        ``anatomy.png``, atomically; the JSON first, so a failing plot never loses the record.

        Returns:
            The paths written, by kind: ``json``, ``markdown``, ``png``, ``anatomy_png``."""
        directory = os.fspath(directory)
        paths = {"json": atomic_write(os.path.join(directory, REPORT_JSON), self.to_json())}
        png_note = None
        if plot:
            try:
                paths["png"] = atomic_write(os.path.join(directory, REPORT_PNG), self.plot_png())
            except ImportError as e:
                png_note = f"no plot: {extras.why_missing('report', ('matplotlib',)) or e}"
            except Exception as e:  # noqa: BLE001 - the plot is a view; the record is safe
                png_note = f"no plot: {type(e).__name__}: {e}"
        if plot and self.anatomy is not None:
            try:
                drawn = anatomy_png(self.anatomy, os.path.join(directory, ANATOMY_PNG))
                if drawn is not None:
                    paths["anatomy_png"] = drawn
            except Exception as e:  # noqa: BLE001 - the plot is a view; the record is safe
                png_note = (png_note + "; " if png_note else "") + (
                    f"no anatomy plot: {type(e).__name__}: {e}"
                )
        markdown = self.to_markdown(
            png=REPORT_PNG if "png" in paths else None,
            note=png_note,
            anatomy_png=ANATOMY_PNG if "anatomy_png" in paths else None,
        )
        paths["markdown"] = atomic_write(os.path.join(directory, REPORT_MD), markdown)
        return paths

    def fit_wall(self) -> tuple[str, float | None]:
        """The fit's wall time and what it counts: the whole call where timed, else train begin."""
        if self.fit_call is not None and self.fit_call.timed:
            return "fit call", self.fit_call.whole_s
        return "fit from train begin", self.fit_seconds

    def verdict_line(self) -> str:
        """The run in one line: status, median step time and throughput, where it ran."""
        device = self.context.device if self.context else None
        s, where = self.steps, device.label() if device else None
        rate = f", {format_rate(s.examples_per_sec)} examples/s" if s.examples_per_sec else ""
        timing = f"p50 {format_ms(s.p50_s)}/step{rate}" if s.timed_steps else "no timed steps"
        return f"{self.name} {self.status}: {timing}" + (f" on {where}" if where else "")

    def summary(self, columns: int | None = None) -> str:
        """A few lines for a terminal, folded to `columns`: status, step figures, final metrics."""
        head = f"== {self.name}: {self.status}"
        if self.error:
            head += f" ({self.error})"
        lines = [head]
        if self.context is not None:
            lines += self.context.lines()
        if self.environment.get("keras_nightly"):  # unreleased: said where the figures are
            lines.append(f"Keras {keras_shown(self.environment)}")
        lines += self.steps.lines(compile_cache=bool(self.args.get("compile_cache")))
        if self.compute:
            lines.append(_compute_line(self.compute))
        if self.diagnosis is not None:
            lines.append(self.diagnosis.line())
        if self.tune is not None:
            lines.append(self.tune.line())
        if self.cluster:
            lines.append(_processes_line(self.cluster))
        if self.epochs:
            secs = sum(e.seconds for e in self.epochs)
            lines.append(f"epochs: {len(self.epochs)} in {secs:.2f} s")
        if self.ledger:
            lines.append(ledger_line(self.ledger))
            lines += fix_lines(self.ledger)
            lines += memory_lines(self.ledger.memory)
        elif self.fit_call:
            lines.append(fit_call_line(self.fit_call))
        if self.process:
            lines.append(process_line(self.process))
        if self.metrics:
            lines.append("final: " + ", ".join(format_figure(*m) for m in self.metrics.items()))
        if self.tensorboard:
            lines.append(self.tensorboard.line())
        if self.trace is not None:
            lines.append(_trace_line(self.trace))
            held = self.trace.window.traced_steps or (0, 0)
            lines += filter(None, [left_out_line(self.steps.excluded_steps, held[1] - held[0])])
            p50 = self.steps.p50_s
            lines += trace_lines(self.trace.analysis, window=held[1] - held[0],
                                 step_ms=None if p50 is None else p50 * 1e3)  # fmt: skip
        if self.anatomy is not None:
            lines += anatomy_lines(self.anatomy)
        return terminal.fit("\n".join(lines), columns if columns is not None else terminal.width())

    def to_markdown(
        self, png: str | None = None, note: str | None = None, anatomy_png: str | None = None
    ) -> str:
        """``report.md``'s text; `png`: the chart, `note`: why none, `anatomy_png`: the anatomy."""
        out = io.StringIO()
        w = out.write
        self._md_head(w)
        self._md_steps(w)
        self._md_compute(w)
        if self.ledger:
            w(f"\n## Where the time went\n\n{ledger_markdown(self.ledger)}")
        if self.process:
            w(f"\n## The whole process\n\n{process_markdown(self.process)}")
        if png:
            w(f"\n![step times]({png})\n")
        if note:
            w(f"\n_{note}_\n")
        if self.anatomy is not None:
            w("\n" + anatomy_markdown(self.anatomy, png=anatomy_png))
        self._md_epochs(w)
        self._md_memory(w)
        if self.tensorboard:
            w(f"\n## TensorBoard\n\n{self.tensorboard.line()}\n")
        if self.trace is not None:
            w(f"\n## Profiler trace\n\n{_trace_line(self.trace)}\n")
            _trace_markdown(w, self.trace.analysis)
        self._md_searches(w)
        if self.cluster:
            w(f"\n## Cluster\n\n{_processes_line(self.cluster)}\n\n")
            w(self.cluster.table().markdown() + "\n")
        self._md_settings(w)
        return out.getvalue()

    def _md_head(self, w: Callable[[str], Any]) -> None:
        w(f"# Run report: {self.name}\n\n**{self.verdict_line()}**\n\n")
        w(f"- status: **{self.status}**" + (f" — {self.error}" if self.error else "") + "\n")
        w(f"- created: {self.created_utc} · toolkit {self.toolkit_version}")
        keras = keras_shown(self.environment)
        w(f" · Keras {keras}" if keras else "")
        w(f" · schema {self.schema_version}\n")
        if self.ledger is not None:  # the ledger's split (hooks held apart), not fit_call's
            head = "fit call" if self.ledger.timed_call else "fit from train begin"
            w(f"- {head}: {format_s(self.ledger.wall_s)}, in parts in *Where the time went*\n")
        elif self.fit_call:
            w(f"- {fit_call_line(self.fit_call)}\n")
        elif self.fit_seconds is not None:
            w(f"- fit from train begin: {format_s(self.fit_seconds)}\n")

    def _md_steps(self, w: Callable[[str], Any]) -> None:
        s = self.steps
        w("\n## Step time\n\n| figure | value |\n|---|---|\n")
        rows = [
            ("timed steps", s.timed_steps),
            ("samples (executions)", s.samples),
            ("steps_per_execution", s.steps_per_execution),
            ("mean", format_ms(s.mean_s)),
            ("p50", format_ms(s.p50_s)),
            ("p90", format_ms(s.p90_s)),
            ("p99", format_ms(s.p99_s)),
            ("min", format_ms(s.min_s)),
            ("max", format_ms(s.max_s)),
            ("jitter (1.4826·MAD)", format_ms(s.jitter_s)),
            ("batch size", s.batch_size if s.batch_size else "unknown"),
            ("examples/s", format_rate(s.examples_per_sec)),
            (
                "first step (trace/compile)",
                f"{format_duration(s.first_step_s)} over {s.first_step_steps}"
                + (" (compile cache on: may be a read)" if self.args.get("compile_cache") else ""),
            ),
            ("warm-up steps excluded", s.warmup_steps),
            ("other steps excluded (profiler)", s.excluded_steps),
            ("steps compiled again (a new input shape), excluded", s.compiled_steps),
        ]
        for k, v in rows:
            w(f"| {k} | {v} |\n")

    def _md_compute(self, w: Callable[[str], Any]) -> None:
        if not self.compute:
            return
        c = self.compute
        mfu = c.mfu
        w("\n## Compute\n\n| figure | value |\n|---|---|\n")
        for k, v in (
            ("FLOPs per step (forward + backward)", format_flops(c.flops_per_step)),
            ("FLOPs per forward pass", format_flops(c.flops_forward)),
            ("achieved (at p50 step)", format_flops(c.achieved_flops_per_s, True)),
            (
                f"measured {c.peak_dtype} matmul peak",
                format_flops(c.peak_flops_per_s, True) + _peak_spread(c),
            ),
            ("MFU, of the measured peak", f"{mfu:.1%}" if mfu is not None else _no_mfu(c)),
            *_datasheet_rows(c),
            ("how", c.method or "—"),
            ("note", c.note or "—"),
        ):
            w(f"| {k} | {v} |\n")

    def _md_epochs(self, w: Callable[[str], Any]) -> None:
        """The epochs, numbered from 1 as Keras's progress (the JSON from 0), and final metrics."""
        if self.epochs:
            keys = sorted({k for e in self.epochs for k in e.metrics})
            w("\n## Epochs\n\n| epoch | time | steps | in steps | ")
            w(" | ".join(keys) + (" |" if keys else "") + "\n")
            w("|---" * (4 + len(keys)) + "|\n")
            for e in self.epochs:
                m = e.metrics
                cells = [format_metric(m[k]) if k in m else "" for k in keys]
                w(
                    f"| {e.epoch + 1} | {format_s(e.seconds)} | {e.steps} | "
                    f"{format_s(e.step_seconds)} | " + " | ".join(cells) + (" |" if keys else "")
                )
                w("\n")
            w(
                "\n_in steps: the epoch's seconds inside its step executions; epoch 1's hold its "
                "first call, which compiles (the ledger holds compile apart)._\n"
            )
        if self.metrics:
            w("\n## Final metrics\n\n| metric | value |\n|---|---|\n")
            for k, v in self.metrics.items():
                w(f"| {k} | {format_metric(v)} |\n")

    def _md_memory(self, w: Callable[[str], Any]) -> None:
        """The memory by part and by epoch (the ledger's)."""
        shown = memory_markdown(self.ledger.memory) if self.ledger else ""
        if shown:
            w(f"\n## Memory\n\n{shown}")

    def _md_searches(self, w: Callable[[str], Any]) -> None:
        """What ``--diagnose`` and ``--autotune`` found before the run."""
        if self.diagnosis is not None:
            d = self.diagnosis
            w(f"\n## Diagnosis\n\n{d.line()}\n\n")
            if d.pipeline:
                w(f"- measured pipeline: `{d.pipeline}`\n")
            if d.xprof is not None:
                w(f"- XProf, on a trace of the fit: {d.xprof.line}\n")
            for advice in d.advice:
                w(f"- advice: {advice}\n")
        if self.tune is not None:
            w(self.tune.markdown())

    def _md_settings(self, w: Callable[[str], Any]) -> None:
        """The run's context, environment and arguments as key/value tables, and extras."""
        sections = (
            ("Run", self.context.to_dict() if self.context else {}),
            ("Environment", self.environment),
            ("Arguments", self.args),
        )
        for title, mapping in sections:
            if mapping:
                w(f"\n## {title}\n\n| key | value |\n|---|---|\n")
                for k, v in _flat(mapping):
                    if k not in PRIVATE_KEYS:  # report.md is shared; report.json keeps them
                        w(f"| {k} | {cell(v)} |\n")
        if self.extra:
            w("\n## Extra\n\n```json\n" + json.dumps(self.extra, indent=1) + "\n```\n")

    def plot_png(self) -> bytes:
        """Step time over the run and a histogram of the timed steps, as PNG bytes."""
        from toolkit.report._plot import steps_png

        return steps_png(self)


def _compute_line(c: Compute) -> str:
    if c.flops_per_step is None:
        return f"compute: FLOPs not counted ({c.note or 'unknown'})"
    line = f"compute: {format_flops(c.flops_per_step)}/step"
    if c.achieved_flops_per_s is not None:
        line += f", achieved {format_flops(c.achieved_flops_per_s, True)}"
    if c.mfu is not None:
        line += (
            f", MFU {c.mfu:.1%} of the measured {c.peak_dtype} matmul peak "
            f"{format_flops(c.peak_flops_per_s, True)}{_peak_spread(c)}"
        )
    elif c.peak_flops_per_s and not c.reliable_peak:
        line += f", no MFU: {_unreliable_peak(c)}"
    if c.datasheet_mfu is not None:
        line += (
            f"; {c.datasheet_mfu:.1%} of the datasheet peak "
            f"{format_flops(c.datasheet_peak_flops_per_s, True)} ({c.datasheet_peak})"
        )
    return line


def _datasheet_rows(c: Compute) -> list[tuple[str, str]]:
    """The datasheet's peak and the MFU of it, where the GPU is in the table."""
    if not c.datasheet_peak_flops_per_s:
        return []
    mfu = c.datasheet_mfu
    return [
        (f"datasheet peak ({c.datasheet_peak})", format_flops(c.datasheet_peak_flops_per_s, True)),
        ("MFU, of the datasheet peak", f"{mfu:.1%}" if mfu is not None else "n/a"),
    ]


def _no_mfu(c: Compute) -> str:
    if c.peak_flops_per_s and not c.reliable_peak:
        return f"not given: {_unreliable_peak(c)}"
    return "n/a"


def _unreliable_peak(c: Compute) -> str:
    """Why no MFU is given: the peak's own runs were too far apart to be the machine's."""
    spread = c.peak_spread_pct
    within = f"within {spread:.0f}%" if spread is not None else "of unknown spread"
    return (
        f"the matmul peak's runs were {within}, over {RELIABLE_SPREAD_PCT:.0f}% (a busy "
        "machine): the next run measures it again"
    )


def _peak_spread(c: Compute) -> str:
    """`` (runs within 3%)``: how far the peak's timed runs were apart (how much to trust it)."""
    spread = c.peak_spread_pct
    return "" if spread is None else f" (runs within {spread:.0f}%)"


def _flat(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Rows for people: nested mappings as dotted keys, a list of records as one cell."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _flat(value, f"{name}.")
        elif (
            isinstance(value, list | tuple) and value and all(isinstance(v, Mapping) for v in value)
        ):
            yield (
                name,
                "; ".join(
                    ", ".join(f"{k}={_plain(v)}" for k, v in record.items()) for record in value
                ),
            )
        elif isinstance(value, list | tuple):
            yield name, ", ".join(_plain(v) for v in value) if value else "—"
        else:
            yield name, "—" if value is None or value == {} else value


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(jsonable(value), default=str)


def cell(value: Any) -> str:
    """`value` as one Markdown table cell (JSON for structures, pipes escaped)."""
    text = value if isinstance(value, str) else json.dumps(jsonable(value), default=str)
    return text.replace("|", "\\|").replace("\n", " ")


def keras_shown(environment: Mapping[str, Any]) -> str | None:
    """The Keras a report ran on, as read (``3.x.dev… (nightly)``; an old ``.dev`` is a nightly)."""
    version = environment.get("keras")
    if version is None:
        return None
    nightly = environment.get("keras_nightly")
    if nightly is None:
        nightly = ".dev" in str(version)
    return f"{version} (nightly)" if nightly else str(version)


def _trace_line(trace: TraceSection) -> str:
    window = trace.window
    if window.error:
        return f"trace: failed ({window.error})"
    steps, files, where = window.traced_steps, window.files, window.logdir
    if not steps:
        return f"trace: requested steps {list(window.requested_steps)} were not reached"
    head = f"trace: {traced_range(steps)} in {where} ({len(files)} file(s)); "
    if files and all(f.endswith((".json", ".json.gz")) for f in files):  # torch.profiler's
        return head + "open it in https://ui.perfetto.dev or read it with `python -m toolkit trace`"
    view = trace.view or f"tensorboard --logdir {where}"
    line = head + f"view with `{view}` (Profile tab) or read it with `python -m toolkit trace`"
    why = extras.why_missing("profile")
    return line + (f"; {why}" if why else "")


def _read_back(window: Traced, steps: StepStats) -> TraceSection:
    """A TraceWindow's result with what its files say when it wrote any."""
    if not window.files:
        return TraceSection(window)
    return TraceSection(window, read_trace(list(window.files), steps.steps_per_execution))


def _trace_markdown(w: Any, analysis: TraceAnalysis | None) -> None:
    if analysis is None:
        return
    w(f"\nRead with {analysis.reader or 'no reader'}.\n")
    if analysis.statement:
        w(f"\n> XProf: {analysis.statement}\n")
    if analysis.error:
        w(f"\n_{analysis.error}_\n")
    if analysis.steps:
        names = list(analysis.breakdown_ms)
        w("\n| step | ms | " + " | ".join(names) + (" |" if names else "") + "\n")
        w("|---" * (2 + len(names)) + "|\n")
        for s in analysis.steps:
            cells = " | ".join(f"{s.ms(k):.3f}" for k in names)
            w(f"| {s.step} | {s.step_ms:.3f} | {cells}" + (" |" if names else "") + "\n")
    per = "per marked step" if analysis.steps else "in the whole trace"
    for side, top in analysis.top_ops.sides():
        if top:
            w(f"\n**Top {side} ops by self time** ({per})\n\n")
            w("| op | type | calls | self ms | share |\n|---|---|---:|---:|---:|\n")
            for o in top:
                w(
                    f"| {cell(o.op)} | {cell(o.type)} | {o.count} | "
                    f"{o.self_ms:.3f} | {o.share:.1%} |\n"
                )


def _processes_line(cluster: ClusterView) -> str:
    """The cluster's figures, as every process sent them to the chief when training ended."""
    line = cluster_line(cluster, unit="process")
    same = cluster.same_weights
    if same is not None:
        line += "; weights " + (
            "identical on every process" if same else "DIFFER between processes"
        )
    return line


def _diagnosis_of(d: Any) -> DiagnosisSection | None:
    """report.json's diagnosis section (None where absent); a bad value is a ReportError."""
    if d is None:
        return None
    try:
        return DiagnosisSection.from_dict(d)
    except (TypeError, KeyError, AttributeError) as e:
        raise ReportError(
            f"field diagnosis holds a value this toolkit cannot show ({one_line(e)})"
        ) from None


def _status(value: Any) -> str:
    if fields.string("status", value) not in STATUSES:
        raise fields.bad("status", value, f"one of {', '.join(STATUSES)}")
    return value


def _calls(timeline: Any) -> list[list[Any]]:
    timeline = timeline or []
    if not isinstance(timeline, list) or not all(
        isinstance(c, list) and len(c) == 4 for c in timeline
    ):
        raise fields.bad("timeline", timeline, "a list of [seconds, steps, epoch, kind] entries")
    return timeline


def _context_of(d: Any) -> RunContext | None:
    return None if d is None else RunContext.from_dict(fields.mapping("context", d))


def _anatomy_of(d: Any) -> Anatomy | None:
    if d is None:
        return None
    try:
        return Anatomy.from_dict(fields.mapping("anatomy", d))
    except ReportError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise ReportError(f"field anatomy is malformed ({one_line(e)})") from None


def _cluster_of(d: Any) -> ClusterView | None:
    try:
        return ClusterView.from_dict(fields.mapping("cluster", d) or None)
    except ReportError:
        raise
    except (TypeError, ValueError) as e:
        what = f"field cluster holds a value this toolkit cannot show ({one_line(e)})"
        raise ReportError(what) from None


def _tensorboard_of(d: Any) -> TensorBoardRuns | None:
    try:
        return TensorBoardRuns.from_dict(d)
    except ReportError:
        raise
    except ValueError as e:
        raise ReportError(f"field {e}") from None


def _not_a_report(d: Mapping[str, Any]) -> str:
    """Why `d` is no run report, naming the verb that wrote it where its fields say which."""
    if {"points", "limit_mb", "batch_size"} <= set(d):
        return ("not a run report: a memory result (python -m toolkit memory wrote it; run it "
                "again to measure, with --report_dir to keep it)")  # fmt: skip
    if {"phases", "layers", "backend"} <= set(d):
        return "not a run report: an anatomy (anatomy.json): show reads it by that name"
    if {"rows", "best", "target"} <= set(d):
        return "not a run report: a backends result (backends.json): show reads it by that name"
    return f"not a run report: schema is {d.get('schema')!r}, not {SCHEMA!r}"
