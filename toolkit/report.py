"""RunReport: what one training run measured, as versioned JSON, Markdown and a PNG plot.

This module imports no TensorFlow at module level, so reading and comparing old reports (from a
notebook, or ``python -m toolkit compare``) is fast. Environment capture imports TensorFlow
only when it is already loaded in the process.

Files are written atomically (temporary file in the same directory, fsync, rename): a reader
never sees half a report, and an interrupted write leaves the previous file intact.

Schema (``schema_version`` 1)::

    schema, schema_version, toolkit_version, name, status ("complete" | "partial"), error,
    created_utc, fit_seconds, environment{...}, args{...}, steps{StepStats},
    timeline[[seconds, steps, epoch, kind], ...], timeline_truncated, epochs[{epoch, seconds,
    steps, step_seconds, metrics}], metrics{final}, memory{readings, warnings} | null,
    trace{logdir, requested_steps, traced_steps, files, error} | null, extra{...}

``extra`` holds what later stages add (FLOPs, MFU, diagnosis) without a schema change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import io
import json
import math
import os
import platform
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from toolkit._version import __version__
from toolkit.profiling.flops import format_flops, utilization
from toolkit.profiling.stats import StepStats, format_ms

SCHEMA = "keras-perf-toolkit/run-report"
SCHEMA_VERSION = 1
MAX_TIMELINE = 50_000
REPORT_JSON, REPORT_MD, REPORT_PNG = "report.json", "report.md", "steps.png"
COMPLETE, PARTIAL = "complete", "partial"
_ENV_VARS = (
    "TF_USE_LEGACY_KERAS",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_XLA_FLAGS",
    "TF_GPU_ALLOCATOR",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "KERAS_BACKEND",
)


class ReportError(ValueError):
    """A report file that is missing, unreadable, or of an unknown schema."""


# ---------------------------------------------------------------------------- environment


def cpu_model() -> str:
    """The CPU's marketing name, e.g. ``Apple M2 Pro`` or ``Intel(R) Xeon(R) ...``."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                for line in f:
                    if line.lower().startswith(("model name", "hardware", "cpu model")):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
    elif sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            )
            return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown"


def capture_environment(args: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Python, platform, CPU, TensorFlow/Keras versions, visible devices, toolkit version.

    TensorFlow facts are included only when TensorFlow is already imported (a report written by
    a training process always has them; reading reports never imports TensorFlow).
    """
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "system": platform.system(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
        "toolkit_version": __version__,
        "argv": list(sys.argv),
        "env_vars": {k: os.environ[k] for k in _ENV_VARS if k in os.environ},
    }
    if "tensorflow" in sys.modules:
        env.update(_tensorflow_facts())
    return env


def _tensorflow_facts() -> dict[str, Any]:
    import tensorflow as tf

    from toolkit import compat

    facts: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "keras": compat.keras_version(),
        "keras_flavor": compat.keras_flavor(),
    }
    try:
        build = tf.sysconfig.get_build_info()
        facts["tf_build"] = {
            k: build.get(k) for k in ("is_cuda_build", "cuda_version", "cudnn_version")
        }
    except Exception:  # noqa: BLE001 - build info is a nicety
        pass
    try:
        facts["devices"] = [
            {"name": d.name, "type": d.device_type} for d in tf.config.list_logical_devices()
        ]
    except Exception as e:  # noqa: BLE001
        facts["devices"] = [{"error": str(e)}]
    return facts


# ---------------------------------------------------------------------------- atomic files


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> str:
    """Writes `data` to `path` so that readers see the old file or the new one, never a mix."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix="-" + os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


# ---------------------------------------------------------------------------- the report


@dataclasses.dataclass
class RunReport:
    """Everything one run measured. Build it with :meth:`from_callbacks` or :meth:`load`."""

    name: str
    steps: StepStats
    status: str = COMPLETE
    error: str | None = None
    created_utc: str = ""
    fit_seconds: float | None = None
    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    args: dict[str, Any] = dataclasses.field(default_factory=dict)
    timeline: list[list[Any]] = dataclasses.field(default_factory=list)
    timeline_truncated: bool = False
    epochs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    memory: dict[str, Any] | None = None
    trace: dict[str, Any] | None = None
    compute: dict[str, Any] | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    toolkit_version: str = __version__
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not self.created_utc:
            self.created_utc = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        if self.status not in (COMPLETE, PARTIAL):
            raise ValueError(f"status must be {COMPLETE!r} or {PARTIAL!r}, got {self.status!r}")

    # ------------------------------------------------------------ building

    @classmethod
    def from_callbacks(
        cls,
        name: str,
        timer: Any,
        *,
        memory: Any = None,
        trace: Any = None,
        args: Mapping[str, Any] | None = None,
        status: str = COMPLETE,
        error: str | None = None,
        extra: Mapping[str, Any] | None = None,
        compute: Mapping[str, Any] | None = None,
    ) -> RunReport:
        """A report from a StepTimer (and optionally a MemoryWatch and a TraceWindow).

        `compute` holds ``flops_per_step`` and ``peak_flops_per_s`` (see
        ``toolkit.profiling.flops``); achieved FLOP/s and MFU are added from the median step.
        """
        calls = [[round(d, 9), n, e, k] for d, n, e, k in timer.calls]
        steps = timer.summary()
        if compute is not None:
            compute = {
                **compute,
                **utilization(
                    compute.get("flops_per_step"), steps.p50_s, compute.get("peak_flops_per_s")
                ),
            }
        return cls(
            name=name,
            steps=steps,
            status=status,
            error=error,
            fit_seconds=timer.fit_seconds,
            environment=capture_environment(),
            args=_jsonable(dict(args or {})),
            timeline=calls[:MAX_TIMELINE],
            timeline_truncated=len(calls) > MAX_TIMELINE,
            epochs=[dict(e) for e in timer.epochs],
            metrics=dict(timer.last_logs),
            memory=memory.result() if memory is not None else None,
            trace=trace.result() if trace is not None else None,
            compute=_jsonable(dict(compute)) if compute is not None else None,
            extra=_jsonable(dict(extra or {})),
        )

    @property
    def partial(self) -> bool:
        return self.status == PARTIAL

    # ------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["steps"] = self.steps.to_dict()
        return {"schema": SCHEMA, **d}

    def to_json(self) -> str:
        return json.dumps(_jsonable(self.to_dict()), indent=1, sort_keys=False, allow_nan=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunReport:
        if d.get("schema") != SCHEMA:
            raise ReportError(f"not a run report: schema is {d.get('schema')!r}, not {SCHEMA!r}")
        version = d.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ReportError(
                f"report schema_version {version!r} is newer than this toolkit reads "
                f"({SCHEMA_VERSION}): upgrade keras-perf-toolkit"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        kwargs["steps"] = StepStats.from_dict(d.get("steps") or {})
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunReport:
        """Reads a report from its JSON file, or from a run directory holding ``report.json``.

        Raises:
            ReportError: the file is missing, not JSON, or not a run report this version reads.
        """
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, REPORT_JSON)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise ReportError(
                f"no report at {path!r}: give a report.json or a run directory"
            ) from None
        except (OSError, json.JSONDecodeError) as e:
            raise ReportError(f"cannot read report {path!r}: {e}") from e
        try:
            return cls.from_dict(data)
        except (TypeError, KeyError) as e:
            raise ReportError(f"report {path!r} is malformed: {e}") from e

    # ------------------------------------------------------------ writing

    def write(self, directory: str | os.PathLike[str], plot: bool = True) -> dict[str, str]:
        """Writes ``report.json``, ``report.md`` and (with matplotlib) ``steps.png``, atomically.

        The JSON is written first: it is the record; Markdown and PNG are views of it. A failing
        plot is noted in the Markdown and never loses the JSON.

        Returns:
            ``{"json": path, "markdown": path, "png": path}`` for the files written.
        """
        directory = os.fspath(directory)
        paths = {"json": atomic_write(os.path.join(directory, REPORT_JSON), self.to_json())}
        png_note = None
        if plot:
            try:
                paths["png"] = atomic_write(os.path.join(directory, REPORT_PNG), self.plot_png())
            except ImportError:
                png_note = "no plot: matplotlib is not installed (`pip install .[report]`)"
            except Exception as e:  # noqa: BLE001 - the plot is a view; the record is safe
                png_note = f"no plot: {type(e).__name__}: {e}"
        markdown = self.to_markdown(png=REPORT_PNG if "png" in paths else None, note=png_note)
        paths["markdown"] = atomic_write(os.path.join(directory, REPORT_MD), markdown)
        return paths

    # ------------------------------------------------------------ views

    def summary(self) -> str:
        """A few lines for a terminal: status, step statistics, final metrics."""
        head = f"== {self.name}: {self.status}"
        if self.error:
            head += f" ({self.error})"
        lines = [head]
        device = self.extra.get("device")
        strategy = self.extra.get("strategy") or {}
        if device:
            lines.append(
                f"device: {device.get('kind')}:{device.get('index')} {device.get('human_name')}, "
                f"precision {self.extra.get('precision', 'float32')}, strategy "
                f"{strategy.get('name', 'default')} ({strategy.get('replicas', 1)} replica(s))"
                + (", synthetic data" if self.extra.get("synthetic_data") else "")
                + (
                    f", data from the tf.data service {strategy['data_service']}"
                    if strategy.get("data_service")
                    else ""
                )
            )
        cluster = self.extra.get("cluster") or {}
        if cluster.get("num_workers", 1) > 1:
            lines.append(
                f"cluster: worker {cluster.get('task_index')} of {cluster['num_workers']}"
                + (" (chief)" if cluster.get("is_chief") else "")
                + f", global batch {strategy.get('global_batch')}"
                + f" ({strategy.get('per_replica_batch')} per replica)"
            )
        resume = self.extra.get("resume") or {}
        if resume.get("resumed"):
            lines.append(
                f"resumed from epoch {resume.get('from_epoch')} of the backup in "
                f"{resume.get('backup_dir')} ({resume.get('steps_before')} steps done before; "
                f"{resume.get('steps_total', '?')} in all)"
            )
        lines += self.steps.lines()
        for finding in self.extra.get("preflight") or []:
            lines.append(
                f"preflight [{finding['severity']}] {finding['code']}: {finding['message']}"
            )
        if self.compute:
            lines.append(_compute_line(self.compute))
        if self.extra.get("diagnosis"):
            from toolkit.diagnose import verdict_line

            lines.append(verdict_line(self.extra["diagnosis"]))
        if self.epochs:
            secs = sum(e.get("seconds", 0.0) for e in self.epochs)
            lines.append(f"epochs: {len(self.epochs)} in {secs:.2f} s")
        if self.metrics:
            lines.append("final: " + ", ".join(f"{k} {v:.4g}" for k, v in self.metrics.items()))
        if self.memory and self.memory.get("warnings"):
            lines += [f"memory warning: {w}" for w in self.memory["warnings"]]
        if self.trace:
            lines.append(_trace_line(self.trace))
        return "\n".join(lines)

    def to_markdown(self, png: str | None = None, note: str | None = None) -> str:
        s = self.steps
        out = io.StringIO()
        w = out.write
        w(f"# Run report: {self.name}\n\n")
        w(f"- status: **{self.status}**" + (f" — {self.error}" if self.error else "") + "\n")
        w(f"- created: {self.created_utc} · toolkit {self.toolkit_version}")
        w(f" · schema {self.schema_version}\n")
        if self.fit_seconds is not None:
            w(f"- fit wall time: {self.fit_seconds:.3f} s\n")
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
            ("examples/s", f"{s.examples_per_sec:,.1f}" if s.examples_per_sec else "n/a"),
            (
                "first step (trace/compile)",
                f"{format_ms(s.first_step_s)} over {s.first_step_steps}",
            ),
            ("warm-up steps excluded", s.warmup_steps),
            ("other steps excluded (profiler)", s.excluded_steps),
        ]
        for k, v in rows:
            w(f"| {k} | {v} |\n")
        if self.compute:
            c = self.compute
            mfu = c.get("mfu")
            w("\n## Compute\n\n| figure | value |\n|---|---|\n")
            for k, v in (
                ("FLOPs per step (forward + backward)", format_flops(c.get("flops_per_step"))),
                ("FLOPs per forward pass", format_flops(c.get("flops_forward"))),
                ("achieved (at p50 step)", format_flops(c.get("achieved_flops_per_s"), True)),
                (
                    f"measured {c.get('peak_dtype', '')} matmul peak",
                    format_flops(c.get("peak_flops_per_s"), True),
                ),
                ("MFU", f"{mfu:.1%}" if mfu is not None else "n/a"),
                ("how", c.get("method") or "—"),
                ("note", c.get("note") or "—"),
            ):
                w(f"| {k} | {v} |\n")
        if png:
            w(f"\n![step times]({png})\n")
        if note:
            w(f"\n_{note}_\n")
        if self.epochs:
            keys = sorted({k for e in self.epochs for k in e.get("metrics", {})})
            w("\n## Epochs\n\n| epoch | seconds | steps | in steps (s) | ")
            w(" | ".join(keys) + (" |" if keys else "") + "\n")
            w("|---" * (4 + len(keys)) + "|\n")
            for e in self.epochs:
                m = e.get("metrics", {})
                cells = [f"{m[k]:.4g}" if k in m else "" for k in keys]
                w(
                    f"| {e['epoch']} | {e['seconds']:.3f} | {e['steps']} | "
                    f"{e['step_seconds']:.3f} | " + " | ".join(cells) + (" |" if keys else "")
                )
                w("\n")
        if self.metrics:
            w("\n## Final metrics\n\n| metric | value |\n|---|---|\n")
            for k, v in self.metrics.items():
                w(f"| {k} | {v:.6g} |\n")
        if self.memory:
            w("\n## Memory\n\n| epoch | host RSS (MiB) | devices |\n|---|---|---|\n")
            for r in self.memory.get("readings", []):
                devs = ", ".join(
                    f"{k}: {v['current_mb']:.0f} MiB (peak {v['peak_mb']:.0f})"
                    for k, v in r.get("devices", {}).items()
                )
                epoch = "start" if r.get("epoch") is None else r["epoch"]
                w(f"| {epoch} | {r['host_rss_mb']:.1f} | {devs or '—'} |\n")
            for warning in self.memory.get("warnings", []):
                w(f"\n**Warning:** {warning}\n")
        if self.trace:
            w(f"\n## Profiler trace\n\n{_trace_line(self.trace)}\n")
        for title, mapping in (("Environment", self.environment), ("Arguments", self.args)):
            if mapping:
                w(f"\n## {title}\n\n| key | value |\n|---|---|\n")
                for k, v in mapping.items():
                    w(f"| {k} | {_cell(v)} |\n")
        if self.extra:
            w("\n## Extra\n\n```json\n" + json.dumps(self.extra, indent=1) + "\n```\n")
        return out.getvalue()

    def plot_png(self) -> bytes:
        """Step time over the run and a histogram of the timed steps, as PNG bytes."""
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure

        fig = Figure(figsize=(11, 4), dpi=100)
        ax_t, ax_h = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
        x, colors = 0, {"timed": "tab:blue", "warmup": "tab:orange", "excluded": "tab:gray"}
        series: dict[str, tuple[list[int], list[float]]] = {k: ([], []) for k in colors}
        for seconds, steps, _, kind in self.timeline:
            x += steps
            if kind in series:
                series[kind][0].append(x)
                series[kind][1].append(seconds / steps * 1e3)
        for kind, (xs, ys) in series.items():
            if xs:
                ax_t.plot(xs, ys, ".", ms=2, color=colors[kind], label=kind)
        if self.steps.p50_s:
            ax_t.axhline(self.steps.p50_s * 1e3, color="k", lw=0.8, ls="--", label="p50")
        ax_t.set_xlabel("step")
        ax_t.set_ylabel("ms per step")
        ax_t.set_title(
            f"{self.name}: step time (first step {format_ms(self.steps.first_step_s)} off)"
        )
        ax_t.legend(loc="upper right", fontsize=8)
        timed = series["timed"][1]
        if timed:
            ax_h.hist(timed, bins=min(60, max(5, len(timed) // 10)), color="tab:blue")
            for q, val, style in (
                ("p50", self.steps.p50_s, "--"),
                ("p90", self.steps.p90_s, ":"),
                ("p99", self.steps.p99_s, "-."),
            ):
                if val:
                    ax_h.axvline(val * 1e3, color="k", lw=0.8, ls=style, label=q)
            ax_h.legend(fontsize=8)
        ax_h.set_xlabel("ms per step (timed)")
        ax_h.set_title("histogram")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()


# ---------------------------------------------------------------------------- compare


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The deltas of report `b` against report `a`, with a noise-aware verdict.

    The verdict compares the median time per example (per step when a batch size is unknown).
    A difference counts only when it exceeds both `z` standard errors of the two medians
    combined — each estimated from the run's jitter as ``1.2533 · jitter / sqrt(samples)`` —
    and `min_rel` of the baseline, a floor for the drift between runs that no single run's
    jitter shows (other processes, clocks, thermals).
    """

    a_name: str
    b_name: str
    rows: tuple[tuple[str, float | None, float | None, str], ...]
    verdict: str  # "faster" | "slower" | "within noise" | "unknown"
    ratio: float | None  # a_time / b_time: > 1 means b is faster
    basis: str
    noise: float | None
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        width = max(len(r[0]) for r in self.rows) if self.rows else 10
        lines = [f"{'':{width}}  {'A':>14}  {'B':>14}  {'B vs A':>10}"]
        for label, a, b, unit in self.rows:
            delta = f"{(b - a) / a * 100:+.1f}%" if (a and b is not None) else "n/a"
            lines.append(f"{label:{width}}  {_fmt(a, unit):>14}  {_fmt(b, unit):>14}  {delta:>10}")
        lines.append("")
        lines.append(f"A: {self.a_name}")
        lines.append(f"B: {self.b_name}")
        if self.verdict == "unknown":
            lines.append("verdict: unknown (a report has no timed steps)")
        elif self.verdict == "within noise":
            lines.append(
                f"verdict: within noise — B/A {1 / self.ratio:.3f}× {self.basis}, "
                f"noise band ±{self.noise * 100:.1f}%"
            )
        else:
            lines.append(
                f"verdict: B is {self.verdict}: {self.ratio:.2f}× A's speed ({self.basis}, "
                f"beyond the ±{self.noise * 100:.1f}% noise band)"
            )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


def compare(a: RunReport, b: RunReport, z: float = 3.0, min_rel: float = 0.01) -> Comparison:
    """Compares report `b` with baseline `a`: per-figure deltas and a noise-aware verdict.

    Args:
        a: the baseline report.
        b: the candidate report.
        z: standard errors a difference must exceed. Defaults to `3.0`.
        min_rel: smallest relative difference that counts. Defaults to `0.01` (1 %).
    """
    sa, sb = a.steps, b.steps
    rows = (
        ("step p50", sa.p50_s, sb.p50_s, "ms"),
        ("step mean", sa.mean_s, sb.mean_s, "ms"),
        ("step p90", sa.p90_s, sb.p90_s, "ms"),
        ("step p99", sa.p99_s, sb.p99_s, "ms"),
        ("jitter", sa.jitter_s, sb.jitter_s, "ms"),
        ("examples/s", sa.examples_per_sec, sb.examples_per_sec, "/s"),
        ("first step", sa.first_step_s, sb.first_step_s, "ms"),
        ("batch size", sa.batch_size, sb.batch_size, ""),
        ("timed steps", sa.timed_steps, sb.timed_steps, ""),
        ("fit wall time", a.fit_seconds, b.fit_seconds, "s"),
    )
    notes = []
    for key in ("tensorflow", "keras_flavor", "cpu_model", "devices", "hostname"):
        va, vb = a.environment.get(key), b.environment.get(key)
        if va != vb and va is not None and vb is not None:
            notes.append(f"{key} differs: {_cell(va)} vs {_cell(vb)}")
    for report, label in ((a, "A"), (b, "B")):
        if report.partial:
            notes.append(f"{label} is a partial run ({report.error or 'interrupted'})")

    if not (sa.p50_s and sb.p50_s and sa.samples and sb.samples):
        return Comparison(a.name, b.name, rows, "unknown", None, "", None, tuple(notes))
    if sa.batch_size and sb.batch_size:
        ta, tb, basis = sa.p50_s / sa.batch_size, sb.p50_s / sb.batch_size, "median time/example"
        ja, jb = (sa.jitter_s or 0) / sa.batch_size, (sb.jitter_s or 0) / sb.batch_size
    else:
        ta, tb, basis = sa.p50_s, sb.p50_s, "median time/step"
        ja, jb = sa.jitter_s or 0.0, sb.jitter_s or 0.0
        if sa.batch_size != sb.batch_size:
            notes.append("batch size unknown for one report: compared per step, not per example")
    se = math.hypot(1.2533 * ja / math.sqrt(sa.samples), 1.2533 * jb / math.sqrt(sb.samples))
    noise = max(z * se / ta, min_rel)
    rel = (tb - ta) / ta
    verdict = "within noise" if abs(rel) <= noise else ("faster" if rel < 0 else "slower")
    return Comparison(a.name, b.name, rows, verdict, ta / tb, basis, noise, tuple(notes))


# ---------------------------------------------------------------------------- helpers


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "ms":
        return f"{value * 1e3:.3f} ms"
    if unit == "s":
        return f"{value:.3f} s"
    if unit == "/s":
        return f"{value:,.1f}/s"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _compute_line(c: Mapping[str, Any]) -> str:
    if c.get("flops_per_step") is None:
        return f"compute: FLOPs not counted ({c.get('note') or 'unknown'})"
    line = f"compute: {format_flops(c['flops_per_step'])}/step"
    if c.get("achieved_flops_per_s") is not None:
        line += f", achieved {format_flops(c['achieved_flops_per_s'], True)}"
    if c.get("mfu") is not None:
        line += (
            f", MFU {c['mfu']:.1%} of the measured {c.get('peak_dtype', '')} matmul peak "
            f"{format_flops(c.get('peak_flops_per_s'), True)}"
        )
    return line


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text.replace("|", "\\|").replace("\n", " ")


def _trace_line(trace: Mapping[str, Any]) -> str:
    if trace.get("error"):
        return f"trace: failed ({trace['error']})"
    steps = trace.get("traced_steps")
    files = trace.get("files") or []
    where = trace.get("logdir")
    if not steps:
        return f"trace: requested steps {trace.get('requested_steps')} were not reached"
    return (
        f"trace: steps {steps[0]}–{steps[1]} in {where} ({len(files)} file(s)); "
        f"view with `tensorboard --logdir {where}` (Profile tab) or XProf"
    )


def _jsonable(value: Any) -> Any:
    """Plain JSON types; non-finite floats become None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if hasattr(value, "item"):  # NumPy scalars
        return _jsonable(value.item())
    return str(value)
