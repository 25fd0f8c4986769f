"""toolkit.tune vs Keras defaults vs the best of an exhaustive sweep of the same space.

Two workloads: the seed's MLP (256 -> 512 -> 10, batch 32, data in memory) and a small CNN
(the cnn recipe with 16 filters on 16×16 digits, batch 128). For each:

1. ``tune`` searches (no cache) and picks its settings;
2. an exhaustive sweep measures every candidate of the same space (the one the tuner chose
   from the defaults' step time) and takes the fastest;
3. defaults, tuned and sweep-best are measured again head to head, in 3 interleaved rounds
   (medians), so the comparison is not the luck of one window; settings that are the same
   are measured once.

Goals: tuned never slower than defaults; within 5 % of the sweep's best; the search costs a
small fraction of the sweep.

    python benchmarks/tune_vs_defaults.py [--rounds 3] [--only mlp|cnn]
"""

from __future__ import annotations

import argparse
import time
from statistics import median

from _common import speedup_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--only", choices=["mlp", "cnn"])
    args = parser.parse_args()

    import numpy as np

    from recipes import cnn
    from toolkit import devices
    from toolkit.core import compat
    from toolkit.runner import train
    from toolkit.runner.config import TrainConfig
    from toolkit.search import tune as tn
    from toolkit.search.engine import Candidate
    from toolkit.search.workload import TaskWorkload

    keras = compat.keras()
    device = devices.select("cpu")

    def seed_mlp() -> tuple[train.Task, TrainConfig]:
        rng = np.random.default_rng(0)
        x = rng.random((32 * 2000, 256), dtype=np.float32)
        y = rng.integers(0, 10, 32 * 2000).astype(np.int32)
        task = train.Task(
            name="seed-mlp",
            build_model=lambda: keras.Sequential(
                [
                    keras.Input((256,)),
                    keras.layers.Dense(512, activation="relu"),
                    keras.layers.Dense(10, activation="softmax", dtype="float32"),
                ]
            ),
            train=(x, y),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            num_classes=10,
        )
        return task, TrainConfig(batch_size=32, report_dir=None)

    def small_cnn() -> tuple[train.Task, TrainConfig]:
        task = cnn.build_task("digits", image_size=16, filters=16)
        return task, TrainConfig(batch_size=128, report_dir=None)

    workloads = {"mlp": ("seed MLP", seed_mlp), "cnn": ("small CNN", small_cnn)}
    for key, (name, make) in workloads.items():
        if args.only and key != args.only:
            continue
        task, config = make()
        # The sweep and the final head-to-head build every candidate afresh, with the data
        # made once (what tune's own measuring does), so the costs compare builds with builds.
        work = TaskWorkload(task, config, resident=True)

        def measure(c: Candidate, work: TaskWorkload = work) -> float:
            return work.rate(c, args.steps)

        t0 = time.perf_counter()
        result = tn.tune(task, config, steps=args.steps, use_cache=False, budget_s=600)
        search_s = time.perf_counter() - t0
        defaults_rate = result.trials[0].examples_per_sec
        space = tn.default_space(device, step_s=config.batch_size / defaults_rate)
        t0 = time.perf_counter()
        sweep = {}
        for c in space.grid():
            try:
                sweep[c] = measure(c)
            except Exception as e:  # noqa: BLE001 - the sweep records failures too
                print(f"  sweep: {c.label()} failed: {e}")
        sweep_s = time.perf_counter() - t0
        sweep_best = max(sweep, key=sweep.get)
        contenders = {"defaults": Candidate(), "tuned": result.best, "sweep": sweep_best}
        # Identical settings are measured once: their ratio is 1 by definition, not by luck.
        distinct = list(dict.fromkeys(contenders.values()))
        runs: dict[Candidate, list[float]] = {c: [] for c in distinct}
        for _ in range(args.rounds):
            for c in distinct:
                runs[c].append(measure(c))
        rate = {k: median(runs[c]) for k, c in contenders.items()}
        n = 10_000  # seconds per 10,000 examples: lower is faster
        secs = {k: n / r for k, r in rate.items()}
        print(f"## {name}: {len(result.trials)} candidates searched, {len(sweep)} swept")
        print(f"tuned: {result.best.label()}  |  sweep best: {sweep_best.label()}")
        print(speedup_line(f"{name}: tuned vs Keras defaults", secs["defaults"], secs["tuned"]))
        print(speedup_line(f"{name}: tuned vs the sweep's best", secs["sweep"], secs["tuned"]))
        print(speedup_line(f"{name}: search cost vs the sweep's", sweep_s, search_s))
        never_slower = rate["tuned"] >= rate["defaults"] * 0.98
        within = rate["tuned"] >= rate["sweep"] * 0.95
        print(
            f"{name}: never slower than defaults: {'met' if never_slower else 'NOT met'}; "
            f"within 5% of the sweep's best: {'met' if within else 'NOT met'}; "
            f"search {search_s / sweep_s:.0%} of the sweep's time"
        )


if __name__ == "__main__":
    main()
