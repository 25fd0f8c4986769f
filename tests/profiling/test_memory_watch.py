"""MemoryWatch: readings per epoch in a real fit; growth warnings from injected readings."""

from __future__ import annotations

import json

import pytest

from toolkit.profiling._memory_records import WatchedMemory
from toolkit.profiling.memory_watch import MemoryWatch, steady_growth


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([100, 200, 300], 200),
        ([100, 200, 300, 300], None),  # plateau at the end
        ([100, 300, 200, 400], None),  # not steady
        ([100, 101, 102], None),  # below the threshold
        ([100, 200], None),  # too few readings
        ([50, 10, 100, 200, 300], 200),  # only the last window counts
    ],
)
def test_steady_growth(values, expected):
    assert steady_growth(values, min_points=3, threshold=64) == expected


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_real_fit_records_host_rss_each_epoch(make_model, make_dataset):
    watch = MemoryWatch()
    make_model().fit(make_dataset(3), epochs=3, verbose=0, callbacks=[watch])
    assert [r.epoch for r in watch.readings] == [None, 0, 1, 2]
    assert all(r.host_rss_mb > 10 for r in watch.readings)
    assert all(r.devices == {} for r in watch.readings)  # CPU-only: no device memory exposed
    result = watch.result()
    assert result.readings == tuple(watch.readings)
    assert WatchedMemory.from_dict(json.loads(json.dumps(result.to_dict()))) == result


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_warns_once_on_steady_growth(make_model, make_dataset, caplog):
    rss = iter([100.0, 200.0, 300.0, 400.0, 500.0])
    gpu = iter([{"GPU:0": {"current_mb": 10.0 * i, "peak_mb": 10.0 * i}} for i in range(5)])
    watch = MemoryWatch(
        growth_warn_mb=50, min_epochs=3, rss_fn=lambda: next(rss), device_fn=lambda: next(gpu)
    )
    make_model().fit(make_dataset(2), epochs=4, verbose=0, callbacks=[watch])
    assert len(watch.warnings) == 1  # host only once, device growth (30 MiB) below the threshold
    assert watch.warnings[0].startswith("host RSS grew")
    assert "200 MiB" in watch.warnings[0]
    assert watch.readings[-1].devices["GPU:0"].current_mb == 40.0


def test_device_memory_failure_is_not_fatal():
    def broken():
        raise RuntimeError("no memory info on this device")

    watch = MemoryWatch(rss_fn=lambda: 1.0, device_fn=broken)
    assert watch.read(0).devices == {}


def test_bad_arguments():
    with pytest.raises(ValueError, match="min_epochs"):
        MemoryWatch(min_epochs=1)
    with pytest.raises(ValueError, match="growth_warn_mb"):
        MemoryWatch(growth_warn_mb=-1)
