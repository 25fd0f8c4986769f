"""Weak scaling past one process: the cnn and mlp recipes on JAX and on PyTorch, one process
against two processes on 127.0.0.1 (``--distribution_strategy=data_parallel``), each process
pinned to a core of its own and reading the same per-process batch. The two-process cluster
trains twice the examples per step; if the all-reduce of the gradients cost nothing, its
examples/s would be 2.00× the one process's.

For each recipe it prints the cluster's examples/s (the chief's report: the slowest process's
pace) against the one process's, and the part of the two-process step that is not the one
process's step: the all-reduce of the gradients over gloo and the wait for the slower
process, measured as the difference of the median steps (the same work per process, so the
rest is the cost of being two). It also prints what the machine itself allows: two
independent one-process runs at once, one per core, with no communication at all. On a VM
whose two cores share one physical core, or its memory bandwidth, that ceiling is well below
2.00×, and no all-reduce can beat it. And it runs the same cluster unpinned, each process free
to use both cores: gloo's TCP transport has a thread of its own that must run for every
collective, and pinned to one core it waits for the compute thread's turn on that core.

On JAX both sides fuse ``--fused_steps`` training steps into one launch (8 by default): a
launch of a multi-process JAX program costs milliseconds of coordination of its own, paid once
per launch. PyTorch trains one step per call under ``DistributedDataParallel`` (Keras's own
``keras.distribution`` on PyTorch: Keras 3.16, keras-nightly today; an older Keras is said in
one line and its backend left out), its gradients all-reduced over gloo in buckets while the
backward pass runs.

    python benchmarks/scaling.py [--backends jax,torch] [--recipes cnn,mlp]
        [--batch_per_process 64] [--rounds 2] [--fused_steps 8]

The one-process baseline and the cluster alternate, ``--rounds`` times each; each side's best
round counts (the quiet round: noise only ever slows a run down).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _pinned(cores: set[int]):
    def pin() -> None:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cores)

    return pin


def _launch(
    recipe: str,
    flags: list[str],
    cores: list[int],
    out: Path,
    cluster_of: bool = True,
    pin: bool = True,
    backend: str = "jax",
) -> list[dict]:
    """Runs `recipe` as ``len(cores)`` processes (one per core, or with `pin` False each on
    all of `cores`) and returns their reports: one cluster, or (`cluster_of` False)
    independent runs side by side."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "TF_CONFIG" and not k.startswith("KERAS_DISTRIBUTION_")
    }
    env.update(TF_CPP_MIN_LOG_LEVEL="2", TOOLKIT_PROGRESS="0", KERAS_BACKEND=backend)
    cluster: list[str] = []
    if len(cores) > 1 and cluster_of:
        hosts = ",".join(f"127.0.0.1:{p}" for p in _free_ports(len(cores)))
        cluster = ["--distribution_strategy=data_parallel", f"--worker_hosts={hosts}"]
    procs = []
    for index, core in enumerate(cores):
        command = [
            sys.executable, "-m", f"recipes.{recipe}", f"--backend={backend}",
            "--count_flops=false",
            f"--report_dir={out / str(index)}", *flags, *cluster,
            *([f"--task_index={index}"] if cluster else []),
        ]  # fmt: skip
        log = open(out / f"log{index}.txt", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            preexec_fn=_pinned({core} if pin else set(cores)),
        )
        procs.append((proc, log))
    reports = []
    for index, (proc, log) in enumerate(procs):
        proc.wait(timeout=900)
        log.close()
        said = (out / f"log{index}.txt").read_text()
        if proc.returncode != 0:
            raise SystemExit(
                f"scaling: {recipe} on {backend}, process {index} failed:\n{said[-3000:]}"
            )
        reports.append(json.loads(Path(said.split("json: ")[1].split()[0]).read_text()))
    return reports


def _torch_cluster_missing() -> str | None:
    """Why PyTorch cannot train over processes with the installed Keras (one line), or None:
    the toolkit's own refusal, asked in a child on PyTorch (this process imports neither)."""
    probe = (
        "from toolkit.backend import _torch\n"
        "try:\n    _torch._keras_distribution_lib()\nexcept ValueError as e:\n    print(e)\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT
    )
    if out.returncode:
        return f"PyTorch does not load: {out.stderr.strip().splitlines()[-1:]}"
    return out.stdout.strip() or None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="jax,torch")
    parser.add_argument("--recipes", default="cnn,mlp")
    parser.add_argument("--batch_per_process", type=int, default=64)
    parser.add_argument("--steps", type=int, default=64, help="steps per epoch")
    parser.add_argument(
        "--fused_steps",
        type=int,
        default=8,
        help="JAX's training steps per launch, on both sides (1: one launch per step)",
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0, 1]
    if len(cores) < 2:
        raise SystemExit("scaling: needs 2 cores, one per process")
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        if backend == "torch":
            missing = _torch_cluster_missing()
            if missing:
                from toolkit.core import terminal

                line = f"# PyTorch: not measured: {missing}"
                print(terminal.fit(line, terminal.width(sys.stdout)))
                continue
        fused = args.fused_steps if backend == "jax" else 1
        name = {"jax": "JAX", "torch": "PyTorch (DDP)"}.get(backend, backend)
        print(f"# {name}, 1 process (core {cores[0]}) vs 2 processes on 127.0.0.1 (cores "
              f"{cores[0]}, {cores[1]}), {args.batch_per_process} examples per process and "
              f"step, --fused_steps={fused} on both sides")  # fmt: skip
        for recipe in args.recipes.split(","):
            _measure(backend, recipe, args, cores, fused)


def _measure(
    backend: str, recipe: str, args: argparse.Namespace, cores: list[int], fused: int
) -> None:
    """One recipe on one backend: the cluster against one process, the machine's ceiling
    and the unpinned cluster, each side's best of ``--rounds``."""
    label = f"{recipe} on {backend}"
    common = [f"--epochs={args.epochs}", f"--train_steps={args.steps}", f"--fused_steps={fused}"]
    best = {"one": None, "two": None, "apart": 0.0, "free": 0.0}
    alone = [*common, f"--batch_size={args.batch_per_process}"]
    pair = [*common, f"--batch_size={2 * args.batch_per_process}"]
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            dirs = [Path(tmp, name) for name in ("one", "two", "apart", "free")]
            for d in dirs:
                d.mkdir()
            (one,) = _launch(recipe, alone, cores[:1], dirs[0], backend=backend)
            two = _launch(recipe, pair, cores[:2], dirs[1], backend=backend)
            apart = _launch(recipe, alone, cores[:2], dirs[2], cluster_of=False, backend=backend)
            free = _launch(recipe, pair, cores[:2], dirs[3], pin=False, backend=backend)
        best["free"] = max(best["free"], free[0]["cluster"]["cluster_examples_per_sec"])
        best["apart"] = max(best["apart"], sum(r["steps"]["examples_per_sec"] for r in apart))
        rate = one["steps"]["examples_per_sec"]
        cluster = two[0]["cluster"]
        if best["one"] is None or rate > best["one"][0]:
            best["one"] = (rate, one["steps"]["p50_s"])
        slowest = max(r["p50_ms"] for r in cluster["workers"]) / 1e3
        if best["two"] is None or cluster["cluster_examples_per_sec"] > best["two"][0]:
            best["two"] = (cluster["cluster_examples_per_sec"], slowest)
    (one_rate, one_step), (two_rate, two_step) = best["one"], best["two"]
    ratio = two_rate / one_rate
    extra = max(0.0, two_step - one_step)
    share = extra / two_step if two_step else 0.0
    print(
        f"{label}: 2 processes vs 1, cluster examples/s: {ratio:.2f}× "
        f"(baseline {one_rate:,.0f}, toolkit {two_rate:,.0f})"
    )
    print(
        f"{label}: the machine's ceiling, 2 independent processes at once (no all-reduce): "
        f"{best['apart'] / one_rate:.2f}× ({best['apart']:,.0f} examples/s in all)"
    )
    print(
        f"{label}: the same 2 processes not pinned (the scheduler shares both cores "
        f"between them): {best['free'] / one_rate:.2f}× ({best['free']:,.0f} examples/s)"
    )
    if share > 0.5:
        verdict = "communication dominates: too small a model to scale"
    elif ratio < 0.85 * best["apart"] / one_rate:
        verdict = "the rest of the step scales; communication keeps the cluster from it"
    else:
        verdict = "the step scales; communication is the smaller part"
    print(
        f"{label}: median step {one_step * 1e3:.2f} ms alone, {two_step * 1e3:.2f} ms in "
        f"the cluster: the all-reduce and the wait for the slower process took "
        f"{extra * 1e3:.2f} ms, {share:.0%} of the step ({verdict})"
    )


if __name__ == "__main__":
    main()
