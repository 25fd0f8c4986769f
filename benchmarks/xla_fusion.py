"""Fusion measured: matmul + hard_swish (the TVM post's M, N, K = 128, 3072, 768) and
conv2d + bias + relu, each in eager, graph and XLA mode, with what fused.

Baseline: the chain as separate kernels (the mode that ran the most kernels: graph for the
hard_swish chain, which Grappler has no pattern for; eager for conv2d + bias + relu, which
Grappler fuses). Toolkit: the mode that ran the fewest. Both demos are run in `--rounds`
interleaved rounds and each cell's median is reported, since step times here drift between
runs. Times are per 1000 calls, in seconds.

    python benchmarks/xla_fusion.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics

from _common import speedup_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min_time", type=float, default=0.1, help="shortest timed loop, s")
    args = parser.parse_args()

    import tensorflow as tf

    from toolkit import devices
    from toolkit.bench.fusion import fusion_demos
    from toolkit.bench.kernels import kernels_text
    from toolkit.core.stats import format_flops
    from toolkit.profiling.flops import matmul_peak

    device = devices.resolve("auto")
    rounds = [
        fusion_demos(device=device, repeats=5, min_time_s=args.min_time) for _ in range(args.rounds)
    ]
    peak = matmul_peak(device, "float32").flops_per_s
    print(
        f"# tf {tf.__version__}, {device.kind}:{device.index} {device.human_name}, float32; "
        f"medians of {args.rounds} interleaved rounds; matmul peak {format_flops(peak, True)}"
    )
    for index, demo in enumerate(rounds[-1]):
        runs = [r[index] for r in rounds]

        def ms(name: str, mode: str, runs=runs) -> float:
            return statistics.median(d.get(name, mode).timing.ms for d in runs)

        print(f"## {demo.title}: {demo.shapes}")
        for v in demo.variants:
            cell = ms(v.name, v.mode)
            gflops = v.flops / (cell * 1e-3) / 1e9
            print(
                f"  {v.name:<22} {v.mode:<5} {cell:8.3f} ms  {gflops:7.1f} GFLOP/s "
                f"({gflops * 1e9 / peak:.0%} of peak)  {v.kernels.count} kernel(s): "
                f"{', '.join(v.kernels.names)}"
            )
        for line in demo.findings()[:2]:
            print(f"  {line}")
        fused, unfused = demo.fused_and_unfused()
        print(
            speedup_line(
                f"{demo.chain}: fused ({fused.mode}, {kernels_text(fused.kernels.count)}) vs "
                f"unfused ({unfused.mode}, {kernels_text(unfused.kernels.count)}), per 1000 calls",
                ms(demo.chain, unfused.mode),
                ms(demo.chain, fused.mode),
            )
        )
        print(
            speedup_line(
                f"{demo.chain}: XLA vs graph, per 1000 calls",
                ms(demo.chain, "graph"),
                ms(demo.chain, "xla"),
            )
        )
        cost = {
            mode: ms(demo.chain, mode) / ms(demo.bare, mode) - 1
            for mode in ("eager", "graph", "xla")
        }
        print(
            f"{demo.chain}: the epilogue's cost over the bare {demo.bare}: "
            + ", ".join(f"{mode} {pct:+.0%}" for mode, pct in cost.items())
        )


if __name__ == "__main__":
    main()
