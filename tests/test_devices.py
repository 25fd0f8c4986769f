"""toolkit.devices: real CPU paths for real; CUDA and Metal on faked device lists."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from toolkit import devices
from toolkit.devices import DeviceError, DeviceInfo, preflight
from toolkit.devices import compatibility as device_preflight
from toolkit.devices import selection as device_select

from .helpers import run_python

CPU = tf.config.PhysicalDevice("/physical_device:CPU:0", "CPU")


def _gpus(n):
    return [tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(n)]


@pytest.fixture
def fake(monkeypatch):
    """Fakes TensorFlow's device list: ``fake(kind, n_gpus, details, **build)``; records the
    visible-device and memory-growth calls that select() makes."""
    calls = {"visible": [], "growth": []}

    def install(kind="cuda", n=1, details=None, apple=False):
        gpus = _gpus(n)
        if details is None:
            details = (
                {"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": (9, 0)}
                if kind == "cuda"
                else {"device_name": "METAL"}
            )
        monkeypatch.setattr(
            tf.config,
            "list_physical_devices",
            lambda t=None: {"CPU": [CPU], "GPU": gpus, None: [CPU, *gpus]}[t],
        )
        monkeypatch.setattr(tf.config.experimental, "get_device_details", lambda d: dict(details))
        monkeypatch.setattr(
            tf.sysconfig, "get_build_info", lambda: {"is_cuda_build": kind == "cuda"}
        )
        monkeypatch.setattr(
            tf.config, "set_visible_devices", lambda d, t=None: calls["visible"].append(list(d))
        )
        monkeypatch.setattr(
            tf.config.experimental,
            "set_memory_growth",
            lambda d, on: calls["growth"].append((d.name, on)),
        )
        if apple:
            monkeypatch.setattr(sys, "platform", "darwin")
            monkeypatch.setattr(device_select.platform, "machine", lambda: "arm64")
        return calls

    return install


# ---------------------------------------------------------------------------- real CPU


def test_detect_real_cpu():
    found = devices.detect()
    cpu = found[0]
    assert cpu.kind == "cpu" and cpu.name == "/physical_device:CPU:0" and cpu.index == 0
    assert cpu.human_name and cpu.memory_mb > 100
    assert devices.resolve("auto").kind == ("cpu" if len(found) == 1 else found[1].kind)


def test_select_cpu_in_a_fresh_process_and_gpu_is_a_clear_error():
    code = (
        "from toolkit import devices; d = devices.select('cpu'); print(d.kind, d.logical_name)\n"
        "import tensorflow as tf; print(tf.config.get_visible_devices('GPU'))\n"
        "try:\n    devices.select('metal')\nexcept devices.DeviceError as e:\n    print('ERR', e)\n"
    )
    out = run_python(code, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "cpu /device:CPU:0" and lines[1] == "[]"
    assert lines[2].startswith("ERR unknown device 'metal': no Metal GPU found")
    assert "Available: cpu:0" in lines[2] and "BUILD.md" in lines[2]


def test_select_cpu_again_after_the_runtime_started_is_fine():
    tf.constant(1.0) + 1  # runtime is up
    assert devices.select("cpu").kind == "cpu"


def test_on_places_ops_and_refuses_missing_devices():
    with devices.on("cpu") as d:
        x = tf.constant([1.0]) * 2
    assert d.kind == "cpu" and x.device.endswith("CPU:0")
    if not tf.config.list_logical_devices("GPU"):
        with (
            pytest.raises(DeviceError, match="unknown device 'gpu': no GPU found"),
            devices.on("gpu"),
        ):
            pass


@pytest.mark.parametrize("spec", ["tpu", "gpu:x", "", "cuda:-1"])
def test_bad_device_specs(spec):
    with pytest.raises(DeviceError, match="unknown device"):
        devices.resolve(spec)


def test_placement_report_of_a_real_step():
    w = tf.Variable(tf.ones((4, 4)))

    @tf.function
    def step(x):
        y = tf.matmul(x, w) + tf.random.uniform((4, 4))
        w.assign_sub(0.1 * y)
        return tf.reduce_sum(y)

    report = devices.placement_report(step, tf.ones((4, 4)), gpu_selected=False)
    types = {t for _, t, _ in report.ops}
    assert {"MatMul", "RandomUniform", "AssignSubVariableOp"} <= types or "_MklMatMul" in types
    assert set(report.by_device()) == {"CPU:0"}
    assert report.cpu_fallbacks() == [] and "WARNING" not in report.render()
    # The same ops, judged as if a GPU had been selected: every compute op is a CPU fallback.
    flagged = devices.PlacementReport(report.ops, gpu_selected=True)
    fallback_types = {t for _, t in flagged.cpu_fallbacks()}
    assert "RandomUniform" in fallback_types and "_Arg" not in fallback_types
    assert "ran on the CPU while a GPU was selected" in flagged.render()
    # Running it again places nothing new, and the report says why.
    assert "no ops were placed" in devices.placement_report(step, tf.ones((4, 4))).render()


def test_placement_of_a_keras_training_step(keras):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    report = devices.placement_report(
        lambda: model.train_on_batch(np.ones((4, 3), "float32"), np.ones((4, 2), "float32"))
    )
    assert sum(report.by_device()["CPU:0"].values()) > 10


# ---------------------------------------------------------------------------- faked CUDA, Metal


def test_detect_and_select_cuda(fake):
    calls = fake("cuda", n=2)
    found = devices.detect()
    assert [d.kind for d in found] == ["cpu", "cuda", "cuda"]
    gpu = found[2]
    assert gpu.compute_capability == (9, 0) and gpu.human_name == "NVIDIA H100 80GB HBM3"
    assert "compute capability 9.0" in str(gpu)
    assert devices.resolve("auto").name.endswith("GPU:0")
    chosen = devices.select("cuda:1")
    assert chosen.index == 1 and chosen.logical_name == "/device:GPU:1"
    assert [d.name for d in calls["visible"][-1]] == ["/physical_device:GPU:1"]
    assert calls["growth"] == [("/physical_device:GPU:1", True)]
    devices.select("cpu")
    assert calls["visible"][-1] == []  # the ML Compute-style switch to the CPU hides GPUs
    with pytest.raises(DeviceError, match=r"no Metal GPU found.*Available: cpu:0, cuda:0, cuda:1"):
        devices.select("metal")
    with pytest.raises(DeviceError, match="gpu:5"):
        devices.select("gpu:5")


def test_detect_and_select_metal(fake):
    calls = fake("metal", n=1, apple=True)
    (cpu, gpu) = devices.detect()
    assert gpu.kind == "metal" and gpu.human_name == "METAL"
    assert gpu.memory_mb == cpu.memory_mb  # unified memory
    assert devices.select("gpu").kind == "metal"
    assert devices.select("metal:0").kind == "metal"
    assert calls["growth"] == []  # memory growth is a CUDA setting
    with pytest.raises(DeviceError, match="no CUDA GPU found"):
        devices.select("cuda")


def test_metal_is_recognized_without_details_on_apple_silicon(fake):
    fake("metal", details={}, apple=True)
    assert devices.detect()[1].kind == "metal"


def test_select_after_the_runtime_started_says_how_to_fix(fake, monkeypatch):
    fake("cuda")

    def too_late(d, t=None):
        raise RuntimeError("Visible devices cannot be modified after being initialized")

    monkeypatch.setattr(tf.config, "set_visible_devices", too_late)
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda t=None: [])
    with pytest.raises(DeviceError, match="came after TensorFlow started its runtime"):
        devices.select("cuda")


def test_augmentation_device_pins_random_ops_to_the_cpu_on_metal():
    metal = DeviceInfo("metal", "/physical_device:GPU:0", 0, "METAL")
    with devices.augmentation_device(metal):
        r = tf.random.uniform(())
    assert r.device.endswith("CPU:0")
    cuda = DeviceInfo("cuda", "/physical_device:GPU:0", 0, "H100", compute_capability=(9, 0))
    assert type(devices.augmentation_device(cuda)).__name__ == "nullcontext"


# ---------------------------------------------------------------------------- preflight

METAL = DeviceInfo("metal", "/physical_device:GPU:0", 0, "METAL")
CPU_INFO = DeviceInfo("cpu", "/physical_device:CPU:0", 0, "some CPU")


def _codes(findings, severity=None):
    return {f.code for f in findings if severity is None or f.severity == severity}


def _versions(tf_version="2.15.1", metal="1.1.0", python="3.11.7"):
    return {"tensorflow": tf_version, "tensorflow-metal": metal, "python": python}


@pytest.mark.parametrize(
    ("versions", "legacy", "expected"),
    [
        (_versions("2.15.1", "1.1.0"), False, None),
        (_versions("2.16.2", "1.1.0"), False, "error"),
        (_versions("2.16.2", "1.1.0"), True, None),  # the tf_keras workaround
        (_versions("2.18.0", "1.1.0"), False, "error"),
        (_versions("2.18.0", "1.2.0"), False, None),
        (_versions("2.21.0", "1.2.0"), False, "warning"),  # not in the table
    ],
)
def test_metal_version_table(versions, legacy, expected):
    findings = preflight(METAL, versions=versions, legacy_keras=legacy, policy="float32")
    version = [f for f in findings if f.code == "metal-version"]
    if expected is None:
        assert version == []
    else:
        assert version[0].severity == expected and version[0].fix


def test_metal_findings(keras):
    base = dict(versions=_versions(), policy="float32")
    assert "metal-xla" in _codes(preflight(METAL, jit_compile=True, **base), "error")
    model64 = keras.Sequential(
        [keras.Input((2,), dtype="float64"), keras.layers.Dense(1, dtype="float64")]
    )
    assert "metal-float64" in _codes(preflight(METAL, model=model64, **base), "error")
    assert "metal-float64" not in _codes(
        preflight(METAL, model=keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]), **base)
    )
    assert "metal-python" in _codes(
        preflight(METAL, versions=_versions(python="3.8.10"), policy="float32")
    )

    class NewAdam:  # stands in for tf_keras's current optimizer
        pass

    class LegacyAdam:
        pass

    LegacyAdam.__module__ = "tf_keras.src.optimizers.legacy.adam"
    slow = preflight(METAL, legacy_keras=True, optimizer=NewAdam(), **base)
    assert "metal-optimizer" in _codes(slow, "warning")
    assert "metal-optimizer" not in _codes(
        preflight(METAL, legacy_keras=True, optimizer=LegacyAdam(), **base)
    )
    assert "metal-optimizer" in _codes(preflight(METAL, legacy_keras=False, **base), "info")
    assert "metal-random" in _codes(preflight(METAL, **base), "info")


@pytest.mark.parametrize(
    ("device", "policy", "warns"),
    [
        (CPU_INFO, "mixed_float16", True),
        (DeviceInfo("cuda", "g", 0, "P100", compute_capability=(6, 0)), "mixed_float16", True),
        (DeviceInfo("cuda", "g", 0, "V100", compute_capability=(7, 0)), "mixed_float16", False),
        (DeviceInfo("cuda", "g", 0, "T4", compute_capability=(7, 5)), "mixed_bfloat16", True),
        (DeviceInfo("cuda", "g", 0, "A100", compute_capability=(8, 0)), "mixed_bfloat16", False),
        (METAL, "mixed_bfloat16", True),
        (METAL, "mixed_float16", False),
    ],
)
def test_precision_findings(device, policy, warns):
    findings = preflight(device, policy=policy, versions=_versions(metal=None))
    assert ("precision" in _codes(findings, "warning")) is warns


def test_bf16_on_cpu_depends_on_the_cpu(monkeypatch):
    monkeypatch.setattr(device_preflight, "cpu_has_fast_bf16", lambda: False)
    assert "precision" in _codes(
        preflight(CPU_INFO, policy="mixed_bfloat16", versions=_versions(metal=None))
    )
    assert devices.recommend_precision(CPU_INFO)[0] == "float32"
    monkeypatch.setattr(device_preflight, "cpu_has_fast_bf16", lambda: True)
    assert "precision" not in _codes(
        preflight(CPU_INFO, policy="mixed_bfloat16", versions=_versions(metal=None))
    )
    assert devices.recommend_precision(CPU_INFO)[0] == "mixed_bfloat16"


def test_recommend_precision():
    assert (
        devices.recommend_precision(DeviceInfo("cuda", "g", 0, "A100", compute_capability=(8, 0)))[
            0
        ]
        == "mixed_float16"
    )
    assert (
        devices.recommend_precision(DeviceInfo("cuda", "g", 0, "K80", compute_capability=(3, 7)))[0]
        == "float32"
    )
    assert devices.recommend_precision(METAL)[0] == "float32"


def test_cpu_xla_is_an_info_finding():
    assert "cpu-xla" in _codes(
        preflight(CPU_INFO, jit_compile=True, policy="float32", versions=_versions(metal=None)),
        "info",
    )
    assert preflight(CPU_INFO, policy="float32", versions=_versions(metal=None)) == []


# ---------------------------------------------------------------------------- threads, CLI


def test_configure_threads_in_a_fresh_process_and_too_late_here():
    code = (
        "from toolkit import devices; import tensorflow as tf\n"
        "plan = devices.configure_threads(cores=2)\n"
        "print(plan, tf.config.threading.get_intra_op_parallelism_threads(),"
        " tf.config.threading.get_inter_op_parallelism_threads())\n"
    )
    out = run_python(code, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "{'intra_op': 2, 'inter_op': 2, 'datasets_private_threads': 1} 2 2"
    tf.constant(1.0) + 1
    with pytest.raises(DeviceError, match="came after TensorFlow started its runtime"):
        devices.configure_threads(intra_op=1, inter_op=1)
    with pytest.raises(DeviceError, match="intra_op: thread counts must be >= 1"):
        devices.configure_threads(intra_op=0)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, timeout=180
    )


def test_cli_devices_preflight_placement():
    out = _cli("devices")
    assert (
        out.returncode == 0 and out.stdout.startswith("cpu:0 ") and "precision hint" in out.stdout
    )
    out = _cli("preflight", "--precision", "mixed_float16")
    assert out.returncode == 0 and "[warning] precision" in out.stdout
    out = _cli("preflight", "--device", "metal")
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2 and last.startswith("error: unknown device 'metal'")
    out = _cli("placement", "--recipe", "mlp", "--device", "cpu")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "placement of one mlp training step" in out.stdout and "CPU:0:" in out.stdout
    out = _cli("placement", "--recipe", "nope")
    assert out.returncode == 2 and "recipe: no recipe named 'nope'" in out.stderr
