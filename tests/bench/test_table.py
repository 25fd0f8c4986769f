"""The seed's table layout from injected timings: header, cells, speedups, averages, n/a,
CSV, JSON round trip and the files written."""

from __future__ import annotations

import csv
import io
import json

import pytest

from toolkit.bench.table import (
    Measurement,
    OpTable,
    Timing,
    format_ms,
    format_speedup,
    speedup_pct,
)


def _t(ms: float, spread: float = 1.0) -> Timing:
    return Timing(ms, spread, (ms, ms, ms), 10, 5 * ms)


def _table(devices=("cpu",), missing=()) -> OpTable:
    # ms per (device, mode) for 2 Argmax rows and 1 ReLU row; XLA ~9 % faster than graph.
    times = {
        ("Argmax", 0): {"eager": 2.00, "graph": 1.68, "xla": 1.54},
        ("Argmax", 1): {"eager": 1.50, "graph": 1.62, "xla": 1.54},
        ("ReLU", 0): {"eager": 0.44, "graph": 0.40, "xla": 0.22},
    }
    labels = {
        ("Argmax", 0): "Argmax / dim=64x1024x128 axi=0",
        ("Argmax", 1): "Argmax / dim=64x1024x128 axi=1",
        ("ReLU", 0): "ReLU / dim=128x16x1024",
    }
    results = []
    for (op, case), by_mode in times.items():
        for k, device in enumerate(devices):
            for mode, ms in by_mode.items():
                if (op, case, device, mode) in missing:
                    results.append(
                        Measurement(op, case, labels[op, case], device, mode, None, "no kernel")
                    )
                else:
                    scaled = ms / (10**k)  # the second device is 10x faster
                    results.append(
                        Measurement(op, case, labels[op, case], device, mode, _t(scaled))
                    )
    columns = [f"{d}_{m}" for d in devices for m in ("eager", "graph", "xla")]
    return OpTable(
        results,
        columns,
        settings={"size": "full", "dtype": "float32", "repeats": 3, "min_time_s": 0.02},
        devices=[{"label": d, "human_name": d.upper()} for d in devices],
        floors={c: 0.01 for c in columns},
    )


def test_formatting():
    assert speedup_pct(1.68, 1.54) == pytest.approx(9.09, abs=0.01)
    assert format_speedup(9.09) == "1.09×" and format_speedup(-55.2) == "0.45×"
    assert format_speedup(None) == "n/a" and format_speedup(310.4) == "4.10×"  # not +310%
    assert format_ms(1.684) == "1.68" and format_ms(0.0123) == "0.012" and format_ms(None) == "n/a"


def test_header_and_rows_in_the_seeds_layout():
    md = _table().to_markdown()
    assert (
        "| Operation | cpu_eager | cpu_graph | cpu_xla | cpu_graph/cpu_eager speedup | "
        "cpu_xla/cpu_graph speedup |"
    ) in md
    assert "| Argmax / dim=64x1024x128 axi=0 | 2.00 | 1.68 | 1.54 | 1.19× | 1.09× |" in md
    assert "| ReLU / dim=128x16x1024 | 0.44 | 0.40 | 0.22 | 1.10× | 1.82× |" in md
    assert "Average benchmark:" in md
    # Argmax average: eager (2.00+1.50)/2, graph (1.68+1.62)/2, xla 1.54.
    assert "| Argmax | 1.75 | 1.65 | 1.54 | 1.06× | 1.07× |" in md
    assert md.index("| Argmax / dim") < md.index("Average benchmark:") < md.index("| Argmax |")


def test_a_second_device_adds_cross_device_speedups():
    table = _table(devices=("cpu", "cuda"))
    header = table.header()
    assert header[1:7] == [
        "cpu_eager",
        "cpu_graph",
        "cpu_xla",
        "cuda_eager",
        "cuda_graph",
        "cuda_xla",
    ]
    assert header[7:] == [
        "cpu_graph/cpu_eager speedup",
        "cpu_xla/cpu_graph speedup",
        "cuda_graph/cuda_eager speedup",
        "cuda_xla/cuda_graph speedup",
        "cuda_eager/cpu_eager speedup",
        "cuda_graph/cpu_graph speedup",
        "cuda_xla/cpu_xla speedup",
    ]
    pct = table.detailed()[0][2]
    assert pct[-3:] == [pytest.approx(900.0)] * 3  # 10x faster = +900%


def test_na_cells_have_their_reason_and_do_not_skew_averages():
    table = _table(missing={("Argmax", 1, "cpu", "xla")})
    md = table.to_markdown()
    assert "| Argmax / dim=64x1024x128 axi=1 | 1.50 | 1.62 | n/a | 0.93× | n/a |" in md
    assert "- `cpu_xla` Argmax / dim=64x1024x128 axi=1: no kernel" in md
    # xla's Argmax average is row 0 only, and xla/graph compares row 0 only (1.68 vs 1.54).
    assert "| Argmax | 1.75 | 1.65 | 1.54 | 1.06× | 1.09× |" in md


def test_noisy_cells_are_listed():
    table = _table()
    table.results[0] = Measurement(
        "Argmax", 0, table.results[0].label, "cpu", "eager", _t(2.0, spread=25.0)
    )
    assert "± 25%" in table.to_markdown()
    assert len(table.noisy()) == 1


def test_csv_detailed_and_average():
    table = _table()
    rows = list(csv.reader(io.StringIO(table.to_csv())))
    assert rows[0][:4] == ["operation", "cpu_eager ms", "cpu_graph ms", "cpu_xla ms"]
    assert rows[0][4:6] == ["cpu_graph/cpu_eager speedup %", "cpu_xla/cpu_graph speedup %"]
    assert rows[0][6:] == ["cpu_eager spread %", "cpu_graph spread %", "cpu_xla spread %"]
    assert rows[1][0] == "Argmax / dim=64x1024x128 axi=0"
    assert float(rows[1][1]) == 2.0 and float(rows[1][5]) == pytest.approx(9.09, abs=0.01)
    avg = list(csv.reader(io.StringIO(table.to_csv(average=True))))
    assert [r[0] for r in avg[1:]] == ["Argmax", "ReLU"] and len(avg[0]) == 6


def test_json_round_trip_and_files(tmp_path):
    table = _table(missing={("ReLU", 0, "cpu", "xla")})
    record = json.loads(table.to_json())
    assert record["schema"] == "toolkit.ops/1" and len(record["results"]) == 9
    again = OpTable.from_dict(record)
    assert again.to_markdown() == table.to_markdown()
    paths = table.write(tmp_path / "ops")
    assert {p.rsplit("/", 1)[-1] for p in paths.values()} == {
        "ops.json",
        "ops.md",
        "ops.csv",
        "ops_average.csv",
        "ops.png",
    }
    assert (tmp_path / "ops" / "ops.png").read_bytes()[:4] == b"\x89PNG"
    assert "![average ms per op](ops.png)" in (tmp_path / "ops" / "ops.md").read_text()


def test_not_an_ops_record():
    from toolkit.report import ReportError

    with pytest.raises(ReportError, match="not an op benchmark record"):
        OpTable.from_dict({"schema": "toolkit.report/1"})


def test_framework_columns_compare_like_with_like():
    """JAX's jit against TF's XLA, PyTorch eager against TF eager, torch.compile against
    PyTorch eager, on one device; a framework on another device against the first's."""
    columns = [
        "cpu_eager", "cpu_graph", "cpu_xla", "cpu_jax_jit", "cpu_torch_eager",
        "cpu_torch_compile", "cuda_jax_jit",
    ]  # fmt: skip
    table = OpTable(results=[], columns=columns)
    assert table.speedup_pairs() == [
        ("cpu_graph", "cpu_eager"),
        ("cpu_xla", "cpu_graph"),
        ("cpu_jax_jit", "cpu_xla"),
        ("cpu_torch_eager", "cpu_eager"),
        ("cpu_torch_compile", "cpu_torch_eager"),
        ("cuda_jax_jit", "cpu_jax_jit"),
    ]
    only = OpTable(results=[], columns=["cpu_eager", "cpu_xla", "cpu_torch_compile"])
    assert only.speedup_pairs() == [("cpu_xla", "cpu_eager"), ("cpu_torch_compile", "cpu_xla")]


def test_the_terminal_screen_fits_120_columns_in_a_log_and_on_a_wide_terminal():
    """What ``ops`` prints, with two devices' columns: the settings without Markdown, every line
    at most 120 columns in a log (no width) and on a 300-column terminal (the table in parts),
    at most 80 on an 80-column one."""
    table = _table(devices=("cpu", "cuda"))
    for columns, widest in ((None, 120), (300, 120), (80, 80)):
        shown = table.to_terminal(columns)
        lines = shown.splitlines()
        assert max(map(len, lines)) <= widest, (columns, shown)
        assert "`" not in shown and lines[0] == "ms per call, each op averaged over its shapes"
        assert lines[1].startswith("size preset full, float32, median of 3 timed loops")
    assert "cuda_xla/" in table.to_terminal(None)  # the cross-device ratios, in a part below
