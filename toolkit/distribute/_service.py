"""The tf.data service server ``distribute.spawn_data_service`` starts in a child process: a typed
:class:`ServiceSpec` on stdin, one typed :class:`Started` on stdout, nothing scraped. The
``data-service`` verb uses the same :func:`serve`."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any


@dataclasses.dataclass(frozen=True)
class ServiceSpec:
    """What to serve: a dispatcher on `port` (0: any free one; `work_dir` its journal), or,
    given `dispatcher` (``grpc://host:port``), a worker of it that others reach as `host`."""

    dispatcher: str | None = None
    port: int = 0
    host: str = "localhost"
    work_dir: str | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServiceSpec:
        data = json.loads(text)
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


@dataclasses.dataclass(frozen=True)
class Started:
    """The child's one message: the dispatcher's address (a worker's dispatcher), port, or error."""

    address: str | None = None
    port: int | None = None
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Started:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"not a message: {text[:80]!r}")
        return cls(data.get("address"), data.get("port"), data.get("error"))


def serve_dispatcher(port: int, work_dir: str | None = None) -> Any:
    """Starts a tf.data service dispatcher on `port` (0: any free), listening on every interface."""
    import tensorflow as tf

    config = tf.data.experimental.service.DispatcherConfig(
        port=port, work_dir=work_dir, fault_tolerant_mode=bool(work_dir)
    )
    return tf.data.experimental.service.DispatchServer(config)


def serve_worker(dispatcher: str, port: int = 0, host: str = "localhost") -> Any:
    """Starts a tf.data service worker of `dispatcher`, on every interface, named `host` to it."""
    import tensorflow as tf

    target = dispatcher.partition("://")[2] or dispatcher
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=target, worker_address=f"{host}:%port%", port=port
    )
    return tf.data.experimental.service.WorkerServer(config)


def serve(spec: ServiceSpec) -> tuple[Any, str, int]:
    """The worker or dispatcher `spec` asks for, started: ``(server, words, port)``. Raises
    RuntimeError (a port it cannot bind) or ValueError (an unreachable dispatcher)."""
    if spec.dispatcher:
        server = serve_worker(spec.dispatcher, spec.port, spec.host)
        # WorkerServer says its port only as "localhost:<port>" (a private property).
        port = int(server._address.rsplit(":", 1)[1])
        return server, f"worker of {spec.dispatcher}", port
    server = serve_dispatcher(spec.port, spec.work_dir)
    port = int(server.target.rsplit(":", 1)[1])
    return server, f"dispatcher at grpc://{spec.host}:{port}", port


def main() -> None:
    """The child: bound to its parent, reads its spec, serves, says so in one message."""
    from toolkit.core import children

    children.bind_to_parent()
    spec = ServiceSpec.from_json(sys.stdin.readline())
    try:
        server, _what, port = serve(spec)
    except Exception as e:  # noqa: BLE001 - said to the parent, which raises it in one line
        print(Started(error=f"{type(e).__name__}: {e}").to_json(), flush=True)
        sys.exit(1)
    address = spec.dispatcher or f"grpc://{spec.host}:{port}"
    print(Started(address, port).to_json(), flush=True)
    try:
        while True:  # the server runs on its own threads; a signal ends this loop
            time.sleep(0.5)
    finally:
        del server


if __name__ == "__main__":
    main()
