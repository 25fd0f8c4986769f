"""What a person sees in a real terminal: programs run in a pseudo-terminal of 80 and 120
columns, the screen rendered by a terminal emulator (pyte, ``tests/terminal.py``): no line
wraps at the edge, the kept lines are there, no framework's native log line shows, numbers
read as the summary writes them."""

from __future__ import annotations

import re
import sys

import pytest

from tests.terminal import run_in_terminal

pytest.importorskip("pyte")

NATIVE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./-]+:\d+\]", re.M)  # absl's
SCIENTIFIC = re.compile(r"\d\.\d+e[+-]\d\d")


def _screen(argv: list[str], columns: int, tmp_path, timeout: float = 400):
    shown = run_in_terminal([sys.executable, *argv], columns, timeout=timeout, cwd=str(tmp_path))
    assert not shown.timed_out, shown.text[-3000:]
    return shown


def test_a_recipe_fits_80_columns_with_one_meaning_of_step(tmp_path):
    """``python -m recipes.mlp`` at 80 columns, with fused steps and steps per execution: every
    row fits; one kept line per epoch, counting training steps as the summary does; the bar
    counts this epoch's steps; numbers as the summary writes them; no native log line."""
    shown = _screen(
        [
            "-m", "recipes.mlp", "--epochs=2", "--fused_steps=4", "--steps_per_execution=2",
            "--report_dir=runs",
        ],
        80,
        tmp_path,
    )  # fmt: skip
    text = shown.text
    assert shown.rc == 0, text[-3000:]
    assert not shown.wrapped, shown.wrapped  # nothing ran past the right edge
    assert not NATIVE.search(text), NATIVE.findall(text)
    kept = [line for line in shown.lines if re.match(r"mlp epoch \d+/2: ", line)]
    assert [line.split(":")[0] for line in kept] == ["mlp epoch 1/2", "mlp epoch 2/2"], text
    # 44 batches of 32 an epoch, fused 4 to a Keras batch: 11 Keras batches, 44 training steps
    steps = {int(re.search(r": (\d+) steps in ", line).group(1)) for line in kept}
    assert steps == {44}, kept
    # each epoch's line with its folded rows (indented under it)
    whole = [
        " ".join([line, *(r.strip() for r in shown.lines[i + 1 : i + 4] if r.startswith("  "))])
        for i, line in enumerate(shown.lines)
        if line in kept
    ]
    assert all(re.search(r"p50 \d+\.\d{3} ms/step, [\d,]+\.\d examples/s", x) for x in whole)
    assert "(first call " in whole[0] and "validation " in whole[0], whole  # where it went
    assert not SCIENTIFIC.search(text), SCIENTIFIC.findall(text)
    assert "accuracy " in text and "val_loss " in text  # each epoch's metrics, folded
    assert "== mlp: complete" in text
    # The summary counts the same steps: timed + first + excluded = the epochs' steps.
    timed = int(re.search(r"^timed steps: (\d+)", text, re.M).group(1))
    first = int(re.search(r"^first step: .* over (\d+) step", text, re.M).group(1))
    warm = int(re.search(r"^excluded steps: warm-up (\d+)", text, re.M).group(1))
    assert timed + first + warm == 2 * 44, text[-1500:]
    # The bar, as drawn: a bar per epoch, of its 44 steps, never a sliver.
    bars = [b for b in shown.raw.replace("\n", "\r").split("\r") if "%|" in b]
    assert bars and all(b.rstrip().endswith("]") for b in bars), bars[-3:]
    assert all("/44 [" in b for b in bars), bars[-3:]
    assert all(b.count("█") + b.count(" ") >= 20 for b in bars if "100%" in b), bars[-3:]


def test_ops_prints_the_average_table_that_fits_120_columns(tmp_path):
    """``ops --size tiny`` at 120 columns: the average table through the terminal renderer
    (aligned, no Markdown pipes), nothing wrapped, the whole table in ops.md."""
    shown = _screen(
        [
            "-m", "toolkit", "ops", "--size=tiny", "--ops=ReLU,Gather,MatMul", "--repeats=2",
            "--min_time=0.001", "--no_plot", "--out=ops",
        ],
        120,
        tmp_path,
    )  # fmt: skip
    text = shown.text
    assert shown.rc == 0, text[-3000:]
    assert not shown.wrapped, shown.wrapped
    assert not NATIVE.search(text), NATIVE.findall(text)
    header = next(line for line in shown.lines if line.startswith("op "))
    assert header.split()[:4] == ["op", "eager", "graph", "xla"], text
    rows = [line for line in shown.lines if line.split()[:1] in (["ReLU"], ["Gather"], ["MatMul"])]
    assert len(rows) == 3 and not any("|" in line for line in shown.lines), text  # averages
    assert "ratios: A/B = ms of B ÷ ms of A" in text
    md = (tmp_path / "ops" / "ops.md").read_text()
    assert "| Gather / " in md and "Average benchmark:" in md  # every shape, in the file
    assert shown.first_output_s is not None and "ops: " in shown.lines[0]


def test_compare_fits_80_columns_and_says_only_what_differs(tmp_path):
    """``compare`` of a run against itself at 80 columns: a table that fits, no note (nothing
    differs), no settings line."""
    from tests.test_report import make_report

    report = make_report("mlp")
    report.write(tmp_path / "a", plot=False)
    shown = _screen(["-m", "toolkit", "compare", "a", "a"], 80, tmp_path)
    assert shown.rc == 0, shown.text
    assert not shown.wrapped, shown.wrapped
    assert "verdict: within noise" in shown.text and "note:" not in shown.text
    assert "settings that differ" not in shown.text


def test_doctor_at_120_columns_says_first_what_it_does_and_one_verdict(tmp_path):
    """``doctor`` in a terminal 120 wide: its first line says what it is doing, the next,
    before TensorFlow loads, that it loads it (``doctor --report`` loads none); every row
    fits; the XProf line speaks the rates' one verdict."""
    shown = _screen(["-m", "toolkit", "doctor", "--recipe", "mlp"], 120, tmp_path)
    text = shown.text
    assert shown.rc == 0, text[-3000:]
    assert shown.lines[0].startswith("doctor: input-bound or compute-bound?"), shown.lines[:3]
    assert shown.lines[1] == "doctor: loading TensorFlow and Keras first", shown.lines[:3]
    assert not shown.wrapped, shown.wrapped
    assert not NATIVE.search(text), NATIVE.findall(text)
    verdict = re.search(r"^verdict: ([\w-]+)", text, re.M).group(1)
    xprof = ""  # the XProf line with its folded continuation rows
    for line in shown.lines:
        if line.strip().startswith("XProf: ") or (xprof and line.startswith("    ")):
            xprof += " " + line.strip()
        elif xprof:
            break
    if "agrees with the rates" in xprof:
        assert xprof.rstrip().endswith(f"agrees with the rates: {verdict}"), xprof
        before = xprof.split(";")[0]
        if verdict != "balanced":  # balanced contradicts neither of XProf's words
            other = "compute-bound" if verdict == "input-bound" else "input-bound"
            assert not re.search(rf"XProf: (\w+ )?{other}", before), xprof  # one verdict


PROFILED_FIT = """
import numpy as np
from toolkit import profile
from toolkit.core import compat

keras = compat.keras()
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
x, y = np.zeros((256, 8), "float32"), np.zeros((256, 1), "float32")
with profile("demo", report_dir="runs", batch_size=16, trace_steps=(3, 6)) as prof:
    prof.fit(model, x, y, batch_size=16, epochs=2, verbose=1)
print(prof.report.summary())
"""


def test_profile_in_your_own_fit_keeps_the_profilers_lines_out_and_says_where(tmp_path):
    """``profile()`` around a fit with Keras's own bar, at 120 columns: the profiler's C++
    lines held back (none lands inside the bar), Keras's line fits, and one line says where
    the report landed; then ``print(prof.report.summary())`` in the script fits too (its
    ledger, trace and XProf lines ran to 279 columns)."""
    shown = _screen(["-c", PROFILED_FIT], 120, tmp_path)
    text = shown.text
    assert shown.rc == 0, text[-3000:]
    # (TensorFlow's own start-up lines, from the script's import, come before: not ours.)
    fitting = text[text.index("Epoch 1/2") :]
    assert not NATIVE.search(fitting), NATIVE.findall(fitting)
    assert "device_tracer_level" not in shown.raw and "session_manager" not in shown.raw
    assert not [row for row in shown.wrapped if row[:60] in fitting]  # nothing of ours wraps
    assert "examples_per_sec: " in fitting  # StepTimer's figures, rounded, in Keras's line
    said = [line for line in shown.lines if line.startswith("demo: report in runs")]
    assert len(said) == 1 and "report.json" in said[0] and "report.md" in said[0], text
    assert (tmp_path / said[0].split(" in ")[1].split(" (")[0] / "report.json").exists()
    assert any(line.startswith("run ledger (fit call ") for line in shown.lines), text


def test_text_and_tables_fit_the_width_without_cutting_a_number():
    """The one renderer for terminals (toolkit.core.terminal): long lines fold at spaces, an
    epoch's figures fold between items, Markdown tables become aligned tables that fit, in
    parts one under the other when even their narrowest columns cannot."""
    from toolkit.core import terminal
    from toolkit.core.terminal import Table
    from toolkit.profiling.fit_progress import epoch_line

    logs = {"accuracy": 0.9915, "loss": 0.04868, "val_accuracy": 0.975, "val_loss": 0.09662,
            "step_ms_p50": 0.956, "step_ms_p90": 1.5, "examples_per_sec": 22221.53}  # fmt: skip
    one = epoch_line("mlp", 12, 20, 44, 0.21, logs)  # a log: one line
    assert one == (
        "mlp epoch 12/20: 44 steps in 0.210 s, p50 0.956 ms/step, 22,221.5 examples/s; "
        "accuracy 0.9915, loss 0.04868, val_accuracy 0.9750, val_loss 0.09662"
    )
    # the parts of the epoch that were no steady step are said, so that its numbers multiply:
    # 43 steady steps of ~85 ms are the 7.7 s less the first call and validation
    logs_slow = {"step_ms_p50": 85.965, "examples_per_sec": 372.2, "val_loss": 3.00006}
    aside = (("first call", 3.1), ("validation", 0.9), ("nothing", 0.001))
    said = epoch_line("mlp", 1, 20, 44, 7.7, logs_slow, None, aside)
    long = epoch_line("mobilenet", 100, 100, 4400, 17.7, logs_slow, 80, aside)
    assert all(len(row) <= 80 for row in long.split("\n")), long  # folded between its items
    assert said.startswith(
        "mlp epoch 1/20: 44 steps in 7.70 s (first call 3.10 s, validation 0.900 s), "
    )
    assert "nothing" not in said and said.endswith("val_loss 3.000")  # not "3": 3.00006
    steady = 7.7 - 3.1 - 0.9
    assert pytest.approx(steady, rel=0.1) == 43 * 85.965e-3
    assert pytest.approx(32, rel=0.01) == 372.2 * 85.965e-3  # batch 32: rate and step agree
    # a short epoch's short validation is a large part of it: said too
    short = epoch_line("mlp", 2, 20, 44, 0.111, logs, None, (("validation", 0.04),))
    assert short.startswith("mlp epoch 2/20: 44 steps in 0.111 s (validation 0.040 s), ")
    for columns in (80, 120):
        rows = epoch_line("mlp", 12, 20, 44, 0.21, logs, columns).split("\n")
        assert all(len(r) <= columns for r in rows) and rows[1].startswith("  accuracy 0.9915")
        assert all(re.search(r"\d$|/s$|/step$", r) for r in rows), rows  # never inside one
    assert terminal.fit("a " * 60, 80).split("\n")[1].startswith("  a")
    assert terminal.fit("x" * 100, 80) == "x" * 100  # a path or a command stays whole
    # a figure keeps its unit on its row, wherever the fold falls (doctor's "backward 27.2"
    # above a row of "%")
    for pad in range(60, 80):
        line = "x" * pad + " backward 27.2 % and 3.1 ms of 1.5 GB at 9 s."
        rows = terminal.fit(line, 80).split("\n")
        assert not any(re.match(r"\s*(%|ms|GB|s\.)", r) for r in rows), rows
        assert " ".join(r.strip() for r in rows) == line
    rows = Table.of(("name", "ms per step", "note"), [("jax", 0.78, "chosen"), ("torch", "43.00")])
    shown = terminal.show(["a line above", rows], 80)
    assert shown.split("\n")[3].split() == ["jax", "0.78", "chosen"] and "|" not in shown
    assert "| jax | 0.78 | chosen |" in terminal.markdown(["a line above", rows])
    wide = [f"column {i}" for i in range(12)]
    parts = terminal.table(["op", *wide], [["MatMul", *range(12)]], columns=80, right=range(1, 13))
    assert all(len(line) <= 80 for line in parts.split("\n")) and parts.count("MatMul") == 2


DIAGNOSIS = """
from toolkit.core._advice import Advice
from toolkit.search.diagnose import COMPUTE_BOUND, Diagnosis

said = "try {0} (measure: XLA is sometimes slower; toolkit.tune does) "
advice = [Advice.of(said * 3, {"jit_compile": True})]
shown = Diagnosis(1.0, 2.0, 1.0, COMPUTE_BOUND, True, advice, pipeline="x " * 70, python=True)
print(shown)
print("longest:", max(len(line) for line in str(shown).splitlines()))
"""


def test_a_diagnosis_printed_in_python_fits_the_terminal(tmp_path):
    """``print(diagnose(...))`` in your own script, at 80 columns: the long advice and
    pipeline lines folded at words, under the line they continue; nothing wraps."""
    shown = _screen(["-c", DIAGNOSIS], 80, tmp_path, timeout=120)
    assert shown.rc == 0, shown.text[-3000:]
    assert not shown.wrapped, shown.wrapped
    assert int(re.search(r"^longest: (\d+)$", shown.text, re.M).group(1)) <= 80, shown.text
    assert "  advice: try model.compile(..., jit_compile=True)" in shown.text
    folded = [line for line in shown.lines if line.startswith("    ")]  # continuation rows
    assert folded, shown.text


PROGRESS_AND_COMMAND = """
import sys
from toolkit.core import progress, terminal

progress.say("tune: the fastest measured settings for a recipe or your model here (cached); "
             "loading TensorFlow and Keras first")
progress.say("[head to head 1 | 7/10 s] mixed_bfloat16 no-xla spe=1 fused=32: 77,586.0 "
             "examples/s")
print(terminal.fit_command("best: --precision=mixed_bfloat16 --nojit_compile "
                           "--steps_per_execution=1 --fused_steps=32", terminal.width()))
"""


def test_progress_lines_and_a_command_to_copy_fit_80_columns(tmp_path):
    """tune's stage lines (its first line, a head-to-head round) and its ``best:`` command
    line, at 80 columns: folded, nothing wraps, and the command folds with backslashes, so
    it still pastes whole."""
    shown = _screen(["-c", PROGRESS_AND_COMMAND], 80, tmp_path, timeout=120)
    assert shown.rc == 0, shown.text[-3000:]
    assert not shown.wrapped, shown.wrapped
    lines = shown.lines
    first = next(i for i, ln in enumerate(lines) if ln.startswith("tune: the fastest"))
    assert lines[first + 1].startswith("  ") and "Keras first" in lines[first + 1], lines
    rows = [ln for ln in shown.lines if ln.startswith("best: ") or ln.startswith("  --")]
    assert rows[0].startswith("best: ") and all(r.endswith(" \\") for r in rows[:-1]), rows
    pasted = " ".join(r.removesuffix(" \\").strip() for r in rows)
    assert pasted == ("best: --precision=mixed_bfloat16 --nojit_compile "
                      "--steps_per_execution=1 --fused_steps=32")  # fmt: skip


def test_a_log_keeps_each_progress_line_and_command_whole(tmp_path):
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", PROGRESS_AND_COMMAND], capture_output=True, text=True,
        timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "; loading TensorFlow and Keras first\n" in out.stderr
    assert out.stdout == (
        "best: --precision=mixed_bfloat16 --nojit_compile --steps_per_execution=1 "
        "--fused_steps=32\n"
    )
