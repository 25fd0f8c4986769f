"""Reading a report someone else wrote (issue 58, round 4): its strings cannot drive the
terminal, a FIFO or a device in its place is refused without a blocking read, a number too
large for a float is one line, and ``compare`` compares like with like (seconds said as
seconds, a batch-size change the same workload per example, a fused first call as a whole).

Every report here was written by a real ``--smoke`` run; variants are edited copies of it, and
the verbs run as the user runs them, in their own processes."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from tests.test_faults import _report, _run
from toolkit.core.files import parse_json, read_json

TOOLKIT = [sys.executable, "-m", "toolkit"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One real ``--smoke`` run (batch 32): its run directory and its report as a dict."""
    root = tmp_path_factory.mktemp("smoke")
    out = _run(["--smoke", f"--report_dir={root / 'runs'}"])
    assert out.returncode == 0, out.stderr[-2000:]
    return _report(root / "runs")


def _variant(tmp_path, smoke, name, edit=None, text=None):
    """A copy of the smoke run's directory whose report.json is edited by `edit` (the dict)
    or replaced by `text`."""
    run_dir, data = smoke
    where = tmp_path / name
    shutil.copytree(run_dir, where)
    data = json.loads(json.dumps(data))
    if edit is not None:
        edit(data)
    (where / "report.json").write_text(text if text is not None else json.dumps(data))
    return where


def _verb(*args, timeout=60):
    return _run([*TOOLKIT, *map(str, args)], timeout=timeout)


def test_control_characters_in_a_report_are_shown_escaped_by_every_reader(tmp_path, smoke):
    """An escape sequence in the run's name (a window title, a screen clear) reaches the
    terminal as visible text from show, compare and merge; newline, tab and unicode stay."""
    hostile = "mlp\u001b]0;PWNED\u0007\u001b[2J\u009b ×µ"

    def edit(d):
        d["name"] = hostile
        d["error"] = None
        d["args"]["note\u001b[31m"] = "x\ty"

    bad = _variant(tmp_path, smoke, "bad", edit)
    good = smoke[0]
    outs = [
        _verb("show", bad),
        _verb("show", bad, "--markdown"),
        _verb("show", bad, "--json"),
        _verb("compare", good, bad),
        _verb("compare", good, bad, "--json"),
        _verb("merge", bad),
    ]
    for out in outs:
        seen = out.stdout + out.stderr
        assert "Traceback" not in seen, seen[-2000:]
        assert not any(c in seen for c in "\u001b\u0007\u009b"), repr(seen[-500:])
    assert [o.returncode for o in outs[:5]] == [0] * 5
    assert outs[0].stdout.startswith("== mlp\\x1b]0;PWNED\\x07\\x1b[2J\\x9b ×µ: complete")
    assert "\\x1b]0;PWNED" in outs[3].stdout and "\\x1b]0;PWNED" in outs[5].stderr
    assert outs[5].returncode == 2 and len(outs[5].stderr.strip().splitlines()) == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_or_a_device_is_refused_without_a_blocking_read(tmp_path, smoke):
    """A FIFO named report.json, or /dev/zero, is one line and status 2 at once (it would
    block for a writer, or fill the memory); a symbolic link to a real report still reads; a
    cache file that is a FIFO is a miss, not a hang."""
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "report.json")
    for target, kind in ((fifo_dir, "a FIFO"), ("/dev/zero", "a character device")):
        out = _verb("show", target)
        path = os.path.join(target, "report.json") if target == fifo_dir else target
        assert out.returncode == 2, out.stderr[-2000:]
        assert out.stderr == (
            f"error: cannot read report {str(path)!r}: not a regular file ({kind})\n"
        )
    out = _verb("compare", smoke[0], fifo_dir)
    assert out.returncode == 2 and "not a regular file (a FIFO)" in out.stderr
    link = tmp_path / "link.json"
    link.symlink_to(smoke[0] / "report.json")
    assert _verb("show", link).returncode == 0
    cache = str(fifo_dir / "report.json")
    code = f"from toolkit.core.files import read_json; print(read_json({cache!r}))"
    out = _run([sys.executable, "-c", code], timeout=60)
    assert out.returncode == 0 and out.stdout == "{}\n", out.stderr[-2000:]


@pytest.mark.parametrize(
    ("number", "said"),
    [
        ("1e999", "number 1e999 is not finite as a float"),
        ("Infinity", "number Infinity is not finite"),
        ("NaN", "number NaN is not finite"),
        ("1" + "0" * 400, "is too large for a float"),
    ],
)
def test_a_number_past_a_float_is_one_line(tmp_path, smoke, number, said):
    """``1e999`` (infinity once parsed), ``Infinity``, ``NaN`` or an integer past a float's
    range in a count the ledger makes an int: one line naming the number, status 2, from each
    reader, where it was an OverflowError."""
    text = json.dumps(smoke[1]).replace('"recompiles": 0', f'"recompiles": {number}', 1)
    assert number in text
    bad = _variant(tmp_path, smoke, "bad", text=text)
    for args in (("show", bad), ("compare", smoke[0], bad), ("merge", bad)):
        out = _verb(*args)
        assert out.returncode == 2, out.stderr[-2000:]
        assert out.stderr.startswith("error: cannot read report ") and said in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_ledger_count_that_is_not_a_whole_number_names_its_field(tmp_path, smoke):
    def edit(d):
        d["ledger"]["recompiles"] = 1.5

    out = _verb("show", _variant(tmp_path, smoke, "bad", edit))
    assert out.returncode == 2 and "field ledger.recompiles is 1.5, not an integer" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_strict_numbers_are_for_reports_only():
    """``parse_json`` reads NaN as Python does unless asked (a cache, a peer's message), and
    a cache file that is missing is a miss."""
    assert str(parse_json('{"a": NaN}')["a"]) == "nan"
    assert parse_json('{"a": 1e308, "b": 12}', finite=True) == {"a": 1e308, "b": 12}
    with pytest.raises(ValueError, match="-Infinity"):
        parse_json("[-Infinity]", finite=True)
    assert read_json("/nonexistent/cache.json") == {}


def test_compare_json_says_seconds_and_a_fused_first_call_is_compared_whole(tmp_path, smoke):
    """``compare --json`` gives times in seconds and says "s" (the table shows ms); the first
    call is compared as a whole, as the ledger's compile is, and per step only beside it."""
    run_dir, data = smoke
    first = data["steps"]["first_step_s"]

    def fused(d):
        d["steps"]["first_step_s"] = first * 1.5
        d["steps"]["first_step_steps"] = 4

    b = _variant(tmp_path, smoke, "fused", fused)
    out = _verb("compare", run_dir, b, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    figures = {f["figure"]: f for f in json.loads(out.stdout)["figures"]}
    p50 = figures["step p50"]
    assert p50["unit"] == "s" and p50["a"] == data["steps"]["p50_s"]
    whole = figures["first call"]
    assert whole["unit"] == "s" and whole["a"] == first
    assert whole["b"] == pytest.approx(first * 1.5) and whole["change"] == pytest.approx(0.5)
    assert figures["first call/step"]["b"] == pytest.approx(first * 1.5 / 4)
    text = _verb("compare", run_dir, b).stdout
    assert f"{data['steps']['p50_s'] * 1e3:.3f} ms" in text
    assert "first call/step" not in _verb("compare", run_dir, run_dir).stdout  # unfused


def test_a_batch_size_change_is_the_same_workload_compared_per_example(tmp_path, smoke):
    """Run B at twice the batch: twice the FLOPs a step, the same an example: a speed verdict
    per example, no "different workloads" note; a different model still is one."""
    out = _run(["--smoke", "--batch_size=64", f"--report_dir={tmp_path / 'runs'}"])
    assert out.returncode == 0, out.stderr[-2000:]
    b_dir, b = _report(tmp_path / "runs")
    a_dir, a = smoke
    assert b["compute"]["flops_per_step"] == pytest.approx(
        2 * a["compute"]["flops_per_step"], rel=0.01
    )
    out = _verb("compare", a_dir, b_dir, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["verdict"] != "different workloads", result["notes"]
    assert result["basis"] == "median time/example"
    assert not any("models differ" in n for n in result["notes"])

    def bigger(d):
        d["compute"]["flops_per_step"] *= 3

    out = _verb("compare", a_dir, _variant(tmp_path, smoke, "bigger", bigger), "--json")
    result = json.loads(out.stdout)
    assert result["verdict"] == "different workloads"
    assert any("FLOPs per step" in n and "per example" in n for n in result["notes"])
