"""The seed's Python generator, read by from_generator vs toolkit.data.parallel_generator.

The workload is the seed post's: batches of 32×256 float32 made by NumPy in a Python generator.
Baseline: ``from_generator(...).prefetch(AUTOTUNE)`` as the seed writes it. Toolkit:
``parallel_generator(factory, shards, signature)`` (shards interleaved in parallel, crossing
into TensorFlow 16 elements at a time) with the same prefetch. Both are iterated alone with
``toolkit.data.benchmark``. Goal: >= 1.8× on 2 cores.

The GIL, measured rather than assumed: the same parallel source with ``chunk_size=1`` (threads
only) shows what parallel threads alone buy for this Python-heavy generator.
Then one training line: the seed's MLP fitted for the same number of steps on each source.

    python benchmarks/pipeline_generator.py [--batches 2000 --shards 4]
"""

from __future__ import annotations

import argparse
import time

from _common import speedup_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--train_steps", type=int, default=1000)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from toolkit import data
    from toolkit.core import compat

    n, signature = args.batches, tf.TensorSpec((32, 256), tf.float32)

    def seed_generator():  # the seed post's load_data_fast, for n batches
        for _ in range(n):
            yield np.random.rand(32, 256).astype(np.float32)

    def shard_factory(shard):  # the same work, split over shards, each with its own RNG
        rng = np.random.default_rng(shard)
        for _ in range(shard, n, args.shards):
            yield rng.random((32, 256)).astype(np.float32)

    def baseline():
        return tf.data.Dataset.from_generator(seed_generator, output_signature=signature).prefetch(
            tf.data.AUTOTUNE
        )

    def toolkit(chunk_size=16):
        ds = data.parallel_generator(
            shard_factory, range(args.shards), signature, chunk_size=chunk_size
        )
        return ds.prefetch(tf.data.AUTOTUNE)

    timed = {}
    for name, make in (
        ("baseline", baseline),
        ("toolkit", toolkit),
        ("threads only", lambda: toolkit(chunk_size=1)),
    ):
        result = data.benchmark(make(), num_batches=n - 1, batch_size=32, verbose=False)
        timed[name] = result.total_s
        print(f"# {name}: {result}")
    b = timed["baseline"]
    print(speedup_line("parallel_generator vs from_generator+prefetch", b, timed["toolkit"]))
    print(speedup_line("threads only (chunk_size=1), the GIL's share", b, timed["threads only"]))
    print(f"goal >= 1.8x: {'met' if b / timed['toolkit'] >= 1.8 else 'NOT met'}")

    keras = compat.keras()
    keras.utils.set_random_seed(0)
    labels = tf.data.Dataset.from_tensors(tf.zeros((32,), tf.int32)).repeat()
    fits = {}
    for name, make in (("baseline", baseline), ("toolkit", toolkit)):
        model = keras.Sequential(
            [
                keras.Input((256,)),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile("adam", "sparse_categorical_crossentropy")
        ds = tf.data.Dataset.zip((make(), labels)).take(args.train_steps + 1)
        model.fit(ds.take(1), verbose=0)  # trace outside the timed run
        t0 = time.perf_counter()
        model.fit(ds.skip(1), verbose=0)
        fits[name] = time.perf_counter() - t0
    print(
        speedup_line(
            f"fit {args.train_steps} steps of the seed MLP", fits["baseline"], fits["toolkit"]
        )
    )


if __name__ == "__main__":
    main()
