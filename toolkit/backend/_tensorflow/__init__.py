"""TensorFlow behind the seam: what the backend-neutral core needs from TensorFlow, in one place.

TensorFlow is imported inside each function, so importing this module is free."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from toolkit.backend._common import MB, SEAM, calibrated_peak, digest, mark_fused_steps
from toolkit.backend._tensorflow.anatomy import (
    anatomy_refusal,
    anatomy_trace,
    layer_alone,
    layer_scope,
    mark_input,
    raw_step,
)
from toolkit.backend._tensorflow.compiles import TracingCounts
from toolkit.backend._tensorflow.devices import (
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
from toolkit.core._advice import Advice
from toolkit.core.stats import MatmulRun

__all__ = list(SEAM)  # the seam's contract: toolkit.backend._common.SEAM

METHOD = "tf.profiler float_operation on the traced graph"
_WHILE_OPS = frozenset({"While", "StatelessWhile"})


def framework_facts() -> dict[str, Any]:
    """TensorFlow/Keras versions, the build's CUDA facts and the logical devices."""
    import tensorflow as tf

    facts: dict[str, Any] = {
        "tensorflow": tf.__version__,
    }
    try:
        build = tf.sysconfig.get_build_info()
        facts["tf_build"] = {
            k: build.get(k) for k in ("is_cuda_build", "cuda_version", "cudnn_version")
        }
    except Exception:  # noqa: BLE001 - build info is a nicety
        pass
    try:
        facts["devices"] = [
            {"name": d.name, "type": d.device_type} for d in tf.config.list_logical_devices()
        ]
    except Exception as e:  # noqa: BLE001
        facts["devices"] = [{"error": str(e)}]
    return facts


def use_compile_cache(directory: str) -> str:
    """Keeps the XLA programs TensorFlow compiles in `directory` (XLA's persistent cache). Set after
    TF's devices started (it reads ``TF_XLA_FLAGS`` once), it warns instead. Returns what it did."""
    import os

    from absl import logging

    current = os.environ.get("TF_XLA_FLAGS", "")
    if "--tf_xla_persistent_cache_directory=" in current:
        return "XLA's persistent cache (TF_XLA_FLAGS)"
    if _devices_started():
        logging.warning(
            "--compile_cache: TensorFlow started before the cache was set, so XLA compiles "
            "without it in this process; set it first (toolkit.backend.use_compile_cache() "
            "before any TensorFlow op) or export TF_XLA_FLAGS=--tf_xla_persistent_cache_"
            "directory=%s",
            directory,
        )
        return "off: TensorFlow had started its devices before it was set"
    flag = f"--tf_xla_persistent_cache_directory={directory}"
    os.environ["TF_XLA_FLAGS"] = f"{current} {flag}".strip()
    return f"XLA's persistent cache in {directory} (programs compiled with --jit_compile)"


def _devices_started() -> bool:
    """Whether TensorFlow's eager context (its devices, its XLA flags) is initialized."""
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None  # no public probe


def private_caches() -> str | None:
    """Nothing: this framework writes no shared compile cache by default."""
    return None


def intra_op_threads() -> int:
    """TensorFlow's intra-op thread setting (0: its default)."""
    import tensorflow as tf

    return int(tf.config.threading.get_intra_op_parallelism_threads())


def float32_matmul_precision() -> str:
    """``"tf32"`` if float32 matmuls may use TF32 cores, else ``"float32"`` (the datasheet row)."""
    import tensorflow as tf

    return "tf32" if tf.config.experimental.tensor_float_32_execution_enabled() else "float32"


def check_config(config: Any) -> None:
    """Every setting runs on TensorFlow: nothing to refuse."""


def start_trace(logdir: str, host_level: int, python_level: int, device_level: int) -> None:
    """Starts the TF profiler writing to `logdir`. Raises what the profiler raises."""
    import tensorflow as tf

    options = tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=host_level,
        python_tracer_level=python_level,
        device_tracer_level=device_level,
    )
    tf.profiler.experimental.start(logdir, options=options)


def stop_trace() -> None:
    """Stops the TF profiler and writes the trace. Raises what the profiler raises."""
    import tensorflow as tf

    tf.profiler.experimental.stop()


def trace_files(names: list[str]) -> list[str]:
    """Which of `names` are this profiler's traces: XSpace files (TensorBoard, XProf)."""
    return [n for n in names if n.endswith(".xplane.pb")]


def step_marker(step: int) -> Any:
    """A context around one training step that XProf reads as a step marker (Keras 3 makes none)."""
    import tensorflow as tf

    return tf.profiler.experimental.Trace("train", step_num=step, _r=1)


def profiler_probe() -> Any:
    """A per-step-cheap probe: is a TF profiler session running here (a server's capture is not)."""
    from tensorflow.python.profiler import profiler_v2  # no public "is running"

    if not hasattr(profiler_v2, "_profiler"):
        return _never
    return lambda: profiler_v2._profiler is not None


def _never() -> bool:
    return False


def device_memory(reset_peak: bool = False) -> dict[str, dict[str, float]]:
    """Current and peak memory of each visible GPU, in MiB, where TensorFlow exposes it.

    Args:
        reset_peak: reset each device's peak counter after reading it.

    Returns:
        ``{"GPU:0": {"current_mb": ..., "peak_mb": ...}}``; the CPU's zeros are left out."""
    import tensorflow as tf

    out: dict[str, dict[str, float]] = {}
    for dev in tf.config.list_logical_devices("GPU"):
        name = dev.name.split("device:")[-1]
        try:
            info = tf.config.experimental.get_memory_info(name)
        except (ValueError, tf.errors.OpError, NotImplementedError):
            continue  # e.g. tensorflow-metal exposes no memory info
        out[name] = {"current_mb": info["current"] / MB, "peak_mb": info["peak"] / MB}
        if reset_peak:
            with contextlib.suppress(ValueError, tf.errors.OpError, NotImplementedError):
                tf.config.experimental.reset_memory_stats(name)
    return out


def device_memory_limit() -> dict[str, float]:
    """Each visible GPU's memory in MiB, from ``nvidia-smi`` (TF has no call); else ``{}``."""
    import shutil
    import subprocess

    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    smi = shutil.which("nvidia-smi")
    if not gpus or smi is None:
        return {}
    try:
        out = subprocess.run(
            [smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return {}
    totals = [float(v) * 1e6 / MB for v in out if v.replace(".", "", 1).isdigit()]  # MB -> MiB
    return {d.name.split("device:")[-1]: t for d, t in zip(gpus, totals, strict=False)}


def live_tensors(cheap_only: bool = False) -> tuple[list[Any], str, bool]:
    """The eager tensors alive here, by a garbage-collector walk: none if `cheap_only`."""
    if cheap_only:
        return [], "tensors", False
    import gc

    import tensorflow as tf

    kind = type(tf.constant(0.0))
    return [o for o in gc.get_objects() if type(o) is kind], "tensors", True


def _graph_flops(graph: Any) -> int:
    from tensorflow.python.profiler import model_analyzer, option_builder
    from tensorflow.python.util import deprecation

    builder = option_builder.ProfileOptionBuilder
    options = builder(builder.float_operation()).with_empty_output().build()
    with deprecation.silence():  # the v1 profiler warns about its own shape helper
        counted = int(model_analyzer.profile(graph, options=options).total_float_ops)
    return counted + sum(_einsum_flops(op) for op in graph.get_operations() if op.type == "Einsum")


def _einsum_flops(op: Any) -> int:
    """An ``Einsum`` op's FLOPs (Keras's attention on TF), which TF's profiler leaves out: 2 × the
    product of every index's size (1 × for one operand); 0 where a shape is unknown."""
    try:
        equation = op.get_attr("equation").decode()
        shapes = [tuple(i.shape.as_list()) for i in op.inputs]
    except (ValueError, AttributeError, TypeError):
        return 0
    subscripts = equation.split("->")[0].split(",")
    if len(subscripts) != len(shapes) or any(None in shape for shape in shapes):
        return 0
    sizes: dict[str, int] = {}
    for subscript, shape in zip(subscripts, shapes, strict=True):
        if "..." in subscript:  # broadcast dimensions, aligned from the right
            head, tail = subscript.split("...")
            extra = len(shape) - len(head) - len(tail)
            subscript = head + "".join(chr(0x100 + k) for k in range(extra))[::-1] + tail
        if len(subscript) != len(shape):
            return 0
        for index, size in zip(subscript, shape, strict=True):
            sizes[index] = max(sizes.get(index, 1), int(size))
    return (2 if len(shapes) > 1 else 1) * math.prod(sizes.values())


def _has_loop(graph: Any) -> bool:
    return any(op.type in _WHILE_OPS for op in graph.get_operations())


def _set_unroll(config: Any) -> bool:
    """Sets every ``unroll: False`` in a (nested) layer config to True; says if any was."""
    found = False
    if isinstance(config, dict):
        for key, value in config.items():
            if key == "unroll" and value is False:
                config[key] = True
                found = True
            else:
                found = _set_unroll(value) or found
    elif isinstance(config, list):
        for value in config:
            found = _set_unroll(value) or found
    return found


def _unrolled_clone(model: Any) -> Any | None:
    try:
        config = model.get_config()
    except Exception:  # noqa: BLE001 - a subclassed model may not serialize its config
        return None
    if not _set_unroll(config):
        return None
    try:
        return type(model).from_config(config)
    except Exception:  # noqa: BLE001
        return None


def _traced_graphs(model: Any, batch_size: int) -> tuple[Any, Any]:
    import tensorflow as tf

    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise ValueError("the model has no symbolic inputs (build it with keras.Input)")
    specs = [tf.TensorSpec((batch_size, *tuple(i.shape)[1:]), i.dtype) for i in inputs]

    def call(xs: tuple[Any, ...], training: bool) -> Any:
        return model(list(xs) if len(xs) > 1 else xs[0], training=training)

    @tf.function(autograph=False)
    def forward(*xs: Any) -> Any:
        return call(xs, False)

    @tf.function(autograph=False)
    def train_step(*xs: Any) -> Any:
        with tf.GradientTape() as tape:
            outputs = tf.nest.flatten(call(xs, True))
            loss = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32)) for o in outputs])
        return tape.gradient(loss, model.trainable_variables)

    return (
        forward.get_concrete_function(*specs).graph,
        train_step.get_concrete_function(*specs).graph,
    )


def count_flops(model: Any, batch_size: int) -> tuple[int | None, int | None, str, str | None]:
    """``(forward FLOPs, train-step FLOPs, method, note)`` of a built Keras model, from TF's graph
    profiler on the traced graphs. Never raises: what TF cannot count gets `None` and a note."""
    try:
        forward_graph, train_graph = _traced_graphs(model, batch_size)
        note = None
        if _has_loop(forward_graph) or _has_loop(train_graph):
            clone = _unrolled_clone(model)
            if clone is None:
                return (
                    None,
                    None,
                    METHOD,
                    "the model runs a tf.while_loop (e.g. an RNN) whose iterations TF's "
                    "graph profiler cannot count, and it could not be unrolled for counting",
                )
            forward_graph, train_graph = _traced_graphs(clone, batch_size)
            note = "recurrent layers counted on an unrolled clone of the model"
        forward, train_step = _graph_flops(forward_graph), _graph_flops(train_graph)
    except Exception as e:  # noqa: BLE001 - a count is a nicety; training goes on
        return None, None, METHOD, f"not counted: {type(e).__name__}: {e}"
    if train_step == 0:
        return None, None, METHOD, "TF's profiler counted no FLOPs"
    return forward, train_step, METHOD, note


def measure_matmul_peak(
    device: Any, dtype: str = "float32", size: int = 2048, seconds: float = 0.15
) -> MatmulRun:
    """Peak FLOP/s of ``size``² matmuls on `device`, chained in a ``tf.function`` (none dropped)."""
    import tensorflow as tf

    with tf.device(device):
        rng = tf.random.Generator.from_seed(0)
        a = tf.cast(rng.normal((size, size)), dtype)
        # Entries ~N(0, 1/size): products stay ~N(0, 1), no overflow in float16 / bfloat16.
        b = tf.cast(rng.normal((size, size), stddev=size**-0.5), dtype)

        @tf.function
        def chain(n: Any) -> Any:
            c = a
            for _ in tf.range(n):
                c = tf.matmul(c, b)
            return tf.reduce_sum(tf.cast(c[:1, :1], tf.float32))

        def timed(n: int) -> float:
            start = time.perf_counter()
            chain(tf.constant(n)).numpy()
            return time.perf_counter() - start

        return calibrated_peak(timed, size, seconds)


def fuse_train_steps(model: Any, steps: int) -> None:
    """Makes each Keras training batch run `steps` training steps inside one compiled call.
    The compiled ``train_step`` splits its ``steps × batch_size`` examples and runs the original
    step on each in a ``tf.while_loop`` (or straight-line: :func:`unrolls_fused_steps`), never back
    on the host in between, where ``steps_per_execution`` loops *around* the step, paying a launch
    and an iterator read per step. Logs are the last step's. Call it after ``compile``."""
    import tensorflow as tf

    if not mark_fused_steps(model, steps):
        return
    original = model.train_step

    def split(t: Any) -> Any:
        if t is None:
            return None
        n = t.shape[0]
        return tf.reshape(t, (steps, n // steps if n is not None else -1, *t.shape[1:]))

    def fused_train_step(data: Any) -> Any:
        batches = tf.nest.map_structure(split, data)

        def batch(i: Any) -> Any:
            return tf.nest.map_structure(lambda t: None if t is None else t[i], batches)

        # The first step, outside the loop, builds lazy state: no variables inside a while loop.
        graph = tf.compat.v1.get_default_graph()
        before = len(graph.get_operations())
        first = original(batch(0))
        xla = getattr(model, "jit_compile", False) is True
        platform = "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
        if unrolls_fused_steps(xla, platform, ops_convolve(graph.get_operations()[before:])):
            # Traced once, called `steps - 1` times (a Python loop would trace it `steps` times).
            later, logs = tf.function(original), first
            for i in range(1, steps):
                logs = later(batch(i))
            return logs
        _, logs = tf.while_loop(
            lambda i, _: i < steps,
            lambda i, _: (i + 1, original(batch(i))),
            (tf.constant(1), first),
        )
        return logs

    model.train_step = fused_train_step


def unrolls_fused_steps(xla: bool, platform: str, convolves: bool) -> bool:
    """Whether fused steps run as straight-line calls, not a ``tf.while_loop``: under XLA on a CPU,
    for a step that convolves. XLA's CPU compiler leaves a convolution's gradient in a loop body in
    a slow layout, many times slower; straight-line calls cost only a longer compile."""
    return xla and platform == "cpu" and convolves


def ops_convolve(ops: Any) -> bool:
    """Whether any of `ops` (a traced step's operations) is a convolution, forward or gradient."""
    import re

    return any(re.match(r"(Depthwise)?Conv([123]D|$)", op.type, re.IGNORECASE) for op in ops)


@contextlib.contextmanager
def quiet_retracing() -> Iterator[None]:
    """TF's logger at ERROR for the block: it counts many short runs (new models) as a retracing."""
    import tensorflow as tf

    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        yield
    finally:
        logger.setLevel(level)


def start_processes(
    coordinator: str,
    num_processes: int,
    process_id: int,
    wait_s: float,
    before: Callable[[], Any] = lambda: None,
) -> None:
    """Refuses: Keras 3 on TF cannot train over processes (tf_keras can: multi_worker_mirrored)."""
    raise ValueError(
        f"--distribution_strategy=data_parallel over {num_processes} processes: Keras 3 on "
        "TensorFlow cannot train over processes (keras-team/keras#20585); use --backend=jax, "
        "or TF_USE_LEGACY_KERAS=1 (tf_keras), where data_parallel is MultiWorkerMirroredStrategy"
    )


def data_parallel() -> tuple[Any, int]:
    """``(MirroredStrategy, replicas)`` over this process's devices."""
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy()
    return strategy, strategy.num_replicas_in_sync


def processes() -> tuple[int, int]:
    """One process: tf.distribute's workers report each on its own (``keras-perf merge``)."""
    return 0, 1


def gather_processes(values: list[float]) -> list[list[float]]:
    """One process: its own `values`."""
    return [list(values)]


def weights_digest(model: Any) -> str:
    """A fingerprint of `model`'s weights."""
    return digest(w for w in model.get_weights())


def searched_jit() -> tuple[bool, ...]:
    """The ``jit_compile`` values tune tries here, Keras's default (no XLA, on a CPU) first."""
    return (False, True)


def step_loops(loader: str = "", model: Any = None) -> tuple[str, ...]:
    """The loop settings tune searches here, whatever the input and model."""
    return ("steps_per_execution", "fused_steps")


def dispatches_asynchronously() -> bool:
    """Whether a batch begin only queues the step: no, Keras reads each step's logs first."""
    return False


def trains_under_tf_distribute() -> bool:
    """Whether fit runs under a ``tf.distribute`` strategy's scope here: yes."""
    return True


def loop_advice(fused: bool = True) -> Advice:
    """What to try when the step is short; fused steps where the reader can set them."""
    if not fused:
        return Advice.of(
            "try {0} (K steps per call of the compiled step)", {"steps_per_execution": "K"}
        )
    return Advice.of(
        "try {0}, or {1} (the step loop inside one XLA program)",
        {"steps_per_execution": "K"},
        {"fused_steps": "K", "jit_compile": True},
    )


def jit_advice() -> Advice | None:
    """What to try when the step is not compiled."""
    return Advice.of(
        "try {0} (measure: XLA is sometimes slower; toolkit.tune does)", {"jit_compile": True}
    )


def fit_batches(model: Any, fit_data: dict[str, Any]) -> tuple[str, Iterator[Any]] | None:
    """What `model`'s ``fit`` reads for `fit_data`: adapter name and batches; None on tf_keras."""
    from toolkit.backend._fit_input import read_as_fit
    from toolkit.core import compat

    if compat.keras_flavor() != "keras3":
        return None
    from keras.src.backend.tensorflow.trainer import TFEpochIterator

    def epochs(**kwargs: Any) -> Any:
        return TFEpochIterator(distribute_strategy=model.distribute_strategy, **kwargs)

    return read_as_fit(epochs, next, fit_data)


def wait_for_device() -> None:
    """Waits for every GPU's queued work; on the CPU, steps are done when fit's hooks run."""
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):
        with contextlib.suppress(Exception):  # a plugin without the call: nothing to wait on
            tf.test.experimental.sync_devices()


def compile_watch(model: Any, clock: Callable[[], float]) -> TracingCounts:
    """This backend's signal of a fit's compiles and input time, for the ledger."""
    return TracingCounts(model, clock)
