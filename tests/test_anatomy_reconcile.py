"""``toolkit.core._anatomy.reconcile``: the anatomy as the untraced step sees it. Pure records
built by hand: the phases add up to the untraced step, the profiler's cost comes off every
computed part but the input, a layer whose trace is off its time alone shows the alone
figure (the difference moved to or from "other", then "Keras between steps"), and layers
alone that need more than the step are scaled to fit with a note."""

from __future__ import annotations

import dataclasses

import pytest

from toolkit.core._anatomy import Anatomy, LayerTime, Phase, PhaseTime, contrast, reconcile


def _anatomy(layers, *, untraced=0.010, other=0.002, host=0.001, waited=0.001, **kw) -> Anatomy:
    forward = sum(x.forward_s for x in layers) + 0.0005
    backward = sum(x.backward_s for x in layers) + 0.0005
    phases = (
        PhaseTime(Phase.INPUT, waited),
        PhaseTime(Phase.FORWARD, forward),
        PhaseTime(Phase.BACKWARD, backward),
        PhaseTime(Phase.OPTIMIZER, 0.001),
        PhaseTime(Phase.METRICS, 0.0005),
        PhaseTime(Phase.HOST, host),
        PhaseTime(Phase.OTHER, other),
    )
    traced = sum(p.seconds for p in phases)
    return Anatomy("jax", steps=10, step_s=traced, traced_s=traced, untraced_s=untraced,
                   phases=phases, layers=tuple(layers), **kw)  # fmt: skip


def test_reconcile_adds_the_phases_up_to_the_untraced_step_with_the_input_kept():
    a = _anatomy([LayerTime("dense", "Dense", 0.004, 0.008)], untraced=0.012)
    r = reconcile(a)
    assert r.phases_sum() == pytest.approx(0.012)
    assert r.phase(Phase.INPUT) == pytest.approx(0.001)  # a wait is not slowed by tracing
    assert r.traced_phases == a.phases and r.traced_sum() == pytest.approx(a.phases_sum())
    k = (0.012 - 0.001) / (a.phases_sum() - 0.001)
    assert r.phase(Phase.OPTIMIZER) == pytest.approx(0.001 * k)
    dense = r.layers[0]
    assert dense.traced_forward_s == pytest.approx(0.004 * k) and not dense.holds_alone()
    assert reconcile(r) is r  # once


def test_reconcile_adds_up_to_the_traced_step_where_the_untraced_ran_slower_and_says_why():
    """A profiler never makes a step faster: untraced steps far slower than the traced ones
    ran in a slower stretch of the fit, and scaling every phase up to them would misstate
    each; they add up to the traced step, with a note, and no profiler's cost is claimed."""
    from toolkit.report._anatomy import _profiler_line

    a = _anatomy([LayerTime("dense", "Dense", 0.004, 0.008)])
    slower = dataclasses.replace(a, untraced_s=a.step_s * 1.58)
    r = reconcile(slower)
    assert r.phases_sum() == pytest.approx(a.step_s)
    assert r.phase(Phase.OPTIMIZER) == pytest.approx(0.001)  # k = 1: nothing scaled up
    assert any(n.startswith("the untraced steps ran slower than the traced ones") for n in r.notes)
    assert _profiler_line(r) is None
    near = reconcile(dataclasses.replace(a, untraced_s=a.step_s * 1.25))  # a loaded spread: used
    assert near.phases_sum() == pytest.approx(a.step_s * 1.25) and near.notes == a.notes
    assert _profiler_line(near) is not None


def test_reconcile_shows_the_alone_figure_where_the_trace_is_off_and_moves_the_difference():
    slow = LayerTime("conv", "Conv1D", 0.001, 0.001, alone_s=0.006, alone_forward_s=0.002)
    relu = LayerTime("relu", "ReLU", 0.003, 0.0, alone_s=0.0005, alone_forward_s=0.0005)
    ok = LayerTime("head", "Dense", 0.0005, 0.0005, alone_s=0.001)
    a = _anatomy([slow, relu, ok], other=0.004, host=0.002)
    untraced = a.phases_sum()  # no profiler's cost: k = 1
    r = reconcile(dataclasses.replace(a, untraced_s=untraced))
    assert r.phases_sum() == pytest.approx(untraced)
    by = {x.name: x for x in r.layers}
    assert [x.name for x in r.layers] == ["conv", "head", "relu"]  # ranked by what holds
    assert by["conv"].holds_alone() and by["conv"].seconds == pytest.approx(0.006)
    assert by["conv"].forward_s == pytest.approx(0.002)
    assert "less of it" in by["conv"].check
    assert by["relu"].holds_alone() and by["relu"].seconds == pytest.approx(0.0005)
    assert "booked more" in by["relu"].check
    assert not by["head"].holds_alone() and by["head"].against_alone() == pytest.approx(1.0)
    # the layers gained 0.004 - 0.0025 = 0.0015 net: taken from "other"
    assert r.phase(Phase.OTHER) == pytest.approx(0.004 - 0.0015)
    assert r.phase(Phase.FORWARD) >= sum(x.forward_s for x in r.layers)
    assert r.phase(Phase.BACKWARD) >= sum(x.backward_s for x in r.layers)


def test_reconcile_takes_what_other_lacks_from_keras_between_steps_then_scales_with_a_note():
    big = LayerTime("conv", "Conv1D", 0.001, 0.001, alone_s=0.006, alone_forward_s=0.002)
    a = _anatomy([big], other=0.001, host=0.002)
    r = reconcile(dataclasses.replace(a, untraced_s=a.phases_sum()))
    assert r.phase(Phase.OTHER) == 0.0
    # 0.004 gained, 0.001 in other: Keras between steps gives its 0.002, then forward and
    # backward outside the layer their 0.0005 each
    assert r.phase(Phase.HOST) == 0.0
    assert r.phase(Phase.FORWARD) == pytest.approx(0.002)
    assert r.phase(Phase.BACKWARD) == pytest.approx(0.004)
    assert r.phases_sum() == pytest.approx(a.phases_sum())
    assert not any("add up to more than the step" in n for n in r.notes)
    huge = LayerTime("conv", "Conv1D", 0.001, 0.001, alone_s=0.05)
    a = _anatomy([huge], other=0.001, host=0.002)
    r = reconcile(dataclasses.replace(a, untraced_s=a.phases_sum()))
    assert r.phases_sum() == pytest.approx(a.phases_sum())
    assert any("add up to more than the step" in n for n in r.notes)
    assert all(p.seconds >= 0 for p in r.phases)


def test_reconcile_leaves_an_anatomy_without_phases_or_with_an_error_as_it_is():
    assert reconcile(Anatomy("jax", error="no trace")) == Anatomy("jax", error="no trace")
    empty = Anatomy("jax", step_s=0.01)
    assert reconcile(empty) is empty


def test_reconciled_records_round_trip_through_json():
    layer = LayerTime("conv", "Conv1D", 0.001, 0.001, alone_s=0.006, alone_forward_s=0.002)
    r = reconcile(_anatomy([layer]))
    back = Anatomy.from_dict(r.to_dict())
    assert back == r


def test_contrast_of_two_reconciled_anatomies_has_parts_that_add_up_to_the_gap():
    a = reconcile(_anatomy([LayerTime("conv", "Conv1D", 0.002, 0.004)], untraced=0.012))
    b = reconcile(_anatomy([LayerTime("conv", "Conv1D", 0.008, 0.024)], untraced=0.030))
    c = contrast(a, b, "TensorFlow", "JAX", top=20)
    assert c.a_step_s == pytest.approx(0.012) and c.b_step_s == pytest.approx(0.030)
    assert sum(p.gap_s for p in c.parts) == pytest.approx(0.030 - 0.012)


def test_reconcile_checks_a_layer_holding_others_with_them_and_gives_it_the_rest():
    """An attention block timed alone with its projections: its row and theirs together
    against that time; past the band its own row is what is left past theirs as they stand
    (the projection checked and held on its own first), and the step still adds up."""
    mha = LayerTime("mha", "MultiHeadAttention", 0.0005, 0.0005, alone_s=0.006,
                    alone_forward_s=0.002, alone_with_held=True)  # fmt: skip
    query = LayerTime("mha/query", "EinsumDense", 0.0005, 0.0005, alone_s=0.002,
                      alone_forward_s=0.001)  # fmt: skip
    key = LayerTime("mha/key", "EinsumDense", 0.0005, 0.0005)  # not timed: its trace stays
    a = _anatomy([mha, query, key], other=0.006, host=0.002)
    untraced = a.phases_sum()
    r = reconcile(dataclasses.replace(a, untraced_s=untraced))
    assert r.phases_sum() == pytest.approx(untraced)
    by = {x.name: x for x in r.layers}
    assert by["mha/query"].holds_alone() and by["mha/query"].seconds == pytest.approx(0.002)
    held = by["mha"]
    assert held.held_traced_s == pytest.approx(0.002)  # query's and key's traced 1 ms each
    assert held.against_alone() == pytest.approx(0.003 / 0.006) and held.holds_alone()
    assert held.seconds == pytest.approx(0.006 - 0.002 - 0.001)  # less query's and key's
    assert held.forward_s == pytest.approx(held.seconds / 3)  # its forward share alone
    assert "layers it holds" in held.check
    whole = held.seconds + by["mha/query"].seconds + by["mha/key"].seconds
    assert whole == pytest.approx(0.006)
    back = Anatomy.from_dict(r.to_dict())
    assert back == r and [x.name for x in back.layers if x.alone_with_held] == ["mha"]


def test_reconcile_keeps_a_holding_layer_s_trace_where_it_and_its_layers_agree_with_alone():
    mha = LayerTime("mha", "MultiHeadAttention", 0.0005, 0.0005, alone_s=0.0021,
                    alone_with_held=True)  # fmt: skip
    query = LayerTime("mha/query", "EinsumDense", 0.0005, 0.0005, alone_s=0.001)
    a = _anatomy([mha, query])
    r = reconcile(dataclasses.replace(a, untraced_s=a.phases_sum()))
    held = next(x for x in r.layers if x.name == "mha")
    assert not held.holds_alone() and held.seconds == pytest.approx(0.001) and not held.check


def test_reconcile_sets_forward_and_backward_to_the_model_timed_alone():
    """A trace that booked most of the gradients to forward (JAX on a CPU: ops run beside
    each other, fusions hold both): the model timed alone sets the split, the difference
    comes from "other" then "Keras between steps", the step still adds up and a note says
    where the figures came from."""
    conv = LayerTime("conv", "Conv1D", 0.003, 0.0005)
    a = _anatomy([conv], other=0.002, host=0.003, model_alone_s=0.008,
                 model_alone_forward_s=0.002)  # fmt: skip
    untraced = a.phases_sum()
    r = reconcile(dataclasses.replace(a, untraced_s=untraced))
    assert r.phase(Phase.FORWARD) == pytest.approx(0.002)
    assert r.phase(Phase.BACKWARD) == pytest.approx(0.006)
    # the trace saw 0.0035 + 0.001 = 0.0045 of them: 0.0035 more, 0.002 from other first
    assert r.phase(Phase.OTHER) == 0.0
    assert r.phase(Phase.HOST) == pytest.approx(0.003 - 0.0015)
    assert r.phases_sum() == pytest.approx(untraced)
    assert any("model's own, timed alone" in n and "backward 75%" in n for n in r.notes)
    # the layer's rows fit inside the phases measured: its forward (3 ms) past the model's
    # 2 ms, every row's forward scaled by the factor that fits (2/3), its backward (within
    # the model's) kept as it was, and said
    layer = r.layers[0]
    assert layer.forward_s == pytest.approx(0.002)
    assert layer.backward_s == pytest.approx(0.0005)
    assert any("every row's forward is scaled by 0.67" in n for n in r.notes)
    assert any("rows add up to more than the model timed alone (forward 3.000 ms vs 2.000 ms)"
               in n for n in r.notes)  # fmt: skip
    assert Anatomy.from_dict(r.to_dict()) == r


def test_reconcile_takes_the_model_alone_where_the_trace_saw_almost_no_forward():
    """keras.io's RecommenderNet on JAX: XLA fused its Embeddings' gathers into the backward,
    and the trace saw almost no forward under the model's call. Its step is Keras's own (a
    step of yours, as keras.io's VAE's, has no model timed alone: ``check_model``), so the
    model alone is its forward and backward; the note said "a compute_loss or train_step of
    its own", untrue there. Without the model alone, the trace's split stands."""
    emb = LayerTime("embedding", "Embedding", 0.000001, 0.004)
    a = _anatomy([emb], model_alone_s=0.008, model_alone_forward_s=0.004)
    a = dataclasses.replace(
        a,
        phases=tuple(
            PhaseTime(p.phase, 0.000005 if p.phase is Phase.FORWARD else p.seconds)
            for p in a.phases
        ),
    )
    untraced = a.phases_sum()
    r = reconcile(dataclasses.replace(a, untraced_s=untraced))
    assert r.phases_sum() == pytest.approx(untraced)
    assert r.phase(Phase.FORWARD) > 100 * a.phase(Phase.FORWARD)  # the model alone's share
    assert not any("of its own" in n for n in r.notes), r.notes
    assert any(n.startswith("forward and backward are the model's own") for n in r.notes)
    own = reconcile(dataclasses.replace(a, untraced_s=untraced, model_alone_s=None,
                                        model_alone_forward_s=None))  # fmt: skip
    assert own.phase(Phase.FORWARD) == pytest.approx(0.000005)  # the trace's
    assert own.phases_sum() == pytest.approx(untraced)


def test_reconcile_scales_a_model_alone_that_overruns_the_step_keeping_its_split():
    a = _anatomy([LayerTime("dense", "Dense", 0.001, 0.001)], other=0.001, host=0.001,
                 model_alone_s=0.040, model_alone_forward_s=0.010)  # fmt: skip
    untraced = a.phases_sum()
    r = reconcile(dataclasses.replace(a, untraced_s=untraced))
    assert r.phases_sum() == pytest.approx(untraced)
    fwd, bwd = r.phase(Phase.FORWARD), r.phase(Phase.BACKWARD)
    assert bwd / (fwd + bwd) == pytest.approx(0.75)  # scaled, never cut
    assert r.phase(Phase.HOST) == 0.0 and r.phase(Phase.OTHER) == 0.0
    assert any("model timed alone and the step's other parts" in n for n in r.notes)


def test_contrast_on_a_table_s_steps_adds_up_to_its_gap_and_blames_keras_only_where_raw_shows():
    a = reconcile(_anatomy([LayerTime("conv", "Conv1D", 0.002, 0.004)], untraced=0.012))
    b = reconcile(_anatomy([LayerTime("conv", "Conv1D", 0.004, 0.012)], untraced=0.030,
                           host=0.006))  # fmt: skip
    c = contrast(a, b, "TensorFlow", "JAX", top=2, steps=(0.010, 0.040))
    assert (c.a_step_s, c.b_step_s) == (0.010, 0.040)
    assert sum(p.gap_s for p in c.parts) + c.rest.gap_s == pytest.approx(0.030)
    assert [n.split("'s")[0] for n in c.notes] == ["TensorFlow", "JAX"]  # 20 %, 33 % off
    host = {p.what for p in (*c.parts, c.rest)} | {
        p.what for p in contrast(a, b, "T", "J", top=20).parts
    }
    assert "the host between steps (Keras's trainer cost: not measured)" in host
    costly = dataclasses.replace(b, raw_s=0.010, fit_s=0.030)  # the trainer adds 200 %
    named = {p.what for p in contrast(a, costly, "T", "J", top=20).parts}
    assert "Keras between steps" in named
    cheap = dataclasses.replace(b, raw_s=0.030, fit_s=0.030)
    named = {p.what for p in contrast(a, cheap, "T", "J", top=20).parts}
    assert "the host between steps (Keras's trainer cost: none over the raw step)" in named
    assert not contrast(a, b, "T", "J", steps=(0.012, 0.030)).notes  # within 10 %: nothing


def test_reconcile_holds_keras_between_steps_to_what_the_raw_step_shows_keras_costs():
    a = _anatomy([LayerTime("dense", "Dense", 0.001, 0.001)], other=0.001, host=0.004,
                 raw_s=0.0100, fit_s=0.0105)  # fmt: skip
    untraced = a.phases_sum()
    r = reconcile(dataclasses.replace(a, untraced_s=untraced))
    assert r.phase(Phase.HOST) == pytest.approx(0.0005)  # fit - raw
    assert r.phase(Phase.OTHER) == pytest.approx(0.001 + 0.0035)
    assert r.phases_sum() == pytest.approx(untraced)
    assert any("held to what Keras's trainer costs" in n for n in r.notes)
    kept = reconcile(dataclasses.replace(a, untraced_s=untraced, raw_s=0.005, fit_s=0.0105))
    assert kept.phase(Phase.HOST) == pytest.approx(0.004)  # within what Keras costs: kept
    assert not any("held to what" in n for n in kept.notes)


def test_reconcile_checks_the_input_against_the_step_over_fit_s_step_on_one_batch():
    """A reader on other threads takes the step's cores without a wait the trace sees: fit's
    step on the data (timed in turn; else the untraced step) over fit's step on one batch
    repeated is what the data costs it."""
    a = _anatomy([LayerTime("dense", "Dense", 0.001, 0.001)], other=0.004, host=0.001,
                 waited=0.0001, raw_s=0.0050, fit_s=0.0055)  # fmt: skip
    untraced = a.phases_sum()  # 0.0096: the data costs it 0.0041 over fit's one batch
    r = reconcile(dataclasses.replace(a, untraced_s=untraced))
    assert r.phase(Phase.INPUT) == pytest.approx(untraced - 0.0055)
    # other gave the 4 ms the input gained, then took the host's time past Keras's 0.5 ms
    assert r.phase(Phase.HOST) == pytest.approx(0.0005)
    assert r.phase(Phase.OTHER) == pytest.approx(0.004 - (untraced - 0.0055 - 0.0001) + 0.0005)
    assert r.phases_sum() == pytest.approx(untraced)
    assert any(n.startswith("input is what the data costs the step") for n in r.notes)
    near = reconcile(dataclasses.replace(a, untraced_s=untraced, fit_s=untraced - 0.0002))
    assert near.phase(Phase.INPUT) == pytest.approx(0.0001)  # within the band: as traced
    # Your data's step timed in turn with one batch's: that pair, not the untraced step
    # timed minutes apart, isolates the input (one batch's step once read slower than the
    # untraced step under load, and a 10 ms stall came out 0.5 ms).
    slow_one = dataclasses.replace(a, untraced_s=untraced, fit_s=untraced + 0.001,
                                   fed_s=untraced + 0.001 + 0.003)  # fmt: skip
    assert reconcile(slow_one).phase(Phase.INPUT) == pytest.approx(0.003)
    assert reconcile(slow_one).phases_sum() == pytest.approx(untraced)
    # nothing outside the computed phases to hold it: the input stays the trace's wait, and
    # the note says so (it said the data's cost, beside a row that showed the wait)
    full = _anatomy([LayerTime("dense", "Dense", 0.004, 0.004)], other=0.0, host=0.0,
                    waited=0.0001, raw_s=0.0050, fit_s=0.0055)  # fmt: skip
    stays = reconcile(dataclasses.replace(full, untraced_s=full.phases_sum(), fed_s=0.0075))
    assert stays.phase(Phase.INPUT) == pytest.approx(0.0001)
    (said,) = [n for n in stays.notes if n.startswith("input is")]
    assert said.startswith("input is the trace's wait (0.100 ms), not what the data costs")


def test_reconcile_checks_the_input_where_no_raw_step_could_be_taken():
    """keras.io's RecommenderNet on JAX (its Embeddings add their own losses: no raw step)
    booked input 98.8 % of a 0.19 ms step: the trace's batch transfers, host work the
    profiler slows, kept as measured. Fit's step on your data against one batch's, timed in
    turn without a raw step, isolates the input still; "Keras between steps" is not held to
    a raw step there is none of."""
    a = _anatomy([LayerTime("e", "Embedding", 0.0002, 0.0002)], other=0.0002, host=0.0002,
                 waited=0.009)  # fmt: skip
    kept = reconcile(dataclasses.replace(a, untraced_s=0.010))
    assert kept.phase(Phase.INPUT) == pytest.approx(0.009)  # the trace's, as measured
    r = reconcile(dataclasses.replace(a, untraced_s=0.010, fit_s=0.0095, fed_s=0.010))
    assert r.phase(Phase.INPUT) == pytest.approx(0.0005)  # what the data costs the step
    assert r.phase(Phase.HOST) == pytest.approx(kept.phase(Phase.HOST))
    assert r.phases_sum() == pytest.approx(0.010)
    assert any(n.startswith("input is what the data costs the step") for n in r.notes)
