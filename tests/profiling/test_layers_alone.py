"""``toolkit.profiling.layers_alone``: the anatomy's layers timed alone. Which layers are
checked (the trace's slowest three, the named, then layers with weights, within the budget),
layers of one signature timed once, a layer that cannot run alone saying why; and on every
backend a real layer of two inputs and an integer-input layer timed through the seam."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from toolkit.core._anatomy import Anatomy, LayerTime
from toolkit.profiling.anatomy import LayerEntry
from toolkit.profiling.layers_alone import (
    Alone,
    check_layers,
    check_model,
    fed_by_data,
    time_alone,
)


def _entries(keras):
    dense = [keras.layers.Dense(8, name=f"d{i}") for i in range(3)]
    for d in dense:
        d.build((4, 8))
    relu = keras.layers.ReLU(name="relu")
    spec = (((None, 8), "float32"),)
    made = [LayerEntry(f"kpl{i}", d.name, "Dense", inputs=spec, layer=d)
            for i, d in enumerate(dense)]  # fmt: skip
    made.append(LayerEntry("kpl3", "relu", "ReLU", inputs=spec, layer=relu))
    made.append(LayerEntry("kpl4", "lists", "Concatenate", inputs=None, layer=relu))
    return made


def _found(names_and_seconds):
    return Anatomy(
        "jax",
        phases=(),
        layers=tuple(LayerTime(n, "Dense", s, s) for n, s in names_and_seconds),
    )


def test_check_layers_times_each_signature_once_and_says_why_one_was_not_timed(keras):
    timed = []

    def timer(layer, specs, *, jit, input_grads=True):
        timed.append((layer.name, specs))
        return Alone(forward_s=0.0005, both_s=0.002)

    found = _found([("relu", 0.004), ("d0", 0.003), ("d1", 0.002), ("d2", 0.001),
                    ("lists", 0.0005)])  # fmt: skip
    out = check_layers(found, _entries(keras), batch=4, jit=True, timer=timer)
    by = {x.name: x for x in out.layers}
    # the three Dense layers share a signature: timed once (forward and both, in turn)
    assert [t[0] for t in timed].count("d0") + [t[0] for t in timed].count("d1") == 1
    assert all(t[1] == (((4, 8), "float32"),) for t in timed)  # the batch filled in
    for name in ("d0", "d1", "d2", "relu"):
        assert by[name].alone_s == pytest.approx(0.002)
        assert by[name].alone_forward_s == pytest.approx(0.0005)
    assert by["lists"].alone_s is None
    assert by["lists"].check == "not timed alone: its call takes more than tensors"
    assert [x.name for x in out.layers] == [x.name for x in found.layers]  # order kept


def test_check_layers_leaves_a_split_that_read_a_free_backward_to_the_trace(keras):
    """A forward alone no faster than with its gradients is noise, not a free backward (a
    loaded machine read a planted Dense's backward as 0): the total stands, the split is
    the trace's, so reconcile keeps a backward where the trace saw one."""
    from toolkit.core._anatomy import Phase, PhaseTime, reconcile

    found = _found([("d0", 0.003), ("relu", 0.002)])
    out = check_layers(found, _entries(keras)[:4], batch=4, jit=True,
                       timer=lambda *a, **k: Alone(forward_s=0.0021, both_s=0.002))  # fmt: skip
    by = {x.name: x for x in out.layers}
    assert by["d0"].alone_s == pytest.approx(0.002) and by["d0"].alone_forward_s is None
    phases = (PhaseTime(Phase.FORWARD, 0.005), PhaseTime(Phase.BACKWARD, 0.005),
              PhaseTime(Phase.OTHER, 0.01))  # fmt: skip
    traced = dataclasses.replace(out, phases=phases, step_s=0.02)
    held = {x.name: x for x in reconcile(traced).layers}
    assert held["d0"].alone_s != held["d0"].traced_s  # the alone figure shows
    assert held["d0"].backward_s > 0 and held["d0"].forward_s > 0


def test_check_layers_counts_the_backward_only_of_the_calls_that_took_a_gradient(keras):
    """keras.io's GAN calls its generator twice a step and takes a gradient through one call:
    a layer of it is its forward twice and its backward once alone (it read 0.58× alone when
    both calls counted a backward)."""
    found = Anatomy("tensorflow", phases=(), layers=(
        LayerTime("d0", "Dense", 0.003, 0.002, calls=2, backward_calls=1),
        LayerTime("d1", "Dense", 0.003, 0.004, calls=2),
    ))  # fmt: skip
    out = check_layers(found, _entries(keras)[:2], batch=4, jit=True,
                       timer=lambda *a, **k: Alone(forward_s=0.0005, both_s=0.002))  # fmt: skip
    by = {x.name: x for x in out.layers}
    assert by["d0"].alone_s == pytest.approx(2 * 0.0005 + 1 * 0.0015)
    assert by["d1"].alone_s == pytest.approx(2 * 0.002)  # every call took a gradient
    assert by["d0"].alone_forward_s == by["d1"].alone_forward_s == pytest.approx(0.001)


def test_fed_by_data_names_the_layers_on_the_models_own_inputs(keras):
    """The step takes no gradient of the data: a Sequential's first layer and a functional
    model's layers on its Inputs are timed alone without their inputs' gradients (an LSTM's
    over its time steps read slower than the whole step); the rest, and every layer of a
    model without a graph, with them."""
    seq = keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(4), keras.layers.Dense(1)])
    assert fed_by_data(seq) == {id(seq.layers[0])}
    a, b = keras.Input((4,)), keras.Input((4,))
    left, right = keras.layers.Dense(2), keras.layers.Dense(2)
    joined = keras.layers.Concatenate()([left(a), b])
    model = keras.Model([a, b], right(joined))
    assert fed_by_data(model) == {id(left)}  # Concatenate takes a Dense's output too

    class Own(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

    assert fed_by_data(Own()) == frozenset()
    # What only weightless or frozen layers made of the data carries no gradient either
    # (keras.io's transfer learning: augmentation, Rescaling, a frozen base; a structured
    # data model's Normalization): its first Dense's FLOPs read 1.5x.
    base_in = keras.Input((8, 8, 3))
    convs = [keras.layers.Conv2D(4, 3, name=f"b_conv{i}") for i in range(2)]
    base = keras.Model(base_in, convs[1](convs[0](base_in)))
    x_in = keras.Input((8, 8, 3))
    flip, scale = keras.layers.RandomFlip(), keras.layers.Rescaling(1 / 255)
    pool, head = keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)
    model = keras.Model(x_in, head(pool(base(scale(flip(x_in))))))
    assert fed_by_data(model) == {id(x) for x in (flip, scale, base, convs[0])}  # fine-tuning
    base.trainable = False
    assert fed_by_data(model) == {id(x) for x in (flip, scale, base, *convs, pool, head)}
    norm = keras.layers.Normalization()
    seq = keras.Sequential([keras.Input((4,)), norm, keras.layers.Dense(3), keras.layers.Dense(1)])
    assert fed_by_data(seq) == {id(norm), id(seq.layers[1])}
    # and check_layers asks for the inputs' gradients of every layer but those
    asked = {}

    def timer(layer, specs, *, jit, input_grads=True):
        asked[layer.name] = input_grads
        return Alone(forward_s=0.0005, both_s=0.002)

    entries = _entries(keras)
    found = _found([("d0", 0.003), ("relu", 0.002)])
    check_layers(found, entries, batch=4, jit=True, timer=timer, data_fed={id(entries[0].layer)})
    assert asked == {"d0": False, "relu": True}


def test_check_layers_times_a_layer_holding_others_with_them(keras):
    """A nested model (a block of layers) is timed alone as a whole: marked as timed with
    the layers it holds, which keep their own rows and their own timings."""
    inputs = keras.Input((8,))
    block = keras.Model(inputs, keras.layers.Dense(8, name="inner")(inputs), name="block")
    block.build((4, 8))
    spec = (((None, 8), "float32"),)
    inner = block.get_layer("inner")
    entries = [LayerEntry("kpl0", "block", "Functional", inputs=spec, layer=block,
                          holds_layers=True),
               LayerEntry("kpl1", "block/inner", "Dense", inputs=spec, layer=inner)]  # fmt: skip
    found = _found([("block", 0.001), ("block/inner", 0.002)])
    out = check_layers(found, entries, batch=4, jit=True, timer=lambda *a, **k: Alone(0.001, 0.003))
    by = {x.name: x for x in out.layers}
    assert by["block"].alone_s == pytest.approx(0.003) and by["block"].alone_with_held
    assert by["block/inner"].alone_s == pytest.approx(0.003)
    assert not by["block/inner"].alone_with_held and not by["block"].check


def test_check_layers_keeps_to_its_budget_past_the_first_three_and_the_named(keras):
    ticks = itertools.count(0.0, 10.0)  # each look at the clock: 10 s later

    def timer(layer, specs, *, jit, input_grads=True):
        return Alone(0.0005, 0.001)

    entries = _entries(keras)
    for e in entries[:3]:  # distinct signatures: no sharing of one timing
        e.inputs = (((None, 8 + int(e.name[1:])), "float32"),)
    found = _found([("d0", 0.004), ("d1", 0.003), ("relu", 0.002), ("d2", 0.001)])
    out = check_layers(found, entries, batch=4, jit=False, timer=timer, budget_s=5.0,
                       clock=lambda: next(ticks))  # fmt: skip
    by = {x.name: x for x in out.layers}
    assert all(by[n].alone_s for n in ("d0", "d1", "relu"))
    assert by["d2"].alone_s is None and "ran out" in by["d2"].check
    named = check_layers(found, entries, batch=4, jit=False, timer=timer, budget_s=5.0,
                         clock=lambda: next(ticks), names=("d2", "nope"))  # fmt: skip
    assert {x.name: x for x in named.layers}["d2"].alone_s
    assert any("no layer named nope" in n for n in named.notes)


def test_check_layers_says_why_a_layer_failed_alone(keras):
    def timer(layer, specs, *, jit, input_grads=True):
        raise RuntimeError("shapes do not match\nsecond line")

    out = check_layers(_found([("d0", 0.004)]), _entries(keras), batch=4, jit=False,
                       timer=timer)  # fmt: skip
    assert out.layers[0].alone_s is None
    assert out.layers[0].check.startswith("not timed alone: RuntimeError: shapes do not match")


@pytest.mark.every_backend
def test_time_alone_runs_a_layer_of_two_inputs_and_one_of_integer_inputs(keras):
    attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    query = keras.ops.ones((2, 5, 8))
    attention(query, query)
    specs = (((2, 5, 8), "float32"), ((2, 5, 8), "float32"))
    alone = time_alone(attention, specs, jit=False, runs=1)
    assert alone.both_s >= alone.forward_s > 0
    embedding = keras.layers.Embedding(50, 8)
    embedding.build((2, 5))
    assert time_alone(embedding, (((2, 5), "int32"),), jit=False, runs=1).both_s > 0


@pytest.mark.every_backend
def test_layer_alone_carries_a_layer_s_state_from_call_to_call(keras):
    """A Dropout's seed advances from step to step; on JAX, whose layers take their state as
    arguments, a seed held constant drew one mask, computed once for every call (a Dropout
    read 0.03 ms alone against 1.1 ms in a jitted call of its own). Each call draws anew."""
    if keras.backend.backend() != "jax":
        pytest.skip("TensorFlow's and PyTorch's layers keep their state in their variables")
    import jax

    from toolkit import backend

    seen: list[float] = []

    class Draw(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.seed = keras.random.SeedGenerator(1)

        def call(self, x):
            mask = keras.random.uniform(keras.ops.shape(x), seed=self.seed)
            jax.debug.callback(lambda m: seen.append(float(m)), keras.ops.sum(mask))
            return x * mask

    layer = Draw()
    layer.build((4, 8))
    for backward, jit in ((False, True), (True, True), (True, False)):
        timed = backend.get().layer_alone(layer, (((4, 8), "float32"),), backward=backward, jit=jit)
        seen.clear()
        timed(3)  # (each timing starts again from the layer's own state)
        assert len(seen) == 3 and len(set(seen)) == 3, (backward, jit, seen)


def test_check_model_times_the_whole_model_without_its_inputs_gradients(keras):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    seen = []

    def timer(layer, specs, *, jit, input_grads):
        seen.append((layer, specs, input_grads))
        return Alone(forward_s=0.001, both_s=0.003)

    out = check_model(_found([("d0", 0.004)]), model, (((None, 8), "float32"),), calls=1,
                      batch=4, jit=True, timer=timer)  # fmt: skip
    assert (out.model_alone_s, out.model_alone_forward_s) == (0.003, 0.001)
    assert seen == [(model, (((4, 8), "float32"),), False)]
    assert out.notes == ()


def test_check_model_says_why_the_model_was_not_timed(keras):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])

    def timer(layer, specs, *, jit, input_grads):
        raise ValueError("no\nmore")

    def noisy(layer, specs, *, jit, input_grads):  # forward read as slow as with backward
        return Alone(forward_s=0.002, both_s=0.002)

    cases = [
        (None, 1, timer, "its call takes more than one tensor"),
        ((((None, 8), "float32"),), 0, timer, "never called the model itself"),
        ((((None, None), "float32"),), 1, timer, "its input's shape is not fixed"),
        ((((None, 8), "float32"),), 1, timer, "ValueError: no"),
        ((((None, 8), "float32"),), 1, noisy, "read no faster than with its gradients"),
    ]
    for inputs, calls, t, why in cases:
        out = check_model(_found([("d0", 0.004)]), model, inputs, calls=calls, batch=4,
                          jit=False, timer=t)  # fmt: skip
        assert out.model_alone_s is None
        (note,) = out.notes
        assert note.startswith("forward and backward not checked against the model timed alone")
        assert why in note and "\n" not in note


@pytest.mark.every_backend
def test_time_alone_times_a_model_without_its_inputs_gradients(keras):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    spec = (((4, 8), "float32"),)
    for input_grads in (True, False):
        alone = time_alone(model, spec, jit=False, runs=1, input_grads=input_grads)
        assert alone.both_s >= alone.forward_s > 0


class _Distiller:  # keras.io's Knowledge Distillation: its teacher runs in compute_loss
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None):
        return 0.0


def test_check_model_keeps_the_trace_s_split_where_the_step_does_more_than_call_the_model(keras):
    """keras.io's Distiller calls its student, and its own compute_loss runs the teacher too:
    the model timed alone is a part of the step, so its figures would scale the backward
    down and leave the teacher in "other" (45 %). Its step's own methods are named instead."""

    class Distiller(_Distiller, keras.Model):
        def __init__(self):
            super().__init__()
            self.student = keras.layers.Dense(4)

        def call(self, x):
            return self.student(x)

    timed = []

    def timer(layer, specs, *, jit, input_grads):
        timed.append(layer)
        return Alone(forward_s=0.001, both_s=0.003)

    out = check_model(_found([("d0", 0.004)]), Distiller(), (((None, 8), "float32"),), calls=1,
                      batch=4, jit=False, timer=timer)  # fmt: skip
    assert out.model_alone_s is None and timed == []
    (note,) = out.notes
    assert note.endswith("its step does more than call it (its own _Distiller.compute_loss)")
    plain = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])  # Keras's own step
    out = check_model(_found([("d0", 0.004)]), plain, (((None, 8), "float32"),), calls=1,
                      batch=4, jit=False, timer=timer)  # fmt: skip
    assert out.model_alone_s == 0.003


def test_failed_alone_names_tensorflow_s_runtime_errors_without_their_paths():
    """A run alone that TensorFlow's own runtime fails (Grappler's rewrite of a keras.io
    U-Net's loop) is said as TensorFlow's, by its type, without the internal resource path
    that filled the note; any other error as ``Type: message``."""
    import tensorflow as tf

    from toolkit.profiling.layers_alone import _failed_alone

    path = "__per_step_0/while/body/_1/while/ArithmeticOptimizer/AddOpsRewrite_add_2/tmp_var"
    said = _failed_alone(tf.errors.AlreadyExistsError(None, None, f"Resource {path}/frame:63"))
    assert said == "TensorFlow's runtime failed to run it (AlreadyExistsError: Resource ...)"
    assert _failed_alone(ValueError("its input is not fixed")) == (
        "ValueError: its input is not fixed"
    )
