"""Signals and child processes (issue 58), as a user meets them: every signal that ends a
program gets its partial report and one line; a child dies with its parent, whatever ended the
parent, and leaves no temporary file; a report is not cut by a second Ctrl-C; Ctrl-C while a
Grain pipeline's worker processes start ends the program at once; the interrupt handler holds
a signal while the frameworks load and never drops one, and an interrupt at any moment of a run
is one line and its status. Real processes, real signals, real files; each signal is sent when
a line says the process is there (no sleeps).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tests.helpers import read_until, run_python, signals_at
from tests.test_faults import RECIPE, _report

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _until(what, timeout=90.0):
    """Waits (polling) until `what()` is true; whether it came within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.1)
    return what()


def _alive(pid):
    """Whether `pid` runs (a zombie, ended and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _in_session(sid):
    """The live processes of session `sid` (Linux's /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[3]) == sid:
                found.append(int(name))
    return found


def _children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux's /proc")


# ---------------------------------------------------------------------------- every signal


SLOW_REPORT = """
import os, sys, time
from toolkit.report import run_report
write = run_report.RunReport.write
def slow(self, *a, **k):
    print("writing the report", file=sys.stderr, flush=True)
    sent, deadline = os.environ["SIGNALS_SENT"], time.monotonic() + 120
    while not os.path.exists(sent) and time.monotonic() < deadline:
        time.sleep(0.01)  # until the test's signals have landed inside, however late it woke
    return write(self, *a, **k)
run_report.RunReport.write = slow
import runpy
from toolkit.core import interrupts
interrupts.install()
sys.argv = ["recipes.mlp", *sys.argv[1:]]
runpy.run_module("recipes.mlp", run_name="__main__")
"""


def test_a_second_signal_while_the_report_is_written_neither_cuts_it_nor_goes_unsaid(tmp_path):
    """Ctrl-C twice while the report is written (an impatient user): the report is written
    whole, and one line says where it is (before, the second signal cut it: nothing kept)."""
    script = tmp_path / "slow.py"
    script.write_text(SLOW_REPORT)
    runs, sent = tmp_path / "runs", tmp_path / "signals-sent"
    proc = subprocess.Popen(
        signals_at([sys.executable, str(script), "--smoke", f"--report_dir={runs}"]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**ENV, "SIGNALS_SENT": str(sent)}, cwd=ROOT,
    )  # fmt: skip
    try:
        seen, said = read_until(proc, "writing the report", timeout=300, stream="stderr")
        assert seen, said[-2000:]
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        sent.touch()
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted by SIGINT: the run had ended: its report is in"), last
    run_dir, data = _report(runs)
    assert data["status"] == "complete" and (run_dir / "report.md").exists()


# ---------------------------------------------------------------------------- children

PARENT = """
import os, sys
from toolkit.core import children, interrupts
interrupts.install()
CHILD = '''
import os, sys, time
from toolkit.core import children, interrupts
children.bind_to_parent()
interrupts.install()
print("child ready", flush=True)
try:
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    # A late result, as a child stopped mid-run writes: never into a removed directory.
    children.write_result(os.path.join(sys.argv[1], "out.json"), "{}")
'''
try:
    with children.temporary_directory("toolkit-test-") as tmp:
        with children.running([sys.executable, "-c", CHILD, tmp]) as child:
            print("parent", tmp, child.pid, flush=True)
            child.wait()
except KeyboardInterrupt:
    raise SystemExit(130)
"""


# A user's script calling the toolkit (tune(build)'s fresh rounds): no handlers of its own, so
# a signal's default action ends it, and threads (a framework's) that outlive its main thread
# for a moment: the kernel tells the child while its parent is a zombie main thread.
SCRIPT_PARENT = PARENT.replace("interrupts.install()", """
import threading, time
for _ in range(4):
    threading.Thread(target=lambda: [time.sleep(0.001) for _ in iter(int, 1)], daemon=True).start()
""", 1)  # fmt: skip


@needs_proc
@pytest.mark.parametrize(
    ("signum", "group", "parent_code"),
    [(signal.SIGKILL, False, PARENT), (signal.SIGTERM, False, PARENT),
     (signal.SIGTERM, True, PARENT), (signal.SIGINT, True, PARENT),
     (signal.SIGHUP, False, PARENT), (signal.SIGTERM, False, SCRIPT_PARENT),
     (signal.SIGHUP, False, SCRIPT_PARENT)],
    ids=["KILL", "TERM", "TERM-group", "INT-group", "HUP", "TERM-script", "HUP-script"],
)  # fmt: skip
def test_a_child_dies_with_its_parent_and_leaves_no_temporary_file(signum, group, parent_code):
    """Whatever ends the parent (SIGKILL, which it never sees; a signal to it alone or to the
    whole group; a signal's default action on a script with threads), its child ends within
    a bounded time, and the temporary directory they shared is gone (removed by the parent,
    or by the child when the parent could not)."""
    env = {**ENV, "PYTHONPATH": ROOT}
    parent = subprocess.Popen(
        signals_at([sys.executable, "-c", parent_code]), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        seen, said = read_until(parent, "parent ", timeout=120)
        assert seen, said + parent.stderr.read()
        _, tmp, pid = said.splitlines()[-1].split()
        child = int(pid)
        if "child ready" not in said:  # the child is bound (its line), then the signal
            seen, more = read_until(parent, "child ready", timeout=120)
            assert seen, more
        if group:
            os.killpg(parent.pid, signum)
        else:
            os.kill(parent.pid, signum)
        parent.wait(timeout=120)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    assert _until(lambda: not _alive(child), 60), f"child {child} outlived its parent"
    assert _until(lambda: not os.path.exists(tmp), 60), f"{tmp} outlived the run"


@needs_proc
def test_a_child_whose_parent_is_already_gone_ends_at_once_and_removes_only_what_is_ours(
    tmp_path,
):
    """The race before the kernel is asked to signal the parent's death: a child told of a
    parent that is not its parent ends at once (143). Of the directories it is told of, it
    removes only the toolkit's own temporary ones, of this user, never another path."""
    ours = tempfile.mkdtemp(prefix="toolkit-test-")
    theirs = tmp_path / "not-a-temp-dir"
    theirs.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    env = {**ENV, "PYTHONPATH": ROOT, "TOOLKIT_PARENT_PID": gone,
           "TOOLKIT_PARENT_DIRS": os.pathsep.join([ours, str(theirs)]),
           "TOOLKIT_PARENT_DEATHSIG": "1"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c",
         "from toolkit.core import children; children.bind_to_parent(); print('ran on')"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 143 and "ran on" not in out.stdout, out.stderr[-2000:]
    assert not os.path.exists(ours) and theirs.is_dir()


def _measuring(temp):
    """Whether a child measuring a contender has built its model under `temp`: it wrote the
    initial weights every contender shares (it trains next)."""
    return any(temp.glob("toolkit-backends-*/initial.weights.h5"))


@needs_proc
def test_backends_stopped_leaves_no_child_and_no_temporary_file(tmp_path):
    """End to end: ``backends`` measuring in a fresh child process, SIGTERM to the parent
    alone: 143 and its one line, the child stopped and waited for (no orphan), and nothing of
    theirs left in the temporary directory (no ``out.json``, no ``initial.weights.h5``)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**ENV, "TMPDIR": str(temp), "TOOLKIT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        signals_at([sys.executable, "-m", "toolkit", "backends", "--recipe", "mlp", "--steps",
                    "4000", "--rounds", "1", "--batch_size=64", "--hidden_units=32",
                    "--device=cpu"]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        assert _until(lambda: _measuring(temp) and _children_of(proc.pid), 240), proc.poll()
        kids = _children_of(proc.pid)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == (
        "interrupted by SIGTERM: backends stopped before it finished"
    )
    assert _until(lambda: not any(_alive(k) for k in kids), 60), kids
    left = [os.path.join(r, n) for r, ds, fs in os.walk(temp) for n in ds + fs]
    assert not [p for p in left if "toolkit-" in p or p.endswith((".json", ".h5"))], left


# ---------------------------------------------------------------------------- Grain

GRAIN = """
if __name__ == "__mp_main__":  # a worker process runs this first as it starts: the signal
    print("a worker starts", flush=True)  # lands while the parent still sends it its start
import numpy as np
from toolkit import data as D
if __name__ == "__main__":
    x = np.random.rand(256, 8, 8, 3).astype("float32")
    y = np.arange(256, dtype=np.int32) % 3
    ds = D.pipeline((x, y), 4, loader="grain", workers=2, num_parallel_calls=1)
    for batch in ds.repeat():
        pass
"""


@needs_proc
def test_ctrl_c_while_grain_workers_start_ends_the_program_with_no_process_left(tmp_path):
    """Ctrl-C (to the whole group, as a terminal sends it) while a Grain pipeline's worker
    processes start: the program ends on it (130, as a shell shows Python's), within a
    bound, and none of its processes is left. It used to hang for good: a worker killed
    while Python started it left ``multiprocessing`` writing its start into a pipe whose
    read end the parent itself held."""
    pytest.importorskip("grain")
    script = tmp_path / "grain_ctrl_c.py"
    script.write_text(GRAIN)
    env = {**ENV, "PYTHONPATH": ROOT}
    proc = subprocess.Popen(
        signals_at([sys.executable, str(script)]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, cwd=str(tmp_path), start_new_session=True,
    )  # fmt: skip
    try:
        seen, said = read_until(proc, "a worker starts", timeout=240)
        assert seen, said + proc.stderr.read()
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=90)  # hung for good before
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode in (130, -signal.SIGINT), stderr[-2000:]
    assert "KeyboardInterrupt" in stderr  # a plain script: Python's own end on Ctrl-C
    assert _until(lambda: not _in_session(proc.pid), 60), _in_session(proc.pid)


# ----------------------------------------------------------- interrupts, held and at any moment

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

def in_weakref():  # raised in a weakref callback, which no frame tells: check() raises it after
    import weakref
    class Held: pass
    def cb(_):
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(100000))
    held = Held()
    ref = weakref.ref(held, cb)
    del held
    said.append("weakref: went on")
    interrupts.check()
run("weakref", in_weakref)

def forked():  # a forked worker (a pool's) is not the program: the signal's default action
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(100000))
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    ended = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    said.append(f"forked: {'killed by SIGTERM' if ended else status}")
run("forked", forked)
run("caught, not again", interrupts.check)
print("|".join(said))
"""


def test_a_signal_is_held_while_the_frameworks_load_and_never_dropped():
    """The handler every program installs first: a signal in a held block (the frameworks'
    import, a report being written) is raised when it ends, a second one at once; one that
    Python would drop (raised in a garbage-collector or a weakref callback) is raised by the
    next check(), and Python says nothing of the drop; a forked worker (a pool's) takes the
    signal's default action."""
    out = run_python(INTERRUPTS)
    assert out.returncode == 0 and out.stderr == "", out.stderr[-2000:]
    assert out.stdout.strip().split("|") == [
        "held: the block finished", "held: KeyboardInterrupt", "twice: KeyboardInterrupt",
        "gc: went on", "gc: TrainingInterrupted", "weakref: went on",
        "weakref: TrainingInterrupted", "forked: killed by SIGTERM", "forked: ran through",
        "caught, not again: ran through",
    ]  # fmt: skip


YOUR_SCRIPT = r"""
import os, signal, sys
import keras, numpy as np
from toolkit import profile

class Term(keras.callbacks.Callback):  # the SIGTERM a scheduler sends, mid-run
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            os.kill(os.getpid(), signal.SIGTERM)

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile(optimizer="sgd", loss="mse")
x, y = np.zeros((256, 4), "float32"), np.zeros((256, 2), "float32")
with profile("yours", report_dir=sys.argv[1]) as prof:
    prof.fit(model, x, y, batch_size=8, epochs=50, callbacks=[Term()], verbose=0)
print("ran on")
"""


def test_an_interrupt_your_script_lets_through_is_one_line_and_its_status(tmp_path):
    """Your own script, profiled: the toolkit's handler turned SIGTERM into an exception (so
    the partial report is written) and the script does not catch it. It ends as SIGTERM's
    default would, 143, with one line saying where the report is: not the toolkit's stack
    and status 1 (a SIGTERM during ``tune(build)`` ended so)."""
    out = subprocess.run(
        signals_at([sys.executable, "-c", YOUR_SCRIPT, str(tmp_path)]),
        capture_output=True, text=True, env=ENV, timeout=300,
    )  # fmt: skip
    assert out.returncode == 143 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "ran on" not in out.stdout
    run_dir, data = _report(tmp_path)
    assert data["status"] == "partial"
    last = out.stderr.strip().splitlines()[-1]
    assert last == f"interrupted by SIGTERM: the partial report is in {run_dir}", last


EXIT_HOOKS = r"""
import atexit, os, signal, sys
from toolkit.core import interrupts
interrupts.install()
atexit.register(lambda: open(sys.argv[1], "w").close())  # a temporary directory's removal
os.kill(os.getpid(), signal.SIGTERM)
sum(range(100000))
"""


def test_an_interrupt_a_program_lets_through_still_runs_its_exit_hooks(tmp_path):
    """The one line and 143 for an interrupt nothing caught come after the exit hooks, as
    Python's own exit runs them: a child whose second SIGTERM came as it ended left its
    orphaned parent's temporary directory behind when it ended at once."""
    marker = tmp_path / "hook ran"
    out = subprocess.run(
        signals_at([sys.executable, "-c", EXIT_HOOKS, str(marker)]),
        capture_output=True, text=True, env=ENV, timeout=120,
    )  # fmt: skip
    assert out.returncode == 143 and marker.exists(), out.stderr[-2000:]
    assert out.stderr.strip() == "interrupted by SIGTERM: stopped before it finished"


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
        signals_at([*argv, *extra]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
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
        if proc.returncode == 0:  # it came once the program had ended: nothing to stop
            return
    assert proc.returncode == status, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"interrupted by {signal.Signals(signum).name}: {words}"), last


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_as_the_program_ends_is_said_or_finds_it_ended(tmp_path, signum):
    """A signal in a run's last moment: its stdout, a pipe, is flushed as it exits, so the
    last line is seen as the process ends. It ends at its last exit hook (before CPython
    gives the signals back their default action and TensorFlow tears down): the signal is
    said in one line with 128 + its number, or it finds the program ended (0); never a
    process killed by it with nothing said (each of 5 tries did, before)."""
    env = {**ENV, "PYTHONUNBUFFERED": ""}
    proc = subprocess.Popen(
        signals_at([*RECIPE, "--smoke", f"--report_dir={tmp_path}"]), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        seen, said = read_until(proc, "png:", timeout=300)
        assert seen, said[-2000:]
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, 128 + signum), (proc.returncode, stderr[-2000:])
    if proc.returncode:
        last = stderr.strip().splitlines()[-1]
        name = signal.Signals(signum).name
        assert last.startswith(f"interrupted by {name}: the run had ended: its report is in")
    _, data = _report(tmp_path)
    assert data["status"] == "complete"


def test_a_signal_ignored_at_start_stays_ignored_and_the_others_still_stop_the_run(tmp_path):
    """Under ``nohup`` SIGHUP starts out ignored: the toolkit keeps it so (a closed terminal
    does not stop a run the user detached), and SIGTERM still stops it as ever (143). Each
    signal is sent once training is seen to run (a step line), the second once a step line
    came after the first: one reader of stderr, waited on, never a sleep."""
    import threading

    argv = [*RECIPE, f"--report_dir={tmp_path}", "--epochs=100000", "--log_steps=50"]
    proc = subprocess.Popen(
        signals_at(argv, ("SIGTERM", "SIG_IGN:SIGHUP")),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    lines, came = [], threading.Condition()

    def read():
        for line in proc.stderr:
            with came:
                lines.append(line)
                came.notify_all()
        with came:
            came.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def steps_seen(least):
        with came:
            came.wait_for(
                lambda: (
                    proc.poll() is not None or sum(x.startswith("step ") for x in lines) >= least
                ),
                timeout=300,
            )
            return sum(x.startswith("step ") for x in lines)

    try:
        first = steps_seen(1)
        assert first >= 1 and proc.poll() is None, "".join(lines)[-2000:]
        proc.send_signal(signal.SIGHUP)
        assert steps_seen(first + 1) > first and proc.poll() is None, "".join(lines)[-2000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
        reader.join(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = "".join(lines)
    assert proc.returncode == 143, stderr[-2000:]
    assert "SIGHUP" not in stderr and "interrupted by SIGTERM" in stderr, stderr[-2000:]
