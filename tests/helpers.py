"""Helpers shared by tests: a fresh Python process for what must run before TF starts."""

from __future__ import annotations

import subprocess
import sys
import threading


def run_python(code: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a new interpreter (a fresh TensorFlow runtime) and captures its output."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )


def read_until(
    proc: subprocess.Popen, prefix: str, timeout: float, stream: str = "stdout"
) -> tuple[bool, str]:
    """Reads `proc`'s output (its `stream`) until a line starts with `prefix`, the output
    ends, or `timeout` seconds pass. Returns whether the line came, and what was read (for
    the failure message)."""
    said, seen = [], threading.Event()

    def read():
        for line in getattr(proc, stream):
            said.append(line)
            if line.startswith(prefix):
                seen.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    return seen.is_set(), "".join(said)


# What a machine without TensorFlow lacks (the GPU machines carry JAX and PyTorch only).
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tf_keras", "tensorboard", "tensorflow_datasets")
_BOOT = """import runpy, site, sys
site.addsitedir({site!r})
if sys.argv[1] == "-c":
    code, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
    exec(compile(code, "<string>", "exec"), {{"__name__": "__main__"}})
else:
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def site_without_tensorflow(root) -> list[str]:
    """The command prefix of a Python that has this one's packages except TensorFlow and its
    kin, as on a machine where it was never installed: ``python -S`` (no site-packages) and a
    directory of links to every installed package but those, added as a site directory.
    Append a module name and its arguments."""
    import pathlib
    import site

    root = pathlib.Path(root)
    farm = root / "site-packages"
    if not farm.exists():
        farm.mkdir(parents=True)
        for directory in site.getsitepackages():
            for entry in pathlib.Path(directory).iterdir():
                name = entry.name.lower()
                if name.startswith(TENSORFLOW_DISTRIBUTIONS) or name.startswith("_tensorflow"):
                    continue
                if not (farm / entry.name).exists():
                    (farm / entry.name).symlink_to(entry)
        (root / "boot.py").write_text(_BOOT.format(site=str(farm)))
    return [sys.executable, "-S", str(root / "boot.py")]


def fake_rates(candidate) -> float:
    """Examples/s a fake measurement gives a search candidate: XLA 1.5x, eight steps per
    execution 2x, mixed_bfloat16 0.5x (the engine's and tune's tests search over it)."""
    rate = 100.0
    rate *= 1.5 if candidate.jit_compile else 1.0
    rate *= 2.0 if candidate.steps_per_execution == 8 else 1.0
    rate *= 0.5 if candidate.precision == "mixed_bfloat16" else 1.0
    return rate
