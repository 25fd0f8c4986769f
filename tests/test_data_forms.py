"""Every form of labels and weights ``fit`` takes, in every tool (issue 68, item 8).

The Keras functional API guide's multi-output model (labels as a dict by output name, two
losses with ``loss_weights``) trained in Keras and was refused by ``diagnose`` and ``tune``
with ``labels: got 2 labels for 1280 examples``: the labels' dict was counted by ``len()``.
Here one tiny model per form (``tests/data_forms_models.py``: dict labels, list labels,
sample weights per example and per output, ``class_weight``) goes through the real code
paths: ``StepTimer`` in ``model.fit``, ``diagnose``, ``tune(model, data)``, ``tune(build)``
and a fresh process's fit. The weighted forms weigh every example 0, so the loss of every
fit a tool runs says whether the weights reached it (0) or were dropped on the way (not 0).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from tests import data_forms_models as m
from toolkit.runner.config import TrainConfig
from toolkit.runner.train import SetupError
from toolkit.search import workload as wl
from toolkit.search.engine import Space

# form -> (its builder, the class_weight fit takes beside its data, whether it is weighed 0)
FORMS = {
    "dict labels": (m.build_dict_labels, None, False),
    "list labels": (m.build_list_labels, None, False),
    "sample_weight": (m.build_sample_weight, None, True),
    "per-output sample_weight": (m.build_output_sample_weights, None, True),
    "class_weight": (m.build_class_weight, m.ZERO_CLASS_WEIGHT, True),
}
TUNED = ["dict labels", "list labels", "class_weight"]  # the multi-output ones and one weighed
BATCH = 32
DEFAULTS_ONLY = Space(jit_compile=(False,), steps_per_execution=(1,), fused_steps=(1,))
TWO = Space(jit_compile=(False,), steps_per_execution=(1, 4), fused_steps=(1,))


@pytest.fixture
def fit_losses(monkeypatch):
    """The training loss of every fit the workloads run (the one place they all fit)."""
    losses = []
    real = wl.measured_fit

    def measured(*args, **kwargs):
        report = real(*args, **kwargs)
        losses.append((report.metrics or {}).get("loss"))
        return report

    monkeypatch.setattr(wl, "measured_fit", measured)
    return losses


def _check_losses(losses, zeroed):
    """Every fit saw the weights: a loss of 0 where each example weighs 0, else not 0."""
    found = [loss for loss in losses if loss is not None]
    assert found, losses
    if zeroed:
        assert all(loss == 0.0 for loss in found), found
    else:
        assert all(np.isfinite(loss) and loss > 0 for loss in found), found


def _fit_args(data, class_weight):
    """``fit``'s arguments for a form's data: ``(x, y[, sample_weight])`` and class_weight."""
    x, y, *weights = data
    kwargs = {"sample_weight": weights[0]} if weights else {}
    if class_weight is not None:
        kwargs["class_weight"] = class_weight
    return (x, y), kwargs


# ---------------------------------------------------------------------------- the units


def test_array_examples_counts_a_nest_by_its_first_leaf_and_names_what_disagrees():
    from toolkit.data.sources import array_examples

    x, y = m.ticket_data()
    assert array_examples(x, y) == m.EXAMPLES  # not len(y): 2 outputs
    assert array_examples(x, [y["priority"], y["department"]]) == m.EXAMPLES
    short = {**y, "department": y["department"][:5]}
    with pytest.raises(ValueError, match=r"^labels: arrays of different lengths \(5 and 320\)"):
        array_examples(x, short)
    with pytest.raises(ValueError, match=r"^labels: got 5 labels for 320 examples"):
        array_examples(x, {name: v[:5] for name, v in y.items()})
    with pytest.raises(ValueError, match="^features: arrays of different lengths"):
        array_examples({**x, "tags": x["tags"][:7]}, y)


def test_fit_dataset_takes_nested_labels_and_weights_and_refuses_as_fit_does():
    from toolkit.data import _fit_data

    x, y = m.ticket_data()
    weights = {name: np.ones(m.EXAMPLES, "float32") for name in y}
    dataset, said, size = _fit_data.fit_dataset((x, y, weights), BATCH)
    assert size == BATCH and said.endswith("(x, y, sample_weight)")
    assert set(dataset.element_spec[2]) == {"priority", "department"}
    with pytest.raises(ValueError, match="^data: sample_weight: arrays of different lengths"):
        _fit_data.fit_dataset((x, y, {**weights, "priority": weights["priority"][:9]}))
    cx, cy = m.classifier_data()
    weighed, said, _ = _fit_data.fit_dataset((cx, cy), BATCH, {0: 0.0, 1: 2.0, 2: 0.5})
    _, labels, got = next(iter(weighed))
    assert said.endswith("weighed by class_weight")
    np.testing.assert_allclose(got, np.array([0.0, 2.0, 0.5])[labels.numpy()])
    refused = {  # each one line, as fit refuses it
        "for a model with one output": lambda: _fit_data.fit_dataset((x, y), BATCH, {0: 1}),
        "holds sample weights already": lambda: _fit_data.fit_dataset(
            (cx, cy, np.ones(m.EXAMPLES)), BATCH, {0: 1}
        ),
        "a dict of class index": lambda: _fit_data.check_class_weight((cx, cy), {"a": 1}),
        "fit does not weigh classes of a generator": lambda: _fit_data.check_class_weight(
            (b for b in [(cx, cy)]), {0: 1}
        ),
    }
    for words, call in refused.items():
        with pytest.raises(ValueError, match=f"^class_weight: .*{words}") as e:
            call()
        assert "\n" not in str(e.value)


def test_at_batch_reads_labels_one_per_output_at_each_batch_size():
    """``toolkit.fits``'s data at a batch size: a list of labels is one per output, not one
    tensor stacked from them (which tf.data refuses for outputs of different shapes)."""
    from toolkit.search._model_fit import at_batch

    x, y = m.ticket_data()
    _, labels = at_batch((x, [y["priority"], y["department"]]), 16).element_spec
    assert [tuple(s.shape) for s in labels] == [(16, 1), (16, m.DEPARTMENTS)]
    # x alone is handed on as fit hands it (a train_step of its own reads data as x), not as
    # a tuple of one
    alone = at_batch(np.zeros((40, 3), "float32"), 8).element_spec
    assert tuple(alone.shape) == (8, 3)
    assert set(at_batch({"a": np.zeros((40, 3))}, 8).element_spec) == {"a"}


def test_workload_refuses_class_weight_for_several_outputs_in_one_line():
    model, data = m.build_dict_labels()
    with pytest.raises(SetupError, match="^class_weight: fit takes it for a model with one"):
        wl.workload(model, data, TrainConfig(batch_size=BATCH), class_weight={0: 1.0})


# ---------------------------------------------------------------------------- the tools


@pytest.mark.parametrize("form", FORMS)
def test_step_timer_times_fit_on(form):
    import toolkit

    build, class_weight, zeroed = FORMS[form]
    model, data = build()
    args, kwargs = _fit_args(data, class_weight)
    timer = toolkit.StepTimer(warmup_steps=1)
    history = model.fit(*args, **kwargs, batch_size=BATCH, epochs=1, verbose=0, callbacks=[timer])
    summary = timer.summary()
    assert summary.timed_steps > 0 and summary.batch_size == BATCH
    assert (history.history["loss"][-1] == 0.0) == zeroed


@pytest.mark.parametrize("form", FORMS)
def test_diagnose_measures_your_model_on(form, fit_losses):
    import toolkit

    build, class_weight, zeroed = FORMS[form]
    model, data = build()
    found = toolkit.diagnose(
        model, data, config=TrainConfig(batch_size=BATCH), steps=5, class_weight=class_weight
    )
    assert found.verdict and found.batch_size == BATCH and found.fit_rate > 0
    _check_losses(fit_losses, zeroed)


@pytest.mark.parametrize("form", TUNED)
def test_tune_model_and_data_searches_on(form, fit_losses):
    import toolkit

    build, class_weight, zeroed = FORMS[form]
    model, data = build()
    result = toolkit.tune(
        model, data, config=TrainConfig(batch_size=BATCH), space=TWO, budget_s=6, steps=8,
        use_cache=False, progress=lambda line: None, class_weight=class_weight,
    )  # fmt: skip
    assert result.trials and result.best is not None and result.batch_size == BATCH
    _check_losses(fit_losses, zeroed)


@pytest.mark.parametrize("form", TUNED)
def test_tune_build_searches_and_hands_fresh_processes_the_weights(form, fit_losses, monkeypatch):
    """``tune(build)``: `build` called here, and named for the fresh processes, with the
    class weights beside it (only the defaults searched: no pick, no fresh rounds to wait
    for; :func:`test_fresh_process_fit_on` runs one)."""
    import toolkit
    from toolkit.search import tune as tu

    build, class_weight, zeroed = FORMS[form]
    handed = []
    real = tu._tuned

    def tuned(run, work, space, fresh_target, *args):
        handed.append(fresh_target)
        return real(run, work, space, fresh_target, *args)

    monkeypatch.setattr(tu, "_tuned", tuned)
    result = toolkit.tune(
        build, space=DEFAULTS_ONLY, budget_s=6, steps=8, use_cache=False,
        progress=lambda line: None, class_weight=class_weight,
    )  # fmt: skip
    assert result.trials and result.best == result.trials[0].candidate
    assert handed[0].model_fn == f"tests.data_forms_models:{build.__name__}"
    assert handed[0].class_weight == class_weight
    _check_losses(fit_losses, zeroed)


@pytest.mark.parametrize("form", ["dict labels", "class_weight"])
def test_fresh_process_fit_on(form, monkeypatch):
    """A fresh process (``python -m toolkit._child``, as tune's rounds start it) builds the
    model and data from the builder's name and fits them with the class weights the Target
    carries."""
    from toolkit.search._processes import ChildSpec, run_child
    from toolkit.search.standings import Target

    build, class_weight, zeroed = FORMS[form]
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.chdir(root)  # where `tests.data_forms_models` imports from
    target = dataclasses.replace(
        Target.of(build), config={"batch_size": BATCH, "count_flops": False},
        class_weight=class_weight,
    )  # fmt: skip
    spec = ChildSpec("figures", "tensorflow", "cpu", target, steps=8)
    got = run_child(spec, dict(os.environ), 300)
    figures = got.figures()
    assert got.ok and figures is not None, got
    assert figures.timed_steps > 0 and figures.batch_size == BATCH
    assert (figures.loss == 0.0) == zeroed, figures
