"""The step's anatomy in real fits, on every backend (``make test`` runs these again under JAX
and PyTorch): a planted slow layer is ranked first and timed as it is alone, the phases add
up to the step on the outside clock, a planted slow optimizer and a planted busy metric are
named in their phases; the sweep's rules on spans made by hand."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit import backend
from toolkit.core._anatomy import Phase, Span, SpanKind, StepTrace
from toolkit.profiling.anatomy import BETWEEN_OPS, Scopes, assemble, sweep
from toolkit.runner.config import TrainConfig

BATCH = 256
FEATURES = 64
# Whether the planted layer's traced figure agrees with the layer timed alone (±25 %) is
# benchmarks/anatomy.py's to print, on a quiet machine: here a second pytest worker shares
# the 2 cores, and one side of a pair timed seconds apart moved 0.05-5.6× (seen in CI). The
# tests assert what holds under any load: the anatomy timed the layer alone itself, and the
# figure it shows is the one that holds (``_shown_over_held``).
# Steps traced where a phase's share is compared with another's on the trace alone: the
# window is exactly the steps asked, and a longer one holds a loaded host's hiccups to a
# small part of it.
STEADY = 40


@pytest.fixture
def one_torch_thread():
    """PyTorch on one intra-op thread for the test, then as it was. Two pytest workers on 2
    cores oversubscribe PyTorch's OpenMP threads: an op with a parallel region waits at its
    barrier for a thread the other worker's process holds. Under 3 busy loops that took the
    planted SGD model's forward from 0.8 to 27 ms a step and its backward from 0.3 to 19 ms,
    its element-wise optimizer (below OpenMP's grain) only from 12 to 57 ms: one phase's
    share against another's measured the load. On one thread the same load left the
    optimizer 25× the forward. Other backends: nothing changed."""
    if backend.name() != "torch":
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _ms(found) -> dict[str, float]:
    """Each phase in ms a step: an assertion's message that reads whole."""
    return {p.phase.value: round(p.seconds * 1e3, 3) for p in found.phases}


def _data(n: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.random((n, FEATURES), dtype=np.float32), rng.integers(0, 10, n)


def _compiled(keras, hidden, optimizer="adam", metrics=("accuracy",)):
    inputs = keras.Input((FEATURES,))
    h = keras.layers.Dense(64, activation="relu", name="little")(inputs)
    h = hidden(h)
    h = keras.layers.Dense(16, activation="relu", name="narrow")(h)
    outputs = keras.layers.Dense(10, name="head")(h)
    model = keras.Model(inputs, outputs, name="planted_model")
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=list(metrics),
    )
    return model


def _busy_layer(keras):
    class Busy(keras.layers.Layer):
        """A custom layer doing extra work: a chain of wide products with its own weights
        (wide enough that each op's work, not its dispatch, is what is timed)."""

        def build(self, shape):
            self.up = self.add_weight(shape=(shape[-1], 384), initializer="orthogonal")
            self.w = self.add_weight(shape=(384, 384), initializer="orthogonal")
            self.down = self.add_weight(shape=(384, shape[-1]), initializer="orthogonal")

        def call(self, x):
            h = keras.ops.matmul(x, self.up)
            for _ in range(4):
                h = keras.ops.tanh(keras.ops.matmul(h, self.w))
            return keras.ops.matmul(h, self.down)

    return Busy(name="busy")


def _adds_up(found) -> None:
    """The structural promise (agreement with the outside clock is benchmarks/anatomy.py's
    to print): the trace's phases add up to the traced window on its own clock, and the
    phases shown to the untraced step they were reconciled to, where they were (the traced
    step, where the untraced ran far slower: a profiler never makes a step faster)."""
    assert found.traced_sum() == pytest.approx(found.traced_s, rel=1e-6)
    if found.traced_phases:
        slower = found.untraced_off()
        to = found.step_s if slower else found.untraced_s
        assert found.phases_sum() == pytest.approx(to, rel=1e-6)
        assert slower == any(n.startswith("the untraced steps ran slower") for n in found.notes)
    assert found.step_s > 0 and found.agreement() is not None


def _planted(keras, make_hidden, name):
    """The anatomy of a small model with a planted slow layer, and that layer's record."""
    import toolkit

    x, y = _data()
    model = _compiled(keras, make_hidden())
    found = toolkit.anatomy(model, (x, y), config=TrainConfig(batch_size=BATCH), raw=False)
    assert found.error is None, found.error
    planted = next(t for t in found.layers if t.name == name)
    assert planted.alone_s and planted.alone_s > 0, planted  # the anatomy timed it alone itself
    assert planted.against_alone() is not None, planted
    # each figure shown is the one that holds: forward and backward each scaled alike where
    # the layers overran the model timed alone or the step
    for factors in _shown_over_held(found):
        assert factors and max(factors) <= 1 + 1e-6, found.layers
        assert max(factors) == pytest.approx(min(factors), rel=1e-6), found.layers
    return found, planted


def _shown_over_held(found):
    """Each timed layer's shown forward and backward over the figures that hold for it (its
    time alone where the trace was off, its trace otherwise): two lists of factors."""
    out = ([], [])
    for x in found.layers:
        if not x.alone_s or x.alone_with_held:
            continue
        if x.holds_alone():
            if x.alone_forward_s is None:  # its split alone read noise: the trace's split
                t = x.traced_forward_s + x.traced_backward_s
                f = x.alone_s * x.traced_forward_s / t if t > 0 else x.alone_s
            else:
                f = min(x.alone_forward_s, x.alone_s)
            held = (f, x.alone_s - f)
        else:
            held = (x.traced_forward_s, x.traced_backward_s)
        for i, (shown, basis) in enumerate(zip((x.forward_s, x.backward_s), held, strict=True)):
            if basis > 1e-9:
                out[i].append(shown / basis)
    return out


@pytest.mark.every_backend
def test_anatomy_ranks_a_planted_large_dense_first_and_times_it_as_alone(keras, one_torch_thread):
    found, planted = _planted(
        keras, lambda: keras.layers.Dense(2048, activation="relu", name="planted"), "planted"
    )
    # it ranks in the first two: the narrow layer after it, whose backward (its input's
    # gradient, as wide) costs as much alone on JAX's CPU runtime (measured: 1.49 ms against
    # 1.86 ms), may be first; below them, PyTorch's small layers cost their dispatch alike
    assert "planted" in {x.name for x in found.layers[:2]}, found.layers
    assert planted.kind == "Dense"
    assert planted.forward_s > 0 and planted.backward_s > 0
    assert planted.flops and planted.flop_rate()
    # a product's forward and its two gradients; on the data, no gradient of its input
    narrow, little = (next(x for x in found.layers if x.name == n) for n in ("narrow", "little"))
    assert narrow.flops == pytest.approx(3 * 2 * BATCH * 2048 * 16, rel=0.01), narrow
    assert little.flops == pytest.approx(2 * 2 * BATCH * FEATURES * 64, rel=0.01), little
    # the phases add up to the step on the outside clock
    _adds_up(found)
    names = {layer.name for layer in found.layers}
    assert {"little", "planted", "narrow", "head"} <= names, names
    assert found.phase(Phase.FORWARD) > 0 and found.phase(Phase.BACKWARD) > 0
    assert found.phase(Phase.OPTIMIZER) > 0


@pytest.mark.every_backend
def test_anatomy_ranks_a_custom_layer_doing_extra_work_first(keras, one_torch_thread):
    """Its rank is a statistical check kept here on purpose, robust by construction: the
    planted layer's six wide products cost many times each small Dense, and PyTorch runs on
    one thread (``one_torch_thread``), so a second worker's load slows every layer alike."""
    found, busy = _planted(keras, lambda: _busy_layer(keras), "busy")
    # in the first two: a small layer's time alone, taken beside a second pytest worker, has
    # read 8 ms for a 0.3 ms Dense once (benchmarks/anatomy_truth.py ranks on a quiet machine)
    assert "busy" in {x.name for x in found.layers[:2]}, found.layers
    assert busy.flops is None  # not a plain product: not counted, not guessed
    _adds_up(found)


@pytest.mark.every_backend
@pytest.mark.long
def test_anatomy_names_a_slow_optimizer_and_a_busy_metric_in_their_phases(keras, one_torch_thread):
    """Which phase is largest is a statistical check kept here on purpose, robust by
    construction: each planted phase costs many times the rest of the step (the optimizer's
    about 12× the forward on a quiet machine), so a loaded host's hiccup of a few hundred
    milliseconds inside another phase of the 40 traced steps cannot overturn it; PyTorch on
    one thread (``one_torch_thread``: a second worker's load slowed its forward 33× and its
    optimizer 5×, and the forward read largest).

    About 25 s alone, up to 75 s beside the other worker's heaviest tests on 2 cores: two
    anatomies of 40 traced steps each (the long window is what makes the check robust)."""
    import toolkit

    class SlowSGD(keras.optimizers.SGD):
        """An optimizer whose update does extra work on every gradient."""

        def update_step(self, gradient, variable, learning_rate):
            for _ in range(120):
                gradient = keras.ops.tanh(gradient) * 0.5 + gradient * 0.5
            super().update_step(gradient, variable, learning_rate)

    class BusyMetric(keras.metrics.Mean):
        """A metric that does much more work than it reports."""

        def update_state(self, y_true, y_pred, sample_weight=None):
            m = keras.ops.matmul(y_pred, keras.ops.transpose(y_pred))  # batch x batch
            for _ in range(20):
                m = keras.ops.tanh(keras.ops.matmul(m, m))
            return super().update_state(keras.ops.mean(m))

    x, y = _data(2048)
    small = lambda: keras.layers.Dense(32, name="plain")  # noqa: E731
    slow = _compiled(keras, small(), optimizer=SlowSGD(0.01), metrics=())
    found = toolkit.anatomy(slow, (x, y), steps=STEADY, config=TrainConfig(batch_size=BATCH),
                            raw=False, check=False)  # fmt: skip
    computed = {p: found.phase(p) for p in (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER,
                                            Phase.METRICS)}  # fmt: skip
    assert max(computed, key=computed.get) == Phase.OPTIMIZER, _ms(found)

    busy = _compiled(keras, small(), metrics=(BusyMetric(name="busy"),))
    found = toolkit.anatomy(busy, (x, y), steps=STEADY, config=TrainConfig(batch_size=BATCH),
                            raw=False, check=False)  # fmt: skip
    computed = {p: found.phase(p) for p in (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER,
                                            Phase.METRICS)}  # fmt: skip
    assert max(computed, key=computed.get) == Phase.METRICS, _ms(found)


@pytest.mark.every_backend
def test_anatomy_measures_keras_own_cost_against_the_raw_step(keras):
    import toolkit

    x, y = _data(2048)
    model = _compiled(keras, keras.layers.Dense(256, activation="relu", name="mid"))
    found = toolkit.anatomy(model, (x, y), config=TrainConfig(batch_size=BATCH))
    assert found.error is None
    assert found.raw_s and found.raw_s > 0 and found.fit_s and found.fit_s > 0
    assert found.raw_how and found.trainer_cost() is not None
    # the model is left as it was: its own step functions rebuilt without the scopes
    assert "call" not in model.get_layer("mid").__dict__


@pytest.mark.every_backend
def test_anatomy_handles_a_layer_called_twice_and_a_nested_model(keras):
    import toolkit

    inner_in = keras.Input((FEATURES,))
    inner = keras.Model(inner_in, keras.layers.Dense(FEATURES, name="deep")(inner_in),
                        name="block")  # fmt: skip
    shared = keras.layers.Dense(FEATURES, activation="tanh", name="shared")
    inputs = keras.Input((FEATURES,))
    h = shared(shared(inner(inputs)))
    model = keras.Model(inputs, keras.layers.Dense(10, name="head")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = _data(2048)
    found = toolkit.anatomy(model, (x, y), config=TrainConfig(batch_size=BATCH), raw=False)
    by_name = {layer.name: layer for layer in found.layers}
    assert by_name["shared"].calls == 2, by_name
    assert "block/deep" in by_name, by_name  # a nested model's layer: outer/inner
    # twice the same product, each with its input's gradient; the nested model's layer is on
    # the data, whose gradient the step never takes: a forward and its weights' gradient
    assert by_name["shared"].flops == 3 * by_name["block/deep"].flops
    # timed alone too, both calls (the nested model itself holds layers: their rows are timed)
    assert by_name["shared"].alone_s and by_name["block/deep"].alone_s, by_name
    # a nested model is timed with the layers it holds, checked against its row and theirs
    assert by_name.get("block") is None or by_name["block"].alone_with_held, by_name


@pytest.mark.every_backend
@pytest.mark.legacy_keras
def test_anatomy_of_an_eager_step_is_measured_or_refused_in_one_line(keras):
    """run_eagerly: on TensorFlow and JAX an eager op keeps no scope, so the anatomy refuses
    in one line saying so (the fit stopped after its first step) rather than booking the
    whole step as Keras's work; on PyTorch, whose step is op by op anyway, it is measured."""
    import toolkit

    model = _compiled(keras, keras.layers.Dense(256, activation="relu", name="mid"))
    model.compile(model.optimizer, model.loss, run_eagerly=True)
    x, y = _data(2048)
    found = toolkit.anatomy(model, (x, y), config=TrainConfig(batch_size=BATCH), raw=False,
                            check=False)  # fmt: skip
    refused = backend.get().anatomy_refusal(model)
    if backend.name() == "torch":
        assert refused is None and found.error is None, found.error
        assert {layer.name for layer in found.layers} >= {"mid", "head"}
        _adds_up(found)
    else:
        assert found.error == refused and "\n" not in refused, found.error
        assert "run_eagerly=True" in refused and not found.layers


def test_anatomy_window_refused_in_your_own_fit_lets_it_train_on(keras, tmp_path):
    """An AnatomyWindow in your own fit (``profile(trace_steps=...)`` puts one there) whose
    model the backend cannot take apart: the anatomy says why, and the fit trains every step
    it was asked for (a refusal once ended it after its first); ``toolkit.anatomy``'s own fit
    (``stop_if_refused``) is the one that stops."""
    from toolkit.profiling.anatomy import AnatomyWindow

    model = _compiled(keras, keras.layers.Dense(8, name="mid"))
    model.compile(model.optimizer, model.loss, run_eagerly=True)
    refused = backend.get().anatomy_refusal(model)
    assert refused is not None  # eager: no scopes on TensorFlow (this pass's backend)
    x, y = _data(12 * 32)
    window = AnatomyWindow(str(tmp_path), start_step=3, stop_step=5)
    history = model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[window])
    assert len(history.history["loss"]) == 2 and model.optimizer.iterations.numpy() == 24
    assert window.anatomy().error == refused


@pytest.mark.every_backend
def test_anatomy_books_the_wait_for_a_slow_batch_as_input(keras):
    """A PyDataset that sleeps 100 ms a batch in front of a step of a few milliseconds: the
    step waits most of its time for its batch, and the anatomy books that wait as input, on
    every backend (on TensorFlow the generator runs in tf.data's ops beside the step:
    theirs is not the step's compute). Asserted as the wait it books, at least half the
    sleep (what is left of it after a step a loaded host slowed by up to 50 ms), not as the
    largest phase: a loaded CI host once stalled keras-nightly's PyTorch backward past
    100 ms in this tiny step, and another phase's stall says nothing of where the wait went."""
    import time

    import toolkit

    x, y = _data(64 * 40)

    class Slow(keras.utils.PyDataset):
        def __len__(self):
            return 40

        def __getitem__(self, i):
            time.sleep(0.1)
            return x[i * 64 : (i + 1) * 64], y[i * 64 : (i + 1) * 64]

    model = _compiled(keras, keras.layers.Dense(64, activation="relu", name="mid"))
    found = toolkit.anatomy(model, Slow(), steps=4, config=TrainConfig(batch_size=64),
                            raw=False, check=False)  # fmt: skip
    assert found.error is None, found.error
    _adds_up(found)
    assert found.phase(Phase.INPUT) >= 0.05, found.phases


@pytest.mark.every_backend
def test_anatomy_counts_every_step_of_a_call_with_steps_per_execution(keras):
    import toolkit
    from toolkit.core import compat

    if compat.keras_flavor() != "keras3" or backend.name() == "torch":
        pytest.skip("Keras 3's steps_per_execution (PyTorch's is 1 in Keras 3.15)")
    x, y = _data(4096)
    model = _compiled(keras, keras.layers.Dense(512, activation="relu", name="mid"))
    model.compile(model.optimizer, model.loss, steps_per_execution=4)
    found = toolkit.anatomy(model, (x, y), steps=8, config=TrainConfig(batch_size=BATCH),
                            raw=False, check=False)  # fmt: skip
    assert found.error is None and found.steps >= 8 and found.steps % 4 == 0  # whole calls
    _adds_up(found)
    # its layers seen in the calls of four steps (which ranks first is the checked tests')
    assert {"mid", "narrow", "head"} <= {x.name for x in found.layers}, found.layers


@pytest.mark.every_backend
def test_anatomy_takes_a_subclassed_model_with_its_own_train_step_as_far_as_it_exposes(keras):
    """Two optimizers and a train_step of its own (a GAN's shape): its layers and both
    optimizers are seen; the raw step is not written for it, and the anatomy says why."""
    import toolkit

    class TwoHeads(keras.Model):
        def __init__(self):
            super().__init__()
            self.body = keras.layers.Dense(256, activation="relu", name="body")
            self.head = keras.layers.Dense(10, name="head")

        def call(self, x):
            return self.head(self.body(x))

        def compile(self, first, second):
            super().compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            self.first, self.second = first, second

        def train_step(self, *args, **kwargs):
            return super().train_step(*args, **kwargs)

    model = TwoHeads()
    model.compile(keras.optimizers.Adam(), keras.optimizers.SGD())
    model.optimizer = model.first
    x, y = _data(2048)
    model(x[:1])
    found = toolkit.anatomy(model, (x, y), config=TrainConfig(batch_size=BATCH))
    assert found.error is None, found.error
    assert {layer.name for layer in found.layers} >= {"body", "head"}
    assert found.raw_s is None and any("own train_step" in n for n in found.notes), found.notes


@pytest.mark.every_backend
def test_anatomy_of_a_second_model_in_one_process_reads_its_own_program(keras):
    """A process that compiled another model's train step first (JAX keeps every program of
    one name in the trace's metadata): the second model's ops are joined to its own."""
    import toolkit

    x, y = _data(2048)
    deep = keras.Sequential(
        [keras.Input((FEATURES,)), *(keras.layers.Dense(96, activation="relu") for _ in range(5)),
         keras.layers.Dense(10)]
    )  # fmt: skip
    deep.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    deep.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    model = _compiled(keras, keras.layers.Dense(2048, activation="relu", name="planted"))
    found = toolkit.anatomy(model, (x, y), config=TrainConfig(batch_size=BATCH), raw=False,
                            check=False)  # fmt: skip
    # its own layers, none of the first model's (the ranking is the checked tests' above)
    assert {layer.name for layer in found.layers} == {"little", "planted", "narrow", "head"}
    assert found.layers[0].forward_s > 0 and found.layers[0].backward_s > 0


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_a_trace_that_cannot_start_is_said_in_one_line_and_the_fit_goes_on(tmp_path, keras):
    from toolkit.profiling.anatomy import AnatomyWindow

    x, y = _data(1024)
    model = _compiled(keras, keras.layers.Dense(32, name="plain"))
    seam = backend.get()
    seam.start_trace(str(tmp_path / "theirs"), 1, 0, 0)  # another profiler already running
    try:
        window = AnatomyWindow(tmp_path / "ours", start_step=2, stop_step=4)
        history = model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[window])
    finally:
        seam.stop_trace()
    assert len(history.history["loss"]) == 1  # trained to the end
    found = window.anatomy()
    assert found.error and "\n" not in found.error and not found.layers
    assert "call" not in model.get_layer("plain").__dict__  # the scopes came off


# ---------------------------------------------------------------------------- the sweep


def _span(start, end, lane="t", kind=SpanKind.OP, tokens=(), backward=False, fused=False):
    return Span(start, end, lane, kind, tokens, backward, fused, "op")


def test_sweep_shares_an_instant_between_lanes_and_adds_up_to_the_window():
    spans = [
        _span(0, 10, "a", tokens=("kpmodel", "kpl0")),
        _span(5, 15, "b", tokens=("kpmodel", "kpl1"), backward=True),
        _span(15, 20, "a", kind=SpanKind.INPUT),
        _span(20, 30, "p", kind=SpanKind.CALL, tokens=("kpstep",)),
        _span(30, 40, "p", kind=SpanKind.CALL, tokens=("kpstep", "kpmetrics")),
        _span(40, 45, "a", tokens=("kpopt",)),
        _span(50, 55, "a", tokens=("kpstep", "kploss")),  # a phase's token, not a layer's
    ]
    spent = sweep(spans, 0, 55)
    assert sum(spent.values()) == pytest.approx(55)
    assert spent[(Phase.FORWARD, "kpl0", False)] == pytest.approx(5 + 2.5)
    assert spent[(Phase.BACKWARD, "kpl1", False)] == pytest.approx(2.5 + 5)
    assert spent[(Phase.INPUT, None, False)] == pytest.approx(5)
    # inside the step call with no op running: other, kept apart to explain it
    assert spent[(Phase.OTHER, BETWEEN_OPS, False)] == pytest.approx(10)
    # host work in the metrics' scope, and the loss's op (a softmax over 2,000 classes)
    assert spent[(Phase.METRICS, None, False)] == pytest.approx(10 + 5)
    assert spent[(Phase.OPTIMIZER, None, False)] == pytest.approx(5)
    assert spent[(Phase.HOST, None, False)] == pytest.approx(5)  # nothing at all: Keras's


def test_sweep_splits_a_fused_op_between_the_layers_it_holds():
    spans = [
        _span(0, 10, "a", tokens=("kpl0",), fused=True),
        _span(0, 10, "a", tokens=("kpl1",), fused=True),
    ]
    spent = sweep(spans, 0, 10)
    assert spent == {(Phase.FORWARD, "kpl0", True): 5.0, (Phase.FORWARD, "kpl1", True): 5.0}


def test_scopes_count_a_layer_once_where_a_step_of_its_own_calls_it_outside_the_model(keras):
    """keras.io's VAE: the model's call runs its layers, and its own compute_loss runs them
    again, where the compiled step prunes the call whose output goes unused. Per step such a
    layer runs once, not twice; a layer shared inside the model's call still runs twice."""
    shared = keras.layers.Dense(4, name="shared")
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2, name="head")(shared(shared(inputs))))
    x = np.ones((2, 4), "float32")
    with Scopes(model) as scopes:
        model(x)  # the default train_step's self(x)
        model.get_layer("head")(x[:, :4])  # compute_loss's own call of a layer
        by = {e.name: t for t, e in scopes.entries.items()}
        assert scopes.calls_per_step(by["head"]) == 1
        assert scopes.calls_per_step(by["shared"]) == 2
        model.get_layer("head")(x)
        model.get_layer("head")(x)  # called outside more often than inside: that many
        assert scopes.calls_per_step(by["head"]) == 3


def test_scopes_count_a_layer_by_the_step_s_traces_where_the_step_never_calls_the_model(keras):
    """keras.io's GAN: its own train_step calls the generator twice and the discriminator
    twice, never the GAN itself. Each counted once, their rows were set against one call
    timed alone, and the rest went to "other" (46 % of the step)."""

    class GAN(keras.Model):
        def __init__(self):
            super().__init__()
            self.generator = keras.Sequential(
                [keras.Input((4,)), keras.layers.Dense(4)], name="generator"
            )
            self.discriminator = keras.Sequential(
                [keras.Input((4,)), keras.layers.Dense(1)], name="discriminator"
            )

        def train_step(self, data):
            fake = self.generator(data)  # the discriminator's step
            self.discriminator(keras.ops.concatenate([fake, data]))
            return {"loss": self.discriminator(self.generator(data))}  # the generator's

    model = GAN()
    x = np.ones((2, 4), "float32")
    with Scopes(model) as scopes:
        model.train_step(x)
        model.train_step(x)  # traced twice: counted per trace
        by = {e.name: t for t, e in scopes.entries.items()}
        dense = [n for n in by if n.startswith(("generator/", "discriminator/"))]
        assert dense and all(scopes.calls_per_step(by[n]) == 2 for n in dense), dense
        assert scopes.model_calls == 0 and scopes.step_calls == 2


def _traced_fit(model, tmp_path):
    """`model`'s anatomy from a real fit of two epochs (steps 2-5 traced), and its layers by
    name."""
    from toolkit.profiling.anatomy import AnatomyWindow

    x, y = _data(1024)
    window = AnatomyWindow(tmp_path / "trace", start_step=2, stop_step=5)
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[window])
    found = window.anatomy()
    assert found.error is None, found.error
    return found, {layer.name: layer for layer in found.layers}


def test_assemble_counts_the_backward_only_of_the_calls_a_gradient_went_through(tmp_path):
    """keras.io's GAN on TensorFlow: its step calls the generator twice and takes a gradient
    through one call. Each call's ops carry the generator's scope made unique
    (``generator_1``), and a gradient's ops are named after the ops they differentiate: the
    generator's layer is two calls with one backward; the discriminator's, its forward's and
    backward's alike, every call; a plain model's layers too (``backward_calls`` None)."""
    import keras
    import tensorflow as tf

    class GAN(keras.Model):
        def __init__(self):
            super().__init__()
            self.generator = keras.Sequential(
                [keras.Input((FEATURES,)), keras.layers.Dense(FEATURES, name="g")],
                name="generator",
            )
            self.discriminator = keras.Sequential(
                [keras.Input((FEATURES,)), keras.layers.Dense(1, name="d")], name="discriminator"
            )
            self.opt = keras.optimizers.SGD()

        def train_step(self, data):
            x, _ = data
            fake = self.generator(x)  # no gradient through this call
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(self.discriminator(self.generator(x) + fake))
            weights = self.generator.trainable_weights + self.discriminator.trainable_weights
            self.opt.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
            return {"loss": loss}

    model = GAN()
    model.compile()
    _, by = _traced_fit(model, tmp_path)
    assert by["generator/g"].calls == 2 and by["generator/g"].backward_calls == 1, by
    assert by["discriminator/d"].backward_calls is None, by
    plain, _ = _traced_fit(_compiled(keras, keras.layers.Dense(32, name="plain")), tmp_path / "p")
    assert all(layer.backward_calls is None for layer in plain.layers)


@pytest.mark.every_backend
def test_assemble_books_a_frozen_teacher_called_in_the_loss_as_its_layers_forward(tmp_path):
    """keras.io's Distiller calls its frozen teacher inside its own ``compute_loss``: the
    teacher's ops run under Keras's loss scope and under its layers' own scopes. They are
    the teacher's forward (its layers' rows), not "metrics and loss", and no gradient goes
    through them (``backward_calls`` 0: their alone figure holds no backward); the student's
    layers take one every call."""
    import keras

    from toolkit.core._anatomy import Phase

    def net(name, width):
        return keras.Sequential(
            [keras.Input((FEATURES,)), keras.layers.Dense(width, name="hidden"),
             keras.layers.Dense(10, name="out")], name=name,
        )  # fmt: skip

    class Distiller(keras.Model):
        def __init__(self, student, teacher):
            super().__init__()
            self.student, self.teacher = student, teacher

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, **kwargs):
            soft = keras.ops.softmax(self.teacher(x, training=False))
            return keras.ops.mean(keras.losses.kl_divergence(soft, keras.ops.softmax(y_pred)))

        def call(self, x):
            return self.student(x)

    teacher = net("teacher", 512)
    teacher.trainable = False
    model = Distiller(net("student", 16), teacher)
    model.compile(optimizer="sgd")
    found, by = _traced_fit(model, tmp_path)
    big = by["teacher/hidden"]  # 64 x 512: the step's largest matmul
    assert big.forward_s > 0 and big.backward_s == 0 and big.backward_calls == 0, by
    assert by["student/hidden"].backward_calls is None and by["student/hidden"].backward_s > 0
    # a row of its own: booked to its layer's forward, not to the loss it was called in (the
    # loss's own ops and the host's Python in it are "metrics and loss", on PyTorch much of it)
    assert found.phase(Phase.FORWARD) >= big.forward_s


@pytest.mark.every_backend  # PyTorch's recurrent layer is one fused op: its cell is never called
def test_scopes_count_a_recurrent_cell_once_a_time_step(keras):
    """A recurrent layer's cell runs once a time step, in a compiled loop Python traces once
    or twice (an LSTM's cell read x2 with 10 and 100 time steps); a sequence of any length
    keeps the Python count, and the recurrent layer itself its own. A call of the cell is
    one time step's FLOPs: its input's and its carried state's products with every gate's
    kernel (an LSTM's rows had no FLOP/s)."""
    model = keras.Sequential([keras.Input((10, 4)), keras.layers.LSTM(8, name="lstm"),
                              keras.layers.Dense(1, name="head")])  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((4, 10, 4), "float32"), np.ones((4, 1), "float32")
    with Scopes(model) as scopes:
        model.train_on_batch(x, y)
        by = {e.name: t for t, e in scopes.entries.items()}
        assert scopes.calls_per_step(by["lstm/lstm_cell"]) == 10
        assert scopes.calls_per_step(by["lstm"]) == scopes.calls_per_step(by["head"]) == 1
        step = 2.0 * 4 * (4 * 32 + 8 * 32)
        cell, lstm = scopes.entries[by["lstm/lstm_cell"]], scopes.entries[by["lstm"]]
        if cell.calls:  # a loop of time steps: the cell's row holds the count
            assert cell.flops == step and scopes.cell_called(lstm)
        else:  # one fused op (PyTorch's): the recurrent layer's row
            assert lstm.flops == 10 * step and not scopes.cell_called(lstm)
    if keras.backend.backend() == "tensorflow":  # windows whose time dimension the traced
        # graph leaves open (None, None, 4): the model's Input((10, 4)) says it (keras.io's
        # weather LSTM read its cell x2 a step and its FLOP/s 60x too low)
        series = np.ones((40, 4), "float32")
        windows = keras.utils.timeseries_dataset_from_array(
            series, series[:, :1], sequence_length=10, batch_size=4
        )
        with Scopes(model, batch=4) as scopes:
            model.fit(windows, epochs=1, steps_per_epoch=2, verbose=0)
            by = {e.name: t for t, e in scopes.entries.items()}
            assert scopes.entries[by["lstm"]].inputs[0][0] == (None, None, 4)
            assert scopes.calls_per_step(by["lstm/lstm_cell"]) == 10
            assert scopes.entries[by["lstm/lstm_cell"]].flops == step
    ragged = keras.Sequential([keras.Input((None, 4)), keras.layers.GRU(8, name="gru")])
    with Scopes(ragged) as scopes:
        ragged(x[:2, :5])
        by = {e.name: t for t, e in scopes.entries.items()}
        assert scopes.calls_per_step(by["gru/gru_cell"]) >= 1  # not known: as Python called it
        cell, gru = scopes.entries[by["gru/gru_cell"]], scopes.entries[by["gru"]]
        assert (cell.flops if cell.calls else gru.flops) == 2.0 * 2 * (4 * 24 + 8 * 24) * (
            1 if cell.calls else 5
        )


def test_assemble_says_what_it_cannot_see_and_never_guesses(keras):
    model = _compiled(keras, keras.layers.Dense(8, name="plain"))
    scopes = Scopes(model)
    scopes.entries = {}
    trace = StepTrace(
        spans=(_span(0, 1000, tokens=("kpmodel",)),), markers=((0.0, 500.0), (500.0, 1000.0))
    )
    found = assemble(trace, scopes, steps=2, outside_s=0.001, backend_name="x")
    assert (
        found.phase(Phase.INPUT) == 0
        and "no input event" in dict((p.phase, p.unseen) for p in found.phases)[Phase.INPUT]
    )
    # no loss or metric scope (a keras.io VAE's own train_step): "not seen", never a 0.0 %
    unseen = dict((p.phase, p.unseen) for p in found.phases)
    assert "no op under Keras's loss or metric scopes" in unseen[Phase.METRICS], unseen
    assert found.traced_s == pytest.approx(0.0005) and found.agrees()
    assert assemble(StepTrace(error="no trace"), scopes, steps=2, outside_s=1.0).error == (
        "no trace"
    )
    assert "no step marker" in assemble(StepTrace(spans=trace.spans), scopes, steps=2,
                                        outside_s=1.0).error  # fmt: skip


@pytest.mark.legacy_keras
def test_anatomy_window_under_either_keras_names_the_layers_and_says_its_limits(tmp_path, keras):
    from toolkit.core import compat
    from toolkit.profiling.anatomy import AnatomyWindow

    x, y = _data(2048)
    model = _compiled(keras, keras.layers.Dense(1024, activation="relu", name="planted"))
    window = AnatomyWindow(tmp_path / "trace", start_step=4, stop_step=8)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[window])
    found = window.anatomy()
    assert found.error is None, found.error
    # every layer named (the trace's own ranking is checked against each layer timed alone
    # by toolkit.anatomy, in the planted-layer tests above)
    assert {x.name for x in found.layers} == {"little", "planted", "narrow", "head"}
    assert found.phase(Phase.BACKWARD) > 0 and found.phase(Phase.OPTIMIZER) > 0
    if compat.keras_flavor() != "keras3":
        assert found.backend == "tf_keras"
        assert any("tf_keras marks its steps itself" in n for n in found.notes)


@pytest.mark.every_backend
def test_raw_step_runs_its_steps_a_call_as_fit_runs_steps_per_execution(keras):
    """The raw step is a floor only if it does fit's work: `per_call` steps each call, each
    one optimizer update (TensorFlow and PyTorch update the model's optimizer in place). On
    JAX it updates copies: the model's own weights and optimizer are left as they were."""
    from toolkit import backend

    x, y = _data(BATCH)
    model = _compiled(keras, keras.layers.Dense(16, name="mid"))
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)

    def iterations():
        return int(keras.ops.convert_to_numpy(model.optimizer.iterations))

    before, weights = iterations(), [keras.ops.convert_to_numpy(w) for w in model.weights]
    timed, how = backend.get().raw_step(model, (x, y), per_call=3)
    assert timed(2) > 0 and how
    if keras.backend.backend() == "jax":
        assert iterations() == before
        after = [keras.ops.convert_to_numpy(w) for w in model.weights]
        assert all(np.array_equal(a, b) for a, b in zip(weights, after, strict=True))
    else:
        assert iterations() - before == 6  # 2 calls of 3 steps


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_plain_loss_sums_a_loss_per_output_as_keras_does(keras):
    """keras.io's miniature GPT compiles ``loss=[loss_fn, None]`` with one label for its two
    outputs: the raw step's loss is the one Keras computes, as are a dict of weighted losses
    and one loss over two outputs; a model without a loss is said in the user's words (tf_keras
    too, whose model holds ``[]`` for none)."""
    from toolkit.backend._common import plain_loss
    from toolkit.core import compat

    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = rng.normal(size=(16, 2)).astype("float32")
    inputs = keras.Input((4,))
    outputs = [keras.layers.Dense(2, name="a")(inputs), keras.layers.Dense(2, name="b")(inputs)]
    cases = [
        ({"loss": ["mse", None]}, y),
        ({"loss": {"a": "mse", "b": "mae"}, "loss_weights": {"a": 0.3, "b": 2.0}}, (y, 2 * y)),
        ({"loss": "mse"}, [y, -y]),
    ]
    for compiled, labels in cases if compat.keras_flavor() == "keras3" else ():  # its raw step's
        model = keras.Model(inputs, outputs)
        model.compile("sgd", **compiled)
        keras_loss = model.evaluate(x, labels, batch_size=16, verbose=0, return_dict=True)["loss"]
        ours = plain_loss(model)(labels, model(x))
        assert float(keras.ops.convert_to_numpy(ours)) == pytest.approx(keras_loss, rel=1e-5)
    bare = keras.Model(inputs, outputs[0])
    bare.compile("sgd")
    with pytest.raises(ValueError, match="compiles none$"):
        plain_loss(bare)


@pytest.mark.every_backend
def test_an_embedding_s_sparse_gradient_is_not_read_as_a_frozen_layer(tmp_path, keras):
    """keras.io's RecommenderNet: on TensorFlow an Embedding's gradient is sparse, gathered
    rows the optimizer scatters, so no gradient op carries the layer's scope. A layer with
    weights to train took a gradient all the same: not ``×1/0``, as a frozen layer reads."""
    from toolkit.profiling.anatomy import AnatomyWindow

    ids = keras.Input((2,), dtype="int32")
    vectors = keras.layers.Flatten()(keras.layers.Embedding(500, 32, name="table")(ids))
    model = keras.Model(ids, keras.layers.Dense(1, name="head")(vectors))
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).integers(0, 500, (1024, 2)).astype("int32")
    window = AnatomyWindow(tmp_path / "trace", start_step=2, stop_step=5)
    model.fit(x, np.ones((1024, 1), "float32"), batch_size=64, epochs=1, verbose=0,
              callbacks=[window])  # fmt: skip
    found = window.anatomy()
    assert found.error is None, found.error
    by = {layer.name: layer for layer in found.layers}
    assert by["table"].backward_calls is None and by["head"].backward_calls is None, by


def test_forward_flops_reads_an_open_batch_dimension_as_fit_s_batch(keras):
    """A dense or convolutional product's FLOPs from its call's shapes; the batch dimension a
    traced graph leaves open (keras.io's ``.batch(32)`` without ``drop_remainder``) is fit's
    batch, where known: every row had no FLOP/s. Any other open dimension: no count."""
    import types

    from toolkit.profiling.anatomy import _forward_flops

    dense = keras.layers.Dense(16)
    dense.build((None, 8))
    open_batch = types.SimpleNamespace(shape=(None, 16))
    assert _forward_flops(dense, None, open_batch) is None  # no batch known
    assert _forward_flops(dense, None, open_batch, batch=32) == 2.0 * 32 * 8 * 16
    assert _forward_flops(dense, None, types.SimpleNamespace(shape=(4, 16))) == 2.0 * 4 * 8 * 16
    open_time = types.SimpleNamespace(shape=(32, None, 16))
    assert _forward_flops(dense, None, open_time, batch=32) is None
    # a transposed convolution spreads each input element over a window of every filter
    up = keras.layers.Conv2DTranspose(8, 3, strides=2, padding="same")
    up.build((None, 7, 7, 16))
    seen, made = (types.SimpleNamespace(shape=s) for s in ((None, 7, 7, 16), (None, 14, 14, 8)))
    assert _forward_flops(up, seen, made, batch=4) == 2.0 * 4 * 7 * 7 * 3 * 3 * 16 * 8
    # attention's projections: each output element sums over the kernel's axes it lacks
    query = keras.layers.EinsumDense("abc,cde->abde", output_shape=(None, 2, 8))
    query.build((None, 5, 16))
    heads = types.SimpleNamespace(shape=(None, 5, 2, 8))
    assert _forward_flops(query, None, heads, batch=3) == 2.0 * 3 * 5 * 2 * 8 * 16
    merge = keras.layers.EinsumDense("abcd,cde->abe", output_shape=(None, 16))
    merge.build((None, 5, 2, 8))
    merged = types.SimpleNamespace(shape=(3, 5, 16))
    assert _forward_flops(merge, None, merged) == 2.0 * 3 * 5 * 16 * (2 * 8)
    # a depthwise convolution: one window of one input channel an output channel; a
    # separable one adds its pointwise product over the output's positions
    depthwise = keras.layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same")
    depthwise.build((None, 8, 8, 5))
    out = types.SimpleNamespace(shape=(None, 8, 8, 10))
    assert _forward_flops(depthwise, None, out, batch=2) == 2.0 * 2 * 8 * 8 * (3 * 3 * 5 * 2)
    separable = keras.layers.SeparableConv2D(7, 3, strides=2, padding="same")
    separable.build((None, 8, 8, 5))
    out = types.SimpleNamespace(shape=(2, 4, 4, 7))
    assert _forward_flops(separable, None, out) == 2.0 * 2 * 4 * 4 * (3 * 3 * 5 + 5 * 7)


def test_unscoped_ops_are_said_by_how_the_step_ran_and_left_in_their_phase():
    """Most of the ops' time without a layer's scope: in a compiled program, its ops kept
    none (keras.io's denoising autoencoder on JAX: 65 %, its gradient's, was said as "op by
    op" beside "XLA's ops joined to the compiled program's named scopes"); uncompiled, the
    step ran op by op. Neither says that time is other: it stays in its phase."""
    from toolkit.profiling.anatomy import _unscoped

    spans = [
        Span(0.0, 65.0, "l", SpanKind.OP, backward=True),  # a gradient's, no scope
        Span(65.0, 100.0, "l", SpanKind.OP, tokens=("kpstep", "kpl1")),
    ]
    trace = StepTrace(spans=tuple(spans))
    (compiled,) = _unscoped(trace, compiled=True)
    assert compiled.startswith("65% of the ops' time carries no layer's scope: the compiled")
    assert "op by op" not in compiled and "no layer's row holds it" in compiled
    (eager,) = _unscoped(trace, compiled=False)
    assert "the step ran op by op" in eager and "that time is other" not in eager
    scoped = StepTrace(spans=(Span(0.0, 100.0, "l", SpanKind.OP, tokens=("kpl1",)),))
    assert _unscoped(scoped, compiled=True) == []
