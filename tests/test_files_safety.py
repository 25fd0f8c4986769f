"""Files read and written only where they should be (issue 58): a report's paths stay inside
its run, the toolkit's temporary config directory is private, writing a file changes no
process-wide state (the umask), processes sharing one cache keep every entry, a cache that
cannot be written or an entry damaged by hand is a miss said in one line, a report
directory that is a symlink loop and a backup directory on a read-only filesystem are refused
before training, the cache directory is one place wherever a program starts, and no compiled
program is read from or written to a directory others can write. Real files, real threads and
real processes throughout.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time

import pytest

from tests.test_faults import RECIPE, _last, _run
from tests.test_report import make_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "SECRET_OP_NAME_58"
# A PyTorch Chrome trace: ``trace`` prints its ops' names, so a secret named as one would show.
CHROME = {"traceEvents": [{"name": SECRET, "cat": "cpu_op", "ph": "X", "ts": 0, "dur": 50,
                          "pid": 1, "tid": 1}]}  # fmt: skip


def _toolkit(*args, env=None, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def _run_with_trace(tmp_path, name):
    """A run directory whose report's ``trace.files`` names `name`, and a secret outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.pt.trace.json").write_text(json.dumps(CHROME))
    run = tmp_path / "runs" / "run1"
    make_report("r").write(run, plot=False)
    report = json.loads((run / "report.json").read_text())
    report["trace"] = {"logdir": str(run / "train"), "requested_steps": [1, 2],
                       "traced_steps": [1, 2], "files": [name]}  # fmt: skip
    (run / "report.json").write_text(json.dumps(report))
    return run


@pytest.mark.parametrize("how", ["relative", "absolute", "symlink"])
def test_trace_reads_no_file_outside_its_run(tmp_path, how):
    """``trace RUN`` reads what the report names only inside the run: ``../..`` out, an
    absolute path elsewhere and a symlink leading out are refused in one line naming the
    report and the field, status 2, and the file is never read."""
    secret = tmp_path / "outside" / "secret.pt.trace.json"
    name = {"relative": "../../outside/secret.pt.trace.json", "absolute": str(secret),
            "symlink": "train/link.pt.trace.json"}[how]  # fmt: skip
    run = _run_with_trace(tmp_path, name)
    if how == "symlink":
        (run / "train").mkdir()
        (run / "train" / "link.pt.trace.json").symlink_to(secret)
    for target in (run, run / "report.json"):
        out = _toolkit("trace", target)
        assert out.returncode == 2, out.stdout + out.stderr
        assert SECRET not in out.stdout + out.stderr
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
        assert _last(out).startswith(f"error: '{run / 'report.json'}': field trace.files[0]")
        assert "outside its run directory" in _last(out)
    # The directory read as a directory of traces: the symlink out is not a trace of it.
    if how == "symlink":
        (run / "report.json").unlink()
        out = _toolkit("trace", run)
        assert SECRET not in out.stdout + out.stderr and out.returncode == 2, out.stderr


def test_trace_reads_the_files_inside_its_run_wherever_the_run_is(tmp_path):
    """A name relative to the run directory is read from there, whatever the current
    directory: a run moved or copied elsewhere still reads its own trace back."""
    run = _run_with_trace(tmp_path, "train/ok.pt.trace.json")
    (run / "train").mkdir()
    (run / "train" / "ok.pt.trace.json").write_text(json.dumps(CHROME))
    moved = tmp_path / "elsewhere"
    os.rename(run, moved)
    out = _toolkit("trace", moved)
    assert out.returncode == 0 and SECRET in out.stdout, out.stdout + out.stderr


def test_only_a_run_directory_bounds_what_a_report_reads(tmp_path):
    """The helper itself: the run's own files pass (through a symlink inside it too); the run
    directory itself, ``..``, absolute paths and symlinks out do not."""
    from toolkit.core.files import ReportError, inside_run

    run = tmp_path / "run"
    (run / "train").mkdir(parents=True)
    (run / "train" / "a.xplane.pb").write_bytes(b"")
    (run / "inner").symlink_to(run / "train")
    (run / "out").symlink_to(tmp_path)
    ok = os.path.realpath(run / "train" / "a.xplane.pb")
    for name in ("train/a.xplane.pb", "inner/a.xplane.pb", str(run / "train" / "a.xplane.pb"),
                 "train/../train/a.xplane.pb"):  # fmt: skip
        assert inside_run(str(run), name, "trace.files[0]", "r.json") == ok
    for name in ("..", ".", "", "../run2/x", "/etc/passwd", "out/x", "train/../../x", "a\0b"):
        with pytest.raises(ReportError, match=r"field trace.files\[0\] names"):
            inside_run(str(run), name, "trace.files[0]", "r.json")


# ---------------------------------------------------------------------------- private dirs

MPL = """
import json, os, sys
from toolkit.core import native_logs
env = {"XDG_CONFIG_HOME": sys.argv[1]}
native_logs._matplotlib_config(env)
print(json.dumps(env.get("MPLCONFIGDIR")))
"""


def _mpl_dir(tmp):
    """MPLCONFIGDIR as the toolkit picks it in a fresh process whose temporary directory is
    `tmp` and whose config home cannot be written (``/proc/1``: not even root may)."""
    out = subprocess.run(
        [sys.executable, "-c", MPL, "/proc/1/no-config"], capture_output=True, text=True,
        timeout=120, cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


needs_proc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.access("/proc/1", os.W_OK),
    reason="needs a config home this user cannot write (/proc/1 on Linux)",
)


@needs_proc
def test_the_matplotlib_config_dir_is_made_private(tmp_path):
    made = _mpl_dir(tmp_path)
    assert made == str(tmp_path / f"keras-perf-matplotlib-{os.getuid()}")
    st = os.lstat(made)
    assert stat.S_ISDIR(st.st_mode) and st.st_mode & 0o077 == 0 and st.st_uid == os.getuid()
    assert _mpl_dir(tmp_path) == made  # reused by the next process


@needs_proc
@pytest.mark.parametrize("taken", ["symlink", "world-writable", "someone else's"])
def test_a_matplotlib_config_dir_someone_else_made_is_not_used(tmp_path, taken):
    """Someone else got to the predictable name first: a symlink to their world-writable
    directory, a world-writable directory, a directory of theirs. matplotlib then keeps its
    own default, and nothing of theirs is used."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chmod(theirs, 0o777)
    name = tmp_path / f"keras-perf-matplotlib-{os.getuid()}"
    if taken == "symlink":
        name.symlink_to(theirs)
    elif taken == "world-writable":
        name.mkdir()
        os.chmod(name, 0o777)
    else:
        if os.getuid() != 0:
            pytest.skip("only root can make a directory owned by someone else")
        name.mkdir(mode=0o700)
        os.chown(name, 65534, 65534)
    assert _mpl_dir(tmp_path) is None
    assert list(theirs.iterdir()) == []


# ---------------------------------------------------------------------------- umask


def test_writing_a_file_leaves_the_umask_alone(tmp_path):
    """``atomic_write`` must not set the process-wide umask, even for a moment: a thread
    creating files meanwhile would get them 0666. A real thread creates files while the
    main thread writes; every one of its files keeps the umask's 0644."""
    from toolkit.core.files import atomic_write

    old = os.umask(0o022)
    stop, made = threading.Event(), []

    def create():
        i = 0
        while not stop.is_set():
            path = tmp_path / "theirs" / f"f{i}"
            with open(path, "w"):
                pass
            made.append(path)
            i += 1

    (tmp_path / "theirs").mkdir()
    racer = threading.Thread(target=create, daemon=True)
    try:
        racer.start()
        made_one = time.monotonic() + 60
        while not made and time.monotonic() < made_one:
            time.sleep(0.001)  # the racer on the CPU before the writes, however busy the machine
        deadline = time.monotonic() + 3.0
        writes = 0
        while (writes < 300 and time.monotonic() < deadline) or writes < 20:
            path = atomic_write(tmp_path / "ours" / "r.json", f'{{"n": {writes}}}')
            writes += 1
        stop.set()
        racer.join(timeout=60)
    finally:
        os.umask(old)
    modes = {oct(os.stat(p).st_mode & 0o777) for p in made}
    assert made and modes == {"0o644"}, modes
    # The race's window is a few instructions wide: seen or not, the call itself is what
    # must not happen. The profiler sees every C function called, os.umask included.
    calls = []

    def seen(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") == "umask":
            calls.append(arg)

    sys.setprofile(seen)
    try:
        atomic_write(tmp_path / "ours" / "r.json", "{}")
        atomic_write(tmp_path / "ours" / "r.json", b"{}")
    finally:
        sys.setprofile(None)
    assert calls == []
    assert os.stat(path).st_mode & 0o777 == 0o644  # the report itself follows the umask
    assert [p.name for p in (tmp_path / "ours").iterdir()] == ["r.json"]  # no temp file left


# ---------------------------------------------------------------------------- caches

WRITER = """
import os, sys, time
from toolkit.core.cache import Cache
go = sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.01)
cache = Cache("shared.json")
for i in range(50):
    assert cache.put(f"{sys.argv[1]}-{i}", {"i": i}, {"n": i}), "not written"
print("done")
"""


def test_processes_filling_one_cache_at_once_keep_every_entry(tmp_path):
    """Three processes put 50 entries each into one cache file at the same moment: all 150
    are there (without a lock each wrote back what it had read, and lost the others')."""
    go = tmp_path / "go"
    env = {**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path / "cache")}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    writer = [sys.executable, "-c", WRITER]
    procs = [subprocess.Popen([*writer, n, str(go)], cwd=ROOT, env=env, **pipes) for n in "abc"]
    go.write_text("")  # all three start writing together
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0 and out.strip() == "done", err[-2000:]
    entries = json.loads((tmp_path / "cache" / "shared.json").read_text())
    assert len(entries) == 150 and {k.split("-")[0] for k in entries} == set("abc")
    assert all(e["result"]["n"] == int(k.split("-")[1]) for k, e in entries.items())


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path, monkeypatch, capsys):
    """$TOOLKIT_CACHE_DIR a file, or a lock that cannot be taken: a put is False and a get a
    miss, never an error; the compile cache says so in one line, once."""
    from toolkit import backend
    from toolkit.core.cache import Cache

    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(a_file))
    cache = Cache("tune.json")
    assert cache.put("k", {}, {"x": 1}) is False and cache.get("k") is None
    words = backend.use_compile_cache()
    assert words.startswith("compile cache: not cached: cannot make") and str(a_file) in words
    backend.use_compile_cache()  # the runner asks again: said once
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "set TOOLKIT_CACHE_DIR" in err and "Traceback" not in err
    assert a_file.read_text() == "not a directory"
    # A directory where the lock file goes: the lock cannot be had, the put is skipped.
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache" / "tune.json.lock").mkdir(parents=True)
    assert cache.put("k", {}, {"x": 1}) is False


def test_a_read_only_cache_directory_is_skipped(tmp_path, monkeypatch):
    """A cache directory that cannot be written (a read-only filesystem where this machine
    lets a test mount one, as root; else a 0555 directory): put is False at once, the lock
    file included, and nothing is left there."""
    from toolkit.core.cache import Cache

    where = tmp_path / "cache"
    where.mkdir()
    mounted = (
        os.getuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=16k", "tmpfs", str(where)], capture_output=True
        ).returncode
        == 0
    )
    if not mounted and os.getuid() == 0:
        pytest.skip("root writes a 0555 directory anyway, and no read-only tmpfs mounts here")
    if not mounted:
        os.chmod(where, 0o555)
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(where))
    try:
        assert Cache("tune.json").put("k", {}, {"x": 1}) is False
        assert list(where.iterdir()) == []
    finally:
        if mounted:
            subprocess.run(["umount", str(where)], capture_output=True)
        else:
            os.chmod(where, 0o755)


def _tune_entry():
    from toolkit.search.engine import Candidate, Trial
    from toolkit.search.tune import TuneResult

    best = Candidate()
    return TuneResult(best, [Trial(best, 1000.0, 1.0, compile_s=0.5)], "k", False, 2.0).to_dict()


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ("r['best']['batch_size'] = 'x'", "field result.best.batch_size is 'x'"),
        ("r['best']['steps_per_execution'] = 0", "field result.best.steps_per_execution is 0"),
        ("r['trials'][0]['candidate']['jit_compile'] = 'yes'",
         "field result.trials[0].candidate.jit_compile is 'yes'"),
        ("r['trials'][0]['examples_per_sec'] = 'fast'", "field result.trials[0].examples_per_s"),
        ("r['trials'][0]['rates'] = ['a']", "field result.trials[0].rates[0] is 'a'"),
        ("del r['trials']", "field result.trials is missing"),
        ("r['best'] = [1]", "field result.best is [1], not an object"),
    ],
)  # fmt: skip
def test_a_damaged_tune_cache_entry_is_named_and_missed(tmp_path, monkeypatch, capsys, edit, field):
    """A tune cache entry of valid JSON with a field of the wrong kind (edited by hand,
    written by another version): one line naming the file and the field, and a miss (the
    search runs again), never a pick of ``--batch_size=x``."""
    from toolkit.core.cache import Cache
    from toolkit.search import tune

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    cache = Cache(tune.CACHE_FILE)
    result = _tune_entry()
    assert cache.put("k", {}, result) and tune.cached("k") is not None  # the sound one reads
    exec(edit, {"r": result})
    cache.put("k", {}, result)
    assert tune.cached("k") is None
    err = capsys.readouterr().err
    path = tmp_path / tune.CACHE_FILE
    assert err.count("\n") == 1 and err.startswith(f"{path}: damaged entry k ({field}"), err
    assert err.rstrip().endswith("treated as a miss")


def test_a_cache_entry_that_is_no_object_is_named_and_missed(tmp_path, monkeypatch, capsys):
    from toolkit.search import tune

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    path = tmp_path / tune.CACHE_FILE
    for entry, words in (("oops", "it is 'oops', not an object"),
                         ({"result": 3}, "field result is 3, not an object")):  # fmt: skip
        path.write_text(json.dumps({"k": entry}))
        assert tune.cached("k") is None and tune.cached("other") is None
        err = capsys.readouterr().err
        assert err == f"{path}: damaged entry k ({words}): treated as a miss\n"


# ---------------------------------------------------------------------------- report dir


def test_a_report_dir_that_is_a_symlink_loop_is_refused(tmp_path):
    from toolkit.runner.task import SetupError, check_report_dir

    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere" / "at-all")
    for where in ("loop", "loop/runs", "gone"):
        with pytest.raises(SetupError, match=r"--report_dir=.*symbolic link that leads nowhere"):
            check_report_dir(str(tmp_path / where))


def test_a_symlink_loop_report_dir_is_refused_before_training(tmp_path):
    """``--report_dir=loop`` (``ln -s loop loop``): one line naming --report_dir before
    anything trains, status 1 as for any report directory that cannot be written."""
    (tmp_path / "loop").symlink_to("loop")
    out = subprocess.run(
        [*RECIPE, "--smoke", f"--report_dir={tmp_path / 'loop'}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert _last(out).startswith(f"error: --report_dir={tmp_path / 'loop'}: ")
    assert "symbolic link that leads nowhere" in _last(out)
    assert "Traceback" not in out.stderr and "== mlp" not in out.stdout
    assert "training stopped" not in out.stdout + out.stderr


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


# ------------------------------------------------------------------------------- compile caches


def test_a_compile_cache_others_can_write_is_not_used(tmp_path, monkeypatch):
    """A compiled program read from the cache runs here: a cache directory others can write
    is refused in one line, and nothing is compiled into it."""
    from toolkit import backend

    shared = tmp_path / "shared"
    (shared / "compiled").mkdir(parents=True)
    for d in (shared, shared / "compiled"):
        d.chmod(0o777)
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(shared))
    said = backend.use_compile_cache()
    assert said.startswith(f"compile cache: not used: {shared} is not a directory of this")
    assert not any(p.is_file() for p in shared.rglob("*"))


def test_the_cache_directory_is_one_place_wherever_a_program_starts(tmp_path, monkeypatch):
    from toolkit.core import machine

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", "~/kpt")
    assert machine.cache_dir() == str(tmp_path / "kpt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", "rel")
    assert machine.cache_dir() == str(tmp_path / "rel")


def test_torch_compiles_into_no_directory_someone_else_made(tmp_path, monkeypatch):
    """Inductor's default cache, ``$TMPDIR/torchinductor_<user>``, planted world-writable by
    someone else, is not where torch.compile's code goes: a private directory is."""
    import getpass
    import tempfile

    pytest.importorskip("torch")
    from toolkit.backend import get

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    planted = tmp_path / f"torchinductor_{getpass.getuser()}"
    planted.mkdir()
    planted.chmod(0o777)
    where = get("torch").private_caches()
    assert where is not None and os.environ["TORCHINDUCTOR_CACHE_DIR"] == where
    assert os.path.basename(where).startswith("toolkit-torchinductor-")
    assert os.stat(where).st_mode & 0o077 == 0
    planted.chmod(0o700)  # this user's own, private: torch's default name, kept
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    assert get("torch").private_caches() == str(planted)


def test_scratch_dir_left_by_a_killed_process_is_swept_and_a_live_one_kept(tmp_path, monkeypatch):
    """A process ended at once (SIGKILL) runs no exit hook: its scratch directory is removed
    by the next one made of its prefix, while one a live process holds, one too young to
    judge and one without a holder (an older version's) stay. Real processes, each with its
    own lock: one killed, one alive until the test ends."""
    from toolkit.core import files

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    make = "from toolkit.core import files; print(files.scratch_dir('toolkit-t-'), flush=True)"
    killed = subprocess.run(
        [sys.executable, "-c", make + "; import os; os.kill(os.getpid(), 9)"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    dead = killed.stdout.strip()
    live = subprocess.Popen(
        [sys.executable, "-c", make + "; import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        held = live.stdout.readline().strip()
        unheld = tmp_path / "toolkit-t-old"
        unheld.mkdir(mode=0o700)
        young = files.scratch_dir("toolkit-t-")
        assert all(os.path.isdir(p) for p in (dead, held, unheld, young))  # a minute to judge
        monkeypatch.setattr(files, "_SCRATCH_SWEEP_AGE_S", 0.0)
        mine = files.scratch_dir("toolkit-t-")
        assert not os.path.exists(dead)
        assert all(os.path.isdir(p) for p in (held, unheld, young, mine))
        for path in (young, mine):
            files.remove_scratch(path)
            assert not os.path.exists(path)
    finally:
        live.communicate(timeout=120)
