"""Shared setup for the benchmarks: one ≈1 ms/step MLP fit, and the one ratio line.

Every benchmark prints ``name: X.XX× (baseline A s, toolkit B s)`` through
``toolkit.core.stats.speedup_line``, with X = baseline / toolkit time: X > 1 means the
toolkit's side is faster, X < 1 that it costs time (an overhead)."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from toolkit.core.stats import speedup_line

__all__ = ["mlp_fit_setup", "pin_cpus", "quiet_gc", "speedup_line", "timed_fit"]


def scratch(prefix: str) -> str:
    """A private temporary directory removed when the benchmark's process ends: a checkpoint,
    a trace or a cache of every run had stayed in the temporary directory for good."""
    import atexit
    import shutil
    import tempfile

    directory = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


def timed_fit(model, seconds: list[float]):
    """`model`, its ``fit`` timed around each call into `seconds`: the whole call (the data
    adapter, the optimizer's variables, the first call's trace and compile, the steps, the
    iterator's end), as a hand-written loop is timed, not only from its train-begin to its
    train-end callback (``report.fit_seconds``)."""
    import time

    fit = model.fit

    def fit_timed(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return fit(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - begin)

    model.fit = fit_timed
    return model


def pin_cpus(which: str) -> str:
    """Keeps this process (and every thread it starts from now on) on one core when `which`
    is ``"one"``; ``"all"`` leaves it where the OS put it. Call it before TensorFlow starts
    its threads. Returns what was done, for the benchmark's header line.

    Why one core: on this 2-core VM a small fit spread over both cores ran 5-15 % slower and
    3x noisier from fit to fit (paired ratios' middle half 0.05-0.065 wide, against
    0.015-0.029 on one core, same fits), and a callback has no idle core there to hide its
    own thread's work in: the harder and the quieter case to measure an overhead in.
    """
    if which == "all":
        return f"all {os.cpu_count()} cores"
    if not hasattr(os, "sched_setaffinity"):  # macOS, Windows: no affinity call
        return f"all {os.cpu_count()} cores (this OS cannot pin a process to one)"
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return f"pinned to core {core}"


def quiet_gc() -> None:
    """Collects the garbage of earlier fits before the next timed one (benchmark hygiene)."""
    import gc

    gc.collect()


def mlp_fit_setup(steps: int, batch_size: int = 32, width: int = 64, features: int = 32):
    """A compiled MLP and a dataset of `steps` batches held in memory (no input cost).

    On TensorFlow the batches are a cached ``tf.data`` pipeline; on JAX and PyTorch they are
    the toolkit's own NumPy batches (``array_batches``, a ``keras.utils.PyDataset``), so the
    benchmarks that use this setup also run where TensorFlow is not installed (a GPU machine
    with JAX or PyTorch alone measures StepTimer's own cost on a quiet host)."""
    import numpy as np

    from toolkit.core import compat

    keras = compat.keras()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * batch_size, features)).astype("float32")
    y = rng.integers(0, 10, size=steps * batch_size).astype("int32")
    if keras.backend.backend() == "tensorflow":
        ds = _tf_batches(x, y, batch_size)
    else:
        from toolkit.data.arrays import array_batches

        ds = array_batches((x, y), batch_size, drop_remainder=True)
    model = keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return keras, model, ds


def _tf_batches(x, y, batch_size: int):
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size, drop_remainder=True)
    # The data sits in memory, so tf.data autotuning has nothing to tune, and with it on,
    # destroying the iterator at the end of fit can block until the autotune thread's next
    # tick: its period doubles from 10 ms, so fits ended at 5.11 s or 10.23 s after the
    # iterator was made (measured here: up to 2.1 s of teardown, in about 1 fit in 4). That
    # wait is neither a training step nor a callback's doing, so it stays out of these runs.
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.cache().prefetch(2).with_options(options)
