"""Data parallelism over processes for Keras 3 (``--distribution_strategy=data_parallel``): the
cluster, the join, and each process's share of the data. No framework is imported here: the backend
starts the processes and places the batch.

Process 0 is the chief and coordinator: its address is the one port the framework listens on. The
join (:func:`_join`) comes first because the frameworks' own waits cannot be bounded or read (JAX's
ends a late process with a fatal log line). ``--batch_size`` stays global: every process builds the
same pipeline and keeps its own slice of each batch (:func:`process_slice`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from toolkit.core.files import parse_json
from toolkit.distribute import Cluster, DistributeError, tf_config

__all__ = [
    "DATA_PARALLEL",
    "cluster",
    "leave",
    "process_slice",
    "start",
]

DATA_PARALLEL = "data_parallel"

# The settings every process must start with: plain values JSON carries unchanged.
Agreed = Mapping[str, str | int | float | bool | None]
# What a cluster manager sets for keras.distribution.initialize (Keras's own names).
_ENVIRONMENT = (
    "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "KERAS_DISTRIBUTION_NUM_PROCESSES",
    "KERAS_DISTRIBUTION_PROCESS_ID",
)


def cluster(worker_hosts: str | None, task_index: int | None) -> Cluster:
    """This process in a data-parallel run: from the flags, else Keras's environment, else alone.

    Raises:
        DistributeError: a malformed host list or index, or an environment without a count."""
    if worker_hosts:
        config = tf_config(worker_hosts.split(","), task_index or 0)  # the same checks
        return Cluster("worker", config["task"]["index"], tuple(config["cluster"]["worker"]))
    addresses = os.environ.get(_ENVIRONMENT[0], "").strip()
    if not addresses:
        return Cluster()
    hosts = tuple(a.strip() for a in addresses.split(",") if a.strip())
    try:
        count = int(os.environ.get(_ENVIRONMENT[1]) or len(hosts))
        index = int(os.environ.get(_ENVIRONMENT[2]) or 0)
    except ValueError:
        raise DistributeError(
            f"{_ENVIRONMENT[1]} and {_ENVIRONMENT[2]} must be whole numbers (the cluster's size "
            "and this process's index)"
        ) from None
    if len(hosts) > 1 and len(hosts) != count:
        raise DistributeError(
            f"{_ENVIRONMENT[0]} names {len(hosts)} processes but {_ENVIRONMENT[1]}={count}: "
            "give one address per process, or only the coordinator's"
        )
    if not 0 <= index < count:
        raise DistributeError(
            f"{_ENVIRONMENT[2]}={index} is not a process of the {count} ({_ENVIRONMENT[1]})"
        )
    for host in hosts:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise DistributeError(f"{_ENVIRONMENT[0]}: {host!r} is not host:port")
    return Cluster("worker", index, hosts, size=count)


def _per_process_batch(global_batch: int, processes: int) -> int:
    """The examples each process reads per step.

    Raises:
        DistributeError: the global batch does not split evenly over the processes."""
    if processes < 1 or global_batch % processes:
        lower = max(1, global_batch // processes) * processes
        raise DistributeError(
            f"--batch_size={global_batch} (the global batch) must split evenly over the "
            f"{processes} processes: use {lower} or {lower + processes}"
        )
    return global_batch // processes


_STARTED: list[Cluster] = []  # this process's cluster, once the framework started it


def start(here: Cluster, settings: Agreed, wait_s: float) -> None:
    """Starts this process's part of a data-parallel cluster: the framework's refusals first,
    then :func:`_join`, then the framework's own start. One process starts nothing.

    Raises:
        DistributeError: what :func:`_join` raises, or what the backend cannot do."""
    if here.num_workers < 2:
        return
    from toolkit import backend

    _per_process_batch(int(settings.get("batch_size") or 0), here.num_workers)
    try:
        backend.get().start_processes(
            here.workers[0],
            here.num_workers,
            here.task_index,
            wait_s,
            before=lambda: _join(here, settings, wait_s),
        )
    except DistributeError:
        raise
    except ValueError as e:  # the backend's refusal: already one line
        raise DistributeError(str(e)) from None
    _STARTED[:] = [here]


# What a collective says when a peer is gone (gloo on CPUs, NCCL, the coordination service).
_LOST = (
    "connection reset",
    "connection closed",
    "connection refused",
    "broken pipe",
    "socket closed",
    "heartbeat",
    "unavailable",
    "gloo",
    "nccl",
)

# Where in its C++ a framework raised, before what it says: of no use to the user.
_SOURCE_LINE = re.compile(r"^\[[^\]\s]+\.(?:cc|cpp|cxx|h|hpp):\d+\]\s*")


def lost_peer(error: BaseException, steps: int | None = None) -> str | None:
    """One line for the user when training stopped on `error` because another process is gone."""
    if not _STARTED:
        return None
    text = _SOURCE_LINE.sub("", " ".join(str(error).split()))
    if not any(word in text.lower() for word in _LOST):
        return None
    here = _STARTED[0]
    at = f" after {steps} steps" if steps else ""
    return (
        f"worker {here.task_index} of {here.num_workers}: another process of the cluster is "
        f"gone, so training stopped{at} ({type(error).__name__}: {text[:160]}); restart "
        "every worker (with --backup_dir the cluster goes on from its last epoch)"
    )


def leave(status: int) -> None:
    """Ends a process that is in a cluster at once with `status`, its output out (the framework's
    exit waits at a barrier a gone process never reaches); a process alone returns."""
    if not _STARTED:
        return
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def _address(host_port: str) -> tuple[str, int]:
    host, _, port = host_port.rpartition(":")
    return host.strip("[]") or "localhost", int(port)


def _send(conn: socket.socket, message: Mapping[str, Any]) -> None:
    conn.sendall((json.dumps(dict(message)) + "\n").encode())


def _receive(conn: socket.socket, deadline: float) -> dict[str, Any] | None:
    """One JSON line from `conn`, or None when it closed or `deadline` passed first."""
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        conn.settimeout(left)
        try:
            chunk = conn.recv(65536)
        except (TimeoutError, OSError):
            return None
        if not chunk:
            return None
        data += chunk
    try:
        return parse_json(data)
    except ValueError:
        return None


def _differences(mine: Agreed, theirs: Agreed) -> list[str]:
    return [
        f"--{key}={theirs.get(key)!s} (worker 0 has {mine.get(key)!s})"
        for key in sorted(set(mine) | set(theirs))
        if mine.get(key) != theirs.get(key)
    ]


def _join(here: Cluster, settings: Agreed, wait_s: float) -> float:
    """Waits until every process of `here` has joined with the same `settings`, at most `wait_s`
    seconds; returns the seconds waited. Process 0 listens and answers once all have come.

    Raises:
        DistributeError: process 0's port in use; a process late or with other settings (named)."""
    if here.num_workers < 2:
        return 0.0
    started = time.monotonic()
    deadline = started + wait_s
    settings = {**settings, "worker_hosts": ",".join(here.workers) or None}
    coordinator = here.workers[0]
    if here.task_index == 0:
        _gather_hellos(here, settings, coordinator, deadline, wait_s)
    else:
        _say_hello(here, settings, coordinator, deadline, wait_s)
    return time.monotonic() - started


# Where JAX's coordinator, the join and PyTorch's TCPStore listen; unset: worker 0's address.
BIND_ENV = "JAX_COORDINATOR_BIND_ADDRESS"


def bind_address(coordinator: str) -> str:
    """Where worker 0 listens, as ``host:port``: the host named for it (``localhost``: loopback
    only), or :data:`BIND_ENV`; never every interface unless named.

    Raises:
        DistributeError: :data:`BIND_ENV` is set but not ``host:port``."""
    bind = os.environ.get(BIND_ENV, "").strip()
    if not bind:
        return coordinator
    host, _, port = bind.rpartition(":")
    if not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise DistributeError(
            f"{BIND_ENV}={bind!r}: give the address worker 0 listens on as ip:port (or unset "
            "it: worker 0 then listens at its address in --worker_hosts)"
        )
    return bind


def listening_socket(coordinator: str) -> tuple[socket.socket, str, int]:
    """A socket listening where worker 0 listens, with its ip and port (the join's, then PyTorch's).

    Raises:
        DistributeError: that host is no address of this machine, or the port is in use."""
    import errno

    bind = bind_address(coordinator)
    host, port = _address(bind)
    named = f"worker 0 listens at {bind}" + (f" ({BIND_ENV})" if bind != coordinator else "")
    try:
        family, kind, proto, _, where = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as e:
        raise DistributeError(
            f"--worker_hosts: {named}, but {host!r} names no address here ({e}); give worker 0 "
            "an address of this machine"
        ) from None
    server = socket.socket(family, kind, proto)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(where)
    except OSError as e:
        server.close()
        if e.errno == errno.EADDRNOTAVAIL:
            raise DistributeError(
                f"--worker_hosts: {named}, but {host} is not an address of this machine "
                f"({e.strerror or e}); run worker 0 where {host} is, or set {BIND_ENV}=ip:port "
                "to an address of this one"
            ) from None
        raise DistributeError(
            f"--worker_hosts: {named}, but port {port} is in use "
            f"here ({e.strerror or e}); stop what holds it, or give worker 0 another port "
            "(on every worker)"
        ) from None
    server.listen(64)
    return server, where[0], port


def _listen(coordinator: str) -> socket.socket:
    import sys

    from toolkit.distribute import listening_line

    server, ip, port = listening_socket(coordinator)
    # Said once, for the join and the framework's coordinator after it.
    print(f"cluster: {listening_line('worker 0', ip, port)}", file=sys.stderr, flush=True)
    return server


def _gather_hellos(
    here: Cluster, settings: Agreed, coordinator: str, deadline: float, wait_s: float
) -> None:
    server = _listen(coordinator)
    joined: dict[int, socket.socket] = {}
    problems: list[str] = []
    try:
        while len(joined) < here.num_workers - 1 and time.monotonic() < deadline:
            server.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            hello = _receive(conn, min(deadline, time.monotonic() + 10.0))
            index = hello.get("index") if isinstance(hello, dict) else None
            if not isinstance(index, int) or index in joined or not 0 < index < here.num_workers:
                # Not one of ours (a port scan, a stray client) or a second worker i.
                if isinstance(index, int) and index in joined:
                    problems.append(f"two processes were started with --task_index={index}")
                conn.close()
                continue
            differ = _differences(settings, hello.get("settings") or {})
            if differ:
                problems.append(f"worker {index} was started with " + ", ".join(differ))
            joined[index] = conn
        missing = [i for i in range(1, here.num_workers) if i not in joined]
        if missing:
            named = ", ".join(f"worker {i} at {here.workers[i]}" for i in missing)
            problems.insert(
                0,
                f"{named} did not join within --cluster_wait={wait_s:g} s; start "
                f"{'them' if len(missing) > 1 else 'it'} with the same --worker_hosts and "
                f"{'their' if len(missing) > 1 else 'its'} own --task_index, or give "
                "--cluster_wait more seconds",
            )
        elif problems:
            problems.append("start every worker with the same flags but --task_index")
        answer = {"ok": not problems, "why": "; ".join(problems)}
        for conn in joined.values():
            with contextlib.suppress(OSError):
                _send(conn, answer)
        for conn in joined.values():  # the worker closes first (its side keeps TIME_WAIT)
            _receive(conn, time.monotonic() + 5.0)
            conn.close()
    finally:
        for conn in joined.values():
            conn.close()
        server.close()  # before the framework binds the same port
    if problems:
        raise DistributeError(f"worker 0 of {here.num_workers}: " + "; ".join(problems))


def _say_hello(
    here: Cluster, settings: Agreed, coordinator: str, deadline: float, wait_s: float
) -> None:
    host, port = _address(coordinator)
    conn = None
    while conn is None:
        try:
            conn = socket.create_connection((host, port), timeout=2.0)
        except OSError:
            if time.monotonic() >= deadline:
                raise DistributeError(
                    f"worker {here.task_index} of {here.num_workers}: worker 0 (the "
                    f"coordinator, at {coordinator}) did not answer within --cluster_wait="
                    f"{wait_s:g} s; start it with the same --worker_hosts and --task_index=0, "
                    "or give --cluster_wait more seconds"
                ) from None
            time.sleep(0.2)  # nothing listens yet: polling a port, there is no event
    with conn:
        _send(conn, {"index": here.task_index, "settings": dict(settings)})
        # Worker 0 answers when all have come, within its own wait (plus a little slack).
        answer = _receive(conn, deadline + max(30.0, wait_s))
    if answer is None:
        raise DistributeError(
            f"worker {here.task_index} of {here.num_workers}: worker 0 at {coordinator} "
            "stopped answering while the cluster formed; see its output"
        )
    if not answer.get("ok"):
        raise DistributeError(
            f"worker {here.task_index} of {here.num_workers}: the cluster did not form: "
            f"{answer.get('why')}"
        )


def process_slice(data: Any, index: int, count: int, fused: int = 1, shards: int = 0) -> Any:
    """`data` (global batches: ``tf.data.Dataset``, ``PyDataset`` or Grain) with only process
    `index`'s part of each batch, of `count` processes reading the same batches in the same order.
    With `fused` steps a batch is several steps' batches, each split over `shards` devices; a
    process's part is each of its devices' share of every step, laid out ``(devices, steps, rows)``
    as the fused step unfolds it, so no row crosses a device."""
    shards = shards or count
    if count < 2 and (fused < 2 or shards < 2):
        return data
    if shards % count:
        raise ValueError(f"{shards} devices do not split over {count} processes")
    mine = shards // count

    def cut(t: Any) -> Any:  # a NumPy array
        rows = t.shape[0] // (fused * shards)
        t = t.reshape((fused, shards, rows, *t.shape[1:]))[:, index * mine : (index + 1) * mine]
        return t.swapaxes(0, 1).reshape((mine * fused * rows, *t.shape[3:]))

    if hasattr(data, "map_batches"):  # a toolkit Grain pipeline (toolkit.data._grain)
        import keras
        import numpy as np

        note = f"slice {index + 1} of {count}" if count > 1 else f"rows by device ({shards})"
        return data.map_batches(
            lambda batch: keras.tree.map_structure(lambda t: cut(np.asarray(t)), batch),
            note,
            (getattr(data, "batch_size", 0) or 0) // count,
        )
    if hasattr(data, "element_spec"):  # a tf.data.Dataset
        import tensorflow as tf

        def part(*batch: Any) -> Any:
            def one(t: Any) -> Any:
                shape = tf.shape(t)
                rows = shape[0] // (fused * shards)
                t = tf.reshape(t, tf.concat([[fused, shards, rows], shape[1:]], 0))
                t = t[:, index * mine : (index + 1) * mine]
                t = tf.transpose(t, tf.concat([[1, 0], tf.range(2, tf.rank(t))], 0))
                return tf.reshape(t, tf.concat([[mine * fused * rows], shape[1:]], 0))

            sliced = tf.nest.map_structure(one, batch)
            return sliced if len(sliced) > 1 else sliced[0]

        return data.map(part, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    return _sliced_batches(data, index, count, cut)


def _sliced_batches(batches: Any, index: int, count: int, cut: Callable[[Any], Any]) -> Any:
    import keras
    import numpy as np

    class ProcessSlice(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__()

        @property
        def num_batches(self) -> int | None:
            return batches.num_batches

        def __getitem__(self, i: int) -> Any:
            return tuple(
                keras.tree.map_structure(lambda t: cut(np.asarray(t)), part) for part in batches[i]
            )

        def on_epoch_end(self) -> None:
            batches.on_epoch_end()

    sliced = ProcessSlice()
    size = getattr(batches, "batch_size", None)
    if size:
        sliced.batch_size = size // count
    description = getattr(batches, "description", None)
    if description:
        sliced.description = f"{description} → slice {index + 1} of {count}"
    return sliced
