"""MFU of a compute-bound recipe at a large batch, against this machine's measured matmul peak.

The MLP recipe made wide (``--hidden_units=2048``) on input that costs nothing
(``--use_synthetic_data``) is nearly all matmul: at batch 1024 the step should get most of what
the best-case matmul gets. The same model at batch 32 shows why small steps can't: per-op
overhead and small matmuls. Both go through ``toolkit.runner.train.run`` (the recipe's runner)
and report FLOPs per step, achieved FLOP/s and MFU from the run's own report. Goal: >= 50 % MFU.

    python benchmarks/recipe_mfu.py [--hidden_units 2048] [--batch_size 1024] [--steps 30]
"""

from __future__ import annotations

import argparse

from _common import speedup_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden_units", type=int, default=2048)
    parser.add_argument("--batch_size", type=int, default=1024)
    parser.add_argument("--small_batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--jit_compile", action="store_true")
    parser.add_argument("--precision", "--dtype", dest="precision", default="float32")
    args = parser.parse_args()

    from recipes import mlp
    from toolkit.core import compat
    from toolkit.core.stats import format_flops
    from toolkit.runner import train
    from toolkit.runner.config import TrainConfig

    def run(batch_size: int, steps: int):
        task = mlp.build_task("digits", hidden_units=args.hidden_units)
        config = TrainConfig(
            epochs=1,
            batch_size=batch_size,
            steps_per_epoch=steps,
            use_synthetic_data=True,
            jit_compile=args.jit_compile,
            precision=args.precision,
            warmup_steps=3,
            report_dir=None,
        )
        return train.run(task, config).report

    big = run(args.batch_size, args.steps)
    # The same number of examples at the small batch.
    small = run(args.small_batch, args.steps * args.batch_size // args.small_batch)
    c = big.compute
    print(
        f"# {compat.keras_flavor()} {compat.keras_version()}, mlp {args.hidden_units} wide, "
        f"{args.precision}, XLA {'on' if args.jit_compile else 'off'}; peak "
        f"{format_flops(c.peak_flops_per_s, True)} ({c.peak_dtype} matmul, {c.peak_source})"
    )
    for r in (small, big):
        rc = r.compute
        print(
            f"batch {r.steps.batch_size}: {format_flops(rc.flops_per_step)}/step, p50 "
            f"{r.steps.p50_s * 1e3:.2f} ms, achieved "
            f"{format_flops(rc.achieved_flops_per_s, True)}, MFU "
            + (f"{rc.mfu:.1%}" if rc.mfu is not None else "not given (a busy machine's peak)")
        )
    per_example = [r.steps.p50_s / r.steps.batch_size * args.batch_size for r in (small, big)]
    print(
        speedup_line(
            f"time for {args.batch_size} examples, batch {args.batch_size} vs batch "
            f"{args.small_batch}",
            *per_example,
        )
    )
    print(
        f"MFU at batch {args.batch_size}: {c['mfu']:.1%}; goal >= 50%: "
        f"{'met' if c['mfu'] >= 0.5 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
