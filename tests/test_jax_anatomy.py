"""JAX's anatomy reader (``toolkit.backend._jax.anatomy``): what it says of ops' time it could
not join to a layer. The reader itself runs in the anatomy tests on JAX; this is the part
only a GPU's trace reaches (XLA's command buffers), checked on its figures."""

from __future__ import annotations

from toolkit.backend._jax.anatomy import COMMAND_BUFFER, anatomy_refusal, unjoined_notes
from toolkit.core import compat


def test_unjoined_notes_name_command_buffers_apart_from_programs_without_metadata():
    """On an NVIDIA GPU XLA runs kernels as CUDA graphs, and the trace names their time by
    the buffer (``command_buffer_1``, the whole step of a small MLP on an H200): said with
    the flag that shows it layer by layer, apart from metadata the trace did not carry."""
    assert COMMAND_BUFFER == "command_buffer"
    (buffers,) = unjoined_notes(joined=0.0, unjoined=0.0, buffered=141.3)
    assert buffers.startswith("100% of the ops' time ran inside XLA's command buffers")
    assert "XLA_FLAGS=--xla_gpu_enable_command_buffer= " in buffers
    both = unjoined_notes(joined=51.0, unjoined=10.0, buffered=39.0)
    assert [n.split(" of the ops' time ")[0] for n in both] == ["39%", "10%"]
    assert both[1].endswith("metadata the trace did not carry: counted as other")


def test_unjoined_notes_say_nothing_under_five_percent():
    assert unjoined_notes(joined=96.0, unjoined=2.0, buffered=2.0) == []
    assert unjoined_notes(joined=0.0, unjoined=0.0, buffered=0.0) == []


def test_anatomy_refusal_names_the_layer_that_keeps_the_step_uncompiled():
    """Keras's JAX trainer jits the step only with ``jit_compile`` True, and a layer with
    ``supports_jit`` False (keras.io's augmentation inside the model) turns it off: the step
    then runs op by op with no scope, so the anatomy refuses, naming the layer and the way
    out, in one line. (The model is the process's backend's: the refusal reads attributes.)"""
    import keras

    inputs = keras.Input((16, 16, 3))
    x = keras.layers.RandomFlip("horizontal")(inputs)
    x = keras.layers.RandomRotation(0.1, name="spin")(x)
    x = keras.layers.Conv2D(4, 3)(x)
    outputs = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(x))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse")  # jit_compile="auto": off, for the rotation
    refused = anatomy_refusal(model)
    assert refused is not None and "\n" not in refused
    assert "RandomRotation 'spin' rules XLA out" in refused and "RandomFlip" not in refused
    assert "apply such layers to the dataset" in refused
    # the run's ledger names the same layer, for its fix (a step Keras did not jit)
    assert compat.unjitted_by(model) == compat.xla_ruled_out(model) == ("RandomRotation 'spin'",)

    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    plain.compile("sgd", "mse", jit_compile=False)
    assert "jit_compile=True" in anatomy_refusal(plain)
    plain.compile("sgd", "mse", jit_compile=True)
    assert anatomy_refusal(plain) is None and compat.unjitted_by(plain) == ()


def test_xla_s_cpu_runtime_waiting_on_its_thread_pool_is_the_program_s_time(monkeypatch):
    """XLA's CPU runtime runs a program's thunks on its intra-op pool and marks the caller's
    wait ``ThunkExecutor::Execute (wait for completion)``: the program's time (a miniature
    GPT's step: 17 of 88 ms), not Keras's between steps, where nothing at all runs."""
    from toolkit.backend._jax import anatomy as jax_anatomy
    from toolkit.core import _trace_events as te
    from toolkit.core._anatomy import SpanKind

    events = [
        {"name": "train 1", "ts": 0, "dur": 2, "pid": 1, "tid": 1},
        {"name": "ThunkExecutor::Execute", "ts": 2, "dur": 3, "pid": 1, "tid": 2},
        {
            "name": "ThunkExecutor::Execute (wait for completion)",
            "ts": 5,
            "dur": 17,
            "pid": 1,
            "tid": 2,
        },
    ]
    monkeypatch.setattr(te, "xspace_events", lambda files: (events, {1: "/host:CPU"}, None))
    monkeypatch.setattr(te, "hlo_metadata", lambda files, events: {})
    spans = jax_anatomy.anatomy_trace(["trace.xplane.pb"]).spans
    assert [(s.start, s.end, s.kind) for s in spans] == [
        (2.0, 5.0, SpanKind.CALL),
        (5.0, 22.0, SpanKind.CALL),
    ]
