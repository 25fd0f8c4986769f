"""FLOP counting on real traced graphs, the cached matmul peak, and the MFU arithmetic."""

from __future__ import annotations

import json
import os

import pytest

from toolkit.core import machine, stats
from toolkit.profiling import flops


@pytest.mark.every_backend
def test_dense_model_counts_match_the_matmul_arithmetic(keras):
    model = keras.Sequential(
        [keras.Input((256,)), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)]
    )
    count = flops.count_flops(model, batch_size=32)
    matmuls = 2 * 32 * (256 * 512 + 512 * 10)
    # Bias adds and the ReLU are counted too: a little over the matmuls.
    assert matmuls <= count.forward <= 1.02 * matmuls
    # Backward: weight gradients of both layers and the input gradient of the second.
    backward = 2 * 32 * (256 * 512 + 512 * 10) + 2 * 32 * 512 * 10
    assert count.train_step == pytest.approx(count.forward + backward, rel=0.03)
    assert count.batch_size == 32
    assert count.note is None or "element-wise ops not counted" in count.note  # PyTorch's


@pytest.mark.every_backend
def test_conv_flops_scale_with_the_batch(keras):
    # Convolutions are what a GPU's compiled XLA module hides in cuDNN custom calls: on JAX the
    # count comes from the module lowered for the CPU, the same on every machine.
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(8, 3)])
    one, four = flops.count_flops(model, 1), flops.count_flops(model, 4)
    conv = 2 * 14 * 14 * 8 * 3 * 3 * 3
    assert conv <= one.forward <= 1.1 * conv
    assert four.forward == 4 * one.forward
    assert one.train_step > one.forward


@pytest.mark.every_backend
def test_attention_is_counted_beside_its_projections(keras):
    """keras.io's Transformer: PyTorch's CPU attention kernel had no formula, so its count
    held the four projections and none of the attention (393 MFLOP a step of about 1.4 G),
    and the faster backend read the lower MFU. Every backend counts both."""
    batch, seq, width, heads, key_dim = 4, 64, 32, 2, 16
    inputs = keras.Input((seq, width))
    model = keras.Model(inputs, keras.layers.MultiHeadAttention(heads, key_dim)(inputs, inputs))
    count = flops.count_flops(model, batch_size=batch)
    projections = 4 * 2 * batch * seq * width * heads * key_dim  # q, k, v and the output
    attention = 2 * 2 * batch * heads * seq * seq * key_dim  # scores, then scores @ values
    assert projections + attention <= count.forward <= 1.2 * (projections + attention), count
    assert count.train_step >= 2.5 * count.forward


def test_recurrent_layers_are_counted_on_an_unrolled_clone(keras):
    model = keras.Sequential([keras.Input((8, 8)), keras.layers.LSTM(32)])
    count = flops.count_flops(model, batch_size=4)
    # 8 steps × 4 gates × (input and recurrent matmuls): the loop body counted 8 times.
    matmuls = 8 * 2 * 4 * 4 * 32 * (8 + 32)
    assert count.forward >= matmuls
    assert "unrolled" in count.note


def test_a_model_without_inputs_gets_a_reason_not_an_exception(keras):
    count = flops.count_flops(keras.layers.Dense(3), batch_size=2)
    assert count.forward is None and count.train_step is None
    assert count.note.startswith("not counted")


def test_utilization_arithmetic_and_missing_inputs():
    u = stats.utilization(2e9, 0.01, 4e11)
    assert u["achieved_flops_per_s"] == pytest.approx(2e11) and u["mfu"] == pytest.approx(0.5)
    assert stats.utilization(None, 0.01, 4e11) == {"achieved_flops_per_s": None, "mfu": None}
    assert stats.utilization(2e9, 0.01, None)["mfu"] is None
    assert stats.format_flops(2.5e9) == "2.5 GFLOP"
    assert stats.format_flops(3.1e11, per_second=True) == "310 GFLOP/s"
    assert stats.format_flops(None) == "n/a"


def test_matmul_peak_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    from toolkit import devices

    monkeypatch.setenv(machine.CACHE_ENV, str(tmp_path))
    cpu = devices.select("cpu")
    first = flops.matmul_peak(cpu, "float32")
    assert first.source == "measured" and first.flops_per_s > 1e8
    assert first.runs == 7 and first.spread_pct >= 0  # the best of 7, and their spread

    def cached_spread(spread: float) -> None:  # as if the stored runs were that far apart
        stored = json.loads((tmp_path / flops.PEAK_FILE).read_text())
        for entry in stored.values():
            entry["result"]["spread_pct"] = spread
        (tmp_path / flops.PEAK_FILE).write_text(json.dumps(stored))

    for steady in (2.0, 20.0):  # within 25 %: the machine's, read from the cache for good
        cached_spread(steady)
        again = flops.matmul_peak(cpu, "float32")
        assert again.source == "cache" and again.flops_per_s == first.flops_per_s
    for measurement in (2, 3):  # measured on a busy machine: measured again, the higher kept
        cached_spread(40.0)
        fresh = flops.matmul_peak(cpu, "float32")
        assert fresh.source == "measured" and fresh.flops_per_s >= first.flops_per_s
        assert fresh.measurements == measurement
    cached_spread(40.0)  # three tries: a machine that is never quiet reads its cache
    assert flops.matmul_peak(cpu, "float32").source == "cache"
    stored = json.loads((tmp_path / flops.PEAK_FILE).read_text())
    (key,) = stored
    facts = stored[key]["facts"]
    assert first.key == key and facts["dtype"] == "float32" and facts["tensorflow"]
    # Another TF version is another key: the cached number is not reused for it.
    import tensorflow as tf

    monkeypatch.setattr(tf, "__version__", "0.0-other")
    assert flops.matmul_peak(cpu, "float32").source == "measured"
    assert len(json.loads((tmp_path / flops.PEAK_FILE).read_text())) == 2


def test_an_unwritable_cache_still_returns_the_peak(tmp_path, monkeypatch):
    from toolkit import devices

    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(machine.CACHE_ENV, str(blocked / "sub"))
    peak = flops.matmul_peak(devices.select("cpu"), "float32")
    assert peak.source == "measured" and not os.path.exists(blocked / "sub")


def test_a_peak_left_pending_before_fit_is_measured_after_it(tmp_path, monkeypatch, keras):
    """With --compile_cache the runner reads the peak from the cache only before fit (an op run
    then would rename the programs XLA's cache keys) and recheck_peak measures it after."""
    from toolkit import devices

    monkeypatch.setenv(machine.CACHE_ENV, str(tmp_path))
    cpu = devices.select("cpu")
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    compute = flops.compute_facts(model, 32, "float32", cpu, measure_peak=False)
    assert compute.flops_per_step and compute.peak_flops_per_s is None
    assert compute.peak_pending and not (tmp_path / flops.PEAK_FILE).exists()
    assert "peak_pending" not in compute.to_dict()  # the runner's, never in report.json
    compute = flops.recheck_peak(compute, 0.01, cpu)
    assert compute.peak_flops_per_s > 1e8 and compute.peak_source == "measured"
    assert not compute.peak_pending
    # Now cached: read before fit; a steady one leaves nothing for after fit, one measured on
    # a busy machine is read too (MFU per epoch) and measured again after fit.
    stored = json.loads((tmp_path / flops.PEAK_FILE).read_text())
    for spread, pending in ((2.0, False), (40.0, True)):
        for entry in stored.values():
            entry["result"]["spread_pct"] = spread
        (tmp_path / flops.PEAK_FILE).write_text(json.dumps(stored))
        cached = flops.compute_facts(model, 32, "float32", cpu, measure_peak=False)
        assert cached.peak_source == "cache" and cached.peak_pending is pending


def test_no_mfu_is_given_from_a_peak_measured_on_a_busy_machine():
    """A peak whose runs spread over 25 % would make MFU move with the machine's load: the
    summary and report.md give the spread and say why there is no MFU; within it, MFU is given
    with the spread beside it."""
    from toolkit.profiling._compute import Compute
    from toolkit.report import RunReport

    base = {"flops_per_step": 2e9, "achieved_flops_per_s": 1e11, "peak_flops_per_s": 2e11}
    for spread, mfu in ((36.0, None), (8.0, 0.5)):
        compute = {**base, "peak_spread_pct": spread, "mfu": mfu}
        report = RunReport(
            name="r", steps=stats.summarize([0.01] * 5), compute=Compute.from_dict(compute)
        )
        line = next(x for x in report.summary().splitlines() if x.startswith("compute:"))
        if mfu is None:
            assert "MFU" not in line.replace("no MFU", "") and "within 36%, over 25%" in line
        else:
            assert "MFU 50.0% of the measured" in line and "(runs within 8%)" in line
    assert not stats.reliable_peak(36.0) and stats.reliable_peak(25.0)
    assert stats.reliable_peak(None)  # a peak given, not measured: taken as given
