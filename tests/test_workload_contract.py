"""One contract, two kinds of target: every ``Workload`` method, run over a recipe's Task and
over your compiled model, as optax runs one test over every optimizer.

tune, diagnose, doctor and the search's fresh processes ask a Workload, never which kind it
is; so what each method promises is checked here, once, for both kinds. A third kind of
target is one more entry in ``KINDS``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from toolkit import backend
from toolkit.runner import train
from toolkit.runner.config import TrainConfig
from toolkit.search import workload as wl
from toolkit.search.engine import Candidate, RunShape, Space

FEATURES, EXAMPLES, BATCH = 7, 192, 16


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(EXAMPLES, FEATURES)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32")


def _model(keras):
    return keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
    )


def _task(keras):
    return train.Task(
        name="contract",
        build_model=lambda: _model(keras),
        train=_data(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        num_classes=2,
    )


def _compiled(keras):
    model = _model(keras)
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


CONFIG = TrainConfig(batch_size=BATCH, epochs=2)
KINDS = {
    "a recipe's task": lambda keras: wl.workload(_task(keras), CONFIG),
    "your model": lambda keras: wl.workload(_compiled(keras), _data(), CONFIG),
}


@pytest.fixture(params=sorted(KINDS))
def work(request, keras):
    made = KINDS[request.param](keras)
    with made:
        yield made


def test_every_kind_implements_the_whole_contract():
    """Workload is an abstract base: each kind answers every abstract method, and a kind
    that leaves one out cannot be made (a method added to the base must be answered by every
    kind, or the kind fails when constructed, naming it)."""
    abstract = wl.Workload.__abstractmethods__
    assert {"defaults", "fit", "figures", "space", "length_known", "fresh_words"} <= abstract
    for kind in (wl.TaskWorkload, wl.ModelWorkload):
        assert not kind.__abstractmethods__, f"{kind.__name__} leaves them to the base"

    class Partial(wl.Workload):
        def defaults(self):
            return None

    with pytest.raises(TypeError, match="abstract method"):
        Partial()


@pytest.mark.every_backend
def test_what_it_is(work):
    assert isinstance(work, wl.Workload)
    assert work.name and isinstance(work.name, str)
    assert isinstance(work.config, TrainConfig) and work.config.batch_size == BATCH
    assert work.batch_size == BATCH and str(BATCH) in work.batch_words()
    assert work.device.kind == "cpu"
    assert isinstance(work.described, str) and work.described
    assert isinstance(work.applies_in_python, bool)


@pytest.mark.every_backend
def test_its_defaults_are_a_candidate_of_one_step_a_call(work):
    defaults = work.defaults()
    assert isinstance(defaults, Candidate)
    assert defaults.per_call == work.per_call == 1
    assert defaults.steps_per_execution == 1
    assert defaults.batch_size is None  # left to the config: not a setting of its own


def test_how_a_pick_is_applied_is_said_in_the_kind_s_own_words(work):
    pick = dataclasses.replace(work.defaults(), steps_per_execution=4)
    words = work.how_to_apply(pick)
    assert "steps_per_execution" in words and "4" in words
    # A recipe's pick is its flags; your model's, its compile arguments (in Python).
    assert words.startswith("model.compile(") == work.applies_in_python


@pytest.mark.every_backend
def test_the_space_it_searches_starts_at_its_defaults(work):
    defaults = work.defaults()
    jit = (defaults.jit_compile, not defaults.jit_compile)  # the backend's own first
    space = work.space(Space(steps_per_execution=(1, 8), jit_compile=jit), defaults)
    assert isinstance(space, Space) and space.defaults() == defaults
    assert len(space.steps_per_execution) == 2  # a compile argument: searched for both kinds


def test_the_run_it_is_for(work):
    shape = work.run_shape()
    assert isinstance(shape, RunShape) and shape.epochs == 2
    steps = work.run_steps(work.defaults())
    # A recipe's run is its config's; yours is as long as the config you gave says.
    assert work.length_known(True) and steps is not None
    assert steps == 2 * (EXAMPLES // BATCH) or steps == 2 * math.ceil(EXAMPLES / BATCH)
    assert isinstance(work.length_known(False), bool)
    assert "fresh" in work.fresh_words()


@pytest.mark.every_backend
def test_a_measured_fit_a_rate_and_the_compile_it_paid(work):
    work.prepare(8)
    report = work.fit(steps=8, warmup=1)
    assert report.steps.timed_steps > 0
    alone = work.fit(steps=8, warmup=1, one_batch=True)
    assert alone.steps.timed_steps > 0
    defaults = work.defaults()
    assert work.compile_s(defaults) is None  # nothing noted yet
    rate = work.rate(defaults, steps=8)
    assert rate > 0 and math.isfinite(rate)
    assert work.compile_s(defaults) is not None  # the first measured run's compile


@pytest.mark.every_backend
def test_its_input_as_fit_reads_it(work):
    pipeline = work.pipeline()
    assert pipeline is not None
    assert isinstance(work.input_words(pipeline), str)
    read = work.input_batches()
    if read is not None:  # where Keras's own adapter can be asked
        words, batches = read
        try:
            assert words and next(batches) is not None
        finally:
            batches.close()


@pytest.mark.every_backend
def test_figures_as_the_backends_chooser_compares_them(work):
    plain = work.figures(8, count_flops=False)
    assert plain["timed_steps"] > 0 and plain["examples_per_sec"] > 0
    # PyTorch on Keras 3.15: one step a call
    loops = 2 if "steps_per_execution" in backend.get().step_loops() else 1
    pick = dataclasses.replace(work.defaults(), steps_per_execution=loops)
    tuned = work.figures(8, count_flops=False, candidate=pick)
    assert tuned["timed_steps"] > 0 and tuned["steps_per_call"] == loops


@pytest.mark.every_backend
def test_its_cache_facts_name_the_model_input_backend_and_device(work):
    facts = work.cache_facts()
    assert set(facts) >= {"model", "params", "input", "batch_size", "backend", "device"}
    assert facts["batch_size"] == BATCH and facts["device"].startswith("cpu")


@pytest.mark.every_backend
@pytest.mark.parametrize("optimizer", ["adam", "adagrad"])
def test_your_model_trains_after_the_measurements_as_it_would_have_without_them(keras, optimizer):
    """keras.io's order, compile, then the toolkit, then ``fit``: the optimizer was not built
    before the measurements, which made its slots and filled them, and a seed generator's
    state moved on. Both are put back (the slots as a fresh build makes them: Adam's zeros,
    Adagrad's initial accumulator), so the next fit is the same, to the bit, as a fit that
    no measurement ran before."""

    def made() -> object:
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((FEATURES,)), keras.layers.Dense(8), keras.layers.GaussianNoise(0.5),
             keras.layers.Dense(2)]
        )  # fmt: skip
        model.compile(
            optimizer=keras.optimizers.Adam(0.01)
            if optimizer == "adam"
            else keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.5),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        return model

    plain, measured = made(), made()
    with wl.ModelWorkload(measured, _data(), TrainConfig(batch_size=BATCH)) as work:
        work.fit(steps=4, warmup=0)
    assert measured.optimizer.built  # the measurements built it: their slots were filled
    x, y = _data()
    for model in (plain, measured):
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(plain.get_weights(), measured.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
