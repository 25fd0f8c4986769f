"""Every port the toolkit opens listens where the user named, and says so: real servers in real
processes, reached over real sockets through 127.0.0.1 and through an address of this machine
that is not loopback (a connection from another host arrives there).

* JAX's coordinator and the toolkit's join before it (``data_parallel`` over processes) listen
  on the host ``--worker_hosts`` names for worker 0: loopback only for localhost/127.0.0.1.
* TensorFlow's tf.data service can only listen on every interface (its gRPC server binds
  ``0.0.0.0``), unauthenticated: ``data-service`` refuses to start without
  ``--all_interfaces``, and with it says so in its first line, truly.

Every process is bounded in time and stopped in ``finally``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers import cluster_backend_missing, free_ports, read_until
from tests.test_faults import _run


def _other_address() -> str:
    """An IPv4 address of this machine that is not loopback (skips the test without one)."""
    import psutil

    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback:
                return a.address
    pytest.skip("this machine has no IPv4 address but loopback: nothing to reach it by")


def _connects(ip: str, port: int) -> bool:
    """Whether a TCP connection to `ip`:`port` is accepted (False: refused)."""
    try:
        with socket.create_connection((ip, port), timeout=10):
            return True
    except ConnectionRefusedError:
        return False


def _listening(pid: int) -> set[tuple[str, int]]:
    """The ``(address, port)`` pairs process `pid` listens on (IPv4 as IPv4)."""
    import psutil

    def plain(ip: str) -> str:  # gRPC listens on 127.0.0.1 as ::ffff:127.0.0.1
        mapped = getattr(ipaddress.ip_address(ip.split("%")[0]), "ipv4_mapped", None)
        return str(mapped) if mapped else ip

    return {
        (plain(c.laddr.ip), c.laddr.port)
        for c in psutil.Process(pid).net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    }


def _env() -> dict[str, str]:
    drop = ("TF_CONFIG", "JAX_COORDINATOR_BIND_ADDRESS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["TOOLKIT_PROGRESS"] = "lines"
    return env


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=30)
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                stream.close()


# ---------------------------------------------------------------------------- tf.data service


@pytest.mark.parametrize(
    "argv",
    [
        "data-service --dispatcher --port=0",
        "data-service --dispatcher --port=0 --host=10.0.0.5",
        "data-service --worker --dispatcher=grpc://localhost:5050",
    ],
)
def test_data_service_refuses_every_interface_unless_asked(argv, capsys):
    """TensorFlow cannot bind the service to one address: without --all_interfaces it is a
    bad command line (status 2, one line saying what it would expose), before TF loads."""
    from toolkit.cli import main

    assert main(argv.split()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(
        "error: data-service: TensorFlow's tf.data service listens on every interface, never on "
        "--host="
    ), err
    assert "no authentication: add --all_interfaces" in err


def test_data_service_says_truly_that_it_listens_on_every_interface():
    """With --all_interfaces, the dispatcher and the worker each say their port and that it is
    every interface, unauthenticated; both are indeed reached through either address."""
    pytest.importorskip("tensorflow")
    other = _other_address()
    command = [sys.executable, "-m", "toolkit", "data-service", "--all_interfaces"]
    procs: list[subprocess.Popen] = []
    try:
        dispatcher = None
        for who in ("dispatcher", "worker"):
            role = ["--worker", f"--dispatcher={dispatcher}"] if dispatcher else ["--dispatcher"]
            proc = subprocess.Popen(
                [*command, *role],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=_env(),
            )
            procs.append(proc)
            came, said = read_until(proc, "data-service: ", timeout=120)
            assert came, said
            listens = said.splitlines()[-1]
            came, serving = read_until(proc, "data-service: ", timeout=30)
            assert came and " serving " in serving, said + serving
            dispatcher = dispatcher or serving.split(" at ")[1].split()[0]
            assert listens.startswith(f"data-service: {who} listens on *:"), listens
            assert listens.endswith(" (every interface, no authentication)"), listens
            assert len(listens) <= 80, listens
            port = int(listens.split("*:")[1].split()[0])
            assert _connects("127.0.0.1", port) and _connects(other, port)
    finally:
        _stop(procs)


# ---------------------------------------------------------------------------- JAX's cluster


def test_the_join_listens_on_loopback_only_for_localhost():
    """Worker 0 of a data_parallel run on localhost, alone: while it waits for the others, its
    port (the join, then JAX's coordinator) is reached through loopback only, as it says."""
    pytest.importorskip("jax")
    other = _other_address()
    hosts = ",".join(f"localhost:{p}" for p in free_ports(2))
    port = int(hosts.split(",")[0].split(":")[1])
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "recipes.mlp", "--backend=jax",
            "--distribution_strategy=data_parallel", f"--worker_hosts={hosts}",
            "--task_index=0", "--cluster_wait=120", "--count_flops=false",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        came, said = read_until(proc, "cluster: worker 0 listens on ", 150, stream="stderr")
        assert came, said
        line = said.splitlines()[-1]
        assert line.endswith(f":{port} (loopback only, no authentication)"), line
        assert {ip for ip, p in _listening(proc.pid) if p == port} <= {"127.0.0.1", "::1"}
        loopback = "::1" if line.split("on ")[1].startswith("[") else "127.0.0.1"
        assert _connects(loopback, port)
        assert not _connects(other, port)
    finally:
        _stop([proc])


COORDINATOR = """
import sys
from toolkit import backend
backend.select(sys.argv[2])
print("starting", flush=True)
# process 1 never comes: it waits, listening
backend.get().start_processes(sys.argv[1], 2, 0, 60)
"""


@pytest.mark.next_keras
@pytest.mark.parametrize("name", ["jax", "torch"])
def test_the_coordinator_listens_where_worker_0_is_named(name):
    """The cluster's coordinator as the toolkit starts it, on the host named (loopback only
    for 127.0.0.1), not the framework's default of every interface: JAX's coordination
    service (``coordinator_bind_address``), PyTorch's TCPStore (opened by the toolkit on the
    socket its join bound)."""
    pytest.importorskip(name)
    why = cluster_backend_missing(name)
    if why:
        pytest.skip(why)
    other = _other_address()
    port = free_ports(1)[0]
    proc = subprocess.Popen(
        [sys.executable, "-c", COORDINATOR, f"127.0.0.1:{port}", name],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    try:
        came, said = read_until(proc, "starting", 120)
        assert came, said
        deadline = time.monotonic() + 120

        def on_port() -> set[str]:
            return {ip for ip, p in _listening(proc.pid) if p == port}

        while not on_port() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # neither says when it is up: polling, no event (on its port: a
            # framework's other sockets may listen first)
        assert on_port() == {"127.0.0.1"}
        assert _connects("127.0.0.1", port)
        assert not _connects(other, port)
    finally:
        _stop([proc])


def test_a_data_service_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = _run([sys.executable, "-m", "toolkit", "data-service", "--dispatcher",
                    f"--port={port}", "--all_interfaces"], timeout=120)  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: data-service: --port={port}: could not listen there (in use by another "
        "process?): choose another port, or 0 for any free one"
    )
    assert len(out.stderr.strip().splitlines()) <= 2  # its stage line, then the error
