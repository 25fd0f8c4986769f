"""Helpers shared by tests: a fresh Python process for what must run before TF starts."""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# Recipe flags for a test's smoke run: the smallest images the model takes, where its own
# cost most (every design field is the same). MobileNetV2's 96×96 smoke run took 39 CPU-s on
# JAX (700 ms a step), 27 at 32×32.
SMOKE_FLAGS = {"mobilenet": ("--image_size=32",)}

# The signals tests send. A shell's background job starts with SIGINT (and SIGQUIT) ignored,
# ``nohup`` with SIGHUP ignored, and the toolkit rightly keeps an ignored signal ignored; so a
# child a test will signal starts with them at their defaults, whatever the suite inherited.
SENT_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
_DEFAULTS = (
    "import os, signal, sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


def signals_at(argv: list[str], default: tuple[str, ...] = SENT_SIGNALS) -> list[str]:
    """`argv` run with the signals `default` at their default disposition: a launcher sets
    them and execs it (an exec keeps a default or ignored disposition; a launcher, not a
    ``preexec_fn``, which is unsafe in a process with threads). `default` empty, with
    ``SIG_IGN:`` names, ignores those instead (``("SIG_IGN:SIGHUP",)``: as under nohup)."""
    plain = [s for s in default if not s.startswith("SIG_IGN:")]
    ignored = [s.removeprefix("SIG_IGN:") for s in default if s.startswith("SIG_IGN:")]
    code = _DEFAULTS
    if ignored:
        code = code.replace(
            "os.execvp",
            f"for name in {ignored!r}:\n    signal.signal(getattr(signal, name), signal.SIG_IGN)\n"
            "os.execvp",
        )
    return [sys.executable, "-c", code, ",".join(plain) or "SIGTERM", *argv]


def run_child(
    args: list[str], timeout: float, env: dict[str, str] | None = None, **kwargs: Any
) -> subprocess.CompletedProcess:
    """``subprocess.run(args, capture_output=True, text=True)``, except for a child still
    running at `timeout`: its Python threads' stacks are asked for (SIGABRT, which
    ``PYTHONFAULTHANDLER`` turns into a dump of every thread on its stderr) and the test fails
    with them, so a hang says where it hung. (A clean clone's suite once saw ``doctor`` hang
    after its last line, once in about 40 tries; the timeout said nothing more.)"""
    env = {**(os.environ if env is None else env), "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kwargs
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # not even a dump: the interpreter is stuck
                proc.kill()
                out, err = proc.communicate()
            pytest.fail(
                f"{' '.join(map(str, args))[:300]} still ran after {timeout} s; its stderr "
                f"with its threads' stacks:\n{(err or '')[-8000:]}",
                pytrace=False,
            )
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def run_python(code: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a new interpreter (a fresh TensorFlow runtime) and captures its output
    (its signals at their defaults: some of these children signal themselves)."""
    return run_child(signals_at([sys.executable, "-c", code]), timeout)


@functools.cache
def cluster_backend_missing(backend: str) -> str | None:
    """Why this Keras cannot train `backend` over processes (a skip's reason), or None: for
    PyTorch, the toolkit's own check (``_keras_distribution_lib``), not the version."""
    if backend != "torch":
        return None
    from toolkit.backend import _torch

    try:
        _torch._keras_distribution_lib()
    except ValueError:
        import keras

        return (
            "PyTorch data_parallel needs Keras >= 3.16 (keras-nightly; `make test-next`); "
            f"installed Keras {keras.__version__}"
        )
    return None


def read_until(
    proc: subprocess.Popen, prefix: str, timeout: float, stream: str = "stdout"
) -> tuple[bool, str]:
    """Reads `proc`'s output (its `stream`) until a line starts with `prefix`, the output
    ends, or `timeout` seconds pass. Returns whether the line came, and what was read (for
    the failure message)."""
    said, seen = [], threading.Event()

    def read():
        for line in getattr(proc, stream):
            said.append(line)
            if line.startswith(prefix):
                seen.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    return seen.is_set(), "".join(said)


# What a machine without TensorFlow lacks (the GPU machines carry JAX and PyTorch only).
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tf_keras", "tensorboard", "tensorflow_datasets")
_BOOT = """import runpy, site, sys
site.addsitedir({site!r})
if sys.argv[1] == "-c":
    code, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
    exec(compile(code, "<string>", "exec"), {{"__name__": "__main__"}})
else:
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def site_without_tensorflow(root) -> list[str]:
    """The command prefix of a Python that has this one's packages except TensorFlow and its
    kin, as on a machine where it was never installed: ``python -S`` (no site-packages) and a
    directory of links to every installed package but those, added as a site directory.
    Append a module name and its arguments."""
    import pathlib
    import site

    root = pathlib.Path(root)
    farm = root / "site-packages"
    if not farm.exists():
        farm.mkdir(parents=True)
        # the site directories, then any a .pth added (.venv-next's overlay on .venv): the
        # first of a name shadows the rest, as on sys.path
        added = (p for p in sys.path if pathlib.Path(p).name == "site-packages")
        for directory in dict.fromkeys([*site.getsitepackages(), *added]):
            for entry in pathlib.Path(directory).iterdir():
                name = entry.name.lower()
                if name.startswith(TENSORFLOW_DISTRIBUTIONS) or name.startswith("_tensorflow"):
                    continue
                if name.endswith(".pth") and "addsitedir" in entry.read_text(errors="replace"):
                    continue  # it would add its whole site directory, TensorFlow and all
                if not (farm / entry.name).exists():
                    (farm / entry.name).symlink_to(entry)
        (root / "boot.py").write_text(_BOOT.format(site=str(farm)))
    return [sys.executable, "-S", str(root / "boot.py")]


def fake_rates(candidate) -> float:
    """Examples/s a fake measurement gives a search candidate: XLA 1.5x, eight steps per
    execution 2x, mixed_bfloat16 0.5x (the engine's and tune's tests search over it)."""
    rate = 100.0
    rate *= 1.5 if candidate.jit_compile else 1.0
    rate *= 2.0 if candidate.steps_per_execution == 8 else 1.0
    rate *= 0.5 if candidate.precision == "mixed_bfloat16" else 1.0
    return rate


def _tensorboard_run(logdir: str | os.PathLike[str]) -> Any:
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator

    events = EventAccumulator(os.fspath(logdir), size_guidance={"tensors": 0})
    events.Reload()
    return events


def read_scalars(logdir: str | os.PathLike[str]) -> dict[str, list[Any]]:
    """The scalars of one TensorBoard run directory, read with TensorBoard's own reader (the
    one its plugins use): ``{tag: [point with .step, .value]}``."""
    from types import SimpleNamespace

    from tensorboard.util import tensor_util

    events = _tensorboard_run(logdir)
    return {
        tag: [
            SimpleNamespace(step=e.step, value=float(tensor_util.make_ndarray(e.tensor_proto)))
            for e in events.Tensors(tag)
        ]
        for tag in events.Tags()["tensors"]
        if events.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"  # not the pictures
    }


def scalar_descriptions(logdir: str | os.PathLike[str]) -> dict[str, str]:
    """``{tag: its description}`` in one TensorBoard run directory, as TensorBoard reads it."""
    events = _tensorboard_run(logdir)
    return {
        tag: events.SummaryMetadata(tag).summary_description
        for tag in events.Tags()["tensors"]
        if events.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"
    }


def read_images(logdir: str | os.PathLike[str]) -> dict[str, list[bytes]]:
    """``{tag: [each picture's encoded bytes]}`` in one TensorBoard run directory, read with
    TensorBoard's own reader (the images plugin's: width, height, then the pictures)."""
    from tensorboard.util import tensor_util

    events = _tensorboard_run(logdir)
    return {
        tag: [bytes(tensor_util.make_ndarray(e.tensor_proto)[2]) for e in events.Tensors(tag)]
        for tag in events.Tags()["tensors"]
        if events.SummaryMetadata(tag).plugin_data.plugin_name == "images"
    }


@contextlib.contextmanager
def tensorboard_server(logdir: str | os.PathLike[str], timeout: float = 120) -> Iterator[str]:
    """The real ``tensorboard`` program (its Rust data server included) serving `logdir` on a
    port of its choosing; yields its base URL, and stops it after the block."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "tensorboard.main"),
            *("--logdir", os.fspath(logdir), "--host", "127.0.0.1", "--port", "0"),
            *("--reload_interval", "1"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        came, said = read_until(proc, "TensorBoard ", timeout, stream="stderr")
        assert came, f"tensorboard did not start: {said[-2000:]}"
        line = said.splitlines()[-1]
        yield line.split(" at ", 1)[1].split()[0].rstrip("/")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def get_json(url: str, until: Callable[[Any], bool], timeout: float = 120) -> Any:
    """GETs `url` as JSON until `until(reply)` holds (a server still loading answers with less)
    or `timeout` seconds pass; returns the last reply."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(url, timeout=30) as reply:
            body = reply.read()
            if reply.headers.get("Content-Encoding") == "gzip":  # XProf's plugin sends it so
                body = gzip.decompress(body)
        got = json.loads(body)
        if until(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


PORTS_PER_WORKER = 1000  # each pytest-xdist worker's own block of ports, below the ephemeral
_next_port: list[int] = []  # this worker's cursor in its block


def _port_block() -> int | None:
    """The first of this worker's :data:`PORTS_PER_WORKER` ports: below the kernel's ephemeral
    range, which a port the kernel picks (``bind(0)``, any outgoing connection) comes from, and
    apart from every other xdist worker's. None where that range leaves no room."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    index = int(worker) if worker.isdigit() else 0
    first = ephemeral_low - PORTS_PER_WORKER * (index + 1)
    return first if first >= 10000 else None


def free_ports(n: int) -> list[int]:
    """`n` ports free on 127.0.0.1 now (for a cluster's addresses).

    A port found free is closed before the cluster binds it: with ports the kernel picks,
    another pytest worker's sockets could take it in between. Each worker takes its own block
    below the ephemeral range instead (`_port_block`), in turn, so no other test's process is
    handed the same port; the kernel picks where there is no such block."""
    first = _port_block()
    if first is None:
        return _kernel_ports(n)
    if not _next_port:
        _next_port.append(first + os.getpid() % PORTS_PER_WORKER)
    ports: list[int] = []
    for _ in range(PORTS_PER_WORKER):
        port = _next_port[0]
        _next_port[0] = first + (port + 1 - first) % PORTS_PER_WORKER
        with contextlib.suppress(OSError), socket.socket() as s:
            s.bind(("127.0.0.1", port))
            ports.append(port)
            if len(ports) == n:
                return ports
    return _kernel_ports(n)


def _kernel_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def assert_mfu(compute: dict) -> None:
    """A report's MFU: given from a peak whose runs were within 25 %, as the achieved FLOP/s
    over that peak, and not given from one measured on a machine too busy for that (as on a
    loaded CI machine). Its size is the machine's (a loaded host has read 561 %): the
    benchmarks print it (benchmarks/recipe_mfu.py)."""
    from toolkit.core.stats import reliable_peak

    if reliable_peak(compute.get("peak_spread_pct")):
        assert compute["achieved_flops_per_s"] > 0 and compute["peak_flops_per_s"] > 0, compute
        ratio = compute["achieved_flops_per_s"] / compute["peak_flops_per_s"]
        assert compute["mfu"] == pytest.approx(ratio, rel=1e-3), compute
    else:
        assert compute["mfu"] is None, compute
