"""The op registry: the seed's ops and shapes, valid shapes in every preset, and every op's
computation agreeing across eager, graph and XLA on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.bench import ops as bench_ops

# The seed table's rows per operation (MLX / PyTorch-MPS benchmark on an M3 Max).
SEED_ROWS = {
    "Argmax": 4, "BCE": 4, "Concat": 4, "Conv1d": 4, "Conv2d": 5, "Gather": 6, "LeakyReLU": 2,
    "Linear": 5, "MatMul": 6, "PReLU": 2, "ReLU": 2, "Scatter": 6, "ScatterSum": 6,
    "ScatterMax": 6, "SeLU": 2, "Sigmoid": 2, "Softmax": 6, "Softplus": 2, "Sort": 3, "Sum": 4,
    "SumAll": 4,
}  # fmt: skip


def test_the_seed_ops_and_rows():
    assert {op.name: len(op.cases) for op in bench_ops.OPS} == SEED_ROWS
    assert list(bench_ops.OP_NAMES) == list(SEED_ROWS)  # the seed's order


def test_full_labels_are_the_seeds():
    labels = {case.label(op.name) for op in bench_ops.OPS for case in op.cases}
    for seed_label in (
        "Argmax / dim=64x1024x128 axi=0",
        "BCE / dim=100000x64x2 dim=100000x64x2",
        "Concat / dim=1000000x64 dim=1000000x32 axi=1",
        "Gather / dim=64x256 dim=1000000",
        "Linear / dim=100x1024x32 dim=32x1024 dim=1024",
        "MatMul / dim=1000000x64 dim=64x1024",
        "PReLU / dim=128x16x1024 dim=1",
        "ScatterMax / dim=1024x32 dim=1000",
        "Softmax / dim=1024x64x32x8 axi=-1",
        "Sum / dim=64x128x128x128 axi=3",
        "SumAll / dim=128x1000000",
    ):
        assert seed_label in labels


def test_presets_shrink_and_keep_the_cases():
    for op in bench_ops.OPS:
        for case in op.cases:
            full, default, tiny = (case.shapes(s) for s in ("full", "default", "tiny"))
            assert len(full) == len(default) == len(tiny)
            size = [sum(int(np.prod(s)) for s in shapes) for shapes in (full, default, tiny)]
            assert size[0] >= size[1] >= size[2], (op.name, case)
            assert max(max(s) for s in tiny) <= bench_ops.TINY_CAP
            assert size[1] <= 20_000_000, (op.name, case)  # default: a few minutes on 2 cores


@pytest.mark.parametrize("size", ["full", "default", "tiny"])
def test_every_case_traces_in_every_preset(size):
    """Shapes fit together (matmul inner dims, conv channels, index ranges) in each preset:
    inputs and op are traced into a graph and never run, so the full preset costs nothing."""
    import tensorflow as tf

    with tf.device("/device:CPU:0"):
        rng = tf.random.Generator.from_seed(0)
    for op in bench_ops.OPS:
        for case in op.cases:
            shapes, fn = case.shapes(size), op.build(case.axis)

            @tf.function(autograph=False)
            def traced(shapes=shapes, fn=fn, op=op):
                return fn(*op.make_inputs(shapes, rng, tf.float32))

            out = traced.get_concrete_function().structured_outputs
            assert out.shape.is_fully_defined(), (op.name, case)


def test_select_ops():
    assert [op.name for op in bench_ops.select_ops(["relu", "MatMul"])] == ["MatMul", "ReLU"]
    assert len(bench_ops.select_ops(None)) == 21
    with pytest.raises(ValueError, match=r"unknown op 'Nope': choose from Argmax"):
        bench_ops.select_ops(["Nope"])


def test_flops_of_the_arithmetic_ops():
    matmul = {op.name: op for op in bench_ops.OPS}["MatMul"]
    assert matmul.flops(((1000, 64, 256), (256, 32))) == 2 * 1000 * 64 * 256 * 32
    conv = {op.name: op for op in bench_ops.OPS}["Conv2d"]
    assert conv.flops(((1, 5, 5, 3), (3, 3, 3, 8))) == 2 * 1 * 3 * 3 * (3 * 3 * 3 * 8)


@pytest.mark.parametrize("op", bench_ops.OPS, ids=lambda op: op.name)
def test_modes_agree_numerically(op):
    """Each op's result in graph and XLA mode equals eager's, on the same tiny inputs."""
    import tensorflow as tf

    from toolkit import devices
    from toolkit.bench.measure import MODES, compile_fn, inputs_on

    cpu = devices.resolve("cpu")
    for case in op.cases:
        shapes = case.shapes("tiny")
        inputs = inputs_on(cpu, lambda rng, shapes=shapes: op.make_inputs(shapes, rng, tf.float32))
        fn = op.build(case.axis)
        results = {mode: compile_fn(fn, mode)(*inputs).numpy() for mode in MODES}
        expected = results["eager"]
        scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
        for mode in ("graph", "xla"):
            got = results[mode]
            assert got.shape == expected.shape and got.dtype == expected.dtype
            if expected.dtype.kind in "iu":
                np.testing.assert_array_equal(got, expected, err_msg=f"{op.name} {mode}")
            else:
                np.testing.assert_allclose(
                    got, expected, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{op.name} {mode}"
                )


@pytest.mark.parametrize("op", bench_ops.OPS, ids=lambda op: op.name)
def test_the_other_frameworks_compute_the_same_op(op):
    """JAX's and PyTorch's version of each op gives TensorFlow eager's result on the same
    values (PyTorch's channels-first convolutions turned back to channels-last)."""
    import tensorflow as tf

    from toolkit import devices
    from toolkit.bench import frameworks
    from toolkit.bench.measure import inputs_on

    modes = [m for m in ("jax_jit", "torch_eager") if not frameworks.missing(m)]
    if not modes:
        pytest.skip("neither JAX nor PyTorch is installed")
    cpu = devices.resolve("cpu")
    for case in op.cases:
        shapes = case.shapes("tiny")
        inputs = inputs_on(cpu, lambda rng, shapes=shapes: op.make_inputs(shapes, rng, tf.float32))
        expected = op.build(case.axis)(*inputs).numpy()
        arrays = [t.numpy() for t in inputs]
        scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
        for mode in modes:
            fn = frameworks.build(op.name, case.axis, mode)
            got = np.asarray(fn(*frameworks.to_framework(op.name, arrays, mode)))
            if mode.startswith("torch") and op.name in ("Conv1d", "Conv2d"):
                got = np.moveaxis(got, 1, -1)  # NC... -> N...C
            assert got.shape == expected.shape, (op.name, mode, got.shape, expected.shape)
            np.testing.assert_allclose(
                got, expected, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{op.name} {mode}"
            )


def test_row_labels_are_unique_at_every_size():
    for size in ("tiny", "default", "full"):
        for op in bench_ops.OPS:
            labels = [case.label(op.name, size) for case in op.cases]
            assert len(labels) == len(set(labels)), (size, labels)
