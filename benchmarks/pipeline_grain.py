"""A folder of real image files into a real ``fit`` on JAX, four ways, each in a fresh process.

Writes ``--images`` JPEG and PNG files (a class per sub-folder, as the tests write them), then
trains the same small CNN for ``--epochs`` epochs from each input, in interleaved rounds (one
process per side per round, so no side inherits another's threads, caches or compiled step):

  (a) keras: Keras's own ``image_dataset_from_directory(format="grain")``;
  (b) naive: a Grain pipeline as commonly first written, decoding in the main thread
      (``MapDataset.source(files).map(decode).batch(b)``, ``ReadOptions(num_threads=0)``);
  (c) toolkit-grain: ``toolkit.data.pipeline(image_folder(root, size, loader="grain"), b,
      loader="grain", workers="auto")``, decoding in reader threads or worker processes as
      auto picks for the fit (here, the step on the CPU: one reader thread; beside a GPU's
      step, measured once per machine and cached in a cache directory of the benchmark's own,
      so later rounds read the answer; ``toolkit.data._grain_readers``);
  (d) toolkit-tf.data: ``toolkit.data.pipeline(image_folder(root, size), b)`` (tf.data's
      parallel decode).

Each side's time is its epochs after the first (the first compiles the step), median over the
rounds. Printed as ``name: X.XX× (baseline A, toolkit B)``, X = baseline / toolkit time: (c)
against (b), against (a), and against (d). With ``--input_share``, each side also times its
input alone (``toolkit.data.benchmark``) so the line says what share of the step the input
takes; ``--grain_workers=N`` gives (c) N worker processes (0: threads); ``--backend`` fits on
another Keras backend (default JAX, the case of issue 47's goals). Goals (issue 47):
(c) ≥ 1.8× (b), ≥ 1.0× (a), ≥ 0.9× (d).

    python benchmarks/pipeline_grain.py [--images 2000 --size 96 --target 64 --rounds 3]
    python benchmarks/pipeline_grain.py --quick     # a smoke-sized run (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIDES = ("keras", "naive", "toolkit-grain", "toolkit-tf.data")
TITLES = {"jax": "JAX", "tensorflow": "TensorFlow", "torch": "PyTorch"}


def write_images(root: str, count: int, size: int, classes: int = 4) -> None:
    """JPEGs and PNGs (every fourth), each different, smooth content plus noise."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, size=(size, size, 3), dtype=np.uint8)
    for i in range(count):
        folder = os.path.join(root, f"class{i % classes}")
        os.makedirs(folder, exist_ok=True)
        pixels = np.roll(base, i, axis=1) // 2 + rng.integers(0, 64, base.shape, dtype=np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f"{i:05d}.{'png' if i % 4 else 'jpg'}"))


def _dataset(side: str, root: str, target: int, batch: int, workers: int = 0):
    """The side's training input, and its steps per epoch (None: one pass, Keras counts)."""
    from toolkit import data

    size = (target, target)
    if side == "keras":
        import keras

        ds = keras.utils.image_dataset_from_directory(
            root, image_size=size, batch_size=batch, format="grain", seed=0
        )
        return ds, None
    if side == "naive":
        import grain
        import numpy as np
        from PIL import Image

        files = data.image_folder(root, size, loader="grain")  # the same files and labels

        def decode(i):
            with Image.open(files.paths[i]) as image:
                pixels = np.asarray(image.convert("RGB").resize(size), np.float32) / 255.0
            return pixels, files.labels[i]

        ds = grain.MapDataset.range(len(files)).shuffle(seed=0).map(decode).batch(batch)
        return ds.to_iter_dataset(grain.ReadOptions(num_threads=0)), None
    if side == "toolkit-grain":
        files = data.image_folder(root, size, loader="grain")
        ds = data.pipeline(files, batch, seed=0, repeat=True, loader="grain", workers=workers)
        return ds, len(ds)
    ds = data.pipeline(data.image_folder(root, size), batch, seed=0, repeat=True)
    count = sum(len(f) for _, _, f in os.walk(root))
    return ds, count // batch


def run_side(args: argparse.Namespace) -> None:
    """One side in this process: the fit, its epoch times, and its input alone."""
    import keras

    from toolkit import data

    ds, steps = _dataset(args.side, args.root, args.target, args.batch_size, args.grain_workers)
    model = keras.Sequential(
        [
            keras.Input((args.target, args.target, 3)),
            keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(4),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ends = [time.perf_counter()]

    class EpochEnds(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            ends.append(time.perf_counter())

    model.fit(ds, epochs=args.epochs, steps_per_epoch=steps, callbacks=[EpochEnds()], verbose=0)
    later = ends[-1] - ends[1]  # the epochs after the first (it compiles)
    alone = None
    if args.input_share:
        alone = data.benchmark(ds, num_batches=20, batch_size=args.batch_size, verbose=False)
    print(json.dumps({"side": args.side, "later_s": later, "epochs": len(ends) - 1,
                      "input_alone_batches_per_s": alone and alone.batches_per_sec}))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--size", type=int, default=96, help="stored image side, pixels")
    parser.add_argument("--target", type=int, default=64, help="decoded and resized side")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--input_share", action="store_true", help="time each input alone too")
    parser.add_argument(
        "--grain_workers",
        type=lambda v: v if v == "auto" else int(v),
        default="auto",
        help="(c)'s worker processes, or auto (chosen for the fit)",
    )
    parser.add_argument("--backend", choices=tuple(TITLES), default="jax", help="Keras's")
    parser.add_argument("--quick", action="store_true", help="a smoke-sized run")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return run_side(args)
    if args.quick:
        args.images, args.size, args.target, args.epochs, args.rounds = 128, 32, 16, 2, 1
    from _common import speedup_line

    times: dict[str, list[float]] = {side: [] for side in SIDES}
    inputs: dict[str, float | None] = {}
    env = {**os.environ, "KERAS_BACKEND": args.backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as cache:
        env["TOOLKIT_CACHE_DIR"] = cache  # auto's answer, for this run only
        write_images(root, args.images, args.size)
        for r in range(args.rounds):
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:  # interleaved, alternating
                command = [sys.executable, __file__, f"--side={side}", f"--root={root}",
                           f"--target={args.target}", f"--batch_size={args.batch_size}",
                           f"--epochs={args.epochs}",
                           f"--grain_workers={args.grain_workers}"]  # fmt: skip
                command += ["--input_share"] if args.input_share else []
                out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
                if out.returncode:
                    sys.exit(f"{side} failed:\n{out.stderr[-3000:]}")
                result = json.loads(out.stdout.strip().splitlines()[-1])
                times[side].append(result["later_s"])
                inputs[side] = result["input_alone_batches_per_s"]
                print(f"# round {r + 1} {side}: {result['later_s']:.3f} s", flush=True)
    s = {side: statistics.median(t) for side, t in times.items()}
    label = (f"{args.images} images {args.size}px -> {args.target}px, batch {args.batch_size}, "
             f"{args.epochs - 1} epochs after the first, {TITLES[args.backend]} fit")  # fmt: skip
    ours = s["toolkit-grain"]
    for baseline, name, goal in (
        ("naive", "toolkit Grain vs naive Grain (main-thread decode)", 1.8),
        ("keras", "toolkit Grain vs Keras image_dataset_from_directory(format='grain')", 1.0),
        ("toolkit-tf.data", "toolkit Grain vs toolkit tf.data", 0.9),
    ):
        print(speedup_line(f"{name}, {label}", s[baseline], ours))
        ratio = s[baseline] / ours
        print(f"goal >= {goal}x: {'met' if ratio >= goal else 'NOT met'}")
    if args.input_share:
        steps = args.images // args.batch_size * (args.epochs - 1)
        for side, rate in inputs.items():
            if rate:
                share = (steps / rate) / s[side]
                print(f"# {side}: input alone {rate:,.1f} batches/s, {share:.0%} of the fit's time")


if __name__ == "__main__":
    main()
