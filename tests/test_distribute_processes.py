"""Past one process, for real: workers, a tf.data service and a killed run, all on 127.0.0.1.

Every process is started by the test, bounded in time and stopped in ``finally``.
MultiWorkerMirroredStrategy runs under tf_keras (``TF_USE_LEGACY_KERAS=1``): Keras 3's fit
cannot train under it (see toolkit.distribute).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import free_ports, read_until

# Keras's next release (make test-next) is tried on the tests that train under Keras 3; the
# multi_worker_mirrored ones run under tf_keras, which the nightly does not change.

WORKER = """
import sys
import numpy as np
from recipes import mlp
from toolkit.runner import train
from toolkit.runner.config import TrainConfig

index, hosts, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
config = TrainConfig(
    epochs=2, steps_per_epoch=6, batch_size=32, device="cpu", count_flops=False, warmup_steps=1,
    distribution_strategy="multi_worker_mirrored", worker_hosts=hosts, task_index=index,
    report_dir=out + "/runs",
)
result = train.run(mlp.build_task(hidden_units=16), config)
weights = np.concatenate([w.ravel() for w in result.model.get_weights()])
np.save(f"{out}/weights{index}.npy", weights)
print("steps", int(result.model.optimizer.iterations.numpy()), "report", result.paths["json"])
"""


def _load(path: str) -> dict:
    return json.loads(Path(path).read_text())


RESUMABLE_WORKER = """
import sys
import time
from recipes import mlp
from toolkit.core import compat
from toolkit.runner import train
from toolkit.runner.config import TrainConfig

index, hosts, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
hold = sys.argv[4:] == ["hold"]  # waits after epoch 1 to be killed there, however late
keras = compat.keras()


class SayEpoch(keras.callbacks.Callback):  # runs after BackupAndRestore has saved the epoch
    def on_epoch_end(self, epoch, logs=None):
        print("epoch", epoch, flush=True)
        if hold and epoch == 1:
            time.sleep(900)


config = TrainConfig(
    epochs=4, steps_per_epoch=50, batch_size=64, device="cpu", count_flops=False,
    distribution_strategy="multi_worker_mirrored", worker_hosts=hosts, task_index=index,
    report_dir=out + "/runs", backup_dir=out + "/backup",
)
result = train.run(mlp.build_task(hidden_units=16), config, callbacks=[SayEpoch()])
print("report", result.paths["json"], flush=True)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(extra)
    return env


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)
        if p.poll() is None:
            p.kill()
            p.wait()


def test_two_workers_train_in_sync_and_their_reports_merge(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), hosts, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(TF_USE_LEGACY_KERAS="1"),
        )
        for i in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=240) for p in procs]
    finally:
        _stop(procs)
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert "steps 12 " in out
    w0, w1 = np.load(tmp_path / "weights0.npy"), np.load(tmp_path / "weights1.npy")
    np.testing.assert_array_equal(w0, w1)  # all-reduced gradients: the same model everywhere

    reports = [out.split("report ")[-1].strip() for out, _ in outputs]
    assert "/worker1/" in reports[1] and "/worker" not in reports[0]
    chief = _load(reports[0])
    assert (
        chief["context"]["cluster"]["is_chief"] and chief["context"]["cluster"]["num_workers"] == 2
    )
    assert chief["context"]["strategy"]["replicas"] == 2
    assert chief["context"]["strategy"]["per_replica_batch"] == 16
    assert chief["steps"]["batch_size"] == 32  # the global batch: examples/sec is the cluster's
    merged = subprocess.run(
        [sys.executable, "-m", "toolkit", "merge", *reports],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert merged.returncode == 0, merged.stderr
    rows = [line.split() for line in merged.stdout.splitlines()]  # a terminal's table
    assert ["0", "yes", "complete", "12"] in [r[:4] for r in rows], merged.stdout
    assert ["1", "complete", "12"] in [r[:3] for r in rows], merged.stdout
    assert "cluster: 2 workers" in merged.stdout


@pytest.mark.next_keras
@pytest.mark.long
def test_data_service_serves_the_same_elements_as_the_local_pipeline(tmp_path):
    from recipes import mlp
    from toolkit import distribute
    from toolkit.runner import train
    from toolkit.runner.config import TrainConfig

    procs = []
    try:
        dispatcher, address = distribute.spawn_data_service(port=0, env=_env())
        procs.append(dispatcher)
        worker, _ = distribute.spawn_data_service(dispatcher=address, env=_env())
        procs.append(worker)

        task = mlp.build_task(hidden_units=16)
        # tf.data on every backend: the service serves tf.data (auto picks Grain on JAX).
        local = TrainConfig(batch_size=64, seed=3, data_loader="tf_data")
        served = TrainConfig(batch_size=64, seed=3, data_loader="tf_data", data_service=address)
        ours = [(x.numpy(), y.numpy()) for x, y in train.input_pipeline(task, local)]
        theirs = [(x.numpy(), y.numpy()) for x, y in train.input_pipeline(task, served)]
        assert len(ours) == len(theirs) > 0
        for (x0, y0), (x1, y1) in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(x0, x1)
            np.testing.assert_array_equal(y0, y1)

        run = subprocess.run(
            [
                sys.executable, "-m", "recipes.mlp", "--smoke", "--count_flops=false",
                f"--data_service={address}", f"--report_dir={tmp_path}",
            ],
            capture_output=True, text=True, timeout=180, env=_env(),
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        report = _load(run.stdout.split("json: ")[1].split()[0])
        assert report["context"]["strategy"]["data_service"] == address
        assert report["context"]["strategy"]["data_service_mode"] == "parallel_epochs"
    finally:
        _stop(procs)


@pytest.mark.parametrize("alone", [0, 1])
def test_a_worker_whose_peer_never_starts_fails_in_one_line_after_cluster_wait(tmp_path, alone):
    """TensorFlow alone would wait an hour on worker 1 and for ever on worker 0, silently."""
    hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
    out = subprocess.run(
        [
            sys.executable, "-m", "recipes.mlp",
            "--distribution_strategy=multi_worker_mirrored",
            f"--worker_hosts={','.join(hosts)}", f"--task_index={alone}", "--cluster_wait=5",
            "--count_flops=false", f"--report_dir={tmp_path / 'runs'}",
        ],
        capture_output=True, text=True, timeout=300, env=_env(TF_USE_LEGACY_KERAS="1"),
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-3000:]
    # TensorFlow's coordination agent logs its shutdown after it: the error is the one line
    (said,) = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    peer = 1 - alone
    assert said.startswith(f"error: --cluster_wait=5: worker {alone} of 2 waited 5 s"), said
    assert f"worker {peer} at {hosts[peer]} does not answer" in said
    assert "Traceback" not in out.stderr and "== mlp" not in out.stdout  # nothing trained
    assert not (tmp_path / "runs").exists()


def _metadata_epoch(backup_dir) -> int:
    path = backup_dir / "training_metadata.json"
    try:
        return int(json.loads(path.read_text())["epoch"])
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.skipif(
    os.environ.get("TF_USE_LEGACY_KERAS") == "1", reason="reads Keras 3's backup metadata"
)
@pytest.mark.next_keras
@pytest.mark.long
def test_a_killed_run_resumes_from_its_backup_and_ends_at_the_requested_steps(tmp_path):
    backup, reports = tmp_path / "backup", tmp_path / "runs"
    epochs, steps = 6, 150
    command = [
        sys.executable, "-m", "recipes.mlp", f"--epochs={epochs}",
        f"--train_steps={steps}",
        "--batch_size=256", "--count_flops=false", f"--backup_dir={backup}",
        f"--report_dir={reports}",
    ]  # fmt: skip
    first = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env()
    )
    try:
        deadline = time.monotonic() + 180
        while _metadata_epoch(backup) < 2 and first.poll() is None:
            assert time.monotonic() < deadline, "no backup of epoch 2 within 180 s"
            time.sleep(0.005)
        first.send_signal(signal.SIGKILL)  # mid-run: no report, no cleanup, like a lost machine
        first.wait(timeout=30)
    finally:
        _stop([first])
    assert first.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    killed_at = _metadata_epoch(backup)
    assert 2 <= killed_at < epochs

    second = subprocess.run(command, capture_output=True, text=True, timeout=240, env=_env())
    assert second.returncode == 0, second.stderr[-3000:]
    report = _load(second.stdout.split("json: ")[1].split()[0])
    resume = report["context"]["resume"]
    assert resume["resumed"] and resume["from_epoch"] == killed_at
    assert resume["steps_before"] == killed_at * steps
    assert resume["steps_total"] == epochs * steps  # the requested steps, no more, no less
    assert report["steps"]["total_steps"] == (epochs - killed_at) * steps  # what this process ran
    assert "resumed from epoch" in second.stdout


@pytest.mark.long
def test_a_killed_worker_restarts_and_the_cluster_resumes_to_the_requested_steps(tmp_path):
    """Worker 1 is SIGKILLed after epoch 1 is backed up. Worker 0 notices (its peer stops
    sending heartbeats), fails with a partial report instead of hanging, and both are started
    again, as a cluster manager would: they resume from epoch 2 and end at 4 x 50 steps.

    40-70 s on 2 cores, by what it checks: four TensorFlow processes (two workers, then the
    two restarted), the survivor's wait for its peer's missing heartbeats included."""
    script = tmp_path / "worker.py"
    script.write_text(RESUMABLE_WORKER)
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))

    def start(index: int, *hold: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(script), str(index), hosts, str(tmp_path), *hold],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(TF_USE_LEGACY_KERAS="1"),
        )

    # Worker 1 holds at epoch 1's end, its backup saved, until it is killed: a test woken late
    # on a busy machine still kills it there, not an epoch later.
    procs = [start(0), start(1, "hold")]
    try:
        seen, said = read_until(procs[1], "epoch 1", timeout=240)
        if not seen:
            _stop(procs)
            pytest.fail(
                "worker 1 did not end epoch 1 within 240 s\n== worker 0:\n"
                f"{procs[0].stdout.read()[-3000:]}\n== worker 1:\n{said[-3000:]}"
            )
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(timeout=60)
        assert procs[1].returncode == -signal.SIGKILL, "worker 1 ended before it was killed"
        procs[0].communicate(timeout=180)  # the survivor must fail, not hang
        assert procs[0].returncode not in (0, None)
    finally:
        _stop(procs)
    (partial,) = [_load(p) for p in (tmp_path / "runs").glob("*/report.json")]
    assert partial["status"] == "partial" and "Unavailable" in partial["error"]

    procs = [start(0), start(1)]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        _stop(procs)
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out[-3000:]
    chief = _load(outputs[0].split("report ")[-1].strip())
    assert chief["context"]["resume"] == {
        "backup_dir": str(tmp_path / "backup"),
        "resumed": True,
        "steps_before": 100,
        "from_epoch": 2,
        "steps_total": 200,
    }
