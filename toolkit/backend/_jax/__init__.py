"""JAX behind the seam: what the backend-neutral core needs when Keras trains on JAX.

Dispatch is asynchronous, so a batch begin only queues a step: StepTimer re-times an epoch at batch
ends when the device was behind, adding no sync of its own. :func:`check_config` refuses
``tf.distribute`` strategies."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from toolkit.backend._common import (
    MB,
    SEAM,
    calibrated_peak,
    digest,
    mark_fused_steps,
    no_retracing_noise,
    refuse_tf_only,
)
from toolkit.backend._jax.anatomy import (
    anatomy_refusal,
    anatomy_trace,
    layer_alone,
    layer_scope,
    mark_input,
    raw_step,
)
from toolkit.backend._jax.compiles import JaxCompiles
from toolkit.backend._jax.devices import (
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

METHOD = "XLA cost analysis of the forward pass and its gradient, lowered for the CPU (JAX)"


def framework_facts() -> dict[str, Any]:
    """JAX and Keras versions and the devices JAX sees."""
    import jax

    facts: dict[str, Any] = {"jax": jax.__version__}
    try:
        facts["devices"] = [{"name": str(d), "type": d.platform} for d in jax.devices()]
    except Exception as e:  # noqa: BLE001
        facts["devices"] = [{"error": str(e)}]
    return facts


def check_config(config: Any) -> None:
    """Raises ValueError (one line) for a setting JAX cannot run."""
    refuse_tf_only(config, "jax", fused=True)


def use_compile_cache(directory: str) -> str:
    """Keeps what JAX compiles in `directory` (its persistent cache). Returns what it did."""
    import jax

    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return f"JAX's persistent compilation cache in {directory}"


def private_caches() -> str | None:
    """Nothing: this framework writes no shared compile cache by default."""
    return None


def intra_op_threads() -> int:
    """JAX has no thread setting of its own (XLA's CPU client decides): 0."""
    return 0


def float32_matmul_precision() -> str:
    """``"float32"`` when JAX's default matmul precision is the highest, else ``"tf32"``."""
    import jax

    precision = str(jax.config.jax_default_matmul_precision or "default").lower()
    return "float32" if precision in ("highest", "float32") else "tf32"


def start_trace(logdir: str, host_level: int, python_level: int, device_level: int) -> None:
    """Starts ``jax.profiler`` writing to `logdir`. Raises what the profiler raises."""
    import jax

    options = None
    if hasattr(jax.profiler, "ProfileOptions"):
        options = jax.profiler.ProfileOptions()
        options.host_tracer_level = host_level
        options.python_tracer_level = python_level
    if options is not None:
        jax.profiler.start_trace(logdir, profiler_options=options)
    else:
        jax.profiler.start_trace(logdir)


def stop_trace() -> None:
    """Stops ``jax.profiler`` and writes the trace."""
    import jax

    jax.profiler.stop_trace()


def trace_files(names: list[str]) -> list[str]:
    """Which of `names` are this profiler's traces: XSpace files."""
    return [n for n in names if n.endswith(".xplane.pb")]


def step_marker(step: int) -> Any:
    """A context manager around one training step that XProf reads as a step marker."""
    import jax

    return jax.profiler.StepTraceAnnotation("train", step_num=step)


def profiler_probe() -> Any:
    """A per-step-cheap probe: is ``jax.profiler`` tracing in this process, whoever started it?"""
    try:
        from jax._src import profiler  # no public "is running"

        state = profiler._profile_state
        state.profile_session  # noqa: B018 - the attribute the probe reads must exist
    except (ImportError, AttributeError):
        return lambda: False
    return lambda: state.profile_session is not None


def device_memory(reset_peak: bool = False) -> dict[str, dict[str, float]]:
    """Current and peak MiB of each accelerator (``memory_stats``); JAX has no peak to reset."""
    import jax

    out: dict[str, dict[str, float]] = {}
    for device in jax.local_devices():
        if device.platform == "cpu":
            continue
        try:
            stats = device.memory_stats() or {}
        except Exception:  # noqa: BLE001 - some plugins expose no stats
            continue
        if "bytes_in_use" in stats:
            current = stats["bytes_in_use"] / MB
            peak = stats.get("peak_bytes_in_use", stats["bytes_in_use"]) / MB
            out[f"{device.platform.upper()}:{device.id}"] = {"current_mb": current, "peak_mb": peak}
    return out


def device_memory_limit() -> dict[str, float]:
    """Each accelerator's memory JAX may use (``bytes_limit``), in MiB; ``{}`` on a CPU."""
    import jax

    out: dict[str, float] = {}
    for device in jax.local_devices():
        if device.platform == "cpu":
            continue
        try:
            stats = device.memory_stats() or {}
        except Exception:  # noqa: BLE001 - some plugins expose no stats
            continue
        if stats.get("bytes_limit"):
            out[f"{device.platform.upper()}:{device.id}"] = stats["bytes_limit"] / MB
    return out


def live_tensors(cheap_only: bool = False) -> tuple[list[Any], str, bool]:
    """The arrays alive in this process (``jax.live_arrays``, cheap) and what they are called."""
    import jax

    return list(jax.live_arrays()), "arrays", True


def _flops(lowered: Any) -> int:
    analysis = lowered.cost_analysis()
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else {}
    return int((analysis or {}).get("flops", 0))


def _on_cpu(tree: Any) -> Any:
    """`tree`'s arrays as shapes placed on the host CPU, so that ``jit`` lowers for the CPU."""
    import jax

    sharding = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
    return jax.tree_util.tree_map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), tree
    )


def count_flops(model: Any, batch_size: int) -> tuple[int | None, int | None, str, str | None]:
    """``(forward FLOPs, train-step FLOPs, method, note)`` of a built Keras model: XLA's cost
    analysis of the jitted forward pass and its summed outputs' gradient (no optimizer update),
    lowered for the CPU (a GPU module's cuBLAS calls go uncounted), not compiled. Never raises."""
    try:
        import jax
        import jax.numpy as jnp

        keras = compat.keras()
        inputs = getattr(model, "inputs", None)
        if not inputs:
            return None, None, METHOD, "the model has no symbolic inputs (use keras.Input)"
        xs = [keras.ops.zeros((batch_size, *tuple(i.shape)[1:]), dtype=i.dtype) for i in inputs]
        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]

        def call(tv: Any, ntv: Any, xs: Any, training: bool) -> Any:
            out, _ = model.stateless_call(tv, ntv, xs if len(xs) > 1 else xs[0], training=training)
            return out

        def forward(tv: Any, ntv: Any, xs: Any) -> Any:
            return call(tv, ntv, xs, False)

        def summed(tv: Any, ntv: Any, xs: Any) -> Any:
            leaves = jax.tree_util.tree_leaves(call(tv, ntv, xs, True))
            return sum(jnp.sum(leaf.astype("float32")) for leaf in leaves)

        args = _on_cpu((trainable, non_trainable, xs))
        forward_flops = _flops(jax.jit(forward).lower(*args))
        # value_and_grad: a step computes its loss even where the gradient alone would not need it.
        train_flops = _flops(jax.jit(jax.value_and_grad(summed)).lower(*args))
    except Exception as e:  # noqa: BLE001 - a count is a nicety; training goes on
        return None, None, METHOD, f"not counted: {type(e).__name__}: {e}"
    if not train_flops:
        return None, None, METHOD, "XLA's cost analysis counted no FLOPs"
    return forward_flops, train_flops, METHOD, None


def measure_matmul_peak(
    device: Any, dtype: str = "float32", size: int = 2048, seconds: float = 0.15
) -> MatmulRun:
    """The peak FLOP/s of ``size``² matmuls on `device`, chained in one jitted loop."""
    import jax
    import jax.numpy as jnp

    target = device
    a = jax.device_put(jax.random.normal(jax.random.PRNGKey(0), (size, size)).astype(dtype), target)
    b = jax.device_put(
        (jax.random.normal(jax.random.PRNGKey(1), (size, size)) * size**-0.5).astype(dtype), target
    )

    @jax.jit
    def chain(a: Any, b: Any, n: Any) -> Any:
        c = jax.lax.fori_loop(0, n, lambda _, c: c @ b, a)
        return jnp.sum(c[:1, :1].astype(jnp.float32))

    def timed(n: int) -> float:
        start = time.perf_counter()
        chain(a, b, n).block_until_ready()
        return time.perf_counter() - start

    return calibrated_peak(timed, size, seconds)


def fuse_train_steps(model: Any, steps: int) -> None:
    """Makes each Keras training batch run `steps` training steps inside one jitted call.
    Keras's JAX ``train_step`` is a pure function of ``(state, data)``; here it gets ``steps ×
    batch_size`` examples, split and run through the step by ``jax.lax.scan``: one XLA program, the
    state carried on the device. Logs are the last step's. Call it after ``compile``. Under a
    ``keras.distribution`` the batch is laid out ``(D, steps, rows)``: rows stay on their device."""
    if not mark_fused_steps(model, steps):
        return
    import jax

    original = model.train_step
    shards = _batch_shards()

    def split(t: Any) -> Any:
        rows = t.shape[0] // (steps * shards)
        t = t.reshape((shards, steps, rows, *t.shape[1:])).swapaxes(0, 1)
        return t.reshape((steps, shards * rows, *t.shape[3:]))

    def fused_train_step(state: Any, data: Any) -> Any:
        def body(carry: Any, batch: Any) -> Any:
            logs, carry = original(carry, batch)
            return carry, logs

        batches = jax.tree_util.tree_map(split, data)
        platform = training_platform()
        convolves = False
        # The step is traced once: the scan runs the jaxpr that answered the convolution question.
        if platform == "cpu":
            body, convolves = traced_step(original, state, batches)
        unroll = scan_unroll(steps, platform, convolves)
        state, logs = jax.lax.scan(body, state, batches, unroll=unroll)
        return jax.tree_util.tree_map(lambda t: t[-1], logs), state

    model.train_step = fused_train_step


def keras_scans_steps() -> bool:
    """Whether Keras runs ``steps_per_execution`` on JAX as one jitted ``lax.scan`` (3.16 on)."""
    import importlib

    try:
        trainer = importlib.import_module("keras.src.backend.jax.trainer")
    except ImportError:
        return False
    return callable(getattr(trainer, "_build_multi_step_scan", None))


def scan_unroll(steps: int, platform: str, convolves: bool) -> int:
    """How many of `steps` fused steps one ``lax.scan`` iteration runs: 1 (rolled, compiled once)
    unless the step convolves on a CPU, then all: XLA's CPU compiler leaves a convolution's gradient
    in a loop body in a layout many times slower; elsewhere unrolling only grows the compile."""
    return steps if platform == "cpu" and convolves else 1


def traced_step(
    step: Callable[[Any, Any], Any], state: Any, batches: Any
) -> tuple[Callable[[Any, Any], Any], bool]:
    """``(scan body, whether it convolves)`` for Keras's pure ``train_step``: traced once to its
    jaxpr on shapes only, and whether it or any nested jaxpr holds a convolution."""
    import jax
    from jax.extend.core import jaxpr_as_fun

    def spec(t: Any, drop: int = 0) -> Any:
        return jax.ShapeDtypeStruct(t.shape[drop:], t.dtype)

    batch = jax.tree_util.tree_map(lambda t: spec(t, 1), batches)
    closed, shapes = jax.make_jaxpr(step, return_shape=True)(
        jax.tree_util.tree_map(spec, state), batch
    )
    out_tree = jax.tree_util.tree_structure(shapes)
    run = jaxpr_as_fun(closed)

    def body(carry: Any, batch: Any) -> Any:
        logs, carry = jax.tree_util.tree_unflatten(
            out_tree, run(*jax.tree_util.tree_leaves((carry, batch)))
        )
        return carry, logs

    return body, _holds(closed.jaxpr, "conv_general_dilated")


def _holds(jaxpr: Any, primitive: str) -> bool:
    """Whether `jaxpr`, or a jaxpr in one of its equations' parameters, applies `primitive`."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == primitive:
            return True
        for value in eqn.params.values():
            for inner in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(inner, "jaxpr", inner)  # a ClosedJaxpr's Jaxpr
                if hasattr(inner, "eqns") and _holds(inner, primitive):
                    return True
    return False


def training_platform() -> str:
    """The platform JAX computes on: the ``jax_default_device`` set, else its default backend."""
    import jax

    device = jax.config.jax_default_device
    if device is None:
        return jax.default_backend()
    return device if isinstance(device, str) else device.platform


def _batch_shards() -> int:
    """How many devices the global batch is split over by the ``keras.distribution`` in force."""
    import keras

    distribution = keras.distribution.distribution()
    if distribution is None:
        return 1
    mesh = distribution.device_mesh
    axis = getattr(distribution, "batch_dim_name", None)
    if axis in mesh.axis_names:
        return int(mesh.shape[mesh.axis_names.index(axis)])
    return 1


quiet_retracing = no_retracing_noise


def start_processes(
    coordinator: str,
    num_processes: int,
    process_id: int,
    wait_s: float,
    before: Callable[[], Any] = lambda: None,
) -> None:
    """Joins the JAX cluster at `coordinator` (``jax.distributed``; gloo on CPUs) before anything
    else of JAX runs, after `before` (the toolkit's join), so `wait_s` only bounds a late one. It
    listens as named or at ``JAX_COORDINATOR_BIND_ADDRESS`` (JAX's default: every interface)."""
    before()
    import jax

    from toolkit.distribute.processes import bind_address

    jax.distributed.initialize(
        coordinator_address=coordinator,
        coordinator_bind_address=bind_address(coordinator) if process_id == 0 else None,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=max(60, int(wait_s)),
    )


def data_parallel() -> tuple[Any, int]:
    """``(keras.distribution.DataParallel, replicas)`` over every device of every process; each
    process feeds its own slice of the global batch (Keras's auto-sharding takes only tf.data)."""
    import jax
    import keras

    devices = jax.devices()
    distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
    keras.distribution.set_distribution(distribution)
    return distribution, len(devices)


def processes() -> tuple[int, int]:
    """``(this process's index, processes)`` of the JAX cluster; ``(0, 1)`` alone."""
    import jax

    return jax.process_index(), jax.process_count()


def gather_processes(values: list[float]) -> list[list[float]]:
    """Every process's `values` (same length everywhere), in process order: one collective."""
    import jax

    if jax.process_count() < 2:
        return [list(values)]
    import numpy as np
    from jax.experimental import multihost_utils

    gathered = multihost_utils.process_allgather(np.asarray(values, np.float32))
    return np.asarray(gathered).reshape(jax.process_count(), -1).tolist()


def weights_digest(model: Any) -> str:
    """A fingerprint of this process's copy of `model`'s weights."""
    import numpy as np

    def local(v: Any) -> Any:
        value = v.value
        shards = getattr(value, "addressable_shards", None)
        return np.asarray(shards[0].data) if shards else np.asarray(value)

    return digest(local(v) for v in model.weights)


def searched_jit() -> tuple[bool, ...]:
    """The ``jit_compile`` values tune tries here: JAX jits every step (op by op is far slower)."""
    return (True,)


def step_loops(loader: str = "", model: Any = None) -> tuple[str, ...]:
    """The loop settings tune searches here: ``steps_per_execution`` and fused steps. Fused steps
    step aside only where Keras's own scan measured as fast: tf.data input, on a CPU, a built
    `model` whose step does not convolve. Stacking on the host (Grain, NumPy: K transfers a call),
    a Keras that loops in Python, a convolving CPU step or a GPU (not measured) keep them."""
    both = ("steps_per_execution", "fused_steps")
    if loader != "tf_data" or not keras_scans_steps() or model is None:
        return both
    if training_platform() != "cpu" or getattr(model, "jit_compile", True) is not True:
        return both
    if getattr(model, "run_eagerly", False) or _forward_convolves(model):
        return both
    return ("steps_per_execution",)


def _forward_convolves(model: Any) -> bool:
    """Whether `model`'s forward pass convolves, from its jaxpr on shapes (unknown: it does)."""
    import jax

    inputs = getattr(model, "inputs", None)
    if not inputs:
        return True
    try:
        specs = [jax.ShapeDtypeStruct((1, *tuple(i.shape)[1:]), i.dtype) for i in inputs]
        variables = (
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
        )

        def forward(tv: Any, ntv: Any, xs: Any) -> Any:
            return model.stateless_call(tv, ntv, xs if len(xs) > 1 else xs[0], training=True)[0]

        jaxpr = jax.make_jaxpr(forward)(*variables, specs)
    except Exception:  # noqa: BLE001 - unknown: keep fused steps
        return True
    return _holds(jaxpr.jaxpr, "conv_general_dilated")


def dispatches_asynchronously() -> bool:
    """Whether a batch begin only queues the step: yes, JAX dispatches asynchronously."""
    return True


def trains_under_tf_distribute() -> bool:
    """No: Keras's own distribution (``keras.distribution``) over ``jax.distributed``."""
    return False


def loop_advice(fused: bool = True) -> Advice:
    """What to try when the step is short; fused steps where the reader can set them."""
    if not fused:
        return Advice.of("try {0} (K steps in one jitted call)", {"steps_per_execution": "K"})
    return Advice.of(
        "try {0} (K steps in one jitted call, a jax.lax.scan) and {1}",
        {"fused_steps": "K"},
        {"steps_per_execution": "K"},
    )


def jit_advice() -> Advice | None:
    """None: JAX's steps are always jitted."""
    return None


def fit_batches(model: Any, fit_data: dict[str, Any]) -> tuple[str, Iterator[Any]] | None:
    """What `model`'s ``fit`` reads for `fit_data`: its adapter's name and batches, one a step."""
    from keras.src.backend.jax.trainer import JAXEpochIterator

    from toolkit.backend._fit_input import read_as_fit

    return read_as_fit(JAXEpochIterator, next, fit_data)


def wait_for_device() -> None:
    """Returns when the work JAX has queued is done: every live array is ready."""
    import jax

    jax.block_until_ready(jax.live_arrays())


def compile_watch(model: Any, clock: Callable[[], float]) -> JaxCompiles:
    """This backend's signal of a fit's compiles and input time, for the ledger."""
    return JaxCompiles(model, clock)
