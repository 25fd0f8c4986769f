"""PyTorch behind the seam: what the backend-neutral core needs when Keras trains on PyTorch.

On CUDA and MPS dispatch is asynchronous, so a batch begin only queues a step: StepTimer re-times
an epoch at batch ends when the device was behind, adding no sync of its own. ``--jit_compile`` is
``torch.compile``; :func:`check_config` refuses ``--fused_steps``, ``tf.distribute`` strategies and,
before Keras 3.16, ``--steps_per_execution``."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from toolkit.backend._common import (
    MB,
    SEAM,
    calibrated_peak,
    digest,
    no_retracing_noise,
    one_step_per_batch,
    refuse_tf_only,
)
from toolkit.backend._torch.anatomy import (
    anatomy_refusal,
    anatomy_trace,
    layer_alone,
    layer_scope,
    mark_input,
    raw_step,
)
from toolkit.backend._torch.compiles import DynamoCounters
from toolkit.backend._torch.devices import (
    apple_gpu_path,
    augmentation_scope,
    detect_devices,
    device_scope,
    framework_device,
    placement,
    preflight,
    reaches_apple_gpu,
    select_device,
    visible_devices,
    why_no_device,
)
from toolkit.core import compat
from toolkit.core._advice import Advice
from toolkit.core.stats import MatmulRun

__all__ = list(SEAM)  # the seam's contract: toolkit.backend._common.SEAM

METHOD = "torch.utils.flop_counter.FlopCounterMode (matmuls, attention and convolutions)"
_TRACE: list[Any] = []  # the running torch.profiler.profile, while a trace is on


def framework_facts() -> dict[str, Any]:
    """PyTorch and Keras versions, its CUDA build, and the devices it sees."""
    import torch

    devices = [{"name": "cpu", "type": "CPU"}]
    if torch.cuda.is_available():
        devices += [
            {"name": f"cuda:{i} {torch.cuda.get_device_name(i)}", "type": "GPU"}
            for i in range(torch.cuda.device_count())
        ]
    if torch.backends.mps.is_available():
        devices.append({"name": "mps", "type": "GPU"})
    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "devices": devices,
    }


def check_config(config: Any) -> None:
    """Raises ValueError (one line) for a setting Keras's PyTorch backend cannot run."""
    if config.steps_per_execution > 1 and not keras_loops_steps():
        from importlib import metadata

        try:  # its version as installed: said before Keras loads
            version = metadata.version("keras")
        except metadata.PackageNotFoundError:
            import keras

            version = keras.__version__
        raise ValueError(
            f"--steps_per_execution={config.steps_per_execution} on --backend=torch needs "
            f"Keras 3.16 or later (keras-nightly today); Keras {version}'s PyTorch "
            "backend runs one step per call: use --steps_per_execution=1 (or --backend=jax)"
        )
    refuse_tf_only(config, "torch")


def use_compile_cache(directory: str) -> str:
    """Keeps ``torch.compile``'s Inductor cache in `directory` (unless set); returns what it did."""
    import os

    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", directory)
    where = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    return f"torch.compile's Inductor cache in {where} (programs compiled with --jit_compile)"


def private_caches() -> str | None:
    """Points Inductor's cache at a directory only this user can write, where nothing named one:
    its default ``/tmp/torchinductor_<user>`` is used as found, even if someone else made it with
    their ``.so`` files in it. Returns the directory: that name, checked, or a scratch one."""
    import atexit
    import getpass
    import os
    import sys
    import tempfile

    from toolkit.core import files

    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return None
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    name = f"torchinductor_{user}".replace(os.sep, "_")
    where = files.private_dir(name)
    if where is None:
        where = files.scratch_dir("toolkit-torchinductor-")
        atexit.register(files.remove_scratch, where)
        print(
            f"note: {os.path.join(tempfile.gettempdir(), name)} is not this user's private "
            "directory: torch.compile's cache goes to a private one instead, but PyTorch "
            "still keeps its precompiled headers there (set TMPDIR to a private directory)",
            file=sys.stderr,
        )
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = where
    return where


def intra_op_threads() -> int:
    """PyTorch's intra-op thread count."""
    import torch

    return int(torch.get_num_threads())


def float32_matmul_precision() -> str:
    """``"float32"`` under PyTorch's default float32 matmul precision, else ``"tf32"``."""
    import torch

    return "float32" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def _sync(target: Any) -> None:
    import torch

    if target.type == "cuda":
        torch.cuda.synchronize(target)
    elif target.type == "mps":
        torch.mps.synchronize()


def start_trace(logdir: str, host_level: int, python_level: int, device_level: int) -> None:
    """Starts ``torch.profiler`` (CPU, and CUDA when there is one) writing to `logdir`.

    Raises:
        RuntimeError: another profiler is already running (a second would crash PyTorch)."""
    import torch

    if profiler_probe()():  # checked before a second profiler crashes torch
        raise RuntimeError("another PyTorch profiler is already running in this process")

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device_level and torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(
        activities=activities,
        with_stack=python_level > 0,
        on_trace_ready=torch.profiler.tensorboard_trace_handler(logdir),
    )
    try:
        profiler.start()
    except BaseException:
        _clear_flag()
        raise
    _TRACE.append(profiler)


def _clear_flag() -> None:
    """PyTorch sets its process-wide "profiler running" flag before starting and clears it after
    stopping: a start or stop that raised would leave it set, every later step read as traced."""
    import torch
    from torch.autograd import profiler

    if not torch._C._autograd._profiler_enabled() and hasattr(profiler, "_is_profiler_enabled"):
        profiler._is_profiler_enabled = False


def stop_trace() -> None:
    """Stops ``torch.profiler`` and writes the trace."""
    if _TRACE:
        try:
            _TRACE.pop().stop()
        finally:
            _clear_flag()


def trace_files(names: list[str]) -> list[str]:
    """Which of `names` are this profiler's traces: Chrome trace JSON."""
    return [n for n in names if n.endswith((".pt.trace.json", ".pt.trace.json.gz"))]


def step_marker(step: int) -> Any:
    """A context around one training step: the ``ProfilerStep#N`` range ``profile.step()`` makes."""
    import torch

    return torch.profiler.record_function(f"ProfilerStep#{step}")


def profiler_probe() -> Any:
    """A per-step-cheap probe: is a PyTorch profiler recording here? Two private reads: the
    process-wide ``_is_profiler_enabled`` every Python entry point sets (Keras 3's callback thread
    sees it), and the C check, seeing a profiler started without them, on its own thread only."""
    import torch
    from torch.autograd import profiler

    enabled = torch._C._autograd._profiler_enabled
    if not hasattr(profiler, "_is_profiler_enabled"):
        return enabled
    return lambda: profiler._is_profiler_enabled or enabled()


def device_memory(reset_peak: bool = False) -> dict[str, dict[str, float]]:
    """Current and peak memory of each CUDA GPU (and the MPS allocator's current), in MiB."""
    import torch

    out: dict[str, dict[str, float]] = {}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            out[f"GPU:{i}"] = {
                "current_mb": torch.cuda.memory_allocated(i) / MB,
                "peak_mb": torch.cuda.max_memory_allocated(i) / MB,
            }
            if reset_peak:
                torch.cuda.reset_peak_memory_stats(i)
    if torch.backends.mps.is_available():
        current = torch.mps.current_allocated_memory() / MB
        out["MPS:0"] = {"current_mb": current, "peak_mb": current}
    return out


def device_memory_limit() -> dict[str, float]:
    """Each CUDA GPU's memory in MiB, or the MPS allocator's recommended most; ``{}`` on a CPU."""
    import torch

    out: dict[str, float] = {}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            out[f"GPU:{i}"] = torch.cuda.get_device_properties(i).total_memory / MB
    if torch.backends.mps.is_available():
        with contextlib.suppress(AttributeError, RuntimeError):
            out["MPS:0"] = torch.mps.recommended_max_memory() / MB
    return out


def live_tensors(cheap_only: bool = False) -> tuple[list[Any], str, bool]:
    """The tensors alive here, parameters too, by a garbage-collector walk: none if `cheap_only`."""
    if cheap_only:
        return [], "tensors", False
    import gc

    import torch

    return [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor)], "tensors", True


def count_flops(model: Any, batch_size: int) -> tuple[int | None, int | None, str, str | None]:
    """``(forward FLOPs, train-step FLOPs, method, note)`` by ``FlopCounterMode``. Never raises."""
    try:
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        keras = compat.keras()
        inputs = getattr(model, "inputs", None)
        if not inputs:
            return None, None, METHOD, "the model has no symbolic inputs (use keras.Input)"
        xs = [keras.ops.zeros((batch_size, *tuple(i.shape)[1:]), dtype=i.dtype) for i in inputs]
        x = xs if len(xs) > 1 else xs[0]
        cpu_attention = _cpu_attention_formulas()
        with (
            torch.no_grad(),
            FlopCounterMode(display=False, custom_mapping=cpu_attention) as counter,
        ):
            model(x, training=False)
        forward = int(counter.get_total_flops())
        with FlopCounterMode(display=False, custom_mapping=cpu_attention) as counter:
            leaves = torch.utils._pytree.tree_leaves(model(x, training=True))
            sum(leaf.float().sum() for leaf in leaves).backward()
        train = int(counter.get_total_flops())
        for variable in model.trainable_variables:
            variable.value.grad = None
    except Exception as e:  # noqa: BLE001 - a count is a nicety; training goes on
        return None, None, METHOD, f"not counted: {type(e).__name__}: {e}"
    if not train:
        return None, None, METHOD, "FlopCounterMode counted no FLOPs"
    return (forward, train, METHOD,
            "matmuls, attention and convolutions only (element-wise ops not counted)")  # fmt: skip


def _cpu_attention_formulas() -> dict[Any, Any]:
    """FlopCounterMode's formulas for CPU attention (it counts CUDA's only), given per counter."""
    import torch
    from torch.utils import flop_counter

    def forward(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return flop_counter.sdpa_flop_count(query, key, value)

    def backward(grad: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return flop_counter.sdpa_backward_flop_count(grad, query, key, value)

    ops = (("_scaled_dot_product_flash_attention_for_cpu", forward),
           ("_scaled_dot_product_flash_attention_for_cpu_backward", backward))  # fmt: skip
    found = {getattr(torch.ops.aten, name, None): count for name, count in ops}
    return {
        op: f for op, f in found.items() if op is not None and op not in flop_counter.flop_registry
    }


def measure_matmul_peak(
    device: Any, dtype: str = "float32", size: int = 2048, seconds: float = 0.15
) -> MatmulRun:
    """The peak FLOP/s of ``size``² matmuls on `device` (``cuda:0``), chained, waited on per run."""
    import torch

    target = torch.device(device)
    generator = torch.Generator().manual_seed(0)
    kind = getattr(torch, dtype)
    a = torch.randn(size, size, generator=generator).to(target, kind)
    b = (torch.randn(size, size, generator=generator) * size**-0.5).to(target, kind)

    def timed(n: int) -> float:
        with torch.inference_mode():
            _sync(target)
            start = time.perf_counter()
            c = a
            for _ in range(n):
                c = c @ b
            float(c[0, 0])  # one element back: waits for the chain
            return time.perf_counter() - start

    return calibrated_peak(timed, size, seconds)


fuse_train_steps = one_step_per_batch
quiet_retracing = no_retracing_noise


# Keras's PyTorch training under DistributedDataParallel (3.16 on): found, not assumed by version.
_KERAS_TORCH_DISTRIBUTION = "keras.src.backend.torch.distribution_lib"
_STORE: list[Any] = []  # worker 0's TCPStore server: open as long as the process group


def _keras_distribution_lib() -> Any:
    """Keras's PyTorch distribution module, or ValueError (one line) naming the Keras it needs."""
    import importlib
    import importlib.util

    import keras

    module = None
    if importlib.util.find_spec(_KERAS_TORCH_DISTRIBUTION) is not None:
        module = importlib.import_module(_KERAS_TORCH_DISTRIBUTION)
    if module is None or not callable(getattr(module, "initialize", None)):
        raise ValueError(
            "--backend=torch --distribution_strategy=data_parallel needs Keras 3.16 or later "
            f"(keras-nightly), whose PyTorch backend trains under DDP; Keras {keras.__version__} "
            "is installed: use --backend=jax, or install keras-nightly"
        )
    return module


def start_processes(
    coordinator: str,
    num_processes: int,
    process_id: int,
    wait_s: float,
    before: Callable[[], Any] = lambda: None,
) -> None:
    """Joins the PyTorch process group through Keras's ``initialize`` (gloo on CPUs, NCCL on GPUs),
    after `before` (the toolkit's join); else one line naming what Keras lacks. The rendezvous is
    torchrun's environment; worker 0 opens its TCPStore (PyTorch's: on every interface) on a socket
    bound where the join listened, all joining as clients (``TORCHELASTIC_USE_AGENT_STORE``)."""
    import datetime
    import os

    distribution_lib = _keras_distribution_lib()
    before()
    import torch.distributed as dist

    from toolkit.distribute.processes import listening_socket

    host, _, port = coordinator.rpartition(":")
    os.environ.update(
        MASTER_ADDR=host.strip("[]"),
        MASTER_PORT=port,
        WORLD_SIZE=str(num_processes),
        RANK=str(process_id),
        LOCAL_RANK=os.environ.get("LOCAL_RANK", "0"),
    )
    if process_id == 0:
        server, ip, bound = listening_socket(coordinator)
        store = dist.TCPStore(
            ip,
            bound,
            num_processes,
            is_master=True,
            timeout=datetime.timedelta(seconds=max(60.0, wait_s)),
            wait_for_workers=False,
            master_listen_fd=server.detach(),  # the store's from here on
        )
        _STORE[:] = [store]
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE")
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    try:
        # Not the address: Keras's own parsing splits host:port at a colon, which IPv6 has more of.
        distribution_lib.initialize(None, num_processes, process_id)
    finally:
        if agent is None:
            del os.environ["TORCHELASTIC_USE_AGENT_STORE"]
        else:
            os.environ["TORCHELASTIC_USE_AGENT_STORE"] = agent


def data_parallel() -> tuple[Any, int]:
    """``(keras.distribution.DataParallel, replicas)`` where Keras trains PyTorch under it."""
    _keras_distribution_lib()
    import keras

    devices = keras.distribution.list_devices()
    distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
    keras.distribution.set_distribution(distribution)
    return distribution, len(devices)


def processes() -> tuple[int, int]:
    """``(rank, world size)`` of an initialized process group; ``(0, 1)`` alone."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_processes(values: list[float]) -> list[list[float]]:
    """Every process's `values`, in rank order (one collective)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return [list(values)]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, list(values))
    return [list(v) for v in out]


def weights_digest(model: Any) -> str:
    """A fingerprint of `model`'s weights."""
    return digest(w for w in model.get_weights())


def searched_jit() -> tuple[bool, ...]:
    """The ``jit_compile`` values tune tries: eager (torch.compile's first step outlasts a tune)."""
    return (False,)


def step_loops(loader: str = "", model: Any = None) -> tuple[str, ...]:
    """The loop settings tune searches: ``steps_per_execution`` where Keras takes it on PyTorch."""
    return ("steps_per_execution",) if keras_loops_steps() else ()


# What Keras 3.15's PyTorch trainer says when steps_per_execution > 1 (its refusal).
_ONE_STEP_PER_CALL = "`steps_per_execution` must be 1 with the PyTorch backend"


@functools.cache
def keras_loops_steps() -> bool:
    """Whether the installed Keras takes ``steps_per_execution > 1`` on PyTorch (3.16), read in its
    trainer's source: asking would build a model (moving layer-name counters), load Keras early."""
    import importlib.util
    import pathlib

    try:
        spec = importlib.util.find_spec("keras")  # the package found, not imported
        roots = list(spec.submodule_search_locations or ()) if spec is not None else []
        found = [pathlib.Path(r, "src", "backend", "torch", "trainer.py") for r in roots]
        source = next(f for f in found if f.is_file()).read_text(encoding="utf-8")
    except (ImportError, OSError, StopIteration, ValueError):
        return False
    return _ONE_STEP_PER_CALL not in source


def dispatches_asynchronously() -> bool:
    """Whether a batch begin only queues the step: on CUDA, MPS, XPU; on a CPU, gaps are input."""
    try:
        from keras.src.backend.torch.core import get_device

        device = str(get_device())
    except Exception:  # noqa: BLE001 - a Keras without it: what torch has
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return not device.startswith("cpu")


def trains_under_tf_distribute() -> bool:
    """No: Keras's own distribution (DistributedDataParallel, from Keras 3.16)."""
    return False


def loop_advice(fused: bool = True) -> Advice:
    """What to try when the step is short: PyTorch has no fused steps."""
    if keras_loops_steps():
        return Advice.of(
            "try {0} (K steps per call: Keras's batch hooks run once per call) or a larger batch",
            {"steps_per_execution": "K"},
        )
    return Advice.of(
        "Keras's PyTorch backend runs one step per call, so a larger batch or {0} (with "
        "steps_per_execution) is the way out",
        {"backend": "jax"},
    )


def jit_advice() -> Advice | None:
    return Advice.of(
        "try {0} (torch.compile: its first step compiles for tens of seconds; measure whether "
        "the steps win it back)",
        {"jit_compile": True},
    )


def fit_batches(model: Any, fit_data: dict[str, Any]) -> tuple[str, Iterator[Any]] | None:
    """What `model`'s ``fit`` reads for `fit_data`: its adapter's name and batches, one a step."""
    from keras.src.backend.torch.trainer import TorchEpochIterator

    from toolkit.backend._fit_input import read_as_fit

    return read_as_fit(TorchEpochIterator, lambda handed: handed[0], fit_data)


def wait_for_device() -> None:
    """Waits for the CUDA or MPS device's queued work; on the CPU each op runs to its end."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    elif torch.backends.mps.is_available():
        torch.mps.synchronize()


def compile_watch(model: Any, clock: Callable[[], float]) -> DynamoCounters:
    """This backend's signal of a fit's compiles and input time, for the ledger."""
    return DynamoCounters(model, clock)
