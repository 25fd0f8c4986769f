"""Cluster, batch and sharding logic, the service address, and the runner's new settings."""

from __future__ import annotations

import json
import os

import pytest

from toolkit import distribute
from toolkit.core import compat
from toolkit.report import render_merged
from toolkit.runner.config import TrainConfig


def test_tf_config_from_worker_hosts():
    config = distribute.tf_config(["127.0.0.1:2222", " 127.0.0.1:2223"], 1)
    assert config == {
        "cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},
        "task": {"type": "worker", "index": 1},
    }
    with pytest.raises(distribute.DistributeError, match="--task_index=2 is not a worker"):
        distribute.tf_config(["a:1", "b:2"], 2)
    with pytest.raises(distribute.DistributeError, match="'b' is not host:port"):
        distribute.tf_config(["a:1", "b"], 0)
    with pytest.raises(distribute.DistributeError, match="--worker_hosts is empty"):
        distribute.tf_config([""], 0)


def test_cluster_from_flags_or_the_environment(monkeypatch):
    # setenv first records the original state, so the TF_CONFIG cluster_from_flags writes is
    # removed after the test and never leaks into later ones.
    monkeypatch.setenv("TF_CONFIG", "")
    monkeypatch.delenv("TF_CONFIG")
    assert distribute.cluster_from_flags() == distribute.Cluster()
    assert distribute.Cluster().is_chief and distribute.Cluster().num_workers == 1

    cluster = distribute.cluster_from_flags("h:1,h:2,h:3", 2)
    assert (cluster.task_index, cluster.num_workers, cluster.is_chief) == (2, 3, False)
    assert json.loads(os.environ["TF_CONFIG"])["task"] == {"type": "worker", "index": 2}
    assert distribute.cluster_from_flags() == cluster  # read back from TF_CONFIG

    monkeypatch.setenv(
        "TF_CONFIG",
        json.dumps(
            {
                "cluster": {"chief": ["c:1"], "worker": ["w:1"]},
                "task": {"type": "chief", "index": 0},
            }
        ),
    )
    assert distribute.cluster_from_flags().is_chief
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(distribute.DistributeError, match="TF_CONFIG is not valid"):
        distribute.cluster_from_flags()


def test_global_and_per_replica_batch():
    assert distribute.batch_sizes(64, 2) == (64, 32)
    assert distribute.batch_sizes(64, 1) == (64, 64)
    with pytest.raises(
        distribute.DistributeError, match="multiple of the 2 replicas in sync; use 62"
    ):
        distribute.batch_sizes(63, 2)


def test_shard_policy_is_set_explicitly():
    import tensorflow as tf

    ds = distribute.shard(tf.data.Dataset.range(4), "file")
    policy = ds.options().experimental_distribute.auto_shard_policy
    assert policy == tf.data.experimental.AutoShardPolicy.FILE
    with pytest.raises(distribute.DistributeError, match="--shard_policy must be one of"):
        distribute.shard(ds, "rows")


def test_service_address():
    assert distribute.service_address("grpc://localhost:5050") == ("grpc", "localhost:5050")
    for bad in ("localhost:5050", "http://x:1", "grpc://nohost"):
        with pytest.raises(distribute.DistributeError, match="grpc://host:port"):
            distribute.service_address(bad)


@pytest.mark.next_keras  # the one test here that reads Keras: the rest run once
@pytest.mark.skipif(compat.keras_flavor() == "tf_keras", reason="the Keras 3 refusal")
def test_multi_worker_under_keras3_is_a_one_line_error():
    with pytest.raises(distribute.DistributeError, match="TF_USE_LEGACY_KERAS=1"):
        distribute.make_strategy("multi_worker_mirrored")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"shard_policy": "rows"}, "--shard_policy must be one of data, file"),
        ({"data_service": "localhost:1"}, "grpc://host:port"),
        ({"data_service_mode": "sharded"}, "--data_service_mode must be one of"),
        ({"worker_hosts": "a:1,b:2", "task_index": 5}, "--task_index=5 is not a worker"),
        ({"distribution_strategy": "parameter_server"}, "--distribution_strategy must be one"),
        ({"cluster_wait": -1}, "--cluster_wait must be a number of seconds >= 0"),
    ],
)
def test_bad_distribution_settings_fail_validation(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**settings).validate()


def test_merge_renders_workers_and_the_cluster_pace():
    merged = {
        "workers": [
            {"task_index": 0, "is_chief": True, "status": "complete", "steps": 10,
             "p50_ms": 2.0, "examples_per_sec": 8000.0},
            {"task_index": 1, "is_chief": False, "status": "complete", "steps": 10,
             "p50_ms": 3.0, "examples_per_sec": 6000.0},
        ],
        "num_workers": 2,
        "cluster_examples_per_sec": 6000.0,
        "straggler": 1,
        "all_complete": True,
    }  # fmt: skip
    text = render_merged(merged)  # as report.json's dict, or merge_reports's record
    assert "| 0 | yes | complete | 10 | 2.00 | 8,000.0 |" in text
    assert (
        "cluster: 2 workers, 6,000.0 examples/s (the slowest worker's pace); straggler: worker 1"
        in text
    )


def test_a_data_service_that_cannot_start_says_why(tmp_path):
    """A dispatcher address that is none is refused before a process starts; a server that
    cannot start answers with its typed message, said in one line with the child's exit."""
    with pytest.raises(distribute.DistributeError, match=r"dispatcher='grpc://nowhere': give"):
        distribute.spawn_data_service(dispatcher="grpc://nowhere")
    blocked = tmp_path / "a file"
    blocked.write_text("not a directory")
    with pytest.raises(
        distribute.DistributeError, match=r"a dispatcher on port 0 did not start \(exit 1\): \w+"
    ):
        distribute.spawn_data_service(work_dir=str(blocked / "journal"))


def test_a_dispatcher_that_is_not_there_is_one_line_not_a_hang():
    import socket

    with socket.socket() as server:  # something listening: the wait returns at once
        server.bind(("127.0.0.1", 0))
        server.listen()
        distribute.wait_for_dispatcher(f"grpc://127.0.0.1:{server.getsockname()[1]}", 5)
        free = server.getsockname()[1]
    with pytest.raises(
        distribute.DistributeError, match=rf"no dispatcher answered at 127.0.0.1:{free}"
    ):
        distribute.wait_for_dispatcher(f"grpc://127.0.0.1:{free}", timeout=1)


def test_silent_workers_are_the_others_that_accept_no_connection():
    import socket

    with socket.socket() as up, socket.socket() as gone:
        up.bind(("127.0.0.1", 0))
        up.listen()
        gone.bind(("127.0.0.1", 0))  # bound, never listening: a worker that has not started
        hosts = [f"127.0.0.1:{s.getsockname()[1]}" for s in (up, gone)]
        me = distribute.Cluster("worker", 2, (*hosts, "127.0.0.1:1"))
        assert distribute.silent_workers(me, timeout=2) == [f"worker 1 at {hosts[1]}"]
