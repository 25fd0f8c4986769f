"""The per-op table's modes against each other: what tf.function and XLA buy, op by op.

Runs `toolkit.bench.measure.benchmark` on the default (scaled-down) shapes of all 21 ops and
compares modes on the per-op averages: baseline = the first-named mode, toolkit = the second.
The sums are over the 21 ops' average time per call, times 1000 calls (seconds), so a slow op
weighs more; the count says on how many ops the second mode was faster.

    python benchmarks/op_modes.py [--size default] [--out runs/ops-bench]
"""

from __future__ import annotations

import argparse
import math

from _common import speedup_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="default", choices=("tiny", "default", "full"))
    parser.add_argument("--min_time", type=float, default=0.05, help="shortest timed loop, s")
    parser.add_argument("--out", default="runs/ops-bench")
    args = parser.parse_args()

    from toolkit import devices
    from toolkit.bench.measure import benchmark

    device = devices.resolve("auto")
    table = benchmark(size=args.size, devices=[device], min_time_s=args.min_time)
    table.write(args.out)
    label = table.columns[0].rsplit("_", 1)[0]
    print(
        f"# {device}, {args.size} shapes; per-call floor: "
        + ", ".join(f"{c.rsplit('_', 1)[1]} {ms:.3f} ms" for c, ms in table.floors.items() if ms)
    )
    average = table.average()
    col = {c: i for i, c in enumerate(table.columns)}
    for base, new in (("eager", "graph"), ("graph", "xla"), ("eager", "xla")):
        b_col, n_col = col[f"{label}_{base}"], col[f"{label}_{new}"]
        rows = [(op, ms[b_col], ms[n_col]) for op, ms, _ in average if ms[b_col] and ms[n_col]]
        faster = [op for op, b, n in rows if n < b]
        geomean = math.exp(sum(math.log(b / n) for _, b, n in rows) / len(rows))
        print(
            speedup_line(
                f"{len(rows)} ops, {new} vs {base} (sum of per-op averages, per 1000 calls)",
                sum(b for _, b, _ in rows),
                sum(n for _, _, n in rows),
            )
            + f"; geometric mean of the per-op ratios {geomean:.2f}×; {new} faster on "
            + f"{len(faster)} of {len(rows)}: {', '.join(faster)}"
        )
    print(f"tables: {args.out}/ops.md (and .csv, _average.csv, .png, .json)")


if __name__ == "__main__":
    main()
