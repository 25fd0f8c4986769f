"""toolkit.report.trace on files a test writes: PyTorch's Chrome-trace JSON (steps from its
ProfilerStep ranges, self time from the nesting of its ops), and the traces it cannot read,
each said in one line rather than raised. XProf's reading of real TensorFlow and JAX traces is
tested where those traces are written (tests/profiling/test_trace_window.py)."""

from __future__ import annotations

import gzip
import json

import pytest

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
    assert [s["step"] for s in analysis["steps"]] == ["7", "8"]
    assert analysis["step_ms"] == {"mean": 2.0, "min": 1.0, "max": 3.0}
    host = {o["op"]: o for o in analysis["top_ops"]["host"]}
    # linear's self time is its span less the matmul inside it: (600-400) + (1200-800) µs
    assert host["aten::linear"]["self_ms"] == pytest.approx(0.6 / 2)  # per step, 2 steps
    assert host["aten::mm"]["self_ms"] == pytest.approx(1.2 / 2) and host["aten::mm"]["count"] == 2
    assert sum(o["share"] for o in host.values()) == pytest.approx(1.0)
    assert analysis["top_ops"]["device"][0]["op"] == "volta_sgemm"
    assert analysis["verdict"] is None and "no input-pipeline analysis" in analysis["error"]
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
    ops = [{"op": long + str(i), "self_ms": 0.1, "share": 0.1, "count": 1} for i in range(5)]
    shown = trace_lines({"top_ops": {"host": ops, "device": []}, "steps": [1]})
    assert shown[0] == "  top host ops (self time per step):" and len(shown) == 6
    assert all(len(line) <= 80 for line in shown), shown


def test_what_cannot_be_read_is_said(tmp_path):
    assert read_trace([])["error"] == "no trace file was written"
    bad = tmp_path / "vm.xplane.pb"
    bad.write_bytes(b"not a trace")
    said = read_trace([str(bad)])
    assert said["error"] == f"XProf could not read {bad}: not a profiler trace, or a damaged one"
    gone = read_trace([str(tmp_path / "gone.xplane.pb")])
    assert gone["error"].endswith("gone.xplane.pb: no such file")
    broken = tmp_path / "x.pt.trace.json"
    broken.write_text("{cut sho")
    assert read_trace([str(broken)])["error"].startswith(f"cannot read {broken}")
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
    """A Google-Charts data table as XProf's tools write them."""
    return {
        "cols": [{"id": c} for c in columns],
        "rows": [{"c": [{"v": v} for v in row]} for row in rows],
        "p": props,
    }


def test_the_all_reduce_share_of_the_step_is_read_where_the_trace_shows_it():
    """On GPUs XProf's step table has a collectives column; where the ops are listed one by
    one (CPU collectives, NCCL kernels), their self time is the share."""
    from toolkit.report import trace

    columns = ["stepnum", "stepTimeMs", "deviceComputeTimeMs", "deviceCollectivesTimeMs"]
    out = trace._empty(None, "xprof test")
    trace._overview([_chart(columns, [["1", 10.0, 6.0, 4.0], ["2", 10.0, 7.0, 3.0]])], out)
    assert out["collectives_percent"] == pytest.approx(35.0)
    assert any("collectives (the all-reduce" in line and "35.0%" in line
               for line in trace.trace_lines(out))  # fmt: skip

    out = trace._empty(None, "xprof test")
    trace._overview([_chart(columns[:3], [["1", 10.0, 10.0], ["2", 10.0, 10.0]])], out)
    assert out.get("collectives_percent") is None
    ops = _chart(
        ["operation", "type", "host_or_device", "total_self_time"],
        [["all-reduce.6", "all-reduce", "Device", 5000.0], ["dot.3", "dot", "Device", 9000.0],
         ["AllReduce", "NcclAllReduce", "Host", 99000.0]],
    )  # fmt: skip
    assert trace._collective_ops_percent([ops], out) == pytest.approx(25.0)  # 2.5 of 10 ms


def test_trace_steps_are_counted_against_the_window():
    analysis = {"steps": [{"step": str(i)} for i in range(8)], "step_ms": {
        "mean": 1.0, "min": 0.8, "max": 1.3}}  # fmt: skip
    assert trace_lines(analysis, window=10)[0].startswith("trace steps: 8 of the 10 traced marked")
    assert trace_lines(analysis, window=8)[0].startswith("trace steps: 8 marked,")
