"""Shared fixtures: tiny real Keras models and datasets (whichever Keras is selected)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Measured machine facts (the matmul peak) go to a cache of this test process's own, shared
# with the subprocesses its tests start, so a worker measures the peak at most once and nothing
# touches ~/.cache. Each pytest-xdist worker gets its own (the controller's, which it inherits,
# is marked as the tests' own): two workers writing one file would lose each other's entries.
# Removed at exit. A TOOLKIT_CACHE_DIR you set is kept.
if os.environ.get("TOOLKIT_CACHE_DIR") in (None, os.environ.get("TOOLKIT_TEST_CACHE")):
    _cache = tempfile.mkdtemp(prefix="toolkit-test-cache-")
    os.environ["TOOLKIT_CACHE_DIR"] = os.environ["TOOLKIT_TEST_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

import numpy as np
import pytest


@pytest.fixture(scope="session")
def keras():
    from toolkit.core import compat

    return compat.keras()


@pytest.fixture
def make_model(keras):
    """A tiny compiled MLP: ``make_model(steps_per_execution=1, jit_compile=None)``; None
    leaves ``jit_compile`` to Keras, as a user's ``compile`` does (JAX jits its step; on a
    CPU TensorFlow and PyTorch do not): a test on JAX times the step users run, not an
    op-by-op one."""

    def make(steps_per_execution: int = 1, jit_compile: bool | None = None, features: int = 8):
        model = keras.Sequential(
            [
                keras.Input((features,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(3),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            steps_per_execution=steps_per_execution,
            **({} if jit_compile is None else {"jit_compile": jit_compile}),
        )
        return model

    return make


@pytest.fixture
def make_dataset():
    """``make_dataset(batches, batch_size=8, features=8, drop_remainder=True)``."""
    import tensorflow as tf

    def make(batches: int, batch_size: int = 8, features: int = 8, extra: int = 0):
        rng = np.random.default_rng(0)
        n = batches * batch_size + extra
        x = rng.normal(size=(n, features)).astype("float32")
        y = rng.integers(0, 3, size=n).astype("int32")
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)

    return make


# The markers `make test` and `make test-next` run again in passes of their own. Those passes
# collect only the test files whose text sets the marker (`mark.NAME`, the Makefile's MARKED),
# so a marker set from anywhere else (a helper, a hook) would drop its tests without a word.
# A marker is for a test whose result the backend or the Keras version can change: a test of
# pure logic (parsing, statistics, rendering a hand-made record) runs once, in the main pass.
PASS_MARKERS = ("every_backend", "legacy_keras", "next_keras")


def pytest_collection_modifyitems(config, items):
    _check_pass_markers(items)
    # The long tests first (marked long: about 20 s or more on 2 cores), so that no pass ends
    # on one worker running one while the other has nothing left: the main pass once ended
    # with the README example's 75 s on one worker and the other idle. pytest-xdist's
    # worksteal hands each worker a half and moves the tail of the busier one's queue to the
    # one that runs out, so with the long tests at the head the last ones are short. The order
    # is the same in every worker, as xdist requires: a stable sort of the collected order.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def _check_pass_markers(items) -> None:
    texts: dict[str, str] = {}
    for item in items:
        for name in PASS_MARKERS:
            if item.get_closest_marker(name) is None:
                continue
            path = str(item.path)
            if path not in texts:
                texts[path] = item.path.read_text(encoding="utf-8")
            if f"mark.{name}" not in texts[path]:
                raise pytest.UsageError(
                    f"{item.nodeid}: marked {name} from outside its file; mark it in "
                    f"{item.path.name} (the Makefile's marked passes collect by file text)"
                )
