"""``ops``: the per-op benchmark, each op in TensorFlow's eager, graph and XLA modes (and
JAX's and PyTorch's where installed) everywhere; with ``--fusion`` what XLA and Grappler fuse."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from toolkit.verbs._options import check_device, check_out, split

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "ops"
HELP = "per-op benchmark in eager/graph/XLA on every device (or --fusion)"
DESCRIPTION = (
    "The seed's per-op table for TensorFlow, or with --fusion what XLA and Grappler fuse. "
    "Writes Markdown, CSV, PNG and JSON under --out."
)
LOADS_TENSORFLOW = True
RECIPE_FLAGS = False
TINY_TIMING = (3, 0.005)  # --size tiny's (repeats, shortest loop in s): a smoke run


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", help="comma-separated op names (default: all 21)")
    p.add_argument(
        "--modes",
        help="comma-separated: eager,graph,xla (TensorFlow), jax_jit, torch_eager, "
        "torch_compile, or all (default: TensorFlow's three, jax_jit and torch_eager where "
        "installed; torch_compile compiles every case anew, seconds each: name it)",
    )
    p.add_argument(
        "--size",
        choices=("tiny", "default", "full"),
        default="default",
        help="shapes: default runs in minutes on 2 CPU cores, full = the seed's shapes",
    )
    p.add_argument("--device", default="all", help="all (default), cpu, gpu, cuda, metal[:i]")
    p.add_argument(
        "--dtype",
        default="float32",
        help="the tensors' dtype: float32 (default), float16, bfloat16 (a recipe's Keras "
        "policy is --precision)",
    )
    p.add_argument("--repeats", type=int, help="timed loops per cell (5; --size tiny: 3)")
    p.add_argument(
        "--min_time", type=float, help="shortest timed loop, s (0.05; --size tiny: 0.005)"
    )
    p.add_argument("--out", help="output directory (default runs/ops-<time>)")
    p.add_argument("--no_plot", action="store_true", help="skip the PNG chart")
    p.add_argument("--fusion", action="store_true", help="the fusion demo instead of the table")


def check(args: argparse.Namespace) -> None:
    """The numbers, names and output directory, read from the benchmark's tables before TF loads."""
    from toolkit.bench.measure import MODES, select_modes
    from toolkit.bench.ops import select_ops
    from toolkit.runner.config import check_number

    check_number("--repeats", args.repeats, integer=True, least=1)
    check_number("--min_time", args.min_time, above=0)
    check_out(args.out, instead="or leave --out out (runs/ops-<time>)")
    if args.device != "all":
        check_device(args.device)
    _check_dtype(args.dtype)
    for flag, select in (("--ops", select_ops), ("--modes", select_modes)):
        try:
            select(split(getattr(args, flag[2:])))
        except ValueError as e:
            raise ValueError(f"{flag}: {e}") from None
    if args.fusion and not any(m in MODES for m in select_modes(split(args.modes))):
        raise ValueError("--fusion: --modes must name TensorFlow's eager, graph or xla")


def _check_dtype(dtype: str) -> None:
    """A floating-point dtype (``float32``, ``float16``, ``bfloat16``) as NumPy names it."""
    import numpy as np

    try:
        floating = dtype == "bfloat16" or np.dtype(dtype).kind == "f"
    except TypeError:
        floating = False
    if not floating:
        raise ValueError(f"--dtype: unknown dtype {dtype!r}: use float32, float16 or bfloat16")


def run(args: argparse.Namespace) -> int:
    import datetime as dt

    from toolkit import devices

    found = devices.detect("tensorflow")  # the op table measures TensorFlow's modes
    if args.device != "all":
        found = [devices.resolve(args.device, found, backend="tensorflow")]
    repeats, min_time = TINY_TIMING if args.size == "tiny" else (5, 0.05)
    timing = {
        "repeats": repeats if args.repeats is None else args.repeats,
        "min_time_s": min_time if args.min_time is None else args.min_time,
    }
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    if args.fusion:
        return _fusion(args, found, timing, args.out or os.path.join("runs", f"fusion-{stamp}"))
    return _table(args, found, timing, args.out or os.path.join("runs", f"ops-{stamp}"))


def _table(args: argparse.Namespace, found: list[Any], timing: dict[str, float], out: str) -> int:
    """The op table: every op in every mode on every device in `found`, written under `out`."""
    from toolkit.bench import frameworks
    from toolkit.bench.measure import DEFAULT_MODES, MODES, benchmark, select_modes
    from toolkit.core import progress, terminal

    default = [m for m in DEFAULT_MODES if m in MODES or not frameworks.missing(m)]
    for mode in DEFAULT_MODES:
        if mode not in default and not args.modes:  # a column that vanished, said once
            frameworks.note_missing(mode, f"ops: no {mode} column")
    table = benchmark(
        split(args.ops),
        select_modes(split(args.modes), default),
        size=args.size,
        devices=found,
        dtype=args.dtype,
        progress=progress.say,  # a line per op; a bar of the cells on a terminal
        **timing,
    )
    print(table.to_terminal())  # the average table, first: the measured result is kept
    paths = _written(lambda: table.write(out, plot=not args.no_plot), out)
    if paths is None:
        return 1
    written = [os.path.basename(paths[k]) for k in ("csv", "json", "png") if k in paths]
    said = f"whole table: {paths['markdown']} (beside it: {', '.join(written)})"
    print(terminal.fit(said, _columns()))  # as wide as the table above, at most
    return 0


def _columns() -> int:
    """The width ``ops`` prints to: the terminal's, never over the table's ``SCREEN_COLUMNS``."""
    from toolkit.bench.table import SCREEN_COLUMNS
    from toolkit.core import terminal

    return min(terminal.width() or SCREEN_COLUMNS, SCREEN_COLUMNS)


def _written(write: Any, out: str) -> dict[str, str] | None:
    """`write()`'s paths, or None after one line saying what was kept where it failed."""
    try:
        return write()
    except OSError as e:
        print(
            f"error: could not write under {out} ({e.strerror or e}); what is printed above "
            "is the result",
            file=sys.stderr,
        )
        return None


def _fusion(args: argparse.Namespace, found: list[Any], timing: dict[str, float], out: str) -> int:
    """``--fusion``: what XLA and Grappler fuse on each device, with its matmul peak for scale."""
    from toolkit.bench import fusion
    from toolkit.bench.measure import MODES, select_modes
    from toolkit.core import terminal
    from toolkit.core.stats import format_flops
    from toolkit.profiling.flops import matmul_peak

    modes = tuple(m for m in select_modes(split(args.modes)) if m in MODES)  # one, at least
    demos = [
        demo
        for device in found
        for demo in fusion.fusion_demos(
            args.size, device=device, dtype=args.dtype, modes=modes, **timing
        )
    ]
    columns = _columns()  # each line folded at spaces to fit, a table row never cut
    for demo in demos:
        print(terminal.fit(demo.render(), columns) + "\n")
    for device in found:
        peak = matmul_peak(device, args.dtype)
        said = (
            f"for scale: {device.kind}:{device.index}'s measured {args.dtype} matmul peak is "
            f"{format_flops(peak.flops_per_s, per_second=True)} ({peak.source})"
        )
        print(terminal.fit(said, columns))
    settings = {"size": args.size, "dtype": args.dtype, **timing}
    paths = _written(lambda: fusion.write(demos, out, settings), out)
    if paths is None:
        return 1
    print(terminal.fit(f"written: {paths['markdown']}, {paths['json']}", columns))
    return 0
