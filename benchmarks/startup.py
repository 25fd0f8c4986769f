"""TensorFlow's start-up in a fresh process: a plain import against the toolkit's
(``toolkit.devices.runtime.load_tensorflow``, which every recipe, verb and search process
loads it by), on each Keras backend installed.

TensorFlow's import brings JAX in where it is installed (TFLite's ``from jax import jit`` and
Keras's Orbax callback's ``import jax``), 0.6-0.8 s on 2 cores that no TensorFlow or PyTorch
run uses; the toolkit's load leaves it out (``runtime._jax_deferred``). Both sides list the
devices after the import, as the toolkit's load does (its C++ start-up lines), and time the
two calls inside the process, not the interpreter's own start. On JAX both sides load JAX (its
Keras backend needs it): that line is the control, about 1.00×. Rounds alternate the sides
in a fresh random order; the median of each side is the figure.

    python benchmarks/startup.py [--rounds 8 --backends tensorflow,jax,torch]

Prints ``tensorflow start-up (BACKEND): X.XX× (baseline A s, toolkit B s)``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys

from _common import speedup_line

from toolkit import backend as backends

BASELINE = "import tensorflow as tf\ntf.config.list_physical_devices()\n"
TOOLKIT = "from toolkit.devices import runtime\nruntime.load_tensorflow()\n"
# The side's code timed inside the child; the time printed last, as the one line read back.
TIMED = (
    "import time\nstart = time.perf_counter()\n{code}"
    "import sys\nprint('jax' in sys.modules, time.perf_counter() - start)\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    args = parser.parse_args()
    installed = backends.installed()
    for backend in (b for b in args.backends.split(",") if b in installed):
        times: dict[str, list[float]] = {"baseline": [], "toolkit": []}
        jax_loaded: dict[str, set[bool]] = {"baseline": set(), "toolkit": set()}
        for _ in range(args.rounds):
            sides = list(times)
            random.shuffle(sides)
            for side in sides:
                loaded, seconds = _load(backend, BASELINE if side == "baseline" else TOOLKIT)
                times[side].append(seconds)
                jax_loaded[side].add(loaded)
        base, ours = (statistics.median(times[s]) for s in ("baseline", "toolkit"))
        print(speedup_line(f"tensorflow start-up ({backend})", base, ours))
        print(
            f"  JAX loaded: baseline {_said(jax_loaded['baseline'])}, "
            f"toolkit {_said(jax_loaded['toolkit'])} ({args.rounds} rounds)"
        )


def _load(backend: str, code: str) -> tuple[bool, float]:
    """One fresh process on `backend` running `code`: whether JAX was loaded after it, and its
    seconds."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run(
        [sys.executable, "-c", TIMED.format(code=code)],
        capture_output=True, text=True, timeout=600, env=env, check=True,
    )  # fmt: skip
    loaded, seconds = out.stdout.split()[-2:]
    return loaded == "True", float(seconds)


def _said(values: set[bool]) -> str:
    return "/".join("yes" if v else "no" for v in sorted(values, reverse=True))


if __name__ == "__main__":
    main()
