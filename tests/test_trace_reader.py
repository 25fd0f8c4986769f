"""toolkit.report.trace on files a test writes: PyTorch's Chrome-trace JSON (steps from its
ProfilerStep ranges, self time from the nesting of its ops), and the traces it cannot read,
each said in one line rather than raised. XProf's reading of real TensorFlow and JAX traces is
tested where those traces are written (tests/profiling/test_trace_window.py)."""

from __future__ import annotations

import gzip
import json

import pytest

from toolkit.core.files import ReportError
from toolkit.report._trace_records import OpTime, Spread, TopOps, TraceAnalysis, TracedStep
from toolkit.report.trace import find_trace_files, read_trace, trace_lines


def _span(name, ts, dur, cat="cpu_op", tid=1):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def _chrome_trace(path, gz=False):
    events = [
        _span("ProfilerStep#7", 0, 1000, cat="user_annotation"),
        _span("ProfilerStep#8", 1000, 3000, cat="user_annotation"),
        # step 7: a linear op holding a matmul; step 8: the same, twice as long
        _span("aten::linear", 100, 600),
        _span("aten::mm", 200, 400),
        _span("aten::linear", 1100, 1200),
        _span("aten::mm", 1200, 800),
        _span("aten::relu", 2500, 100, tid=2),
        _span("volta_sgemm", 300, 250, cat="kernel", tid=7),
        {"ph": "M", "name": "process_name", "pid": 1},  # metadata events are ignored
    ]
    data = json.dumps({"traceEvents": events})
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(data)
    else:
        path.write_text(data)
    return path


@pytest.mark.parametrize("gz", [False, True], ids=["json", "json.gz"])
def test_pytorch_trace_steps_and_self_times(tmp_path, gz):
    name = "host.123.pt.trace.json" + (".gz" if gz else "")
    analysis = read_trace([str(_chrome_trace(tmp_path / name, gz))])
    assert [s.step for s in analysis.steps] == ["7", "8"]
    assert analysis.step_ms == Spread(mean=2.0, min=1.0, max=3.0)
    host = {o.op: o for o in analysis.top_ops.host}
    # linear's self time is its span less the matmul inside it: (600-400) + (1200-800) µs
    assert host["aten::linear"].self_ms == pytest.approx(0.6 / 2)  # per step, 2 steps
    assert host["aten::mm"].self_ms == pytest.approx(1.2 / 2) and host["aten::mm"].count == 2
    assert sum(o.share for o in host.values()) == pytest.approx(1.0)
    assert analysis.top_ops.device[0].op == "volta_sgemm"
    assert analysis.verdict is None and "no input-pipeline analysis" in analysis.error
    # report.json's object, as reports have always held it, and read back the same
    said = analysis.to_dict()
    assert said["step_ms"] == {"mean": 2.0, "min": 1.0, "max": 3.0}
    assert said["steps"] == [{"step": "7", "step_ms": 1.0}, {"step": "8", "step_ms": 3.0}]
    assert said["top_ops"]["device"][0] == {
        "op": "volta_sgemm", "type": "", "count": 1, "self_ms": 0.125, "share": 1.0}  # fmt: skip
    assert "bottleneck" not in said and "steps_per_row" not in said  # XProf's alone
    assert TraceAnalysis.from_dict(said) == analysis
    lines = "\n".join(trace_lines(analysis))
    assert "trace steps: 2 marked, 2.00 ms mean (1.00–3.00)" in lines
    assert "top device ops" in lines and "\n       0.600 ms  63%  aten::mm\n" in lines


def test_top_ops_one_per_line_named_by_what_identifies_them():
    from toolkit.report.trace import OP_NAME_CHARS, short_op

    long = (
        "StatefulPartitionedCall/StatefulPartitionedCall_1/gradient_tape/sequential_1/"
        "dense_1/MatMul/MatMul_1"
    )
    assert short_op(long) == "∇ sequential_1/dense_1/MatMul/MatMul_1"
    assert short_op("Iterator::Root::Prefetch::BatchV2") == "Iterator::Root::Prefetch::BatchV2"
    cut = short_op("a/" * 60 + "Conv2D")
    assert len(cut) == OP_NAME_CHARS and cut.startswith("…") and cut.endswith("/Conv2D")
    ops = tuple(OpTime(long + str(i), "", 1, self_ms=0.1, share=0.1) for i in range(5))
    shown = trace_lines(TraceAnalysis(steps=(TracedStep("1", 1.0),), top_ops=TopOps(host=ops)))
    assert shown[0] == "  top host ops (self time per step):" and len(shown) == 6
    assert all(len(line) <= 80 for line in shown), shown


def test_what_cannot_be_read_is_said(tmp_path):
    assert read_trace([]).error == "no trace file was written"
    bad = tmp_path / "vm.xplane.pb"
    bad.write_bytes(b"not a trace")
    said = read_trace([str(bad)])
    assert said.error == f"XProf could not read {bad}: not a profiler trace, or a damaged one"
    gone = read_trace([str(tmp_path / "gone.xplane.pb")])
    assert gone.error.endswith("gone.xplane.pb: no such file")
    broken = tmp_path / "x.pt.trace.json"
    broken.write_text("{cut sho")
    assert read_trace([str(broken)]).error.startswith(f"cannot read {broken}")
    assert trace_lines(read_trace([str(broken)]))[-1].startswith("  note: cannot read")


def test_find_trace_files_takes_the_newest_profiling_session(tmp_path):
    import os
    import time

    old = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    new = tmp_path / "plugins" / "profile" / "2025_12_31_23_59_59"  # named older, made later
    for d in (old, new):
        d.mkdir(parents=True)
        (d / "host.xplane.pb").write_bytes(b"")
    past = time.time() - 3600
    os.utime(old, (past, past))
    assert find_trace_files(tmp_path) == [str(new / "host.xplane.pb")]
    assert find_trace_files(tmp_path / "plugins" / "profile" / "none") == []


def _chart(columns, rows, **props):
    """A Google-Charts data table as XProf's tools write them, read as the reader reads one."""
    from toolkit.report import trace

    return trace._Table.of(
        {
            "cols": [{"id": c} for c in columns],
            "rows": [{"c": [{"v": v} for v in row]} for row in rows],
            "p": props,
        }
    )


def test_the_all_reduce_share_of_the_step_is_read_where_the_trace_shows_it():
    """On GPUs XProf's step table has a collectives column; where the ops are listed one by
    one (CPU collectives, NCCL kernels), their self time is the share."""
    from toolkit.report import trace

    columns = ["stepnum", "stepTimeMs", "deviceComputeTimeMs", "deviceCollectivesTimeMs"]
    out = trace._overview([_chart(columns, [["1", 10.0, 6.0, 4.0], ["2", 10.0, 7.0, 3.0]])])
    assert out.collectives_percent == pytest.approx(35.0)
    assert out.breakdown_ms == {"device compute": 6.5, "collectives": 3.5}
    assert out.steps[0].ms("collectives") == 4.0 and out.steps[0].ms("input") == 0.0
    assert any("collectives (the all-reduce" in line and "35.0%" in line
               for line in trace.trace_lines(out))  # fmt: skip

    out = trace._overview([_chart(columns[:3], [["1", 10.0, 10.0], ["2", 10.0, 10.0]])])
    assert out.collectives_percent is None
    ops = _chart(
        ["operation", "type", "host_or_device", "total_self_time"],
        [["all-reduce.6", "all-reduce", "Device", 5000.0], ["dot.3", "dot", "Device", 9000.0],
         ["AllReduce", "NcclAllReduce", "Host", 99000.0]],
    )  # fmt: skip
    assert trace._collective_ops_percent([ops], out) == pytest.approx(25.0)  # 2.5 of 10 ms


def test_trace_steps_are_counted_against_the_window():
    analysis = TraceAnalysis(
        steps=tuple(TracedStep(str(i), 1.0) for i in range(8)), step_ms=Spread(1.0, 0.8, 1.3)
    )
    assert trace_lines(analysis, window=10)[0].startswith("trace steps: 8 of the 10 traced marked")
    assert trace_lines(analysis, window=8)[0].startswith("trace steps: 8 marked,")


def _xprof_analysis():
    """An XProf reading as report.json holds it: two marked calls of two steps each."""
    parts = ["input", "host compute", "device compute", "kernel launch", "device to device",
             "collectives", "output", "compilation", "other"]  # fmt: skip
    rows = [("5", 2.0, 0.5, 1.5), ("6", 4.0, 1.5, 2.5)]
    steps = [
        {"step": n, "step_ms": ms, **dict.fromkeys(parts, 0.0), "input": i, "device compute": d}
        for n, ms, i, d in rows
    ]
    op = {"op": "dense/MatMul", "type": "MatMul", "count": 4, "self_ms": 0.5, "share": 0.25}
    return {
        "reader": "xprof 2.20.0",
        "steps": steps,
        "step_ms": {"mean": 3.0, "min": 2.0, "max": 4.0},
        "breakdown_ms": {"input": 1.0, "device compute": 2.0},
        "input_percent": 100 * 2.0 / 6.0,
        "collectives_percent": None,
        "verdict": "highly input-bound",
        "statement": "Your program is HIGHLY input-bound because 33.3% of the step time ...",
        "top_ops": {"host": [op], "device": []},
        "error": "each of XProf's steps is one call of 2 steps (steps_per_execution): ...",
        "bottleneck": "input",
        "steps_per_row": 2,
    }


def test_the_analysis_reads_back_as_report_json_holds_it():
    """``trace.analysis`` in report.json is the record's ``to_dict``: read back, it writes the
    same object, key for key and in order; an older report's, without the keys added since,
    reads with their defaults; a field of the wrong kind is named."""
    held = _xprof_analysis()
    analysis = TraceAnalysis.from_dict(held)
    assert analysis.steps_per_row == 2 and analysis.bottleneck == "input" and analysis.overview
    assert analysis.steps[1].ms("input") == 1.5 and analysis.top_ops.host[0].type == "MatMul"
    again = analysis.to_dict()
    assert again == held and list(again) == list(held)
    assert [list(s) for s in again["steps"]] == [list(s) for s in held["steps"]]
    assert json.loads(json.dumps(again)) == held

    older = {k: v for k, v in held.items()
             if k not in ("collectives_percent", "bottleneck", "steps_per_row")}  # fmt: skip
    read = TraceAnalysis.from_dict(older)
    assert read.collectives_percent is None and read.steps_per_row == 1 and not read.overview
    assert "bottleneck" not in read.to_dict() and "steps_per_row" not in read.to_dict()
    assert TraceAnalysis.from_dict(None) is None and TraceAnalysis.from_dict({}) is None
    with pytest.raises(ReportError, match=r"field trace\.analysis\.step_ms\.mean is 'x', not a"):
        TraceAnalysis.from_dict({**held, "step_ms": {"mean": "x", "min": 1, "max": 2}})
    with pytest.raises(ReportError, match=r"trace\.analysis\.top_ops\.host\[0\]\.op is missing"):
        TraceAnalysis.from_dict({**held, "top_ops": {"host": [{"self_ms": 1.0}]}})


def test_a_report_shows_the_analysis_it_holds(tmp_path):
    """A report keeps the analysis as JSON (``trace`` stays a dict: a loaded report equals
    the one written) and each of its views reads it as the record: the summary's lines, the
    Markdown's tables and ``read_trace`` where the trace's files are gone. A malformed one is
    one ReportError naming the field."""
    from toolkit.core.stats import summarize_calls
    from toolkit.profiling._timing import Traced
    from toolkit.report import ReportError, RunReport
    from toolkit.report._trace_records import TraceSection

    calls = [[0.5, 1, 0, "first"], *([[0.003, 1, 0, "timed"]] * 20)]
    window = Traced("train", (2, 6), (2, 6), ("train/gone.xplane.pb",))
    trace = TraceSection(window, TraceAnalysis.from_dict(_xprof_analysis()))
    report = RunReport(name="t", steps=summarize_calls(calls, 32), timeline=calls, trace=trace)
    report.write(tmp_path)
    loaded = RunReport.load(tmp_path)
    assert loaded == report and loaded.trace.analysis.to_dict() == _xprof_analysis()
    assert loaded.read_trace() == TraceAnalysis.from_dict(_xprof_analysis())  # files gone
    summary = loaded.summary()
    assert "trace steps: 4 marked in 2 calls of 2, 3.00 ms mean (2.00–4.00)" in summary
    assert "  XProf: highly input-bound: 33.3% of step time waiting for input" in summary
    markdown = loaded.to_markdown()
    assert "| step | ms | input | device compute |" in markdown
    assert "| 6 | 4.000 | 1.500 | 2.500 |" in markdown
    assert "| dense/MatMul | MatMul | 4 | 0.500 | 25.0% |" in markdown

    data = json.loads((tmp_path / "report.json").read_text())
    data["trace"]["analysis"]["steps"][0]["step_ms"] = "slow"
    (tmp_path / "report.json").write_text(json.dumps(data))
    with pytest.raises(ReportError, match=r"trace\.analysis\.steps\[0\]\.step_ms is 'slow'"):
        RunReport.load(tmp_path)


def test_trace_lines_say_markers_far_shorter_than_the_step_time_the_host_s_dispatch():
    """On JAX a step's marker closes when the host has dispatched it, before the device has
    run it: keras.io's Distiller marked 1.79 ms against a 15.4 ms median step. Markers under
    half the step outside the trace are said as the dispatch; near it, as the step."""
    steps = tuple(TracedStep(str(i), 1.79) for i in range(5))
    analysis = TraceAnalysis(steps=steps, step_ms=Spread.of([s.step_ms for s in steps]))
    said = trace_lines(analysis, window=5, step_ms=15.4)
    assert said[0].startswith("trace steps: 5 marked, 1.79 ms mean"), said
    assert said[1] == (
        "  the markers span the host's dispatch of each step (1.79 ms), not the step "
        "(p50 15.40 ms): the backend runs it asynchronously"
    ), said
    for step_ms in (3.0, None):
        assert not any("dispatch" in line for line in trace_lines(analysis, step_ms=step_ms))
