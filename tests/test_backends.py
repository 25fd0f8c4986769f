"""Keras backends: --backend chosen before Keras loads, one line for every combination that
cannot work, and a recipe trained, timed, counted and reported under JAX and PyTorch."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import assert_mfu
from tests.test_faults import RECIPE, _last, _run
from toolkit import backend
from toolkit.runner.config import ConfigError, TrainConfig

from .helpers import site_without_tensorflow

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
ENV.pop("KERAS_BACKEND", None)


def _python(*args, timeout=300, **env):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**ENV, **env},
    )


def test_select_refuses_what_cannot_work_in_one_line(keras, monkeypatch):
    with pytest.raises(backend.BackendError, match="--backend=mxnet: use one of tensorflow, jax"):
        backend.select("mxnet")
    # This test process already has Keras on TensorFlow: it cannot change any more.
    assert backend.name() == "tensorflow"
    with pytest.raises(backend.BackendError, match="already loaded with the tensorflow backend"):
        backend.select("jax")
    assert backend.select("tensorflow") == "tensorflow"
    gone = dataclasses.replace(backend.REGISTRY["torch"], framework="no_such_torch", extra="x")
    monkeypatch.setitem(backend.REGISTRY, "torch", gone)
    with pytest.raises(
        backend.BackendError, match=r"not installed; pip install 'keras-perf-toolkit\[x\]'"
    ):
        backend.select("torch")
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    with pytest.raises(backend.BackendError, match="tf_keras, which trains on TensorFlow only"):
        backend.select("jax")
    with pytest.raises(ConfigError, match="--backend=jax: Keras trains on tensorflow"):
        TrainConfig(backend="jax").validate()


def test_backend_is_read_from_the_command_line_before_keras_loads():
    code = (
        "import sys\n"
        "from toolkit import backend\n"
        "from toolkit import _argv\n"
        "assert _argv.start_backend(_argv.start_flags(['prog', '--epochs=2'])) is None\n"
        "start = _argv.start_flags(['prog', '--epochs', '2', '--backend', 'jax'])\n"
        "assert _argv.start_backend(start) == 'jax'\n"
        "import keras\n"
        "print(keras.config.backend(), backend.name())\n"
    )
    out = _python("-c", code, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["jax", "jax"]


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_a_recipe_trains_and_reports_under(name, tmp_path):
    out = _python(
        "-m", "recipes.mlp", f"--backend={name}", "--smoke", f"--report_dir={tmp_path}",
        TOOLKIT_CACHE_DIR=str(tmp_path / "cache"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"({name}), precision float32" in out.stdout
    (run_dir,) = [p for p in tmp_path.iterdir() if p.name != "cache"]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "complete" and report["context"]["backend"] == name
    assert report["environment"]["keras_backend"] == name and report["environment"][name]
    assert report["steps"]["total_steps"] == 8 and report["steps"]["timed_steps"] == 6
    compute = report["compute"]
    # The MLP's matmuls: 2 * 32 * (64*128 + 128*128 + 128*10) per forward pass.
    matmuls = 2 * 32 * (64 * 128 + 128 * 128 + 128 * 10)
    assert matmuls <= compute["flops_forward"] <= 1.1 * matmuls, compute
    assert compute["flops_per_step"] > 2 * compute["flops_forward"]
    assert compute["peak_flops_per_s"] > 1e8
    assert_mfu(compute)


def _keras_loops_torch_steps() -> bool:
    from toolkit.backend._torch import keras_loops_steps

    return keras_loops_steps()


@pytest.mark.parametrize(
    ("args", "status", "words"),
    [
        (["--backend=nope"], 2, "--backend=nope: use one of tensorflow, jax, torch"),
        pytest.param(
            ["--backend=torch", "--steps_per_execution=4"],
            1,
            "needs Keras 3.16 or later (keras-nightly today)",
            marks=pytest.mark.skipif(
                _keras_loops_torch_steps(), reason="this Keras runs K steps per call on PyTorch"
            ),
        ),
        (["--backend=torch", "--fused_steps=2"], 1, "--backend=torch does not compile"),
        (
            ["--backend=torch", "--distribution_strategy=mirrored"],
            1,
            "--distribution_strategy=mirrored is tf.distribute's",
        ),
        pytest.param(
            ["--backend=torch", "--distribution_strategy=data_parallel"],
            1,
            "needs Keras 3.16 or later (keras-nightly)",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("keras.src.backend.torch.distribution_lib") is not None,
                reason="this Keras trains PyTorch under DDP",
            ),
        ),
        (
            [
                "--backend=tensorflow",
                "--distribution_strategy=data_parallel",
                "--worker_hosts=127.0.0.1:1,127.0.0.1:2",
            ],
            1,
            "Keras 3 on TensorFlow cannot train over processes",
        ),
    ],
)
def test_every_backend_setting_that_cannot_work_is_one_line(tmp_path, args, status, words):
    """What the settings alone refuse (the backend's ``check_config``) is said before
    TensorFlow and Keras load; what a distribution refuses, as it starts."""
    out = _python("-m", "recipes.mlp", "--smoke", f"--report_dir={tmp_path}", *args, timeout=120)
    assert out.returncode == status, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and words in last and "Traceback" not in out.stderr
    assert not list(tmp_path.iterdir())
    settings_alone = status == 2 or "data_parallel" not in " ".join(args)
    assert ("loading TensorFlow" not in out.stderr) == settings_alone, out.stderr[-2000:]


DEMO = """
from toolkit import backend
backend.select({name!r})
from recipes import mlp
from toolkit import TrainConfig, run
result = run(mlp.build_task(), TrainConfig(epochs=20, report_dir=None, count_flops=False))
report = result.report
print(report.metrics["val_accuracy"], result.model.jit_compile, report.context.backend)
"""


def test_the_digits_demo_learns_under_jax():
    """`make demo`'s run under another backend: the same >= 0.95 validation accuracy, with
    Keras's own choice of compilation (on JAX the step is jitted, not run op by op). PyTorch's
    run is :func:`test_the_digits_demo_learns_without_tensorflow`'s: its data comes by the
    same loader (Grain) whether TensorFlow is installed or not."""
    out = _python("-c", DEMO.format(name="jax"))
    assert out.returncode == 0, out.stderr[-3000:]
    accuracy, jit, used = out.stdout.split()[-3:]
    assert float(accuracy) >= 0.95 and jit == "True" and used == "jax"


def _implements_the_seam(module_name: str) -> None:
    import importlib

    from toolkit.backend._common import SEAM

    module = importlib.import_module(module_name)
    missing = [f for f in SEAM if not callable(getattr(module, f, None))]
    assert not missing, f"{module_name} lacks {missing}"
    assert list(module.__all__) == list(SEAM), f"{module_name}: __all__ is not the seam's"


def test_every_backend_module_implements_the_whole_seam():
    for name in backend.names():  # importing them imports no framework
        _implements_the_seam(backend.info(name).module)


@pytest.fixture
def fourth(monkeypatch):
    """A fourth backend, registered as a new one would be: its module and one registry line
    (``tests/fake_backend.py``; NumPy is its framework, ``fake`` its extra)."""
    entry = backend.Backend("fake", "Fake", "tests.fake_backend", "numpy", "fake", ("numpy",))
    monkeypatch.setitem(backend.REGISTRY, "fake", entry)
    return entry


def test_a_backend_module_missing_a_seam_function_fails_when_first_imported(monkeypatch):
    """The seam is a protocol (``toolkit.backend._common.Seam``) that :func:`backend.get`
    checks a module against when it first imports it: one function short, the module is
    refused there, naming what it misses, not at the first call of that function."""
    import types

    from tests import fake_backend

    partial = types.ModuleType("tests.partial_backend")
    partial.__dict__.update({n: getattr(fake_backend, n) for n in fake_backend.__all__})
    del partial.stop_trace
    monkeypatch.setitem(sys.modules, "tests.partial_backend", partial)
    entry = backend.Backend("partial", "Partial", "tests.partial_backend", "numpy", None, ())
    monkeypatch.setitem(backend.REGISTRY, "partial", entry)
    with pytest.raises(backend.BackendError, match="stop_trace missing"):
        backend.get("partial")
    assert backend.get("tensorflow").weights_digest  # a whole one is its module, checked


def test_a_fourth_backend_is_its_module_and_one_registry_line(fourth, keras):
    """What the rest of the toolkit asks of a backend, it asks the seam: with nothing but the
    module and its registry line, the new backend is listed, installed, checked for the whole
    seam, and its devices are detected, resolved, selected, placed on, reported and
    preflighted; the config, the command line and the search's advice know it."""
    from tests import fake_backend
    from toolkit import cli, devices
    from toolkit.devices import compatibility
    from toolkit.runner.config import ConfigError, TrainConfig
    from toolkit.search import diagnose

    assert backend.names()[-1] == "fake" and "fake" in backend.installed()
    assert backend.info("fake").install_hint() == "pip install 'keras-perf-toolkit[fake]'"
    _implements_the_seam("tests.fake_backend")
    assert backend.get("fake") is fake_backend and not backend.jits_by_default("fake")
    # devices: every call goes through the seam
    found = devices.detect("fake")
    assert [d.spec for d in found] == ["cpu:0", "gpu:0"]
    assert devices.resolve("auto", backend="fake") == fake_backend.ACCELERATOR
    with pytest.raises(devices.DeviceError, match=r"--backend=fake: the fake backend has no CUDA"):
        devices.resolve("cuda", backend="fake")
    with pytest.raises(devices.DeviceError, match=r"'gpu:3' on --backend=fake: Fake sees no GPU"):
        devices.resolve("gpu:3", backend="fake")
    assert devices.select("gpu", backend="fake").human_name == "Fake accelerator"
    assert devices.framework_device(found[1], "fake") == "fake:0"
    with devices.on("cpu", backend="fake") as chosen:
        report = devices.placement_report(lambda: np.ones(3), backend="fake")
    assert chosen.kind == "cpu" and report.ops == (("result[0]", "float64[3]", "cpu"),)
    report = devices.placement_report(lambda: np.ones(3), backend="fake")
    assert report.gpu_selected and report.ops[0][2] == "fake:0"  # select()'s device again
    codes = {f.code for f in devices.preflight(found[1], jit_compile=True, backend="fake")}
    assert codes == {"fake-jit"}
    assert compatibility.apple_gpu_paths()["fake"][0] == "broken"
    peak = fake_backend.measure_matmul_peak(devices.framework_device(found[1], "fake"))
    assert peak.flops_per_s > 0
    # the config and the command line take it; the advice is the seam's
    with pytest.raises(ConfigError, match="--backend=fake: Keras trains on tensorflow"):
        TrainConfig(backend="fake").validate()
    assert cli.parser().parse_args(["devices", "--backend", "fake"]).backend == "fake"
    facts = diagnose.Facts(backend="fake", step_s=1e-4, jit_compile=False, batch_size=8)
    advice = diagnose.advise(diagnose.COMPUTE_BOUND, True, 1e4, 1e3, facts)
    assert any(a.text.endswith(fake_backend.loop_advice().text) for a in advice), advice
    assert not any("jit_compile" in dict(t) for a in advice for t in a.tries)  # none from it


@pytest.mark.parametrize("name", ["tensorflow", "jax"])
@pytest.mark.long
def test_a_later_run_reads_its_compiled_programs_from_the_compile_cache(name, tmp_path):
    """--compile_cache: the first run writes its compiled programs; a later run of the same
    recipe reads them all (it writes no new one), also when it measures the matmul peak again
    (as a run does whose cached peak was measured on a busy machine). On TensorFlow a program's
    key holds its traced function's name, numbered by a process-wide counter: the peak, measured
    with eager ops, must take no number from it, or such a run would miss every program."""
    from toolkit.profiling.flops import PEAK_FILE

    cache = tmp_path / "cache"
    compiled = cache / "compiled" / name

    def run() -> set[str]:
        out = _python(
            "-m", "recipes.mlp", f"--backend={name}", "--smoke", "--jit_compile",
            "--compile_cache", f"--report_dir={tmp_path / 'runs'}",
            TOOLKIT_CACHE_DIR=str(cache),
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        assert "--compile_cache" not in out.stderr  # no "set too late" warning
        assert "compile cache on: may be a read" in out.stdout + out.stderr  # the summary
        return {p.name for p in compiled.iterdir()}

    first = run()  # measures the peak
    assert first, f"nothing written under {compiled}"
    assert run() == first  # reads the peak from its cache: everything read, nothing compiled
    (cache / PEAK_FILE).unlink()  # measures the peak again
    assert run() == first
    reports = sorted((tmp_path / "runs").glob("*/report.md"))
    assert "(compile cache on: may be a read)" in reports[-1].read_text()


@pytest.mark.parametrize(
    ("argv", "on"),
    [
        (["--compile_cache"], True),
        (["--compile_cache=true"], True),
        (["--compile_cache", "--nocompile_cache"], False),
        (["--compile_cache=false"], False),
        (["--jit_compile"], False),
        (["--epochs", "3", "--out", "x", "--compile_cache"], True),  # others' flags left alone
        (["--compile_cache=maybe"], False),  # unreadable: the full parse says why, later
    ],
)
def test_compile_cache_is_read_from_the_command_line(argv, on, monkeypatch):
    calls = []
    from toolkit import _argv

    monkeypatch.setattr(backend, "use_compile_cache", lambda: calls.append(1) or "")
    _argv.apply_start_flags(_argv.start_flags(["prog", *argv]))
    assert bool(calls) is on


def test_tensorflow_started_before_the_compile_cache_says_it_is_off(tmp_path, monkeypatch):
    import tensorflow as tf

    from toolkit.backend import _tensorflow as tf_backend

    tf.constant(1.0) + 1.0  # TensorFlow has started its devices
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    said = tf_backend.use_compile_cache(str(tmp_path))
    assert said.startswith("off:") and "TF_XLA_FLAGS" not in os.environ


@pytest.fixture(scope="module")
def no_tensorflow(tmp_path_factory):
    return site_without_tensorflow(tmp_path_factory.mktemp("no-tensorflow"))


def test_the_machine_without_tensorflow_really_has_none(no_tensorflow):
    code = "import importlib.util as u; print(u.find_spec('tensorflow'), bool(u.find_spec('jax')))"
    out = subprocess.run([*no_tensorflow, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["None", "True"]


def _trained_without_tensorflow(path, name: str) -> None:
    """A smoke run's report (8 steps, 6 timed) from a process without TensorFlow, on backend
    `name`: its step times, FLOPs and MFU."""
    report = json.loads(pathlib.Path(path).read_text())
    assert report["status"] == "complete" and report["context"]["backend"] == name
    assert "tensorflow" not in report["environment"] and report["environment"][name]
    assert report["steps"]["total_steps"] == 8 and report["steps"]["timed_steps"] == 6
    # Timed where the step finished, not where it was queued: MFU stays a fraction.
    assert report["compute"]["flops_per_step"] > 0
    assert_mfu(report["compute"])


@pytest.mark.parametrize(("name", "jitted"), [("jax", True), ("torch", False)])
@pytest.mark.long
def test_the_digits_demo_learns_without_tensorflow(no_tensorflow, name, jitted, tmp_path):
    """The demo as on a machine without TensorFlow (its data by Grain, as where TensorFlow is
    installed): the same >= 0.95 as through tf.data, with Keras's own choice of compilation
    (PyTorch's step runs op by op)."""
    out = subprocess.run(
        [*no_tensorflow, "-c", DEMO.format(name=name)],
        capture_output=True, text=True, timeout=600,
        env={**ENV, "TOOLKIT_CACHE_DIR": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    accuracy, jit, used = out.stdout.split()[-3:]
    assert float(accuracy) >= 0.95 and jit == str(jitted) and used == name


@pytest.mark.long
def test_the_accelerator_benchmark_runs_without_tensorflow(no_tensorflow, tmp_path):
    """benchmarks/accelerator.py as on a GPU machine with PyTorch and no TensorFlow (its parts
    run in processes of their own, packages from PYTHONPATH only): every part, every line.

    45-105 s on 2 cores, by what it checks: the benchmark's five processes as a GPU machine
    runs them (devices, the CNN recipe, ResNet-50, the seed MLP and the toolkit's), each at
    its smallest (``--quick``); one real run of the script is what a GPU session runs. Its
    recipe runs are checked as every recipe's run without TensorFlow is
    (``tests/recipes/test_recipes.py``)."""
    farm = os.path.join(os.path.dirname(no_tensorflow[2]), "site-packages")
    out = subprocess.run(
        [sys.executable, "-S", "benchmarks/accelerator.py", "--quick", "--backends=torch,nope",
         f"--out={tmp_path}"],
        capture_output=True, text=True, timeout=900,
        env={**ENV, "PYTHONPATH": farm, "TOOLKIT_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "## torch: cpu:0" in text and "precision hint" in text
    assert "cnn on digits" in text and "resnet50 synthetic 64×64" in text
    assert text.count("device memory") == 2  # n/a on a CPU, the peak on a GPU
    assert text.count("seed MLP on torch") == 2 and "× (baseline " in text
    assert "nope: not installed, skipped" in text
    record = json.loads((tmp_path / "accelerator.json").read_text())
    assert set(record["torch"]) == {"devices", "cnn", "resnet50", "seed_mlp"}
    for part in ("cnn", "resnet50"):  # recipes.cnn and recipes.resnet without TensorFlow
        _trained_without_tensorflow(record["torch"][part]["report"], "torch")


@pytest.mark.parametrize(
    "args",
    [[*RECIPE, "--smoke"], [sys.executable, "-m", "toolkit", "devices"]],
    ids=["recipe", "verb"],
)
def test_a_nonsense_keras_backend_is_one_line_and_status_2(args):
    out = _run(args, env={"KERAS_BACKEND": "nonsense"}, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert _last(out) == (
        "error: KERAS_BACKEND=nonsense: use one of tensorflow, jax, torch, or give --backend"
    )
    assert "Traceback" not in out.stderr
