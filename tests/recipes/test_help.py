"""Every recipe's ``--help`` as a user reads it on an 80-column terminal: a real process, every
line at most 80 columns, plain text (no reStructuredText markup shown), the examples kept."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from toolkit import app
from toolkit.runner import flags as tk_flags

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("recipe", app.recipe_names())
def test_recipe_help_fits_80_columns_in_plain_text(recipe):
    done = subprocess.run(
        [sys.executable, "-m", f"recipes.{recipe}", "--help"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
        env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"usage: python -m recipes.{recipe}")
    for line in lines:
        assert len(line) <= 80, f"{len(line)} columns: {line!r}"
        assert "``" not in line, line
        assert not line.rstrip().endswith("::"), line
    assert any(line.startswith(f"    python -m recipes.{recipe}") for line in lines)


def test_plain_text_refills_prose_and_keeps_examples():
    doc = """One ``literal`` line, see :func:`toolkit.tune` and :mod:`~toolkit.app`.

    A paragraph long enough to be refilled to the width it is given, ending in a
    literal block marker::

        python -m recipes.mlp --a_flag_that_is_long \\
            --another
    """
    text = tk_flags.plain_text(doc, width=30)
    assert "``" not in text and ":func:" not in text and "::" not in text
    assert text.startswith("One literal line, see\ntoolkit.tune and toolkit.app.")
    assert all(len(line) <= 30 for line in text.splitlines() if not line.startswith(" "))
    example = "    python -m recipes.mlp --a_flag_that_is_long \\\n        --another"
    assert f"marker:\n\n{example}" in text
