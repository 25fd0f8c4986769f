"""Every callback the toolkit hands to ``fit`` survives a real ``fit`` and leaves its result,
with and without several steps per execution, under Keras 3 and tf_keras alike, and under
Keras 3 on JAX and on PyTorch (``make test`` runs the ``every_backend`` tests once per
backend)."""

from __future__ import annotations

import statistics

import pytest

from toolkit import StepTimer, TraceWindow, backend
from toolkit.profiling.resume_recorder import ResumeRecorder
from toolkit.report.context import Resume
from toolkit.runner.session import profile

pytestmark = [pytest.mark.legacy_keras, pytest.mark.every_backend]


def _step_timer(tmp_path):
    timer = StepTimer(batch_size=8, warmup_steps=1)
    return [timer], lambda: timer.summary().timed_steps > 0


def _trace_window(tmp_path):
    window = TraceWindow(str(tmp_path / "trace"), start_step=2, stop_step=4)
    return [window], lambda: window.result().traced_steps is not None


def _resume_recorder(tmp_path):
    resume = Resume(str(tmp_path / "backup"))
    return [ResumeRecorder(resume)], lambda: resume.steps_total == 20 and not resume.resumed


def _profile_callbacks(tmp_path):
    prof = profile("all", data=None, batch_size=8, trace_steps=(2, 4))
    prof.__enter__()

    def done():
        prof.__exit__(None, None, None)
        return prof.report.steps.timed_steps > 0 and prof.report.trace.window.traced_steps

    return prof.callbacks, done


@pytest.mark.parametrize(
    "make",
    [_step_timer, _trace_window, _resume_recorder, _profile_callbacks],
    ids=lambda f: f.__name__.lstrip("_"),
)
@pytest.mark.parametrize("steps_per_execution", [1, 2])
def test_every_callback_survives_a_real_fit(
    tmp_path, monkeypatch, make_model, make_dataset, make, steps_per_execution
):
    if steps_per_execution > 1 and backend.name() == "torch":
        pytest.skip("Keras's PyTorch backend runs one step per call (no steps_per_execution)")
    monkeypatch.chdir(tmp_path)
    model = make_model(steps_per_execution=steps_per_execution)
    callbacks, done = make(tmp_path)
    history = model.fit(make_dataset(10), epochs=2, callbacks=callbacks, verbose=0)
    assert len(history.history["loss"]) == 2
    assert done()


def test_step_timer_figures_reach_history_csv_logger_and_early_stopping(
    tmp_path, keras, make_model, make_dataset
):
    """StepTimer's epoch figures land in Keras's epoch logs, for every callback after it; the
    report's metrics stay the model's."""
    timer = StepTimer(batch_size=8, warmup_steps=1)
    csv = tmp_path / "log.csv"
    stop = keras.callbacks.EarlyStopping(monitor="step_ms_p50", patience=100, mode="min")
    model = make_model()
    history = model.fit(
        make_dataset(10), epochs=3, verbose=0,
        callbacks=[timer, keras.callbacks.CSVLogger(str(csv)), stop],
    )  # fmt: skip
    p50s = history.history["step_ms_p50"]
    assert len(p50s) == 3 and all(v > 0 for v in p50s)
    assert len(history.history["examples_per_sec"]) == 3
    # The first epoch's median is its timed steps' (8 of 10: the first and 1 warm-up left out).
    first = [d / n * 1e3 for d, n, epoch, kind in timer.calls if epoch == 0 and kind == "timed"]
    assert len(first) == 8 and p50s[0] == pytest.approx(statistics.median(first), abs=5e-4)
    # Rounded (µs, a tenth of an example/s) so Keras's own line and CSVLogger's stay short.
    assert all(v == round(v, 3) for v in p50s)
    assert all(v == round(v, 1) for v in history.history["examples_per_sec"])
    header = csv.read_text().splitlines()[0].split(",")
    assert "step_ms_p50" in header and "examples_per_sec" in header
    assert stop.best == pytest.approx(min(p50s))  # EarlyStopping monitored it
    assert "step_ms_p50" not in timer.last_logs  # the model's metrics only, for the report
    plain = StepTimer(batch_size=8, add_to_logs=False)
    history = make_model().fit(make_dataset(4), epochs=1, verbose=0, callbacks=[plain])
    assert "step_ms_p50" not in history.history
