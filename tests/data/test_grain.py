"""Grain pipelines from the toolkit's builder: real Grain, real files, real fits. The order
of examples is the arrays path's (the same seed, the same batches), image files decode to
what tf.data decodes, worker processes give what threads give, and Keras's fit, the pipeline
benchmark and diagnose read them."""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("grain")  # the [grain] extra, in the test extras: never skipped in CI

from toolkit import data as D
from toolkit.data import catalog


def _grain(*args, **kwargs):
    """The one builder, Grain's stages (``toolkit.data._grain``)."""
    return D.pipeline(*args, loader="grain", **kwargs)


def _labels(batches):
    return [np.asarray(b[1]).tolist() for b in batches]


def test_grain_batches_are_the_arrays_path_s_in_its_order_epoch_after_epoch(arrays):
    x, y = arrays  # 48 examples
    y = np.arange(len(y), dtype=np.int32)  # each label names its example
    ds = _grain((x, y), 10, seed=3)
    assert len(ds) == 4 and D.infer_batch_size(ds) == 10
    said = D.describe_pipeline(ds)
    assert said.startswith("arrays (one gather per batch) → shuffle(per epoch, seed 3)"), said
    assert "batch(10)" in said and said.endswith("(grain)")
    reference = D.array_batches((x, y), 10, shuffle=True, seed=3, drop_remainder=True)
    epochs = []
    for _ in range(2):  # each iteration (fit's epoch) is the next epoch, in a new order
        epochs.append(_labels(ds))
        assert epochs[-1] == _labels(reference[i] for i in range(reference.num_batches))
        reference.on_epoch_end()
    assert epochs[0] != epochs[1] and all(len(b) == 10 for e in epochs for b in e)
    seen = [label for batch in epochs[0] for label in batch]
    assert len(seen) == len(set(seen)) == 40  # one epoch: no example twice
    # Two batches read and dropped (Keras reads two to infer the spec) move nothing on.
    fresh = _grain((x, y), 10, seed=3)
    it = iter(fresh)
    next(it), next(it)
    assert _labels(fresh) == epochs[0]
    # Endless: epoch after epoch in one iterator, len() an epoch's steps; a last partial batch
    # kept; the same seed, the same stream.
    stream = iter(_grain((x, y), 10, seed=3, repeat=True, drop_remainder=False))
    sizes = [len(next(stream)[1]) for _ in range(10)]
    assert sizes == [10, 10, 10, 10, 8] * 2
    # repeat(), as code written for tf.data times a pipeline: the same batches, endlessly.
    again = iter(ds.repeat())
    assert ds.repeat().endless and len(ds.repeat()) == 4 and not ds.endless
    assert [next(again)[1].tolist() for _ in range(4)] == _labels(_grain((x, y), 10, seed=3))
    # The tf.data-only settings refused in one line; workers are Grain's.
    with pytest.raises(ValueError, match="workers=2: worker processes are Grain's"):
        D.pipeline((x, y), 10, workers=2)
    with pytest.raises(ValueError, match="cache: a tf.data setting"):
        D.pipeline((x, y), 10, cache=True, loader="grain")
    with pytest.raises(ValueError, match="batch_size=64 is larger than the 48 examples"):
        _grain((x, y), 64)


def test_image_files_decode_as_tf_data_does_in_threads_and_in_worker_processes(image_dir):
    files = D.image_folder(image_dir, (8, 8), loader="grain")
    assert len(files) == 12  # 3 classes × 4, the stray text file left out
    reference = list(D.image_folder(image_dir, (8, 8)).as_numpy_iterator())
    for i, (image, label) in enumerate(reference):
        mine, my_label = files[i]
        assert my_label == label and mine.shape == image.shape == (8, 8, 3)
        is_png = files.paths[i].endswith(".png")
        # PNG: the same pixels and resize; JPEG: decoders may round a level apart.
        np.testing.assert_allclose(mine, image, atol=1e-5 if is_png else 0.05)
    augment = lambda image, label, rng: (image[:, ::-1] if rng.random() < 0.5 else image, label)  # noqa: E731
    built = dict(augment=augment, batch_map=lambda b: (b[0] * 2, b[1]), seed=1)  # fmt: skip
    threads = _grain(files, 4, num_parallel_calls=2, **built)
    said = D.describe_pipeline(threads)
    assert "ImageFiles (by index)" in said and "random_map(augment)" in said, said
    workers = _grain(files, 4, num_parallel_calls=1, workers=2, **built)
    assert "2 processes" in D.describe_pipeline(workers)
    by_threads, by_workers = list(threads), list(workers)
    assert len(by_threads) == len(by_workers) == 3
    for a, b in zip(by_threads, by_workers, strict=True):
        np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))
        np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))
    assert float(np.max(by_threads[0][0])) > 1.0  # the batch map ran (pixels × 2)


def test_worker_processes_start_once_and_a_script_exits_clean(image_dir, tmp_path):
    """Epoch after epoch (fit's iterations) read one stream: the worker processes started for
    the first epoch serve the next (a new pair per epoch cost 1.6 s of each 1.7 s epoch), a
    partial read still restarts the epoch, and a script that still holds a batch (and an
    endless stream) at exit leaves no shared memory to the resource tracker and no error at
    teardown."""
    import subprocess

    files = D.image_folder(image_dir, (8, 8), loader="grain")
    ds = _grain(files, 4, num_parallel_calls=1, workers=2, seed=5)
    reference = _labels(_grain(files, 4, num_parallel_calls=1, seed=5))
    it = iter(ds)
    next(it)  # a partial read (Keras's spec) moves nothing on
    first = _labels(ds)
    stream = ds._stream
    epochs = [first, _labels(ds), _labels(ds)]
    assert ds._stream is stream and stream is not None  # the same workers, three epochs
    assert first == reference and epochs[1] != first and ds.epoch == 3
    # Two readers at once would take each other's batches: the older one is refused.
    older = iter(ds)
    next(older)
    newer = iter(ds)
    next(newer)  # the newer one reads
    with pytest.raises(RuntimeError, match="a later iter"):
        next(older)
    ds.close()
    assert ds._stream is None
    # A batch from worker processes keeps its structure (a namedtuple too) as plain arrays.
    from collections import namedtuple

    from toolkit.data._grain import _own_arrays

    pair = namedtuple("Pair", "x y")(np.ones(2), {"k": np.zeros(1)})
    owned = _own_arrays(pair)
    assert type(owned) is type(pair) and owned.x.tolist() == [1.0, 1.0]
    assert owned.y["k"].tolist() == [0.0]
    script = tmp_path / "train.py"
    script.write_text(
        "from toolkit import data as D\n"
        "if __name__ == '__main__':\n"
        f"    files = D.image_folder({str(image_dir)!r}, (8, 8), loader='grain')\n"
        "    ds = D.pipeline(files, 4, loader='grain', workers=2, num_parallel_calls=1)\n"
        "    for epoch in range(2):\n"
        "        for batch in ds:\n"
        "            pass\n"
        "    endless = iter(ds.repeat())  # a stream of its own, still open at exit\n"
        "    more = [next(endless) for _ in range(3)]\n"
        "    held = batch  # still referenced when the interpreter exits\n"
        "    print('done', type(held[0]).__name__, flush=True)\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300,
        cwd=str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0 and "done ndarray" in out.stdout, out.stderr[-2000:]
    assert "leaked shared_memory" not in out.stderr, out.stderr[-2000:]
    assert "Exception ignored" not in out.stderr, out.stderr[-2000:]


def test_the_catalog_gives_grain_the_examples_tf_data_reads(image_dir):
    spec = catalog.ImageSpec(8, 8, 3, 3)
    data = catalog.load(f"folder:{image_dir}", spec, validation_fraction=0.25)
    train, held = data.examples(True), data.examples(False)
    assert (len(train), len(held)) == (9, 3) == (data.train_examples, 12 - 9)
    tf_labels = [int(lab) for _, lab in data.validation().as_numpy_iterator()]
    assert np.asarray(held.labels).tolist() == tf_labels
    x_tf, _ = next(iter(data.validation().batch(3).as_numpy_iterator()))
    np.testing.assert_allclose(held.take(np.arange(3))[0], x_tf, atol=0.05)
    digits = catalog.load("digits", catalog.ImageSpec(16, 16, 1, 10))
    x_d, y_d = next(iter(digits.train().batch(4).as_numpy_iterator()))
    mine = digits.examples(True).take(np.arange(4))
    np.testing.assert_allclose(mine[0], x_d, atol=1e-5)
    np.testing.assert_array_equal(mine[1], y_d)
    tokens = catalog.load("digits", catalog.TokenSpec(70, 64, 10))
    x_t, y_t = next(iter(tokens.validation().batch(4).as_numpy_iterator()))
    mine = tokens.examples(False).take(np.arange(4))
    np.testing.assert_array_equal(mine[0], x_t)
    np.testing.assert_array_equal(mine[1], y_t)


def test_fit_benchmark_and_diagnose_read_a_grain_pipeline(keras, arrays):
    from toolkit.search import diagnose as dg

    x, y = arrays

    def model():
        m = keras.Sequential([keras.Input((x.shape[1],)), keras.layers.Dense(3)])
        m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(True))
        return m

    ds = _grain((x, y), 8, seed=0, repeat=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        history = model().fit(ds, epochs=2, steps_per_epoch=len(ds), verbose=0)
    assert len(history.history["loss"]) == 2
    assert not [w for w in seen if "ran out of data" in str(w.message)]
    bench = D.benchmark(ds, num_batches=10, verbose=False)
    assert bench.batch_size == 8 and bench.examples_per_sec > 0 and bench.first_batch_s > 0
    diagnosis = dg.diagnose(model(), ds, steps=4)
    verdicts = (dg.INPUT_BOUND, dg.COMPUTE_BOUND, dg.BALANCED, dg.UNCERTAIN)
    assert diagnosis.verdict in verdicts, str(diagnosis)
    assert "Keras's GrainDatasetAdapter" in diagnosis.pipeline, diagnosis.pipeline


def test_without_grain_the_toolkit_works_and_asking_for_it_is_one_line(monkeypatch, arrays):
    from toolkit.runner.config import ConfigError, TrainConfig

    monkeypatch.setitem(sys.modules, "grain", None)  # import grain fails, as uninstalled
    from toolkit.data._grain import has_grain

    assert not has_grain()
    with pytest.raises(ImportError, match=r"pip install 'keras-perf-toolkit\[grain\]'"):
        D.pipeline(arrays, 8, loader="grain")
    with pytest.raises(ConfigError, match=r"--data_loader=grain needs Grain.*\[grain\]"):
        TrainConfig(data_loader="grain").validate()
    with pytest.raises(ConfigError, match="--data_loader must be one of auto, tf_data, grain"):
        TrainConfig(data_loader="pytorch").validate()


def test_auto_readers_are_chosen_by_the_fit_they_feed(image_dir, tmp_path, monkeypatch):
    """``workers="auto"`` is judged by the fit the pipeline feeds: arrays gathered a batch at
    a time get threads; where the step computes on the CPU, or beside a device's step on one
    usable core, one reader thread and never worker processes, nothing measured (a reader's
    core is the step's); beside a device's step, threads and a process per spare core are
    measured once, then read from the cache (either may win on a shared machine: the test
    checks the rule, the measurement and the cache, not the winner)."""
    from toolkit import devices
    from toolkit.data import _grain_readers as readers

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    x, y = np.zeros((16, 2), "float32"), np.arange(16)
    said = D.describe_pipeline(_grain((x, y), 4, workers="auto"))
    assert "auto: arrays gathered a batch at a time: threads" in said, said
    assert readers.step_device() in {"cpu"} | {d.kind for d in devices.detect()}
    assert 1 <= readers.usable_cores() <= (os.cpu_count() or 1)

    files = D.image_folder(image_dir, (8, 8), loader="grain")
    monkeypatch.setattr(readers, "step_device", lambda: "cpu")
    for cores in (1, 2, 64):  # the step on the CPU: one thread, however many cores
        monkeypatch.setattr(readers, "usable_cores", lambda cores=cores: cores)
        said = D.describe_pipeline(_grain(files, 4, workers="auto", seed=2))
        assert "prefetch(2, 1 threads; auto: 1 thread: the step computes on the CPU" in said
        assert "none spare for another reader" in said, said
        assert "processes ×" not in said and "measured" not in said, said
    given = D.describe_pipeline(_grain(files, 4, num_parallel_calls=3, workers="auto"))
    assert "(6, 3 threads; auto: 3 threads: the step computes on the CPU" in given, given
    assert "none spare for worker processes" in given, given
    monkeypatch.setattr(readers, "step_device", lambda: "cuda")
    monkeypatch.setattr(readers, "usable_cores", lambda: 1)  # one core, and it feeds the device
    said = D.describe_pipeline(_grain(files, 4, workers="auto"))
    assert "1 threads; auto: 1 thread: 1 usable core, none spare beside the step" in said, said
    assert not (tmp_path / "grain_readers.json").exists()  # nothing was measured

    monkeypatch.setattr(readers, "usable_cores", lambda: 2)  # one spare: measured
    first = D.describe_pipeline(_grain(files, 4, workers="auto", seed=2))
    assert "; auto: " in first and "examples/s on 1 threads" in first, first
    assert "on 1 processes" in first and "the step on cuda, 1 of 2 cores spare" in first, first
    assert (tmp_path / "grain_readers.json").exists()
    again = _grain(files, 4, workers="auto", seed=2)
    said = D.describe_pipeline(again)
    assert ", cached" in said, said
    chosen = first.split("; auto: ")[1].split(":")[0]
    assert said.split("; auto: ")[1].split(":")[0] == chosen  # the same readers
    plain = _grain(files, 4, num_parallel_calls=1, seed=2)  # readers never change the order
    for a, b in zip(list(plain), list(again), strict=True):
        np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))
    with pytest.raises(ValueError, match="workers: must be >= 0 or 'auto', got 'many'"):
        _grain(files, 4, workers="many")
