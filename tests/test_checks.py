"""The one validator (issue 58): a flag and a Python argument are checked in the same words by
``toolkit.core.checks``, whichever layer reads them, and the answers that were silently wrong
are right or said: one StepTimer over fits of two batch sizes, a batch larger than the data,
fused steps that leave batches out, a comparison of a smoke run, an unbuilt or unbatched
model's data. Real fits (small models, few steps) and real recipe runs, as a user meets them.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from tests.test_faults import _last, _report, _run
from toolkit.core import checks
from toolkit.core.checks import ConfigError, argument, check_choice, check_number
from toolkit.runner.config import TrainConfig

# ---------------------------------------------------------------------------- the validator


@pytest.mark.parametrize(
    ("name", "value", "kw", "words"),
    [
        ("--batch_size", math.nan, dict(integer=True, least=1), "an integer >= 1, got nan"),
        ("--batch_size", "32", dict(integer=True, least=1), "an integer >= 1, got '32'"),
        ("--batch_size", True, dict(integer=True, least=1), "an integer >= 1, got True"),
        ("--batch_size", 2.0, dict(integer=True, least=1), "an integer >= 1, got 2.0"),
        ("--port", 70000, dict(integer=True, least=1, most=65535), ">= 1 and <= 65535, got 70000"),
        ("--seed", -1, dict(integer=True, least=0, most=2**32 - 1), "<= 4294967295, got -1"),
        ("--z", 0, dict(above=0), "a finite number > 0, got 0"),
        ("--z", math.inf, dict(above=0), "a finite number > 0, got inf"),
    ],
)
def test_check_number_says_the_flag_what_it_must_be_and_what_it_got(name, value, kw, words):
    with pytest.raises(ConfigError, match=f"^{name} must be ") as caught:
        check_number(name, value, **kw)
    assert str(caught.value).endswith(words), str(caught.value)


def test_check_number_passes_what_is_in_range_numpy_counts_too_and_none():
    check_number("--batch_size", 32, integer=True, least=1)
    check_number("--batch_size", np.int64(32), integer=True, least=1)  # read from an array
    check_number("--min_rel", 0.5, least=0, most=0.9)
    check_number("--log_steps", None, integer=True, least=1)  # unset


def test_a_python_argument_is_named_as_the_user_wrote_it():
    with pytest.raises(
        ValueError, match=r"^StepTimer: batch_size must be an integer >= 1, got nan$"
    ):
        check_number(argument("StepTimer", "batch_size"), math.nan, integer=True, least=1)
    with pytest.raises(ConfigError, match=r"^pipeline: loader must be one of tf_data, grain"):
        check_choice(argument("pipeline", "loader"), "torch", ("tf_data", "grain"))
    check_choice("--verbose", 1, (0, 1, 2))
    with pytest.raises(ConfigError, match="got True"):
        check_choice("--verbose", True, (0, 1, 2))  # a bool is no 1


def test_the_runner_re_exports_the_one_validator():
    from toolkit.runner import config

    assert config.ConfigError is checks.ConfigError  # an existing `except ConfigError` catches
    assert config.check_number is checks.check_number
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        (dict(seed=-1), "--seed must be an integer >= 0 and <= 4294967295, got -1"),
        (dict(batch_size=math.nan), "--batch_size must be an integer >= 1, got nan"),
        (dict(batch_size="32"), "--batch_size must be an integer >= 1, got '32'"),
        (
            dict(worker_hosts="127.0.0.1:99999,127.0.0.1:2223"),
            "--worker_hosts: '127.0.0.1:99999' has port 99999: a port is 1..65535",
        ),
        (
            dict(worker_hosts="127.0.0.1:0,127.0.0.1:2223"),
            "--worker_hosts: '127.0.0.1:0' has port 0: a port is 1..65535",
        ),
    ],
)
def test_the_config_refuses_in_the_validator_s_words(settings, words):
    with pytest.raises(ConfigError) as caught:
        TrainConfig(**settings).validate()
    assert str(caught.value) == words


def test_a_port_out_of_range_exits_2_naming_worker_hosts_before_anything_loads(tmp_path):
    out = _run(
        [
            "--worker_hosts=127.0.0.1:99999,127.0.0.1:2223",
            "--backend=jax",
            "--distribution_strategy=data_parallel",
            f"--report_dir={tmp_path}",
        ],
        timeout=180,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "--worker_hosts" in _last(out) and "99999" in _last(out)
    assert "OverflowError" not in out.stderr and "Traceback" not in out.stderr
    assert not any(tmp_path.iterdir())  # refused before a run directory


# ---------------------------------------------------------------------------- StepTimer


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        (dict(batch_size=math.nan), "StepTimer: batch_size must be an integer >= 1, got nan"),
        (dict(batch_size="32"), "StepTimer: batch_size must be an integer >= 1, got '32'"),
        (dict(warmup_steps=-1), "StepTimer: warmup_steps must be an integer >= 0, got -1"),
        (dict(log_steps=0.5), "StepTimer: log_steps must be an integer >= 1, got 0.5"),
    ],
)
def test_step_timer_refuses_a_bad_argument_in_one_line(kw, words):
    from toolkit import StepTimer

    with pytest.raises(ConfigError) as caught:
        StepTimer(**kw)
    assert str(caught.value) == words


def _tiny(keras):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
    model.compile(
        optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


@pytest.mark.parametrize("given", [dict(batch_size=32), dict()])
def test_one_timer_over_two_fits_at_two_batch_sizes_reports_each_fit_s_rate(keras, given):
    """Arrays, as every backend's ``fit`` takes them: a batch-32 fit then a batch-64 fit. Each
    fit's examples/s is its own batch over its step time, and the first fit's statistics are
    kept in ``timer.fits``."""
    from toolkit import StepTimer

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64 * 6, 8)).astype("float32"), np.zeros(64 * 6, "int32")
    model, timer = _tiny(keras), StepTimer(warmup_steps=1, **given)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[timer])
    model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[timer])
    first, second = timer.fits
    assert (first.batch_size, first.total_steps) == (32, 12)
    assert (second.batch_size, second.total_steps) == (64, 6)
    assert timer.summary() == second and timer.batch_size == 64
    assert second.examples_per_sec == pytest.approx(64 / second.mean_s)
    assert first.examples_per_sec == pytest.approx(32 / first.mean_s)
    timer.reset()
    assert timer.fits == []


def test_a_timer_over_a_tf_data_fit_reads_that_fit_s_batch(keras, make_dataset):
    from toolkit import StepTimer

    timer = StepTimer(warmup_steps=1, data=make_dataset(6, batch_size=8))
    model = _tiny(keras)
    model.fit(make_dataset(6, batch_size=8), epochs=1, verbose=0, callbacks=[timer])
    model.fit(make_dataset(3, batch_size=16), epochs=1, verbose=0, callbacks=[timer])
    assert [(f.batch_size, f.total_steps) for f in timer.fits] == [(8, 6), (16, 3)]


# ---------------------------------------------------------------------------- pipelines


def test_a_batch_larger_than_the_arrays_is_one_clear_error():
    pytest.importorskip("tensorflow")
    from toolkit.data import pipeline

    x, y = np.zeros((100, 4), "float32"), np.zeros(100, "int32")
    with pytest.raises(ConfigError, match=r"^pipeline: batch_size=1000 is larger than the 100 ex"):
        pipeline((x, y), 1000)
    assert len(list(pipeline((x, y), 1000, drop_remainder=False))) == 1  # as Keras's fit does
    with pytest.raises(ConfigError, match=r"^pipeline: batch_size must be an integer >= 1, got '3"):
        pipeline((x, y), "32")


def test_a_grain_pipeline_and_array_batches_say_it_in_the_same_words():
    pytest.importorskip("grain")
    from toolkit.data import array_batches, pipeline

    x, y = np.zeros((100, 4), "float32"), np.zeros(100, "int32")
    with pytest.raises(ConfigError, match=r"^pipeline: batch_size=1000 is larger than the 100 ex"):
        pipeline((x, y), 1000, loader="grain")
    with pytest.raises(ConfigError, match=r"^pipeline: batch_size must be an integer >= 1, got 'x"):
        pipeline((x, y), "x", loader="grain")
    with pytest.raises(ConfigError, match=r"^array_batches: batch_size must be an integer >= 1"):
        array_batches((x, y), math.nan)


# ---------------------------------------------------------------------------- tune, diagnose


class _Unbuilt:
    """A subclassed model, compiled and never called: it has no weights yet."""

    @staticmethod
    def make(keras, call=None):
        class Net(keras.Model):
            def __init__(self):
                super().__init__()
                self.dense = keras.layers.Dense(3)

            def call(self, x):
                return self.dense(call(x) if call else x)

        net = Net()
        net.compile(
            optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        return net


def _arrays():
    rng = np.random.default_rng(0)
    return rng.normal(size=(256, 8)).astype("float32"), np.zeros(256, "int32")


def test_model_workload_builds_an_unbuilt_model_on_its_first_batch_as_fit_does(keras):
    """The weights are made before they are saved (to be put back after the measurements),
    from the data's first batch, not training; the model then trains as it is."""
    from toolkit.runner.config import TrainConfig
    from toolkit.search.workload import ModelWorkload

    net = _Unbuilt.make(keras)
    workload = ModelWorkload(net, _arrays(), TrainConfig(batch_size=32))
    assert net.built and [tuple(w.shape) for w in net.weights] == [(8, 3), (3,)]
    made = [np.array(w) for w in net.get_weights()]
    workload.fit(steps=2, warmup=0)
    workload.close()
    for a, b in zip(made, net.get_weights(), strict=True):
        assert (a == b).all()  # what was built is what is put back


def test_a_model_its_first_batch_cannot_build_is_refused_in_one_line(keras):
    from toolkit import tune
    from toolkit.runner.train import SetupError

    def wrong(x):
        raise ValueError("this call wants a dict of features\nsecond line")

    with pytest.raises(SetupError) as raised:
        tune(_Unbuilt.make(keras, wrong), _arrays(), steps=5, use_cache=False,
             progress=lambda _: None)  # fmt: skip
    said = str(raised.value)
    assert "\n" not in said and "Net is not built" in said, said
    assert "(ValueError: this call wants a dict of features (in Net.call()))" in said
    assert said.endswith("call it on a batch first, model(x[:1]), or model.build(input_shape)")


def test_a_non_model_is_told_it_is_not_a_keras_model(keras):
    import toolkit
    from toolkit.runner.train import SetupError

    for target in (5, "model", keras.layers.Dense(2)):  # a layer: no fit, no compile
        with pytest.raises(SetupError, match=r"is not a Keras model: give your compiled"):
            toolkit.anatomy(target, _arrays(), steps=2)


def test_an_unbatched_dataset_is_told_to_batch(keras):
    tf = pytest.importorskip("tensorflow")
    from toolkit import diagnose
    from toolkit.runner.train import SetupError

    examples = tf.data.Dataset.from_tensor_slices(_arrays())
    with pytest.raises(SetupError, match=r"batch your data \(dataset\.batch\(N\)\)"):
        diagnose(_tiny(keras), examples, steps=5)


@pytest.mark.parametrize("steps", [0, "5", math.nan])
def test_steps_are_refused_up_front(keras, steps):
    from toolkit import diagnose, tune

    with pytest.raises(ConfigError, match="^diagnose: steps must be an integer >= 1"):
        diagnose(_Unbuilt.make(keras), _arrays(), steps=steps)  # before the model is looked at
    with pytest.raises(ConfigError, match="^tune: steps must be an integer >= 1"):
        tune(_Unbuilt.make(keras), _arrays(), steps=steps)


def test_a_config_s_string_batch_size_is_named_for_tune(keras):
    from toolkit import tune

    with pytest.raises(ConfigError, match=r"^--batch_size must be an integer >= 1, got '32'$"):
        tune(_tiny(keras), _arrays(), config=TrainConfig(batch_size="32"), steps=5)


# ---------------------------------------------------------------------------- recipe runs


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two real recipe runs: one epoch at ``--fused_steps=5`` (1437 digits in batches of 32:
    44 batches, 40 trained), and a ``--smoke`` run (20 epochs asked, one of 8 steps ran)."""
    pytest.importorskip("tensorflow")
    root = tmp_path_factory.mktemp("runs")
    fused = _run(
        [
            "--epochs=1",
            "--fused_steps=5",
            "--backend=tensorflow",
            f"--report_dir={root / 'fused'}",
        ]
    )
    smoke = _run(["--smoke", "--backend=tensorflow", f"--report_dir={root / 'smoke'}"])
    return root, fused, smoke


def test_fused_steps_that_leave_batches_out_say_so_once(two_runs):
    root, fused, _ = two_runs
    assert fused.returncode == 0, fused.stderr[-3000:]
    said = [line for line in fused.stderr.splitlines() if "are left out each epoch" in line]
    assert said == [
        "note: --fused_steps=5: an epoch trains 40 of its 44 batches of 32 (whole fused steps "
        "of 5 batches: the last 4 are left out each epoch); a --fused_steps that divides 44, "
        "or --train_steps, trains every batch"
    ]
    _, report = _report(root / "fused")
    (finding,) = [f for f in report["context"]["preflight"] if "left out" in f["message"]]
    assert finding["code"] == "fused_steps_remainder"
    assert report["steps"]["total_steps"] == 40  # what the note says ran


def test_compare_lists_what_each_run_ran_not_what_a_smoke_run_was_asked(two_runs):
    root, _, smoke = two_runs
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    a, _ = _report(root / "fused")
    b, _ = _report(root / "smoke")
    out = _run([sys.executable, "-m", "toolkit", "compare", str(a), str(b), "--json"])
    assert out.returncode in (0, 1), out.stderr[-2000:]
    settings = {s["flag"]: (s["a"], s["b"]) for s in json.loads(out.stdout)["settings"]}
    assert "epochs" not in settings, settings  # each ran one epoch
    assert settings["train_steps"] == (None, 8)  # a pass of 40 steps vs the smoke run's 8
    assert settings["fused_steps"] == (5, 1)
    notes = json.loads(out.stdout)["notes"]
    assert any(n.startswith("A: --fused_steps=5: an epoch trains 40 of its 44") for n in notes)
