"""The seed post's MLP training code vs the same model and step count through toolkit.train.

Seed (as published): MLP 256 -> 512 -> 10, batch 32, batches made by NumPy in a Python
generator read with ``from_generator``, one ``train_on_batch`` call per step, 1000 steps; run
without and with its ``.prefetch(AUTOTUNE)``. The seed's timer covers the loop, first call
(tracing) included.

Toolkit: the same model, batch size and number of steps through ``toolkit.train.run`` with
its fast settings: the same amount of random data made once with NumPy (inside the timed
region) and fed by the builder (``pipeline``: batch, prefetch), ``fit`` instead of a Python
loop, ``steps_per_execution=50`` and ``jit_compile``. The timer covers the whole ``run`` call:
data, model build, tracing, XLA compilation and training. Goal: >= 10× faster than the seed's code.

    python benchmarks/seed_mlp.py [--steps 1000]
"""

from __future__ import annotations

import argparse
import time

from _common import speedup_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--steps_per_execution", type=int, default=50)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from toolkit import compat, train

    keras = compat.keras()
    batch_size, steps = 32, args.steps

    def seed_model():
        model = keras.Sequential(
            [
                keras.Input((256,)),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(
            optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"]
        )
        return model

    def seed_run(prefetch: bool) -> float:
        def load_data(size=steps * batch_size):  # the seed's generator
            for _ in range(0, size, batch_size):
                yield np.random.rand(batch_size, 256).astype(np.float32)

        ds = tf.data.Dataset.from_generator(
            load_data, output_signature=tf.TensorSpec((batch_size, 256), tf.float32)
        )
        if prefetch:
            ds = ds.prefetch(tf.data.AUTOTUNE)
        model = seed_model()
        start = time.perf_counter()
        for batch in ds.take(steps):
            model.train_on_batch(batch, np.random.randint(0, 10, batch_size))
        return time.perf_counter() - start

    def toolkit_run() -> tuple[float, float]:
        start = time.perf_counter()
        rng = np.random.default_rng(0)
        x = rng.random((steps * batch_size, 256), dtype=np.float32)
        y = rng.integers(0, 10, steps * batch_size).astype(np.int32)
        task = train.Task(
            name="seed-mlp",
            build_model=lambda: keras.Sequential(
                [
                    keras.Input((256,)),
                    keras.layers.Dense(512, activation="relu"),
                    keras.layers.Dense(10, activation="softmax"),
                ]
            ),
            train=(x, y),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            num_classes=10,
        )
        config = train.TrainConfig(
            epochs=1,
            batch_size=batch_size,
            steps_per_execution=args.steps_per_execution,
            jit_compile=True,
            report_dir=None,
        )
        result = train.run(task, config)
        wall = time.perf_counter() - start
        s = result.report.steps
        assert s.total_steps == steps
        # Steady state: every step after the first execution (which traces and compiles).
        steady = (
            (s.total_s + s.mean_s * (s.warmup_steps + s.excluded_steps))
            * steps
            / (steps - s.first_step_steps)
        )
        return wall, steady

    seed_plain = seed_run(prefetch=False)
    seed_prefetch = seed_run(prefetch=True)
    toolkit, toolkit_steady = toolkit_run()
    print(
        f"# {compat.keras_flavor()} {compat.keras_version()}, {steps} steps of batch {batch_size}"
    )
    print(speedup_line("seed with its prefetch vs without", seed_plain, seed_prefetch))
    print(speedup_line("toolkit.train vs the seed without prefetch", seed_plain, toolkit))
    print(speedup_line("toolkit.train vs the seed with prefetch", seed_prefetch, toolkit))
    print(
        speedup_line(
            "toolkit.train steady state (first step's compile apart) vs the seed with prefetch",
            seed_prefetch,
            toolkit_steady,
        )
    )
    best_seed = min(seed_plain, seed_prefetch)
    print(f"goal >= 10x: {'met' if best_seed / toolkit >= 10 else 'NOT met'}")


if __name__ == "__main__":
    main()
