"""The ledger's memory (``toolkit.profiling._memory``): real fits with planted waste on
whichever backend runs the suite (``make test`` runs them again on JAX and PyTorch, and under
tf_keras: memory is read there as under Keras 3), the
record's JSON edge, the summary's lines, compare's line, steps.png and TensorBoard."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from toolkit.core import compat
from toolkit.core.files import ReportError
from toolkit.profiling._ledger_records import PARTS
from toolkit.profiling._memory import (
    Reading,
    at_end,
    epochs_growth,
    grown,
    steady_growth,
    steady_rise,
)
from toolkit.profiling._memory_records import EpochMemory, Growth, PartMemory, RunMemory, Sample
from toolkit.report._memory import memory_change, memory_lines
from toolkit.runner.session import profile

keras = compat.keras()


class KeepOutputs(keras.callbacks.Callback):
    """Planted waste: the model's outputs on a probe batch, kept after every training batch
    (a user's callback collecting predictions)."""

    def __init__(self, probe):
        super().__init__()
        self.probe = probe
        self.kept = []

    def on_train_batch_end(self, batch, logs=None):
        self.kept.append(self.model(self.probe, training=False))


STEPS = 320  # the leaky fit's steps an epoch


def _model(width=64):
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(width, activation="relu"), keras.layers.Dense(4)]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _arrays(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 32), dtype=np.float32), rng.integers(0, 4, n)


def _memory(p):
    memory = p.report.ledger.memory
    assert memory is not None and memory.readings >= 3, memory
    return memory


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_a_callback_keeping_outputs_is_found_in_the_first_epoch_and_named(tmp_path):
    """Outputs float32[256, 4] kept by a callback, one a step: found in the first epoch, said
    as the callback's, with what grows, who holds it and the fix. 320 steps an epoch: the
    first census is taken at batch 3's begin (the first step compiled), the second at the
    epoch's end (64 steps of Keras's next release on JAX once ended before a 50 ms reading:
    the census goes by batch, not by time)."""
    x, y = _arrays(STEPS * 32)
    keep = KeepOutputs(np.ones((256, 32), np.float32))
    with profile("leaky", report_dir=tmp_path, batch_size=32) as p:
        p.fit(_model(), x, y, batch_size=32, epochs=2, verbose=0, callbacks=[keep])
    memory = _memory(p)
    (counted,) = [g for g in memory.growth if g.memory in ("arrays", "tensors")]
    assert counted.part == "KeepOutputs" and counted.epoch == 0
    assert counted.held_by == "KeepOutputs.kept"
    # The outputs float32[256, 4]; on PyTorch each keeps its autograd graph, and the hidden
    # layer's float32[256, 64] kept with it is the larger group.
    assert "float32[256, 4]" in counted.what or "float32[256, 64]" in counted.what
    # Between the two censuses: the first once the sampler's thread sees step 3 or later (how
    # late, the machine's speed decides: 10 steps before the end on a fast JAX), the second at
    # the first epoch's end; what grew is what the callback kept over those steps.
    assert 1 <= counted.steps <= STEPS - 3, counted
    assert counted.mb >= 0.5 * counted.steps * 256 * 4 * 4 / 2**20
    assert "float(value)" in counted.fix
    lines = memory_lines(memory)
    assert any(line.startswith("memory grows: KeepOutputs: ") for line in lines), lines
    summary = p.report.summary()
    assert "memory: host peak " in summary and "fix: KeepOutputs.kept keeps" in summary
    saved = json.loads(next(tmp_path.glob("*/report.json")).read_text())
    assert saved["ledger"]["memory"]["growth"][0]["held_by"] == "KeepOutputs.kept"


def test_growth_whose_holder_cannot_be_found_keeps_the_ledger_and_says_so(
    tmp_path, monkeypatch, caplog
):
    """Naming who holds what grew searches the process's objects, anyone's: where that
    search fails, the growth stays as it was counted, without its fix, and a warning says why;
    the ledger, its memory and the report are kept (a TypeError there once cost a Keras
    example its whole ledger)."""
    from toolkit.profiling import _memory as memory_room

    def fails(*args, **kwargs):
        raise TypeError("an object the search could not read")

    monkeypatch.setattr(memory_room, "name_growth", fails)
    x, y = _arrays(STEPS * 32)
    keep = KeepOutputs(np.ones((256, 32), np.float32))
    with profile("leaky", report_dir=tmp_path, batch_size=32) as p:
        p.fit(_model(), x, y, batch_size=32, epochs=2, verbose=0, callbacks=[keep])
    memory = _memory(p)
    # As the census counted it, without what the naming adds (the fix)
    assert memory.growth and not any(g.fix for g in memory.growth), memory.growth
    assert "ledger_error" not in p.report.extra and p.report.ledger.parts
    assert "who holds the memory that grew: not found (an object the search" in caplog.text


class KeepLogs(keras.callbacks.Callback):
    """Planted waste: ``dict(logs)`` kept each batch, with a 0.38 MB array in it (a user's
    callback collecting its logs and a large extra)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append({**(logs or {}), "extra": np.ones(50_000)})


GENERATOR_LEAK = r"""
import json, sys
import numpy as np
from toolkit.core import compat
from toolkit.core.files import ReportError
from toolkit.runner.session import profile
keras = compat.keras()

def keeps_every_batch():  # keeps every batch it yields, 0.16 MB each: NumPy, no tensor
    kept = []
    rng = np.random.default_rng(0)
    while True:
        batch = rng.random((256, 32), dtype=np.float32), rng.integers(0, 4, 256)
        kept.append((batch, np.ones(16_000)))
        yield batch

# 600 steps of about 2 ms: the readings every 200 ms and at ten batches of the first epoch draw
# the rise (a 240-step epoch of 1 ms steps once gave too few to tell a rise from noise)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(512, activation="relu"),
                          keras.layers.Dense(4)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
with profile("leaky", report_dir=sys.argv[1], batch_size=256) as p:
    p.fit(model, keeps_every_batch(), steps_per_epoch=600, epochs=1, verbose=0)
print(json.dumps([g.to_dict() for g in p.report.ledger.memory.growth]))
"""


@pytest.mark.parametrize(
    "holder", ["callback dict", pytest.param("generator", marks=pytest.mark.every_backend)]
)
def test_a_leak_is_named_with_its_real_holder_size_and_fix(tmp_path, holder):
    """Who keeps what grows, as it is: a callback's ``dict(logs)`` is sized with the arrays
    in it (it read 0.00 MB beside the readings' +233 MB, in two entries), its fix does not
    tell a callback that keeps NumPy already to keep NumPy; a generator's local list is
    named as that (it was blamed on a TensorFlow internal holding 8 scalars).

    The generator's leak is seen in the resident set alone (no census counts NumPy), so it
    runs in a fresh process, as a user's script does: in a test worker that earlier tests
    left with freed memory, the allocator reuses it and the resident set need not rise. On
    every backend: JAX's and PyTorch's Keras closes the generator once ``fit`` returns, so
    its holder is named as the fit ends (it was found on TensorFlow only, whose tf.data
    keeps the generator longer)."""
    if holder == "generator":
        from tests.helpers import run_python

        out = run_python(GENERATOR_LEAK.replace("sys.argv[1]", repr(str(tmp_path))), 300)
        assert out.returncode == 0, out.stderr[-3000:]
        found = [Growth(**{k: v for k, v in g.items() if k != "mb_per_1k_steps"})
                 for g in json.loads(out.stdout.strip().splitlines()[-1])]  # fmt: skip
        (growth,) = [g for g in found if g.part != "validation"]
        assert growth.held_by == "keeps_every_batch()'s local kept (a generator)", growth
        assert growth.what.startswith("a list of ") and "tuple items" in growth.what
        assert growth.fix.startswith("keeps_every_batch()'s local kept (a generator) grows")
        return
    x, y = _arrays(256 * 160)
    with profile("leaky", report_dir=tmp_path, batch_size=256) as p:
        p.fit(_model(), x, y, batch_size=256, epochs=1, verbose=0, callbacks=[KeepLogs()])
    shown = [line for line in memory_lines(_memory(p)) if line.startswith(("memory grows", "fix"))]
    assert len(shown) == 2, shown  # one growth, one fix
    (growth,) = [g for g in _memory(p).growth if g.part != "validation"]
    assert growth.held_by == "KeepLogs.seen" and "dict items more after" in growth.what
    assert growth.mb >= 0.5 * growth.steps * 50_000 * 8 / 2**20, growth
    assert "float(value)" not in growth.fix and "KeepLogs.seen keeps" in growth.fix


@pytest.mark.legacy_keras
@pytest.mark.every_backend
def test_a_healthy_fit_reads_every_part_and_finds_no_growth(tmp_path):
    """No waste: every reading in a part of the ledger, the validation read, the run's peak
    a part's, the timeline in order and ending at the fit's last step, and no growth.

    "No growth" is a statistical check kept in a test on purpose (a false alarm is the bug):
    robust by construction, as the rule finds growth only past 8 MiB and four times the
    readings' own scatter about their line, still rising in the later half of the epoch."""
    x, y = _arrays(48 * 32)
    with profile("healthy", report_dir=tmp_path, batch_size=32) as p:
        p.fit(_model(), x, y, batch_size=32, epochs=2, verbose=0, validation_split=0.25)
    memory = _memory(p)
    names = {part.name for part in memory.parts}
    # (PyTorch's eager first step is too short to be read: its compile may have no reading.)
    assert names <= set(PARTS) and "validation" in names and names & {"compile", "steps"}
    for part in memory.parts:
        assert part.host_peak_mb >= memory.host_start_mb * 0.5 and part.readings >= 1
    assert memory.host_peak_mb == max(part.host_peak_mb for part in memory.parts)
    # Each callback with an epoch's hook is read as it ends (History, the profile's own).
    assert memory.callbacks and all(c.readings >= 1 for c in memory.callbacks)
    assert "callbacks" in names
    assert memory.growth == (), memory.growth
    # Train begin, then each epoch's end (after its validation), at the steps begun by then.
    assert [e.epoch for e in memory.epochs] == [None, 0, 1], memory.epochs
    assert [e.step for e in memory.epochs[1:]] == [36, 72] and memory.epochs[0].host_mb > 10
    assert [s.t_s for s in memory.timeline] == sorted(s.t_s for s in memory.timeline)
    assert memory.timeline[-1].step == p.report.ledger.steps
    if memory.device_peak_mb is None:  # a CPU device: said so, host memory is shown
        assert memory.device_unseen and "CPU" in memory.device_unseen


def test_validation_on_a_large_set_is_where_memory_grows(tmp_path):
    """TensorFlow: validation data far larger than the training set, as arrays: the
    validation is where the run's memory peaked, and memory it keeps after it is the
    validation's growth.

    Large by construction: Keras turns the arrays into its validation dataset as the
    validation begins, and the first step's trace (the compile part) took 50-100 MiB of its
    own, given back after it. With 49 MiB of validation features, a process that had run
    other tests first filled part of the copy from memory freed before, and reached only 4 MiB
    above the compile's peak: within the 1 % of the run's peak that names the first part to
    reach it, the compile. 196 MiB of features outgrow whatever the compile gave back."""
    x, y = _arrays(32 * 32)
    xv, yv = _arrays(1_600_000, seed=1)  # 196 MiB of features
    with profile("big-validation", report_dir=tmp_path, batch_size=32) as p:
        p.fit(_model(), x, y, batch_size=32, epochs=1, verbose=0, validation_data=(xv, yv),
              validation_batch_size=4096)  # fmt: skip
    memory = _memory(p)
    validation = memory.part("validation")
    assert validation is not None and validation.readings >= 2
    # Its part reached the run's peak, well above where the fit began. What it still holds
    # after it ends is the allocator's to keep or give back (under load it gave it back):
    # where it kept 8 MiB or more, that is growth in the validation, of the first epoch.
    assert memory.peak_part("host").name == "validation", memory.parts
    assert validation.host_peak_mb - memory.host_start_mb >= 8, memory.parts
    for g in memory.growth:
        assert g.part == "validation" and g.epoch == 0 and g.mb >= 8, memory.growth


def test_a_timer_on_its_own_clock_reads_no_memory():
    """Memory is read on a thread, on the default clock only (a test's clock is its own)."""
    import time

    from toolkit import StepTimer

    timer = StepTimer(clock=time.monotonic)
    x, y = _arrays(64)
    _model().fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[timer])
    assert timer.ledger().memory is None


def test_memory_every_s_is_checked_and_none_turns_it_off():
    from toolkit import StepTimer
    from toolkit.core.checks import ConfigError

    with pytest.raises(ConfigError, match="memory_every_s"):
        StepTimer(memory_every_s=0)
    timer = StepTimer(memory_every_s=None)
    x, y = _arrays(64)
    _model().fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[timer])
    assert timer.ledger().memory is None and timer.ledger().wall_s > 0


def test_steady_rise_tells_a_leak_from_a_buffer_that_filled():
    leak = [(s, 500 + 0.5 * s) for s in range(0, 100, 5)]
    assert steady_rise(leak) == pytest.approx((47.5, 95))
    filled = [(s, 500 + min(s, 20) * 2.0) for s in range(0, 100, 5)]  # +40 MB, then flat
    assert steady_rise(filled) is None
    noise = [(s, 500 + (3 if s % 10 else -3)) for s in range(0, 100, 5)]
    assert steady_rise(noise) is None
    assert steady_rise(leak[:4]) is None  # too few readings to say


def test_a_leak_only_the_readings_see_is_found_in_a_first_epoch_shorter_than_their_pace():
    """Memory no census counts (a buffer growing by 1 MiB a step, not a list or a dict) is
    found from the readings alone, in a first epoch of 128 fast steps (0.1-0.3 s here, one
    reading at 200 ms): there ten more readings come at batches spread over the epoch."""
    from toolkit import StepTimer

    class GrowsABuffer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.blob = bytearray()

        def on_train_batch_begin(self, batch, logs=None):
            self.blob.extend(bytes(2**20))  # written: resident, a MiB a step

    timer = StepTimer()
    x, y = _arrays(128 * 8)
    _model().fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[timer, GrowsABuffer()])
    memory = timer.ledger().memory
    host = [g for g in memory.growth if g.memory == "host"]
    assert len(host) == 1, (memory.growth, memory.readings)
    assert host[0].epoch == 0 and host[0].mb >= 64, memory.growth


def test_find_growth_reads_a_validation_against_its_steps_level_not_one_reading():
    """A healthy step's buffers swing resident memory by tens of MB; a validation ending
    between its steps' trough and crest left nothing held. One that ends above the highest
    its steps read, by the floor or more, did; the first one counts from its second batch."""
    from toolkit.profiling._ledger import EpochSpan, Tile, ValidationSpan
    from toolkit.profiling._memory import Overlay, Reading, _Where, find_growth

    def read(at, mb):
        return Reading(at, int(at), mb, mb, None, None)

    swing = [read(1 + 0.1 * k, 1000 + (25 if k % 2 else -25)) for k in range(20)]  # the steps
    epoch = EpochSpan(0, 0.5, 1.0, 3.0, 5.0)
    tiles = [Tile(0.0, 1.0, "compile"), Tile(1.0, 3.0, "steps"), Tile(3.1, 4.0, "validation")]
    where = _Where(tiles, [Overlay(0.0, 1.0, "compile")])
    first = ValidationSpan(0, 3.1, 4.0, [(0, 3.1), (1, 3.3), (2, 3.6)])

    def found(*validation):
        return find_growth([*swing, *validation], where, [epoch], [first])

    # its second batch began at a trough, its end 30 MB above it, within the steps' swing
    assert found(read(3.2, 1060), read(3.3, 990), read(4.0, 1020)) == []
    # it ended 40 MB over all of it: held
    (g,) = found(read(3.2, 1010), read(3.3, 1020), read(4.0, 1065))
    assert (g.part, g.memory, g.mb, g.epoch) == ("validation", "host", 40.0, 0)
    # a first validation of one batch is all compile
    one = ValidationSpan(0, 3.1, 4.0, [(0, 3.1)])
    assert find_growth([*swing, read(4.0, 1200)], where, [epoch], [one]) == []


def test_find_growth_leaves_a_trace_window_s_buffers_out_of_the_steps_growth():
    """A profiler's buffers fill while it traces and go when it stops: a rise over the
    traced steps (``traced_steps``: StepTimer's excluded executions) is no growth of the
    fit's ("steps: host +207 MB, 14.47 GB per 1,000 steps" on a 48-step fit), where the
    same rise with no trace over it is."""
    from toolkit.core.stats import EXCLUDED, FIRST, TIMED, WARMUP
    from toolkit.profiling._ledger import EpochSpan, Tile
    from toolkit.profiling._memory import Overlay, Reading, _Where, find_growth, traced_steps

    calls = [(1.0, 1, 0, FIRST), *[(0.1, 1, 0, WARMUP)] * 4, *[(0.1, 1, 0, TIMED)] * 5,
             *[(0.1, 1, 0, EXCLUDED)] * 6, *[(0.1, 1, 0, TIMED)] * 32]  # fmt: skip
    assert traced_steps(calls) == ((10, 16),)
    # flat, then 30 MB a step through steps 10-16, then held at its high: steps 0 to 48
    mb = [1000.0 + 30 * min(max(0, s - 10), 6) for s in range(48)]
    readings = [Reading(1 + 0.1 * s, s, m, m, None, None) for s, m in enumerate(mb)]
    epoch = EpochSpan(0, 0.5, 1.0, 6.0, 6.5)
    where = _Where([Tile(1.0, 6.0, "steps")], [Overlay(0.0, 1.0, "compile")])
    assert find_growth(readings, where, [epoch], [], traced_steps(calls)) == []
    # the same steps untraced, and memory that keeps rising after the trace: growth
    (g,) = find_growth(readings[:18], where, [epoch], [])
    assert (g.part, g.memory) == ("steps", "host") and g.mb > 100
    rising = [Reading(1 + 0.1 * s, s, 1000.0 + 10 * s, 0, None, None) for s in range(48)]
    (g,) = find_growth(rising, where, [epoch], [], traced_steps(calls))
    assert g.part == "steps" and g.mb > 50  # a run of steps outside the trace rose too
    # a rise that the next epoch's steps no longer show filled a buffer (the trace's freed
    # memory taken back): no growth; one that goes on in the next epoch is
    second = EpochSpan(1, 6.5, 7.0, 9.0, 9.5)
    where = _Where([Tile(1.0, 6.0, "steps"), Tile(7.0, 9.0, "steps")], [])
    refill = [Reading(1 + 0.1 * s, s, 1000.0 + 3 * s, 0, None, None) for s in range(48)]
    level = [Reading(7 + 0.1 * k, 48 + k, 1150.0, 0, None, None) for k in range(16)]
    assert find_growth([*refill, *level], where, [epoch, second], []) == []
    more = [Reading(7 + 0.1 * k, 48 + k, 1150.0 + 3 * k, 0, None, None) for k in range(16)]
    assert [g.epoch for g in find_growth([*refill, *more], where, [epoch, second], [])] == [0, 1]
    # JAX's first steps allocate: a rise over one short epoch, then level over later epochs
    # too short for their own readings to show it ("2.37 GB per 1,000 steps", 72 steps)
    third = EpochSpan(2, 9.5, 10.0, 12.0, 12.5)
    where = _Where([Tile(1.0, 6.0, "steps"), Tile(7.0, 9.0, "steps"), Tile(10, 12, "steps")], [])
    later = [Reading(7.5 + k, 48 + 12 * k, 1141.0 + (k % 2), 0, None, None) for k in range(5)]
    assert find_growth([*refill, *later], where, [epoch, second, third], []) == []
    going = [Reading(7.5 + k, 48 + 12 * k, 1141.0 + 36 * k, 0, None, None) for k in range(5)]
    assert [g.epoch for g in find_growth([*refill, *going], where, [epoch, second, third], [])
            ] == [0]  # fmt: skip


def test_grown_needs_about_one_more_a_step_between_two_censuses():
    """One more a step is a leak per batch; one every other step is not counted as one."""
    from toolkit.profiling._memory import Census, Grown, Holder, Kept

    a = Census(3, "arrays", {"float32[32, 10]": (2, 2560), "float32[64]": (5, 1280)}, {})
    b = Census(43, "arrays", {"float32[32, 10]": (42, 53760), "float32[64]": (9, 2304)}, {})
    growth, keys, holder = grown([a, b])
    assert keys == ("float32[32, 10]",) and holder is None
    assert growth.what == "40 arrays float32[32, 10] more after 40 steps"
    assert growth.mb == pytest.approx(51200 / 2**20, abs=1e-6) and growth.steps == 40
    assert grown([a]) == Grown()
    # A callback's list that grew by one a step is named with its holder, before any group:
    # the holder is the record of who keeps it (the object and the list), not words to parse.
    keep, kept, few = object(), [0.0] * 43, [1] * 9
    held, held_few = Holder("Keep.kept", keep, kept), Holder("Keep.few", keep, few)
    kept_a = a._replace(containers={"Keep.kept": Kept(3, "float32[64]", 256, held),
                                    "Keep.few": Kept(1, "int", 0, held_few)})  # fmt: skip
    kept_b = b._replace(containers={"Keep.kept": Kept(43, "float32[64]", 256, held),
                                    "Keep.few": Kept(9, "int", 0, held_few)})  # fmt: skip
    growth, _, holder = grown([kept_a, kept_b])
    assert holder is held and holder.container() is kept
    assert growth.held_by == "Keep.kept" and growth.mb == pytest.approx(40 * 256 / 2**20, abs=1e-6)
    assert growth.what == "40 float32[64] more after 40 steps"
    # One float a step (a timing callback's list): 20 MB in a million steps, not a leak to fix.
    floats = Holder("Timer.t", keep, [0.0] * 43)
    timer_a = Census(3, "arrays", {}, {"Timer.t": Kept(3, "float", 8, floats)})
    timer_b = Census(43, "arrays", {}, {"Timer.t": Kept(43, "float", 8, floats)})
    assert grown([timer_a, timer_b]) == Grown()


def test_python_holder_names_the_list_of_arrays_and_passes_over_what_it_cannot_size():
    """The scan of the collector's lists meets every list in the process: classes (a pytree
    registry holds ``np.ndarray`` itself, whose shape and dtype are descriptors: the Keras
    weather example's whole ledger was lost to a TypeError on one) and objects that raise.
    Neither is an array nor stops the scan, and none is asked anything that warns (PyTorch's
    deprecated ``reduce_op`` warns when its ``__class__`` is read): the list that holds the
    arrays is named, by its object's attribute (kept inline, as Python 3.11 keeps them). In a
    fresh process: in this one, a list an earlier test left alive may be the largest."""
    from tests.helpers import run_python

    code = """
import contextlib, warnings
import numpy as np
from toolkit.profiling._memory import _is_array, _nbytes, _python_holder

with contextlib.suppress(ImportError):  # an object that warns when its __class__ is read
    import torch.distributed  # noqa: F401 (its deprecated reduce_op)
warnings.simplefilter("error")  # the scan reads every object: none of them may warn

class Keeper:  # a user's object keeping every batch it makes
    pass

class Unsizable:  # the collector's lists may hold anything
    dtype = "float32"

    @property
    def shape(self):
        raise RuntimeError("no shape here")

assert not _is_array(np.ndarray) and _is_array(np.zeros(3))
assert _nbytes([np.ndarray, np.ndarray]) > 0  # the list's and the classes' own sizes
keeper = Keeper()
keeper.kept = [np.ones(2**17) for _ in range(20)]  # 20 MiB, as a leak holds it
classes, unsizable = [np.ndarray] * 40, [Unsizable() for _ in range(40)]
holder, what = _python_holder(None, least=10 * 2**20, steps=20)
assert holder.container() is keeper.kept, holder
print(holder.words, "|", what)
"""
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "Keeper.kept | a list of 20 float64[131072] (20.0 MB)"


def _memory_record(peak, device=None):
    return RunMemory(
        every_s=0.05,
        parts=(
            PartMemory("compile", peak, peak - 5, device, device),
            PartMemory("steps", 100.0, 99.0),
        ),
        host_peak_mb=peak,
        device_peak_mb=device,
        host_start_mb=90.0,
        growth=(Growth("steps", "host", 12.5, 500, 0, "3 arrays x", "Keep.kept", "do y"),),
        timeline=(Sample(0.0, 0, 90.0, None, "start_up"), Sample(0.5, 12, peak, device, "steps")),
        readings=2,
        epochs=(EpochMemory(None, 0, 90.0, device, device), EpochMemory(0, 12, 99.0, None, None)),
    )


def test_the_memory_record_reads_back_from_its_json():
    record = _memory_record(1400.0, 200.0)
    assert RunMemory.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    assert RunMemory.from_dict(None) is None
    # an older report's: a field it lacks takes its default, a row without its part
    old = RunMemory.from_dict({"every_s": 0.05, "parts": {"steps": {"host_peak_mb": 90}},
                               "timeline": [[0.1, 1, 5.0]]})  # fmt: skip
    assert old.part("steps").readings == 0 and old.timeline == (Sample(0.1, 1, 5.0),)
    # one reader checks every field, naming the first of the wrong kind
    for bad, field in (({"every_s": "x"}, "ledger.memory.every_s"),
                       ({"every_s": 0.0}, "ledger.memory.every_s"),
                       ({"every_s": 0.05, "parts": {"steps": {"host_peak_mb": "no"}}},
                        "ledger.memory.parts.steps.host_peak_mb"),
                       ({"every_s": 0.05, "timeline": [[0.1, 1, 5.0], [1, 2]]},
                        "ledger.memory.timeline[1]"),
                       ({"every_s": 0.05, "growth": [{"part": "steps", "mb": -1}]},
                        "ledger.memory.growth[0].mb"),
                       ({"every_s": 0.05, "devices": ["CPU:0", 0]}, "ledger.memory.devices[1]"),
                       ({"every_s": 0.05, "epochs": [{"epoch": 1.5, "host_mb": 3}]},
                        "ledger.memory.epochs[0].epoch")):  # fmt: skip
        with pytest.raises(ReportError, match=rf"^field {re.escape(field)} is "):
            RunMemory.from_dict(bad)


def test_memory_lines_say_the_peak_where_it_was_reached_and_the_growth_with_its_fix():
    lines = memory_lines(_memory_record(1400.0, 200.0))
    assert lines[0] == (
        "memory: host peak 1.37 GB in compile (start 90.0 MB, end 1.37 GB); "
        "device peak 200 MB in compile"
    )
    assert lines[1] == (
        "memory grows: steps: 3 arrays x (+12.5 MB, 25.0 MB per 1,000 steps), held by Keep.kept"
    )
    assert lines[2] == "fix: do y"
    assert all(len(line) <= 100 for line in lines)


def test_memory_change_is_compares_line():
    a, b = _memory_record(1000.0), _memory_record(1310.0)
    assert memory_change(a, b) == "B: peak host memory +310 MB (+31 %), 1000 MB -> 1.28 GB"
    assert memory_change(a, None) is None


def test_memory_reaches_tensorboard_and_steps_png(tmp_path):
    """The readings as ``memory/host_mb`` at the steps they were read at (read back with
    TensorBoard's own reader), and steps.png drawn with the memory panel."""
    from tests.helpers import read_scalars
    from toolkit.profiling.scalars import HOST_MB

    x, y = _arrays(40 * 32)
    with profile("scalars", report_dir=tmp_path, batch_size=32, tensorboard=True) as p:
        p.fit(_model(), x, y, batch_size=32, epochs=2, verbose=0)
    memory = _memory(p)
    (run_dir,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    points = read_scalars(run_dir / "train")[HOST_MB]
    steps = [pt.step for pt in points]
    assert steps == sorted(set(steps)) and steps[-1] == p.report.ledger.steps
    assert max(pt.value for pt in points) == pytest.approx(
        max(s.host_mb for s in memory.timeline), rel=1e-5
    )
    assert (run_dir / "steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([100, 200, 300], 200),
        ([100, 200, 300, 300], None),  # plateau at the end
        ([100, 300, 200, 400], None),  # not steady
        ([100, 120, 130], None),  # steady but below the threshold
        ([100, 200], None),  # too few readings
    ],
)
def test_steady_growth_needs_every_reading_to_rise_past_the_threshold(values, expected):
    assert steady_growth(values, min_points=3, threshold=64) == expected


def test_memory_rising_at_each_epoch_end_is_growth_across_epochs_said_once_as_it_goes(caplog):
    """Host memory up 100 MiB at each of the last epoch ends: growth of the ``epochs`` part
    over the steps between them, in the summary's words; the device's 10 MiB a step is not.
    The ledger warns as the fit goes, once, at the epoch end that shows it."""
    from toolkit.profiling._ledger import FitLedger

    ends = [EpochMemory(e, 50 * (e + 1), 500.0 + 100 * (e + 1), 40.0 + 10 * e, 60.0)
            for e in range(3)]  # fmt: skip
    (g,) = epochs_growth([EpochMemory(None, 0, 500.0, 30.0, 30.0), *ends])
    assert (g.part, g.memory, g.mb, g.steps, g.epoch) == ("epochs", "host", 200.0, 100, 2)
    # Two epochs are two ends: the train begin's reading, before the first compile and the
    # first epoch's buffers, is no third.
    assert epochs_growth([EpochMemory(None, 0, 300.0, 30.0, 30.0), *ends[:2]]) == []
    record = dataclasses.replace(_memory_record(1400.0), growth=(g,))
    assert "memory grows: across epochs: host +200 MB, 1.95 GB per 1,000 steps" in memory_lines(
        record
    )

    class Readings:  # a sampler whose readings rise 100 MiB an epoch
        def __init__(self):
            self.readings, self.censuses = [], []

        def read(self):
            n = len(self.readings)
            self.readings.append(Reading(float(n), 50 * n, 500.0 + 100 * n, 0.0, None, None))
            return self.readings[-1]

    ledger = FitLedger(lambda: 0.0)
    ledger.sampler = Readings()
    ledger.memory_ends.append(at_end(None, ledger.sampler.read()))  # train begin, as begin() does
    with caplog.at_level("WARNING"):
        for epoch in range(4):
            ledger.epoch_end(epoch, epoch, epoch, epoch + 0.5, epoch + 0.9, [])
    said = [r.getMessage() for r in caplog.records if "grew at each" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("StepTimer: host RSS grew at each of the last 3")
