"""Is the diagnosis right? Two training runs made input-bound and compute-bound on purpose.

* input-bound: a small MLP fed by a slow per-example Python map (``tf.py_function`` doing
  ~1 ms of NumPy per example), read sequentially: the step could run far faster than the
  pipeline feeds it;
* compute-bound: a 2048-wide MLP on in-memory data (no input work to speak of).

For each, ``toolkit.diagnose`` measures the input alone, the step alone and the real fit and
must give the expected verdict. Also printed, as ratios: how much faster the step alone runs
than the real fit (input-bound: large; compute-bound: ~1).

    python benchmarks/diagnose_accuracy.py [--steps 40]
"""

from __future__ import annotations

import argparse

from _common import speedup_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from toolkit.core import compat
    from toolkit.runner import train
    from toolkit.runner.config import TrainConfig
    from toolkit.search import diagnose

    keras = compat.keras()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4096, 64)).astype("float32")
    y = rng.integers(0, 10, size=4096).astype("int32")

    def slow_map(features, label):
        def work(v):
            m = np.outer(v.numpy(), v.numpy())  # ~1 ms of NumPy per example
            for _ in range(6):
                m = np.tanh(m @ m.T / 64.0)
            return v + np.float32(m.mean())

        out = tf.py_function(work, [features], tf.float32)
        return tf.ensure_shape(out, (64,)), label

    def task(slow: bool, width: int) -> train.Task:
        def data():
            ds = tf.data.Dataset.from_tensor_slices((x, y))
            return ds.map(slow_map) if slow else ds

        return train.Task(
            name="diag",
            build_model=lambda: keras.Sequential(
                [
                    keras.Input((64,)),
                    keras.layers.Dense(width, activation="relu"),
                    keras.layers.Dense(width, activation="relu"),
                    keras.layers.Dense(10),
                ]
            ),
            train=data,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            num_classes=10,
        )

    right = 0
    cases = (("input-bound", True, 32, 64), ("compute-bound", False, 2048, 256))
    for expected, slow, width, batch in cases:
        config = TrainConfig(batch_size=batch, warmup_steps=3, report_dir=None)
        d = diagnose.diagnose(task(slow, width), config=config, steps=args.steps)
        ok = d.verdict == expected
        right += ok
        print(f"## made {expected}: verdict {d.verdict} -> {'right' if ok else 'WRONG'}")
        print(d)
        print(
            speedup_line(
                f"{expected}: step alone vs real fit (per 100 steps)",
                100 / d.fit_rate,
                100 / d.compute_rate,
            )
        )
    print(f"verdicts right: {right}/{len(cases)}")


if __name__ == "__main__":
    main()
