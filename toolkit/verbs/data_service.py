"""``data-service``: a tf.data service dispatcher (``--dispatcher``) or worker (``--worker
--dispatcher grpc://host:port``), serving until Ctrl-C or SIGTERM; recipes read through it
with ``--data_service=grpc://host:port``. The service binds ``0.0.0.0:<port>`` (no option for
one address) with no authentication: anyone reaching the port can read the data and run
pipelines. So it serves only with ``--all_interfaces``; ``--host`` is only the name given out."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from toolkit.verbs._options import check_out

__all__: list[str] = []  # the command line's own; nothing here is API

NAME = "data-service"
HELP = "run a tf.data service dispatcher or worker"
DESCRIPTION = (
    "Recipes read through it with --data_service=grpc://host:port. TensorFlow's tf.data "
    "service listens on every interface, unauthenticated: --all_interfaces says you mean it."
)
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
    p.add_argument(
        "--all_interfaces",
        action="store_true",
        help="listen on every interface, unauthenticated: the only way the tf.data service "
        "listens (keep the port to a private network)",
    )
    p.add_argument("--work_dir", help="dispatcher: journal dir (restarts keep their jobs)")


def check(args: argparse.Namespace) -> None:
    from toolkit.runner.config import ConfigError, check_number

    if args.worker and not args.dispatcher:
        raise ConfigError("--worker: give --dispatcher grpc://host:port")
    if not args.worker and args.dispatcher != "":
        raise ConfigError(
            "give --dispatcher (to run one) or --worker --dispatcher grpc://host:port (to "
            "serve one)"
        )
    check_number("--port", args.port, integer=True, least=0, most=65535)
    check_out(args.work_dir, "--work_dir", "or leave --work_dir out (no journal)")
    if args.host is not None and not args.host.strip():
        raise ConfigError("--host must name this host as others reach it, got ''")
    if args.worker and args.dispatcher:
        from toolkit import distribute

        distribute.service_address(args.dispatcher, "--dispatcher")
    serves = bool(args.dispatcher) if args.worker else args.dispatcher == ""
    if serves and not args.all_interfaces:
        raise ConfigError(
            f"TensorFlow's tf.data service listens on every interface, never on --host="
            f"{args.host} alone, and has no authentication: add --all_interfaces to serve "
            "anyway, on a private network or behind a firewall (see docs/guide.md)"
        )


def run(args: argparse.Namespace) -> int:
    import time

    from toolkit import distribute

    server, what, port = _serve(args)
    # The main thread waits in Python, not in the server's join() (C++, where signal handlers
    # never run), so a signal ends it at once, as every program here ends.
    role = "worker" if args.worker else "dispatcher"
    print(f"data-service: {distribute.listening_line(role, '*', port)}", flush=True)
    print(f"data-service: {what} serving (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(0.5)
    finally:
        del server


def _serve(args: argparse.Namespace) -> tuple[Any, str, int]:
    """Starts the worker or dispatcher `args` ask for: ``(server, what it is in words, port)``."""
    from toolkit.distribute._service import ServiceSpec, serve

    if args.worker:  # the roles were checked before TensorFlow loaded (check)
        from toolkit import distribute

        distribute.service_address(args.dispatcher, "--dispatcher")  # named as typed
    spec = ServiceSpec(args.dispatcher if args.worker else None, args.port, args.host,
                       args.work_dir)  # fmt: skip
    with _port_taken(args.port):
        return serve(spec)


@contextlib.contextmanager
def _port_taken(port: int) -> Iterator[None]:
    """TensorFlow's "Could not start gRPC server" as one line naming --port (gRPC's held back)."""
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
