"""A newcomer's first hour: --help on recipes and verbs, --version, the console script's name,
one flag style, a closed pipe or stdout, an ASCII terminal, progress that stays out of logs, and
a package that says what it is. Real processes where the user would run one."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import logging
import os
import pathlib
import re
import subprocess
import sys

import pytest
from absl import flags

from tests.test_faults import RECIPE, _report, _run
from toolkit import _argv, app
from toolkit.core import progress
from toolkit.runner import flags as tk_flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 300  # a loaded 2-core machine


def run(*argv: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT,
        env={**os.environ, **(env or {})}, check=False, **kwargs,
    )  # fmt: skip


def test_recipe_help_lists_its_flags_then_the_shared_ones_rc_0_without_tensorflow():
    done = run("-m", "recipes.cnn", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no TensorFlow start-up lines: nothing imported it
    out = done.stdout
    assert out.startswith("usage: python -m recipes.cnn")
    assert "A small CNN" in out  # the recipe's docstring
    own = out.index("cnn flags:")
    for flag in ("--filters=32", "--learning_rate=0.002", "--image_size=32", "--channels=1"):
        assert flag in out[own : out.index("\ndata:")], flag
    for group, _ in tk_flags.FLAG_GROUPS:
        assert f"\n{group}:\n" in out
    assert "--[no]jit_compile" in out and "--precision=float32" in out
    assert "--dtype (now --precision)" in out
    assert "Try --helpfull" not in out


def test_importing_a_recipe_imports_no_framework():
    code = (
        "import sys, recipes.resnet; "
        "print(sorted({'tensorflow', 'keras', 'jax', 'torch'} & set(sys.modules)))"
    )
    done = run("-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("recipe", app.recipe_names())
def test_every_recipe_help_names_every_flag_it_defines(recipe):
    module = app.load_recipe(recipe)
    own = tk_flags.own_flags(module.__name__)
    assert own, f"{recipe} defines no flags of its own?"
    text = app.recipe_help(module)
    assert text.startswith(f"usage: python -m recipes.{recipe}")
    section = text[text.index(f"{recipe} flags:") : text.index("\ndata:")]
    for name in own:
        assert f"--{name}=" in section or f"--[no]{name} " in section, name


def test_every_shared_flag_is_in_exactly_one_help_group():
    tk_flags.define_common_flags()
    grouped = [n for _, names in tk_flags.FLAG_GROUPS for n in names]
    assert len(grouped) == len(set(grouped))
    shared = {f.name for f in flags.FLAGS.get_flags_for_module("toolkit.runner.flags")}
    aliases = {"enable_xla", *tk_flags.DEPRECATED_FLAGS}
    assert shared - aliases - set(grouped) == set()


def test_helpfull_stays_absls_with_the_recipes_flags_filed_under_it():
    done = run("-m", "recipes.cnn", "--helpfull")
    head = done.stdout[done.stdout.index("recipes/cnn.py:") :]
    assert "--filters" in head.split("toolkit.runner.flags:")[0]


def test_version_of_a_recipe_and_of_the_command():
    from toolkit.core.version import __version__

    done = run("-m", "recipes.mlp", "--version")
    assert done.returncode == 0 and __version__ in done.stdout
    done = run("-m", "toolkit", "--version")
    assert done.returncode == 0 and __version__ in done.stdout


def test_the_console_script_calls_itself_by_its_name():
    script = pathlib.Path(sys.executable).with_name("keras-perf")
    if not script.exists():
        pytest.skip("the console script is not installed in this environment")
    done = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert done.returncode == 0
    assert done.stdout.startswith("usage: keras-perf ") and "``" not in done.stdout
    done = run("-m", "toolkit", "--help")
    assert done.stdout.startswith("usage: python -m toolkit ")


def test_verb_help_lists_the_recipes_and_the_recipe_flags_it_passes_on():
    done = run("-m", "toolkit", "tune", "--recipe", "cnn", "--help")
    assert done.returncode == 0 and done.stderr == ""
    out = done.stdout
    assert "recipes (--recipe): " in out and all(r in out for r in app.recipe_names())
    assert "cnn flags: --image_size" in out and "--filters" in out
    assert "--tune_budget" in out and "--precision" in out
    done = run("-m", "toolkit", "doctor", "--help")
    assert "mlp flags:" in done.stdout and "--hidden_units" in done.stdout


def test_an_unknown_recipe_lists_the_recipes_before_anything_starts():
    for verb in ("placement", "doctor", "tune"):
        done = run("-m", "toolkit", verb, "--recipe", "nope")
        assert done.returncode == 2
        assert done.stderr.strip().splitlines()[-1].startswith("error: --recipe: no recipe")
        assert "mlp" in done.stderr and "Traceback" not in done.stderr


def test_old_flag_spellings_work_with_one_note():
    notes: list[str] = []
    argv = ["prog", "--dtype=mixed_float16", "--dtype", "float32", "--epochs=2", "--", "--dtype"]
    out = _argv.canonical_argv(argv, note=notes.append)
    assert out == ["prog", "--precision=mixed_float16", "--precision", "float32", "--epochs=2",
                   "--", "--dtype"]  # fmt: skip
    assert notes == ["note: --dtype is deprecated; use --precision (--dtype still works for now)"]
    assert _argv.canonical_argv(["--min-rel=0.1"], {"min-rel": "min_rel"}, notes.append) == [
        "--min_rel=0.1"
    ]


def test_compare_takes_min_rel_and_its_old_hyphen(tmp_path):
    done = run("-m", "toolkit", "compare", "--min-rel", "0.05", "nope-a", "nope-b")
    assert "note: --min-rel is deprecated; use --min_rel" in done.stderr
    assert done.returncode == 2 and "no report at 'nope-a'" in done.stderr
    done = run("-m", "toolkit", "compare", "--min_rel", "0.05", "nope-a", "nope-b")
    assert "deprecated" not in done.stderr and done.returncode == 2


def _closed_pipe(*argv: str) -> tuple[int, bytes]:
    proc = subprocess.Popen(
        [sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    proc.stdout.close()  # `| head` that has read what it wanted, before anything was written
    _, err = proc.communicate(timeout=TIMEOUT)
    return proc.returncode, err


def test_a_closed_pipe_ends_quietly(tmp_path):
    from tests.test_report import make_report

    make_report(n=2000).write(tmp_path / "run", plot=False)
    for argv in (
        ("-m", "toolkit", "show", str(tmp_path / "run"), "--markdown"),
        ("-m", "recipes.mlp", "--help"),
    ):
        status, err = _closed_pipe(*argv)
        assert status == 141, (argv, err)  # 128 + SIGPIPE, as a shell tool ends
        assert b"Traceback" not in err and b"BrokenPipeError" not in err, err


def test_a_recipe_under_head_trains_to_the_end_its_step_lines_on_stderr(tmp_path):
    """``python -m recipes.mlp | head``: step lines are progress (stderr), so a reader of
    stdout that has gone stops nothing; only the summary at the end meets the closed pipe."""
    import json

    status, err = _closed_pipe(
        "-m", "recipes.mlp", "--epochs=1", "--train_steps=40", "--log_steps=10",
        "--count_flops=false", f"--report_dir={tmp_path}",
    )  # fmt: skip
    assert status == 141, err[-2000:]
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err[-2000:]
    assert b"\nstep 21: " in err  # the step lines went to stderr
    # the first screen: our line first, within a second of starting; TensorFlow's C++
    # start-up lines (oneDNN, "no cuda drivers", cuInit's error without a GPU) held back
    assert err.startswith(b"mlp: loading TensorFlow and Keras (tensorflow)"), err[:500]
    for noise in (b"I0000 ", b"E0000 ", b"W0000 ", b"absl::InitializeLog", b"cuInit"):
        assert noise not in err, err[:2000]
    (report,) = tmp_path.glob("*/report.json")
    data = json.loads(report.read_text())
    assert data["status"] == "complete" and data["steps"]["total_steps"] == 40


def test_on_a_terminal_each_epoch_keeps_a_line_and_tensorflow_logs_show_when_asked(tmp_path):
    """Keras leaves a line per epoch above its bar; so does the toolkit's bar. A user who sets
    TF_CPP_MIN_LOG_LEVEL themselves sees TensorFlow's start-up lines again."""
    done = run(
        "-m", "recipes.mlp", "--epochs=2", "--train_steps=20", "--count_flops=false",
        f"--report_dir={tmp_path}",
        env={"TOOLKIT_PROGRESS": "1", "TF_CPP_MIN_LOG_LEVEL": "0"},  # a bar, as on a terminal
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.replace("\r", "\n").split("\n")
    kept = [line for line in lines if line.startswith("mlp epoch ") and " steps in " in line]
    assert [line.split(":")[0] for line in kept] == ["mlp epoch 1/2", "mlp epoch 2/2"], kept
    assert all("val_loss" in line and "%|" not in line for line in kept), kept
    assert any(re.match(r"[IWE]\d{4} \d\d:\d\d:", line) for line in lines), done.stderr[:2000]
    assert "== mlp: complete" in done.stdout


def test_held_start_up_lines_drop_the_chatter_and_keep_what_matters(capfd, monkeypatch):
    from toolkit._argv import start_flags
    from toolkit.core import native_logs

    def verbosity(*argv: str) -> int:
        return start_flags(argv).verbosity

    env: dict[str, str] = {}
    assert native_logs.configure(verbosity("prog"), env) and env == {"TF_CPP_MIN_LOG_LEVEL": "2"}
    assert logging.getLogger("jax").level == logging.WARNING  # JAX's INFO lines: held too
    env = {}
    assert not native_logs.configure(verbosity("prog", "--verbosity=0"), env)
    assert env == {"TF_CPP_MIN_LOG_LEVEL": "0"}  # --verbosity shows everything
    assert not native_logs.configure(verbosity("prog", "-v", "1"), {})
    assert not native_logs.configure(verbosity("--verbosity", "debug"), {})
    assert native_logs.configure(verbosity("--verbosity=nonsense"), {})  # absl says why, later
    assert not native_logs.configure(verbosity("prog"), {"TF_CPP_MIN_LOG_LEVEL": "1"})  # theirs
    assert native_logs.configure(verbosity("prog"), {"TF_CPP_MIN_LOG_LEVEL": "3"})
    chatter = (
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1795550774.614952   30216 port.cc:153] oneDNN custom operations are on.",
        "W0000 00:00:1795550774.6   30216 session_manager.cc:55] delay_ms expects an i value.",
        "E0000 00:00:1795550776.031322   30216 cuda_platform.cc:52] failed call to cuInit: x",
        "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild",
        "USDT:2026-12-01 18:07:51 8072:8072 SyncActivityProfilerHandler.cpp:52] profiler_start",
        "USDT:2026-12-01 18:07:52 8072:8072 SyncActivityProfilerHandler.cpp:59] profiler_stop",
    )
    matters = (
        "E0000 00:00:1795550776.031322   30216 op_kernel.cc:1857] OP_REQUIRES failed: bad",
        "F0000 00:00:1795550776.031322   30216 client.cc:12] Terminating process: peer lost",
        "a Python warning that is not TensorFlow's",
        "ERROR:2026-12-01 18:07:51 8072:8072 CuptiActivityApi.cpp:31] CUPTI failed: no driver",
    )
    assert all(native_logs.is_noise(line) for line in chatter)
    assert not any(native_logs.is_noise(line) for line in matters)
    with pytest.raises(RuntimeError), native_logs.held():
        for line in (*chatter, *matters):
            os.write(2, (line + "\n").encode())  # where C++ writes: the file descriptor
        raise RuntimeError("the block failed: what it wrote still comes back")
    err = capfd.readouterr().err
    assert err.splitlines() == list(matters)


def _without(monkeypatch, *modules: str) -> None:
    """As on a machine where `modules` are not installed (``find_spec`` finds none)."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_a_missing_extra_is_one_line_naming_the_install_that_works_from_a_wheel(
    monkeypatch, capsys, tmp_path
):
    from tests.test_report import make_report
    from toolkit.core import _extras as extras
    from toolkit.report import run_report
    from toolkit.search import chooser, diagnose

    assert extras.why_missing("report") is None  # the test extras install every one
    _without(monkeypatch, "matplotlib", "xprof", "jax")
    hint = "matplotlib is not installed (pip install 'keras-perf-toolkit[report]')"
    assert extras.why_missing("report") == hint
    assert extras.note_missing("report", "demo: no chart") is True
    assert extras.note_missing("report", "demo: no chart") is True  # said once per process
    assert capsys.readouterr().err == f"demo: no chart: {hint}\n"
    # the report's Markdown says why there is no plot, with an install that works anywhere
    paths = make_report().write(tmp_path / "run")
    assert "png" not in paths and hint in pathlib.Path(paths["markdown"]).read_text()
    # the trace hint names the [profile] extra only while it is missing
    from toolkit.profiling._timing import Traced
    from toolkit.report._trace_records import TraceSection

    trace = TraceSection(Traced("t", (3, 5), (3, 5), ("t/x.xplane.pb",)))
    assert "pip install 'keras-perf-toolkit[profile]'" in run_report._trace_line(trace)
    monkeypatch.delitem(sys.modules, "xprof")
    assert "pip install" not in run_report._trace_line(trace)
    assert "base install leaves out" not in run_report._trace_line(trace)
    # backends: a contender that vanishes says so; doctor: its cross-check, when XProf is gone
    contenders = chooser.contenders()
    assert [c.backend for c in contenders] == ["tensorflow", "torch"]
    _without(monkeypatch, "xprof")
    with diagnose._fit_trace(3, 2) as callbacks:
        assert callbacks == []
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "backends: no jax contender: jax is not installed (pip install 'keras-perf-toolkit[jax]')",
        "diagnose: no XProf cross-check: xprof is not installed "
        "(pip install 'keras-perf-toolkit[profile]')",
    ]


def test_ops_says_which_columns_it_leaves_out_when_their_framework_is_missing(tmp_path):
    prelude = "import sys; sys.modules.update(jax=None, torch=None); "
    done = run(
        "-c", prelude + "from toolkit.cli import main; sys.exit(main())", "ops", "--size=tiny",
        "--ops=ReLU", "--out", str(tmp_path), "--no_plot", "--repeats=2", "--min_time=0.001",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\nReLU " in done.stdout, done.stdout
    lines = done.stderr.splitlines()
    assert "ops: no jax_jit column: jax is not installed " in done.stderr, done.stderr
    assert "ops: no torch_eager column: torch is not installed " in done.stderr, done.stderr
    assert sum("no jax_jit column" in line for line in lines) == 1


def test_quiet_command_prints_results_and_no_progress(tmp_path):
    done = run("-m", "toolkit", "--quiet", "ops", "--size=tiny", "--ops=ReLU", "--modes=eager",
               "--out", str(tmp_path), "--no_plot", "--repeats=2", "--min_time=0.001")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\nReLU " in done.stdout and "ops: ReLU" not in done.stderr
    done = run("-m", "toolkit", "ops", "--size=tiny", "--ops=ReLU", "--modes=eager",
               "--out", str(tmp_path), "--no_plot", "--repeats=2", "--min_time=0.001")  # fmt: skip
    assert "ops: ReLU (2/2 cells)" in done.stderr and "\r" not in done.stderr  # a log: lines


def test_progress_modes(monkeypatch):
    monkeypatch.setenv("TOOLKIT_PROGRESS", "0")
    assert progress.mode() == progress.OFF
    monkeypatch.setenv("TOOLKIT_PROGRESS", "1")
    assert progress.mode() == progress.BAR
    monkeypatch.delenv("TOOLKIT_PROGRESS")
    assert progress.mode() == progress.LINES  # pytest's stderr is not a terminal
    bar = progress.bar(10, "x")
    assert not bar.shown  # in a log, no bar (and no carriage return)
    bar.update(3)
    bar.close()


def test_fit_progress_defaults(monkeypatch):
    from toolkit.runner.config import TrainConfig
    from toolkit.runner.train import _nice, fit_progress

    assert [_nice(n) for n in (0.3, 1, 3, 7, 12, 45, 101)] == [1, 1, 5, 10, 20, 50, 200]
    data = list(range(45))  # 45 batches an epoch
    monkeypatch.setenv("TOOLKIT_PROGRESS", "")
    assert fit_progress(TrainConfig(epochs=20), data, "mlp") == (0, 100, [])  # 900 steps / 10
    assert fit_progress(TrainConfig(epochs=20, log_steps=7), data, "mlp") == (0, 7, [])
    assert fit_progress(TrainConfig(epochs=1, steps_per_epoch=8), data, "mlp") == (0, None, [])
    assert fit_progress(TrainConfig(verbose=2), data, "mlp") == (2, None, [])
    monkeypatch.setenv("TOOLKIT_PROGRESS", "0")
    assert fit_progress(TrainConfig(epochs=20), data, "mlp") == (0, None, [])
    monkeypatch.setenv("TOOLKIT_PROGRESS", "1")
    verbose, log_steps, shown = fit_progress(TrainConfig(epochs=20), data, "mlp")
    assert (verbose, log_steps) == (0, None) and type(shown[0]).__name__ == "FitProgress"


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_fit_progress_bar_counts_steps_and_reads_no_loss_per_step(monkeypatch, capsys):
    import numpy as np

    from toolkit.core import compat
    from toolkit.profiling.fit_progress import FitProgress

    keras = compat.keras()
    monkeypatch.setenv("TOOLKIT_PROGRESS", "1")  # draw as on a terminal
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    spe = 1 if keras.backend.backend() == "torch" else 2  # Keras's PyTorch backend: 1 only
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=spe)
    bar = FitProgress("demo")
    assert bar.async_safe  # Keras 3 keeps dispatching batch ends off the training thread
    x, y = np.zeros((40, 4), "float32"), np.zeros((40, 1), "float32")
    model.fit(x, y, batch_size=4, epochs=3, verbose=0, callbacks=[bar])
    assert bar.steps_done == 30 and bar.bar is None  # 10 steps x 3 epochs, closed at the end
    err = capsys.readouterr().err
    assert "demo epoch" in err and "/10" in err and "/30" not in err  # a bar per epoch
    kept = [x for x in err.replace("\r", "\n").split("\n") if " steps in " in x]
    assert [x.split(":")[0] for x in kept] == [f"demo epoch {e}/3" for e in (1, 2, 3)], kept
    assert all(x.startswith(f"demo epoch {i + 1}/3: 10 steps in ") for i, x in enumerate(kept))
    assert all("loss " in x for x in kept), kept  # the epoch's logs, read once Keras has them

    class Untouchable(dict):  # a step's logs: reading one would be a device sync
        def __getitem__(self, key):
            raise AssertionError("FitProgress read the logs of a step")

        items = get = keys = values = __iter__ = __getitem__

    bar.on_train_begin()
    bar.on_epoch_begin(0)
    for step in range(5):
        bar.on_train_batch_end(step, Untouchable())
    bar.on_train_end()
    assert bar.steps_done == 5


def test_package_metadata_says_what_it_is():
    meta = importlib.metadata.metadata("keras-perf-toolkit")
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")[:200]
    assert meta["License"] == "Apache-2.0" or "Apache-2.0" in (meta["License-Expression"] or "")
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Source", "Documentation", "Issues"} <= set(urls)
    classifiers = meta.get_all("Classifier") or []
    assert any(c.startswith("Programming Language :: Python :: 3.1") for c in classifiers)
    assert any(c.startswith("Topic :: ") for c in classifiers)
    assert meta["Requires-Python"] == ">=3.10"


def test_the_wheel_installs_the_cards_two_packages_and_the_console_script(tmp_path):
    # The project's card fixes the top level: `toolkit` (import it into a training script) and
    # `recipes` (`python -m recipes.mlp`), nothing else; 0.2's `keras_perf` is gone.
    import shutil
    import zipfile

    # Built from a copy: setuptools leaves build/ beside setup.py, and a stale build/lib from an
    # older checkout would end up in the wheel.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "runs", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
    ))  # fmt: skip
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("keras_perf_toolkit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {
        "toolkit",
        "recipes",
    }
    assert {"toolkit/__main__.py", "recipes/mlp.py", "recipes/__init__.py"} <= set(names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "keras-perf = toolkit.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_every_verb_says_first_what_it_is_doing(tmp_path):
    """Each verb's first line, on a terminal, names the verb and what it does, before any
    other output (a result, an error) and before a framework loads. Each process is stopped
    once it has said its first line: what comes after is other tests'."""
    import select
    import signal

    from toolkit.cli import VERBS

    needs = {"compare": ["a", "b"], "show": ["a"], "trace": ["a"], "merge": ["a"],
             "data-service": ["--dispatcher", "--all_interfaces"]}  # fmt: skip
    started = {}

    def stop(process):  # the verb and whatever it started (backends' device probes)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()

    first = {}
    try:
        for verb in VERBS:
            started[verb.name] = subprocess.Popen(
                [sys.executable, "-m", "toolkit", verb.name, *needs.get(verb.name, [])],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=tmp_path,
                env={**os.environ, "TOOLKIT_PROGRESS": "1", "PYTHONPATH": str(ROOT)},
                start_new_session=True,
            )
        for verb in VERBS:
            process = started[verb.name]
            said = select.select([process.stdout], [], [], 300)[0]  # a loaded machine: minutes
            first[verb.name] = process.stdout.readline().strip() if said else "(nothing)"
            stop(process)
    finally:
        for process in started.values():
            if process.poll() is None:
                stop(process)
    for verb in VERBS:
        assert first[verb.name].startswith(f"{verb.name}: {verb.help}"), first
        assert ("loading TensorFlow and Keras first" in first[verb.name]) == verb.loads_tensorflow


# --------------------------------------------------------------------- closed and ascii streams

SMOKE = ["--smoke", "--epochs=1"]


def test_a_closed_stdout_ends_with_141_and_the_report_written(tmp_path):
    out = subprocess.run(
        [*RECIPE, *SMOKE, f"--report_dir={tmp_path}"],
        stderr=subprocess.PIPE, text=True, timeout=300, preexec_fn=lambda: os.close(1),
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert out.returncode == 141, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    run_dir, report = _report(tmp_path)
    assert report["status"] == "complete"
    # Nothing printed landed in a file the run opened on descriptor 1 or 2.
    assert json.loads((run_dir / "report.json").read_text())["status"] == "complete"


def test_a_closed_stdout_keeps_a_bad_command_lines_status(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "toolkit", "show", str(tmp_path / "none")],
        stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr


def test_an_ascii_terminal_gets_the_summary_spelled_in_ascii(tmp_path):
    env = {"PYTHONIOENCODING": "ascii"}
    out = _run([*SMOKE, f"--report_dir={tmp_path}"], env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "MFLOP/step" in out.stdout and "x" in out.stdout
    run_dir, _ = _report(tmp_path)
    shown = _run([sys.executable, "-m", "toolkit", "show", str(run_dir)], env=env)
    assert shown.returncode == 0, shown.stderr  # a sound report, not a bad one
    assert "×" not in shown.stdout and "steps run" in shown.stdout


def test_every_verb_s_help_fits_80_columns(monkeypatch):
    """Each verb's ``--help`` as an 80-column terminal shows it (argparse reads COLUMNS),
    its epilog's recipes and flags included: a description written with its own line breaks
    is printed as written (memory's ran to 82)."""
    from toolkit import cli

    monkeypatch.setenv("COLUMNS", "80")
    root = cli.parser(["--help"])
    verbs = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    assert len(verbs.choices) >= 10
    wide = [line for line in root.format_help().splitlines() if len(line) > 80]
    for name in verbs.choices:  # as `VERB --help` builds it: with its epilog
        asked = cli.parser([name, "--help"])
        sub = next(a for a in asked._actions if isinstance(a, argparse._SubParsersAction))
        wide += [f"{name}: {x}" for x in sub.choices[name].format_help().splitlines()
                 if len(x) > 80]  # fmt: skip
    assert not wide, wide
