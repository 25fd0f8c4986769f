"""StepTimer's TensorBoard scalars, read back with TensorBoard's own event reader: what the
Scalars tab shows is what StepTimer measured, written at epoch ends, never per step, in Keras's
``train`` / ``validation`` layout with a description on every tag."""

from __future__ import annotations

import pytest

from tests.helpers import read_scalars, scalar_descriptions
from toolkit.core.stats import TIMED
from toolkit.profiling.step_timer import StepTimer


def _scalars(logdir, run="train"):
    return read_scalars(logdir / run)


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_step_times_per_execution_and_epoch_figures(tmp_path, make_model, make_dataset):
    timer = StepTimer(warmup_steps=2, batch_size=8, tensorboard_dir=tmp_path / "tb")
    model = make_model()
    model.fit(make_dataset(12), epochs=2, verbose=0, callbacks=[timer])
    got = _scalars(tmp_path / "tb")
    # One point per timed execution, at the global step it ended on, in ms per step.
    points = got["Step time/ms"]
    step, expected = 0, []
    for seconds, n, _, kind in timer.calls:
        step += n
        if kind == TIMED:
            expected.append((step, seconds / n * 1e3))
    assert [(p.step, pytest.approx(p.value, rel=1e-5)) for p in points] == expected
    # Per epoch: p50 / p90 / examples/s at the epoch's last step; Keras's logs say the same.
    assert [p.step for p in got["Step time/p50_ms"]] == [12, 24]
    p50 = [p.value for p in got["Step time/p50_ms"]]
    # Keras's logs are rounded to µs (half a µs off at most); the event file keeps float32
    # (14.5065 reads back 14.50650024): the two differ by up to 5e-4 and a float32 digit.
    assert p50 == pytest.approx(model.history.history["step_ms_p50"], abs=5e-4 + 1e-5)
    assert all(p.value > 0 for p in got["Throughput/examples_per_sec"])
    p90 = got["Step time/p90_ms"]
    assert all(a.value <= b.value for a, b in zip(got["Step time/p50_ms"], p90, strict=True))
    assert not any(tag.startswith("epoch_") for tag in got)  # metrics only when asked
    assert not (tmp_path / "tb" / "validation").exists()
    assert timer.global_step == 24


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_log_steps_windows_and_epoch_metrics(tmp_path, make_model, make_dataset):
    timer = StepTimer(
        warmup_steps=0,
        log_steps=4,
        log_fn=lambda line: None,
        tensorboard_dir=tmp_path,
        tensorboard_metrics=True,
    )
    make_model().fit(make_dataset(9), epochs=1, verbose=0, callbacks=[timer])
    got = _scalars(tmp_path)
    # 8 timed steps after the first: windows of 4 end at steps 5 and 9.
    assert [p.step for p in got["Step time/ms"]] == [5, 9]
    assert [p.step for p in got["epoch_loss"]] == [0]  # x: the epoch, as Keras writes it
    assert "step_ms_p50" not in " ".join(got)  # StepTimer's own figures are not "metrics"


def test_a_custom_loop_writes_when_it_stops(tmp_path):
    ticks = iter(range(100))
    timer = StepTimer(warmup_steps=0, clock=lambda: next(ticks) * 0.01, tensorboard_dir=tmp_path)
    with timer:
        for _ in range(4):
            timer.step()
    got = _scalars(tmp_path)
    assert [round(p.value, 6) for p in got["Step time/ms"]] == [10.0, 10.0, 10.0]


def test_without_tensorboard_installed_the_error_says_what_to_install(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("tensorboard"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(ImportError, match=r"keras-perf-toolkit\[profile\]"):
        StepTimer(tensorboard_dir=tmp_path)


def test_a_long_epoch_is_written_in_at_most_max_points_windows(tmp_path):
    from toolkit.profiling.scalars import MAX_POINTS, Scalars

    scalars = Scalars(tmp_path)
    calls = [(0.001, 1, 0, "first")] + [
        (0.002 if k % 2 else 0.004, 1, 0, TIMED) for k in range(1000)
    ]
    assert scalars.epoch(calls, 0, batch_size=None) == 1001
    scalars.close()
    points = _scalars(tmp_path)["Step time/ms"]
    assert len(points) == MAX_POINTS and points[-1].step == 1001
    # Equal windows of alternating 4 and 2 ms steps: every window's mean is about 3 ms.
    assert all(2.8 - 1e-9 <= p.value <= 3.2 + 1e-9 for p in points)
    assert sum(p.value for p in points) / len(points) == pytest.approx(3.0, abs=0.05)


def test_the_c_crc_frames_records_as_tensorboard_does():
    # The event files' framing: the CRC used here must give TensorBoard's own numbers.
    import random

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    from toolkit.profiling.scalars import masked_crc32c_function

    crc = masked_crc32c_function()
    rng = random.Random(0)
    for n in (0, 1, 8, 57, 300):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert crc(data) == masked_crc32c(data)


def test_points_reach_the_file_at_flush_and_a_failed_write_keeps_them(tmp_path):
    import threading

    from toolkit.profiling.scalars import Scalars

    threads = threading.active_count()
    scalars = Scalars(tmp_path / "tb")
    scalars.write("a", 1.0, 1)
    assert not scalars.paths and not list((tmp_path / "tb").iterdir())  # nothing yet
    (tmp_path / "tb" / "train").write_text("")  # a file where the run's directory goes
    with pytest.raises(OSError):
        scalars.flush()
    (tmp_path / "tb" / "train").unlink()
    scalars.write("a", 2.0, 2)
    scalars.close()
    scalars.write("a", 3.0, 3)  # after close: the same file, one run
    scalars.flush()
    assert threading.active_count() == threads  # written in the caller's thread, none left
    assert len(list((tmp_path / "tb" / "train").iterdir())) == 1
    assert [(p.step, p.value) for p in _scalars(tmp_path / "tb")["a"]] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
    ]


def test_keras_layout_overlays_validation_and_every_tag_is_described(tmp_path):
    # Keras's TensorBoard callback: epoch_<metric> in train/, val_<metric> as the same tag in
    # validation/, x the epoch; TensorBoard's reader finds a description on each tag.
    from toolkit.profiling.scalars import Scalars, viewing_hint

    scalars = Scalars(tmp_path)
    calls = [(0.5, 1, 0, "first")] + [(0.01, 1, 0, TIMED)] * 4
    end = scalars.epoch(calls, 0, 8, {"loss": 0.9, "val_loss": 1.1, "val_accuracy": 0.5})
    scalars.epoch(calls, end, 8, {"loss": 0.5, "val_loss": 0.7, "val_accuracy": 0.75})
    scalars.utilization(flops_per_step=2e7, peak_flops=1e11)  # 10 ms steps: 2 GFLOP/s, 2%
    scalars.write("memory/host_rss_mb", 300.0, 10)
    scalars.close()
    assert scalars.runs == ["train", "validation"]
    train, validation = _scalars(tmp_path), _scalars(tmp_path, "validation")
    assert [p.step for p in train["epoch_loss"]] == [0, 1]
    assert [p.value for p in train["epoch_loss"]] == pytest.approx([0.9, 0.5])
    assert [p.step for p in validation["epoch_loss"]] == [0, 1]
    assert [p.value for p in validation["epoch_loss"]] == pytest.approx([1.1, 0.7])
    assert set(validation) == {"epoch_loss", "epoch_accuracy"}
    mfu = train["Throughput/mfu_percent"]
    assert [p.step for p in mfu] == [5, 10] and [p.value for p in mfu] == pytest.approx([2, 2])
    for run in ("train", "validation"):
        for tag, description in scalar_descriptions(tmp_path / run).items():
            assert len(description) > 30, (run, tag, description)
    # The groups TensorBoard opens (the first two, upper case sorted first) are the headline.
    groups = sorted({tag.split("/", 1)[0] for tag in train})
    assert groups[:2] == ["Step time", "Throughput"], groups
    assert viewing_hint("my runs") == "tensorboard --logdir 'my runs'"
