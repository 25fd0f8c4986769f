"""toolkit.devices: real CPU paths for real; CUDA and Metal on faked device lists."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from toolkit import devices
from toolkit.backend import _torch as torch_seam
from toolkit.backend._jax.devices import device_info as jax_device_info
from toolkit.backend._torch.devices import MPS_FALLBACK_DEVICE, device_infos
from toolkit.core import _device_types as device_types
from toolkit.core import machine
from toolkit.devices import DeviceError, DeviceInfo, preflight
from toolkit.devices import compatibility as device_preflight

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
            monkeypatch.setattr(device_types.platform, "machine", lambda: "arm64")
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
    assert lines[2].startswith(
        "ERR unknown device 'metal' on --backend=tensorflow: TensorFlow sees no Metal GPU"
    )
    assert "--backend=torch --device=mps" in lines[2]
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
            pytest.raises(
                DeviceError,
                match="unknown device 'gpu' on --backend=tensorflow: TensorFlow sees no GPU",
            ),
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
    flagged = dataclasses.replace(report, gpu_selected=True)  # the backend's plumbing kept
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
    with pytest.raises(
        DeviceError, match=r"sees no Metal GPU.*--device=mps.*Available: cpu:0, cuda:0, cuda:1"
    ):
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
    with pytest.raises(DeviceError, match="TensorFlow sees no CUDA GPU"):
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
        (_versions("2.18.0", "1.2.0"), False, "error"),  # #81987: fails to load
        (_versions("2.21.0", "1.2.0"), False, "error"),
        (_versions("2.17.0", "1.3.0"), False, "warning"),  # not in the table
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


def test_cli_devices_lists_every_backend_s_devices():
    out = _cli("devices")
    assert out.returncode == 0 and "precision hint" in out.stdout
    listed = [line for line in out.stdout.splitlines() if line.startswith("--backend=")]
    assert listed == ["--backend=tensorflow", "--backend=jax", "--backend=torch"]
    assert out.stdout.count("  cpu:0 ") == 3


def test_cli_preflight_warns_of_a_precision_and_refuses_a_device_not_here():
    out = _cli("preflight", "--precision", "mixed_float16")
    assert out.returncode == 0 and "[warning] precision" in out.stdout
    out = _cli("preflight", "--device", "metal")
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2 and last.startswith("error: unknown device 'metal'")


@pytest.mark.long
def test_cli_placement_of_a_recipe_s_step_on_every_backend():
    """Three processes, one per backend, each placing one step of the recipe: 30-45 s on 2
    cores."""
    out = _cli("placement", "--recipe", "mlp", "--device", "cpu")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "placement of one mlp training step" in out.stdout and "CPU:0:" in out.stdout
    for name, op in (("torch", "aten::mm"), ("jax", "the device of each live array")):
        out = _cli("placement", "--recipe", "mlp", "--backend", name, "--device", "cpu")
        assert out.returncode == 0, out.stderr[-2000:]
        assert f"(--backend={name})" in out.stdout and op in out.stdout
    out = _cli("placement", "--recipe", "nope")
    assert out.returncode == 2 and "recipe: no recipe named 'nope'" in out.stderr


# ---------------------------------------------------------------------------- JAX and PyTorch


class _FakeJaxDevice:
    """What toolkit.devices reads of a ``jax.Device``."""

    def __init__(self, platform, id, kind, cc=None, limit=None, version="cuda 12.8"):
        self.platform, self.id, self.device_kind = platform, id, kind
        self.compute_capability = cc
        self.client = type("Client", (), {"platform_version": version})()
        self._limit = limit

    def memory_stats(self):
        return {"bytes_limit": self._limit} if self._limit else None

    def __str__(self):
        return f"{self.platform}:{self.id}"


def test_jax_and_torch_see_this_cpu_for_real():
    for backend in ("jax", "torch"):
        found = devices.detect(backend)
        assert found[0].kind == "cpu" and found[0].human_name
        assert devices.resolve("auto", found, backend=backend).kind == (
            found[1].kind if len(found) > 1 else "cpu"
        )


def test_jax_devices_faked_cuda_and_metal(monkeypatch):
    import jax

    h100 = [
        _FakeJaxDevice("gpu", i, "NVIDIA H100 80GB HBM3", cc="9.0", limit=80 * 2**30)
        for i in range(2)
    ]
    monkeypatch.setattr(
        jax,
        "local_devices",
        lambda process_index=None, backend=None: (
            {"gpu": h100}.get(backend) or (_ for _ in ()).throw(RuntimeError)
        ),
    )
    found = devices.detect("jax")
    assert [d.spec for d in found] == ["cpu:0", "cuda:0", "cuda:1"]
    assert found[1].compute_capability == (9, 0) and found[1].memory_mb == 80 * 1024
    assert devices.resolve("gpu:1", found, backend="jax").name == "gpu:1"
    with pytest.raises(DeviceError, match=r"JAX sees no METAL device.*--backend=torch"):
        devices.resolve("mps", found, backend="jax")
    rocm = jax_device_info(_FakeJaxDevice("gpu", 0, "MI300X", version="rocm 6"), 0)
    assert rocm.kind == "gpu" and rocm.compute_capability is None
    metal = jax_device_info(_FakeJaxDevice("METAL", 0, "Metal"), 0)
    assert metal.kind == "metal" and metal.memory_mb  # unified memory: the host's


def test_jax_select_sets_the_default_device_for_real():
    import jax

    try:
        chosen = devices.select("cpu", backend="jax")
        assert chosen.kind == "cpu"
        assert jax.config.jax_default_device == jax.devices("cpu")[0]
        assert next(iter(jax.numpy.ones(2).devices())).platform == "cpu"
    finally:
        jax.config.update("jax_default_device", None)


def test_torch_devices_faked_cuda_and_mps(monkeypatch):
    props = type(
        "Props",
        (),
        {"name": "NVIDIA A100-SXM4-40GB", "total_memory": 40 * 2**30, "major": 8, "minor": 0},
    )
    found = device_infos([props, props], mps=False)
    assert [d.spec for d in found] == ["cpu:0", "cuda:0", "cuda:1"]
    assert found[2].name == "cuda:1" and found[2].compute_capability == (8, 0)
    assert torch_seam.framework_device(found[2]) == "cuda:1"
    mac = device_infos([], mps=True)
    assert [d.spec for d in mac] == ["cpu:0", "metal:0"]
    assert devices.resolve("mps", mac, backend="torch").name == "mps"
    assert torch_seam.framework_device(devices.resolve("metal", mac, backend="torch")) == "mps"
    with pytest.raises(DeviceError, match="PyTorch sees no CUDA GPU"):
        devices.resolve("cuda", mac, backend="torch")

    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert [d.kind for d in devices.detect("torch")] == ["cpu", "cuda"]


def test_torch_select_sets_keras_torch_device(monkeypatch):
    from keras.src.backend.common import global_state

    monkeypatch.setattr(torch_seam, "detect_devices", lambda: device_infos([], mps=True))
    try:
        assert devices.select("mps", backend="torch").kind == "metal"
        assert global_state.get_global_attribute("torch_device") == "mps"
        devices.select("cpu", backend="torch")
        assert global_state.get_global_attribute("torch_device") == "cpu"
    finally:
        global_state.set_global_attribute("torch_device", None)


def test_mps_is_metal_in_a_spec():
    assert devices.parse_device_spec("mps") == ("metal", None)
    assert devices.parse_device_spec("MPS:0") == ("metal", 0)


def test_torch_placement_report_lists_aten_ops_for_real():
    import torch

    x = torch.ones(4, 4)
    report = devices.placement_report(lambda: (x @ x).relu().sum(), backend="torch")
    assert {"aten::mm", "aten::relu", "aten::sum"} <= {op for _, op, _ in report.ops}
    assert {d for _, _, d in report.ops} == {"cpu"} and not report.gpu_selected
    assert "PyTorch" in report.render() and report.cpu_fallbacks() == []


def test_torch_placement_flags_mps_fallbacks():
    """What PyTorch does on a Mac with PYTORCH_ENABLE_MPS_FALLBACK=1, faked: the op runs and
    warns once that it fell back to the CPU."""
    import warnings

    import torch

    def step():
        warnings.warn(
            "The operator 'aten::relu' is not currently supported on the MPS backend and will "
            "fall back to run on the CPU. This may have performance implications.",
            UserWarning,
            stacklevel=1,
        )
        return torch.ones(2).relu()

    report = devices.placement_report(step, backend="torch")
    faked = devices.PlacementReport(
        tuple((n, op, "mps:0") for n, op, _ in report.ops), gpu_selected=True
    )
    assert faked.cpu_fallbacks() == []  # everything on the MPS device
    # The same ops where the warning named one: that op is listed on the CPU and flagged.
    names = {op for _, op, _ in report.ops}
    assert "aten::relu" in names
    moved = devices.PlacementReport(
        tuple(
            (n, op, MPS_FALLBACK_DEVICE if op == "aten::relu" else "mps:0")
            for n, op, _ in report.ops
        ),
        gpu_selected=True,
    )
    assert [op for _, op in moved.cpu_fallbacks()] == ["aten::relu"]
    assert "ran on the CPU while a GPU was selected: aten::relu" in moved.render()


def test_jax_placement_report_for_real():
    import jax.numpy as jnp

    report = devices.placement_report(lambda: (jnp.ones((3, 3)) @ jnp.ones(3),), backend="jax")
    assert report.ops == (("result[0]", "float32[3]", "cpu:0"),) or report.ops[0][2].startswith(
        ("cpu", "TFRT_CPU")
    )
    assert "no per-op fallback" in report.render() and not report.gpu_selected


def _mac(tf_version="2.21.0", metal=None):
    return {
        "tensorflow": tf_version,
        "tensorflow-metal": metal,
        "python": "3.12.8",
        "platform": "darwin-arm64",
    }


def test_a_mac_on_current_tensorflow_is_told_to_use_torch_mps():
    cpu = preflight(CPU_INFO, versions=_mac(), policy="float32", backend="tensorflow")
    (mac,) = [f for f in cpu if f.code == "mac-backend"]
    assert mac.severity == "warning" and "--backend=torch --device=mps" in mac.fix
    assert "#81987" in mac.message
    old = preflight(
        CPU_INFO, versions=_mac("2.15.1", "1.1.0"), policy="float32", backend="tensorflow"
    )
    assert "mac-backend" not in _codes(old)
    linux = dict(_mac(), platform="linux-x86_64")
    assert "mac-backend" not in _codes(preflight(CPU_INFO, versions=linux, backend="tensorflow"))
    assert "mac-backend" not in _codes(preflight(CPU_INFO, versions=_mac(), backend="torch"))


def test_mps_findings(keras, monkeypatch):
    mps = DeviceInfo("metal", "mps", 0, "Apple M2 GPU (MPS)")
    monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK", raising=False)
    found = preflight(mps, versions=_mac(), policy="float32", jit_compile=True, backend="torch")
    assert {"mps-compile", "mps-fallback"} <= _codes(found)
    assert not _codes(found) & {"metal-xla", "metal-random", "metal-optimizer", "mac-backend"}
    (fallback,) = [f for f in found if f.code == "mps-fallback"]
    assert "NotImplementedError" in fallback.message and "=1" in fallback.fix
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    (fallback,) = [
        f for f in preflight(mps, versions=_mac(), backend="torch") if f.code == "mps-fallback"
    ]
    assert "run on the CPU" in fallback.message and "placement" in fallback.fix
    model64 = keras.Sequential(
        [keras.Input((2,), dtype="float64"), keras.layers.Dense(1, dtype="float64")]
    )
    assert "mps-float64" in _codes(
        preflight(mps, model=model64, versions=_mac(), backend="torch"), "error"
    )
    jax_metal = preflight(
        DeviceInfo("metal", "METAL:0", 0, "Metal"), versions=_mac(), backend="jax"
    )
    assert "jax-metal" in _codes(jax_metal, "warning")


def test_device_mps_picks_the_backend_that_reaches_the_apple_gpu(monkeypatch):
    from toolkit import _argv
    from toolkit import backend as backends

    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setattr(backends, "apple_gpu_backend", lambda: "torch")
    chosen = []
    monkeypatch.setattr(backends, "select", lambda b: chosen.append(b) or b)
    monkeypatch.delitem(sys.modules, "keras", raising=False)

    def chosen_by(*argv: str) -> str | None:
        return _argv.start_backend(_argv.start_flags(argv))

    assert chosen_by("--device=mps") == "torch" and chosen == ["torch"]
    assert chosen_by("--device", "cpu") is None
    assert chosen_by("--backend=jax", "--device=mps") == "jax"
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")  # an explicit choice stays
    assert chosen_by("--device=metal") is None
    monkeypatch.undo()
    if sys.platform != "darwin":
        assert backends.apple_gpu_backend() is None  # no Apple GPU off a Mac


def test_load_tensorflow_leaves_jax_unloaded_until_tflite_asks_for_it():
    """TensorFlow's import brings JAX in (TFLite's and Keras's Orbax callback's imports) where
    it is installed; a TensorFlow run never uses it, so it is left out, and TFLite's JAX
    converter still works: its ``jit`` imports JAX on the first call."""
    out = run_python(
        "import os, sys\n"
        "os.environ['KERAS_BACKEND'] = 'tensorflow'\n"
        "from toolkit.devices import runtime\n"
        "assert runtime.load_tensorflow()\n"
        "import keras, tensorflow as tf\n"
        "print('jax' in sys.modules, keras.config.backend())\n"
        "import jax.numpy as jnp\n"
        "convert = tf.lite.TFLiteConverter.experimental_from_jax(\n"
        "    [lambda x: jnp.sin(x)], [[('x', jnp.zeros((3,)))]])\n"
        "print(len(convert.convert()) > 0, runtime._JaxDeferred in map(type, sys.meta_path))\n"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "tensorflow", "True", "False"]


def test_machine_facts_name_jax_where_tensorflow_loaded_without_it():
    """The caches' machine key is the same whether TensorFlow came with JAX (your script's
    ``import tensorflow``) or without it (the toolkit's load): JAX's installed version."""
    from importlib import metadata

    out = run_python(
        "import sys\n"
        "from toolkit.devices import runtime\n"
        "from toolkit.core import machine\n"
        "runtime.load_tensorflow()\n"
        "print('jax' in sys.modules, machine.machine_facts().get('jax'))\n"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", metadata.version("jax")]
    import jax  # this process's TensorFlow loaded it, as your script's does

    assert machine.machine_facts()["jax"] == jax.__version__ == metadata.version("jax")
