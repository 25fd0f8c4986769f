"""A profiler trace read back: step time and its breakdown, the input share and XProf's verdict,
and the top ops by self time, for the report and ``python -m toolkit trace RUN_DIR``. XSpace
files (TensorFlow's and JAX's profilers) are read with XProf's own converter (``[profile]``):
the breakdown and input-bound verdict are its overview page's, as TensorBoard shows them, never
re-derived; a TensorFlow step that runs a loop (an LSTM, ``tf.map_fn``, ``steps_per_execution``)
is read from a copy with the loop folded. PyTorch's Chrome trace JSON (not XProf's) gives steps
by ``ProfilerStep#N``, self times by nesting, no input analysis. Imports no framework."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from toolkit.core import _trace_events as te
from toolkit.core.files import ReportError, inside_run, parse_json
from toolkit.report._trace_records import OpTime, Spread, TopOps, TraceAnalysis, TracedStep

__all__ = [  # the records it builds (TraceAnalysis, ...) are toolkit.report._trace_records's
    "read_trace",
    "trace_lines",
]

INSTALL_HINT = "pip install 'keras-perf-toolkit[profile]'"
DISPATCH_ONLY = 0.5  # a marked step under this share of the untraced median timed the dispatch
STEP_MARKER = "ProfilerStep#"  # PyTorch's profiler's step ranges (ProfilerStep#7)
TOP_OPS = 10
_BREAKDOWN = (  # XProf's overview page's step table columns (ms), and the report's names
    ("infeedTimeMs", "input"),
    ("hostComputeTimeMs", "host compute"),
    ("deviceComputeTimeMs", "device compute"),
    ("kernelLaunchTimeMs", "kernel launch"),
    ("deviceToDeviceTimeMs", "device to device"),
    ("deviceCollectivesTimeMs", "collectives"),
    ("outfeedTimeMs", "output"),
    ("compileTimeMs", "compilation"),
    ("otherTimeMs", "other"),
)
_VERDICT = re.compile(r"\b(HIGHLY|MODERATELY|POTENTIALLY|NOT)\s+input-bound", re.IGNORECASE)


def read_trace(files: Sequence[str], steps_per_execution: int = 1) -> TraceAnalysis:
    """What the trace `files` (XSpace files: one a host) say, `steps_per_execution` steps a batch:
    a :class:`TracedStep` per marked call, shares, verdict, top ops, ``error``. Never raises."""
    files = [os.fspath(f) for f in files]
    if not files:
        return TraceAnalysis(error="no trace file was written")
    xspace = [f for f in files if f.endswith(".xplane.pb")]
    chrome = [f for f in files if f.endswith((".json", ".json.gz"))]
    if xspace:
        return _read_xspace(xspace, steps_per_execution)
    if chrome:
        return _read_chrome(chrome[-1])
    return TraceAnalysis(error=f"no reader for {os.path.basename(files[0])}")


def find_trace_files(directory: str | os.PathLike[str]) -> list[str]:
    """The trace files under `directory` (XSpace: the newest session's), no symlink leading out."""
    found = []
    for root, _, names in os.walk(os.fspath(directory)):
        found += [
            os.path.join(root, n)
            for n in names
            if n.endswith((".xplane.pb", ".pt.trace.json", ".pt.trace.json.gz"))
            and _inside(os.fspath(directory), os.path.join(root, n))
        ]
    xspace = [f for f in found if f.endswith(".xplane.pb")]
    if xspace:
        newest = max((os.path.dirname(f) for f in xspace), key=os.path.getmtime)
        return sorted(f for f in xspace if os.path.dirname(f) == newest)
    return sorted(found)


def _inside(directory: str, path: str) -> bool:
    try:
        inside_run(directory, path, "", directory)
    except ReportError:
        return False
    return True


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the block: XProf's C++ converter logs INFO lines."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (captured, closed): nothing to hide
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _read_xspace(files: list[str], steps_per_execution: int = 1) -> TraceAnalysis:
    """XProf's reading of `files`, else of a copy with the TF loop folded, else why no step."""
    try:
        from xprof import version as xprof_version
        from xprof.convert import raw_to_tool_data  # noqa: F401 - here: its absence said
    except ImportError:
        return TraceAnalysis(error=f"not read: XProf is not installed ({INSTALL_HINT})")
    reader = f"xprof {getattr(xprof_version, '__version__', '?')}"
    per_row = max(1, steps_per_execution)
    # XProf reads a private copy: it writes caches beside its input and follows planted links.
    with tempfile.TemporaryDirectory(prefix="toolkit-trace-") as tmp:
        copies = _private_copies(files, os.path.join(tmp, "read"))
        if isinstance(copies, str):
            return TraceAnalysis(reader=reader, error=f"XProf could not read {copies}")
        out = _xprof_reading(copies, reader, per_row, named=files)
        if out.steps or out.error != _NO_STEP:  # read, or not readable at all
            return out
        os.mkdir(os.path.join(tmp, "folded"))
        held, folded = _loops_folded(copies, os.path.join(tmp, "folded"))
        if folded:
            again = _xprof_reading(folded, reader, per_row, named=files)
            if again.steps:
                said = (
                    "read from a copy of the trace with its TensorFlow loop folded into the "
                    f"marked steps ({held.iterations} executor events in loop iterations past "
                    "the first): as written, XProf (and TensorBoard's Profile tab) groups it "
                    "by the loop's iterations, not by the step markers, and finds no step"
                )
                return dataclasses.replace(again, error=_notes(said, again.error))
    return dataclasses.replace(out, error=_why_no_step(held, steps_per_execution))


def _private_copies(files: list[str], into: str) -> list[str] | str:
    """Copies of `files` (regular files only) in the new directory `into`, or why not."""
    os.mkdir(into, 0o700)
    copies = []
    for i, path in enumerate(files):
        name = os.path.basename(path)
        copy = os.path.join(into, name if i == 0 else f"{i}-{name}")
        if not os.path.exists(path):
            return f"{path}: no such file"
        if not os.path.isfile(path):
            return f"{path}: not a regular file"
        try:
            shutil.copyfile(path, copy)
        except OSError as e:
            return f"{path}: {e.strerror or e}"
        copies.append(copy)
    return copies


def _xprof_reading(
    files: list[str], reader: str, per_row: int, named: list[str] | None = None
) -> TraceAnalysis:
    """XProf's overview and op stats of `files`, a row per `per_row` steps; `named`: for errors."""
    named = named or files
    raw = _xprof_tools(files, named)
    if isinstance(raw, str):
        return TraceAnalysis(reader=reader, error=raw)
    overview, op_stats = raw
    unexpected = f"XProf's output for {named[0]} was not as expected"
    try:
        read = dataclasses.replace(_overview(_tables(overview), per_row), reader=reader)
    except (ValueError, KeyError, TypeError) as e:
        return TraceAnalysis(reader=reader, error=f"{unexpected}: {e}")
    try:
        tables = _tables(op_stats)
        top = _op_stats(tables, max(1, len(read.steps) * per_row))
        collectives = read.collectives_percent
        if collectives is None:
            collectives = _collective_ops_percent(tables, read)
    except (ValueError, KeyError, TypeError) as e:  # the overview's reading is kept
        return dataclasses.replace(read, error=f"{unexpected}: {e}")
    notes = [read.error]
    if read.steps_per_row > 1:  # Keras marks a call, not each of its steps
        notes.append(
            f"each of XProf's steps is one call of {per_row} steps (steps_per_execution): "
            f"times are per step, the call's divided by {per_row}"
        )
    if not top.listed and read.error is None:
        notes.append(
            "XProf lists no op in this trace (XLA on a CPU is not traced op by op): step times only"
        )
    return dataclasses.replace(
        read, top_ops=top, collectives_percent=collectives, error=_notes(*notes)
    )


def _xprof_tools(files: list[str], named: list[str]) -> tuple[Any, Any] | str:
    """XProf's raw overview page and op stats of `files`, or why it could not read them."""
    from xprof.convert import raw_to_tool_data

    try:
        with _quiet_stderr():
            overview, _ = raw_to_tool_data.xspace_to_tool_data(files, "overview_page", {})
            op_stats, _ = raw_to_tool_data.xspace_to_tool_data(files, "framework_op_stats", {})
    except Exception as e:  # noqa: BLE001 - a trace XProf cannot read: say so, keep the run
        return f"XProf could not read {named[0]}: {type(e).__name__}: {e}"
    if not overview:
        missing = [f for f in named if not os.path.isfile(f)]
        why = "no such file" if missing else "not a profiler trace, or a damaged one"
        return f"XProf could not read {(missing or named)[0]}: {why}"
    return overview, op_stats


def _notes(*notes: str | None) -> str | None:
    """The notes said, in one line (None: none)."""
    return "; ".join(filter(None, notes)) or None


_NO_STEP = "XProf found no step in the trace"  # XProf's overview page's words (replaced by why)
# XProf's own test of a step marker (tsl's IsExplicitHostStepMarker): a host event so named.
_MARKER = re.compile(r"^(train|test|TraceContext)[^/]*$")
_LOOP_OPS = frozenset(  # loop-op events: no steps in a trace holding any (tsl's CheckLoopOp)
    {"WhileOp-EvalCond", "WhileOp-StartBody", "ForOp", "ParallelForOp", "ForeverOp"}
)
_STILL_MEASURED = "no step time or input share (the ops below are still measured)"


@dataclasses.dataclass
class _Held:
    """What a trace holds that XProf's steps depend on: step markers (`roots`: those with the
    ``_r`` stat), executor events in loop iterations past the first, and loop-op events."""

    markers: int = 0
    roots: int = 0
    iterations: int = 0
    loop_ops: set[str] = dataclasses.field(default_factory=set)


def _loops_folded(files: list[str], into: str) -> tuple[_Held | None, list[str] | None]:
    """What the XSpace `files` hold that XProf's steps depend on, and, where they hold step
    markers and a TensorFlow loop's iterations, a copy of each under `into` with every executor
    event's loop iteration set to 0 ((None, None): unreadable; no copy: nothing to fold). XProf
    takes each iteration past the first as a step root (tsl's ``ProcessTensorFlowLoop``), leaving
    the step markers in no group; folded, the trace is grouped by its step markers."""
    try:
        space_type = te.xspace_messages()["XSpace"]
        from google.protobuf.message import DecodeError
    except ImportError:  # protobuf comes with XProf; a reader without it folds nothing
        return None, None
    held, spaces = _Held(), []
    for path in files:
        try:
            with open(path, "rb") as f:
                space = space_type.FromString(f.read())
        except (OSError, DecodeError):
            return None, None
        for plane in space.planes:
            _fold_plane(plane, held)
        spaces.append(space)
    if not (held.iterations and held.markers):
        return held, None
    copies = []
    for i, (path, space) in enumerate(zip(files, spaces, strict=True)):
        name = os.path.basename(path)  # XProf names a host by its file
        copy = os.path.join(into, name if i == 0 else f"{i}-{name}")
        with open(copy, "wb") as f:
            f.write(space.SerializeToString())
        copies.append(copy)
    return held, copies


def _fold_plane(plane: Any, held: _Held) -> None:
    """Counts what `plane` holds into `held`, and sets each executor event's loop iteration to 0."""
    events = {k: v.name for k, v in plane.event_metadata.items()}
    stats = {v.name: k for k, v in plane.stat_metadata.items()}
    held.loop_ops |= _LOOP_OPS.intersection(events.values())
    executor = {k for k, name in events.items() if name == "ExecutorState::Process"}
    host = plane.name == "/host:CPU"
    markers = {k for k, name in events.items() if host and _MARKER.match(name)}
    iter_num, root = stats.get("iter_num"), stats.get("_r")
    for line in plane.lines:
        for event in line.events:
            if event.metadata_id in markers:
                held.markers += 1
                held.roots += any(s.metadata_id == root for s in event.stats)
            elif event.metadata_id in executor:
                for stat in event.stats:
                    if stat.metadata_id == iter_num and (stat.int64_value or stat.uint64_value):
                        held.iterations += 1
                        if stat.HasField("uint64_value"):
                            stat.uint64_value = 0
                        else:
                            stat.int64_value = 0


def _why_no_step(held: _Held | None, steps_per_execution: int) -> str:
    """Why XProf found no step in a trace `held` describes, in words (None: not read here)."""
    if held is None:
        why = "XProf found no step in the trace"
    elif not held.markers:
        why = (
            "the trace holds no step marker: XProf times a step by a 'train' event around "
            "it, which Keras 3's fit does not make (TraceWindow and --profile_steps mark "
            "each traced step)"
        )
    elif held.loop_ops:
        why = (
            f"the trace holds {held.markers} step markers, and TensorFlow loop-op events "
            f"({', '.join(sorted(held.loop_ops))}): XProf groups no event into steps in a "
            "trace that has any (a loop TensorFlow ran as an op, not lowered into the graph)"
        )
    elif not held.roots:
        why = (
            f"the trace holds {held.markers} step markers, none with the root stat '_r' "
            "that XProf groups a step's events by (tf.profiler.experimental.Trace(..., "
            "step_num=N, _r=1) makes one)"
        )
    elif held.iterations:
        why = (
            f"the trace holds {held.markers} step markers and a TensorFlow loop; XProf found "
            "no step even with the loop folded into them"
        )
    else:
        why = f"the trace holds {held.markers} step markers, yet XProf made no step of them"
    if steps_per_execution > 1 and held is not None and held.markers:
        why += f" (steps_per_execution={steps_per_execution}: each marker is one call)"
    return f"{why}: {_STILL_MEASURED}"


Cell = str | float | int | bool | None  # a cell of XProf's data tables, as its JSON holds it


@dataclasses.dataclass(frozen=True)
class _Table:
    """One of XProf's Google-Charts data tables, read once at the edge."""

    columns: tuple[str, ...]
    rows: tuple[dict[str, Cell], ...]
    props: dict[str, Cell]

    @classmethod
    def of(cls, table: dict[str, Any]) -> _Table:
        columns = tuple(
            str(c.get("id", "")) for c in table.get("cols") or [] if isinstance(c, dict)
        )
        rows = tuple(
            {
                k: cell.get("v") if isinstance(cell, dict) else None
                for k, cell in zip(columns, r.get("c") or [], strict=False)
            }
            for r in table.get("rows") or []
            if isinstance(r, dict)
        )
        props = table.get("p")
        return cls(columns, rows, dict(props) if isinstance(props, dict) else {})


def _tables(raw: Any) -> list[_Table]:
    """XProf's tool output: a JSON list of Google-Charts data tables."""
    if not raw:
        raise ValueError("empty output")
    data = parse_json(raw)
    if isinstance(data, dict):
        data = [data]
    return [_Table.of(t) for t in data if isinstance(t, dict)]


def _overview(tables: list[_Table], per_row: int = 1) -> TraceAnalysis:
    """XProf's overview page: its input verdict, and the steps' breakdown, times per step."""
    step_table = next((t for t in tables if "stepTimeMs" in t.columns), None)
    advice = next((t.props for t in tables if "bottleneck" in t.props), {})
    props = step_table.props if step_table is not None else {}
    statement = props.get("input_conclusion") or advice.get("statement")
    match = _VERDICT.search(str(statement or ""))
    bottleneck = advice.get("bottleneck")
    said = TraceAnalysis(
        verdict=f"{match.group(1).lower()} input-bound" if match else None,
        statement=str(statement) if statement else None,
        overview=True,
        bottleneck=str(bottleneck) if bottleneck is not None else None,
    )
    steps = _step_rows(step_table, per_row) if step_table is not None else ()
    if not steps:
        return dataclasses.replace(said, error=_NO_STEP)
    total = sum(s.step_ms for s in steps)
    collectives = sum(s.ms("collectives") for s in steps)  # XProf's own column (GPUs, TPUs)
    return dataclasses.replace(
        said,
        steps=steps,
        steps_per_row=per_row,
        step_ms=Spread.of([s.step_ms for s in steps]),
        breakdown_ms={
            name: sum(s.ms(name) for s in steps) / len(steps)
            for _, name in _BREAKDOWN
            if any(s.ms(name) for s in steps)
        },
        input_percent=100.0 * sum(s.ms("input") for s in steps) / total if total > 0 else None,
        collectives_percent=(
            100.0 * collectives / total if collectives > 0 and total > 0 else None
        ),
    )


def _step_rows(step_table: _Table, per_row: int) -> tuple[TracedStep, ...]:
    """The overview page's step table: a row per marked call of `per_row` steps, times per step."""
    return tuple(
        TracedStep(
            step=str(row.get("stepnum")),
            step_ms=float(row.get("stepTimeMs") or 0) / per_row,
            breakdown={name: float(row.get(column) or 0) / per_row for column, name in _BREAKDOWN},
        )
        for row in step_table.rows
    )


_COLLECTIVE = re.compile(
    r"all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|collective|nccl|gloo|"
    r"psum",
    re.IGNORECASE,
)


def _collective_ops_percent(tables: list[_Table], read: TraceAnalysis) -> float | None:
    """The collectives' share of the step from the ops' self times; None when none are listed."""
    table = next((t for t in reversed(tables) if "total_self_time" in t.columns), None)
    step_ms = read.step_ms.mean if read.step_ms is not None else None
    if table is None or not step_ms:
        return None
    rows = [
        r
        for r in table.rows
        if _COLLECTIVE.search(f"{r.get('operation')} {r.get('type')}")
        and str(r.get("host_or_device", "")).lower() == "device"
    ]
    if not rows:
        return None
    per_step = sum(float(r.get("total_self_time") or 0) for r in rows) / 1e3 / len(read.steps)
    return min(100.0, 100.0 * per_step / step_ms)


def _op_stats(tables: list[_Table], steps: int) -> TopOps:
    """The top ops by self time on the host and on the device, self time per traced step."""
    table = next((t for t in reversed(tables) if "total_self_time" in t.columns), None)
    if table is None:
        return TopOps()
    rows = [r for r in table.rows if str(r.get("type")).upper() != "IDLE"]
    top: dict[str, tuple[OpTime, ...]] = {}
    for side in ("host", "device"):
        mine = [r for r in rows if str(r.get("host_or_device", "")).lower() == side]
        total = sum(float(r.get("total_self_time") or 0) for r in mine)
        mine.sort(key=lambda r: float(r.get("total_self_time") or 0), reverse=True)
        top[side] = tuple(
            OpTime(
                op=str(r.get("operation")),
                type=str(r.get("type")),
                count=int(r.get("occurrences") or 0),
                self_ms=float(r.get("total_self_time") or 0) / 1e3 / steps,
                share=float(r.get("total_self_time") or 0) / total if total > 0 else 0.0,
            )
            for r in mine[:TOP_OPS]
        )
    return TopOps(host=top["host"], device=top["device"])


@dataclasses.dataclass
class _Timed:
    """A Chrome trace's complete event (``ph`` ``X``): name, start, duration (µs), self time."""

    name: str
    start: float
    dur: float
    self_us: float

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> _Timed:
        dur = float(event["dur"])
        return cls(str(event.get("name")), float(event.get("ts", 0.0)), dur, dur)

    @property
    def end(self) -> float:
        return self.start + self.dur


def _read_chrome(path: str) -> TraceAnalysis:
    reader = "chrome trace json"
    spans, error = te.chrome_events(path)
    if error is not None:
        return TraceAnalysis(reader=reader, error=error)
    steps = tuple(
        TracedStep(str(e["name"]).removeprefix(STEP_MARKER), float(e["dur"]) / 1e3)
        for e in te.step_events(spans, STEP_MARKER)
    )
    host = [e for e in spans if e.get("cat") == "cpu_op"]
    device = [_Timed.of(e) for e in spans if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    count = max(1, len(steps))
    return TraceAnalysis(
        reader=reader,
        steps=steps,
        step_ms=Spread.of([s.step_ms for s in steps]),
        top_ops=TopOps(host=_top(_self_times(host), count), device=_top(device, count)),
        error=(
            "PyTorch's trace has no input-pipeline analysis (XProf reads TensorFlow's and "
            "JAX's traces only): step times and ops only"
            if steps
            else f"no {STEP_MARKER} marker in the trace: ops only"
        ),
    )


def _self_times(events: list[te.Event]) -> list[_Timed]:
    """`events` as spans with their self time (less the events nested directly in them)."""
    by_thread: dict[tuple[Any, Any], list[te.Event]] = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    out = []
    for thread in by_thread.values():
        spans: dict[int, _Timed] = {}
        for e, enclosing in te.innermost(thread):
            span = spans[id(e)] = _Timed.of(e)
            if enclosing:
                spans[id(enclosing[-1])].self_us -= span.dur
            out.append(span)
    return out


def _top(spans: list[_Timed], steps: int) -> tuple[OpTime, ...]:
    """The longest of `spans` by total self time, one :class:`OpTime` per name, per step."""
    totals: dict[str, list[float]] = {}
    for span in spans:
        entry = totals.setdefault(span.name, [0.0, 0])
        entry[0] += max(0.0, span.self_us)
        entry[1] += 1
    grand = sum(v[0] for v in totals.values())
    ranked = sorted(totals.items(), key=lambda kv: kv[1][0], reverse=True)[:TOP_OPS]
    return tuple(
        OpTime(
            op=name,
            type="",
            count=int(n),
            self_ms=us / 1e3 / steps,
            share=us / grand if grand > 0 else 0.0,
        )
        for name, (us, n) in ranked
    )


_WRAPPERS = re.compile(  # scopes that wrap every op of a step: they say nothing of the op
    r"^(StatefulPartitionedCall|PartitionedCall|while|body|cond|.*_fn|__inference.*|"
    r"one_step_on.*|multi_step_on.*|jit\(.*\)|pjit|Iterator|"
    # the anatomy's scope tokens: the layers' own names stand beside them
    r"kp(?:l\d+|opt|loss|metrics|step|model))(_\d+)?$"
)
OP_NAME_CHARS = 56  # the longest op name a trace line shows


def short_op(name: str, limit: int = OP_NAME_CHARS) -> str:
    """An op's name cut to what identifies it: scopes dropped, ``∇`` for ``gradient_tape/``."""
    parts = [p for p in name.split("/") if p and not _WRAPPERS.match(p)]
    grad = "gradient_tape" in parts or "gradients" in parts
    parts = [p for p in parts if p not in ("gradient_tape", "gradients")]
    shown = ("∇ " if grad else "") + "/".join(parts or [name])
    return shown if len(shown) <= limit else "…" + shown[-(limit - 1) :]


def traced_range(held: Sequence[int]) -> str:
    """A trace window's steps as counted: held ``(100, 110)`` reads ``steps 100–109 (10)``."""
    first, stop = int(held[0]), int(held[1])
    if stop - first == 1:
        return f"step {first} (1)"
    return f"steps {first}–{stop - 1} ({stop - first})"


def left_out_line(excluded: int, window: int | None) -> str | None:
    """How the steps left out of the timing relate to the traced `window`; None: none left out."""
    if not excluded:
        return None
    if not window or excluded < window:
        return f"  left out of the timing: {excluded} steps (under a profiler)"
    extra = excluded - window
    edge = f" and {extra} whose interval held the trace's start or stop" if extra else ""
    return f"  left out of the timing: {excluded} steps, the {window} traced{edge}"


def trace_lines(
    analysis: TraceAnalysis | None,
    ops: int = 5,
    window: int | None = None,
    step_ms: float | None = None,
) -> list[str]:
    """The trace section for a terminal: step time, breakdown, XProf's verdict, top ops. `window`:
    the steps traced; `step_ms`: the untraced median (far shorter markers: the host's dispatch)."""
    if analysis is None:
        return []
    lines = []
    marked, breakdown = analysis.step_ms, analysis.breakdown_ms
    if marked is not None:
        lines.append(_steps_line(analysis, marked, window))
        if step_ms and marked.mean < DISPATCH_ONLY * step_ms:
            lines.append(
                f"  the markers span the host's dispatch of each step ({marked.mean:.2f} ms), "
                f"not the step (p50 {step_ms:.2f} ms): the backend runs it asynchronously"
            )
    step_ms = marked
    if breakdown:
        lines.append(
            "  per step: " + ", ".join(f"{k} {v:.2f} ms" for k, v in breakdown.items() if v)
        )
    if analysis.input_percent is not None:
        verdict = analysis.verdict or "no verdict"
        line = f"  XProf: {verdict}: {analysis.input_percent:.1f}% of step time waiting for input"
        other = breakdown.get("other")
        if verdict == "potentially input-bound" and other and step_ms is not None and step_ms.mean:
            line += (
                f", {100 * other / step_ms.mean:.0f}% 'other' time (Python, I/O: outside any op)"
            )
        lines.append(line)
    if analysis.collectives_percent:
        lines.append(
            f"  collectives (the all-reduce of the gradients, ...): "
            f"{analysis.collectives_percent:.1f}% of step time"
        )
    per = "per step" if analysis.steps else "in the whole trace"
    for side, top in analysis.top_ops.sides():
        if top:
            lines.append(f"  top {side} ops (self time {per}):")
            lines += [
                f"    {o.self_ms:8.3f} ms {o.share:4.0%}  {short_op(o.op)}" for o in top[:ops]
            ]
    if analysis.error:
        lines.append(f"  note: {analysis.error}")
    return lines


def _steps_line(analysis: TraceAnalysis, step_ms: Spread, window: int | None) -> str:
    """How many steps the trace marked (against the `window`), and their time."""
    calls = len(analysis.steps)
    per = analysis.steps_per_row  # Keras marks a call of that many steps
    n = calls * per
    of, why = (
        (f" of the {window} traced", " (XProf leaves out steps at the trace's edges)")
        if window and window != n
        else ("", "")
    )
    held = f" in {calls} calls of {per}" if per > 1 else ""
    return (
        f"trace steps: {n}{of} marked{held}{why}, {step_ms.mean:.2f} ms mean "
        f"({step_ms.min:.2f}–{step_ms.max:.2f})"
    )
