"""A fourth Keras backend, fake, for the test that adding one touches its module and one
registry line only (``tests/test_backends.py``). Its "framework" is NumPy; it sees the host CPU
and one accelerator, ``gpu:0`` ("Fake accelerator"), which is NumPy too.

It implements the whole seam (``toolkit.backend._common.SEAM``) as a real backend module
would, and imports what one may: ``toolkit.core`` and ``toolkit.backend._common`` (the layers
test reads this file as if it were ``toolkit.backend._fake``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from toolkit.backend._common import (
    SEAM,
    CompileWatch,
    calibrated_peak,
    digest,
    no_augmentation_pin,
    no_retracing_noise,
    one_step_per_batch,
    refuse_tf_only,
)
from toolkit.core._advice import Advice
from toolkit.core._device_types import (
    DeviceError,
    DeviceInfo,
    Finding,
    PlacementReport,
    PreflightContext,
    host_cpu,
)
from toolkit.core.stats import MatmulRun

__all__ = list(SEAM)

NAME = "fake"
ACCELERATOR = DeviceInfo("gpu", "fake:0", 0, "Fake accelerator", 1024.0)
_state: dict[str, Any] = {"device": None, "trace": None}


# ---------------------------------------------------------------------------- devices


def detect_devices() -> list[DeviceInfo]:
    return [host_cpu(), ACCELERATOR]


def why_no_device(kind: str) -> str | None:
    return {"cuda": "the fake backend has no CUDA GPU", "metal": "nor an Apple GPU"}.get(kind)


def select_device(device: DeviceInfo, memory_growth: bool) -> None:
    if device not in detect_devices():
        raise DeviceError(f"the fake backend has no {device.spec}")
    _state["device"] = framework_device(device)


def framework_device(device: DeviceInfo) -> str:
    return "fake:0" if device.is_gpu else "cpu"


def visible_devices() -> list[DeviceInfo]:
    return detect_devices()


@contextlib.contextmanager
def device_scope(device: DeviceInfo) -> Iterator[None]:
    before = _state["device"]
    _state["device"] = framework_device(device)
    try:
        yield
    finally:
        _state["device"] = before


augmentation_scope = no_augmentation_pin  # NumPy runs no random ops of tf.data's


def placement(
    fn: Callable[..., Any], args: Any, kwargs: Any, gpu_selected: bool | None
) -> PlacementReport:
    """Each NumPy array `fn` returns, on the device selected (the fake places nothing
    itself)."""
    import numpy as np

    result = fn(*args, **kwargs)
    results = result if isinstance(result, tuple) else (result,)
    device = _state["device"] or "cpu"
    ops = tuple(
        (f"result[{i}]", f"{a.dtype}{list(a.shape)}", device)
        for i, a in enumerate(results)
        if isinstance(a, np.ndarray)
    )
    selected = device != "cpu" if gpu_selected is None else gpu_selected
    return PlacementReport(ops, selected, "(fake: each result on the selected device)")


def apple_gpu_path() -> tuple[str, str, str]:
    return ("broken", "none: the fake backend reaches no Apple GPU", "tests/fake_backend.py")


def reaches_apple_gpu() -> bool:
    return False


def preflight(device: DeviceInfo, context: PreflightContext) -> list[Finding]:
    if device.is_gpu and context.jit_compile:
        return [Finding("warning", "fake-jit", "the fake accelerator compiles nothing", "measure")]
    return []


# ---------------------------------------------------------------------------- how it trains


def dispatches_asynchronously() -> bool:
    return False


def trains_under_tf_distribute() -> bool:
    return False


def loop_advice(fused: bool = True) -> Advice:
    return Advice("a larger batch (the fake backend runs one step per call)")


def jit_advice() -> Advice | None:
    return None


def searched_jit() -> tuple[bool, ...]:
    return (False,)


def step_loops(loader: str = "", model: Any = None) -> tuple[str, ...]:
    return ()


def check_config(config: Any) -> None:
    refuse_tf_only(config, NAME)


def fuse_train_steps(model: Any, steps: int) -> None:
    one_step_per_batch(model, steps)


def quiet_retracing() -> contextlib.AbstractContextManager:
    return no_retracing_noise()


def use_compile_cache(directory: str) -> str:
    return f"compile cache: the fake backend compiles nothing to keep in {directory}"


def private_caches() -> str | None:
    return None


# ---------------------------------------------------------------------------- measuring


def framework_facts() -> dict[str, Any]:
    import numpy as np

    return {"fake": np.__version__, "devices": [{"name": d.label(), "type": d.device_type}
                                                for d in detect_devices()]}  # fmt: skip


def intra_op_threads() -> int:
    return 1


def float32_matmul_precision() -> str:
    return "float32"


def count_flops(model: Any, batch_size: int) -> tuple[int | None, int | None, str, str | None]:
    return None, None, "none", "the fake backend counts no FLOPs"


def measure_matmul_peak(
    device: Any, dtype: str = "float32", size: int = 256, seconds: float = 0.05
) -> MatmulRun:
    import numpy as np

    a = np.ones((size, size), dtype=dtype)

    def timed(n: int) -> float:
        start = time.perf_counter()
        x = a
        for _ in range(n):
            x = (x @ a) * (1.0 / size)
        return time.perf_counter() - start

    return calibrated_peak(timed, size, seconds)


def device_memory(reset_peak: bool = False) -> dict[str, dict[str, float]]:
    return {}


def device_memory_limit() -> dict[str, float]:
    return {}


def live_tensors(cheap_only: bool = False) -> tuple[list[Any], str, bool]:
    return [], "tensors", True


def start_trace(logdir: str, host_level: int, python_level: int, device_level: int) -> None:
    _state["trace"] = logdir


def stop_trace() -> None:
    _state["trace"] = None


def trace_files(names: list[str]) -> list[str]:
    return [n for n in names if n.endswith(".fake.trace")]


def step_marker(step: int) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def fit_batches(model: Any, fit_data: dict[str, Any]) -> tuple[str, Iterator[Any]] | None:
    return None  # no Keras trainer of its own: the toolkit times its tf.data form


def wait_for_device() -> None:
    """NumPy runs each call to its end: nothing is queued."""


def profiler_probe() -> Callable[[], bool]:
    return lambda: _state["trace"] is not None


# ---------------------------------------------------------------------------- processes


def start_processes(
    coordinator: str, num_processes: int, process_id: int, wait_s: float,
    before: Callable[[], Any] = lambda: None,
) -> None:  # fmt: skip
    raise ValueError("--backend=fake trains in one process")


def data_parallel() -> tuple[Any, int]:
    raise ValueError("--backend=fake has no data parallelism")


def processes() -> tuple[int, int]:
    return 0, 1


def gather_processes(values: list[float]) -> list[list[float]]:
    return [list(values)]


def weights_digest(model: Any) -> str:
    return digest(model.get_weights())


def compile_watch(model: Any, clock: Callable[[], float]) -> CompileWatch:
    return CompileWatch(model, clock)  # NumPy compiles nothing


def layer_scope(token: str) -> Any:
    return contextlib.nullcontext()


def anatomy_refusal(model: Any) -> str | None:
    return None


def mark_input(model: Any) -> Any:
    return contextlib.nullcontext()


def anatomy_trace(files: list[str]) -> Any:
    from toolkit.core._anatomy import StepTrace

    return StepTrace(error="the fake backend writes no trace")


def raw_step(model: Any, batch: Any, per_call: int = 1) -> tuple[Callable[[int], float], str]:
    def timed(n: int) -> float:
        t = time.perf_counter()
        for _ in range(n * per_call):
            sum(range(100))
        return time.perf_counter() - t

    return timed, "a loop of NumPy-free Python"


def layer_alone(
    layer: Any, inputs: Any, *, backward: bool = True, jit: bool = False, input_grads: bool = True
) -> Callable[[int], float]:
    return raw_step(layer, None)[0]
