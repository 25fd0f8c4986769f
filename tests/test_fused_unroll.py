"""How a fused loop of training steps is compiled (rolled, or unrolled into straight-line
code), per backend: the rule, that a real fused step is built the way the rule says, and that
the unrolled form trains exactly like separate steps."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.backend._jax import scan_unroll
from toolkit.backend._tensorflow import ops_convolve, unrolls_fused_steps
from toolkit.runner import train
from toolkit.runner.config import TrainConfig

FUSED = 4


def test_the_rule_unrolls_only_a_convolving_step_under_xla_on_a_cpu():
    # JAX: the scan's unroll, all steps or one (rolled); no partial unroll.
    assert scan_unroll(100, "cpu", convolves=True) == 100
    assert scan_unroll(100, "cpu", convolves=False) == 1
    assert scan_unroll(100, "gpu", convolves=True) == 1
    assert scan_unroll(8, "tpu", convolves=False) == 1
    # TensorFlow: straight-line calls instead of a tf.while_loop.
    assert unrolls_fused_steps(True, "cpu", True)
    assert not unrolls_fused_steps(False, "cpu", True)  # TF's own kernels: the loop is fine
    assert not unrolls_fused_steps(True, "cpu", False)
    assert not unrolls_fused_steps(True, "gpu", True)


def test_convolutions_are_recognised_by_their_op_types():
    class Op:
        def __init__(self, type_):
            self.type = type_

    for conv in ("Conv2D", "Conv2DBackpropFilter", "Conv3DBackpropInputV2", "Conv",
                 "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropFilter"):  # fmt: skip
        assert ops_convolve([Op("MatMul"), Op(conv)]), conv
    assert not ops_convolve([Op(t) for t in ("MatMul", "ConvertToCooTensor", "QuantizeV2")])


def _task(keras, conv: bool, n: int = 96):
    rng = np.random.default_rng(0)
    shape = (6, 6, 1) if conv else (6,)
    x = rng.normal(size=(n, *shape)).astype("float32")
    y = (x.reshape(n, -1)[:, 0] > 0).astype("int32")
    layers = keras.layers
    body = (
        [layers.Conv2D(3, 3, padding="same"), layers.GlobalAveragePooling2D()]
        if conv
        else [layers.Dense(8, activation="relu")]
    )
    task = train.Task(
        name="fused-unroll",
        build_model=lambda: keras.Sequential([keras.Input(shape), *body, layers.Dense(2)]),
        train=(x, y),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    task.optimizer = lambda: keras.optimizers.SGD(0.1)
    return task, (x[: FUSED * 4], y[: FUSED * 4])


def _run(keras, conv: bool, fused: int, jit: bool = True):
    task, data = _task(keras, conv)
    config = TrainConfig(
        epochs=1,
        batch_size=4,
        fused_steps=fused,
        steps_per_epoch=12,
        warmup_steps=0,
        jit_compile=jit,
        report_dir=None,
        count_flops=False,
        seed=1,  # the same initial weights in every run
    )
    return train.run(task, config).model, data


def _compiled_as(model, data) -> str:
    """ "loop" or "unrolled": how `model`'s fused train step is built, read from what it
    traces to (the scan's unroll in its jaxpr on JAX; a While op in its graph on TF)."""
    from toolkit import backend

    if backend.name() == "jax":
        import jax

        state = tuple(
            [v.value for v in variables]
            for variables in (
                model.trainable_variables,
                model.non_trainable_variables,
                model.optimizer.variables,
                model.metrics_variables,
            )
        )
        jaxpr = jax.make_jaxpr(model.train_step)(state, data).jaxpr
        (scan,) = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
        assert scan.params["length"] == FUSED
        return "unrolled" if scan.params["unroll"] == FUSED else "loop"
    import tensorflow as tf

    graph = tf.function(model.train_step).get_concrete_function(data).graph
    types = {op.type for op in graph.get_operations()}
    return "loop" if types & {"While", "StatelessWhile"} else "unrolled"


def _on_cpu() -> bool:
    from toolkit import backend

    if backend.name() == "jax":
        from toolkit.backend._jax import training_platform

        return training_platform() == "cpu"
    import tensorflow as tf

    return not tf.config.list_logical_devices("GPU")


@pytest.mark.every_backend
def test_a_fused_step_is_compiled_as_the_rule_says_and_trains_like_separate_steps(keras):
    """On a CPU: a convolving step under XLA unrolled, an MLP's step (and, on TensorFlow, a
    convolving step without XLA) in a loop; the unrolled conv steps end at the same weights
    as separate steps, with the optimizer counting every step."""
    from toolkit import backend

    if backend.name() == "torch":
        pytest.skip("Keras's PyTorch backend compiles no step to put a loop in")
    if not _on_cpu():
        pytest.skip("the rule unrolls only on a CPU")
    mlp, data = _run(keras, conv=False, fused=FUSED)
    assert _compiled_as(mlp, data) == "loop"
    fused, data = _run(keras, conv=True, fused=FUSED)
    assert _compiled_as(fused, data) == "unrolled"
    if backend.name() == "tensorflow":
        no_xla, _ = _run(keras, conv=True, fused=FUSED, jit=False)
        assert _compiled_as(no_xla, data) == "loop"
    separate, _ = _run(keras, conv=True, fused=1)
    assert int(fused.optimizer.iterations.numpy()) == 12
    for a, b in zip(fused.weights, separate.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.every_backend
def test_fused_steps_step_aside_only_where_keras_scans_as_fast(keras):
    """On JAX: where Keras scans its own steps from a tf.data input, for a step that does not
    convolve on a CPU, fused steps step aside; a convolving step (Keras's scan stays rolled)
    and a host-stacked input keep them."""
    from toolkit import backend

    if backend.name() != "jax" or not _on_cpu():
        pytest.skip("JAX on a CPU: the rule's convolution case")
    from toolkit.backend import _jax

    both = ("steps_per_execution", "fused_steps")

    def built(conv: bool, jit: bool = True):
        model = _task(keras, conv=conv)[0].build_model()
        model.compile("sgd", "mse", jit_compile=jit)
        return model

    mlp, conv = built(False), built(True)
    scans = _jax.keras_scans_steps()
    assert _jax.step_loops("tf_data", mlp) == (("steps_per_execution",) if scans else both)
    assert _jax.step_loops("tf_data", conv) == both
    assert _jax.step_loops("tf_data", built(False, jit=False)) == both  # Keras's loop: eager
    assert _jax.step_loops("tf_data") == both  # no model yet: tune measures both
    assert _jax.step_loops("grain", mlp) == _jax.step_loops("arrays", mlp) == both


@pytest.mark.next_keras
@pytest.mark.long
def test_fused_steps_where_keras_scans_its_own_say_they_are_not_needed(tmp_path):
    """Keras 3.16 runs steps_per_execution on JAX as one scan; from a tf.data input it was as
    fast as fused steps, so a run given --fused_steps says what does the same (and still runs
    what it was asked); on Keras 3.15, or from Grain, fused steps pay and nothing is said."""
    import json
    import os
    import subprocess
    import sys

    probe = "from toolkit.backend import _jax; print(_jax.keras_scans_steps())"
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    env.pop("TOOLKIT_PROGRESS", None)  # a note is progress: said unless progress is off
    scans = (
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300
        ).stdout.split()[-1]
        == "True"
    )
    said = {}
    for loader in ("tf_data", "grain"):
        out = subprocess.run(
            [
                sys.executable, "-m", "recipes.mlp", "--backend=jax", "--smoke",
                "--fused_steps=4", f"--data_loader={loader}", "--count_flops=false",
                f"--report_dir={tmp_path / loader}",
            ],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        (found,) = (tmp_path / loader).glob("*/report.json")
        report = json.loads(found.read_text())
        codes = [f["code"] for f in report["context"]["preflight"]]
        said[loader] = ([ln for ln in out.stderr.splitlines() if "not needed" in ln], codes)
        assert report["args"]["fused_steps"] == 4  # what was asked for runs
    lines, codes = said["tf_data"]
    if scans:
        assert len(lines) == 1 and lines[0].startswith("note: --fused_steps=4 is not needed here")
        assert "as fast from tf.data" in lines[0]
        assert "use --steps_per_execution=4 without --fused_steps" in lines[0]
        assert "fused_steps_not_needed" in codes
    else:
        assert not lines and "fused_steps_not_needed" not in codes
    assert said["grain"] == ([], [c for c in said["grain"][1] if c != "fused_steps_not_needed"])
