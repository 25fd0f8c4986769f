"""The operations of the per-op benchmark, their shapes, and their inputs.

The ops and ``full`` shapes are the seed post's MLX / PyTorch-MPS table as TensorFlow ops, each case
keeping its label (``Argmax / dim=64x1024x128 axi=0``; weights in TF's layout, labels in MLX's).
Presets: ``full``, ``default`` (scaled down: compare ratios), ``tiny`` (dims clamped to 16)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "OPS",
    "Case",
    "Op",
]


Shape = tuple[int, ...]
SIZES = ("tiny", "default", "full")
TINY_CAP = 16


@dataclasses.dataclass(frozen=True)
class Case:
    """A table row: shapes (the seed label's order), axis, ``small``: ``default``'s shapes/None."""

    dims: tuple[Shape, ...]
    axis: int | None = None
    small: tuple[Shape, ...] | None = None

    def shapes(self, size: str) -> tuple[Shape, ...]:
        """The input shapes of this case in a size preset."""
        if size == "full":
            return self.dims
        if size == "default":
            return self.small or self.dims
        if size == "tiny":
            return tuple(tuple(min(d, TINY_CAP) for d in shape) for shape in self.dims)
        raise ValueError(f"unknown size {size!r}: use one of {', '.join(SIZES)}")

    def label(self, op: str, size: str = "full") -> str:
        """``"Argmax / dim=64x1024x128 axi=0"``; ``tiny`` adds the seed row's shapes (unique)."""
        shapes = self.shapes(size)
        parts = [f"dim={'x'.join(str(d) for d in shape)}" for shape in shapes]
        if self.axis is not None:
            parts.append(f"axi={self.axis}")
        label = f"{op} / {' '.join(parts)}"
        if size == "tiny" and shapes != self.dims:
            label += f" (seed {', '.join('x'.join(str(d) for d in s) for s in self.dims)})"
        return label


@dataclasses.dataclass(frozen=True)
class Op:
    """An operation: how to make its inputs for a case and the computation to time.

    Attributes:
        name: the seed's name (``MatMul``, ``ScatterSum``...).
        cases: its rows, in the seed's order.
        make_inputs: ``(shapes, rng, dtype) -> tensors``, the same for every mode.
        build: ``axis -> fn(*inputs)``, the computation.
        flops: ``shapes -> FLOPs of one call`` where arithmetic-bound, else None."""

    name: str
    cases: tuple[Case, ...]
    make_inputs: Callable[[Sequence[Shape], Any, Any], tuple[Any, ...]]
    build: Callable[[int | None], Callable[..., Any]]
    flops: Callable[[Sequence[Shape]], float] | None = None


def _normal(shapes: Sequence[Shape], rng: Any, dtype: Any) -> tuple[Any, ...]:
    import tensorflow as tf

    return tuple(tf.cast(rng.normal(shape), dtype) for shape in shapes)


def _bce_inputs(shapes: Sequence[Shape], rng: Any, dtype: Any) -> tuple[Any, ...]:
    import tensorflow as tf

    probs = rng.uniform(shapes[0], 0.01, 0.99)
    targets = tf.round(rng.uniform(shapes[1]))
    return tf.cast(probs, dtype), tf.cast(targets, dtype)


def _prelu_inputs(shapes: Sequence[Shape], rng: Any, dtype: Any) -> tuple[Any, ...]:
    import tensorflow as tf

    return tf.cast(rng.normal(shapes[0]), dtype), tf.fill(shapes[1], tf.constant(0.25, dtype))


def _gather_inputs(shapes: Sequence[Shape], rng: Any, dtype: Any) -> tuple[Any, ...]:
    import tensorflow as tf

    table, (count,) = shapes
    indices = rng.uniform((count,), 0, table[0], dtype=tf.int32)
    return tf.cast(rng.normal(table), dtype), indices


def _scatter_inputs(deterministic: bool) -> Callable[..., tuple[Any, ...]]:
    """Target ``rows x cols``, ``count`` row indices, ``count x cols`` updates, one value per target
    row: repeated writes agree, and so do all modes."""

    def make(shapes: Sequence[Shape], rng: Any, dtype: Any) -> tuple[Any, ...]:
        import tensorflow as tf

        target, (count,) = shapes
        rows, cols = target
        indices = rng.uniform((count, 1), 0, rows, dtype=tf.int32)
        if deterministic:
            updates = tf.gather(rng.normal((rows, cols)), indices[:, 0])
        else:
            updates = rng.normal((count, cols))
        return tf.cast(rng.normal(target), dtype), indices, tf.cast(updates, dtype)

    return make


def _bce(axis: int | None) -> Callable[..., Any]:
    import tensorflow as tf

    def bce(probs: Any, targets: Any) -> Any:
        eps = tf.constant(1e-7, probs.dtype)
        p = tf.clip_by_value(probs, eps, 1 - eps)
        return -tf.reduce_mean(targets * tf.math.log(p) + (1 - targets) * tf.math.log(1 - p))

    return bce


def _prelu(axis: int | None) -> Callable[..., Any]:
    import tensorflow as tf

    def prelu(x: Any, alpha: Any) -> Any:
        return tf.maximum(x, 0) + alpha * tf.minimum(x, 0)

    return prelu


def _linear(axis: int | None) -> Callable[..., Any]:
    import tensorflow as tf

    def linear(x: Any, w: Any, b: Any) -> Any:
        return tf.matmul(x, w) + b

    return linear


def _unary(name: str) -> Callable[[int | None], Callable[..., Any]]:
    def build(axis: int | None) -> Callable[..., Any]:
        import tensorflow as tf

        return {
            "LeakyReLU": lambda x: tf.nn.leaky_relu(x, alpha=0.01),
            "ReLU": tf.nn.relu,
            "SeLU": tf.nn.selu,
            "Sigmoid": tf.math.sigmoid,
            "Softplus": tf.math.softplus,
            "SumAll": tf.reduce_sum,
        }[name]

    return build


def _with_axis(name: str) -> Callable[[int | None], Callable[..., Any]]:
    def build(axis: int | None) -> Callable[..., Any]:
        import tensorflow as tf

        return {
            "Argmax": lambda x: tf.math.argmax(x, axis=axis),
            "Softmax": lambda x: tf.nn.softmax(x, axis=axis),
            "Sort": lambda x: tf.sort(x, axis=axis),
            "Sum": lambda x: tf.reduce_sum(x, axis=axis),
            "Concat": lambda a, b: tf.concat([a, b], axis=axis),
        }[name]

    return build


def _simple(fn_name: str) -> Callable[[int | None], Callable[..., Any]]:
    def build(axis: int | None) -> Callable[..., Any]:
        import tensorflow as tf

        return {
            "conv1d": lambda x, w: tf.nn.conv1d(x, w, stride=1, padding="VALID"),
            "conv2d": lambda x, w: tf.nn.conv2d(x, w, strides=1, padding="VALID"),
            "gather": lambda table, idx: tf.gather(table, idx),
            "matmul": tf.matmul,
            "scatter": tf.tensor_scatter_nd_update,
            "scatter_add": tf.tensor_scatter_nd_add,
            "scatter_max": tf.tensor_scatter_nd_max,
        }[fn_name]

    return build


def _prod(shape: Sequence[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def _matmul_flops(shapes: Sequence[Shape]) -> float:
    a, b = shapes[0], shapes[1]
    batch = max(_prod(a[:-2]), _prod(b[:-2]))
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


def _conv_flops(shapes: Sequence[Shape]) -> float:
    x, w = shapes
    spatial = [xi - ki + 1 for xi, ki in zip(x[1:-1], w[:-2], strict=True)]
    return 2.0 * x[0] * _prod(spatial) * _prod(w)


_ACT = (
    Case(((128, 16, 1024),), small=((32, 16, 1024),)),
    Case(((64, 128, 1024),), small=((16, 128, 1024),)),
)
_ACT_PRELU = tuple(Case((*c.dims, (1,)), small=(*c.small, (1,))) for c in _ACT if c.small)
_INDEXED = tuple(
    Case((table, (n,)), small=(table, (min(n, 62_500),)))
    for table in ((64, 256), (1024, 32))
    for n in (10, 1000, 1_000_000)
)
_SCATTERED = tuple(
    Case((table, (n,)), small=(table, (min(n, 62_500),)))
    for table in ((64, 16), (1024, 32))
    for n in (10, 1000, 1_000_000)
)


def _cases(*rows: tuple[Any, ...]) -> tuple[Case, ...]:
    """``(full dims, small dims or None, axis)`` rows -> cases."""
    return tuple(Case(dims, axis, small) for dims, small, axis in rows)


OPS: tuple[Op, ...] = (
    Op(
        "Argmax",
        _cases(
            (((64, 1024, 128),), ((16, 256, 128),), 0),
            (((64, 1024, 128),), ((16, 256, 128),), 1),
            (((64, 1024, 128),), ((16, 256, 128),), 2),
            (((64, 128, 1024),), ((16, 128, 256),), 2),
        ),
        _normal,
        _with_axis("Argmax"),
    ),
    Op(
        "BCE",
        _cases(
            (((1_000_000,), (1_000_000,)), ((250_000,), (250_000,)), None),
            (((100_000, 32), (100_000, 32)), ((25_000, 32), (25_000, 32)), None),
            (((100_000, 64, 2), (100_000, 64, 2)), ((6_250, 64, 2), (6_250, 64, 2)), None),
            (((128, 100_000), (128, 100_000)), ((128, 6_250), (128, 6_250)), None),
        ),
        _bce_inputs,
        _bce,
    ),
    Op(
        "Concat",
        _cases(
            (((1_000_000, 64), (1_000_000, 32)), ((62_500, 64), (62_500, 32)), 1),
            (((1_000_000, 64), (1_000_000, 128)), ((62_500, 64), (62_500, 128)), 1),
            (((1_000_000, 64), (1_000_000, 64)), ((62_500, 64), (62_500, 64)), 0),
            (((64, 1_000_000), (64, 1_000_000)), ((64, 62_500), (64, 62_500)), 0),
        ),
        _normal,
        _with_axis("Concat"),
    ),
    Op(
        "Conv1d",
        _cases(
            (((100, 256, 3), (3, 3, 8)), None, None),
            (((100, 256, 256), (3, 256, 8)), ((25, 256, 256), (3, 256, 8)), None),
            (((16, 1000, 80), (11, 80, 128)), ((4, 1000, 80), (11, 80, 128)), None),
            (((16, 1000, 3), (11, 3, 128)), ((4, 1000, 3), (11, 3, 128)), None),
        ),
        _normal,
        _simple("conv1d"),
        _conv_flops,
    ),
    Op(
        "Conv2d",
        _cases(
            (((100, 256, 256, 3), (3, 3, 3, 8)), ((6, 256, 256, 3), (3, 3, 3, 8)), None),
            (((10, 256, 256, 12), (3, 3, 12, 8)), ((2, 256, 256, 12), (3, 3, 12, 8)), None),
            (((1, 256, 256, 128), (3, 3, 128, 8)), ((1, 128, 128, 128), (3, 3, 128, 8)), None),
            (((100, 28, 28, 3), (3, 3, 3, 8)), ((50, 28, 28, 3), (3, 3, 3, 8)), None),
            (((1000, 28, 28, 3), (3, 3, 3, 8)), ((250, 28, 28, 3), (3, 3, 3, 8)), None),
        ),
        _normal,
        _simple("conv2d"),
        _conv_flops,
    ),
    Op("Gather", _INDEXED, _gather_inputs, _simple("gather")),
    Op("LeakyReLU", _ACT, _normal, _unary("LeakyReLU")),
    Op(
        "Linear",
        _cases(
            *(
                (((100, 1024, k), (k, 1024), (1024,)), ((4, 512, k), (k, 1024), (1024,)), None)
                for k in (32, 64, 256, 512)
            ),
            (((100, 1, 51_200), (51_200, 1), (1,)), ((25, 1, 51_200), (51_200, 1), (1,)), None),
        ),
        _normal,
        _linear,
        _matmul_flops,
    ),
    Op(
        "MatMul",
        _cases(
            (((32, 1, 1000), (32, 1000, 128)), None, None),
            (((1000, 64, 256), (256, 32)), ((250, 64, 256), (256, 32)), None),
            (((1000, 64, 1024), (1000, 1024, 32)), ((100, 64, 1024), (100, 1024, 32)), None),
            (((1000, 1024, 64), (1000, 64, 256)), ((25, 1024, 64), (25, 64, 256)), None),
            (((64, 1_000_000), (1_000_000, 32)), ((64, 62_500), (62_500, 32)), None),
            (((1_000_000, 64), (64, 1024)), ((6_250, 64), (64, 1024)), None),
        ),
        _normal,
        _simple("matmul"),
        _matmul_flops,
    ),
    Op("PReLU", _ACT_PRELU, _prelu_inputs, _prelu),
    Op("ReLU", _ACT, _normal, _unary("ReLU")),
    Op("Scatter", _SCATTERED, _scatter_inputs(True), _simple("scatter")),
    Op("ScatterSum", _SCATTERED, _scatter_inputs(False), _simple("scatter_add")),
    Op("ScatterMax", _SCATTERED, _scatter_inputs(False), _simple("scatter_max")),
    Op("SeLU", _ACT, _normal, _unary("SeLU")),
    Op("Sigmoid", _ACT, _normal, _unary("Sigmoid")),
    Op(
        "Softmax",
        _cases(
            (((64, 1_000_000),), ((64, 62_500),), -1),
            (((1_000_000, 64),), ((62_500, 64),), -1),
            (((64, 16, 32, 1024),), ((4, 16, 32, 1024),), -1),
            (((128, 16, 32, 1024),), ((8, 16, 32, 1024),), -1),
            (((1024, 16, 32, 128),), ((64, 16, 32, 128),), -1),
            (((1024, 64, 32, 8),), ((64, 64, 32, 8),), -1),
        ),
        _normal,
        _with_axis("Softmax"),
    ),
    Op("Softplus", _ACT, _normal, _unary("Softplus")),
    Op(
        "Sort",
        _cases(*((((64, 128, 1024),), ((16, 128, 256),), axis) for axis in (0, 1, 2))),
        _normal,
        _with_axis("Sort"),
    ),
    Op(
        "Sum",
        _cases(*((((64, 128, 128, 128),), ((16, 64, 64, 64),), axis) for axis in range(4))),
        _normal,
        _with_axis("Sum"),
    ),
    Op(
        "SumAll",
        _cases(
            (((64, 128, 128, 128),), ((16, 64, 64, 64),), None),
            (((1_000_000,),), None, None),
            (((1_000_000, 128),), ((62_500, 128),), None),
            (((128, 1_000_000),), ((128, 62_500),), None),
        ),
        _normal,
        _unary("SumAll"),
    ),
)

OP_NAMES = tuple(op.name for op in OPS)


def select_ops(names: Sequence[str] | None = None) -> tuple[Op, ...]:
    """The ops named (case-insensitive, in the table's order); all of them for None/empty.

    Raises:
        ValueError: a name that is not an op, with the list of names."""
    if not names:
        return OPS
    by_name = {op.name.lower(): op for op in OPS}
    unknown = [n for n in names if n.lower() not in by_name]
    if unknown:
        raise ValueError(
            f"unknown op {', '.join(map(repr, unknown))}: choose from {', '.join(OP_NAMES)}"
        )
    wanted = {n.lower() for n in names}
    return tuple(op for op in OPS if op.name.lower() in wanted)
