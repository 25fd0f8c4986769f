"""A CPU-heavy input map run locally vs through a tf.data service worker in a second process.

The pipeline: 128x128 images, each blurred by a chain of eight 3x3 convolutions (a stand-in
for decode + augment), batched by 32. Baseline: the pipeline in this process (parallel map,
AUTOTUNE). Toolkit: the same pipeline through `toolkit.distribute.through_data_service`, served
by `python -m toolkit data-service` processes (a dispatcher and one worker) reached on
127.0.0.1 (they listen on every interface, TensorFlow's only choice: run it where the network
is private). Each is timed reading `--batches` batches, alone and with a simulated training
step (a CPU matmul) consuming every batch. Both run in interleaved rounds; the medians are reported.

What to expect on a 2-core machine: the service adds no cores here (the worker shares the
same two), so the ratio shows its cost (serialization and a gRPC hop per batch) and, with a
busy trainer, the split of the cores between two processes instead of one. The speedup the
service is for comes when the workers run on *other* machines: the trainer keeps only its
step. That is not measurable on one host.

    python benchmarks/data_service.py [--batches 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import speedup_line


def pipeline():
    import tensorflow as tf

    kernel = tf.ones((3, 3, 1, 1)) / 9.0

    def heavy(seed):
        image = tf.random.stateless_normal((1, 128, 128, 1), seed=tf.stack([seed, seed]))
        for _ in range(8):
            image = tf.nn.conv2d(image, kernel, 1, "SAME")
        return image[0]

    return (
        tf.data.Dataset.range(10**9)
        .map(heavy, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
        .batch(32)
        .prefetch(tf.data.AUTOTUNE)
    )


def timed(dataset, batches: int, step) -> float:
    it = iter(dataset)
    next(it)  # the first batch (pipeline start, job registration) is left out
    start = time.perf_counter()
    for _ in range(batches):
        step(next(it)).numpy()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import tensorflow as tf

    from toolkit.distribute import spawn_data_service, through_data_service

    weights = tf.random.normal((512, 512))

    @tf.function
    def train_step(batch):
        x = tf.reshape(batch[:, :64, :64, 0], (32, 4096))[:, :512]
        for _ in range(40):
            x = tf.tanh(tf.matmul(x, weights) * 0.01)
        return tf.reduce_sum(x)

    @tf.function
    def no_step(batch):
        return tf.reduce_sum(batch[:1, :1, :1])

    procs = []
    try:
        dispatcher, address = spawn_data_service(port=0)
        procs.append(dispatcher)
        procs.append(spawn_data_service(dispatcher=address)[0])
        results: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name, step in (("alone", no_step), ("with a training step", train_step)):
                results.setdefault(f"local {name}", []).append(
                    timed(pipeline(), args.batches, step)
                )
                results.setdefault(f"service {name}", []).append(
                    timed(through_data_service(pipeline(), address), args.batches, step)
                )
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(
        f"# tf {tf.__version__}, {args.batches} batches of 32 128x128 images (8 convolutions "
        f"each), medians of {args.rounds} interleaved rounds; service = 1 worker process here"
    )
    for name in ("alone", "with a training step"):
        print(
            speedup_line(
                f"input pipeline {name}: tf.data service vs local",
                med[f"local {name}"],
                med[f"service {name}"],
            )
        )


if __name__ == "__main__":
    main()
