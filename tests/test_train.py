"""toolkit.runner.train: config validation, and real runs of the one runner on a tiny task; a
run that timed nothing (``untimed``, exit 3) and weights files that are none, as a user meets
them."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.test_faults import _last, _report, _run
from toolkit.report import RunReport
from toolkit.runner import train
from toolkit.runner.config import SMOKE_STEPS, ConfigError, TrainConfig


def tiny_task(keras, n=100, features=6, validation=True):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, features)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    traces = []

    class SnapshotAfterFirstStep(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch > 0 and "after_first" not in traces_at:
                traces_at["after_first"] = len(traces)

    traces_at: dict[str, int] = {}

    def build_model():
        model = keras.Sequential(
            [
                keras.Input((features,)),
                keras.layers.Dense(8, activation="relu"),
                keras.layers.Dense(2),
            ]
        )
        original = model.train_step

        def counting_train_step(*args):  # (data), or (state, data) on JAX
            traces.append(1)  # Python runs this only while tracing
            return original(*args)

        model.train_step = counting_train_step
        return model

    task = train.Task(
        name="tiny",
        build_model=build_model,
        train=(x, y),
        validation=(x[:30], y[:30]) if validation else None,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return task, traces, traces_at, SnapshotAfterFirstStep


def test_tensorboard_needs_a_run_directory():
    config = TrainConfig(tensorboard=True, report_dir=None)
    with pytest.raises(ConfigError, match="--tensorboard writes into the run's directory"):
        config.validate()


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("epochs", 0, "--epochs must be an integer >= 1"),
        ("batch_size", -3, "--batch_size"),
        ("steps_per_execution", 0, "--steps_per_execution"),
        ("steps_per_epoch", 0, r"--train_steps \(steps_per_epoch\) must be >= 1, got 0"),
        ("fused_steps", 0, "--fused_steps must be an integer >= 1"),
        ("warmup_steps", -1, "--warmup_steps"),
        ("profile_steps", (5, 5), "--profile_steps"),
        (
            "verbose",
            3,
            r"--log_verbosity \(verbose\) must be 0, 1 or 2 \(or unset.*\), got 3",
        ),
        ("precision", "float64", r"--precision must be one of float32, mixed_float16"),
        ("task_index", -1, "--task_index must be >= 0"),
        ("shard_policy", "rows", "--shard_policy must be one of data, file"),
        ("distribution_strategy", "tpu", "--distribution_strategy must be one of"),
        ("device", "tpu", "unknown device 'tpu'"),
    ],
)
def test_config_errors_name_the_flag(field, value, match):
    config = TrainConfig(**{field: value})
    with pytest.raises(ConfigError, match=match):
        config.validate()
    # The runner gives the same one line (as a SetupError) before anything trains.
    with pytest.raises(train.SetupError, match=match):
        train.run(None, config)


def test_run_writes_report_and_never_retraces(tmp_path, keras):
    # 100 examples, batch 16: the partial last batch is dropped, so shapes stay static.
    task, traces, traces_at, snapshot = tiny_task(keras)
    config = TrainConfig(epochs=3, batch_size=16, report_dir=str(tmp_path), warmup_steps=2)
    result = train.run(task, config, callbacks=[snapshot()])
    assert result.report.status == "complete"
    assert result.report.steps.total_steps == 3 * (100 // 16)
    assert result.report.steps.batch_size == 16
    assert "val_accuracy" in result.report.metrics
    assert RunReport.load(result.run_dir) == result.report
    assert result.report.args["batch_size"] == 16
    # The first call may trace twice (tf.function retraces once when it creates the optimizer's
    # variables); after it, nothing may trace again: not epoch 2, not validation.
    assert "after_first" in traces_at
    assert len(traces) == traces_at["after_first"], f"retraced after warm-up: {len(traces)}"


def test_run_with_steps_per_execution_jit_and_steps_per_epoch(tmp_path, keras):
    task, traces, traces_at, snapshot = tiny_task(keras, validation=False)
    config = TrainConfig(
        epochs=2,
        batch_size=10,
        steps_per_execution=3,
        jit_compile=True,
        steps_per_epoch=7,  # repeats the data: more steps than one pass has
        report_dir=None,
        warmup_steps=0,
    )
    result = train.run(task, config, callbacks=[snapshot()])
    s = result.report.steps
    assert s.total_steps == 14 and s.steps_per_execution == 3
    assert result.run_dir is None and result.paths == {}
    assert len(traces) == traces_at["after_first"]


def test_smoke_shrinks_the_run():
    config = TrainConfig(epochs=50, warmup_steps=5, profile_steps=(3, 9), smoke=True)
    smoke = config.effective()
    assert (smoke.epochs, smoke.steps_per_epoch, smoke.warmup_steps) == (1, SMOKE_STEPS, 1)
    # A trace window is kept where it fits the smoke run (clipped, with a warning), dropped
    # with a warning where it cannot.
    assert smoke.profile_steps == (3, SMOKE_STEPS)
    late = TrainConfig(profile_steps=(SMOKE_STEPS, 30), smoke=True).effective()
    assert late.profile_steps is None
    assert TrainConfig(profile_steps=(2, 4), smoke=True).effective().profile_steps == (2, 4)
    assert TrainConfig(epochs=50).effective().epochs == 50


def test_effective_says_its_changes_unless_told_not_to(caplog):
    """A check before the run (a recipe's backend check, before TensorFlow loads) reads the
    config the run will have, and says nothing: the run says each change once."""
    import logging

    config = TrainConfig(steps_per_epoch=2, steps_per_execution=4, profile_steps=(30, 40),
                         smoke=True)  # fmt: skip
    with caplog.at_level(logging.WARNING):
        quiet = config.effective(say=False)
    assert not caplog.records, caplog.records
    assert quiet == config.effective()
    assert quiet.steps_per_execution == 2 and quiet.profile_steps is None
    assert any("--steps_per_execution=4" in r.getMessage() for r in caplog.records)


@pytest.mark.every_backend
def test_fused_steps_train_exactly_like_separate_steps(keras):
    """K steps fused in one compiled call (a tf.while_loop; a jax.lax.scan) see the same
    batches in the same order and end at the same weights as K separate steps; StepTimer and
    the optimizer count every step, and the step is traced once."""
    from toolkit import backend

    if backend.name() == "torch":
        pytest.skip("Keras's PyTorch backend compiles no step to put a loop in")
    weights, reports = {}, {}
    for fused in (1, 4):
        task, traces, traces_at, snapshot = tiny_task(keras, validation=False)
        task.optimizer = lambda: keras.optimizers.SGD(0.1)
        config = TrainConfig(
            epochs=2,
            batch_size=5,
            fused_steps=fused,
            steps_per_epoch=12,
            warmup_steps=0,
            report_dir=None,
            count_flops=False,
            seed=1,  # the same initial weights in both
        )
        result = train.run(task, config, callbacks=[snapshot()])
        weights[fused] = [w.numpy() for w in result.model.weights]
        reports[fused] = result.report
        assert int(result.model.optimizer.iterations.numpy()) == 24
        assert len(traces) == traces_at["after_first"]  # no retrace after the first call
    for a, b in zip(weights[1], weights[4], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    s = reports[4].steps
    assert s.total_steps == 24 and s.first_step_steps == 4 and s.batch_size == 5
    assert all(c[1] == 4 for c in reports[4].timeline)  # 4 steps per Keras batch
    assert reports[4].metrics["loss"] == pytest.approx(reports[1].metrics["loss"], rel=1e-4)


def test_a_seeded_run_is_the_same_whatever_ran_before_it(keras):
    """The global seed is set before the data: a seeded run shuffles the same order and ends
    at the same weights after anything that left another global seed behind (a tf.data
    shuffle seed pairs with the global one)."""
    weights = []
    for earlier in (7, 99):
        keras.utils.set_random_seed(earlier)  # what an earlier run in the process left
        task, *_ = tiny_task(keras, validation=False)
        task.optimizer = lambda: keras.optimizers.SGD(0.1)
        config = TrainConfig(epochs=2, batch_size=10, report_dir=None, count_flops=False, seed=3)
        result = train.run(task, config)
        weights.append([w.numpy() for w in result.model.weights])
    for a, b in zip(*weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_fused_steps_settings():
    with pytest.raises(ValueError, match="--train_steps=10 must be a multiple of --fused_steps=4"):
        TrainConfig(fused_steps=4, steps_per_epoch=10).validate()
    smoke = TrainConfig(fused_steps=3, smoke=True).effective()
    assert smoke.steps_per_epoch == 9  # 8 rounded up to whole fused calls


def test_a_call_longer_than_the_epoch_runs_the_epoch_and_ends(keras, caplog):
    """``--steps_per_execution`` past an epoch's steps on a repeated dataset would run every
    step of the call (a million for 1000000): it becomes one call per epoch, with a note."""
    config = TrainConfig(steps_per_epoch=20, steps_per_execution=1_000_000)
    assert config.effective().steps_per_execution == 20
    assert TrainConfig(steps_per_epoch=20, fused_steps=4, steps_per_execution=99).effective(
    ).steps_per_execution == 5  # fmt: skip
    assert TrainConfig(steps_per_execution=99).effective().steps_per_execution == 99  # one pass
    assert TrainConfig(steps_per_epoch=20, steps_per_execution=20).effective() == TrainConfig(
        steps_per_epoch=20, steps_per_execution=20
    )
    task, *_ = tiny_task(keras, validation=False)
    config = TrainConfig(
        epochs=2, batch_size=10, steps_per_epoch=6, steps_per_execution=1_000_000,
        warmup_steps=0, report_dir=None, count_flops=False,
    )  # fmt: skip
    with caplog.at_level("WARNING"):
        result = train.run(task, config)
    assert result.report.steps.total_steps == 12
    assert int(result.model.optimizer.iterations.numpy()) == 12
    assert "--steps_per_execution=1000000 is more than an epoch's 6 steps" in caplog.text


def test_precision_strategy_synthetic_data_and_the_report(tmp_path, keras):
    task, *_ = tiny_task(keras)
    task.num_classes = 2
    config = TrainConfig(
        epochs=2,
        batch_size=16,
        report_dir=str(tmp_path),
        device="cpu",
        precision="mixed_bfloat16",
        distribution_strategy="mirrored",
        use_synthetic_data=True,
        warmup_steps=1,
    )
    result = train.run(task, config)
    context = result.report.context
    assert context.device.kind == "cpu" and context.precision == "mixed_bfloat16"
    assert context.backend == "tensorflow"
    strategy = context.strategy
    assert (strategy.name, strategy.replicas) == ("mirrored", 1)
    assert (strategy.global_batch, strategy.per_replica_batch) == (16, 16)
    assert strategy.shard_policy == "data" and strategy.data_service is None
    assert context.to_dict()["cluster"] == {
        "task_type": "worker",
        "task_index": 0,
        "num_workers": 1,
        "is_chief": True,
        "workers": [],
    }
    assert context.synthetic_data is True
    assert all(f.severity in ("error", "warning", "info") for f in context.preflight)
    assert result.model.layers[0].compute_dtype == "bfloat16"
    assert str(keras.mixed_precision.global_policy().name) == "float32"  # restored
    assert result.report.steps.total_steps == 2 * (100 // 16)  # synthetic keeps the epoch length
    assert "precision mixed_bfloat16, strategy mirrored" in result.report.summary()
    loaded = RunReport.load(result.run_dir)
    assert loaded.context == context and loaded.schema_version == 2


def test_setup_problems_are_one_clear_error(keras):
    task, *_ = tiny_task(keras)
    with pytest.raises(
        train.SetupError,
        match="unknown device 'metal' on --backend=tensorflow: TensorFlow sees no Metal GPU",
    ):
        train.run(task, TrainConfig(device="metal", report_dir=None))
    with pytest.raises(train.SetupError, match="--batch_size=512 is larger"):
        train.run(task, TrainConfig(batch_size=512, report_dir=None))
    unknown_length = tf.data.Dataset.from_tensor_slices(task.train).filter(lambda x, y: True)
    task.train = unknown_length
    with pytest.raises(train.SetupError, match="length is unknown.*give --train_steps"):
        train.run(task, TrainConfig(use_synthetic_data=True, report_dir=None))


def test_run_takes_the_config_one_way_through_the_runner(tmp_path, keras):
    """The config's way from ``run``, as a newcomer follows it: every call in toolkit/ that is
    handed the config, in order. ``run`` is the hub: each other file is entered once, from
    ``runner/train.py``, and none calls back into it, so the way reads in one direction."""
    task, *_ = tiny_task(keras)
    config = TrainConfig(epochs=1, batch_size=16, report_dir=str(tmp_path), warmup_steps=1)
    stops: list[tuple[str, str, str]] = []  # (file, function, caller's file)

    package = os.path.dirname(train.__file__.rsplit(os.sep + "runner" + os.sep, 1)[0]) + os.sep

    def where(code):  # the path inside toolkit/, wherever the checkout lives
        name = code.co_filename
        if not name.startswith(package + "toolkit" + os.sep):
            return None
        return name[len(package) + len("toolkit") + 1 :].replace(os.sep, "/")

    def watch(frame, event, arg):
        code = frame.f_code
        if event != "call" or where(code) is None:
            return
        handed = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if any(isinstance(frame.f_locals.get(n), TrainConfig) for n in handed):
            stops.append((where(code), code.co_name, where(frame.f_back.f_code) or "outside"))

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        train.run(task, config)
    finally:
        sys.setprofile(previous)
    assert stops[0][:2] == ("runner/train.py", "run")
    files = [f for i, (f, _, _) in enumerate(stops) if i == 0 or stops[i - 1][0] != f]
    others = [f for f in files if f != "runner/train.py"]
    assert len(others) == len(set(others)), f"a file entered twice on the way: {files}"
    assert {"runner/config.py", "runner/_data.py"} <= set(others), files
    back = {(c, f, n) for f, n, c in stops[1:] if f == "runner/train.py" and c != f}
    assert not back, f"called back into runner/train.py: {sorted(back)}"


def test_the_report_accounts_for_the_whole_fit_call(tmp_path, keras):
    # Repeated data (steps_per_epoch): one input iterator lives through the fit and is
    # destroyed as fit returns, the exit the report shows beside the start-up and the steps.
    task, _, _, _ = tiny_task(keras)
    config = TrainConfig(
        epochs=2, batch_size=10, steps_per_epoch=5, report_dir=str(tmp_path), warmup_steps=1
    )
    report = train.run(task, config).report
    parts = report.fit_call
    assert parts.counted_from == "fit call"
    shown = [parts.start_up_s, parts.steps_s, parts.exit_s]
    assert all(v is not None and v >= 0 for v in shown), parts
    assert sum(shown) == pytest.approx(parts.whole_s, abs=1e-9)
    assert sum(row[0] for row in report.timeline) <= parts.steps_s + 1e-6
    assert report.fit_seconds <= parts.whole_s
    assert "fit call: " in report.to_markdown()
    # The runner's ledger: the same call, in parts that add up to it.
    ledger = report.ledger
    # the ledger keeps microseconds (6 decimals): up to half of one apart (0.465028 against
    # 0.46502752 failed the default relative 1e-6)
    assert ledger.timed_call
    assert ledger.wall_s == pytest.approx(parts.whole_s, abs=5e-7 + 1e-12)
    assert sum(v for v in ledger.part_seconds.values() if v is not None) == pytest.approx(
        ledger.wall_s, abs=1e-4
    )
    assert "run ledger (fit call " in report.summary()
    assert RunReport.load(tmp_path / os.listdir(tmp_path)[0]) == report


# -------------------------------------------------------------- untimed runs, bad weights files

SMOKE = ["--smoke", "--epochs=1"]


def test_a_run_that_timed_nothing_is_untimed_and_no_gate_passes_on_it(tmp_path):
    """Every step a first call or warm-up: the run is `untimed` (exit 3, one line), not
    `complete`; compare --fail_on_slower against it cannot tell, and fails."""
    out = _run(["--epochs=1", "--train_steps=30", "--warmup_steps=1000",
                f"--report_dir={tmp_path}"])  # fmt: skip
    assert out.returncode == 3, out.stderr[-2000:]
    last = _last(out)
    assert last.startswith("error: NoTimedSteps: all 30 step(s) were the first call, the 1000")
    assert "lower --warmup_steps" in last and "Traceback" not in out.stderr
    run_dir, data = _report(tmp_path)
    assert data["status"] == "untimed" and f"the report is in {run_dir}" in last
    gate = _run([sys.executable, "-m", "toolkit", "compare", "--fail_on_slower",
                 str(run_dir), str(run_dir)])  # fmt: skip
    assert gate.returncode == 1 and "verdict: unknown" in gate.stdout, gate.stderr
    assert _last(gate).startswith("compare: cannot tell whether B is slower")
    plain = _run([sys.executable, "-m", "toolkit", "compare", str(run_dir), str(run_dir)])
    assert plain.returncode == 0 and "B is an untimed run (NoTimedSteps" in plain.stdout


@pytest.mark.parametrize("content", [b"", os.urandom(4096)], ids=["empty", "random"])
def test_init_weights_that_are_not_hdf5_are_not_blamed_on_another_model(tmp_path, content):
    weights = tmp_path / "start.weights.h5"
    weights.write_bytes(content)
    out = _run([*SMOKE, f"--init_weights={weights}", f"--report_dir={tmp_path / 'r'}"])
    assert out.returncode == 1, out.stderr[-2000:]
    assert "it is not a Keras weights file" in _last(out)
    assert "another model" not in _last(out)
