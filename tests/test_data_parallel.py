"""Data parallelism over processes on Keras 3 (``--distribution_strategy=data_parallel``), for
real: recipes started as two processes on 127.0.0.1, each on one core, the way a user starts
them in two shells, over JAX's gloo collectives and, where the installed Keras has
``keras.distribution`` for PyTorch (3.16 and later: ``make test-next``), over PyTorch's. Every
process is bounded in time and stopped in ``finally``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import cluster_backend_missing, free_ports
from toolkit.distribute import DistributeError, processes

pytest.importorskip("jax")

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("TF_USE_LEGACY_KERAS") == "1", reason="Keras 3's own distribution"
    )
]
# What runs again against Keras's next release (``make test-next``, marked next_keras): what
# that Keras changes. Its PyTorch over processes is new there, so every PyTorch case runs again
# (the `backend` fixture marks them); of JAX's, the cluster the recipes start (the canary of
# Keras's JAX distribution), fused steps, and the slices each process reads of Keras's
# PyDataset. The failures the toolkit itself says before Keras is reached (a worker that never
# joins, a port in use, workers started differently, a batch that does not split), JAX's own
# coordinator ending the others, and pure logic depend on no Keras: they run once, here
# (measured: 140 s of the next pass's worker time).
NEXT = pytest.mark.next_keras


def _needs(backend: str) -> str:
    """`backend`, or a skip where this Keras cannot train it over processes (the reason names
    the Keras it needs and the installed one: ``tests.helpers.cluster_backend_missing``)."""
    if backend == "torch":
        pytest.importorskip("torch")
    why = cluster_backend_missing(backend)
    if why:
        pytest.skip(why)
    return backend


@pytest.fixture(params=["jax", pytest.param("torch", marks=NEXT)])
def backend(request) -> str:
    """Each backend that trains data_parallel over processes: :func:`_needs` (PyTorch's
    cases run against Keras's next release too: :data:`NEXT`)."""
    return _needs(request.param)


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "TF_CONFIG" and not k.startswith("KERAS_DISTRIBUTION_")
    }
    env.update(extra)
    return env


def _recipe(
    hosts: str | None, index: int, *flags: str, recipe: str = "mlp", backend: str = "jax"
) -> list[str]:
    cluster = [f"--worker_hosts={hosts}", f"--task_index={index}"] if hosts else []
    return [
        sys.executable, "-m", f"recipes.{recipe}", f"--backend={backend}",
        "--distribution_strategy=data_parallel", *cluster, "--count_flops=false", *flags,
    ]  # fmt: skip


def _one_core(index: int | None) -> Callable[[], None] | None:
    """What pins a child process to one core of this one's (the `index`-th, round the ones
    there are), run in the child before it starts: the processes of a cluster on one machine
    then neither share a core nor each spread threads over all of them. None where the
    system has no affinity (macOS), or for no index."""
    if index is None or not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    core = cores[index % len(cores)]
    return lambda: os.sched_setaffinity(0, {core})


def _start(command: list[str], core: int | None = None, **env: str) -> subprocess.Popen:
    """The process (on one core where `core` is given: :func:`_one_core`), its output going to
    files: a pipe nobody reads yet would fill and block it, and with it every other process
    of the cluster."""
    import tempfile

    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # noqa: SIM115
    proc = subprocess.Popen(
        command,
        stdout=out,
        stderr=err,
        text=True,
        env=_env(**env),
        preexec_fn=_one_core(core),
    )
    proc.files = (out, err)  # type: ignore[attr-defined]
    return proc


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """Waits for `proc` (at most `timeout` s) and returns its ``(stdout, stderr)``."""
    proc.wait(timeout=timeout)
    said = []
    for f in proc.files:  # type: ignore[attr-defined]
        f.seek(0)
        said.append(f.read())
    return said[0], said[1]


def _said_so_far(proc: subprocess.Popen) -> str:
    """What `proc` has written to its stderr so far, read where it is (``pread``: the file's
    offset, which the process shares, left where its writes go on)."""
    err = proc.files[1]  # type: ignore[attr-defined]
    return os.pread(err.fileno(), 1 << 20, 0).decode(errors="replace")


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=30)
        for f in getattr(p, "files", ()):
            f.close()


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def _report(stdout: str) -> dict:
    return json.loads(Path(stdout.split("json: ")[1].split()[0]).read_text())


# ------------------------------------------------------------------------- no framework


def test_the_cluster_comes_from_the_flags_or_from_keras_environment(monkeypatch):
    for name in processes._ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    assert processes.cluster(None, 0).num_workers == 1
    here = processes.cluster("127.0.0.1:1,127.0.0.1:2", 1)
    assert (here.task_index, here.num_workers, here.is_chief) == (1, 2, False)

    # A cluster manager may name the coordinator alone, with the count.
    monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "10.0.0.1:1234")
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "4")
    monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "3")
    here = processes.cluster(None, 0)
    assert (here.task_index, here.num_workers, here.workers) == (3, 4, ("10.0.0.1:1234",))
    monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "4")
    with pytest.raises(DistributeError, match="KERAS_DISTRIBUTION_PROCESS_ID=4 is not a process"):
        processes.cluster(None, 0)
    monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "a:1,b:2")
    with pytest.raises(DistributeError, match="names 2 processes but"):
        processes.cluster(None, 0)


def test_a_lost_peer_is_one_line_of_what_the_collective_said(monkeypatch):
    """Gloo's error, as PyTorch raises it when a peer's connection drops: one line naming the
    worker and what to do, without the C++ source line it starts with."""
    said = RuntimeError(
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error\n"
        "[127.0.0.1]:42396: Connection reset by peer. This is typically caused by a remote peer"
    )
    assert processes.lost_peer(said) is None  # not in a cluster: not ours to name
    monkeypatch.setattr(processes, "_STARTED", [processes.cluster("127.0.0.1:1,127.0.0.1:2", 1)])
    line = processes.lost_peer(said, steps=80)
    assert line.startswith(
        "worker 1 of 2: another process of the cluster is gone, so training stopped after 80 "
        "steps (RuntimeError: Read error [127.0.0.1]:42396: Connection reset by peer."
    ), line
    assert "\n" not in line and "pair.cc" not in line and "restart every worker" in line
    assert processes.lost_peer(ValueError("shapes (2,) and (3,) do not match")) is None


def test_a_global_batch_that_does_not_split_over_the_processes_says_what_would():
    assert processes._per_process_batch(64, 2) == 32
    with pytest.raises(DistributeError, match=r"--batch_size=65 .* 2 processes: use 64 or 66"):
        processes._per_process_batch(65, 2)


@NEXT
def test_each_process_reads_its_own_slice_of_every_global_batch():
    """Over the processes the slices are every example of the batch, once."""
    import numpy as np
    import tensorflow as tf

    x = np.arange(24, dtype="float32").reshape(12, 2)
    y = np.arange(12)
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(6)
    slices = [list(processes.process_slice(batches, i, 3)) for i in range(3)]
    for b in range(2):
        got = np.concatenate([slices[i][b][1].numpy() for i in range(3)])
        np.testing.assert_array_equal(got, y[b * 6 : (b + 1) * 6])
        assert all(len(slices[i][b][1]) == 2 for i in range(3))

    from toolkit.data import array_batches

    arrays = array_batches((x, y), 6, drop_remainder=True)
    mine = processes.process_slice(arrays, 1, 2)
    assert mine.num_batches == 2 and mine.batch_size == 3
    np.testing.assert_array_equal(mine[1][1], y[9:12])


@NEXT
def test_fused_steps_over_devices_see_the_global_batches_they_would_see_unfused():
    """A fused batch (3 steps) over 4 devices, 2 per process: each process's part, device by
    device, is that device's share of every step; put back together and unfolded as the
    fused step does, step s is exactly the s-th global batch, whatever the data's form."""
    import numpy as np
    import tensorflow as tf

    from toolkit.data import array_batches

    steps, devices, rows = 3, 4, 2
    y = np.arange(steps * devices * rows * 2)  # two fused batches
    x = np.stack([y, -y], axis=1).astype("float32")
    fused_batch = steps * devices * rows
    forms = {
        "tf.data": lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(fused_batch),
        "PyDataset": lambda: array_batches((x, y), fused_batch, drop_remainder=True),
    }
    for form, data in forms.items():
        parts = [
            list(processes.process_slice(data(), i, 2, fused=steps, shards=devices))
            for i in range(2)
        ]
        for b in range(2):
            for k in (0, 1):  # features and labels keep their rows together
                whole = np.concatenate([np.asarray(parts[i][b][k]) for i in range(2)])
                unfolded = whole.reshape(devices, steps, rows, -1).swapaxes(0, 1)
                for s in range(steps):
                    start = (b * steps + s) * devices * rows
                    want = (x if k == 0 else y[:, None])[start : start + devices * rows]
                    got = unfolded[s].reshape(devices * rows, -1)
                    np.testing.assert_array_equal(got, want, err_msg=f"{form}, step {s}")
    # One process over several local devices lays its own batch out the same way.
    (alone,) = [list(processes.process_slice(forms["tf.data"](), 0, 1, steps, devices))]
    assert np.asarray(alone[0][1]).tolist()[:4] == [0, 1, 8, 9]  # device 0: steps 0 and 1
    assert processes.process_slice(forms["tf.data"](), 0, 1, fused=steps) is not None


FUSED_OVER_DEVICES = """
import json, os, sys
os.environ["KERAS_BACKEND"] = "jax"
import numpy as np
import keras
from toolkit.runner import train
from toolkit.runner.config import TrainConfig

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 6)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
weights = {}
for loader, fused in [(loader, fused) for loader in ("tf_data", "grain") for fused in (1, 4)]:
    task = train.Task(
        name="tiny",
        build_model=lambda: keras.Sequential(
            [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
        ),
        train=(x, y),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=lambda: keras.optimizers.SGD(0.1),
    )
    config = TrainConfig(epochs=1, batch_size=16, fused_steps=fused, steps_per_epoch=8,
                         warmup_steps=0, report_dir=None, count_flops=False, seed=1,
                         distribution_strategy="data_parallel", data_loader=loader)
    result = train.run(task, config)
    assert result.report.context.strategy.replicas == 2, result.report.context
    weights[loader, fused] = [np.asarray(w) for w in result.model.weights]
for loader in ("tf_data", "grain"):
    pairs = zip(weights[loader, 1], weights[loader, 4])
    print(loader, "MAX_DIFF", max(float(np.abs(a - b).max()) for a, b in pairs))
"""


@NEXT
def test_fused_steps_over_local_devices_train_exactly_like_separate_steps(tmp_path):
    """One process, two devices (``JAX_NUM_CPU_DEVICES``): 4 steps fused in one call end at
    the weights of 4 separate data-parallel steps (the same batches, split the same way),
    from tf.data and from Grain."""
    script = tmp_path / "fused.py"
    script.write_text(FUSED_OVER_DEVICES)
    done = subprocess.run(
        [sys.executable, str(script)],
        env=_env(JAX_NUM_CPU_DEVICES="2", JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    diffs = dict(line.split(" MAX_DIFF ") for line in done.stdout.splitlines() if "MAX_" in line)
    assert set(diffs) == {"tf_data", "grain"}, done.stdout
    assert all(float(d) < 1e-5 for d in diffs.values()), diffs


# ------------------------------------------------------------------------- real processes


@NEXT
def test_two_processes_train_one_model_and_the_chief_reports_the_cluster(tmp_path, backend):
    """Worker 0 from the flags, worker 1 from the environment a cluster manager sets for
    Keras: both end with the same weights, and the chief's report is the cluster's."""
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    flags = ["--epochs=2", "--train_steps=12", "--batch_size=32", f"--report_dir={tmp_path}"]
    procs = [
        _start(_recipe(hosts, 0, *flags, backend=backend), core=0),
        _start(
            _recipe(None, 0, *flags, backend=backend),
            core=1,
            KERAS_DISTRIBUTION_JOB_ADDRESSES=hosts,
            KERAS_DISTRIBUTION_NUM_PROCESSES="2",
            KERAS_DISTRIBUTION_PROCESS_ID="1",
        ),
    ]
    try:
        outputs = [_finish(p, timeout=300) for p in procs]
    finally:
        _stop(procs)
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    chief_out = outputs[0][0]
    assert "cluster: process 0 of 2 (chief), 2 devices in all, global batch 32 (16 per " in (
        chief_out
    )
    assert "cluster: 2 processes, " in chief_out and "examples/s (the slowest process's" in (
        chief_out
    )
    assert "weights identical on every process" in chief_out

    chief, other = _report(outputs[0][0]), _report(outputs[1][0])
    assert "/worker1/" in outputs[1][0].split("json: ")[1].split()[0]
    strategy = chief["context"]["strategy"]
    assert (strategy["name"], strategy["processes"], strategy["replicas"]) == (
        "data_parallel",
        2,
        2,
    )
    assert (strategy["global_batch"], strategy["per_process_batch"]) == (32, 16)
    assert chief["steps"]["batch_size"] == 32  # examples/s counts the cluster's batch
    cluster = chief["cluster"]
    assert cluster["num_workers"] == 2 and cluster["cluster_examples_per_sec"] > 0
    assert cluster["slowest"] in (0, 1) and cluster["spread"] >= 1.0
    # Both processes trained 24 steps and hold the same weights (their fingerprints, sent to
    # every process when training ended), and both say so.
    rows = cluster["workers"]
    assert [r["steps"] for r in rows] == [24, 24]
    assert rows[0]["weights"] == rows[1]["weights"] and len(rows[0]["weights"]) == 24
    assert other["cluster"]["workers"][1]["weights"] == rows[0]["weights"]
    assert chief["metrics"] == other["metrics"]  # the same global loss, on both

    merged = subprocess.run(
        [sys.executable, "-m", "toolkit", "merge", *(o.split("json: ")[1].split()[0]
                                                      for o, _ in outputs)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert merged.returncode == 0, merged.stderr
    assert "cluster: 2 workers" in merged.stdout


@pytest.mark.parametrize("alone", [0, 1])
def test_a_worker_that_never_joins_is_named_in_one_line_after_cluster_wait(tmp_path, alone):
    hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
    out = subprocess.run(
        _recipe(",".join(hosts), alone, "--cluster_wait=3", f"--report_dir={tmp_path / 'r'}"),
        capture_output=True, text=True, timeout=180, env=_env(),
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-3000:]
    (said,) = _errors(out.stderr)
    if alone == 0:
        assert f"worker 1 at {hosts[1]} did not join within --cluster_wait=3 s" in said, said
    else:
        assert f"worker 0 (the coordinator, at {hosts[0]}) did not answer within" in said, said
    assert "Traceback" not in out.stderr and not (tmp_path / "r").exists()


def test_the_coordinator_port_in_use_is_one_line(tmp_path):
    hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
    holder = socket.socket()
    holder.bind(("", int(hosts[0].rsplit(":", 1)[1])))
    holder.listen(1)
    try:
        out = subprocess.run(
            _recipe(",".join(hosts), 0, "--cluster_wait=5", f"--report_dir={tmp_path}"),
            capture_output=True, text=True, timeout=180, env=_env(),
        )  # fmt: skip
    finally:
        holder.close()
    assert out.returncode == 1, out.stderr[-3000:]
    (said,) = _errors(out.stderr)
    assert f"worker 0 listens at {hosts[0]}, but port" in said and "is in use" in said, said


def test_workers_started_with_other_hosts_or_batch_both_say_what_differs(tmp_path):
    a, b, c = (f"127.0.0.1:{p}" for p in free_ports(3))
    procs = [
        _start(_recipe(f"{a},{b}", 0, "--cluster_wait=60", f"--report_dir={tmp_path}")),
        _start(
            _recipe(
                f"{a},{c}", 1, "--cluster_wait=60", "--batch_size=64", f"--report_dir={tmp_path}"
            )
        ),
    ]
    try:
        outputs = [_finish(p, timeout=180) for p in procs]
    finally:
        _stop(procs)
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 1, err[-3000:]
        (said,) = _errors(err)
        assert "worker 1 was started with --batch_size=64 (worker 0 has 32)" in said, said
        assert f"--worker_hosts={a},{c} (worker 0 has {a},{b})" in said, said


def test_a_batch_that_does_not_split_over_the_processes_fails_before_anyone_waits(tmp_path):
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    start = time.monotonic()
    out = subprocess.run(
        _recipe(hosts, 1, "--batch_size=33", f"--report_dir={tmp_path}"),
        capture_output=True, text=True, timeout=180, env=_env(),
    )  # fmt: skip
    assert out.returncode == 1
    (said,) = _errors(out.stderr)
    assert "--batch_size=33 (the global batch) must split evenly over the 2 processes" in said
    assert time.monotonic() - start < 120  # the default --cluster_wait is 600 s


def _backup_epoch(backup: Path) -> int:
    try:
        return int(json.loads((backup / "training_metadata.json").read_text())["epoch"])
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.long
def test_a_killed_worker_ends_the_others_in_one_line_and_the_restarted_cluster_resumes(
    tmp_path, backend
):
    """A worker SIGKILLed after epoch 2's backup: the other ends in one line, and the cluster
    started again resumes from the backup to the requested epochs.

    40-65 s on 2 cores, by what it checks: four recipe processes (a cluster of two, killed,
    then started again), each importing its framework and compiling its step."""
    backup = tmp_path / "backup"
    flags = [
        "--epochs=8", "--train_steps=40", "--batch_size=64", f"--backup_dir={backup}",
        f"--report_dir={tmp_path / 'runs'}",
    ]  # fmt: skip
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    procs = [_start(_recipe(hosts, i, *flags, backend=backend), core=i) for i in range(2)]
    try:
        deadline = time.monotonic() + 240
        while _backup_epoch(backup) < 2 and all(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "no backup of epoch 2 within 240 s"
            time.sleep(0.01)
        for i, p in enumerate(procs):  # what it said, else the test could not say why
            assert p.poll() is None, f"worker {i} ended before the kill: {_finish(p, 0)[1][-3000:]}"
        procs[1].send_signal(signal.SIGKILL)  # a lost machine: no report, no goodbye
        killed = time.monotonic()
        _, err = _finish(procs[0], timeout=120)
        ended_in = time.monotonic() - killed
    finally:
        _stop(procs)
    assert procs[1].returncode == -signal.SIGKILL
    assert procs[0].returncode == 1, err[-3000:]
    (said,) = _errors(err)
    assert "worker 0 of 2: another process of the cluster is gone, so training stopped" in said
    assert "the partial report is in" in said and ended_in < 60
    killed_at = _backup_epoch(backup)
    assert 2 <= killed_at < 8

    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))  # the old ports may linger
    procs = [_start(_recipe(hosts, i, *flags, backend=backend), core=i) for i in range(2)]
    try:
        outputs = [_finish(p, timeout=300) for p in procs]
    finally:
        _stop(procs)
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    chief = _report(outputs[0][0])
    resume = chief["context"]["resume"]
    assert resume["resumed"] and resume["from_epoch"] == killed_at
    assert chief["steps"]["total_steps"] == (8 - killed_at) * 40
    assert chief["cluster"]["same_weights"] is True
    assert f"resumed from epoch {killed_at}" in outputs[1][0]  # worker 1 restored it too


def test_pytorch_on_a_keras_without_its_distribution_says_what_it_needs_in_one_line(tmp_path):
    """On a Keras whose PyTorch backend has no ``keras.distribution`` (3.15): one line naming
    the Keras it needs and what works instead, before anyone waits (worker 1 would wait for
    worker 0), and nothing written."""
    pytest.importorskip("torch")
    if cluster_backend_missing("torch") is None:
        pytest.skip("the installed Keras trains PyTorch over processes")
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    out = subprocess.run(
        _recipe(hosts, 1, f"--report_dir={tmp_path / 'r'}", backend="torch"),
        capture_output=True, text=True, timeout=180, env=_env(),
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-3000:]
    (said,) = _errors(out.stderr)
    assert "--backend=torch --distribution_strategy=data_parallel needs Keras 3.16 or later " in (
        said
    )
    assert "(keras-nightly)" in said and "use --backend=jax" in said, said
    assert "Traceback" not in out.stderr and not (tmp_path / "r").exists()


@pytest.mark.long
def test_a_killed_coordinator_ends_the_others_within_seconds(tmp_path, backend):
    """Worker 0 holds the cluster's coordinator (JAX's coordination service; PyTorch's
    TCPStore): when it dies the others end at once and without a hang (JAX ends them itself,
    with a fatal log line; on PyTorch gloo's lost peer is the toolkit's one line, status 1)."""
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    flags = ["--epochs=50", "--train_steps=40", "--log_steps=1", f"--report_dir={tmp_path}"]
    procs = [_start(_recipe(hosts, i, *flags, backend=backend), core=i) for i in range(2)]
    try:
        deadline = time.monotonic() + 240
        # Into training: worker 0's steps are the cluster's, each one an all-reduce with 1.
        while "/step over the last" not in _said_so_far(procs[0]) and procs[0].poll() is None:
            assert time.monotonic() < deadline, "worker 0 logged no step within 240 s"
            time.sleep(0.05)
        procs[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        procs[1].wait(timeout=120)
        ended_in = time.monotonic() - killed
        _, err = _finish(procs[1], timeout=10)
    finally:
        _stop(procs)
    assert procs[1].returncode != 0 and ended_in < 60, err[-3000:]
    if backend == "torch":
        assert procs[1].returncode == 1, err[-3000:]
        (said,) = _errors(err)
        assert "worker 1 of 2: another process of the cluster is gone" in said


OWN_MODEL = """
import json, os, sys
os.environ["KERAS_BACKEND"] = "jax"
index, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
import keras
keras.distribution.initialize(f"127.0.0.1:{port}", 2, index)
import jax
import numpy as np
from toolkit import profile
from toolkit.data import array_batches
from toolkit.distribute.processes import process_slice

keras.utils.set_random_seed(1)
keras.distribution.set_distribution(
    keras.distribution.DataParallel(devices=jax.devices(), auto_shard_dataset=False)
)
rng = np.random.default_rng(0)
x, y = rng.normal(size=(512, 8)).astype("float32"), rng.integers(0, 2, 512)
data = process_slice(array_batches((x, y), 32, drop_remainder=True), index, 2)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
with profile("own", report_dir=out, batch_size=32, warmup_steps=1) as prof:
    model.fit(data, epochs=2, callbacks=prof.callbacks, verbose=0)
print("CLUSTER", json.dumps(prof.report.cluster.to_dict()))
"""


@pytest.mark.long
def test_your_own_model_over_processes_gets_the_cluster_report_from_profile(tmp_path):
    script = tmp_path / "own.py"
    script.write_text(OWN_MODEL)
    (port,) = free_ports(1)
    procs = [
        _start([sys.executable, str(script), str(i), str(port), str(tmp_path / f"r{i}")])
        for i in range(2)
    ]
    try:
        outputs = [_finish(p, timeout=300) for p in procs]
    finally:
        _stop(procs)
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    clusters = [json.loads(out.split("CLUSTER ")[1]) for out, _ in outputs]
    assert clusters[0]["num_workers"] == 2 and clusters[0]["same_weights"] is True
    assert [r["steps"] for r in clusters[0]["workers"]] == [32, 32]  # 16 batches × 2 epochs
    assert clusters[1]["process_index"] == 1 and clusters[0]["cluster_examples_per_sec"] > 0
