"""Keras backends: --backend chosen before Keras loads, one line for every combination that
cannot work, and a recipe trained, timed, counted and reported under JAX and PyTorch."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

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
    monkeypatch.setitem(backend._INSTALL, "torch", ("no_such_torch", "pip install 'x[torch]'"))
    with pytest.raises(backend.BackendError, match=r"not installed; pip install 'x\[torch\]'"):
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
        "from toolkit.runner import flags as tk_flags\n"
        "assert tk_flags.backend_from_argv(['prog', '--epochs=2']) is None\n"
        "assert tk_flags.backend_from_argv(['prog', '--backend', 'jax']) == 'jax'\n"
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
    assert 0 < compute["mfu"] < 1 and compute["peak_flops_per_s"] > 1e8


@pytest.mark.parametrize(
    ("args", "status", "words"),
    [
        (["--backend=nope"], 2, "--backend=nope: use one of tensorflow, jax, torch"),
        (["--backend=torch", "--steps_per_execution=4"], 1, "runs one step per call"),
        (["--backend=torch", "--fused_steps=2"], 1, "--backend=torch does not compile"),
        (
            ["--backend=torch", "--distribution_strategy=mirrored"],
            1,
            "--distribution_strategy=mirrored is tf.distribute's",
        ),
        pytest.param(
            ["--backend=torch", "--distribution_strategy=data_parallel"],
            1,
            "has no keras.distribution for PyTorch",
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
    out = _python("-m", "recipes.mlp", "--smoke", f"--report_dir={tmp_path}", *args, timeout=120)
    assert out.returncode == status, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and words in last and "Traceback" not in out.stderr
    assert not list(tmp_path.iterdir())


DEMO = """
from toolkit import backend
backend.select({name!r})
from recipes import mlp
from toolkit import TrainConfig, run
result = run(mlp.build_task(), TrainConfig(epochs=20, report_dir=None, count_flops=False))
report = result.report
print(report.metrics["val_accuracy"], result.model.jit_compile, report.context.backend)
"""


@pytest.mark.parametrize(("name", "jitted"), [("jax", True), ("torch", False)])
def test_the_digits_demo_learns_under(name, jitted, tmp_path):
    """`make demo`'s run under another backend: the same >= 0.95 validation accuracy, with
    Keras's own choice of compilation (on JAX the step is jitted, not run op by op)."""
    out = _python("-c", DEMO.format(name=name), TOOLKIT_CACHE_DIR=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    accuracy, jit, used = out.stdout.split()[-3:]
    assert float(accuracy) >= 0.95 and jit == str(jitted) and used == name


def test_every_backend_module_implements_the_whole_seam():
    import importlib

    from toolkit.backend._common import SEAM

    for name in backend.BACKENDS:  # importing them imports no framework
        module = importlib.import_module(f"toolkit.backend._{name}")
        missing = [f for f in SEAM if not callable(getattr(module, f, None))]
        assert not missing, f"toolkit.backend._{name} lacks {missing}"


@pytest.mark.parametrize("name", ["tensorflow", "jax"])
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
    ],
)
def test_compile_cache_is_read_from_the_command_line(argv, on, monkeypatch):
    calls = []
    from toolkit.runner import flags as tk_flags

    monkeypatch.setattr(backend, "use_compile_cache", lambda: calls.append(1) or "")
    tk_flags.compile_cache_from_argv(["prog", *argv])
    assert bool(calls) is on


def test_tensorflow_started_before_the_compile_cache_says_it_is_off(tmp_path, monkeypatch):
    import tensorflow as tf

    from toolkit.backend import _tensorflow as tf_backend

    tf.constant(1.0) + 1.0  # TensorFlow has started its devices
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    said = tf_backend.use_compile_cache(str(tmp_path))
    assert said.startswith("off:") and "TF_XLA_FLAGS" not in os.environ


RECIPES = ["mlp", "cnn", "lstm", "resnet", "mobilenet", "bert"]


@pytest.fixture(scope="module")
def no_tensorflow(tmp_path_factory):
    return site_without_tensorflow(tmp_path_factory.mktemp("no-tensorflow"))


def test_the_machine_without_tensorflow_really_has_none(no_tensorflow):
    code = "import importlib.util as u; print(u.find_spec('tensorflow'), bool(u.find_spec('jax')))"
    out = subprocess.run([*no_tensorflow, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["None", "True"]


# Each recipe once without TensorFlow, each backend on half of them: what is particular to a
# machine with no TensorFlow (the catalog's arrays in a PyDataset, nothing importing it) is the
# same under either backend, and every recipe already trains under both, on tf.data, in the
# `every_backend` passes of `make test`. MobileNet and ResNet go to PyTorch, whose eager steps
# skip JAX's 10-30 s CPU compile of them.
WITHOUT_TENSORFLOW = {"mlp": "jax", "cnn": "jax", "bert": "jax",
                      "lstm": "torch", "resnet": "torch", "mobilenet": "torch"}  # fmt: skip


def test_every_recipe_is_paired_with_a_backend_without_tensorflow():
    assert sorted(WITHOUT_TENSORFLOW) == sorted(RECIPES)
    assert sorted(set(WITHOUT_TENSORFLOW.values())) == ["jax", "torch"]


@pytest.mark.parametrize(("recipe", "name"), sorted(WITHOUT_TENSORFLOW.items()))
def test_every_recipe_trains_without_tensorflow(
    no_tensorflow, recipe, name, tmp_path, tmp_path_factory
):
    """What a GPU machine with JAX or PyTorch and no TensorFlow runs: the catalog's data as
    arrays in a PyDataset, the report with its step times, FLOPs and MFU."""
    cache = tmp_path_factory.getbasetemp() / f"no-tensorflow-cache-{name}"  # one matmul peak
    out = subprocess.run(
        [*no_tensorflow, f"recipes.{recipe}", f"--backend={name}", "--smoke",
         f"--report_dir={tmp_path / 'runs'}"],
        capture_output=True, text=True, timeout=600,
        env={**ENV, "TOOLKIT_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs").iterdir())
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "complete" and report["context"]["backend"] == name
    assert "tensorflow" not in report["environment"] and report["environment"][name]
    assert report["steps"]["total_steps"] == 8 and report["steps"]["timed_steps"] == 6
    # Timed where the step finished, not where it was queued: MFU stays a fraction.
    assert report["compute"]["flops_per_step"] > 0 and 0 < report["compute"]["mfu"] < 1.5


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_the_digits_demo_learns_without_tensorflow(no_tensorflow, name, tmp_path):
    """The demo's data as arrays in a PyDataset (shuffled per epoch, last partial batch
    dropped): the same >= 0.95 as through tf.data."""
    out = subprocess.run(
        [*no_tensorflow, "-c", DEMO.format(name=name)],
        capture_output=True, text=True, timeout=600,
        env={**ENV, "TOOLKIT_CACHE_DIR": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    accuracy, _, used = out.stdout.split()[-3:]
    assert float(accuracy) >= 0.95 and used == name


def test_the_accelerator_benchmark_runs_without_tensorflow(no_tensorflow, tmp_path):
    """benchmarks/accelerator.py as on a GPU machine with PyTorch and no TensorFlow (its parts
    run in processes of their own, packages from PYTHONPATH only): every part, every line."""
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
    assert "cnn on digits" in text and "resnet50 synthetic 224×224" in text
    assert text.count("device memory") == 2  # n/a on a CPU, the peak on a GPU
    assert text.count("seed MLP on torch") == 2 and "× (baseline " in text
    assert "nope: not installed, skipped" in text
    record = json.loads((tmp_path / "accelerator.json").read_text())
    assert set(record["torch"]) == {"devices", "cnn", "resnet50", "seed_mlp"}
    assert os.path.exists(record["torch"]["resnet50"]["report"])
