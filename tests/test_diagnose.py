"""Diagnosis: the verdict logic on injected rates, advice from injected facts, and real runs
made input-bound and compute-bound on purpose."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import time
import types

import numpy as np
import pytest
import tensorflow as tf

from toolkit.core import compat
from toolkit.report._trace_records import TraceAnalysis
from toolkit.runner import train
from toolkit.runner.config import TrainConfig
from toolkit.search import advice as adv
from toolkit.search import diagnose as dg


@pytest.mark.parametrize(
    ("rates", "verdict", "overlap"),
    [
        ((50.0, 100.0, 49.0), dg.INPUT_BOUND, True),
        ((500.0, 100.0, 98.0), dg.COMPUTE_BOUND, True),
        ((105.0, 100.0, 97.0), dg.BALANCED, True),
        # The fit far below both parts: its input, as the fit reads it, holds the step back.
        ((500.0, 100.0, 60.0), dg.INPUT_BOUND, False),
        # ... where the input could cost that much: 15 ms lost against 2 ms of input is not.
        ((500.0, 100.0, 40.0), dg.COMPUTE_BOUND, True),
        ((6853.0, 39.1, 30.0), dg.COMPUTE_BOUND, True),  # a BiLSTM (fresh: 1.06x)
        ((1567.3, 175.0, 134.2), dg.INPUT_BOUND, False),  # contrastive/torch (fresh: 0.73x)
        # multi_input/torch (fresh: 0.79x): its fit lost 4.3x the input's own time, read
        # through Keras's adapter into torch tensors, a dict of them.
        ((1977.6, 194.3, 136.4), dg.INPUT_BOUND, False),
        ((500.0, 100.0, 92.0), dg.COMPUTE_BOUND, True),  # the fit keeps up with the step
        # A fast pipeline, yet the fit loses 15 % to reading it: both sides matter.
        ((500.0, 100.0, 85.0), dg.BALANCED, True),
        # ... unless the pipeline is too fast to cost it that (CI: 5,289, 108.8, 90.3/s).
        ((5000.0, 100.0, 85.0), dg.COMPUTE_BOUND, True),
        ((5288.7, 108.8, 90.3), dg.COMPUTE_BOUND, True),
        ((5471.5, 344.9, 292.0), dg.BALANCED, True),  # 0.53 ms lost, the input 0.18 ms alone
        ((81.0, 100.0, 80.0), dg.BALANCED, True),  # inside the 20 % margin
        ((79.0, 100.0, 78.0), dg.INPUT_BOUND, True),
        # No headroom in the pipeline: a fit far below both is its input's, however far.
        ((110.0, 100.0, 20.0), dg.INPUT_BOUND, False),
        ((100.0, 100.0, 15.0), dg.INPUT_BOUND, False),
    ],
)
def test_classify(rates, verdict, overlap):
    assert dg.classify(*rates) == (verdict, overlap)


@pytest.mark.parametrize(
    ("rates", "noise", "said"),
    [((500.0, 100.0, 147.0), 0.05, "the real fit ran 1.47× the step alone, which bounds it"),
     ((500.0, 100.0, 147.0), None, "the real fit ran 1.47× the step alone, which bounds it"),
     ((500.0, 100.0, 105.0), 0.02, ""),  # within half the margin: the same rate
     ((500.0, 100.0, 83.0), 0.20, "the real fit's 17% gap to the step alone is inside this "
                                  "machine's noise (two runs of one window differed by 20%)"),
     ((500.0, 100.0, 83.0), 0.05, ""),  # a gap well outside the noise: the verdict stands
     ((500.0, 100.0, 83.0), None, ""),  # one run each: no noise known, the verdict stands
     ((50.0, 100.0, 49.0), 0.6, ""),  # the pipeline alone decides, not the fit's gap
     # a keras.io FeatureSpace model: the fit outran the pipeline that feeds it
     ((86.0, 190.0, 182.5), 0.05, "the real fit ran 2.12× the pipeline alone, which feeds it"),
     ((86.0, 190.0, 90.0), 0.05, ""),  # within the noise of it: the input bounds the fit
     # far below the step alone, a short window's buffers past the pipeline: it bounds still
     ((15.0, 500.0, 16.5), 0.05, ""), ((9.9, 414.9, 12.1), 0.12, ""),
     ((15.0, 500.0, 30.0), 0.05, "the real fit ran 2.00× the pipeline alone, which feeds it"),
     # which of the two bounds the fit, where the pipeline and the step lie inside the noise
     ((130.0, 100.0, 97.0), 0.4, "the pipeline alone and the step alone are 30% apart, inside"),
     ((130.0, 100.0, 97.0), 0.1, ""), ((50.0, 100.0, 49.0), 0.9, "")],
)  # fmt: skip
def test_consistency(rates, noise, said):
    """A fit faster than the step alone or the pipeline alone, which bound it, or a verdict
    drawn from a fit's gap inside the measured noise: uncertain, with why; else nothing."""
    assert dg.consistency(*rates, noise).startswith(said) and bool(said) == bool(
        dg.consistency(*rates, noise)
    )


def test_an_uncertain_diagnosis_says_why_and_draws_no_advice():
    diagnosis = dg.Diagnosis(
        500.0, 100.0, 147.0, dg.UNCERTAIN, True, [], batch_size=32, noise=0.05,
        uncertain=dg.consistency(500.0, 100.0, 147.0, 0.05),
    )  # fmt: skip
    first = diagnosis.lines()[0]
    assert first.startswith("verdict: uncertain (32 examples/step): the real fit ran 1.47×")
    assert first.endswith("no advice from it, measure again (more steps, a quieter machine)")
    assert not [line for line in diagnosis.lines() if "advice:" in line]
    xprof = dg.second_opinion(dg.UNCERTAIN, TraceAnalysis(verdict="not input-bound",
                                                          input_percent=1.0))  # fmt: skip
    assert xprof.agrees is None and "uncertain: nothing to hold it against" in xprof.line
    assert json.loads(json.dumps(diagnosis.to_dict()))["uncertain"] == diagnosis.uncertain
    # The noise is said where it could move a verdict (over half the margin), never else.
    assert not [line for line in diagnosis.lines() if "noise:" in line]
    noisy = dataclasses.replace(diagnosis, noise=0.64)
    assert (
        "  noise: two runs of one window differed by 64% (more steps hold the windows "
        "still)" in noisy.lines()
    )


def advise(*args, **kwargs) -> list[str]:
    """advise()'s records as a recipe's user reads them (flags)."""
    from toolkit.runner.config import as_flags

    return [a.spelled(as_flags) for a in adv.advise(*args, **kwargs)]


def overlap_advice(*args, **kwargs) -> list[str]:
    from toolkit.runner.config import as_flags

    return [a.spelled(as_flags) for a in adv.overlap_advice(*args, **kwargs)]


def test_a_fast_pipeline_that_holds_the_fit_back_is_advised_as_such():
    advice = advise(dg.INPUT_BOUND, False, 500.0, 100.0, adv.Facts(), 60.0)
    assert "reading the input inside the fit costs the step" in advice[0]
    assert not any("speed up the input before the model" in a for a in advice)


def test_a_fast_pipeline_that_costs_the_fit_a_little_is_balanced_and_says_why():
    advice = advise(dg.BALANCED, True, 500.0, 100.0, adv.Facts(), 85.0)
    assert "0.85× the step alone" in advice[0] and "about as fast" not in advice[0]
    assert advise(dg.BALANCED, True, 105.0, 100.0, adv.Facts(), 97.0)[0].startswith(
        "input and step are about as fast as each other"
    )


def test_a_fit_that_trails_a_step_its_fast_pipeline_cannot_explain_says_so():
    advice = advise(dg.COMPUTE_BOUND, True, 5000.0, 100.0, adv.Facts(), 85.0)
    assert "0.85× the step alone" in advice[0] and "too fast to cost it that" in advice[0]
    assert not any(
        "too fast" in a for a in advise(dg.COMPUTE_BOUND, True, 5e3, 100.0, adv.Facts(), 95.0)
    )


def test_classify_rejects_a_zero_rate():
    with pytest.raises(ValueError, match="input rate must be > 0"):
        dg.classify(0.0, 1.0, 1.0)


def test_input_advice_names_what_the_pipeline_is_made_of():
    facts = adv.Facts(
        pipeline_classes=frozenset({"_GeneratorDataset", "_MapDataset", "BatchDataset"}),
        pipeline_ops=frozenset({"EagerPyFunc"}),
    )
    advice = " | ".join(advise(dg.INPUT_BOUND, True, 10.0, 100.0, facts))
    for words in ("parallel_generator", "num_parallel_calls", "cache", "batch_map", "prefetch"):
        assert words in advice
    good = adv.Facts(pipeline_classes=frozenset({"CacheDataset", "PrefetchDataset", "Batch"}))
    advice = advise(dg.INPUT_BOUND, True, 10.0, 100.0, good)
    assert len(advice) == 1 and "speed up the input" in advice[0]


def test_data_keras_reads_itself_gets_its_own_levers_not_tf_data_s():
    """A PyDataset, a generator, arrays or a DataLoader that fit reads through Keras's own
    adapter: the advice names that form's levers (workers, a PyDataset), never a tf.data op
    of the form the toolkit times beside it, even where that form has a map and no prefetch."""
    tf_form = dict(
        pipeline_classes=frozenset({"_GeneratorDataset", "_MapDataset", "BatchDataset"}),
        pipeline_ops=frozenset({"EagerPyFunc"}),
    )
    expect = {
        "PyDatasetAdapter": "super().__init__(workers=N, use_multiprocessing=True",
        "GeneratorDataAdapter": "keras.utils.PyDataset with workers",
        "ArrayDataAdapter": "a larger batch",
        "TorchDataLoaderAdapter": "num_workers=N",
        "GrainDatasetAdapter": "grain.MultiprocessingOptions(num_workers=N)",
    }
    for adapter, words in expect.items():
        facts = adv.Facts(adapter=adapter, device_kind="cpu", cpu_cores=2, **tf_form)
        for advice in (
            advise(dg.INPUT_BOUND, True, 10.0, 100.0, facts),
            overlap_advice(facts, 500.0, 1000.0, 300.0),
        ):
            said = " | ".join(advice)
            assert words in said, (adapter, said)
            for tf_words in ("num_parallel_calls", ".prefetch(", "batch_map"):
                assert tf_words not in said, (adapter, said)
    more = adv.Facts(adapter="PyDatasetAdapter", input_workers=4)
    assert "more than its 4 workers" in " | ".join(advise(dg.INPUT_BOUND, True, 1, 9, more))


def test_compute_advice_from_step_settings_and_devices():
    facts = adv.Facts(step_s=0.001, batch_size=32, gpus=1, recommended_precision="mixed_bfloat16")
    advice = " | ".join(advise(dg.COMPUTE_BOUND, False, 900.0, 100.0, facts))
    for words in ("--fused_steps", "--jit_compile", "larger batch than 32", "--device=gpu"):
        assert words in advice
    assert "--precision=mixed_bfloat16" in advice and "prefetch" in advice  # overlap missing
    assert "compute_dtype" not in advice  # no layer of your own: nothing to warn of
    yours = dataclasses.replace(facts, own_layers=("Sampling", "Scale"))
    advice = " | ".join(advise(dg.COMPUTE_BOUND, False, 900.0, 100.0, yours))
    assert "; under it, a tensor your own layers make (Sampling, Scale) needs " in advice
    on_gpu = adv.Facts(step_s=0.001, device_kind="cuda", jit_compile=True, fused_steps=4)
    advice = " | ".join(advise(dg.COMPUTE_BOUND, True, 900.0, 100.0, on_gpu))
    assert "--device=cpu" in advice and "--fused_steps" not in advice


def test_a_layer_that_rules_xla_out_is_advised_away_and_xla_never_measured(keras):
    """A lookup layer (or ``RandomRotation``) inside the model: Keras drops
    ``jit_compile=True`` with a warning, so advice to try it, a check of it and a search over
    it all time the same step twice (keras.io's structured data model: "saves 0.571 ms",
    tune's "xla spe=8 2.76×"). The advice moves the layer to the data instead, said even
    where the verdict is uncertain (no measurement decides it); tune does not search XLA."""
    import tensorflow as tf

    from toolkit.search import workload as wl
    from toolkit.search.engine import Candidate, Space

    inputs = keras.Input((1,), dtype="int64")
    x = keras.layers.IntegerLookup(vocabulary=[1, 2, 3], name="code", output_mode="one_hot")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1)(x))
    model.compile("sgd", "mse")
    ruled = compat.unjitted_by(model)
    assert ruled == ("IntegerLookup 'code'",)
    facts = adv.Facts(step_s=0.02, batch_size=32, jit_compile=False, unjitted_by=ruled)
    advice = adv.advise(dg.COMPUTE_BOUND, True, 900.0, 100.0, facts)
    said = [a for a in advice if isinstance(a, adv.Advice) and "XLA" in a.text]
    assert [a.text for a in said] == [adv.unjitted_advice(ruled, "tensorflow").text]
    assert not any(name == "jit_compile" for a in said for t in a.tries for name, _ in t)
    assert said[0].text.startswith("IntegerLookup 'code' rules XLA out (supports_jit False)")
    jax = adv.unjitted_advice(ruled, "jax").text
    assert "without it, op by op, whatever" in jax and "op by op" not in said[0].text
    step, faster = (types.SimpleNamespace(timed_steps=10, mean_s=s) for s in (0.01, 0.006))
    shown = dg._conclude(  # a fit 1.67x its step alone: the load moved, no verdict
        input_rate=900.0, compute=step, fit=faster, dataset=tf.data.Dataset.range(4),
        described="arrays",
        defaults=Candidate(), batch_size=32, device_kind="cpu", steps=10, devices_found=[],
        unjitted_by=ruled,
    )  # fmt: skip
    assert shown.uncertain and [str(a) for a in shown.advice] == [said[0].text]
    space = Space(steps_per_execution=(1, 8), jit_compile=(False, True))
    cut = wl.ModelWorkload.space(types.SimpleNamespace(model=model), space, Candidate())
    assert cut.jit_compile == (False,)
    assert cut.cut[-1] == "XLA: IntegerLookup 'code' rules XLA out (supports_jit False)"
    two = ("IntegerLookup 'a'", "StringLookup 'b'")
    assert compat.ruling_xla_out(two) == (
        "IntegerLookup 'a', StringLookup 'b' rule XLA out (supports_jit False)"
    )


def test_own_layers_are_the_model_s_layer_classes_no_library_wrote(keras):
    """What the precision advice warns of: keras.io's VAE's ``Sampling`` draws float32 noise
    and adds it to a bfloat16 mean under ``mixed_bfloat16``, which fails its step."""

    class Sampling(keras.layers.Layer):
        def call(self, x):
            return x + keras.random.normal(keras.ops.shape(x))

    inner = keras.Sequential([keras.Input((4,)), Sampling(), keras.layers.Dense(4)])
    x = keras.Input((4,))
    model = keras.Model(x, keras.layers.Dense(2)(Sampling()(inner(x))))
    assert dg._own_layers(model) == ("Sampling",)  # once, nested model and all
    assert dg._own_layers(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])) == ()


def test_overlap_advice_follows_from_the_pipeline_the_device_and_the_cores():
    prefetched = frozenset({"_ParallelMapDataset", "_BatchDataset", "_PrefetchDataset"})
    on_cpu = adv.Facts(device_kind="cpu", cpu_cores=2, pipeline_classes=prefetched)
    # input 2 ms + step 1 ms, fit 2.9 ms: one after the other
    advice = overlap_advice(on_cpu, input_rate=500.0, compute_rate=1000.0, fit_rate=345.0)
    text = " | ".join(advice)
    assert "2.00 ms (input alone) + 1.00 ms (step alone) = 3.00 ms" in advice[0]
    assert "one after the other" in advice[0]
    assert "CPU contention" in text and "2 CPU core(s)" in text
    assert "no prefetch" not in text and "prefetch(" not in text  # it has one: never advised
    bare = adv.Facts(
        device_kind="cpu", pipeline_classes=frozenset({"_MapDataset", "_BatchDataset"})
    )
    text = " | ".join(overlap_advice(bare, 500.0, 1000.0, 345.0))
    assert "no prefetch: end the pipeline with .prefetch(tf.data.AUTOTUNE)" in text
    python = adv.Facts(
        device_kind="cuda", pipeline_classes=prefetched, pipeline_ops=frozenset({"EagerPyFunc"})
    )
    text = " | ".join(overlap_advice(python, 500.0, 1000.0, 345.0))
    assert "GIL" in text and "CPU contention" not in text  # the step is on the GPU
    plain = adv.Facts(device_kind="cuda", pipeline_classes=frozenset({"_PrefetchDataset"}))
    text = " | ".join(overlap_advice(plain, 500.0, 1000.0, 450.0))
    assert "per-step overhead" in text and "partly one after the other" in text
    assert "(0.78 ms of the step's 1.00 ms ran beside the input)" in text
    # keras.io's weather LSTM on JAX: 11.68 ms against 5.93 + 8.58 ms is not serial
    text = overlap_advice(on_cpu, 1e3 / 5.93, 1e3 / 8.58, 1e3 / 11.68)[0]
    assert text.endswith(
        "partly one after the other (2.83 ms of the input's 5.93 ms ran beside the step)"
    ), text
    # advise() puts it after the verdict's advice, only when the overlap is missing
    assert not any("overlap" in a for a in advise(dg.COMPUTE_BOUND, True, 900, 100, on_cpu))
    assert any("CPU contention" in a for a in advise(dg.COMPUTE_BOUND, False, 900, 100, on_cpu))


def _task(keras, slow_input: bool, width: int):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 16)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")

    def slow(features, label):
        def work(v):
            time.sleep(0.002)  # 2 ms of Python per example: 64 ms per batch of 32
            return v

        out = tf.py_function(work, [features], tf.float32)
        return tf.ensure_shape(out, (16,)), label

    def data():
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        return ds.map(slow) if slow_input else ds

    return train.Task(
        name="diag",
        build_model=lambda: keras.Sequential(
            [
                keras.Input((16,)),
                keras.layers.Dense(width, activation="relu"),
                keras.layers.Dense(width, activation="relu"),
                keras.layers.Dense(2),
            ]
        ),
        train=data,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        num_classes=2,
    )


@pytest.mark.parametrize(
    ("slow_input", "width", "verdict"),
    [(True, 8, dg.INPUT_BOUND), (False, 1024, dg.COMPUTE_BOUND)],
)
def test_real_runs_made_input_or_compute_bound(keras, slow_input, width, verdict):
    """Real fits, one planted input-bound and one compute-bound. A loaded machine can move the
    compute-bound fit's few steps and so the rates' verdict (uncertain, balanced or input-bound):
    each way it can move is asserted as the rules say, never retried. XProf's reading of the
    trace is held to what was planted, and its agreement to the rates' verdict."""
    config = TrainConfig(batch_size=32, warmup_steps=1, report_dir=None)
    diagnosis = dg.diagnose(_task(keras, slow_input, width), config, steps=8)
    planted = verdict
    if verdict == dg.COMPUTE_BOUND and diagnosis.verdict == dg.UNCERTAIN:
        # A shared machine moved the fit's few steps by more than its gap to the step alone:
        # no verdict, and so no advice (consistency's rules).
        assert diagnosis.uncertain and diagnosis.advice == [], str(diagnosis)
        return
    if verdict == dg.COMPUTE_BOUND and diagnosis.fit_rate < 0.9 * diagnosis.compute_rate:
        # A shared machine slowed the fit's few steps against the step alone's: unless the
        # input could have cost it that (balanced: both lists), the advice says it did not.
        gap = 1 / diagnosis.fit_rate - 1 / diagnosis.compute_rate
        if gap <= adv.INPUT_COST_BOUND / diagnosis.input_rate:
            if diagnosis.fit_rate < (1 - adv.MARGIN) * diagnosis.compute_rate:
                verdict = dg.INPUT_BOUND  # a window slowed that far reads as its input's
            else:
                verdict = dg.BALANCED
                assert "both lists apply" in diagnosis.advice_lines()[0], str(diagnosis)
        else:
            assert "too fast to cost it that" in diagnosis.advice_lines()[0], str(diagnosis)
    assert diagnosis.verdict == verdict, str(diagnosis)
    assert diagnosis.input_rate > 0 and diagnosis.compute_rate > 0 and diagnosis.fit_rate > 0
    if slow_input:
        assert any(
            "parallel_generator" in a or "num_parallel_calls" in a for a in diagnosis.advice_lines()
        )
    assert json.loads(json.dumps(diagnosis.to_dict()))["verdict"] == verdict
    # XProf's own reading of a trace of the fit (the [profile] extra), beside the rates'.
    xprof = diagnosis.xprof
    assert xprof is not None and xprof.verdict is not None, xprof
    # XProf reads the trace, which a loaded machine does not move from what was planted: 64 ms
    # of Python per batch against a tiny step is input-bound in any hour.
    if planted == dg.INPUT_BOUND:
        assert xprof.verdict == "highly input-bound" and xprof.input_percent > 50
    if verdict == planted:
        assert xprof.agrees is True, xprof
    else:  # the rates' verdict moved by load: where XProf's differs, its line says why
        assert xprof.agrees is not None, xprof
        assert ("disagrees with the rates" in xprof.line) is not xprof.agrees, xprof
    assert diagnosis.to_dict()["xprof"] == dataclasses.asdict(xprof)  # report.json's object
    assert "XProf: " in str(diagnosis) and "agrees with the rates" in str(diagnosis)


@pytest.mark.legacy_keras
@pytest.mark.parametrize("form", ["arrays", "timeseries"])
def test_xprof_reads_the_trace_of_a_step_that_runs_a_loop(keras, form):
    """An LSTM, whose step runs its recurrence as a ``tf.while_loop``, on numpy arrays and on
    a ``timeseries_dataset_from_array`` pipeline: the cross-check reads XProf's verdict from
    the traced steps (``toolkit.report.trace`` folds the loop into them), where it said "no
    step marker" though every traced step had one."""
    rng = np.random.default_rng(0)
    model = keras.Sequential([keras.Input((16, 7)), keras.layers.LSTM(8), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    if form == "arrays":
        x = rng.normal(size=(160, 16, 7)).astype("float32")
        data = (x, x[:, -1, :1])
    else:
        series = rng.normal(size=(200, 7)).astype("float32")
        data = keras.utils.timeseries_dataset_from_array(
            series[:-16], series[16:, :1], sequence_length=16, batch_size=16
        )
    diagnosis = dg.diagnose(model, data, config=TrainConfig(batch_size=16), steps=6)
    xprof = diagnosis.xprof
    assert xprof is not None and xprof.verdict is not None, xprof
    assert 0 <= xprof.input_percent <= 100, xprof
    # No verdict of the rates to hold XProf's against where six steps' rates were uncertain.
    assert xprof.agrees in (True, False) or diagnosis.verdict == dg.UNCERTAIN, xprof
    assert f"  XProf: {xprof.line}" in diagnosis.lines() and "no verdict" not in xprof.line


def _read(verdict=None, input_percent=None, error=None):
    """A trace's reading, as ``toolkit.report.trace.read_trace`` gives it, of XProf's words."""
    return TraceAnalysis(verdict=verdict, input_percent=input_percent, error=error)


def test_second_opinion_says_when_xprof_and_the_rates_disagree():
    said = dg.second_opinion(dg.COMPUTE_BOUND, _read("highly input-bound", 41.0))
    assert said.agrees is False and said.verdict == "highly input-bound"
    assert "disagrees with the rates (compute-bound)" in said.line and "41.0%" in said.line
    said = dg.second_opinion(dg.INPUT_BOUND, _read("not input-bound", 1.0))
    assert said.agrees is False and "prefetching" in said.line
    # Input-bound because the real fit trails the step alone, its pipeline alone faster:
    # the line does not say the pipeline was slower.
    said = dg.second_opinion(dg.INPUT_BOUND, _read("not input-bound", 1.1), False)
    assert said.agrees is False and "the pipeline alone outruns the step" in said.line
    assert "slower than the step" not in said.line
    said = dg.second_opinion(dg.BALANCED, _read("moderately input-bound", 9))
    assert said.agrees is True and said.input_percent == 9
    said = dg.second_opinion(dg.INPUT_BOUND, _read(error="XProf found no step marker"))
    assert said.agrees is None and said.line == "no verdict (XProf found no step marker)"
    assert dg.second_opinion(dg.INPUT_BOUND, None).line == (
        "no verdict (XProf gave no verdict on the trace)"
    )
    # report.json's diagnosis.xprof: the object it has always held
    shown = dg.Diagnosis(1.0, 2.0, 1.0, dg.INPUT_BOUND, True, [], xprof=said)
    assert shown.to_dict()["xprof"] == {
        "verdict": None, "input_percent": None, "agrees": None, "line": said.line}  # fmt: skip
    assert f"  XProf: {said.line}" in shown.lines()


def _python(*args, timeout=300):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )


def test_recipe_diagnose_flag_puts_the_verdict_in_the_report(tmp_path):
    out = _python(
        "-m", "recipes.mlp", "--smoke", "--diagnose", "--diagnose_steps=10",
        f"--report_dir={tmp_path}",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = list(tmp_path.iterdir())
    data = json.loads((run_dir / "report.json").read_text())
    verdicts = (dg.INPUT_BOUND, dg.COMPUTE_BOUND, dg.BALANCED, dg.UNCERTAIN)
    assert data["diagnosis"]["verdict"] in verdicts
    assert "verdict: " in out.stdout and "diagnosis: " in out.stdout


def test_doctor_cli(tmp_path):
    out = _python("-m", "toolkit", "doctor", "--recipe", "mlp", "--diagnose_steps=10")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "doctor: recipe mlp" in out.stdout and "verdict: " in out.stdout
    bad = _python("-m", "toolkit", "doctor", "--recipe", "mlp", "--batch_size=0", timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: ")
    missing = _python("-m", "toolkit", "doctor", "--recipe", "nope", timeout=120)
    assert missing.returncode == 2 and "no recipe named 'nope'" in missing.stderr


def _your_model(keras, features=16):
    model = keras.Sequential(
        [keras.Input((features,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _first_batch_spins(keras):
    """Your model and pipeline where the step alone (your first batch, repeated) is slow and
    the real fit is fast: a layer loops as often as the batch's first feature says (200 in
    the first batch, 1 after). The fit then runs faster than its "step alone": the rates
    contradict themselves, as a machine whose load moved between windows makes them."""

    class Spin(keras.layers.Layer):
        def build(self, shape):
            self.w = self.add_weight(shape=(shape[-1], shape[-1]), initializer="orthogonal")

        def call(self, x):
            n = tf.cast(tf.reduce_max(x[:, 0]), tf.int32)
            _, y = tf.while_loop(
                lambda i, y: i < n, lambda i, y: (i + 1, tf.tanh(tf.matmul(y, self.w))), (0, x)
            )
            return y

    model = keras.Sequential([keras.Input((64,)), Spin(), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(True))
    x = np.random.default_rng(0).normal(size=(2048, 64)).astype("float32")
    x[:, 0] = 1.0
    x[:32, 0] = 200.0
    y = (x[:, 1] > 0).astype("int32")
    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(2)


def test_a_fit_faster_than_its_step_alone_is_uncertain_with_no_advice(keras):
    """The real code path: a fit that ran faster than the step alone bounds it is not a
    verdict; the diagnosis says so and advises nothing.

    Statistical, robust by construction: the planted contradiction is a fit about 5× its
    step alone, and a noise as large (two runs of one window 5× apart) would make it no
    contradiction. 20 steps made the fit's windows 20 ms, and one 100 ms stall on a loaded
    CI machine was such a noise; 200 steps make them 0.2 s, which a stall under a second
    cannot move that far."""
    model, data = _first_batch_spins(keras)
    diagnosis = dg.diagnose(model, data, steps=200)
    assert diagnosis.fit_rate > 1.2 * diagnosis.compute_rate, str(diagnosis)
    assert diagnosis.verdict == dg.UNCERTAIN and diagnosis.advice == [], str(diagnosis)
    assert "which bounds it" in str(diagnosis) and "advice:" not in str(diagnosis)


def _your_pipeline(slow: bool):
    """A user's own batched pipeline: batch first, then a batch-level map (a Python one that
    sleeps 40 ms per batch when `slow`), then prefetch."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 16)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")

    def slow_batch(features, labels):
        def work(v):
            time.sleep(0.04)
            return v

        out = tf.py_function(work, [features], tf.float32)
        return tf.ensure_shape(out, (None, 16)), labels

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    return (ds.map(slow_batch) if slow else ds).prefetch(1), (x, y)


def test_your_own_model_and_batched_pipeline_are_measured_as_they_are(keras):
    model = _your_model(keras)
    ds, _ = _your_pipeline(slow=True)
    before = [w.copy() for w in model.get_weights()]
    diagnosis = dg.diagnose(model, ds, steps=8)
    assert diagnosis.verdict == dg.INPUT_BOUND, str(diagnosis)
    assert diagnosis.pipeline == (
        "your pipeline: from_tensor_slices → batch(32) → map → prefetch, read by Keras's "
        "TFDatasetAdapter as fit reads it"
    )
    assert "measured pipeline: your pipeline: " in str(diagnosis)
    assert diagnosis.batch_size == 32
    # The diagnosis trained the model on the way; its weights are back as they were.
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    assert int(model.optimizer.iterations.numpy()) == 0


def test_your_own_arrays_are_batched_as_fit_would(keras):
    _, (x, y) = _your_pipeline(slow=False)
    diagnosis = dg.diagnose(_your_model(keras), (x, y), config=TrainConfig(batch_size=64), steps=6)
    assert diagnosis.batch_size == 64 and diagnosis.verdict in (
        dg.INPUT_BOUND,
        dg.COMPUTE_BOUND,
        dg.BALANCED,
        dg.UNCERTAIN,
    )
    assert (
        diagnosis.pipeline
        == "your arrays, batched by 64, read by Keras's ArrayDataAdapter as fit reads it"
    )
    with pytest.raises(train.SetupError, match="give the training data"):
        dg.diagnose(_your_model(keras))


MODEL_FN = """
import numpy as np
import tensorflow as tf
from toolkit.core import compat

def make():
    keras = compat.keras()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(16).prefetch(2)
"""


def test_doctor_cli_on_your_own_model_fn(tmp_path):
    (tmp_path / "mytrain.py").write_text(MODEL_FN)
    out = subprocess.run(
        [sys.executable, "-m", "toolkit", "doctor", "--model_fn", "mytrain:make",
         "--diagnose_steps=6", "--batch_size=64"],  # the pipeline batches itself: said
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "doctor: --model_fn mytrain:make, batch 16" in out.stdout
    assert "note: --batch_size=64 was not used: your data batches itself, by 16" in out.stdout
    assert "measured pipeline: your pipeline: from_tensor_slices → batch(16) → prefetch" in (
        out.stdout
    )
    # The recipes' --notune_confirm (--autotune's) skips the fresh check as --no_confirm
    # does, not ignored (the check in fresh processes: the README example's test)
    tuned = subprocess.run(
        [sys.executable, "-m", "toolkit", "tune", "--model_fn", "mytrain:make",
         "--tune_budget=5", "--notune_confirm"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TOOLKIT_CACHE_DIR": str(tmp_path)},
    )  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    assert "tune: --model_fn mytrain:make, batch 16, your pipeline's" in tuned.stdout
    assert tuned.stderr.startswith("tune: measuring the defaults first (budget 5 s)")
    assert "confirm" not in tuned.stderr  # no plan of a check in fresh processes
    assert "best: model.compile(..., jit_compile=" in tuned.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "toolkit", "doctor", "--model_fn", "mytrain:nope"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 2 and "has no function 'nope'" in bad.stderr.splitlines()[-1]


def _compute_advice(facts) -> list[str]:
    from toolkit.runner.config import as_flags

    return [a.spelled(as_flags) for a in adv._compute_advice(facts)]


def test_compute_advice_names_only_what_the_backend_runs():
    tf_advice = " ".join(_compute_advice(adv.Facts(step_s=0.001)))
    assert "--fused_steps=K" in tf_advice and "try --jit_compile (measure: XLA" in tf_advice
    jax_advice = " ".join(_compute_advice(adv.Facts(step_s=0.001, jit_compile=True, backend="jax")))
    assert "--fused_steps=K" in jax_advice and "jax.lax.scan" in jax_advice
    assert "--jit_compile" not in jax_advice
    torch_advice = " ".join(_compute_advice(adv.Facts(step_s=0.001, backend="torch")))
    assert "torch.compile" in torch_advice and "--fused_steps" not in torch_advice
    from toolkit.backend._torch import keras_loops_steps

    if keras_loops_steps():  # Keras 3.16 runs K steps per call on PyTorch
        assert "--steps_per_execution=K (K steps per call" in torch_advice
    else:
        assert "one step per call" in torch_advice
        assert "--steps_per_execution=K" not in torch_advice


class _Batches:
    """A user's PyDataset of `count` batches of (x, y) that records which it was asked for
    and sleeps `sleep_s` in each (a slow input on purpose)."""

    @staticmethod
    def make(keras, x, y, count, size, sleep_s=0.0):
        class Batches(keras.utils.PyDataset):
            def __init__(self):
                super().__init__()
                self.asked = []

            def __len__(self):
                return count

            def __getitem__(self, i):
                self.asked.append(i)
                if sleep_s:
                    time.sleep(sleep_s)
                return x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]

        return Batches()


def _epoch(work, count):
    """The first `count` batches the backend's fit would read, and the words for them."""
    from toolkit.search.workload import ModelWorkload

    assert isinstance(work, ModelWorkload)
    words, batches = work.input_batches()
    try:
        return words, [next(batches) for _ in range(count)]
    finally:
        batches.close()


def _rows(batch):
    from toolkit.core import compat

    return np.asarray(compat.keras().ops.convert_to_numpy(batch[0]))


@pytest.mark.every_backend
def test_your_arrays_pydataset_and_generator_are_read_through_keras_s_adapter(keras):
    """The input phase reads what fit reads: Keras's own adapter for the form you give, as
    this backend's epoch iterator hands it to the step; a generator is read once."""
    from toolkit.search.workload import workload

    _, (x, y) = _your_pipeline(slow=False)  # 512 examples
    # Arrays: batched by 64, one epoch = 8 batches covering every example once (shuffled,
    # as fit does by default); the ninth batch starts the next epoch.
    with workload(_your_model(keras), (x, y), TrainConfig(batch_size=64)) as work:
        words, batches = _epoch(work, 9)
    assert "Keras's ArrayDataAdapter" in words
    assert [len(_rows(b)) for b in batches] == [64] * 9
    epoch = np.concatenate([_rows(b) for b in batches[:8]])
    assert sorted(map(tuple, epoch)) == sorted(map(tuple, x))
    # A PyDataset: read through its own __getitem__, every index of a pass, then the next.
    data = _Batches.make(keras, x, y, count=4, size=32)
    with workload(_your_model(keras), data, TrainConfig()) as work:
        data.asked.clear()
        words, batches = _epoch(work, 5)
    assert "Keras's PyDatasetAdapter" in words and set(data.asked) == {0, 1, 2, 3}
    assert [len(_rows(b)) for b in batches] == [32] * 5
    # The diagnosis names the adapter it timed and puts your model back.
    model = _your_model(keras)
    before = [w.copy() for w in model.get_weights()]
    diagnosis = dg.diagnose(model, _Batches.make(keras, x, y, 4, 32), steps=4)
    assert diagnosis.pipeline == (
        "your Batches, read by Keras's PyDatasetAdapter as fit reads it"
    ), diagnosis.pipeline
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    # A generator, read once: each pass replays what was read and reads on, so it is never
    # asked again for a batch, and the diagnosis reads it through Keras's generator adapter.
    made = []

    def generator():
        for i in range(40):
            made.append(i)
            yield x[i * 8 : (i + 1) * 8], y[i * 8 : (i + 1) * 8]

    diagnosis = dg.diagnose(_your_model(keras), generator(), steps=4)
    assert "read by Keras's GeneratorDataAdapter as fit reads it" in diagnosis.pipeline
    assert "your generator, read once" in diagnosis.pipeline
    assert made == list(range(len(made))) and len(made) <= 40  # each batch made once
    assert diagnosis.input_rate > 0 and diagnosis.compute_rate > 0


@pytest.mark.every_backend
def test_a_slow_pydataset_against_a_tiny_step_is_input_bound(keras):
    """100 ms in each __getitem__ against a tiny step: the input phase times the PyDataset
    as fit reads it (not a copy of its batches), so the verdict is input-bound."""
    _, (x, y) = _your_pipeline(slow=False)
    slow = _Batches.make(keras, x, y, count=8, size=32, sleep_s=0.1)
    diagnosis = dg.diagnose(_your_model(keras), slow, steps=4)
    assert diagnosis.verdict == dg.INPUT_BOUND, str(diagnosis)
    assert diagnosis.input_rate < 1 / 0.1 * 1.01  # no faster than its sleeps allow


@pytest.mark.every_backend
def test_the_step_alone_reads_no_pipeline(keras):
    """The compute phase hands the step one batch as the backend's train function receives
    it, again and again (a Keras adapter repeating it), not a cached tf.data pipeline
    iterated each step."""
    from toolkit.search.workload import workload

    _, (x, y) = _your_pipeline(slow=False)
    with workload(_your_model(keras), (x, y), TrainConfig(batch_size=64)) as work:
        repeated = work._one_batch()
        report = work.fit(steps=6, warmup=1, one_batch=True)
    assert type(repeated).__name__ == "RepeatedBatch" and repeated.batch_size == 64
    assert report.steps.timed_steps >= 1


@pytest.mark.every_backend
def test_the_real_fit_reads_your_data_as_fit_reads_it(keras):
    """The real fit of your model reads your data through Keras's own adapter, epoch after
    epoch (each ending as fit ends it), not the tf.data form the toolkit builds: a
    PyDataset's own __getitem__ is asked for every step, pass after pass, and arrays are
    sliced by the adapter fit picks for them on this backend."""
    from toolkit.data import _fit_input
    from toolkit.search.workload import workload

    _, (x, y) = _your_pipeline(slow=False)  # 512 examples
    data = _Batches.make(keras, x, y, count=4, size=32)
    ended = []
    data.on_epoch_end = lambda: ended.append(len(data.asked))
    with workload(_your_model(keras), data, TrainConfig()) as work:
        data.asked.clear()
        report = work.fit(steps=10, warmup=1)
    assert report.steps.timed_steps >= 1 and report.steps.batch_size == 32
    assert len(data.asked) >= 10 and set(data.asked) == {0, 1, 2, 3}
    assert len(ended) >= 2  # 10 steps over 4 batches: at least two epochs ended, as fit ends them
    with workload(_your_model(keras), (x, y), TrainConfig(batch_size=64)) as work:
        report = work.fit(steps=20, warmup=1)  # 2.5 epochs of 8 batches
        assert type(work.endless).__name__ == "EndlessEpochs"
    assert report.steps.timed_steps >= 1 and report.steps.batch_size == 64
    # The same reader, asked directly: one epoch of arrays is every example once.
    reader = _fit_input.as_fit_reads((x, y), 64)
    first = list(itertools.islice(reader.get_numpy_iterator(), 9))
    epoch = np.concatenate([np.asarray(b[0]) for b in first[:8]])
    assert sorted(map(tuple, epoch)) == sorted(map(tuple, x)) and len(first[8][0]) == 64


def test_a_pydataset_with_workers_is_read_again_after_a_reader_left_mid_pass(keras):
    """diagnose reads windows of batches, and each reader leaves mid-pass: the pass is ended
    there as fit ends an epoch, so a PyDataset's workers (``workers=2``, threads) stop. Left
    running, the next reader got the abandoned pass's last batches and then waited for ever:
    ``doctor`` hung at "the real fit", deaf to SIGTERM (keras.io's PyDataset training loop).
    Read in a thread the test waits for, so a hang fails rather than stalls the suite."""
    import threading

    from toolkit.data import _fit_input

    class Sequence(keras.utils.PyDataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return np.full((4, 3), i, "float32"), np.zeros((4, 1), "float32")

    reader = _fit_input.as_fit_reads(Sequence(workers=2, use_multiprocessing=False), None)
    read = []

    def windows():
        for _ in range(3):  # 12 batches each: a pass and a half, left mid-pass
            read.append(sum(1 for _ in itertools.islice(reader.get_numpy_iterator(), 12)))

    worker = threading.Thread(target=windows, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert read == [12, 12, 12], f"a reader after the first got {read[1:]} batches, then hung"


def test_second_opinion_that_agrees_speaks_with_one_verdict():
    """XProf's 'potentially input-bound' beside compute-bound rates that it agrees with: the
    line gives XProf's share and its label as a label, and one verdict, the rates'."""
    said = dg.second_opinion(dg.COMPUTE_BOUND, _read("potentially input-bound", 1.9))
    assert said.agrees is True
    assert said.line.startswith("1.9% of the traced steps' time waiting for input")
    assert said.line.endswith("agrees with the rates: compute-bound")
    assert not said.line.startswith("potentially")
    # Beside uncertain rates too: a 0.0 % wait is not said "potentially input-bound, 0.0 %".
    unsure = dg.second_opinion(dg.UNCERTAIN, _read("potentially input-bound", 0.0))
    assert unsure.line.startswith("0.0% of the traced steps' time waiting for input (XProf")
    assert unsure.agrees is None and "nothing to hold it against" in unsure.line


def test_advice_for_a_model_whose_class_has_its_own_compile_says_where_it_goes(keras):
    """keras.io's Distiller: ``compile(optimizer, metrics, student_loss_fn, ...)`` takes no
    ``jit_compile``, and ``model.compile(..., jit_compile=True)`` would raise ``TypeError``;
    the advice and tune's pick say it in its ``super().compile(...)`` call. A class whose
    compile takes ``**kwargs``, or Keras's own, keeps ``model.compile(...)``."""
    from toolkit.core._advice import Advice
    from toolkit.runner.config import OwnCompile, TrainConfig
    from toolkit.search.engine import Candidate
    from toolkit.search.workload import ModelWorkload

    class Distiller(keras.Model):
        def __init__(self):
            super().__init__()
            self.student = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])

        def compile(self, optimizer, metrics, student_loss_fn, alpha=0.1):
            super().compile(optimizer=optimizer, metrics=metrics)
            self.student_loss_fn, self.alpha = student_loss_fn, alpha

        def call(self, x):
            return self.student(x)

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            return self.student_loss_fn(y, y_pred)

    class Passes(keras.Model):
        def compile(self, **kwargs):
            super().compile(**kwargs)

    model = Distiller()
    model.compile("sgd", [], keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    own = OwnCompile.of(model)
    assert own == OwnCompile("Distiller", frozenset(
        {"self", "optimizer", "metrics", "student_loss_fn", "alpha"}))  # fmt: skip
    assert OwnCompile.of(Passes()) is None and OwnCompile.of(keras.Sequential()) is None
    rng = np.random.default_rng(0)
    data = rng.normal(size=(64, 8)).astype("float32"), np.zeros(64, "int32")
    with ModelWorkload(model, data, TrainConfig(batch_size=16)) as work:
        said = work.how_to_apply(Candidate(jit_compile=False, steps_per_execution=8))
    assert said == (
        "super().compile(..., jit_compile=False, steps_per_execution=8) in Distiller.compile "
        "(its own compile takes no jit_compile, steps_per_execution)"
    )
    jit = Advice.of("try {0}", {"jit_compile": True})
    shown = dg.Diagnosis(1.0, 2.0, 1.0, dg.COMPUTE_BOUND, True, [jit], python=True,
                         own_compile=own)  # fmt: skip
    assert "advice: try super().compile(..., jit_compile=True) in Distiller.compile" in str(shown)


def test_advice_for_your_own_model_is_said_in_python():
    """Advice is a record (words and settings as values); the settings table spells it for
    its reader: Python for your own model, flags for a recipe, from the same record."""
    from toolkit.core._advice import Advice
    from toolkit.runner.config import as_flags, as_python

    jit = Advice.of("try {0} (measure: XLA is sometimes slower)", {"jit_compile": True})
    assert jit.spelled(as_python) == (
        "try model.compile(..., jit_compile=True) (measure: XLA is sometimes slower)"
    )
    assert jit.spelled(as_flags) == "try --jit_compile (measure: XLA is sometimes slower)"
    loop = Advice.of("try {0}", {"steps_per_execution": 8, "jit_compile": True})
    assert (
        loop.spelled(as_python) == "try model.compile(..., steps_per_execution=8, jit_compile=True)"
    )
    hint = Advice.of("try {0} (this device's hint)", {"precision": "mixed_bfloat16"})
    policy = "keras.mixed_precision.set_global_policy('mixed_bfloat16') before the model is built"
    assert policy in hint.spelled(as_python)
    rare = Advice.of("set {0}", {"validation_freq": 5})
    assert rare.spelled(as_python) == "set model.fit(..., validation_freq=5)"
    assert rare.spelled(as_flags) == "set --validation_freq=5"
    shown = dg.Diagnosis(1.0, 2.0, 1.0, dg.COMPUTE_BOUND, True, [jit], python=True)
    assert "advice: try model.compile(..., jit_compile=True)" in str(shown)
    assert shown.to_dict()["advice"] == [jit.spelled(as_python)]  # report.json: as shown
    recipe = dataclasses.replace(shown, python=False)
    assert "advice: try --jit_compile" in str(recipe) and "--" not in str(shown)
    # every piece of advice the seams give spells in both, with no flag left in the Python
    from toolkit.backend import _jax, _tensorflow, _torch

    for seam in (_tensorflow, _jax, _torch):
        for said in (seam.loop_advice(), seam.jit_advice()):
            if said is not None:
                assert "--" not in said.spelled(as_python).replace("(recipes: --", "")
                assert "--" in said.spelled(as_flags)
        # your own model's compile takes no fused steps: its loop advice names none
        own = seam.loop_advice(fused=False)
        assert "fused" not in own.spelled(as_python) and "--" not in own.spelled(as_python)
        assert not any(name == "fused_steps" for t in own.tries for name, _ in t)
    for seam in (_tensorflow, _jax):  # a recipe's flags have them
        assert "--fused_steps=K" in seam.loop_advice().spelled(as_flags)
    facts = dg.Facts(step_s=1e-4, batch_size=8, fusable=False)
    advice = dg.advise(dg.COMPUTE_BOUND, True, 1e4, 1e3, facts)
    assert advice and not any("fused" in a.spelled(as_python) for a in advice), advice
    spe = dg.Candidate(steps_per_execution=8)  # and where tune measured it, none either
    tuned = dg.Tuned(((spe, 200.0, None),), 100.0, dg.Candidate(), 6.0)
    held = dg.advise(dg.COMPUTE_BOUND, True, 1e4, 1e3, dataclasses.replace(facts, tuned=tuned))
    assert not any("fused" in a.spelled(as_python) for a in held), held


def test_a_model_whose_fit_fails_inside_keras_is_one_line_naming_its_fit(keras):
    """Your model's fit raising inside Keras (a model that does not run on this backend or
    data: keras.io's structured data model on JAX said ``error: Invalid dtype: object``,
    status 2, or a whole traceback) keeps its type for every caller, marked so that the
    command line says it in one line: the error's gist with the layer Keras named, the
    backend (and status 1: the run failed)."""
    from toolkit.core.errors import raised_in_your_fit

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    data = (np.zeros((64, 3), "float32"), np.zeros((64, 1), "float32"))  # 3 features, not 4
    with pytest.raises(ValueError, match="Exception encountered when calling") as failed:
        dg.diagnose(model, data, steps=10)
    said = raised_in_your_fit(failed.value)
    assert said is not None and said.startswith("your model's fit raised ValueError: Input 0 ")
    assert "(in Sequential.call())" in said and "\n" not in said
    assert said.endswith(f"(inside Keras's fit on {keras.backend.backend()})")
    assert raised_in_your_fit(ValueError("elsewhere")) is None


def test_empty_data_is_said_as_empty_by_diagnose_and_tune(keras):
    """A pipeline that yields nothing (``take(0)``, or a filter that drops everything, whose
    length tf.data cannot tell) is one SetupError naming it, not a window with no timed steps
    or a bare StopIteration."""
    from toolkit import tune

    pipeline, _ = _your_pipeline(slow=False)
    for empty in (pipeline.take(0), pipeline.filter(lambda *batch: False)):
        for measure in (dg.diagnose, tune):
            with pytest.raises(train.SetupError, match=r"it yields no batches \(empty\)$"):
                measure(_your_model(keras), empty)


def test_held_back_advice_that_measured_faster_says_why_tune_did_not_pick_it():
    """A weather LSTM's cached search: XLA ran 2.07× the defaults' steps, yet its longer
    compile pays back after 56 steps of a 24-step run, so tune kept the defaults. The held-back
    line says that, not a bare "2.07×, not advised"; a slower setting needs no reason."""
    from toolkit.search.engine import Candidate, WholeRun

    xla, plain = Candidate(jit_compile=True), Candidate(jit_compile=False)
    tuned = adv.Tuned(
        ((plain, 100.0, None), (xla, 207.0, None)), 100.0, plain, 13.0,
        run=WholeRun(examples=24 * 64, steps=24, defaults_s=1.45, pick_s=1.79,
                     extra_compile_s=0.598, break_even_steps=56, pick_wins=False),
    )  # fmt: skip
    said = tuned.held_back("jit_compile", lambda c: c.jit_compile)
    assert said == (
        "jit_compile: tune measured it at best 2.07× the defaults' speed here, but its longer "
        "compile pays for itself after 56 steps of a run of 24 (cached 13 s search), not advised"
    )
    unconfirmed = dataclasses.replace(tuned, run=None, unconfirmed=True)
    assert ", but the rounds against the defaults did not confirm it (cached" in (
        unconfirmed.held_back("jit_compile", lambda c: c.jit_compile) or ""
    )
    slower = dataclasses.replace(tuned, trials=((plain, 100.0, None), (xla, 70.0, None)))
    assert slower.held_back("jit_compile", lambda c: c.jit_compile) == (
        "jit_compile: tune measured it at best 0.70× the defaults' speed here (cached 13 s "
        "search), not advised"
    )


def test_advice_that_a_cached_tune_search_measured_slower_here_is_held_back(
    keras, tmp_path, monkeypatch
):
    """tune's real search writes its cache (its rates injected); diagnose finds it under tune's
    own key for the same workload, and advises nothing tune measured and did not pick: one line
    says so instead. What tune picked (XLA) is still advised."""
    from tests.helpers import fake_rates
    from toolkit.search import engine as en
    from toolkit.search import tune as tn
    from toolkit.search import workload as wl

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(wl.TaskWorkload, "rate", lambda self, c, steps=48, calls=3: fake_rates(c))
    config = TrainConfig(batch_size=16, epochs=10, report_dir=None)
    space = en.Space(
        precision=("float32", "mixed_bfloat16"), jit_compile=(False, True),
        steps_per_execution=(1,), fused_steps=(1,),
    )  # fmt: skip
    task = _task(keras, slow_input=False, width=8)
    picked = tn.tune(task, config, space=space, progress=lambda line: None)
    assert picked.best.jit_compile and picked.best.precision == "float32"
    with wl.workload(task, config) as work:
        tuned = dg._tuned(work)
    assert tuned is not None and tuned.chosen.jit_compile is True
    facts = adv.Facts(
        step_s=0.001, batch_size=16, recommended_precision="mixed_bfloat16", tuned=tuned
    )
    advice = advise(dg.COMPUTE_BOUND, True, 900.0, 100.0, facts)
    assert not any("--precision=mixed_bfloat16" in a for a in advice), advice
    held = [a for a in advice if a.startswith("mixed_bfloat16: tune measured it at best")]
    assert len(held) == 1 and held[0].endswith("s search), not advised"), advice
    assert "0.75× the defaults' speed here (cached" in held[0]  # XLA and bf16: 1.5 × 0.5
    assert any(a.startswith("try --jit_compile") for a in advice)  # tune picked it
    # Nothing cached for another workload: the rule of thumb stands.
    with wl.workload(_task(keras, slow_input=False, width=9), config) as work:
        assert dg._tuned(work) is None
