"""``data-service``: a tf.data service dispatcher (``--dispatcher``) or worker (``--worker
--dispatcher grpc://host:port``), serving until Ctrl-C or SIGTERM. Recipes read through it
with ``--data_service=grpc://host:port``."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "data-service"
HELP = "run a tf.data service dispatcher or worker"
DESCRIPTION = "Recipes read through it with --data_service=grpc://host:port."
LOADS_TENSORFLOW = True
RECIPE_FLAGS = False


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dispatcher",
        nargs="?",
        const="",
        default=None,
        help="alone: run a dispatcher; with --worker: the dispatcher's grpc://host:port",
    )
    p.add_argument("--worker", action="store_true", help="run a worker")
    p.add_argument("--port", type=int, default=0, help="port to listen on (0: any free one)")
    p.add_argument("--host", default="localhost", help="the name others reach this host by")
    p.add_argument("--work_dir", help="dispatcher: journal dir (restarts keep their jobs)")


def check(args: argparse.Namespace) -> None:
    from toolkit.runner.config import ConfigError, check_number

    check_number("--port", args.port, integer=True, least=0, most=65535)
    if args.host is not None and not args.host.strip():
        raise ConfigError("--host must name this host as others reach it, got ''")
    if args.worker and args.dispatcher:
        from toolkit import distribute

        distribute.service_address(args.dispatcher, "--dispatcher")


def run(args: argparse.Namespace) -> int:
    import signal
    import time

    server, what = _serve(args)
    # The server runs on its own threads. The main thread waits in Python, not in join() (C++,
    # where signal handlers never run), so SIGTERM and Ctrl-C stop it at once.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"data-service: {what} serving (Ctrl-C to stop)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(0.5)
    del server
    return 0


def _serve(args: argparse.Namespace) -> tuple[Any, str]:
    """The worker or dispatcher `args` ask for, started, and what it is in words."""
    from toolkit import distribute

    if args.worker:
        if not args.dispatcher:
            raise ValueError("data-service --worker: give --dispatcher grpc://host:port")
        distribute.service_address(args.dispatcher, "--dispatcher")
        with _port_taken(args.port):
            server = distribute.serve_worker(args.dispatcher, args.port, args.host)
        return server, f"worker of {args.dispatcher}"
    if args.dispatcher == "":
        with _port_taken(args.port):
            server = distribute.serve_dispatcher(args.port, args.work_dir)
        return server, f"dispatcher at grpc://{args.host}:{server.target.rsplit(':', 1)[-1]}"
    raise ValueError(
        "data-service: give --dispatcher (to run one) or --worker --dispatcher "
        "grpc://host:port (to serve one)"
    )


@contextlib.contextmanager
def _port_taken(port: int) -> Iterator[None]:
    """TensorFlow's "Could not start gRPC server" (a port in use, or not this host's to
    bind) as one line naming --port (gRPC's own line about it held back)."""
    from toolkit.core import native_logs

    try:
        with native_logs.held():
            yield
    except RuntimeError as e:
        if "grpc" not in str(e).lower():
            raise
        from toolkit.runner.task import SetupError  # a run that cannot start: status 1

        raise SetupError(
            f"data-service: --port={port}: could not listen there (in use by another "
            "process?): choose another port, or 0 for any free one"
        ) from None
