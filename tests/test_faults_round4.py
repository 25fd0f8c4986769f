"""Faults, round 4 (issue 58), at the programs' edges: a closed stdout, a terminal that cannot
encode ``×``, a nonsense ``KERAS_BACKEND``, a ``--model_fn`` that is not a module's function,
a recipe's own bound on a flag, a weights file of random bytes, a comparison where nothing ran.
Real processes with real streams and files, as in ``tests/test_faults.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.test_faults import RECIPE, _last, _report, _run

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


@pytest.mark.parametrize(
    "args",
    [[*RECIPE, "--smoke"], [sys.executable, "-m", "toolkit", "devices"]],
    ids=["recipe", "verb"],
)
def test_a_nonsense_keras_backend_is_one_line_and_status_2(args):
    out = _run(args, env={"KERAS_BACKEND": "nonsense"}, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert _last(out) == (
        "error: KERAS_BACKEND=nonsense: use one of tensorflow, jax, torch, or give --backend"
    )
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "spec", [".hidden:make", "..up:make", "/etc/passwd:make", "mf:make:x", "a b:make", "m:"]
)
def test_a_model_fn_that_is_not_a_modules_function_is_a_usage_error(spec, tmp_path):
    out = _run(
        [sys.executable, "-m", "toolkit", "tune", f"--model_fn={spec}", "--smoke"],
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert _last(out).startswith(f"error: tune: --model_fn={spec!r}: give module:function")


def test_a_model_fn_whose_module_raises_on_import_is_named_as_theirs(tmp_path):
    (tmp_path / "broken_mf.py").write_text("raise RuntimeError('boom at import')\n")
    out = _run(
        [sys.executable, "-m", "toolkit", "tune", "--model_fn=broken_mf:make", "--smoke"],
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert _last(out).startswith(
        "error: --model_fn='broken_mf:make': importing broken_mf raised RuntimeError: boom at"
    )


def test_backends_where_nothing_ran_fails_and_caches_nothing(tmp_path):
    (tmp_path / "broken_mf.py").write_text("raise RuntimeError('boom at import')\n")
    cache = tmp_path / "cache"
    out = _run(
        [sys.executable, "-m", "toolkit", "backends", "--model_fn=broken_mf:make",
         "--backends=tensorflow", "--smoke", f"--out={tmp_path / 'out'}"],
        cwd=tmp_path, timeout=300, env={"TOOLKIT_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert _last(out).startswith("error: no backend ran (--model_fn='broken_mf:make'")
    assert "backends: not cached: no contender ran" in out.stderr
    assert not (cache / "backends.json").exists()


def test_a_recipes_own_bound_on_a_flag_exits_2():
    out = _run([sys.executable, "-m", "recipes.mobilenet", "--image_size=8", "--smoke"])
    assert out.returncode == 2, out.stderr[-2000:]
    assert _last(out) == "error: --image_size: MobileNetV2 needs >= 32, got 8"


@pytest.mark.parametrize("content", [b"", os.urandom(4096)], ids=["empty", "random"])
def test_init_weights_that_are_not_hdf5_are_not_blamed_on_another_model(tmp_path, content):
    weights = tmp_path / "start.weights.h5"
    weights.write_bytes(content)
    out = _run([*SMOKE, f"--init_weights={weights}", f"--report_dir={tmp_path / 'r'}"])
    assert out.returncode == 1, out.stderr[-2000:]
    assert "it is not a Keras weights file" in _last(out)
    assert "another model" not in _last(out)


# ---------------------------------------------------------------------------- a second look


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
        f"error: ops: --out={afile}: it is not a directory; give a directory to write the table in"
    )
    assert afile.read_text() == "mine\n"
