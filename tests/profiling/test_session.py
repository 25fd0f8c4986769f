"""profile(): the report lands, atomically, whether fit completes, raises or is interrupted."""

from __future__ import annotations

import json
import os
import signal

import pytest

from toolkit.core import compat
from toolkit.core.files import ReportError
from toolkit.core.interrupts import TrainingInterrupted
from toolkit.core.stats import format_s
from toolkit.profiling._timing import ProcessTime, Stage, process_start
from toolkit.report import RunReport
from toolkit.report._fit_call import process_line
from toolkit.runner.session import profile


def _raise_at(epoch_to_fail, batch_to_fail, exc):
    class Boom(compat.keras().callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if (self.epoch, batch) == (epoch_to_fail, batch_to_fail):
                if exc == "sigterm":
                    os.kill(os.getpid(), signal.SIGTERM)
                else:
                    raise exc

    return Boom()


def _only_run_dir(root):
    (run_dir,) = [p for p in root.iterdir() if p.is_dir()]
    return run_dir


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_complete_run_writes_json_markdown_png(tmp_path, make_model, make_dataset):
    ds = make_dataset(10)
    with profile("tiny", report_dir=tmp_path, data=ds, args={"lr": 0.1}) as p:
        make_model().fit(ds, epochs=2, verbose=0, callbacks=p.callbacks)
    run_dir = _only_run_dir(tmp_path)
    assert sorted(os.listdir(run_dir)) == ["report.json", "report.md", "steps.png"]
    assert p.paths["json"] == str(run_dir / "report.json")
    report = RunReport.load(run_dir)
    assert report.status == "complete" and report.error is None
    assert report.steps.total_steps == 20 and report.steps.batch_size == 8
    assert report.args == {"lr": 0.1}
    assert len(report.epochs) == 2 and "loss" in report.metrics
    assert [e.epoch for e in report.ledger.memory.epochs] == [None, 0, 1]  # begin, each end
    env = report.environment
    assert env["tensorflow"] and env["keras_flavor"] == compat.keras_flavor()
    # Which Keras, and whether a nightly: from its distribution, as the markdown says it.
    release = compat.keras_release()
    assert env["keras"] == compat.keras_version() and env["keras_nightly"] is release.nightly
    assert env["keras_distribution"] == release.distribution
    assert env["keras_distribution"] in ("keras", "keras-nightly", "tf-keras", "tf-keras-nightly")
    shown = f"Keras {env['keras']}" + (" (nightly)" if release.nightly else "")
    assert f"· {shown} ·" in (run_dir / "report.md").read_text()
    assert (run_dir / "steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_the_anatomy_reaches_tensorboards_images_tab(tmp_path, make_model, make_dataset):
    """A traced run with TensorBoard scalars: the anatomy's picture lands in the same train
    event file as the scalars, at the last step, read back with TensorBoard's own readers (the
    images plugin's, and the classic accumulator's Images)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.helpers import read_images
    from toolkit.runner.session import ANATOMY_TAG, LEDGER_TAG

    ds = make_dataset(10)
    model = make_model()  # jitted on JAX, as Keras chooses: an op-by-op step there is refused
    with profile("traced", report_dir=tmp_path, data=ds, tensorboard=True,
                 trace_steps=(3, 6)) as p:  # fmt: skip
        p.fit(model, ds, epochs=2, verbose=0)
    anatomy = p.report.anatomy
    assert anatomy is not None and anatomy.error is None, anatomy
    run_dir = _only_run_dir(tmp_path)
    assert (run_dir / "anatomy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (events_file,) = (run_dir / "train").glob("events.out.tfevents.*")  # one writer, one file
    pictures = read_images(run_dir / "train")
    assert set(pictures) == {LEDGER_TAG, ANATOMY_TAG}, list(pictures)
    (png,) = pictures[ANATOMY_TAG]
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    events = EventAccumulator(str(events_file), size_guidance={"images": 0})
    events.Reload()
    assert ANATOMY_TAG in events.Tags()["images"]
    (image,) = events.Images(ANATOMY_TAG)
    assert image.step == 20  # the last step: 2 epochs of 10
    assert image.encoded_image_string == png and image.width > image.height > 100


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (RuntimeError("disk on fire"), "RuntimeError: disk on fire"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        ("sigterm", "TrainingInterrupted: signal SIGTERM"),
    ],
)
@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_failed_or_interrupted_fit_still_writes_a_partial_report(
    tmp_path, make_model, make_dataset, exc, expected
):
    expected_type = {
        "sigterm": TrainingInterrupted,
        "KeyboardInterrupt": KeyboardInterrupt,
    }.get(exc if isinstance(exc, str) else type(exc).__name__, RuntimeError)
    with (
        pytest.raises(expected_type),
        profile("dies", report_dir=tmp_path, batch_size=8, warmup_steps=1) as p,
    ):
        make_model().fit(
            make_dataset(10), epochs=3, verbose=0, callbacks=[*p.callbacks, _raise_at(1, 7, exc)]
        )
    run_dir = _only_run_dir(tmp_path)
    data = json.loads((run_dir / "report.json").read_text())
    assert data["status"] == "partial"
    assert data["error"] == expected
    report = RunReport.load(run_dir)
    # Epoch 0 (10 steps) finished; in epoch 1, steps 0..6 ran before the failure at step 7.
    assert report.steps.total_steps == 10 + 7
    assert len(report.epochs) == 1
    assert "partial" in (run_dir / "report.md").read_text()
    assert not [f for f in os.listdir(run_dir) if f.startswith(".tmp-")]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_without_report_dir_nothing_is_written(tmp_path, make_model, make_dataset, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with profile("mem-only", batch_size=8) as p:
        make_model().fit(make_dataset(3), epochs=1, verbose=0, callbacks=p.callbacks)
    assert p.report.steps.total_steps == 3 and p.paths == {} and os.listdir(tmp_path) == []


def test_custom_loop_with_profile(tmp_path):
    import tensorflow as tf

    w = tf.Variable(tf.ones((4, 4)))

    @tf.function
    def train_step(x):
        w.assign_sub(0.01 * tf.matmul(x, w))

    x = tf.ones((4, 4))
    with profile("loop", report_dir=tmp_path, batch_size=4, warmup_steps=2) as p, p.timer:
        for _ in range(10):
            train_step(x)
            p.timer.step()
    assert p.report.steps.timed_steps == 7
    assert RunReport.load(p.paths["json"]).steps.first_step_steps == 1


@pytest.mark.legacy_keras
@pytest.mark.every_backend
@pytest.mark.parametrize("stop", [True, False])
def test_a_loss_that_goes_nan_stops_the_run_at_its_step_and_the_report_says_so(
    tmp_path, keras, make_model, make_dataset, stop
):
    # Seeded: from random initial weights the second loss came out inf instead of nan now and
    # then (both stop the run; the message names which).
    keras.utils.set_random_seed(0)
    model = make_model()
    model.compile(
        optimizer=keras.optimizers.SGD(1e20),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    kwargs = {"report_dir": tmp_path, "batch_size": 8, "warmup_steps": 1, "stop_on_nan": stop}
    with profile("diverges", **kwargs) as p:
        history = model.fit(make_dataset(50), epochs=4, verbose=0, callbacks=p.callbacks)
    report = RunReport.load(_only_run_dir(tmp_path))
    if stop:  # stopped within a few steps of the first NaN, in the first epoch
        assert len(history.history["loss"]) == 1 and report.steps.total_steps < 50
    else:  # trained on to the end, and still a failed run
        assert len(history.history["loss"]) == 4 and report.steps.total_steps == 200
    assert report.status == "diverged" and report.partial
    # SGD(1e20): the first update makes the weights huge, the second step's loss is NaN.
    assert report.error.startswith("LossNotFinite: loss became nan at step 2 of epoch 1")
    assert "lower the learning rate" in report.error


def _adds_up(parts, timeline=()):
    """The fit call's parts: none negative, and together the whole; the steps hold every
    execution StepTimer timed."""
    each = (parts.start_up_s, parts.steps_s, parts.exit_s)
    shown = [v for v in each if v is not None]
    assert all(v >= 0 for v in shown), parts
    assert sum(shown) == pytest.approx(parts.whole_s, abs=1e-9), parts
    assert sum(row[0] for row in timeline) <= parts.steps_s + 1e-6, parts


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_prof_fit_times_the_whole_call_start_up_steps_and_exit(tmp_path, make_model, make_dataset):
    import time

    seen = []

    class Mine(compat.keras().callbacks.Callback):
        def on_train_end(self, logs=None):
            seen.append("train end")

    ds = make_dataset(6).repeat()
    with profile("whole", report_dir=tmp_path, batch_size=8, warmup_steps=1) as p:
        model = make_model()
        p.mark("model")  # a stage of the user's own
        before = time.perf_counter()
        history = p.fit(model, ds, epochs=2, steps_per_epoch=6, verbose=0, callbacks=[Mine()])
        after = time.perf_counter()
    assert seen == ["train end"] and len(history.history["loss"]) == 2  # yours ran, History back
    report = p.report
    parts = report.fit_call
    assert parts.counted_from == "fit call" and parts.exit_s is not None
    _adds_up(parts, report.timeline)
    # Inside the clock around the call, and around what StepTimer saw from train begin to end.
    assert report.fit_seconds <= parts.whole_s <= after - before
    assert parts.steps_s <= report.fit_seconds
    assert "run ledger (fit call " in report.summary()  # the ledger line carries the call
    # report.md splits the call once, as the ledger does (fit_call's start-up and exit hold
    # the callbacks' hooks, the ledger's do not: two figures for one part read as a mistake)
    md = report.to_markdown()
    assert f"fit call: {format_s(report.ledger.wall_s)}, in parts in" in md and "+ exit" not in md
    assert f"| exit | {format_s(report.ledger.seconds('exit'))} |" in md
    loaded = RunReport.load(p.paths["json"])
    assert loaded.fit_call == parts and loaded == report
    # The whole process: from its start to the block (launch), the user's stage, the call
    # (the same figure as fit_call's), after it; in order, adding up, inside the process's age.
    process = report.process
    names = [s.name for s in process.stages]
    assert names == ["launch", "model", "before fit", "fit call", "after fit"]
    assert process.stages[names.index("fit call")].seconds == parts.whole_s
    assert all(s.seconds >= 0 for s in process.stages) and process.stages[0].seconds > 0
    assert after - before <= process.whole_s <= time.perf_counter() - process_start() + 0.02
    assert f"process: {format_s(process.whole_s)} to the report = launch " in report.summary()
    assert "| **process** |" in report.to_markdown() and loaded.process == process


def test_process_time_reads_back_strictly_and_sums_a_stage_marked_twice():
    two_fits = ProcessTime.of(
        1.0,
        [("launch", 3.0, None), ("fit call", 4.0, None), ("before fit", 4.5, None),
         ("fit call", 6.0, None)],
    )  # fmt: skip
    assert [s.seconds for s in two_fits.stages] == [2.0, 1.0, 0.5, 1.5]
    assert [(s.name, s.seconds) for s in two_fits.merged()] == [
        ("launch", 2.0), ("fit call", 2.5), ("before fit", 0.5)
    ]  # fmt: skip
    assert "process: 5.00 s to the report = launch 2.00 s + fit call 2.50 s" in process_line(
        two_fits
    )
    # a mark behind the one before it ends its stage there, at 0 s; no start, no account
    assert ProcessTime.of(0.0, [("a", 2.0, None), ("b", 1.0, None)]).stages[1].seconds == 0.0
    assert ProcessTime.of(None, [("a", 2.0, None)]) is None
    # a compile timed in a stage is its own (model built twice: each mark's, summed once)
    built = ProcessTime.of(0.0, [("model", 2.0, 1.5), ("x", 3.0, None), ("model", 4.0, 0.5)])
    assert built.merged()[0] == Stage("model", 3.0, 2.0)
    assert ProcessTime.from_dict(two_fits.to_dict()) == two_fits
    with pytest.raises(ReportError, match=r"field process.stages\[1\].seconds"):
        ProcessTime.from_dict({"stages": [{"name": "a", "seconds": 1}, {"name": "b"}]})


def test_a_custom_loop_s_process_ends_in_the_block():
    with profile("loop", batch_size=4) as p, p.timer:
        p.timer.step()
    assert [s.name for s in p.report.process.stages] == ["launch", "in profile()"]


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_callbacks_alone_count_the_call_from_train_begin_without_its_exit(make_model, make_dataset):
    with profile("callbacks", batch_size=8) as p:
        make_model().fit(make_dataset(4), epochs=2, verbose=0, callbacks=p.callbacks)
    parts = p.report.fit_call
    assert parts.counted_from == "train begin" and parts.exit_s is None
    _adds_up(parts, p.report.timeline)
    assert parts.whole_s == pytest.approx(p.report.fit_seconds)
    assert "exit not timed" in p.report.summary()


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_a_fit_that_raises_is_accounted_up_to_where_it_raised(make_model, make_dataset):
    with pytest.raises(RuntimeError), profile("raised", batch_size=8) as p:
        p.fit(
            make_model(),
            make_dataset(5),
            epochs=2,
            verbose=0,
            callbacks=[_raise_at(1, 2, RuntimeError("boom"))],
        )
    parts = p.report.fit_call
    assert p.report.status == "partial" and parts.counted_from == "fit call"
    assert parts.exit_s is None and parts.steps_s > 0  # epoch 0 trained, then it raised
    _adds_up(parts, p.report.timeline)


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_an_earlier_timed_fit_is_not_taken_for_a_later_untimed_one(make_model, make_dataset):
    model, ds = make_model(), make_dataset(3)
    with profile("two fits", batch_size=8) as p:
        p.fit(model, ds, epochs=1, verbose=0)
        model.fit(ds, epochs=1, verbose=0, callbacks=p.callbacks)  # the report is this one's
    assert p.report.fit_call.counted_from == "train begin"


def test_a_custom_loop_has_no_fit_call():
    with profile("loop", batch_size=4) as p, p.timer:
        for _ in range(3):
            p.timer.step()
    assert p.report.fit_call is None and "fit call" not in p.report.summary()


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_profile_a_fit_on_grain_pipelines_reads_their_batch_size(tmp_path, make_model):
    """profile(data=...) takes the batch size from a Grain pipeline without reading it: the
    toolkit's endless one (fit told its epoch's ``len()``) and a plain finite one of yours
    (each epoch read anew to its end); the report says examples/s."""
    grain = pytest.importorskip("grain")
    if compat.keras_flavor() != "keras3":
        pytest.skip("tf_keras's fit does not read Grain datasets")
    import numpy as np

    from toolkit.data import pipeline

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 8)).astype("float32")
    y = rng.integers(0, 3, size=40).astype("int32")
    ours = pipeline((x, y), 8, loader="grain", repeat=True)
    plain = grain.MapDataset.source(list(zip(x, y, strict=True))).shuffle(seed=0)
    plain = plain.map(lambda e: (e[0], e[1])).batch(8)
    for name, data, told in (("ours", ours, {"steps_per_epoch": len(ours)}), ("plain", plain, {})):
        with profile(name, report_dir=tmp_path / name, data=data, warmup_steps=1) as p:
            p.fit(make_model(), data, epochs=2, verbose=0, **told)
        steps = RunReport.load(p.paths["json"]).steps
        assert steps.batch_size == 8 and steps.total_steps == 10, (name, steps)
        assert (steps.first_step_steps, steps.warmup_steps, steps.timed_steps) == (1, 1, 8)
        assert steps.examples_per_sec == pytest.approx(8 / steps.mean_s)
        assert p.report.fit_call.exit_s is not None  # the whole call timed, its exit too
        assert "examples/s" in p.report.to_markdown()


def test_the_line_saying_where_the_report_landed_fits_its_terminal(monkeypatch):
    """``profile()``'s one line (89 columns for a run dir under runs/ with its five files)
    folds at the width of the terminal its handler writes to; to a log, it stays one line."""
    import io
    import logging

    from toolkit.runner.session import _said_where

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("COLUMNS", "80")
    log = logging.getLogger("toolkit")
    # whatever earlier tests in this worker did to logging (disabled loggers, a global level)
    monkeypatch.setattr(log, "disabled", False)
    monkeypatch.setattr(logging.root.manager, "disable", logging.NOTSET)
    paths = {k: f"runs/mnist-20261128-201500/{k}" for k in
             ("report.json", "report.md", "steps.png", "anatomy.png", "memory.png")}  # fmt: skip
    level = log.level
    monkeypatch.setattr(log, "handlers", [])
    try:
        log.setLevel(logging.INFO)  # setLevel: the logger's cached levels cleared too
        for stream, most in ((Tty(), 80), (io.StringIO(), 10_000)):
            log.handlers = [logging.StreamHandler(stream)]
            _said_where("mnist", "runs/mnist-20261128-201500", paths)
            _check_where(stream, most)
    finally:
        log.setLevel(level)


def _check_where(stream, most):
    lines = stream.getvalue().rstrip("\n").split("\n")
    assert all(len(line) <= most for line in lines), lines
    assert lines[0].startswith("mnist: report in runs/mnist-20261128-201500")
    assert (len(lines) > 1) == (most == 80)


def test_the_readme_steptimer_snippet_prints_each_fit_s_own_ledger(
    tmp_path, make_model, make_dataset, monkeypatch, capsys
):
    """The README's "StepTimer in your own fit" block, run as written on a tiny model: its
    first ledger line is the timed fit's, its last the profiled fit's (it printed the first
    fit's ledger under the profiled one)."""
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    block = readme.partition("## StepTimer in your own `fit`")[2]
    code = re.search(r"```python\n(.*?)```", block, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    scope = {"model": make_model(), "dataset": make_dataset(20)}
    exec(compile(code, "README.md", "exec"), scope)  # the README's own code
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == str(scope["prof"].report.ledger.part_seconds), printed
    assert str(scope["timer"].ledger().part_seconds) in printed[:-1], printed
    assert printed[-1] != str(scope["timer"].ledger().part_seconds)
