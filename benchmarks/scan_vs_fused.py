"""Keras's own scanned ``steps_per_execution`` against the toolkit's ``--fused_steps``, on JAX.

Keras 3.16 (``keras-nightly`` today) runs ``steps_per_execution=K`` on JAX as one jitted
``jax.lax.scan`` of K training steps over a super-batch it stacks from K batches of the input
(``_build_multi_step_scan``); 3.15 runs a Python loop of K jitted calls. The toolkit's
``--fused_steps=K`` is a ``lax.scan`` inside the train step over one batch of K x batch rows,
fully unrolled where the step convolves on a CPU (``toolkit.backend._jax.scan_unroll``).

Both sides run through ``toolkit.runner.train`` in fresh processes, ``--rounds`` interleaved
rounds, medians, for two workloads:

* the seed MLP (256 -> 512 -> 10, batch 32, 1000 steps, K = 100: ``seed_mlp.py --part
  toolkit``), with the hand-written JAX floor (``seed_mlp.py --part floor``) and the seed's
  goals on each path (steady state >= 0.95x the floor's, the loop with its compile >= 0.9x);
* the cnn recipe (``recipes.cnn``, digits at 32x32, batch 32, K = 8).

For each: steady state (per step after the first call), the first call (the trace, the
compile and its K steps) and the loop with its compile (the whole ``fit`` call), as
``name: X.XX× (baseline A s, toolkit B s)`` with Keras's scan as the baseline: X > 1 means
``--fused_steps`` is faster. The input is the toolkit's default loader for JAX (Grain where it
is installed, else NumPy batches), and with ``--loaders`` also tf.data, whose batches Keras
stacks inside tf.data rather than on the host.

Needs a Keras whose JAX trainer scans (``make test-next`` builds ``.venv-next``):

    .venv-next/bin/python benchmarks/scan_vs_fused.py [--rounds 3] [--loaders auto,tf_data]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from statistics import median

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]

from _common import speedup_line  # noqa: E402


def _env() -> dict[str, str]:
    return {**os.environ, "KERAS_BACKEND": "jax", "TOOLKIT_PROGRESS": "0"}


def _seed(path: str, k: int, loader: str) -> dict[str, float]:
    """One seed MLP run: ``(steady s/step, first call s, fit s)``."""
    fused, spe = (k, 1) if path == "fused" else (1, k)
    argv = [
        sys.executable, os.path.join(HERE, "seed_mlp.py"), "--part=toolkit",
        f"--fused_steps={fused}", f"--steps_per_execution={spe}", f"--data_loader={loader}",
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, env=_env(), check=False)
    if out.returncode:
        raise SystemExit(f"scan_vs_fused: the seed MLP ({path}) failed:\n{out.stderr[-2000:]}")
    _, fit, steady, first = json.loads(out.stdout.strip().splitlines()[-1])
    return {"steady": steady, "first": first, "loop": fit}


def _floor() -> dict[str, float]:
    argv = [sys.executable, os.path.join(HERE, "seed_mlp.py"), "--part=floor"]
    out = subprocess.run(argv, capture_output=True, text=True, env=_env(), check=True)
    loop, compile_s, step = json.loads(out.stdout.strip().splitlines()[-1])
    return {"steady": step, "first": compile_s, "loop": loop}


def _cnn(path: str, k: int, loader: str, steps: int) -> dict[str, float]:
    """One cnn recipe run, read from its report."""
    loop = f"--fused_steps={k}" if path == "fused" else f"--steps_per_execution={k}"
    with tempfile.TemporaryDirectory() as out_dir:
        argv = [
            sys.executable, "-m", "recipes.cnn", "--backend=jax", "--count_flops=false",
            "--epochs=1", f"--train_steps={steps}", "--warmup_steps=0", loop,
            f"--data_loader={loader}", f"--report_dir={out_dir}",
        ]  # fmt: skip
        out = subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd=ROOT)
        if out.returncode:
            raise SystemExit(f"scan_vs_fused: cnn ({path}) failed:\n{out.stderr[-2000:]}")
        (found,) = glob.glob(os.path.join(out_dir, "*", "report.json"))
        with open(found, encoding="utf-8") as f:
            report = json.load(f)
    steps_part = report["steps"]
    return {
        "steady": steps_part["mean_s"],
        "first": steps_part["first_step_s"],
        "loop": report["fit_call"]["whole_s"],
    }


def _keras() -> tuple[str, bool]:
    """``(the installed Keras's version, whether its JAX trainer scans)``, asked in a child
    on JAX (this process imports no framework)."""
    probe = (
        "import keras; from toolkit.backend import _jax; "
        "print(keras.__version__, _jax.keras_scans_steps())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=_env(), cwd=ROOT
    )
    if out.returncode:
        raise SystemExit(f"scan_vs_fused: Keras on JAX does not load:\n{out.stderr[-2000:]}")
    version, scans = out.stdout.split()[-2:]
    return version, scans == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", default="seed,cnn")
    parser.add_argument("--loaders", default="auto", help="comma-separated: auto, tf_data")
    parser.add_argument("--seed_k", type=int, default=100)
    parser.add_argument("--cnn_k", type=int, default=8)
    parser.add_argument("--cnn_steps", type=int, default=32, help="cnn steps (whole K's)")
    args = parser.parse_args()
    version, scans = _keras()
    if not scans:
        from toolkit.core import terminal

        raise SystemExit(
            terminal.fit(
                f"scan_vs_fused: Keras {version} loops steps_per_execution on JAX in Python: "
                "run it under Keras 3.16 or later (make test-next builds .venv-next: "
                ".venv-next/bin/python benchmarks/scan_vs_fused.py)",
                terminal.width(sys.stderr),
            )
        )
    print(
        f"# Keras {version} on JAX: Keras's scanned steps_per_execution=K (baseline) "
        f"vs --fused_steps=K (toolkit); medians of {args.rounds} interleaved rounds, each run "
        "in a fresh process"
    )
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for loader in [v.strip() for v in args.loaders.split(",") if v.strip()]:
        runs: dict[tuple[str, str], list[dict[str, float]]] = {}
        floors: list[dict[str, float]] = []
        for _ in range(args.rounds):
            for workload in workloads:
                for path in ("scan", "fused"):
                    if workload == "seed":
                        got = _seed(path, args.seed_k, loader)
                    else:
                        got = _cnn(path, args.cnn_k, loader, args.cnn_steps)
                    runs.setdefault((workload, path), []).append(got)
            if "seed" in workloads:
                floors.append(_floor())
        for workload in workloads:
            k = args.seed_k if workload == "seed" else args.cnn_k
            scan, fused = (
                {
                    key: median(r[key] for r in runs[(workload, path)])
                    for key in runs[(workload, path)][0]
                }
                for path in ("scan", "fused")
            )
            name = f"{workload} (K={k}, --data_loader={loader})"
            print(
                speedup_line(
                    f"{name}: steady state per 1000 steps",
                    scan["steady"] * 1000,
                    fused["steady"] * 1000,
                )
            )
            print(
                speedup_line(
                    f"{name}: the first call (trace, compile, K steps)",
                    scan["first"],
                    fused["first"],
                )
            )
            print(
                speedup_line(
                    f"{name}: the loop with its compile (the fit call)", scan["loop"], fused["loop"]
                )
            )
            if workload == "seed" and floors:
                floor = {key: median(f[key] for f in floors) for key in floors[0]}
                for path, got in (("Keras's scan", scan), ("--fused_steps", fused)):
                    steady = floor["steady"] / got["steady"]
                    loop = floor["loop"] / got["loop"]
                    print(
                        speedup_line(
                            f"goal on {path}: steady state vs the hand-written floor's "
                            f"(>= 0.95×: {'met' if steady >= 0.95 else 'NOT met'})",
                            floor["steady"] * 1000,
                            got["steady"] * 1000,
                        )
                    )
                    print(
                        speedup_line(
                            f"goal on {path}: the loop with its compile vs the floor's "
                            f"(>= 0.9×: {'met' if loop >= 0.9 else 'NOT met'})",
                            floor["loop"],
                            got["loop"],
                        )
                    )


if __name__ == "__main__":
    main()
