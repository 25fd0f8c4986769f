"""Past one device and one machine: strategies, the cluster, batch sizes, sharding, the tf.data
service and fault tolerance (merging the workers' reports is ``toolkit.report.merge``).

All but ``data_parallel`` is TensorFlow's own engine; ``--batch_size`` is the *global* batch.
``parameter_server`` is not offered: its ``ClusterCoordinator`` setup cannot be tested end to end
here. Keras 3 cannot train under ``MultiWorkerMirroredStrategy``, so tf.distribute's multi-worker
runs use ``TF_USE_LEGACY_KERAS=1``; Keras 3's is ``data_parallel`` (``distribute.processes``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.core.files import parse_json
from toolkit.distribute._service import serve_dispatcher, serve_worker

__all__ = [
    "SERVICE_MODES",
    "SHARD_POLICIES",
    "STRATEGIES",
    "Cluster",
    "DistributeError",
    "batch_sizes",
    "make_strategy",
    "serve_dispatcher",
    "serve_worker",
    "shard",
    "tf_config",
    "through_data_service",
]


STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored", "data_parallel")
SHARD_POLICIES = ("data", "file", "auto", "off")
SERVICE_MODES = ("parallel_epochs", "distributed_epoch")


class DistributeError(ValueError):
    """A cluster or service setting that cannot work, with what to do instead."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """This process's place in the cluster (a single process is worker 0 of 1)."""

    task_type: str = "worker"
    task_index: int = 0
    workers: tuple[str, ...] = ()
    size: int = 0  # the processes, where `workers` names only the coordinator (Keras's env)

    @property
    def num_workers(self) -> int:
        return max(1, self.size or len(self.workers))

    @property
    def is_chief(self) -> bool:
        """Worker 0 (or an explicit ``chief`` task) writes the run's report and checkpoints."""
        return self.task_type == "chief" or (self.task_type == "worker" and self.task_index == 0)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cluster:
        """A Cluster from :meth:`to_dict`'s output (a report's JSON)."""
        workers = tuple(data.get("workers") or ())
        count = int(data.get("num_workers") or 0)
        return cls(
            str(data.get("task_type", "worker")),
            int(data.get("task_index") or 0),
            workers,
            count if count != len(workers) and count > 1 else 0,
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "task_type": self.task_type,
            "task_index": self.task_index,
            "num_workers": self.num_workers,
            "is_chief": self.is_chief,
            "workers": list(self.workers),
        }


def tf_config(worker_hosts: Sequence[str], task_index: int) -> dict[str, Any]:
    """The ``TF_CONFIG`` of worker `task_index` in a cluster of `worker_hosts`."""
    hosts = [h.strip() for h in worker_hosts if h.strip()]
    if not hosts:
        raise DistributeError("--worker_hosts is empty: give host:port,host:port,...")
    for host in hosts:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise DistributeError(f"--worker_hosts: {host!r} is not host:port")
    if not 0 <= task_index < len(hosts):
        raise DistributeError(
            f"--task_index={task_index} is not a worker of --worker_hosts "
            f"({len(hosts)} workers: 0..{len(hosts) - 1})"
        )
    return {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": task_index}}


def cluster_from_flags(
    worker_hosts: str | None = None, task_index: int | None = None, *, set_env: bool = True
) -> Cluster:
    """This process's cluster: from ``--worker_hosts``/``--task_index`` (set), else ``TF_CONFIG``.

    Raises:
        DistributeError: a malformed host list, index or ``TF_CONFIG``."""
    if worker_hosts:
        config = tf_config(worker_hosts.split(","), task_index or 0)
        if set_env:
            os.environ["TF_CONFIG"] = json.dumps(config)
    else:
        raw = os.environ.get("TF_CONFIG")
        if not raw:
            return Cluster()
        try:
            config = parse_json(raw)
            workers = config.get("cluster", {}).get("worker", [])
            task = config["task"]
            task_type, index = str(task["type"]), int(task["index"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise DistributeError(
                f"TF_CONFIG is not valid ({type(e).__name__}: {e}); it must be JSON like "
                '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", '
                '"index": 0}}'
            ) from None
        return Cluster(task_type, index, tuple(workers))
    return Cluster("worker", config["task"]["index"], tuple(config["cluster"]["worker"]))


# A worker's wait for the whole cluster (--cluster_wait); TensorFlow's own is silent, unbounded.
CLUSTER_WAIT_S = 600.0


def _refused(address: str, timeout: float) -> OSError | ValueError | None:
    """Why nothing accepts a connection at `address` (``host:port``), or None if something does."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout):
            return None
    except (OSError, ValueError) as e:
        return e


def silent_workers(cluster: Cluster, timeout: float = 1.0) -> list[str]:
    """The other workers of `cluster` accepting no connection, as ``"worker I at host:port"``."""
    return [
        f"worker {index} at {address}"
        for index, address in enumerate(cluster.workers)
        if not (index == cluster.task_index and cluster.task_type == "worker")
        and _refused(address, timeout) is not None
    ]


def _bound_cluster_wait(seconds: float) -> bool:
    """Configures TF's coordination service as ``MultiWorkerMirroredStrategy`` would, but with each
    task's registration a barrier timing out after `seconds`; whether it could (no public API)."""
    try:
        import tensorflow as tf
        from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
        from tensorflow.python.eager import context

        spec = tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()
        jobs = [j for j in ("chief", "worker") if j in spec.jobs]
        if not jobs or context.context().coordination_service is not None:
            return False
        context.context().configure_coordination_service(
            service_type="standalone",
            service_leader=f"/job:{jobs[0]}/replica:0/task:0",
            coordinated_jobs=[
                coordination_config_pb2.CoordinatedJob(name=j, num_tasks=spec.num_tasks(j))
                for j in jobs
            ],
            cluster_register_timeout_in_ms=int(seconds * 1000),
        )
        context.context().coordination_service.cluster_register_with_barrier = True
    except (ImportError, AttributeError, TypeError, ValueError):
        return False
    return True


def make_strategy(
    name: str,
    device: Any = None,
    *,
    cluster: Cluster | None = None,
    cluster_wait: float = CLUSTER_WAIT_S,
) -> Any:
    """The ``tf.distribute`` strategy `name` (see :data:`STRATEGIES`).
    ``multi_worker_mirrored`` must be made before TensorFlow's first op, after ``TF_CONFIG`` is set;
    it blocks until every worker joined, at most `cluster_wait` seconds (0: TensorFlow's own wait),
    naming those that did not. On JAX and PyTorch ``default`` is :class:`NoStrategy`;
    ``data_parallel`` is Keras's own distribution over every device of every process (on TF,
    ``MirroredStrategy``; under tf_keras with a cluster, ``MultiWorkerMirroredStrategy``).

    Raises:
        DistributeError: an unknown name, multi_worker_mirrored under Keras 3, or a late cluster."""
    from toolkit import backend
    from toolkit.core import compat

    if name == "data_parallel":
        if compat.keras_flavor() == "tf_keras":  # tf.distribute's data parallelism
            here = cluster if cluster is not None else cluster_from_flags(set_env=False)
            name = "multi_worker_mirrored" if here.num_workers > 1 else "mirrored"
        else:
            seam = backend.get()
            try:
                distribution, replicas = seam.data_parallel()
            except ValueError as e:  # the backend's refusal: one line
                raise DistributeError(str(e)) from None
            if seam.trains_under_tf_distribute():
                return distribution  # MirroredStrategy: its scope places the variables
            index, count = seam.processes()
            return ProcessStrategy(replicas, count, index, distribution)
    seam = backend.find()  # None: a Keras backend the toolkit does not measure on (numpy)
    if name == "default" and not (seam is not None and seam.trains_under_tf_distribute()):
        return NoStrategy()
    import tensorflow as tf

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(device.logical_name if device else "/cpu:0")
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        if compat.keras_flavor() != "tf_keras":
            raise DistributeError(
                "--distribution_strategy=multi_worker_mirrored: Keras 3's fit cannot train "
                "under MultiWorkerMirroredStrategy (keras-team/keras#20585); run with "
                "TF_USE_LEGACY_KERAS=1 (tf_keras, installed with the toolkit)"
            )
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.AUTO
        )
        bounded = cluster_wait > 0 and _bound_cluster_wait(cluster_wait)
        _say_worker_server(cluster if cluster is not None else cluster_from_flags(set_env=False))
        try:
            return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        except tf.errors.DeadlineExceededError:
            if not bounded:
                raise
            here = cluster if cluster is not None else cluster_from_flags(set_env=False)
            silent = silent_workers(here)
            if silent:
                named = ", ".join(silent[:-1]) + " and " if len(silent) > 1 else ""
                why = named + silent[-1] + (" do" if len(silent) > 1 else " does") + " not answer"
            else:
                why = (
                    "every other worker answers at its address, but the cluster did not form: are "
                    "they all started with the same --worker_hosts and their own --task_index?"
                )
            raise DistributeError(
                f"--cluster_wait={cluster_wait:g}: worker {here.task_index} of "
                f"{here.num_workers} waited {cluster_wait:g} s for the cluster of --worker_hosts "
                f"to join; {why}. Start every worker, or give --cluster_wait more seconds (0: "
                "TensorFlow's own wait)"
            ) from None
    raise DistributeError(f"--distribution_strategy must be one of {', '.join(STRATEGIES)}")


def _say_worker_server(here: Cluster) -> None:
    """Says the port this worker's TF server opens, on every interface (gRPC takes no address)."""
    import sys

    if here.task_type != "worker" or not 0 <= here.task_index < len(here.workers):
        return
    port = here.workers[here.task_index].rpartition(":")[2]
    if port.isdigit():
        who = f"worker {here.task_index}"
        print(f"cluster: {listening_line(who, '*', int(port))}", file=sys.stderr, flush=True)


class NoStrategy:
    """For a backend training without ``tf.distribute``: one replica, a scope that does nothing."""

    num_replicas_in_sync = 1

    def scope(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


@dataclasses.dataclass
class ProcessStrategy:
    """A strategy for a Keras distribution over processes: the replicas in sync, this process's
    place, and a scope that changes nothing (the distribution is process-wide)."""

    num_replicas_in_sync: int
    processes: int = 1
    process_index: int = 0
    distribution: Any = None  # the framework's own (keras.distribution.DataParallel)

    def scope(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


def batch_sizes(global_batch: int, replicas: int) -> tuple[int, int]:
    """``(global, per_replica)``: the one place the two are related.

    Raises:
        DistributeError: the global batch does not split evenly over the replicas."""
    if replicas < 1 or global_batch % replicas:
        raise DistributeError(
            f"--batch_size={global_batch} (the global batch) must be a multiple of the "
            f"{replicas} replicas in sync; use {max(1, global_batch // replicas) * replicas}"
        )
    return global_batch, global_batch // replicas


def shard(dataset: Any, policy: str = "data") -> Any:
    """`dataset` with its auto-shard policy set explicitly: ``data`` (works for every source),
    ``file`` (many TFRecord files), ``auto`` or ``off``."""
    import tensorflow as tf

    policies = {
        "data": tf.data.experimental.AutoShardPolicy.DATA,
        "file": tf.data.experimental.AutoShardPolicy.FILE,
        "auto": tf.data.experimental.AutoShardPolicy.AUTO,
        "off": tf.data.experimental.AutoShardPolicy.OFF,
    }
    if policy not in policies:
        raise DistributeError(f"--shard_policy must be one of {', '.join(SHARD_POLICIES)}")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policies[policy]
    return dataset.with_options(options)


def service_address(address: str, flag: str = "--data_service") -> tuple[str, str]:
    """``grpc://host:port`` -> ``("grpc", "host:port")``; else DistributeError naming `flag`."""
    protocol, sep, rest = address.partition("://")
    host, colon, port = rest.rpartition(":")
    if (
        not sep
        or protocol not in ("grpc", "grpc+loas")
        or not colon
        or not host.strip("[]")
        or not port.isdigit()
        or not 0 < int(port) < 65536
    ):
        raise DistributeError(
            f"{flag}={address!r}: give the dispatcher as grpc://host:port "
            "(start one with python -m toolkit data-service --dispatcher --port P --all_interfaces)"
        )
    return protocol, rest


# A trainer's wait for the --data_service dispatcher (unless --data_service_wait says otherwise).
DISPATCHER_WAIT_S = 20.0


def wait_for_dispatcher(address: str, timeout: float = DISPATCHER_WAIT_S) -> None:
    """Returns once something accepts connections at `address` (tf.data retries forever, silently).

    Raises:
        DistributeError: nothing answered within `timeout` seconds."""
    import time

    _, rest = service_address(address)
    host, _, port = rest.rpartition(":")
    host = host.strip("[]") or "localhost"
    deadline = time.monotonic() + timeout
    while (why := _refused(rest, timeout=2.0)) is not None and time.monotonic() < deadline:
        time.sleep(0.5)  # polling a port: there is no event to wait on
    if why is None:
        return
    raise DistributeError(
        f"--data_service={address}: no dispatcher answered at {host}:{port} within "
        f"{timeout:.0f} s ({why}); start one with python -m toolkit data-service --dispatcher "
        f"--port {port} --all_interfaces, or drop --data_service"
    )


def through_data_service(
    dataset: Any,
    address: str,
    mode: str = "parallel_epochs",
    job_name: str | None = None,
    wait_s: float = DISPATCHER_WAIT_S,
) -> Any:
    """`dataset` run by the tf.data service at `address`, read back here with a local prefetch.

    Args:
        dataset: the whole pipeline: all of it runs on the service workers.
        address: ``grpc://host:port`` of the dispatcher.
        mode: ``parallel_epochs`` (each trainer gets the whole dataset) or ``distributed_epoch``
            (one epoch's elements split among trainers; needs a splittable source).
        job_name: trainers giving the same name share one job (default: a job of its own).
        wait_s: how long to wait for the dispatcher (``--data_service_wait``).

    Raises:
        DistributeError: a malformed address, an unknown mode, or no dispatcher in time."""
    import tensorflow as tf

    service_address(address)
    if mode not in SERVICE_MODES:
        raise DistributeError(f"--data_service_mode must be one of {', '.join(SERVICE_MODES)}")
    wait_for_dispatcher(address, wait_s)
    distributed = dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=mode, service=address, job_name=job_name
        )
    )
    return distributed.prefetch(tf.data.AUTOTUNE)


def reach(ip: str) -> str:
    """How far a server listening on `ip` (or ``*``) can be reached, in words."""
    import ipaddress

    if ip in ("*", ""):
        return "every interface"
    try:
        address = ipaddress.ip_address(ip.strip("[]").split("%")[0])
    except ValueError:
        return "the addresses of that name"
    if address.is_unspecified:
        return "every interface"
    return "loopback only" if address.is_loopback else "that interface only"


def listening_line(who: str, ip: str, port: int) -> str:
    """``<who> listens on <ip>:<port> (<reach>, no authentication)``: said when a server starts."""
    shown = f"[{ip}]" if ":" in ip else ip
    return f"{who} listens on {shown}:{port} ({reach(ip)}, no authentication)"


def spawn_data_service(
    *,
    dispatcher: str | None = None,
    port: int = 0,
    host: str | None = None,
    work_dir: str | None = None,
    env: dict[str, str] | None = None,
) -> tuple[Any, str]:
    """Starts a tf.data service server in a new process and waits for it to serve: a dispatcher
    on `port` (0: any free one; `work_dir` its journal), or, given `dispatcher`, a worker of it
    reached as `host`. It listens on every interface, with no authentication: the service takes a
    port only. Returns ``(process, dispatcher's address)``; stop it with ``terminate()``.

    Raises:
        DistributeError: a malformed `dispatcher`, or the process ended before it served."""
    import subprocess
    import sys
    import tempfile

    from toolkit.core import children
    from toolkit.distribute._service import ServiceSpec, Started

    if dispatcher:
        service_address(dispatcher, "dispatcher")  # refused here, before a process starts
    spec = ServiceSpec(dispatcher or None, port, host or "localhost", work_dir)
    # A file, not a pipe nobody reads (it would fill and block the server), keeps its errors.
    errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
    proc = children.spawn(  # bound to this process: it ends with it, however this one ends
        [sys.executable, "-m", "toolkit.distribute._service"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
        env=env,
    )
    proc.stdin.write(spec.to_json() + "\n")
    proc.stdin.close()
    said = proc.stdout.readline()  # the one message, once it serves or could not
    try:
        started = Started.from_json(said) if said else Started(error="no answer")
    except ValueError:
        started = Started(error=f"an answer that is no message: {said[:80]!r}")
    if started.address is not None:
        return proc, started.address
    proc.wait()
    errors.seek(0)
    tail = errors.read()[-500:]
    what = f"a worker of {dispatcher}" if dispatcher else f"a dispatcher on port {port}"
    raise DistributeError(
        f"data-service: {what} did not start (exit {proc.returncode}): {started.error}"
        + (f"; {tail.strip()}" if tail.strip() else "")
    )
