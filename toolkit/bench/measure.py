"""Timing one computation in eager, graph and XLA mode, on every device, without lying.

A cell: the first call (tracing, compiling) is timed apart; calls then go back to back in loops
calibrated (doubling as warm-up) to last ``min_time_s``, reading one element of each loop's *last*
result: a device runs kernels in issue order, so that read waits for the whole loop and no call for
the host. The cell: the median per-call time of ``repeats`` loops, and its robust spread. All modes
of a case read inputs made once on the CPU; what a device can't run is ``n/a``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from toolkit import backend
from toolkit.bench import frameworks
from toolkit.bench.ops import select_ops
from toolkit.bench.table import Measurement, OpTable, Timing
from toolkit.core import machine
from toolkit.core.progress import bar as progress_bar
from toolkit.core.stats import jitter, median

__all__ = [
    "MODES",
    "benchmark",
]

MODES = ("eager", "graph", "xla")  # TensorFlow's
ALL_MODES = (*MODES, *frameworks.FRAMEWORK_MODES)  # and the other frameworks' (frameworks.py)
# torch.compile compiles every case anew (seconds each on a CPU): named, not defaulted.
DEFAULT_MODES = tuple(m for m in ALL_MODES if m != "torch_compile")
MODE_HELP = {
    "eager": "op by op, as written (TF2's default outside tf.function)",
    "graph": "tf.function: one graph, optimized by Grappler",
    "xla": "tf.function(jit_compile=True): compiled and fused by XLA",
    **frameworks.MODE_HELP,
}


def sync(result: Any) -> None:
    """Waits for `result` to exist by reading one element of each output back to the host."""
    import tensorflow as tf

    for t in tf.nest.flatten(result):
        if t.shape.num_elements() == 0:
            t.numpy()
        else:
            tf.reshape(t, [-1])[:1].numpy()


def time_calls(
    call: Callable[[], Any],
    *,
    repeats: int = 5,
    min_time_s: float = 0.02,
    max_calls: int = 10_000,
    clock: Callable[[], float] = time.perf_counter,
    wait: Callable[[Any], None] = sync,
) -> Timing:
    """Times `call()` as described in the module docstring.

    Args:
        call: issues one call and returns its result (not waited for).
        repeats: timed loops.
        min_time_s: the shortest a timed loop may be.
        max_calls: the most calls in one loop.
        clock: seconds.
        wait: blocks until a result exists."""
    if repeats < 1 or min_time_s < 0 or max_calls < 1:
        raise ValueError(
            f"repeats and max_calls must be >= 1 and min_time_s >= 0, got {repeats}, "
            f"{max_calls} and {min_time_s}"
        )

    def loop(n: int) -> float:
        start = clock()
        out = None
        for _ in range(n):
            out = call()
        wait(out)
        return clock() - start

    first = loop(1)
    calls, elapsed = 1, loop(1)
    while elapsed < min_time_s and calls < max_calls:
        grow = min_time_s / max(elapsed, 1e-9) * 1.2
        calls = min(max_calls, max(calls * 2, math.ceil(calls * grow)))
        elapsed = loop(calls)
    per_call = [loop(calls) / calls * 1e3 for _ in range(repeats)]
    mid = median(per_call)
    spread = jitter(per_call) / mid * 100.0 if mid > 0 else 0.0
    return Timing(mid, spread, tuple(per_call), calls, first * 1e3)


def compile_fn(fn: Callable[..., Any], mode: str) -> Callable[..., Any]:
    """`fn` as it runs in `mode`: itself (eager), a ``tf.function`` or an XLA one."""
    import tensorflow as tf

    if mode == "eager":
        return fn
    if mode == "graph":
        return tf.function(fn, autograph=False)
    if mode == "xla":
        return tf.function(fn, autograph=False, jit_compile=True)
    raise ValueError(f"unknown mode {mode!r}: use {', '.join(MODES)}")


def select_modes(
    names: Sequence[str] | None = None, default: Sequence[str] = MODES
) -> tuple[str, ...]:
    """The modes named (``all``: every one), in :data:`ALL_MODES` order; `default` if None/empty."""
    if not names:
        return tuple(default)
    wanted = {n.lower() for n in names}
    if "all" in wanted:
        return ALL_MODES
    unknown = [n for n in names if n.lower() not in ALL_MODES]
    if unknown:
        raise ValueError(
            f"unknown mode {', '.join(map(repr, unknown))}: use {', '.join(ALL_MODES)} or all"
        )
    return tuple(m for m in ALL_MODES if m in wanted)


def unsupported(device: Any, mode: str) -> str | None:
    """Why `device` cannot run `mode` at all (decided before trying), or None."""
    if mode != "xla":
        return None
    from toolkit import devices

    for finding in devices.preflight(
        device, policy="float32", jit_compile=True, versions={}, backend="tensorflow"
    ):
        if finding.code == "metal-xla":
            return finding.message
    return None


def device_labels(found: Sequence[Any]) -> dict[str, str]:
    """Each device's column prefix: its kind (``cpu``, ``cuda``, ``metal``), indexed if several."""
    kinds = [d.kind for d in found]
    return {d.name: d.kind if kinds.count(d.kind) == 1 else f"{d.kind}{d.index}" for d in found}


def error_reason(error: BaseException) -> str:
    """One line for the n/a note: the exception's type and its first line, shortened."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}".strip()
    return text if len(text) <= 200 else text[:197] + "..."


def inputs_on(device: Any, make: Callable[[Any], Sequence[Any]], seed: int = 0) -> tuple[Any, ...]:
    """``make(rng)``'s tensors from `seed`, made on the CPU (Metal has no random kernels)."""
    import tensorflow as tf

    with tf.device("/device:CPU:0"):
        made = make(tf.random.Generator.from_seed(seed))
    with tf.device(device.logical_name):
        return tuple(tf.identity(t) for t in made)


def run_case(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    device: Any,
    mode: str,
    **timing_kwargs: Any,
) -> tuple[Timing | None, str | None]:
    """``(timing, None)``, or ``(None, reason)`` when `device` cannot run `fn` in `mode`."""
    import tensorflow as tf

    reason = unsupported(device, mode)
    if reason:
        return None, reason
    compiled = compile_fn(fn, mode)

    def call() -> Any:
        with tf.device(device.logical_name):
            return compiled(*inputs)

    try:
        return time_calls(call, **timing_kwargs), None
    except (tf.errors.OpError, ValueError, TypeError, NotImplementedError) as e:
        return None, error_reason(e)


def run_framework_case(
    op: str, axis: int | None, arrays: Sequence[Any], mode: str, **timing_kwargs: Any
) -> tuple[Timing | None, str | None]:
    """``(timing, None)`` of `op` in a JAX/torch `mode` on NumPy `arrays`, or ``(None, why)``."""
    reason = frameworks.missing(mode)
    if reason:
        return None, reason
    try:
        fn = frameworks.build(op, axis, mode)
        inputs = frameworks.to_framework(op, arrays, mode)
        return time_calls(lambda: fn(*inputs), wait=frameworks.waiter(mode), **timing_kwargs), None
    except Exception as e:  # noqa: BLE001 - any framework's error: the cell is n/a, with why
        return None, error_reason(e)


def call_floor_ms(device: Any, mode: str, **timing_kwargs: Any) -> float | None:
    """Per-call time of ``x + 1`` on a scalar in `mode` on `device`: the dispatch all ops pay."""
    if mode in frameworks.FRAMEWORK_MODES:
        import numpy as np

        arrays = [np.asarray(1.0, dtype=np.float32)]
        timing, _ = run_framework_case("AddOne", None, arrays, mode, **timing_kwargs)
        return timing.ms if timing else None
    import tensorflow as tf

    with tf.device(device.logical_name):
        x = tf.constant(1.0)
    timing, _ = run_case(lambda v: v + 1.0, [x], device, mode, **timing_kwargs)
    return timing.ms if timing else None


def benchmark(
    ops: Sequence[str] | None = None,
    modes: Sequence[str] | None = None,
    *,
    size: str = "default",
    devices: Sequence[Any] | None = None,
    dtype: str = "float32",
    repeats: int = 5,
    min_time_s: float = 0.05,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """Times every case of the chosen ops in every chosen mode on every device.

    Args:
        ops: op names (:data:`toolkit.bench.ops.OP_NAMES`; default: all).
        modes: :data:`ALL_MODES` names (default: TensorFlow's ``eager``, ``graph``, ``xla``).
        size: ``tiny``, ``default`` (minutes on 2 cores) or ``full`` (the seed's).
        devices: `toolkit.devices.DeviceInfo` list (default: every device found).
        dtype: the floating-point inputs' dtype.
        repeats: timed loops per cell.
        min_time_s: the shortest timed loop.
        progress: called with one line after each op.

    Returns:
        An :class:`~toolkit.bench.table.OpTable`."""
    import tensorflow as tf

    from toolkit import devices as tk_devices

    chosen_ops = select_ops(ops)
    chosen_modes = select_modes(modes)
    other_modes = [m for m in chosen_modes if m in frameworks.FRAMEWORK_MODES]
    chosen_modes = tuple(m for m in chosen_modes if m in MODES)
    if size not in ("tiny", "default", "full"):
        raise ValueError(f"unknown size {size!r}: use tiny, default or full")
    try:
        tf_dtype = tf.dtypes.as_dtype(dtype)
    except TypeError:
        raise ValueError(f"unknown dtype {dtype!r}: use float32, float16 or bfloat16") from None
    found = list(devices) if devices is not None else tk_devices.detect("tensorflow")
    labels = device_labels(found)
    timing_kwargs = {"repeats": repeats, "min_time_s": min_time_s}
    floors = {
        f"{labels[device.name]}_{mode}": call_floor_ms(device, mode, **timing_kwargs)
        for device in found
        for mode in chosen_modes
    }
    other_columns = {  # each framework's mode on its own default device
        mode: f"{'n/a' if frameworks.missing(mode) else frameworks.device_kind(mode)}_{mode}"
        for mode in other_modes
    }
    for mode, column in other_columns.items():
        floors[column] = call_floor_ms(None, mode, **timing_kwargs)
    results: list[Measurement] = []
    cells = sum(len(op.cases) for op in chosen_ops) * (
        len(found) * len(chosen_modes) + len(other_modes)
    )
    bar = progress_bar(cells, "ops", unit="cell")  # tqdm's, on a terminal only
    for op in chosen_ops:
        start = time.perf_counter()
        for index, case in enumerate(op.cases):
            bar.describe(f"ops: {op.name} {index + 1}/{len(op.cases)}")
            shapes = case.shapes(size)
            label = case.label(op.name, size)
            flops = op.flops(shapes) if op.flops else None
            fn = op.build(case.axis)
            for device in found:
                try:
                    inputs = inputs_on(
                        device,
                        lambda rng, op=op, shapes=shapes: op.make_inputs(shapes, rng, tf_dtype),
                        seed,
                    )
                except (tf.errors.OpError, ValueError, TypeError) as e:
                    inputs, reason = None, f"inputs: {error_reason(e)}"
                for mode in chosen_modes:
                    timing, why = (
                        run_case(fn, inputs, device, mode, **timing_kwargs)
                        if inputs is not None
                        else (None, reason)
                    )
                    results.append(
                        Measurement(
                            op.name, index, label, labels[device.name], mode, timing, why, flops
                        )
                    )
                    bar.update()
                del inputs
            if other_modes:  # the same values (seed), made on the CPU, as NumPy
                with tf.device("/device:CPU:0"):
                    made = op.make_inputs(shapes, tf.random.Generator.from_seed(seed), tf_dtype)
                arrays = [t.numpy() for t in made]
                for mode, column in other_columns.items():
                    timing, why = run_framework_case(
                        op.name, case.axis, arrays, mode, **timing_kwargs
                    )
                    device_label = column.split("_", 1)[0]
                    results.append(
                        Measurement(op.name, index, label, device_label, mode, timing, why, flops)
                    )
                    bar.update()
                del arrays, made
        if progress:
            progress(
                f"ops: {op.name} ({len(results)}/{cells} cells): {len(op.cases)} cases x "
                f"{len(chosen_modes) + len(other_modes)} modes x "
                f"{len(found)} device(s) in {time.perf_counter() - start:.1f} s"
            )
    bar.close()
    return OpTable(
        results=results,
        columns=[
            *(f"{labels[d.name]}_{m}" for d in found for m in chosen_modes),
            *other_columns.values(),
        ],
        settings={
            "size": size,
            "dtype": dtype,
            "repeats": repeats,
            "min_time_s": min_time_s,
            "seed": seed,
            "ops": [op.name for op in chosen_ops],
            "modes": [*chosen_modes, *other_modes],
        },
        devices=[{**d.to_dict(), "label": labels[d.name]} for d in found],
        environment=machine.capture_environment(backend.framework_facts()),
        floors=floors,
    )
