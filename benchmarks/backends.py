"""Which Keras backend trains fastest here, per workload, and whether the chooser's pick holds up.

Three workloads: the seed's MLP (256 -> 512 -> 10, batch 32, data in memory: your own model
through ``--model_fn``), the small CNN (the cnn recipe, 16 filters on 16×16 digits, batch 128)
and the LSTM recipe (its defaults). For each:

1. ``toolkit.search.chooser.compare`` (what ``python -m toolkit backends`` runs; no cache)
   measures every installed backend on the CPU, each run a fresh process with the same data and the
   same initial weights, in interleaved rounds, and picks a backend;
2. ``toolkit.search.chooser.tune_across`` (``python -m toolkit tune --across_backends``,
   budget ``--tune_budget``) searches each backend's settings and picks a backend with settings;
3. an independent head-to-head measures, in new processes and new rounds, every backend with
   Keras's defaults and the tune pick;
4. each pick's mean step in that head-to-head is compared with the fastest of what it chose
   from (goal: within 5 %): the chooser's with the backends at their Keras defaults (it picks
   a backend, not settings), tune's with every contender; and with Keras's defaults'
   (TensorFlow; goal: never slower, 2 % noise allowed).

Times are per 1000 steps (the mean step × 1000), so ``X > 1`` means the pick is faster.

    python benchmarks/backends.py [--rounds 3] [--steps 200] [--tune_budget 90] [--no_tune]
                                  [--only mlp|cnn|lstm]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from _common import scratch, speedup_line

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = {  # (name, recipe, model_fn, the recipe's arguments, the settings)
    "mlp": ("seed MLP", None, "_workloads:seed_mlp", {}, {}),
    "cnn": ("small CNN", "cnn", None, {"dataset": "digits", "image_size": 16, "filters": 16},
            {"batch_size": 128}),
    "lstm": ("LSTM recipe", "lstm", None, {}, {}),
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--only", choices=sorted(WORKLOADS))
    parser.add_argument("--tune_budget", type=float, default=90.0)
    parser.add_argument("--no_tune", action="store_true", help="the chooser only")
    args = parser.parse_args()
    # The children import the seed MLP's module from here (``--model_fn`` looks in the cwd).
    os.chdir(HERE)
    os.environ.pop("KERAS_BACKEND", None)
    # Every search searches: no answer cached by an earlier run of this benchmark.
    os.environ["TOOLKIT_CACHE_DIR"] = scratch("bench-backends-")

    from toolkit.search import chooser, standings

    def quiet(_line: str) -> None:
        pass

    backends = chooser.installed_backends()
    print(
        f"# backends: {', '.join(backends)}; {args.steps} steps per run, {args.rounds} "
        "interleaved rounds, each run a fresh process; times per 1000 steps (mean step)"
    )
    for key, (name, recipe, model_fn, params, settings) in WORKLOADS.items():
        if args.only and key != args.only:
            continue
        target = standings.Target(recipe, model_fn, params, {**settings, "device": "cpu"})
        picked = chooser.compare(
            target, steps=args.steps, rounds=args.rounds, use_cache=False, progress=quiet
        )
        print(f"## {name}: the chooser's table\n{picked.table()}\nchosen: {picked.best.label()} "
              f"({picked.why})")  # fmt: skip
        picks = {"the chooser's pick": picked.best}
        if not args.no_tune:
            t0 = time.perf_counter()
            tuned = chooser.tune_across(target, budget_s=args.tune_budget, progress=quiet)
            print(f"tune --across_backends ({time.perf_counter() - t0:.0f} s, budget "
                  f"{args.tune_budget:.0f} s): {tuned.best.flags()} ({tuned.why})")  # fmt: skip
            picks["tune's pick"] = tuned.best
        plain = [standings.Contender(r.contender.backend, r.contender.device) for r in picked.rows]
        contenders = list(dict.fromkeys([*plain, *picks.values()]))
        check = chooser.compare(
            target, steps=args.steps, rounds=args.rounds, use_cache=False, progress=quiet,
            candidates=contenders,
        )  # fmt: skip
        mean = {r.contender: r.median("mean_s") for r in check.rows if r.error is None}
        if not mean:
            print(f"{name}: nothing ran in the head-to-head: {check.rows[0].error}")
            continue
        defaults = check.defaults.contender
        for what, pick in picks.items():
            pick_s = mean.get(pick)
            if pick_s is None:
                print(f"{name}: {what} {pick.flags()} failed in the head-to-head")
                continue
            # Each pick against what it chose from: the chooser picks a backend (each at its
            # Keras defaults), tune a backend with settings (everything in the head-to-head).
            pool = {c: s for c, s in mean.items() if what == "tune's pick" or c in plain}
            fastest = min(pool or mean, key=mean.get)
            among = "every contender" if what == "tune's pick" else "the backends' defaults"
            print(
                speedup_line(
                    f"{name}: {what} ({pick.flags()}) vs the head-to-head's fastest of "
                    f"{among} ({fastest.flags()})",
                    mean[fastest] * 1000,
                    pick_s * 1000,
                )
            )
            if defaults in mean:
                print(
                    speedup_line(
                        f"{name}: {what} vs Keras's defaults ({defaults.flags()})",
                        mean[defaults] * 1000,
                        pick_s * 1000,
                    )
                )
            within = pick_s <= mean[fastest] * 1.05
            never_slower = defaults not in mean or pick_s <= mean[defaults] * 1.02
            print(
                f"{name}: {what}: within 5% of the best: {'met' if within else 'NOT met'}; "
                f"never slower than the defaults: {'met' if never_slower else 'NOT met'}"
            )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
