"""``python -m toolkit ops`` smoke runs on tiny sizes, in real subprocesses."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.test_faults import _last, _run
from toolkit.bench import frameworks


def _ops(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "toolkit", "ops", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_table_on_tiny_sizes_writes_every_view(tmp_path):
    out = tmp_path / "ops"
    proc = _ops(
        "--size=tiny", "--ops=ReLU,Gather", "--repeats=2", "--min_time=0.001", f"--out={out}"
    )
    assert proc.returncode == 0, proc.stderr
    # TensorFlow's modes, then JAX's jit and PyTorch eager where installed (by default).
    others = [m for m in ("jax_jit", "torch_eager") if not frameworks.missing(m)]
    # On stdout the average table as a terminal table (one device: its modes by name)...
    header = next(line for line in proc.stdout.splitlines() if line.startswith("op "))
    assert header.split()[:4] == ["op", "eager", "graph", "xla"], proc.stdout
    assert all(m in header.split() for m in others), header
    assert re.search(r"^Gather +\d", proc.stdout, re.M) and "|" not in proc.stdout
    assert max(map(len, proc.stdout.splitlines())) <= 120 and "`" not in proc.stdout  # a log
    assert "ratios: A/B = ms of B ÷ ms of A" in proc.stdout
    assert f"whole table: {out / 'ops.md'}" in proc.stdout
    # ...and the whole table, every shape, in ops.md (Markdown)
    md = (out / "ops.md").read_text()
    assert "| " + " | ".join(["Operation", "cpu_eager", "cpu_graph", "cpu_xla"]) in md
    assert "Average benchmark:" in md and "| Gather |" in md and "| Gather / " in md
    modes = 3 + len(others)
    cells = 8 * modes  # Gather 6 cases, ReLU 2
    assert (
        f"ops: ReLU ({cells}/{cells} cells): 2 cases x {modes} modes x 1 device(s)" in proc.stderr
    )
    names = {p.name for p in out.iterdir()}
    assert names == {"ops.json", "ops.md", "ops.csv", "ops_average.csv", "ops.png"}
    record = json.loads((out / "ops.json").read_text())
    assert record["settings"]["size"] == "tiny" and record["environment"]["tensorflow"]
    assert len(record["results"]) == (6 + 2) * modes


def test_fusion_demo_on_tiny_sizes(tmp_path):
    out = tmp_path / "fusion"
    proc = _ops("--fusion", "--size=tiny", "--repeats=1", "--min_time=0.001", f"--out={out}")
    assert proc.returncode == 0, proc.stderr
    assert "matmul + hard_swish, fused (xla, 2 kernels) vs unfused (graph, 5 kernels)" in (
        proc.stdout
    )
    assert "conv2d + bias + relu" in proc.stdout
    assert max(map(len, proc.stdout.splitlines())) <= 120  # folded at spaces, in a log too
    record = json.loads((out / "fusion.json").read_text())
    assert record["schema"] == "toolkit.fusion/1" and len(record["demos"]) == 2
    assert (out / "fusion.md").exists()


def test_bad_choices_are_one_line_errors(tmp_path):
    for args, message in (
        (["--ops=Nope"], "error: ops: --ops: unknown op 'Nope': choose from Argmax"),
        (["--modes=jit"], "error: ops: --modes: unknown mode 'jit': use eager, graph, xla"),
        (["--fusion", "--modes=jax_jit"], "error: ops: --fusion: --modes must name"),
        (["--device=tpu"], "error: ops: --device: unknown device 'tpu'"),
        (["--dtype=int8"], "error: ops: --dtype: unknown dtype 'int8': use float32, float16"),
    ):
        proc = _ops(*args, f"--out={tmp_path / 'x'}", timeout=120)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.strip().splitlines()[-1].startswith(message), proc.stderr
    assert not (tmp_path / "x").exists()  # nothing written for a bad request


def test_ops_out_that_is_a_file_is_refused_before_anything_is_measured(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    out = _run(
        [sys.executable, "-m", "toolkit", "ops", "--size", "tiny", "--ops", "matmul",
         "--modes", "eager", "--device", "cpu", f"--out={afile}"],
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert _last(out) == (
        f"error: ops: --out={afile}: it is a file, not a directory; choose a directory, or "
        "leave --out out (runs/ops-<time>)"
    )
    assert afile.read_text() == "mine\n"
