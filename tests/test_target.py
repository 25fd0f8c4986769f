"""What doctor, tune and backends measure when it is your code (``toolkit.verbs._target``, and
the app's own ``build_task``): a ``--model_fn`` that raises, returns the wrong thing, is not a
module's function or whose module raises on import, and a ``build_task`` that raises, each named
as the user's in one line. Real processes, as the user runs them."""

from __future__ import annotations

import os
import sys

import pytest

from tests.test_faults import FAILING_RECIPE, _last, _run

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
