"""Helpers shared by tests: a fresh Python process for what must run before TF starts."""

from __future__ import annotations

import subprocess
import sys


def run_python(code: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a new interpreter (a fresh TensorFlow runtime) and captures its output."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )
