"""A folder of JPEGs: naive sequential decode/resize/batch vs the toolkit's image pipeline.

Writes a few thousand JPEGs (``--images``, class per sub-folder) to a temporary folder, then
iterates each pipeline alone with ``toolkit.data.benchmark``:
  * baseline, as commonly written: ``from_tensor_slices(paths).map(load).batch(32)``, one
    image at a time, no parallel map, no prefetch, no cache;
  * toolkit: ``image_folder(root, size, dtype="uint8")`` (parallel decode+resize, pixels kept
    as bytes) through ``pipeline(..., cache=True, batch_map=normalize_images)`` (decoded images
    cached after the first pass, normalized to float32 per batch, prefetch last).
Both deliver float32 batches in [0, 1] (equal up to the uint8 rounding of the resized pixels).

Two lines are printed. The cold pass (first epoch) compares parallel decoding alone. On 2 cores
it gains little, because TensorFlow's decode and resize kernels already run multi-threaded
inside each op: the "sequential" baseline keeps both cores busy (the script prints the cores
each pipeline used). Training reads the data for several epochs (``--epochs``). There, the
builder's cache decodes once, while the baseline decodes every epoch. Goal: >= 1.8× on 2 cores,
judged over the epochs.

    python benchmarks/pipeline_images.py [--images 3000 --size 160 --epochs 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

from _common import speedup_line


def write_jpegs(root: str, count: int, size: int, classes: int = 4) -> None:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, size=(size, size, 3), dtype=np.uint8)
    for i in range(count):
        folder = os.path.join(root, f"class{i % classes}")
        os.makedirs(folder, exist_ok=True)
        # A smooth image plus noise: JPEG-typical content, each file different.
        img = np.roll(base, i, axis=1) // 2 + rng.integers(0, 64, size=base.shape, dtype=np.uint8)
        tf.io.write_file(os.path.join(folder, f"{i:05d}.jpg"), tf.io.encode_jpeg(img, quality=90))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--size", type=int, default=160, help="stored image side, pixels")
    parser.add_argument("--target", type=int, default=128, help="decoded and resized side")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    import tensorflow as tf

    from toolkit import data

    target = (args.target, args.target)
    with tempfile.TemporaryDirectory() as root:
        write_jpegs(root, args.images, args.size)
        paths = sorted(
            os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.endswith(".jpg")
        )

        def load(path):
            image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
            return tf.image.resize(image, target) / 255.0

        naive = tf.data.Dataset.from_tensor_slices(paths).map(load).batch(args.batch_size)
        toolkit = data.pipeline(
            data.image_folder(root, target, dtype="uint8"),
            args.batch_size,
            shuffle=False,
            cache=True,
            batch_map=data.normalize_images,
        )
        # Whole passes: tf.data completes a cache only when an iterator reaches the end.
        batches = args.images // args.batch_size + 1
        cold, total, cores = {}, {}, {}
        for name, ds in (("baseline", naive), ("toolkit", toolkit)):
            c0, t0 = _cpu_seconds(), time.perf_counter()
            per_epoch = [
                data.benchmark(ds, batches - 1, args.batch_size, verbose=False)
                for _ in range(args.epochs)
            ]
            cores[name] = (_cpu_seconds() - c0) / (time.perf_counter() - t0)
            cold[name] = per_epoch[0].first_batch_s + per_epoch[0].total_s
            total[name] = sum(r.first_batch_s + r.total_s for r in per_epoch)
            print(f"# {name}: epoch 1 {per_epoch[0]}")
            print(f"# {name}: epoch {args.epochs} {per_epoch[-1]}; {cores[name]:.2f} cores busy")
    label = f"{args.images} JPEGs {args.size}px -> {args.target}px, batch {args.batch_size}"
    print(
        speedup_line(
            f"{label}, cold pass (parallel decode only)", cold["baseline"], cold["toolkit"]
        )
    )
    print(
        speedup_line(
            f"{label}, {args.epochs} epochs (decode once, cache)",
            total["baseline"],
            total["toolkit"],
        )
    )
    ratio = total["baseline"] / total["toolkit"]
    print(f"goal >= 1.8x over {args.epochs} epochs: {'met' if ratio >= 1.8 else 'NOT met'}")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
