"""Faults, round 3 (issue 45), as a user meets them: an interrupt at any moment, inputs from
elsewhere (reports, a user's function, a verb's options), gates that cannot pass on nothing,
resources checked before training, errors that stand alone. Real processes, real signals and
real files, as in ``tests/test_faults.py``, whose helpers these share.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.helpers import read_until, run_python
from tests.test_faults import FAILING_RECIPE, RECIPE, _images, _last, _report, _run
from toolkit import app

# ---------------------------------------------------------------------------- interrupts

INTERRUPTS = r"""
import gc, os, signal
from toolkit.core import interrupts
interrupts.install()
said = []
def run(name, fn):
    try:
        fn()
        said.append(f"{name}: ran through")
    except KeyboardInterrupt as e:
        said.append(f"{name}: {type(e).__name__}")

def held_block():  # a signal inside waits for the block's end
    with interrupts.held():
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(100000))
        said.append("held: the block finished")
run("held", held_block)

def twice():  # a second signal is not held
    with interrupts.held():
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(100000))
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(100000))
        said.append("twice: not stopped")
run("twice", twice)

def in_gc():  # raised in a gc callback, Python drops it: check() raises it after
    def cb(phase, info):
        if phase == "start":
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(100000))
    gc.callbacks.append(cb)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(cb)
    said.append("gc: went on")
    interrupts.check()
run("gc", in_gc)
run("caught, not again", interrupts.check)
print("|".join(said))
"""


def test_a_signal_is_held_while_the_frameworks_load_and_never_dropped():
    """The handler every program installs first: a signal in a held block (the frameworks'
    import, a report being written) is raised when it ends, a second one at once; one that
    Python would drop (raised in a garbage-collector callback) is raised by the next check()."""
    out = run_python(INTERRUPTS)
    assert out.returncode == 0 and out.stderr == "", out.stderr[-2000:]
    assert out.stdout.strip().split("|") == [
        "held: the block finished", "held: KeyboardInterrupt", "twice: KeyboardInterrupt",
        "gc: went on", "gc: TrainingInterrupted", "caught, not again: ran through",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "signum", "stream", "line", "status", "words"),
    [  # the frameworks loading: no half-imported module's traceback, the interrupt not lost
        (RECIPE, signal.SIGINT, "stderr", "mlp: loading", 130, "no report was written"),
        ([sys.executable, "-m", "toolkit", "doctor"], signal.SIGTERM, "stderr", "diagnose:",
         143, "doctor stopped before it finished"),
        # the run over, its summary printed: said after it, with where the report is
        (RECIPE, signal.SIGINT, "stdout", "== mlp: complete", 130,
         "the run had ended: its report is in"),
    ],
)  # fmt: skip
def test_an_interrupt_at_any_moment_is_one_line_and_its_status(
    tmp_path, argv, signum, stream, line, status, words
):
    """Real signals at moments of a real process's life, each sent when a line says the
    process is there (no sleeps): exit 130 or 143, one line, no traceback."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    extra = ["--smoke", f"--report_dir={tmp_path}"] if argv == RECIPE else ["--recipe=mlp"]
    proc = subprocess.Popen(
        [*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        seen, said = read_until(proc, line, timeout=300, stream=stream)
        assert seen and proc.poll() is None, f"no {line!r} in 300 s:\n{said[-2000:]}"
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    if "report is in" in words:  # the run is over: its report stands, whenever the signal came
        _, data = _report(tmp_path)
        assert data["status"] == "complete"
        if proc.returncode == -signum:  # it came after the last exit hook, as Python tore
            return  # down: killed by it, which a shell shows as 128 + signum (nothing left)
    assert proc.returncode == status, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"interrupted by {signal.Signals(signum).name}: {words}"), last


# ---------------------------------------------------------------------------- gates on nothing


def test_a_run_that_timed_nothing_is_untimed_and_no_gate_passes_on_it(tmp_path):
    """Every step a first call or warm-up: the run is `untimed` (exit 3, one line), not
    `complete`; compare --fail_on_slower against it cannot tell, and fails."""
    out = _run(["--epochs=1", "--train_steps=30", "--warmup_steps=1000",
                f"--report_dir={tmp_path}"])  # fmt: skip
    assert out.returncode == 3, out.stderr[-2000:]
    last = _last(out)
    assert last.startswith("error: NoTimedSteps: all 30 step(s) were the first call, the 1000")
    assert "lower --warmup_steps" in last and "Traceback" not in out.stderr
    run_dir, data = _report(tmp_path)
    assert data["status"] == "untimed" and f"the report is in {run_dir}" in last
    gate = _run([sys.executable, "-m", "toolkit", "compare", "--fail_on_slower",
                 str(run_dir), str(run_dir)])  # fmt: skip
    assert gate.returncode == 1 and "verdict: unknown" in gate.stdout, gate.stderr
    assert _last(gate).startswith("compare: cannot tell whether B is slower")
    plain = _run([sys.executable, "-m", "toolkit", "compare", str(run_dir), str(run_dir)])
    assert plain.returncode == 0 and "B is an untimed run (NoTimedSteps" in plain.stdout


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"budget_s": 0}, "budget_s must be a number of seconds >= 1 (as --tune_budget), got 0"),
     ({"budget_s": float("nan")}, "got nan"), ({"budget_s": "60"}, "got '60'"),
     ({"steps": 0}, "steps must be an integer >= 1, got 0")],
)  # fmt: skip
def test_a_search_with_no_budget_is_refused_from_python_as_from_the_cli(kwargs, words):
    from toolkit.search.tune import tune

    with pytest.raises(ValueError, match=re.escape(words)):
        tune(object(), None, **kwargs)  # refused before the target is even looked at


# ------------------------------------------------------------------------ reports from elsewhere

BAD_REPORTS = {
    "d['steps']['p50_s'] = 'fast'": "field steps.p50_s is 'fast', not a number or null",
    "del d['steps']['mean_s']": "field steps.mean_s is missing",
    "d['steps']['timed_steps'] = 1.5": "field steps.timed_steps is 1.5, not an integer",
    "d['steps']['max_s'] = -1": "field steps.max_s is -1, not a number >= 0",
    "d['status'] = 'done'": "field status is 'done', not one of complete, partial, diverged",
    "d['metrics']['loss'] = 'low'": "field metrics.loss is 'low', not a number",
    "d['epochs'][0]['seconds'] = '1 s'": "field epochs[0].seconds is '1 s', not a number",
    "d['compute'] = {'mfu': '5%'}": "field compute.mfu is '5%', not a number or null",
    "d['context'] = {'device': {'index': 0}}": "field context.device is malformed: missing",
    "d['cluster'] = {'rows': 5}": "field cluster holds a value this toolkit cannot show",
    "d['trace'] = {'files': 5}": "field trace.files is 5, not a list of file names",
    "d['timeline'] = [[1]]": "field timeline is [[1]], not a list of [seconds, steps, epoch",
}


def test_a_report_from_elsewhere_names_the_field_and_the_file(tmp_path, capsys):
    """A report edited by hand or written by another tool: show, show --markdown, compare,
    merge and trace each say which field of which file is wrong, in one line, status 2."""
    from tests.test_report import make_report
    from toolkit.cli import main

    good = tmp_path / "good"
    make_report("good").write(good, plot=False)
    cases = 0
    for i, (edit, words) in enumerate(BAD_REPORTS.items()):
        d = json.loads((good / "report.json").read_text())
        exec(edit, {"d": d})
        bad = tmp_path / f"bad{i}.json"
        bad.write_text(json.dumps(d))
        for argv in (["show", bad], ["show", "--markdown", bad], ["compare", good, bad],
                     ["compare", bad, good], ["merge", good, bad], ["trace", bad]):  # fmt: skip
            assert main([str(a) for a in argv]) == 2, (edit, argv)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith(f"error: '{bad}': {words}"), err
            cases += 1
    assert cases == 6 * len(BAD_REPORTS)
    # The same as a user meets it: a real process, no traceback.
    bad = tmp_path / "bad0.json"
    out = _run([sys.executable, "-m", "toolkit", "show", str(bad)])
    assert out.returncode == 2 and _last(out).startswith(f"error: '{bad}': field steps.p50_s")
    assert "Traceback" not in out.stderr


# ---------------------------------------------------------------------------- the user's code

USER_MODULE = """
def raises():
    raise RuntimeError("the user's own bug\\nsecond line")

def returns_none():
    return None
"""


def test_a_model_fn_that_raises_is_named_in_one_line(tmp_path):
    """One line naming the function and its exception, status 1; --verbosity=1 puts the
    traceback above it (without it, none: the build_task case below)."""
    (tmp_path / "mf.py").write_text(USER_MODULE)
    args = [sys.executable, "-m", "toolkit", "doctor", "--model_fn", "mf:raises"]
    out = _run([*args, "--verbosity=1"], cwd=tmp_path)
    assert out.returncode == 1, out.stderr[-2000:]
    assert _last(out) == (
        "error: --model_fn='mf:raises': raises() raised RuntimeError: the user's own bug; "
        "--verbosity=1 shows the traceback"
    )
    assert "Traceback (most recent call last)" in out.stderr


def test_a_model_fn_that_returns_the_wrong_thing_and_a_build_task_that_raises(
    tmp_path, monkeypatch
):
    from toolkit import app
    from toolkit.verbs import _target

    (tmp_path / "mf.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(app.UserCodeError, match=r"returns_none\(\) returned NoneType; it must"):
        _target.model_fn("mf:returns_none")
    script = tmp_path / "broken_task.py"
    script.write_text(
        FAILING_RECIPE.replace(
            "def build_task():", "def build_task():\n    raise ValueError('bad shape')"
        )
    )  # a ValueError of yours is named as yours, not passed off as the toolkit's own line
    out = _run([sys.executable, str(script), "--smoke"], cwd=os.getcwd())
    assert out.returncode == 1, out.stderr[-2000:]
    assert _last(out) == (
        "error: __main__.build_task() raised ValueError: bad shape; --verbosity=1 shows the "
        "traceback"
    )
    assert "Traceback" not in out.stderr


# ---------------------------------------------------------------------------- the verbs' options

VERB_OPTIONS = [
    ("compare a b --z=-1", "compare: --z must be a finite number > 0, got -1.0"),
    ("compare a b --z=nan", "compare: --z must be a finite number > 0, got nan"),
    (
        "compare a b --min_rel=-0.1",
        "compare: --min_rel must be a finite number >= 0 and <= 0.9, got -0.1",
    ),
    (
        "compare a b --min_rel=1",
        "compare: --min_rel must be a finite number >= 0 and <= 0.9, got 1.0",
    ),
    ("trace x --ops=-3", "trace: --ops must be an integer >= 0, got -3"),
    ("placement --batch_size=0", "placement: --batch_size must be an integer >= 1, got 0"),
    ("ops --repeats=0", "ops: --repeats must be an integer >= 1, got 0"),
    ("ops --min_time=inf", "ops: --min_time must be a finite number > 0, got inf"),
    ("preflight --precision=float8", "preflight: --precision must be one of float32, "),
    ("data-service --dispatcher --port=70000", "data-service: --port must be an integer >= 0"),
    ("data-service --dispatcher --host=", "data-service: --host must name this host"),
    ("data-service --worker --dispatcher=notaurl",
     "data-service: --dispatcher='notaurl': give the dispatcher as grpc://host:port"),
    ("data-service --worker --dispatcher=grpc://h:99999",
     "data-service: --dispatcher='grpc://h:99999': give the dispatcher as grpc://host:port"),
]  # fmt: skip


def test_the_verbs_options_are_checked_before_anything_loads(capsys):
    """Each in one line naming the option, status 2, before anything runs."""
    from toolkit.cli import main

    for argv, words in VERB_OPTIONS:
        assert main(argv.split()) == 2, argv
        err = capsys.readouterr().err
        assert err == f"error: {err[7:]}" and err.count("\n") == 1, err
        assert err.startswith(f"error: {words}"), err


def test_a_data_service_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = _run([sys.executable, "-m", "toolkit", "data-service", "--dispatcher",
                    f"--port={port}", "--all_interfaces"], timeout=120)  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: data-service: --port={port}: could not listen there (in use by another "
        "process?): choose another port, or 0 for any free one"
    )
    assert len(out.stderr.strip().splitlines()) <= 2  # its stage line, then the error


# ---------------------------------------------------------------------------- resources up front


@pytest.fixture
def read_only_dir(tmp_path):
    """A real read-only filesystem (a tmpfs mounted ro), where this machine lets tests mount
    one: a permission bit does not stop root."""
    where = tmp_path / "read-only"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=16k", "tmpfs", str(where)],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {done.stderr.strip()[:200]}")
    yield where
    subprocess.run(["umount", str(where)], capture_output=True)


def test_a_backup_dir_or_cache_that_cannot_be_written_is_said(tmp_path, read_only_dir):
    """--backup_dir on a read-only filesystem: one line before anything trains (not an OSError
    after the first epoch); a search whose cache cannot be written says its answer was not
    kept."""
    out = _run(["--smoke", f"--backup_dir={read_only_dir / 'backup'}",
                f"--report_dir={tmp_path / 'runs'}"])  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert _last(out) == (
        f"error: --backup_dir={read_only_dir / 'backup'}: cannot write there (Read-only file "
        "system); choose a writable directory, or leave --backup_dir out"
    )
    assert "== mlp" not in out.stdout and not (tmp_path / "runs").exists()
    # A read-only home: the cache under it cannot be written (said), and matplotlib's config
    # directory cannot be made there (its two warning lines held back).
    env = {k: v for k, v in os.environ.items() if k not in ("TOOLKIT_CACHE_DIR", "MPLCONFIGDIR")}
    tune = subprocess.run(
        [sys.executable, "-m", "toolkit", "tune", "--recipe", "mlp", "--tune_budget=1"],
        capture_output=True, text=True, timeout=900,  # with a pick's fresh check (≤ 5 rounds)
        env={**env, "HOME": str(read_only_dir), "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert tune.returncode == 0, tune.stderr[-2000:]
    cache = read_only_dir / ".cache" / "keras-perf-toolkit" / "tune.json"
    assert f"tune: not cached: cannot write {cache} (set TOOLKIT_CACHE_DIR)" in tune.stderr
    assert "Traceback" not in tune.stderr and "Matplotlib" not in tune.stderr


def test_out_of_memory_is_one_line_naming_the_stage(tmp_path):
    """Under an address-space limit, a model too big for it (a Dense kernel of 1024²×128
    floats): one line saying out of memory and while doing what, no traceback."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    out = _run(["--smoke", "--image_size=1024", f"--report_dir={tmp_path}"], preexec_fn=limit)
    assert out.returncode == 1, out.stderr[-2000:]
    # Where memory runs out first (building, or the first step) depends on the allocator.
    assert _last(out).startswith("error: out of memory while "), _last(out)
    assert "lower --batch_size" in _last(out) and "Traceback" not in out.stderr


# ---------------------------------------------------------------------------- errors stand alone


def test_errors_stand_alone_and_a_misspelled_recipe_lists_the_recipes(tmp_path):
    """No framework chatter before the error line (TFDS's offline package index), no Keras
    "ran out of data" warning on a folder dataset (its length is said), and a recipe name
    that is not there lists the ones that are."""
    out = _run([sys.executable, "-m", "recipes.mlpp", "--smoke"])
    assert out.returncode == 2 and out.stderr == (
        "error: python -m recipes.NAME: no recipe named 'mlpp'; the recipes are "
        f"{', '.join(app.recipe_names())}\n"
    )
    out = _run(["--smoke", "--dataset=tfds:nosuch", f"--report_dir={tmp_path / 'runs'}"])
    assert out.returncode == 1 and out.stderr.splitlines() == [
        "mlp: loading TensorFlow and Keras (tensorflow), then data and model",
        "error: --dataset=tfds:nosuch: unknown TFDS dataset; see `tfds.list_builders()` for names",
    ], out.stderr[-2000:]
    _images(tmp_path / "img", {"a": 11, "b": 12})
    out = _run(
        [sys.executable, "-W", "error::UserWarning", "-m", "recipes.cnn", "--epochs=2",
         f"--dataset=folder:{tmp_path / 'img'}", "--image_size=8", "--channels=3",
         "--batch_size=4", f"--report_dir={tmp_path / 'runs'}"]
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ran out of data" not in out.stderr and "Warning" not in out.stderr
