"""The op table's other frameworks: ``jax_jit``, ``torch_eager``, ``torch_compile``.

Each runs on its default device, on TensorFlow's inputs in its native layout (PyTorch convolutions
channels-first, transposed before timing), waited for its own way; torch.compile compiles in the
first call, timed apart. A missing op or framework is ``n/a``; none loads before use."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from toolkit import backend as backends
from toolkit.core import _extras as extras

__all__: list[str] = []

# mode -> the framework (import name) that runs it
FRAMEWORK_MODES = {"jax_jit": "jax", "torch_eager": "torch", "torch_compile": "torch"}
MODE_HELP = {
    "jax_jit": "jax.jit of the op in jax.numpy: XLA through JAX",
    "torch_eager": "the op in PyTorch, op by op",
    "torch_compile": "torch.compile of it (TorchInductor)",
}


def _extra(mode: str) -> tuple[str, tuple[str, ...]]:
    """The extra installing `mode`'s framework (a Keras backend's registry entry); its module."""
    entry = backends.info(FRAMEWORK_MODES[mode])
    return entry.extra or entry.name, (entry.framework,)


def missing(mode: str) -> str | None:
    """Why `mode` cannot run here at all (its framework is not installed), or None."""
    return extras.why_missing(*_extra(mode))


def note_missing(mode: str, what: str) -> bool:
    """One line on stderr, once, when `mode`'s framework is missing; whether it is."""
    extra, needs = _extra(mode)
    return extras.note_missing(extra, what, needs)


@functools.cache
def device_kind(mode: str) -> str:
    """The framework's default device kind, as its backend's seam detects it (GPU, else CPU)."""
    from toolkit import devices

    return devices.resolve("auto", backend=FRAMEWORK_MODES[mode]).kind


def _torch_device() -> Any:
    import torch

    kind = device_kind("torch_eager")
    return torch.device({"cuda": "cuda", "gpu": "cuda", "metal": "mps"}.get(kind, "cpu"))


def to_framework(op: str, arrays: Sequence[Any], mode: str) -> tuple[Any, ...]:
    """TensorFlow's inputs as the framework's arrays, on its device and in its layout (PyTorch:
    channels-first convolutions, int64 and flat scatter indices)."""
    import numpy as np

    arrays = [np.asarray(a) for a in arrays]
    if op in ("Scatter", "ScatterSum", "ScatterMax"):
        arrays[1] = arrays[1].reshape(-1)  # (count, 1) row indices -> (count,)
    return _framework(mode).arrays(op, arrays)


def build(op: str, axis: int | None, mode: str) -> Callable[..., Any]:
    """The op's computation in `mode`'s framework, compiled as the mode says.

    Raises:
        NotImplementedError: the framework has no such op."""
    return _framework(mode).build(op, axis, mode)


def waiter(mode: str) -> Callable[[Any], None]:
    """Blocks until a result of `mode` exists (JAX and PyTorch on a GPU run asynchronously)."""
    return _framework(mode).waiter(mode)


class _Framework(NamedTuple):
    """What a framework's column does its own way: arrays, the op compiled per mode, the wait."""

    arrays: Callable[[str, list[Any]], tuple[Any, ...]]
    build: Callable[[str, int | None, str], Callable[..., Any]]
    waiter: Callable[[str], Callable[[Any], None]]


def _jax_arrays(op: str, arrays: list[Any]) -> tuple[Any, ...]:
    import jax.numpy as jnp

    return tuple(jnp.asarray(a) for a in arrays)


def _jax_build(op: str, axis: int | None, mode: str) -> Callable[..., Any]:
    import jax

    return jax.jit(_jax_op(op, axis))


def _jax_waiter(mode: str) -> Callable[[Any], None]:
    import jax

    return lambda out: jax.block_until_ready(out)


def _torch_arrays(op: str, arrays: list[Any]) -> tuple[Any, ...]:
    import numpy as np
    import torch

    if op == "Conv1d":  # NWC, WIO -> NCW, OIW
        arrays = [arrays[0].transpose(0, 2, 1), arrays[1].transpose(2, 1, 0)]
    elif op == "Conv2d":  # NHWC, HWIO -> NCHW, OIHW
        arrays = [arrays[0].transpose(0, 3, 1, 2), arrays[1].transpose(3, 2, 0, 1)]
    device = _torch_device()
    out = []
    for a in arrays:
        if a.dtype.kind in "iu":
            out.append(torch.from_numpy(np.ascontiguousarray(a.astype(np.int64))).to(device))
            continue
        dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(
            str(a.dtype), torch.float32
        )  # fmt: skip
        tensor = torch.from_numpy(np.ascontiguousarray(a.astype(np.float32)))
        out.append(tensor.to(device=device, dtype=dtype))
    return tuple(out)


def _torch_build(op: str, axis: int | None, mode: str) -> Callable[..., Any]:
    fn = _torch_op(op, axis)
    if mode == "torch_compile":
        import torch

        return torch.compile(fn, dynamic=False)
    return fn


def _torch_waiter(mode: str) -> Callable[[Any], None]:
    import torch

    kind = device_kind(mode)
    if kind in ("cuda", "gpu"):
        return lambda out: torch.cuda.synchronize()
    if kind == "metal":
        return lambda out: torch.mps.synchronize()
    return lambda out: None  # PyTorch on the CPU: a call returns when it is done


_FRAMEWORKS = {  # framework (FRAMEWORK_MODES' values) -> how its columns run
    "jax": _Framework(_jax_arrays, _jax_build, _jax_waiter),
    "torch": _Framework(_torch_arrays, _torch_build, _torch_waiter),
}


def _framework(mode: str) -> _Framework:
    return _FRAMEWORKS[FRAMEWORK_MODES[mode]]


def _jax_op(op: str, axis: int | None) -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp

    def bce(p: Any, t: Any) -> Any:
        p = jnp.clip(p, 1e-7, 1 - 1e-7)
        return -jnp.mean(t * jnp.log(p) + (1 - t) * jnp.log(1 - p))

    def conv(x: Any, w: Any) -> Any:
        spec = ("NWC", "WIO", "NWC") if x.ndim == 3 else ("NHWC", "HWIO", "NHWC")
        return jax.lax.conv_general_dilated(
            x, w, (1,) * (x.ndim - 2), "VALID", dimension_numbers=spec
        )

    table: dict[str, Callable[..., Any]] = {
        "Argmax": lambda x: jnp.argmax(x, axis=axis),
        "BCE": bce,
        "Concat": lambda a, b: jnp.concatenate([a, b], axis=axis),
        "Conv1d": conv,
        "Conv2d": conv,
        "Gather": lambda t, i: jnp.take(t, i, axis=0),
        "LeakyReLU": lambda x: jax.nn.leaky_relu(x, 0.01),
        "Linear": lambda x, w, b: jnp.matmul(x, w) + b,
        "MatMul": jnp.matmul,
        "PReLU": lambda x, a: jnp.maximum(x, 0) + a * jnp.minimum(x, 0),
        "ReLU": jax.nn.relu,
        "Scatter": lambda t, i, u: t.at[i].set(u),
        "ScatterSum": lambda t, i, u: t.at[i].add(u),
        "ScatterMax": lambda t, i, u: t.at[i].max(u),
        "SeLU": jax.nn.selu,
        "Sigmoid": jax.nn.sigmoid,
        "Softmax": lambda x: jax.nn.softmax(x, axis=axis),
        "Softplus": jax.nn.softplus,
        "Sort": lambda x: jnp.sort(x, axis=axis),
        "Sum": lambda x: jnp.sum(x, axis=axis),
        "SumAll": jnp.sum,
        "AddOne": lambda x: x + 1,  # the per-call floor
    }
    if op not in table:
        raise NotImplementedError(f"no JAX version of {op}")
    return table[op]


def _torch_op(op: str, axis: int | None) -> Callable[..., Any]:
    import warnings

    import torch
    import torch.nn.functional as F

    # index_reduce is PyTorch's scatter-max; its "beta" warning would be printed once per case.
    warnings.filterwarnings("ignore", message=r"index_reduce\(\) is in beta")

    def bce(p: Any, t: Any) -> Any:
        p = torch.clamp(p, 1e-7, 1 - 1e-7)
        return -torch.mean(t * torch.log(p) + (1 - t) * torch.log(1 - p))

    table: dict[str, Callable[..., Any]] = {
        "Argmax": lambda x: torch.argmax(x, dim=axis),
        "BCE": bce,
        "Concat": lambda a, b: torch.cat([a, b], dim=axis),
        "Conv1d": lambda x, w: F.conv1d(x, w),
        "Conv2d": lambda x, w: F.conv2d(x, w),
        "Gather": lambda t, i: torch.index_select(t, 0, i),
        "LeakyReLU": lambda x: F.leaky_relu(x, 0.01),
        "Linear": lambda x, w, b: torch.matmul(x, w) + b,
        "MatMul": torch.matmul,
        "PReLU": lambda x, a: torch.clamp(x, min=0) + a * torch.clamp(x, max=0),
        "ReLU": torch.relu,
        "Scatter": lambda t, i, u: t.index_copy(0, i, u),
        "ScatterSum": lambda t, i, u: t.index_add(0, i, u),
        "ScatterMax": lambda t, i, u: t.index_reduce(0, i, u, "amax"),
        "SeLU": torch.selu,
        "Sigmoid": torch.sigmoid,
        "Softmax": lambda x: torch.softmax(x, dim=axis),
        "Softplus": F.softplus,
        "Sort": lambda x: torch.sort(x, dim=axis).values,
        "Sum": lambda x: torch.sum(x, dim=axis),
        "SumAll": torch.sum,
        "AddOne": lambda x: x + 1,  # the per-call floor
    }
    if op not in table:
        raise NotImplementedError(f"no PyTorch version of {op}")
    return table[op]
