"""TraceWindow in real fit runs: a trace lands on disk; a failing profiler never stops training."""

from __future__ import annotations

import pytest

from toolkit import backend
from toolkit.profiling.step_timer import StepTimer
from toolkit.profiling.trace_window import TraceWindow

pytestmark = [pytest.mark.legacy_keras, pytest.mark.every_backend]


def test_trace_window_writes_a_trace_and_timer_excludes_traced_steps(
    tmp_path, make_model, make_dataset
):
    timer = StepTimer(warmup_steps=2)
    trace = TraceWindow(tmp_path / "trace", start_step=4, stop_step=7)
    make_model().fit(make_dataset(6), epochs=2, verbose=0, callbacks=[timer, trace])
    assert trace.error is None
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
    result = trace.result()
    assert result["traced_steps"] == [4, 7] and result["error"] is None


def test_window_spanning_epochs_and_stopping_at_train_end(tmp_path, make_model, make_dataset):
    trace = TraceWindow(tmp_path / "t", start_step=3, stop_step=100)
    make_model().fit(make_dataset(4), epochs=2, verbose=0, callbacks=[trace])
    assert trace.traced_steps == (3, 8)  # stopped at the end of training
    assert trace.trace_files()


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
    assert timer.summary().excluded_steps == 0  # a trace that never ran excludes nothing
    assert timer.summary().total_steps == 5


def test_bad_window():
    with pytest.raises(ValueError, match="start_step < stop_step"):
        TraceWindow("x", start_step=5, stop_step=5)
