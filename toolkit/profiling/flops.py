"""Model FLOPs per training step, the machine's measured matmul peak, and MFU.

* :func:`count_flops` counts what TensorFlow's graph profiler can count: it traces one forward
  pass and one forward + backward pass of the model at the real batch size and sums the
  registered FLOP statistics of every op (MatMul, Conv2D and their gradients, element-wise
  ops...). The optimizer update is left out (a few FLOPs per weight: negligible next to the
  gradients). Recurrent layers run a ``tf.while_loop`` whose body the profiler sees once, so
  they are counted on an unrolled clone of the model (same weights' shapes, same math).
* :func:`matmul_peak` measures what a large matmul achieves on a device in a compute dtype,
  once per machine: the result is cached in ``$TOOLKIT_CACHE_DIR`` (default
  ``~/.cache/keras-perf-toolkit``) keyed by CPU model, device, TensorFlow version, dtype and
  thread setting. A measured peak, not a datasheet one: MFU then says how much of what this
  machine really does on its best-case kernel the training step gets.
* :func:`utilization` is the pure arithmetic: achieved FLOP/s = FLOPs per step / median step
  time, MFU = achieved / peak.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import os
import time
from typing import Any

CACHE_ENV = "TOOLKIT_CACHE_DIR"
PEAK_FILE = "matmul_peak.json"
_WHILE_OPS = frozenset({"While", "StatelessWhile"})


@dataclasses.dataclass(frozen=True)
class FlopCount:
    """FLOPs of one step at a given batch size, or why they could not be counted.

    Attributes:
        batch_size: examples the count is for.
        forward: FLOPs of one forward pass (inference).
        train_step: FLOPs of one forward + backward pass (a training step without the
            optimizer update).
        method: how the numbers were obtained.
        note: caveats, or why the count is missing (then the numbers are `None`).
    """

    batch_size: int
    forward: int | None
    train_step: int | None
    method: str = "tf.profiler float_operation on the traced graph"
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _graph_flops(graph: Any) -> int:
    from tensorflow.python.profiler import model_analyzer, option_builder
    from tensorflow.python.util import deprecation

    builder = option_builder.ProfileOptionBuilder
    options = builder(builder.float_operation()).with_empty_output().build()
    with deprecation.silence():  # the v1 profiler warns about its own shape helper
        return int(model_analyzer.profile(graph, options=options).total_float_ops)


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


def count_flops(model: Any, batch_size: int) -> FlopCount:
    """FLOPs of one forward pass and one training step of a built Keras model.

    Never raises: a model TF cannot count gets `None` numbers and a `note` saying why.
    """
    try:
        forward_graph, train_graph = _traced_graphs(model, batch_size)
        note = None
        if _has_loop(forward_graph) or _has_loop(train_graph):
            clone = _unrolled_clone(model)
            if clone is None:
                return FlopCount(
                    batch_size,
                    None,
                    None,
                    note="the model runs a tf.while_loop (e.g. an RNN) whose iterations TF's "
                    "graph profiler cannot count, and it could not be unrolled for counting",
                )
            forward_graph, train_graph = _traced_graphs(clone, batch_size)
            note = "recurrent layers counted on an unrolled clone of the model"
        forward, train_step = _graph_flops(forward_graph), _graph_flops(train_graph)
    except Exception as e:  # noqa: BLE001 - a count is a nicety; training goes on
        return FlopCount(batch_size, None, None, note=f"not counted: {type(e).__name__}: {e}")
    if train_step == 0:
        return FlopCount(batch_size, None, None, note="TF's profiler counted no FLOPs")
    return FlopCount(batch_size, forward, train_step, note=note)


# ---------------------------------------------------------------------------- matmul peak


def cache_dir() -> str:
    """Where measured machine facts are cached: ``$TOOLKIT_CACHE_DIR`` or
    ``~/.cache/keras-perf-toolkit``."""
    return os.environ.get(CACHE_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "keras-perf-toolkit"
    )


def _peak_key(device: Any, dtype: str) -> str:
    import tensorflow as tf

    from toolkit.report import cpu_model

    threads = tf.config.threading.get_intra_op_parallelism_threads()
    return (
        f"{cpu_model()} | {device.kind}:{device.index} {device.human_name} | "
        f"tf {tf.__version__} | {dtype} | intra_op {threads or 'default'}"
    )


def _read_cache(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def measure_matmul_peak(
    device_name: str, dtype: str = "float32", size: int = 2048, seconds: float = 0.25
) -> float:
    """FLOP/s of the best of 5 timed runs of chained ``size``² matmuls on one device.

    The matmuls are chained (each multiplies the last result) inside one ``tf.function`` so no
    optimizer can hoist or drop them, and the result is read back once per run, not per matmul.
    """
    import tensorflow as tf

    with tf.device(device_name):
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

        timed(1)  # trace and warm up
        n = max(1, round(seconds / max(timed(2) / 2, 1e-6)))
        best = min(timed(n) for _ in range(5))
    return 2.0 * size**3 * n / best


def matmul_peak(
    device: Any = None, dtype: str = "float32", *, refresh: bool = False
) -> dict[str, Any]:
    """The measured matmul peak of `device` in `dtype`, from the cache or measured now (~2 s).

    Args:
        device: a `toolkit.devices.DeviceInfo`. Defaults to `None` (the selected device).
        dtype: compute dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"``.
        refresh: measure again even when cached.

    Returns:
        ``{"flops_per_s", "dtype", "size", "key", "measured_utc", "source"}``, source being
        ``"cache"`` or ``"measured"``.
    """
    from toolkit import devices
    from toolkit.report import atomic_write

    device = device or devices.select("auto")
    key = _peak_key(device, dtype)
    path = os.path.join(cache_dir(), PEAK_FILE)
    cached = _read_cache(path)
    if not refresh and isinstance(cached.get(key), dict):
        return {**cached[key], "source": "cache"}
    size = 2048 if device.kind == "cpu" else 8192
    record = {
        "flops_per_s": measure_matmul_peak(device.logical_name, dtype, size),
        "dtype": dtype,
        "size": size,
        "key": key,
        "measured_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    with contextlib.suppress(OSError):  # a read-only home still gets the number
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, json.dumps({**_read_cache(path), key: record}, indent=1))
    return {**record, "source": "measured"}


def utilization(
    flops_per_step: float | None, step_seconds: float | None, peak_flops: float | None
) -> dict[str, float | None]:
    """``{"achieved_flops_per_s", "mfu"}`` from FLOPs per step, the median step time and the
    peak; `None` where an input is missing."""
    achieved = None
    if flops_per_step and step_seconds and step_seconds > 0:
        achieved = flops_per_step / step_seconds
    mfu = achieved / peak_flops if achieved is not None and peak_flops else None
    return {"achieved_flops_per_s": achieved, "mfu": mfu}


def format_flops(value: float | None, per_second: bool = False) -> str:
    """``1.23 GFLOP`` / ``45.6 GFLOP/s``; ``n/a`` for None."""
    if value is None:
        return "n/a"
    unit = "FLOP/s" if per_second else "FLOP"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"
