"""What this machine's accelerator does for Keras training, per backend, without TensorFlow.

Runs where only Keras, JAX and/or PyTorch, NumPy and absl are importable (the GPU machines this
project can get carry no TensorFlow: bring Keras as wheels, BUILD.md "GPU machines"). For each
installed backend (``--backends``), each part in a fresh process (Keras fixes its backend when
it loads):

1. detect and select: the devices the backend sees, the one ``--device=auto`` picks, and its
   precision hint (``toolkit.devices.recommend_precision``);
2. a mixed-precision recipe with its report: ``recipes.cnn`` on the digits (arrays in a
   ``keras.utils.PyDataset`` where TensorFlow is absent) under the hinted policy: validation
   accuracy, step time, examples/s and MFU, the report written under ``--out``;
3. ResNet-50 on synthetic 224×224 images (``recipes.resnet --model=resnet50``): images/s
   and MFU against the matmul peak the toolkit measured on the device in the same dtype, and on a
   GPU the datasheet table lists, against the datasheet's dense figure too;
4. the seed MLP (256→512→10, batch 32, 1000 steps): the seed's way (NumPy batches from a Python
   generator, one ``train_on_batch`` per step) against ``toolkit.runner.train.run`` with the
   toolkit's settings for the backend (and on PyTorch again with ``torch.compile``), as
   ``name: X.XX× (baseline A s, toolkit B s)`` lines, steady state and the whole loop with its
   compile.

Each line gives the device memory's peak, as the run's ledger read it.

Writes ``accelerator.json`` and ``accelerator.md`` (and each run's report) under ``--out``.

    python benchmarks/accelerator.py                      # every installed backend
    python benchmarks/accelerator.py --backends torch --quick
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]

from _common import speedup_line, timed_fit  # noqa: E402

BACKENDS = ("jax", "torch", "tensorflow")
# The toolkit's settings for the seed MLP per backend, then the alternatives measured beside
# them (torch.compile through jit_compile on PyTorch). JAX: 100 fused steps, as seed_mlp.py
# runs them: on an H200 under Keras 3.16 its steps took 0.037 ms against 0.364 ms for Keras's
# own scanned steps_per_execution=100 over the same NumPy batches, which Keras stacks on the
# host each call (benchmarks/scan_vs_fused.py); 3.15's steps_per_execution=50 took 0.568 ms.
SEED_SETTINGS = {
    "jax": [{"fused_steps": 100, "jit_compile": True}],
    "torch": [
        {"steps_per_execution": 1, "jit_compile": False},
        {"steps_per_execution": 1, "jit_compile": True},
    ],
    "tensorflow": [{"steps_per_execution": 50, "jit_compile": True}],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated")
    parser.add_argument("--quick", action="store_true", help="smoke-sized runs (a check)")
    parser.add_argument("--resnet_batch", type=int, default=128)
    parser.add_argument("--resnet_steps", type=int, default=60)
    parser.add_argument("--seed_steps", type=int, default=1000)
    parser.add_argument("--out", help="default runs/accelerator-<time>")
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--seed_setting", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:  # a check: 200 steps, and the lines say so
        args.seed_steps = min(args.seed_steps, 200)
    if args.part:
        print(json.dumps(PARTS[args.part](args)))
        return
    out = args.out or os.path.join(
        "runs", f"accelerator-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    )
    os.makedirs(out, exist_ok=True)
    wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
    results: dict[str, dict] = {}
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    for backend in wanted:
        if importlib.util.find_spec(backend) is None:
            say(f"{backend}: not installed, skipped")
            continue
        found = _part("devices", backend, args)
        chosen, policy = found["chosen"], found["precision"]
        say(f"## {backend}: {chosen} ({found['versions']})")
        say(f"   devices: {'; '.join(found['devices'])}; precision hint {policy}: {found['why']}")
        record = {"devices": found}
        cnn = _recipe(backend, "cnn", out, args, [f"--precision={policy}"])
        record["cnn"] = cnn
        accuracy = cnn["val_accuracy"]
        say(
            f"cnn on digits, {policy}: val_accuracy "
            f"{'n/a' if accuracy is None else f'{accuracy:.4f}'}, step p50 "
            f"{cnn['p50_ms']:.2f} ms, {cnn['examples_per_sec']:,.0f} examples/s, MFU "
            f"{cnn['mfu']}, {_memory(cnn)} (report {cnn['report']})"
        )
        steps = 8 if args.quick else args.resnet_steps
        batch = 8 if args.quick else args.resnet_batch
        size = 64 if args.quick else 224  # quick: a check that every part runs, on a CPU too
        resnet = _recipe(
            backend,
            "resnet",
            out,
            args,
            [
                "--model=resnet50",
                "--dataset=synthetic",
                f"--batch_size={batch}",
                f"--train_steps={steps}",
                f"--image_size={size}",
                "--epochs=1",
                f"--precision={policy}",
            ],
        )
        record["resnet50"] = resnet
        say(
            f"resnet50 synthetic {size}×{size}, batch {batch}, {policy}: "
            f"{resnet['examples_per_sec']:,.1f} images/s, step p50 {resnet['p50_ms']:.2f} ms, "
            f"MFU {resnet['mfu']} of {resnet['peak']}{resnet['datasheet']}, {_memory(resnet)}"
        )
        seed = _part("seed_base", backend, args)
        record["seed_mlp"] = {"baseline": seed, "toolkit": []}
        candidates = SEED_SETTINGS[backend][: 1 if args.quick else None]  # quick: no compiles
        for index, chosen_settings in enumerate(candidates):
            tool = _part("seed_toolkit", backend, args, [f"--seed_setting={index}"])
            record["seed_mlp"]["toolkit"].append({**tool, "settings": chosen_settings})
            settings = ", ".join(f"{k}={v}" for k, v in chosen_settings.items())
            say(
                speedup_line(
                    f"seed MLP on {backend} ({settings}), steady state per 1000 steps, "
                    "the seed's train_on_batch loop vs toolkit",
                    seed["step_s"] * 1000,
                    tool["step_s"] * 1000,
                )
            )
            say(
                speedup_line(
                    f"seed MLP on {backend} ({settings}), the {args.seed_steps}-step loop "
                    "with its compile",
                    seed["loop_s"],
                    tool["loop_s"],
                )
            )
        results[backend] = record
    from toolkit.core.files import atomic_write

    atomic_write(os.path.join(out, "accelerator.json"), json.dumps(results, indent=1))
    atomic_write(
        os.path.join(out, "accelerator.md"),
        "# benchmarks/accelerator.py\n\n```\n" + "\n".join(lines) + "\n```\n",
    )
    print(f"written: {out}/accelerator.json, {out}/accelerator.md")


# ---------------------------------------------------------------------------- parent side


def _datasheet(compute: dict) -> str:
    """``; 7.5% of the datasheet 989.4 TFLOP/s (NVIDIA H100 SXM, dense float16)`` on a GPU the
    toolkit's datasheet table lists, else nothing."""
    mfu, sheet = compute.get("datasheet_mfu"), compute.get("datasheet_peak_flops_per_s")
    if mfu is None or not sheet:
        return ""
    return f"; {mfu:.1%} of the datasheet {sheet / 1e12:.1f} TFLOP/s ({compute['datasheet_peak']})"


def _memory(result: dict) -> str:
    peak = result["device_peak_mb"]
    return "device memory n/a" if peak is None else f"device memory peak {peak:,.0f} MiB"


def _env(backend: str) -> dict[str, str]:
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def _run(argv: list[str], backend: str) -> subprocess.CompletedProcess:
    if sys.flags.no_site:  # started with -S (packages from PYTHONPATH only): so are the parts
        argv = [argv[0], "-S", *argv[1:]]
    out = subprocess.run(argv, capture_output=True, text=True, env=_env(backend), cwd=ROOT)
    if out.returncode != 0:
        sys.exit(f"error: {' '.join(argv[1:4])} on {backend} failed:\n{out.stderr[-3000:]}")
    return out


def _part(name: str, backend: str, args: argparse.Namespace, extra: list[str] = ()) -> dict:
    argv = [sys.executable, os.path.abspath(__file__), f"--part={name}", f"--backends={backend}"]
    argv += list(extra)
    argv += [f"--seed_steps={args.seed_steps}"] + (["--quick"] if args.quick else [])
    return json.loads(_run(argv, backend).stdout.strip().splitlines()[-1])


def _recipe(backend: str, recipe: str, out: str, args: argparse.Namespace, flags: list[str]):
    report_dir = os.path.abspath(os.path.join(out, f"{recipe}-{backend}"))
    argv = [sys.executable, "-m", f"recipes.{recipe}", f"--backend={backend}"]
    argv += [f"--report_dir={report_dir}", *flags]
    argv += ["--smoke"] if args.quick else []
    _run(argv, backend)
    (run_dir,) = sorted(os.listdir(report_dir))[-1:]
    path = os.path.join(report_dir, run_dir, "report.json")
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    steps, compute = report["steps"], report.get("compute") or {}
    mfu = compute.get("mfu")
    peak = compute.get("peak_flops_per_s")
    memory = (report.get("ledger") or {}).get("memory") or {}  # StepTimer's, every run
    return {
        "device_peak_mb": memory.get("device_peak_mb"),
        "report": path,
        "val_accuracy": report["metrics"].get("val_accuracy"),
        "p50_ms": (steps["p50_s"] or 0) * 1e3,
        "examples_per_sec": steps["examples_per_sec"] or 0.0,
        "mfu": f"{mfu:.1%}" if mfu is not None else "n/a",
        "peak": f"{peak / 1e12:.1f} TFLOP/s {compute.get('peak_dtype')}" if peak else "n/a",
        "datasheet": _datasheet(compute),
        "first_step_s": steps["first_step_s"],
    }


# ---------------------------------------------------------------------------- child side


def _devices(args: argparse.Namespace) -> dict:
    from toolkit import backend, devices

    name = backend.name()
    module = importlib.import_module(name)
    found = devices.detect(name)
    chosen = devices.resolve("auto", found, backend=name)
    policy, why = devices.recommend_precision(chosen)
    return {
        "devices": [str(d) for d in found],
        "chosen": chosen.label(),
        "precision": policy,
        "why": why,
        "versions": f"{name} {module.__version__}",
    }


def _seed_mlp():
    import numpy as np

    from toolkit.core import compat

    keras = compat.keras()
    keras.utils.set_random_seed(0)
    return (
        np,
        keras,
        keras.Sequential(
            [
                keras.Input((256,)),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(10, activation="softmax"),
            ]
        ),
    )


def _seed_base(args: argparse.Namespace) -> dict:
    """The seed's loop: NumPy batches from a generator, one train_on_batch per step."""
    np, _, model = _seed_mlp()
    steps, batch = args.seed_steps, 32
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    def load_data():
        for _ in range(steps):
            yield np.random.rand(batch, 256).astype(np.float32)

    start = time.perf_counter()
    after_first = None
    for x in load_data():
        logs = model.train_on_batch(x, np.random.randint(0, 10, batch))
        after_first = after_first or time.perf_counter()
    float(np.asarray(logs[0] if isinstance(logs, list) else logs))  # the last step is done
    end = time.perf_counter()
    return {"loop_s": end - start, "step_s": (end - after_first) / (steps - 1)}


def _seed_toolkit(args: argparse.Namespace) -> dict:
    """The same model and steps through toolkit.runner.train.run with the backend's settings."""
    from toolkit.runner import train
    from toolkit.runner.config import TrainConfig

    np, _, model = _seed_mlp()
    fit_calls: list[float] = []
    timed_fit(model, fit_calls)  # the loop is the whole fit call, as the seed's is
    steps, batch = args.seed_steps, 32
    rng = np.random.default_rng(0)
    x = rng.random((steps * batch, 256), dtype=np.float32)
    y = rng.integers(0, 10, steps * batch).astype(np.int32)
    task = train.Task(
        name="seed-mlp",
        build_model=lambda: model,
        train=(x, y),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        num_classes=10,
    )
    settings = SEED_SETTINGS[_backend_name()][args.seed_setting]
    config = TrainConfig(epochs=1, batch_size=batch, count_flops=False, report_dir=None, **settings)
    report = train.run(task, config).report
    after_first = [c for c in report.timeline if c[3] != "first"]
    steady = sum(c[0] for c in after_first) / sum(c[1] for c in after_first)
    return {"loop_s": fit_calls[0], "step_s": steady}


def _backend_name() -> str:
    from toolkit import backend

    return backend.name()


PARTS = {"devices": _devices, "seed_base": _seed_base, "seed_toolkit": _seed_toolkit}

if __name__ == "__main__":
    main()
