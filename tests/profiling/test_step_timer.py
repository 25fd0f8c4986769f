"""StepTimer inside real fit runs (tiny models, few steps), and around a custom loop."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf

from toolkit import backend
from toolkit.core import compat
from toolkit.data import infer_batch_size
from toolkit.profiling.step_timer import StepTimer

TORCH = backend.name() == "torch"
NO_SPE = pytest.mark.skipif(TORCH, reason="Keras's PyTorch backend has no steps_per_execution")


class FakeClock:
    def __init__(self, times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_standalone_timer_with_injected_clock():
    # start at 0; steps end at 1.0 (first: tracing), 1.1, 1.2 (warm-up 1), 1.25, 1.30, 1.40
    timer = StepTimer(
        warmup_steps=1, batch_size=10, clock=FakeClock([0, 1.0, 1.1, 1.25, 1.3, 1.4, 2.0])
    )
    with timer:
        for _ in range(5):
            timer.step()
    s = timer.summary()
    assert s.first_step_s == pytest.approx(1.0)
    assert s.warmup_steps == 1
    assert s.timed_steps == 3
    assert s.total_s == pytest.approx(0.15 + 0.05 + 0.10)
    assert s.p50_s == pytest.approx(0.10)
    assert s.examples_per_sec == pytest.approx(10 / 0.1)
    assert timer.fit_seconds == pytest.approx(2.0)


def test_standalone_step_counts_several_steps():
    timer = StepTimer(warmup_steps=0, clock=FakeClock([0, 1, 2, 4, 5]))
    timer.start()
    timer.step(4)  # first
    timer.step(4)
    timer.step(8)
    timer.stop()
    s = timer.summary()
    assert (s.first_step_steps, s.timed_steps, s.samples) == (4, 12, 2)
    assert s.mean_s == pytest.approx(3 / 12)
    assert s.p50_s == pytest.approx(0.25)


def test_step_before_start_is_a_clear_error():
    with pytest.raises(RuntimeError, match="before start"):
        StepTimer().step()


def test_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        StepTimer(warmup_steps=-1)
    with pytest.raises(ValueError, match="batch_size"):
        StepTimer(batch_size=0)


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_fit_counts_every_step(make_model, make_dataset):
    ds = make_dataset(12)
    timer = StepTimer(warmup_steps=3, data=ds)
    make_model().fit(ds, epochs=2, verbose=0, callbacks=[timer])
    s = timer.summary()
    assert s.batch_size == 8
    assert s.total_steps == 24
    assert (s.first_step_steps, s.warmup_steps, s.timed_steps) == (1, 3, 20)
    assert [e.steps for e in timer.epochs] == [12, 12]
    assert all(e.seconds >= e.step_seconds > 0 for e in timer.epochs)
    assert set(timer.last_logs) >= {"loss", "accuracy"}
    assert s.examples_per_sec == pytest.approx(8 / s.mean_s)
    assert timer.fit_seconds >= sum(e.seconds for e in timer.epochs)


def test_fits_are_summarized_when_read_not_inside_the_fit(monkeypatch, make_model, make_dataset):
    """A fit's statistics are kept as its executions and summarized when :attr:`fits` is
    first read (a sort of every step, outside the user's fit), then kept: the same figures
    as :meth:`summary`, for a fit that ended and one that raised; the fit after the one that
    raised is timed, not refused as a second fit (its train end never came)."""
    from absl import logging as absl_logging

    from toolkit.profiling import step_timer

    said = []
    monkeypatch.setattr(absl_logging, "warning", lambda m, *a: said.append(m % a if a else m))
    summarized = []
    real = step_timer.summarize_calls
    monkeypatch.setattr(step_timer, "summarize_calls", lambda *a: summarized.append(a) or real(*a))
    timer, model = StepTimer(warmup_steps=1), make_model()
    model.fit(make_dataset(6), epochs=2, verbose=0, callbacks=[timer])

    class Raise(compat.keras().callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 3:
                raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        model.fit(make_dataset(6), epochs=1, verbose=0, callbacks=[timer, Raise()])
    model.fit(make_dataset(4), epochs=1, verbose=0, callbacks=[timer])
    assert summarized == []  # nothing sorted inside the fits
    first, raised, last = timer.fits
    assert len(summarized) == 3 and timer.fits[0] is first and len(summarized) == 3
    assert (first.total_steps, raised.total_steps, last.total_steps) == (12, 3, 4)
    assert last == timer.summary() and said == []


@pytest.mark.every_backend
def test_a_step_compiled_again_for_a_ragged_batch_is_counted_not_timed(make_model):
    """JAX compiles the step again for a last batch of another shape (100 examples in batches
    of 32): that execution is a compile, counted as the first one is, never a step's time
    (it took 1.5 s against 50 ms steps in a user's LSTM, and the mean doubled); the ledger
    places the same recompile. Where a backend's compiles carry no clock stamp (TensorFlow's
    tracing counts, PyTorch's) every step stays timed."""
    x = np.random.default_rng(0).random((100, 8)).astype("float32")
    y = np.arange(100) % 3
    timer = StepTimer(warmup_steps=1)
    on_jax = backend.name() == "jax"
    model = make_model()  # Keras's choice: on JAX one jitted program, as users run it
    model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[timer])
    s = timer.summary()
    kinds = [c[3] for c in timer.calls]
    assert s.total_steps == 12 and kinds.count("compiled") == s.compiled_steps
    assert s.timed_steps == 12 - 1 - 1 - s.compiled_steps
    assert ("compiled again" in str(s)) == (s.compiled_steps > 0)
    if on_jax:  # epoch 1's last batch; the later epochs read the same program again
        assert kinds[3] == "compiled" and s.compiled_steps == 1, kinds
        again = [c for c in timer.ledger().compiles if not c.first and c.function == "train"]
        assert [(c.epoch, c.step) for c in again] == [(0, 3)], again
        assert "steps run: 12 = first 1 + warm-up 1 + compiled again 1 + timed 9" in str(s)


@pytest.mark.legacy_keras
@pytest.mark.every_backend
@pytest.mark.parametrize("batches", [12, 13])  # 13: the last execution of each epoch is partial
@NO_SPE
def test_fit_with_steps_per_execution_reports_per_step(make_model, make_dataset, batches):
    ds = make_dataset(batches)
    timer = StepTimer(warmup_steps=4, batch_size=8)
    make_model(steps_per_execution=4).fit(
        ds, epochs=2, verbose=0, callbacks=[timer], validation_data=make_dataset(2)
    )
    s = timer.summary()
    executions_per_epoch = -(-batches // 4)
    assert s.total_steps == 2 * batches
    assert len(timer.calls) == 2 * executions_per_epoch  # one sample per execution
    assert s.first_step_steps == 4 and s.warmup_steps == 4
    assert s.steps_per_execution == 4
    assert [c[1] for c in timer.calls[:executions_per_epoch]][-1] == (4 if batches == 12 else 1)
    # Per-step figures: a sample's per-step time is its duration over its steps.
    timed = [c for c in timer.calls if c[3] == "timed"]
    assert s.max_s == pytest.approx(max(c[0] / c[1] for c in timed))
    assert s.mean_s == pytest.approx(sum(c[0] for c in timed) / sum(c[1] for c in timed))


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_fit_unknown_length_dataset_drops_the_end_of_data_probe(make_model):
    x = np.random.default_rng(0).normal(size=(80, 8)).astype("float32")
    y = np.zeros(80, "int32")

    def gen():
        for i in range(0, 80, 8):
            yield x[i : i + 8], y[i : i + 8]

    ds = tf.data.Dataset.from_generator(
        gen,
        output_signature=(
            tf.TensorSpec((None, 8), tf.float32),
            tf.TensorSpec((None,), tf.int32),
        ),
    )
    assert int(ds.cardinality()) < 0  # unknown
    timer = StepTimer(warmup_steps=0, data=ds)
    with pytest.warns(UserWarning) if not compat.use_legacy_keras() else _nothing():
        make_model().fit(ds, epochs=2, verbose=0, callbacks=[timer])
    assert timer.batch_size is None  # nothing static, no batching stage to read
    assert [e.steps for e in timer.epochs] == [10, 10]


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_fit_stopped_at_a_batch_end_counts_the_step_it_stopped_after(keras, make_model):
    """A callback that stops training at a batch end (before the epoch's last): that step ran,
    and it is counted, though StepTimer stamps only each epoch's last end where steps don't
    overlap the host."""

    class StopAt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 5:
                self.model.stop_training = True

    x = np.random.default_rng(0).normal(size=(80, 8)).astype("float32")
    y = np.zeros(80, "int32")
    timer = StepTimer(warmup_steps=0)
    make_model().fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[timer, StopAt()])
    assert [e.steps for e in timer.epochs] == [6]
    assert sum(c[1] for c in timer.calls) == 6 and timer.summary().total_steps == 6


@pytest.mark.legacy_keras
@pytest.mark.every_backend
@pytest.mark.parametrize("length", ["known", "unknown"])
def test_fit_whose_data_ends_before_its_steps_counts_the_steps_fed(make_model, length):
    """``steps_per_epoch`` past the data: the steps the data fed are counted, and none more,
    whether Keras knew the data's length (no step begins past it; the ends went unstamped) or
    not (a step begins that the data cannot feed)."""
    x = np.random.default_rng(0).normal(size=(48, 8)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, np.zeros(48, "int32"))).batch(8)
    if length == "unknown":
        ds = ds.filter(lambda *_: True)
    assert (int(ds.cardinality()) < 0) == (length == "unknown")
    timer = StepTimer(warmup_steps=0)
    with pytest.warns(UserWarning) if not compat.use_legacy_keras() else _nothing():
        make_model().fit(ds, steps_per_epoch=10, epochs=1, verbose=0, callbacks=[timer])
    assert [e.steps for e in timer.epochs] == [6]
    assert timer.summary().total_steps == 6


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_infer_batch_size(make_dataset):
    assert infer_batch_size(make_dataset(3, batch_size=5)) == 5  # nominal, last may be partial
    fixed = tf.data.Dataset.range(20).batch(4, drop_remainder=True).prefetch(1)
    assert infer_batch_size(fixed) == 4  # static dimension
    assert infer_batch_size(tf.data.Dataset.range(3)) is None  # unbatched
    assert infer_batch_size(np.zeros((4, 2))) is None
    # A mixup pipeline: two batched datasets zipped, a map over the pairs (batch -> zip -> map).
    x = tf.data.Dataset.from_tensor_slices(np.zeros((50, 3), "float32")).shuffle(8).batch(16)
    mixed = tf.data.Dataset.zip((x, x)).map(lambda a, b: (0.5 * a + 0.5 * b, a)).prefetch(2)
    assert infer_batch_size(mixed) == 16
    assert infer_batch_size(x.concatenate(x).repeat()) == 16


def test_a_pipeline_that_hides_its_batch_takes_the_batch_size_you_pass():
    from toolkit.data._fit_data import fit_dataset

    rows = tf.data.Dataset.from_generator(
        lambda: iter([np.zeros((8, 3), "float32")] * 4),
        output_signature=tf.TensorSpec((None, 3), tf.float32),
    )
    assert infer_batch_size(rows) is None
    assert fit_dataset(rows)[2] is None
    assert fit_dataset(rows, batch_size=8)[2] == 8  # yours, used where the pipeline is silent


def _plain_grain(batches: int, batch_size: int = 8):
    """A plain Grain dataset of your own (Keras 3's fit reads it through its Grain adapter):
    source, shuffle, map, batch; the model of ``conftest``'s ``make_model`` fits on it."""
    grain = pytest.importorskip("grain")
    if compat.keras_flavor() != "keras3":
        pytest.skip("tf_keras's fit does not read Grain datasets")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batches * batch_size, 8)).astype("float32")
    y = rng.integers(0, 3, size=len(x)).astype("int32")
    examples = grain.MapDataset.source(list(zip(x, y, strict=True))).shuffle(seed=0)
    return examples.map(lambda e: (e[0], e[1])).batch(batch_size)


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_fit_on_a_plain_grain_dataset_counts_every_step_with_examples_per_sec(make_model):
    """The batch size read from your Grain dataset's batch stage (a MapDataset, and the
    IterDataset it becomes), without reading it: examples/s in the summary and the logs."""
    plain = _plain_grain(5)
    for data in (plain, plain.to_iter_dataset()):
        timer = StepTimer(warmup_steps=1, data=data)
        # Each epoch reads it anew to its end (with steps_per_epoch, Keras on TensorFlow
        # reads on from where the last epoch stopped: a finite dataset runs out).
        history = make_model().fit(data, epochs=2, verbose=0, callbacks=[timer])
        s = timer.summary()
        assert s.batch_size == 8 and s.total_steps == 10, (type(data).__name__, s)
        assert (s.first_step_steps, s.warmup_steps, s.timed_steps) == (1, 1, 8)
        assert [e.steps for e in timer.epochs] == [5, 5]
        assert s.examples_per_sec == pytest.approx(8 / s.mean_s)
        assert len(history.history["examples_per_sec"]) == 2


# ---------------------------------------------------------------------------- structural promises


class Poison:
    """A stand-in for a tensor: any attempt to read it fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"StepTimer read a log value (.{name})")

    def __float__(self):
        raise AssertionError("StepTimer converted a log value to float")

    def __array__(self, *args, **kwargs):
        raise AssertionError("StepTimer converted a log value to an array")

    def __bool__(self):
        raise AssertionError("StepTimer evaluated a log value")


def test_batch_hooks_never_read_logs():
    timer = StepTimer(warmup_steps=0)
    timer.set_params({"steps": 3, "epochs": 1})
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    for batch in range(3):
        timer.on_train_batch_begin(batch, logs={"loss": Poison()})
        timer.on_train_batch_end(batch, logs={"loss": Poison(), "accuracy": Poison()})
    timer.on_epoch_end(0, logs={})
    assert timer.summary().total_steps == 3


def _modules_called_during(fn, *args, **kwargs):
    """The modules of every function `fn` calls, but those under the memory census: once a fit,
    at a batch begin, it lists the live arrays through the framework (no device sync)."""
    from toolkit.profiling._memory import MemorySampler

    census = MemorySampler.census_now.__code__
    called, inside = set(), []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code is census:
            inside.append(frame)
        elif event == "return" and inside and frame is inside[-1]:
            inside.pop()
        elif inside:
            return
        elif event == "call":
            called.add(frame.f_globals.get("__name__", "?"))
        elif event == "c_call":
            called.add(getattr(arg, "__module__", None) or "builtins")

    sys.setprofile(tracer)
    try:
        fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return called


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_batch_hooks_call_no_tensorflow_in_a_real_fit(make_model, make_dataset):
    """Every function the batch hooks call, traced in a real fit: none is a framework, Keras or
    NumPy, so none can sync a device, on any backend. The one exception is the backend's
    profiler probe, which reads a flag (PyTorch's also calls a C function of ``torch._C``):
    what the probe calls on its own is allowed."""
    from toolkit import backend

    probe = backend.get().profiler_probe()
    allowed = {getattr(probe, "__module__", None), *_modules_called_during(probe)}
    seen: set[str] = set()
    calls = {"begin": 0, "end": 0}

    class Traced(StepTimer):  # the class's hooks: each fit's own hooks are set on the instance
        def on_train_batch_begin(self, *args, **kwargs):
            calls["begin"] += 1
            seen.update(_modules_called_during(super().on_train_batch_begin, *args, **kwargs))

        def on_train_batch_end(self, *args, **kwargs):
            calls["end"] += 1
            seen.update(_modules_called_during(super().on_train_batch_end, *args, **kwargs))

    timer = Traced(warmup_steps=1)
    model = make_model(steps_per_execution=1 if TORCH else 2)
    model.fit(make_dataset(8), epochs=2, verbose=0, callbacks=[timer])
    assert timer.summary().total_steps == 16
    frameworks = {"tensorflow", "keras", "tf_keras", "numpy", "jax", "jaxlib", "torch"}
    forbidden = [m for m in seen if m.split(".")[0] in frameworks and m not in allowed]
    assert not forbidden, f"batch hooks called into {forbidden}"
    assert seen  # the tracer did run
    # Every begin ran the hook, and every end but where neither needs it (issue 77): TensorFlow
    # on Keras 3 (steps don't overlap the host; no step begins that the data can't feed)
    # stamps each epoch's last end only, its other ends a C-level no-op.
    executions = 16 if TORCH else 8
    last_only = backend.name() == "tensorflow" and not compat.use_legacy_keras()
    assert calls == {"begin": executions, "end": 2 if last_only else executions}, calls


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_adding_the_timer_does_not_make_keras_sync_logs_per_step(keras):
    """tf_keras converts logs to NumPy at each batch end when a callback lacks
    _supports_tf_logs; Keras 3 stops dispatching batch ends asynchronously when a callback is
    not async_safe. Adding StepTimer must change neither from a run without callbacks."""
    timer = StepTimer()
    with_timer = keras.callbacks.CallbackList([timer])
    without = keras.callbacks.CallbackList([])
    if compat.use_legacy_keras():
        assert with_timer._supports_tf_logs
        assert with_timer._batch_hooks_support_tf_logs
    else:
        assert timer.async_safe
        assert with_timer._async_train == without._async_train


def test_log_steps_prints_the_recent_window_without_the_first_step():
    lines = []
    # first step 1.0 s (tracing), then steps of 0.1, 0.1, 0.2, 0.2, 0.4 s
    clock = FakeClock([0, 1.0, 1.1, 1.2, 1.4, 1.6, 2.0, 2.5])
    timer = StepTimer(warmup_steps=0, batch_size=10, clock=clock, log_steps=2, log_fn=lines.append)
    with timer:
        for _ in range(6):
            timer.step()
    assert lines == [
        "step 3: 100.000 ms/step over the last 2 steps, 100.0 examples/s",
        "step 5: 200.000 ms/step over the last 2 steps, 50.0 examples/s",
    ]
    with pytest.raises(ValueError, match="log_steps"):
        StepTimer(log_steps=0)


def test_log_steps_on_an_asynchronous_backend_say_when_steps_ended(monkeypatch):
    """JAX queues steps ahead of the device: begins 1 ms apart, steps ending 100 ms apart.
    The lines say the device's 100 ms (as the summary does), not the host's 1 ms; the first
    execution opens the first window, and the second epoch's window opens at its first begin
    (its validation before it left out)."""
    from toolkit.profiling import step_timer

    monkeypatch.setattr(step_timer, "_asynchronous", lambda: True)
    now, lines = [0.0], []
    timer = StepTimer(warmup_steps=0, batch_size=10, log_steps=2, log_fn=lines.append,
                      clock=lambda: now[0])  # fmt: skip
    timer.set_params({"steps": 5, "epochs": 2})
    timer.on_train_begin()
    for epoch, start in ((0, 0.0), (1, 10.0)):
        now[0] = start
        timer.on_epoch_begin(epoch)
        for batch in range(5):  # queued 1 ms apart
            now[0] = start + 0.001 * batch
            timer.on_train_batch_begin(batch)
        for batch in range(5):  # over 100 ms apart (the first: 1 s with its compile)
            now[0] = start + (1.0 if epoch == 0 else 0.1) + 0.1 * batch
            timer.on_train_batch_end(batch)
        timer.on_epoch_end(epoch)
    timer.on_train_end()
    assert lines == [
        "step 3: 100.000 ms/step over the last 2 steps, 100.0 examples/s",
        "step 5: 100.000 ms/step over the last 2 steps, 100.0 examples/s",
        "step 7: 100.000 ms/step over the last 2 steps, 100.0 examples/s",
        "step 9: 100.000 ms/step over the last 2 steps, 100.0 examples/s",
    ]
    assert timer.summary().p50_s == pytest.approx(0.1)


def test_log_steps_count_ends_that_arrive_out_of_order_in_their_executions_order(monkeypatch):
    """Keras's callback threads deliver an execution's end in any order (a fit of 6
    executions of 2 steps delivered 1, 3, 7, 5, 11, 9), each naming the execution's last
    step. The lines count executions in their begins' order, each as a whole: an end that
    comes early waits for the ones before it, and the last execution is not taken for a
    1-step remainder."""
    from toolkit.profiling import step_timer

    monkeypatch.setattr(step_timer, "_asynchronous", lambda: True)
    monkeypatch.setattr(step_timer.compat, "steps_per_execution", lambda model: 2)
    now, lines = [0.0], []
    timer = StepTimer(warmup_steps=0, log_steps=4, log_fn=lines.append, clock=lambda: now[0])
    timer.set_params({"steps": 12, "epochs": 1})
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    for batch in range(0, 12, 2):  # queued 1 ms apart
        now[0] = 0.001 * batch
        timer.on_train_batch_begin(batch)
    for last, at in ((1, 1.0), (3, 1.2), (7, 1.6), (5, 1.6), (11, 2.0), (9, 2.0)):
        now[0] = at
        timer.on_train_batch_end(last)
    timer.on_epoch_end(0)
    timer.on_train_end()
    # The window opens after steps 0-1; steps 2-5 ended by 1.6 s (5's end came then), 6-9
    # by 2.0 s; steps 10-11 fill no window.
    assert lines == [
        "step 6: 150.000 ms/step over the last 4 steps",
        "step 10: 100.000 ms/step over the last 4 steps",
    ]


@pytest.mark.legacy_keras
@pytest.mark.every_backend
@NO_SPE
def test_log_steps_in_fit_with_steps_per_execution(make_model, make_dataset):
    lines, seen_before_epoch_end = [], []
    timer = StepTimer(warmup_steps=0, log_steps=4, log_fn=lines.append)
    # Runs before the timer's own epoch end: the lines came as the steps did, not at the end.
    early = compat.keras().callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen_before_epoch_end.extend(lines)
    )
    make_model(steps_per_execution=2).fit(make_dataset(12), callbacks=[early, timer], verbose=0)
    # 6 executions of 2 steps; the first (steps 1-2) is apart, then a line per 4 steps.
    assert [line.split(":")[0] for line in lines] == ["step 6", "step 10"]
    assert [line.split(":")[0] for line in seen_before_epoch_end] == ["step 6", "step 10"]
    assert all("ms/step over the last 4 steps" in line for line in lines)


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_where_a_step_ends_on_each_backend(make_model, make_dataset):
    """TensorFlow's steps end at the next batch begin, and PyTorch's on a CPU (a step runs as
    it is called); on JAX and PyTorch on a GPU (asynchronous) the epoch is timed at batch ends
    when the device was behind. Either way an epoch's executions tile it, from its first
    begin to where the last one ended."""
    timer = StepTimer(warmup_steps=0)
    make_model().fit(make_dataset(9), epochs=1, verbose=0, callbacks=[timer])
    on_gpu = backend.name() == "torch" and backend.get().dispatches_asynchronously()
    asynchronous = compat.keras_flavor() == "keras3" and (backend.name() == "jax" or on_gpu)
    assert timer._async is asynchronous
    assert timer.boundary in (("begin", "end") if asynchronous else ("begin",))
    assert sum(c[1] for c in timer.calls) == 9
    if timer.boundary == "end":
        first_begin = timer._begins[0][1]
        last_end = max(t for _, t, *_ in timer._end_marks)
        assert sum(c[0] for c in timer.calls) == pytest.approx(last_end - first_begin, abs=1e-9)


def _drive(timer, begins, ends, steps=4):
    """One epoch of `steps` single-step executions through the hooks, by hand: the clock reads
    each begin, then the ends (as Keras's callback thread would deliver them), then the epoch
    end."""
    timer.set_params({"steps": steps, "epochs": 1})
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    for batch in range(steps):
        timer.on_train_batch_begin(batch)
        timer.on_train_batch_end(batch)
    timer.on_epoch_end(0)
    timer.on_train_end()


@pytest.mark.parametrize(
    ("begins", "ends", "boundary", "durations"),
    [
        # The device behind: begins 1 ms apart, the steps finish 10 ms apart.
        ([0.0, 0.001, 0.002, 0.003], [0.010, 0.020, 0.030, 0.040], "end", [0.010] * 4),
        # The host behind: the ends come soon after each begin; begins are the boundaries.
        ([0.0, 0.010, 0.020, 0.030], [0.001, 0.011, 0.021, 0.031], "begin", [0.010] * 3 + [0.001]),
        # Stamps out of order (Keras's pool of callback threads on a busy machine): steps 1
        # and 2 were both over by 30 ms, so they share the 20 ms after step 0's end.
        (
            [0.0, 0.001, 0.002, 0.003],
            [0.010, 0.035, 0.030, 0.040],
            "end",
            [0.010] * 4,
        ),
        # A short queue: 4 steps of 3 ms queued in 0.3 ms, the last done 12 ms later (under
        # the 20 ms a late callback thread could explain), the ends spread as a queue runs
        # out: the device's 3 ms, not the host's 0.1.
        ([0.0, 0.0001, 0.0002, 0.0003], [0.003, 0.006, 0.009, 0.012], "end", [0.003] * 4),
        # The host behind, its ends stamped late and bunched (its callback threads kept from
        # running): the begins stay the boundaries.
        (
            [0.0, 0.001, 0.002, 0.003],
            [0.0045, 0.005, 0.0055, 0.006],
            "begin",
            [0.001, 0.001, 0.001, 0.003],
        ),
        # Every end stamped at once, long after the host queued the steps: Keras's callback
        # threads could not run (a busy host), so the stamps say nothing: begins kept.
        ([0.0, 0.001, 0.002, 0.003], [0.040] * 4, "begin", [0.001] * 3 + [0.037]),
        # A tie whose even share would end step 1 before step 2 began: no step ends before
        # the host began the next one (steps 0-2 share 20 ms: 6.7 ms, then to 16 ms, then 4).
        (
            [0.0, 0.001, 0.016, 0.017],
            [0.020, 0.020, 0.020, 0.040],
            "end",
            [0.02 / 3, 0.016 - 0.02 / 3, 0.004, 0.020],
        ),
    ],
)
def test_asynchronous_epochs_are_timed_where_steps_ended(
    monkeypatch, begins, ends, boundary, durations
):
    from toolkit.profiling import step_timer

    monkeypatch.setattr(step_timer, "_asynchronous", lambda: True)
    reads = [0.0]  # train begin
    reads += [0.0]  # epoch begin
    for b, e in zip(begins, ends, strict=True):
        reads += [b, e]
    reads += [ends[-1] + 0.001] * 3  # epoch end, train end
    timer = StepTimer(warmup_steps=0, clock=FakeClock(reads))
    _drive(timer, begins, ends)
    assert timer.boundary == boundary
    assert [c[0] for c in timer.calls] == pytest.approx(durations, abs=1e-9)
    assert sum(c[0] for c in timer.calls) == pytest.approx(sum(durations), abs=1e-9)


def test_a_trace_that_waited_for_the_device_leaves_out_only_its_steps(monkeypatch):
    """The device behind the host (JAX): steps 0-3 dispatched 1 ms apart, 100 ms each on the
    device, a trace started at
    batch 4's begin after waiting for the device (``PROFILER.synced``), and the end hooks of
    steps 0-3 delivered late, after the start, as Keras's callback thread does. Those steps
    ended before the trace: only steps 4 and 5, traced, are left out."""
    from collections import Counter

    from toolkit.core.events import PROFILER
    from toolkit.profiling import step_timer

    monkeypatch.setattr(step_timer, "_asynchronous", lambda: True)
    monkeypatch.setattr(PROFILER, "synced", {})
    begins = [0.0, 0.001, 0.002, 0.003, 0.401, 0.402]
    ends = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    timer = StepTimer(warmup_steps=0, clock=FakeClock([0.0, 0.0, *begins, *ends, *[0.601] * 3]))
    timer.set_params({"steps": 6, "epochs": 1})
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    try:
        for batch in range(6):
            timer.on_train_batch_begin(batch)
            if batch == 4:  # TraceWindow's start, after StepTimer's hook and the device's wait
                PROFILER.started(synced_at=0.4005)
        for batch in range(6):  # the callback thread, behind
            timer.on_train_batch_end(batch)
        timer.on_epoch_end(0)
        timer.on_train_end()
    finally:
        PROFILER.stopped()
    assert timer.boundary == "end"
    assert Counter(c[3] for c in timer.calls) == {"first": 1, "timed": 3, "excluded": 2}
    assert [c[3] for c in timer.calls][4:] == ["excluded", "excluded"]


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_a_second_fit_on_one_timer_is_left_untimed_and_never_mixed(
    make_model, make_dataset, monkeypatch
):
    """A callback that runs a fit of its own with the same timer, and two threads fitting
    with one timer: the fit the timer began with is timed whole (its steps, epochs and
    ledger), the other is left untimed with one warning, and neither fit stops."""
    import threading

    from absl import logging as absl_logging

    said = []
    monkeypatch.setattr(absl_logging, "warning", lambda m, *a: said.append(m % a if a else m))
    timer = StepTimer(warmup_steps=0)
    inner = make_model()

    class Nested(compat.keras().callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            inner.fit(make_dataset(5), epochs=1, verbose=0, callbacks=[timer])

    make_model().fit(make_dataset(10), epochs=2, verbose=0, callbacks=[timer, Nested()])
    assert sum(c[1] for c in timer.calls) == 20 and len(timer.epochs) == 2
    ledger = timer.ledger()
    assert ledger.steps == 20 and ledger.epochs == 2
    assert len(said) == 1 and "give each fit its own StepTimer" in said[0]

    shared, errors = StepTimer(warmup_steps=0), []

    def fit():
        try:
            make_model().fit(make_dataset(10), epochs=2, verbose=0, callbacks=[shared])
        except Exception as e:  # noqa: BLE001 - what the test looks for
            errors.append(e)

    threads = [threading.Thread(target=fit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == [] and sum(c[1] for c in shared.calls) == 20
    assert shared.summary().timed_steps >= 18  # one fit's, after its first execution
