"""Timing discipline with injected clocks, and the n/a paths with faked devices."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from toolkit.bench import measure
from toolkit.devices import DeviceInfo

METAL = DeviceInfo("metal", "/physical_device:GPU:0", 0, "METAL")


class FakeCall:
    """A call that costs `cost` seconds of fake clock; counts calls and waits."""

    def __init__(self, cost: float, first: float = 0.5):
        self.now, self.cost, self.first = 0.0, cost, first
        self.calls, self.waits = 0, 0

    def clock(self) -> float:
        return self.now

    def __call__(self) -> int:
        self.now += self.first if self.calls == 0 else self.cost
        self.calls += 1
        return self.calls

    def wait(self, result: int) -> None:
        self.waits += 1


def test_first_call_apart_loop_calibrated_one_wait_per_loop():
    call = FakeCall(cost=0.001)
    timing = measure.time_calls(call, repeats=5, min_time_s=0.02, clock=call.clock, wait=call.wait)
    assert timing.first_call_ms == pytest.approx(500.0)  # the first call, kept out
    assert timing.ms == pytest.approx(1.0)
    assert timing.calls * 0.001 >= 0.02  # a timed loop lasts at least min_time_s
    assert len(timing.repeats_ms) == 5 and timing.spread_pct == pytest.approx(0.0)
    # One host sync per loop, never per call: far fewer waits than calls.
    assert call.waits < call.calls / 10


def test_slow_calls_are_timed_one_per_loop():
    call = FakeCall(cost=0.5, first=1.0)
    timing = measure.time_calls(call, repeats=3, min_time_s=0.02, clock=call.clock, wait=call.wait)
    assert timing.calls == 1 and timing.ms == pytest.approx(500.0)
    assert call.calls == 1 + 1 + 3  # first, one calibration loop, the repeats


def test_spread_is_robust():
    costs = iter([1.0, 1.0, 0.010, 0.011, 0.009, 0.010, 0.050])  # first, calibration, repeats
    now = [0.0]

    def call():
        now[0] += next(costs)

    timing = measure.time_calls(
        call, repeats=5, min_time_s=0.0, clock=lambda: now[0], wait=lambda _: None
    )
    assert timing.ms == pytest.approx(10.0)  # the median ignores the 50 ms outlier
    assert timing.spread_pct == pytest.approx(14.826, rel=1e-3)


def test_bad_timing_arguments():
    with pytest.raises(ValueError, match="repeats"):
        measure.time_calls(lambda: None, repeats=0)


def test_modes_and_labels():
    assert measure.select_modes(["xla", "EAGER"]) == ("eager", "xla")
    with pytest.raises(ValueError, match="unknown mode 'jit'"):
        measure.select_modes(["jit"])
    cpu = DeviceInfo("cpu", "/physical_device:CPU:0", 0, "cpu")
    gpus = [DeviceInfo("cuda", f"/physical_device:GPU:{i}", i, "H100") for i in range(2)]
    assert list(measure.device_labels([cpu, *gpus]).values()) == ["cpu", "cuda0", "cuda1"]
    assert list(measure.device_labels([cpu, METAL]).values()) == ["cpu", "metal"]


def test_xla_on_metal_is_na_with_the_reason_before_trying():
    import tensorflow as tf

    timing, reason = measure.run_case(tf.nn.relu, [tf.ones(3)], METAL, "xla")
    assert timing is None and "XLA does not compile for the METAL device" in reason
    assert measure.unsupported(METAL, "graph") is None


def test_a_mode_that_fails_is_na_with_the_error_not_a_crash():
    import tensorflow as tf

    from toolkit import devices

    def host_only(x):  # py_function cannot be compiled by XLA
        return tf.py_function(lambda v: v * 2, [x], tf.float32)

    cpu = devices.resolve("cpu")
    timing, reason = measure.run_case(host_only, [tf.ones(3)], cpu, "xla", repeats=1)
    assert timing is None and reason.split(":")[0].endswith("Error")
    timing, reason = measure.run_case(host_only, [tf.ones(3)], cpu, "graph", repeats=1)
    assert timing is not None and reason is None


def test_benchmark_runs_every_cell_on_the_cpu():
    from toolkit import devices

    table = measure.benchmark(
        ["ReLU", "Sort"],
        ["eager", "xla"],
        size="tiny",
        devices=[devices.resolve("cpu")],
        repeats=2,
        min_time_s=0.001,
    )
    assert table.columns == ["cpu_eager", "cpu_xla"]
    assert len(table.results) == (2 + 3) * 2
    assert all(m.timing and m.timing.ms > 0 for m in table.results)
    assert set(table.floors) == {"cpu_eager", "cpu_xla"} and all(table.floors.values())
    assert table.environment["tensorflow"]


def test_framework_modes_beside_tensorflows(monkeypatch):
    """JAX's jit and PyTorch eager as columns on their own device, with their per-call floor;
    a framework that is not installed is n/a with what installs it."""
    from toolkit import devices
    from toolkit.bench import frameworks

    assert measure.select_modes(["torch_eager", "eager"]) == ("eager", "torch_eager")
    assert measure.select_modes(["all"]) == measure.ALL_MODES
    wanted = [m for m in ("jax_jit", "torch_eager") if not frameworks.missing(m)]
    if not wanted:
        pytest.skip("neither JAX nor PyTorch is installed")
    table = measure.benchmark(
        ["MatMul"], ["xla", *wanted], size="tiny", devices=[devices.resolve("cpu")],
        repeats=2, min_time_s=0.001,
    )  # fmt: skip
    assert table.columns == ["cpu_xla", *(f"cpu_{m}" for m in wanted)]
    assert all(m.timing and m.timing.ms > 0 for m in table.results), [
        m.reason for m in table.results
    ]
    assert all(table.floors[c] for c in table.columns)
    assert table.settings["modes"] == ["xla", *wanted]
    monkeypatch.setitem(sys.modules, "torch", None)  # as where PyTorch is not installed
    timing, reason = measure.run_framework_case(
        "ReLU", None, [np.ones(3, "float32")], "torch_eager"
    )
    # the install named as it works from a wheel, not only in a checkout (``.[torch]``)
    assert timing is None
    assert "torch is not installed (pip install 'keras-perf-toolkit[torch]')" in reason


def test_benchmark_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        measure.benchmark(["ReLU"], size="huge", devices=[])
    with pytest.raises(ValueError, match="unknown dtype 'float33'"):
        measure.benchmark(["ReLU"], dtype="float33", devices=[])
