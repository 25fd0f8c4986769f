"""Inference timing: latency syncs every call, throughput once; first call and warm-up apart."""

from __future__ import annotations

import pytest
import tensorflow as tf

from toolkit.profiling.inference import measure_inference


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 0.5
        return self.t


def test_latency_and_throughput_with_a_counting_function():
    calls, reads = [], []

    class Result:
        def numpy(self):
            reads.append(len(calls))

    def fn(x):
        calls.append(x)
        return Result()

    timing = measure_inference(fn, 1, batch_size=4, warmup=2, runs=3, clock=Clock())
    assert len(calls) == 1 + 2 + 3 + 3
    # Latency reads each result right after its call; throughput reads all at the end.
    assert reads == [1, 2, 3, 4, 5, 6, 9, 9, 9]
    s = timing.latency
    assert s.timed_steps == 3 and s.warmup_steps == 2 and s.first_step_steps == 1
    assert s.p50_s == pytest.approx(0.5)
    assert timing.examples_per_sec == pytest.approx(4 * 3 / 0.5)
    assert timing.to_dict()["latency"]["batch_size"] == 4


def test_a_real_tf_function():
    fn = tf.function(lambda x: tf.matmul(x, x))
    timing = measure_inference(fn, tf.ones((8, 8)), batch_size=8, warmup=1, runs=3)
    assert timing.latency.timed_steps == 3 and timing.throughput_s > 0


def test_bad_counts():
    with pytest.raises(ValueError, match="runs must be >= 1"):
        measure_inference(lambda x: x, 1, batch_size=1, runs=0)
