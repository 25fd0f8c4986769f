"""``preflight``: the known traps of a device, precision and XLA together, before a run
meets them; status 1 when one is an error."""

from __future__ import annotations

import argparse

from toolkit.verbs._options import add_backend, backend_name, check_device

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "preflight"
HELP = "check for known device/precision/XLA traps"
DESCRIPTION = None
LOADS_TENSORFLOW = True
RECIPE_FLAGS = False


def options(p: argparse.ArgumentParser) -> None:
    add_backend(p)
    p.add_argument("--device", default="auto", help="auto, cpu, gpu, cuda, metal (mps)[:index]")
    p.add_argument("--precision", default="float32", help="float32, mixed_float16, mixed_bfloat16")
    p.add_argument("--jit_compile", action="store_true", help="the run will compile with XLA")


def check(args: argparse.Namespace) -> None:
    from toolkit.runner.config import PRECISIONS, ConfigError

    check_device(args.device)  # its spelling; whether it is here, once TensorFlow sees it
    if args.precision not in PRECISIONS:
        raise ConfigError(
            f"--precision must be one of {', '.join(PRECISIONS)}, got {args.precision!r}"
        )


def run(args: argparse.Namespace) -> int:
    from toolkit import devices

    device = devices.resolve(args.device)
    findings = devices.preflight(device, policy=args.precision, jit_compile=args.jit_compile)
    print(f"preflight for {device} on --backend={backend_name()}")
    for finding in findings:
        print(f"  {finding}")
    if not findings:
        print("  no known traps")
    return 1 if any(f.severity == "error" for f in findings) else 0
