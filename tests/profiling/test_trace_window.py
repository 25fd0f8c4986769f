"""TraceWindow in real fit runs: a trace lands on disk with a step marker per traced step (read
back with XProf's own converter, or PyTorch's Chrome trace JSON); a failing profiler never stops
training."""

from __future__ import annotations

import re

import numpy as np
import pytest

from toolkit import backend
from toolkit.core import compat
from toolkit.profiling.step_timer import StepTimer
from toolkit.profiling.trace_window import TraceWindow
from toolkit.report._trace_records import TraceAnalysis
from toolkit.report.trace import left_out_line, read_trace, trace_lines


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_trace_window_writes_a_trace_and_timer_excludes_traced_steps(
    tmp_path, make_model, make_dataset, capfd
):
    timer = StepTimer(warmup_steps=2)
    trace = TraceWindow(tmp_path / "trace", start_step=4, stop_step=7)
    make_model().fit(make_dataset(6), epochs=2, verbose=0, callbacks=[timer, trace])
    assert trace.error is None
    # the profiler's own C++ notes (PyTorch's libkineto marks its start and stop) held back
    assert "USDT:" not in capfd.readouterr().err
    assert trace.traced_steps == (4, 7)
    files = trace.trace_files()
    if backend.name() == "torch":  # torch.profiler writes Chrome trace JSON
        assert files and all(f.endswith(".pt.trace.json") for f in files)
    else:  # TensorFlow's and JAX's profilers write XSpace for TensorBoard and XProf
        assert files and all(f.endswith(".xplane.pb") for f in files)
        assert "plugins/profile" in files[0].replace("\\", "/")
    s = timer.summary()
    # steps 4, 5, 6 ran under the profiler; step 7's interval contains the profiler stop.
    # Timed at batch ends (JAX, PyTorch), step 3's interval holds the profiler's start when
    # step 3 was still running as step 4 began (asynchronous dispatch), and step 6's the stop.
    low, high = (4, 4) if timer.boundary == "begin" else (3, 5)
    assert low <= s.excluded_steps <= high, s
    assert s.total_steps == 12 and s.timed_steps == 12 - 1 - 2 - s.excluded_steps
    # The summary's counts add up to the steps run, and the steps left out are explained
    # against the 3 traced (one more where a trace's start or stop fell in a step's interval).
    said = "\n".join(s.lines())
    run = re.search(r"^steps run: (\d+) = first (\d+) \+ warm-up (\d+) \+ profiler (\d+) "
                    r"\+ timed (\d+)$", said, re.M)  # fmt: skip
    assert run, said
    total, *kinds = map(int, run.groups())
    assert total == 12 == sum(kinds) and kinds[2] == s.excluded_steps, said
    left = left_out_line(s.excluded_steps, 3)
    assert left.startswith(f"  left out of the timing: {s.excluded_steps} steps, the 3 traced")
    assert ("whose interval held the trace's start or stop" in left) == (s.excluded_steps > 3)
    result = trace.result()
    assert result.traced_steps == (4, 7) and result.error is None


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_a_device_behind_the_host_has_only_its_traced_steps_left_out(tmp_path, keras):
    """A model heavy enough that, on JAX, the host runs steps ahead of the device: the window
    waits for the device before it starts and stops (the backend's ``wait_for_device``), so the
    steps queued before it run outside the trace, and StepTimer leaves out the traced steps only
    (their end hooks, which come late on the callback thread, notwithstanding). On every other
    backend (this module runs on each) the same count holds."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12 * 128, 512)).astype("float32")
    y = rng.integers(0, 2, size=12 * 128)
    model = keras.Sequential(
        [keras.Input((512,)), keras.layers.Dense(1024, activation="relu"),
         keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(2)]
    )  # fmt: skip
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timer = StepTimer(warmup_steps=2)
    trace = TraceWindow(tmp_path / "trace", start_step=6, stop_step=9)
    model.fit(x, y, batch_size=128, epochs=1, verbose=0, callbacks=[timer, trace])
    assert trace.error is None and trace.traced_steps == (6, 9)
    s = timer.summary()
    # steps 6, 7, 8 traced; timed at batch begins, step 9's interval also holds the stop.
    assert 3 <= s.excluded_steps <= 4, (timer.boundary, [k for *_, k in timer.calls])
    assert s.timed_steps == 12 - 1 - 2 - s.excluded_steps


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_the_profiler_is_never_seen_running_before_its_start_is_counted(
    tmp_path, monkeypatch, make_model, make_dataset
):
    """A batch-end hook reads the profiler's state at any moment, from Keras's callback thread
    on JAX: the backend's probe and the toolkit's start count (``PROFILER.generation``) are two
    reads. A profiler seen running under the count of before its start made the step before
    it look traced too (CI left out 5 steps of 3 traced), so the start is counted first: at
    every moment the probe says a trace runs, the count already has it, up to its stop."""
    from toolkit.core.events import PROFILER
    from toolkit.profiling._timing import profiler_probe

    seam, probe, seen = backend.get(), profiler_probe(), []
    real_start, real_stop = seam.start_trace, seam.stop_trace

    def start_trace(*args):
        seen.append(("before start", probe(), PROFILER.active, PROFILER.generation))
        real_start(*args)
        seen.append(("after start", probe(), PROFILER.active, PROFILER.generation))

    def stop_trace():
        seen.append(("before stop", probe(), PROFILER.active, PROFILER.generation))
        real_stop()
        seen.append(("after stop", probe(), PROFILER.active, PROFILER.generation))

    monkeypatch.setattr(seam, "start_trace", start_trace)
    monkeypatch.setattr(seam, "stop_trace", stop_trace)
    counted = PROFILER.generation
    trace = TraceWindow(tmp_path / "trace", start_step=2, stop_step=4)
    make_model().fit(make_dataset(6), epochs=1, verbose=0, callbacks=[StepTimer(), trace])
    assert trace.error is None and [s[0] for s in seen][::3] == ["before start", "after stop"]
    # Counted before the profiler runs, and still marked active until it is counted stopped.
    assert seen[0][2:] == (True, counted + 1) and seen[1][1:] == (True, True, counted + 1)
    assert seen[2][2:] == (True, counted + 1) and seen[3][2:] == (True, counted + 1)
    assert PROFILER.generation == counted + 2 and not PROFILER.active
    # A start that fails is counted as a stop too: the step it cost is left out, nothing more.
    monkeypatch.setattr(seam, "start_trace", lambda *a: (_ for _ in ()).throw(RuntimeError("x")))
    timer, failed = StepTimer(warmup_steps=0), TraceWindow(tmp_path / "t2", start_step=2)
    make_model().fit(make_dataset(6), epochs=1, verbose=0, callbacks=[timer, failed])
    assert failed.error and "failed to start at step 2: RuntimeError: x" in failed.error
    assert not PROFILER.active and PROFILER.generation == counted + 4
    assert timer.summary().excluded_steps == 1, [c[3] for c in timer.calls]


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_every_traced_step_is_marked_and_read_back(tmp_path, make_model, make_dataset):
    """XProf's overview page (TF, JAX) sees one step row per traced step, with its time split
    into input, compute and the rest, and an input-bound verdict; PyTorch's trace holds one
    ProfilerStep range per traced step. Under tf_keras, fit marks its steps itself."""
    trace = TraceWindow(tmp_path / "trace", start_step=3, stop_step=7)
    make_model().fit(make_dataset(10), epochs=1, verbose=0, callbacks=[StepTimer(), trace])
    assert trace.error is None and trace.traced_steps == (3, 7)
    legacy = compat.keras_flavor() == "tf_keras"
    assert trace.marked_steps == (0 if legacy else 4)
    analysis = read_trace(trace.trace_files())
    steps = analysis.steps
    # tf_keras opens its marker before the batch-begin hook that starts the profiler, so the
    # first traced step has none there.
    assert len(steps) == (3 if legacy else 4), analysis
    assert all(s.step_ms > 0 for s in steps)
    assert analysis.step_ms.min <= analysis.step_ms.mean <= analysis.step_ms.max
    lines = "\n".join(trace_lines(analysis))
    assert f"trace steps: {len(steps)} marked" in lines
    host_ops = analysis.top_ops.host
    if backend.name() == "jax":  # XLA's CPU ops are not traced one by one; on a GPU they are
        assert "XProf lists no op" in analysis.error
    else:
        assert host_ops and all(o.self_ms >= 0 and 0 <= o.share <= 1 for o in host_ops)
    assert TraceAnalysis.from_dict(analysis.to_dict()) == analysis  # report.json's, read back
    if backend.name() == "torch":
        assert analysis.reader == "chrome trace json"
        assert analysis.verdict is None and "no input-pipeline analysis" in analysis.error
        assert [s.step for s in steps] == ["3", "4", "5", "6"]
    else:
        assert analysis.reader.startswith("xprof ")
        assert "bottleneck" in analysis.to_dict()  # XProf's overview page was read
        assert analysis.verdict in (
            "highly input-bound",
            "moderately input-bound",
            "potentially input-bound",
            "not input-bound",
        )
        assert 0 <= analysis.input_percent <= 100
        parts = sum(v for v in analysis.breakdown_ms.values())
        assert parts == pytest.approx(analysis.step_ms.mean, rel=0.05)
        assert "XProf: " in lines and "waiting for input" in lines


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_a_trace_without_markers_still_gives_its_ops(tmp_path, make_model, make_dataset):
    """A trace written by a profiler the toolkit did not wrap (no step marker): the ops are
    read, and the missing step time is said, not made up."""
    if backend.name() != "tensorflow":
        pytest.skip("TensorFlow's profiler: JAX's CPU trace has no ops, PyTorch's is JSON")
    profiler = backend.get()
    model, data = make_model(), make_dataset(6)
    model.fit(data, epochs=1, verbose=0)
    profiler.start_trace(str(tmp_path / "plain"), 2, 0, 1)
    try:
        model.fit(data, epochs=1, verbose=0)
    finally:
        profiler.stop_trace()
    trace = TraceWindow(tmp_path / "plain", start_step=0, stop_step=1)
    analysis = read_trace(trace.trace_files())
    if compat.keras_flavor() == "tf_keras":
        assert analysis.steps  # tf_keras's fit marks its steps itself
    else:
        assert analysis.steps == () and analysis.verdict is None
        assert analysis.error.startswith("the trace holds no step marker: XProf times a step")
    assert analysis.top_ops.host


def _recurrent(keras, steps=16, features=7):
    """A model whose step runs a loop: an LSTM's recurrence over `steps` time steps (a
    ``tf.while_loop`` on TensorFlow, Keras's and tf_keras's alike)."""
    model = keras.Sequential(
        [keras.Input((steps, features)), keras.layers.LSTM(8), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


def _series(keras, form, steps=16, features=7):
    """`fit`'s arguments for :func:`_recurrent`: numpy arrays ``(x, y)`` batched by fit (10
    batches), or a ``keras.utils.timeseries_dataset_from_array`` pipeline (11 batches)."""
    rng = np.random.default_rng(0)
    if form == "arrays":
        x = rng.normal(size=(160, steps, features)).astype("float32")
        return {"x": x, "y": x[:, -1, :1], "batch_size": 16}
    series = rng.normal(size=(200, features)).astype("float32")
    data = keras.utils.timeseries_dataset_from_array(
        series[:-steps], series[steps:, :1], sequence_length=steps, batch_size=16
    )
    return {"x": data}


@pytest.mark.legacy_keras
@pytest.mark.every_backend
@pytest.mark.parametrize("form", ["arrays", "timeseries"])
def test_a_step_that_runs_a_loop_is_read_by_its_markers(tmp_path, keras, form):
    """An LSTM's step runs its recurrence as a loop, fed numpy arrays or a
    ``timeseries_dataset_from_array`` pipeline. On TensorFlow, XProf takes a loop's iterations
    for the steps and none of the markers, and found no step at all; the trace is read from a
    copy with the loop folded into the marked steps, which XProf reads as a loop-free one."""
    from toolkit.report import trace as reader

    window = TraceWindow(tmp_path / "trace", start_step=3, stop_step=7)
    _recurrent(keras).fit(**_series(keras, form), epochs=1, verbose=0, callbacks=[window])
    assert window.error is None and window.traced_steps == (3, 7)
    files = window.trace_files()
    analysis = read_trace(files)
    steps = analysis.steps
    # tf_keras opens its marker before the hook that starts the profiler: one step fewer.
    assert len(steps) == (3 if compat.keras_flavor() == "tf_keras" else 4), analysis
    assert all(s.step_ms > 0 for s in steps)
    if backend.name() == "torch":  # its Chrome trace JSON has no input analysis
        return
    assert analysis.verdict is not None and 0 <= analysis.input_percent <= 100
    parts = sum(v for v in analysis.breakdown_ms.values())
    assert parts == pytest.approx(analysis.step_ms.mean, rel=0.05)
    folded = "folded into the marked steps" in (analysis.error or "")
    assert folded == (backend.name() == "tensorflow"), analysis.error
    if folded:  # the condition the fold is for: the loop's iterations, and XProf alone
        held, _ = reader._loops_folded(files, str(tmp_path))
        assert held.iterations > 0 and held.markers >= len(steps) and not held.loop_ops
        assert reader._xprof_reading(files, analysis.reader, 1).steps == ()


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_a_call_of_several_steps_is_read_as_its_steps(tmp_path, make_model, make_dataset):
    """With steps_per_execution=2 each call runs two steps (on TensorFlow in a loop, folded as
    any loop is) and is marked as one: each of XProf's steps is a call, its times divided by
    2 so that they are per step, and the steps are counted as steps."""
    if backend.name() == "torch":
        pytest.skip("the toolkit runs no steps_per_execution on PyTorch")
    window = TraceWindow(tmp_path / "trace", start_step=2, stop_step=8)
    model = make_model(steps_per_execution=2)
    model.fit(make_dataset(12), epochs=1, verbose=0, callbacks=[window])
    assert window.error is None and window.traced_steps == (2, 8)
    analysis = read_trace(window.trace_files(), steps_per_execution=2)
    calls = len(analysis.steps)
    assert 1 <= calls <= 3 and analysis.steps_per_row == 2, analysis
    assert analysis.to_dict()["steps_per_row"] == 2  # report.json's key
    assert "each of XProf's steps is one call of 2 steps" in analysis.error
    parts = sum(v for v in analysis.breakdown_ms.values())
    assert parts == pytest.approx(analysis.step_ms.mean, rel=0.05)
    assert analysis.verdict is not None
    lines = "\n".join(trace_lines(analysis, window=6))
    assert f"trace steps: {2 * calls}" in lines and f"marked in {calls} calls of 2" in lines


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_why_a_marked_trace_gives_no_step_is_said(tmp_path, keras, make_model, make_dataset):
    """Where a trace holds step markers and XProf still finds no step, the reading says which
    condition kept XProf from them: markers without the root stat XProf groups a step's
    events by (a user's own ``Trace("train", step_num=N)``), or TensorFlow's loop-op events,
    with which XProf groups no event at all (added here to a real trace: Keras's loops are
    lowered into the graph, and TensorFlow writes none)."""
    if backend.name() != "tensorflow":
        pytest.skip("TensorFlow's own step markers and loop ops")
    if compat.keras_flavor() == "tf_keras":
        pytest.skip("tf_keras's fit adds markers of its own, with the root stat")
    import tensorflow as tf

    from toolkit.core._trace_events import xspace_messages
    from toolkit.report import trace as reader

    class Unrooted(keras.callbacks.Callback):  # markers as a user might write them
        marker = None

        def on_train_batch_begin(self, batch, logs=None):
            self.on_train_end()
            self.marker = tf.profiler.experimental.Trace("train", step_num=batch)
            self.marker.__enter__()

        def on_train_end(self, logs=None):
            if self.marker is not None:
                self.marker.__exit__(None, None, None)

    model, data = make_model(), make_dataset(6)
    model.fit(data, epochs=1, verbose=0)
    backend.get().start_trace(str(tmp_path / "user"), 2, 0, 1)
    try:
        model.fit(data, epochs=1, verbose=0, callbacks=[Unrooted()])
    finally:
        backend.get().stop_trace()
    said = read_trace(reader.find_trace_files(tmp_path / "user"))
    assert said.steps == () and said.error.startswith("the trace holds 6 step markers, ")
    assert "none with the root stat '_r'" in said.error, said.error

    window = TraceWindow(tmp_path / "mine", start_step=2, stop_step=5)
    model.fit(data, epochs=1, verbose=0, callbacks=[window])
    (path,) = window.trace_files()
    with open(path, "rb") as f:
        space = xspace_messages()["XSpace"].FromString(f.read())
    added = space.planes[0].event_metadata[999_999]
    added.id, added.name = 999_999, "WhileOp-EvalCond"
    copy = tmp_path / "loop" / "host.xplane.pb"
    copy.parent.mkdir()
    copy.write_bytes(space.SerializeToString())
    assert read_trace([path]).steps  # the trace as written: read
    said = read_trace([str(copy)])
    assert said.steps == () and "TensorFlow loop-op events (WhileOp-EvalCond)" in said.error


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_window_spanning_epochs_and_stopping_at_train_end(tmp_path, make_model, make_dataset):
    trace = TraceWindow(tmp_path / "t", start_step=3, stop_step=100)
    make_model().fit(make_dataset(4), epochs=2, verbose=0, callbacks=[trace])
    assert trace.traced_steps == (3, 8)  # stopped at the end of training
    assert trace.trace_files()


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_profiler_failure_is_logged_and_training_goes_on(tmp_path, make_model, make_dataset):
    profiler = backend.get()  # someone else's trace holds the profiler
    profiler.start_trace(str(tmp_path / "someone-else"), 2, 0, 1)
    try:
        timer = StepTimer(warmup_steps=0)
        trace = TraceWindow(tmp_path / "mine", start_step=1, stop_step=3)
        history = make_model().fit(make_dataset(5), epochs=1, verbose=0, callbacks=[timer, trace])
    finally:
        profiler.stop_trace()
    assert len(history.history["loss"]) == 1
    assert trace.error and "failed to start" in trace.error
    assert trace.traced_steps is None
    # Our trace never ran, but someone else's profiler ran through the whole fit: every step
    # after the first was traced, so none is timed.
    assert timer.summary().excluded_steps == 4 and timer.summary().timed_steps == 0
    assert timer.summary().total_steps == 5


@pytest.mark.every_backend
def test_a_profiler_is_seen_from_keras_s_callback_thread(tmp_path):
    """Keras 3 calls batch ends on its own thread, where StepTimer reads the profiler's state
    when it re-times an epoch at the ends: the backend's probe must see a profiler started on
    the training thread from any thread (PyTorch's C check alone sees it only on the thread
    that started it)."""
    import concurrent.futures

    profiler = backend.get()
    probe = profiler.profiler_probe()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert not probe() and not pool.submit(probe).result()
        profiler.start_trace(str(tmp_path / "t"), 2, 0, 1)
        try:
            assert probe() and pool.submit(probe).result()
        finally:
            profiler.stop_trace()
        assert not probe() and not pool.submit(probe).result()


def test_bad_window():
    with pytest.raises(ValueError, match="start_step < stop_step"):
        TraceWindow("x", start_step=5, stop_step=5)


class _UsersOwnProfiler:
    """A user's callback that runs the backend's profiler over steps [start, stop) without
    telling the toolkit (a ``tf.profiler`` / ``jax.profiler`` / ``torch.profiler`` session)."""

    def __new__(cls, keras, logdir, start, stop):
        class Profiler(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if batch == start:
                    backend.get().start_trace(str(logdir), 2, 0, 1)
                elif batch == stop:
                    backend.get().stop_trace()

        return Profiler()


@pytest.mark.legacy_keras
@pytest.mark.every_backend
@pytest.mark.parametrize("first", [True, False], ids=["before-timer", "after-timer"])
def test_steps_under_a_profiler_the_toolkit_did_not_start_are_left_out(
    tmp_path, keras, make_model, make_dataset, first
):
    """Steps 4-7 ran under the user's profiler; the step whose interval held the start (3,
    when the user's callback runs after the timer's begin) or the stop is out too: one run of
    excluded steps holding 4-7. Where the steps are timed at their ends (an asynchronous
    backend: Keras stamps them on its callback threads), a loaded machine's late thread can
    stamp an earlier step's end after the profiler started, and that step is left out as well
    (CI read 7 on JAX): the run is bounded only where the begins time the steps."""
    timer = StepTimer(warmup_steps=1)
    users = _UsersOwnProfiler(keras, tmp_path / "users", 4, 8)
    callbacks = [users, timer] if first else [timer, users]
    make_model().fit(make_dataset(14), epochs=1, verbose=0, callbacks=callbacks)
    s = timer.summary()
    kinds = [kind for *_, kind in timer.calls]
    out = [i for i, kind in enumerate(kinds) if kind == "excluded"]
    assert set(range(4, 8)) <= set(out) and out == list(range(out[0], out[-1] + 1)), kinds
    assert s.excluded_steps == len(out) and s.timed_steps == 14 - 1 - 1 - s.excluded_steps
    if timer.boundary != "end":
        assert s.excluded_steps <= 5, kinds


class _EpochProfiler:
    """A user's callback with epoch hooks only that runs the backend's profiler over epoch
    `epoch` without telling the toolkit."""

    def __new__(cls, keras, logdir, epoch):
        class Profiler(keras.callbacks.Callback):
            def on_epoch_begin(self, e, logs=None):
                if e == epoch:
                    backend.get().start_trace(str(logdir), 2, 0, 1)

            def on_epoch_end(self, e, logs=None):
                if e == epoch:
                    backend.get().stop_trace()

        return Profiler()


@pytest.mark.legacy_keras
@pytest.mark.every_backend
@pytest.mark.parametrize("first", [True, False], ids=["before-timer", "after-timer"])
def test_an_epoch_under_a_profiler_started_at_its_boundary_is_left_out(
    tmp_path, keras, make_model, make_dataset, first
):
    """Beside callbacks without batch hooks StepTimer probes for a profiler at each epoch's
    first begin only (`_probe_every_begin`); a profiler a user's epoch hooks start and stop
    is still seen: the traced epoch's steps, and only they, are left out, in either order of
    the callbacks."""
    timer = StepTimer(warmup_steps=0)
    users = _EpochProfiler(keras, tmp_path / "users", 1)
    callbacks = [users, timer] if first else [timer, users]
    make_model().fit(make_dataset(4), epochs=3, verbose=0, callbacks=callbacks)
    assert timer._probe_steps is False  # the probe was asked once an epoch
    kinds = [(epoch, kind) for *_, epoch, kind in timer.calls]
    assert [e for e, kind in kinds if kind == "excluded"] == [1, 1, 1, 1], kinds
    assert timer.summary().timed_steps == 12 - 1 - 4, kinds


def test_probe_every_begin_only_beside_a_batch_hook_that_may_profile(keras):
    """Which fits probe at every begin: a callback list Keras did not show (None), or another
    callback whose batch hooks are its own and not said to start no profiler; not Keras's
    progress bar, the toolkit's own callbacks, or epoch hooks alone."""
    from toolkit.profiling.fit_progress import FitProgress
    from toolkit.profiling.step_timer import _probe_every_begin

    class EveryBatch(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    class EpochsOnly(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            pass

    class Bar(keras.callbacks.ProgbarLogger):  # a user's bar: its hooks may do anything
        def on_train_batch_end(self, batch, logs=None):
            pass

    class Declared(EveryBatch):
        starts_untold_profiler = False

    timer = StepTimer()
    assert _probe_every_begin(timer, None)
    assert not _probe_every_begin(timer, [timer])
    quiet = [timer, keras.callbacks.ProgbarLogger(), keras.callbacks.History(), EpochsOnly(),
             FitProgress(), StepTimer(), TraceWindow("t", start_step=2), Declared()]  # fmt: skip
    assert not _probe_every_begin(timer, quiet)
    assert _probe_every_begin(timer, [timer, EveryBatch()])
    assert _probe_every_begin(timer, [Bar(), timer])
    tensorboard = keras.callbacks.TensorBoard(profile_batch=(2, 3))  # starts TF's profiler
    assert _probe_every_begin(timer, [timer, tensorboard])


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_keras_tensorboard_profiler_steps_are_left_out(tmp_path, keras, make_model, make_dataset):
    if backend.name() == "torch":
        pytest.skip("Keras's TensorBoard callback has no profiler on PyTorch")
    timer = StepTimer(warmup_steps=1)
    board = keras.callbacks.TensorBoard(str(tmp_path / "tb"), profile_batch=(4, 7))
    make_model().fit(make_dataset(14), epochs=1, verbose=0, callbacks=[timer, board])
    if not list((tmp_path / "tb").rglob("*.xplane.pb")):  # Keras 3.15 on JAX: Python >= 3.12
        pytest.skip("Keras's TensorBoard callback did not profile on this backend and Python")
    s = timer.summary()
    assert 3 <= s.excluded_steps <= 6, (s, [k for *_, k in timer.calls])
    assert s.timed_steps == 14 - 1 - 1 - s.excluded_steps


def test_a_pytorch_profiler_that_failed_to_start_leaves_no_profiler_behind(tmp_path, monkeypatch):
    """PyTorch sets its process-wide "profiler running" flag before its profiler starts: a
    start that raised (a Kineto failure) must not leave the probe saying "profiling", or every
    later step would be left out of the timing and every later trace refused."""
    torch = pytest.importorskip("torch")
    from torch.autograd import profiler as autograd_profiler

    from toolkit.backend import _torch

    def broken_start(self):
        autograd_profiler._run_on_profiler_start()  # as PyTorch does, before the C call
        raise RuntimeError("kineto failed")

    monkeypatch.setattr(torch.profiler.profile, "start", broken_start)
    with pytest.raises(RuntimeError, match="kineto failed"):
        _torch.start_trace(str(tmp_path / "t"), 2, 0, 0)
    assert not _torch.profiler_probe()()
