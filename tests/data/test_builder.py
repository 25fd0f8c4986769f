"""toolkit.data.pipeline: stage order, options, budgets, and its warnings firing (and not)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import tensorflow as tf

from toolkit import data as D
from toolkit.data import PipelineWarning, pipeline
from toolkit.data.builder import dataset_ops, element_bytes, parse_bytes


def _ops_in_order(ds):
    graph = tf.compat.v1.GraphDef()
    graph.ParseFromString(ds._as_serialized_graph().numpy())
    return [n.op for n in graph.node if n.op.endswith("Dataset") or "Dataset" in n.op]


def _warnings_of(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, PipelineWarning)]


def test_stage_order(arrays):
    ds = pipeline(
        D.from_arrays(*arrays),
        8,
        preprocess=lambda x, y: (x * 2.0, y),
        augment=lambda x, y: (x + tf.random.uniform(tf.shape(x)), y),
        batch_map=lambda x, y: (x - 1.0, y),
        cache=True,
        repeat=True,
        seed=1,
    )
    ops = _ops_in_order(ds)
    order = [
        "TensorSliceDataset",
        "ParallelMapDatasetV2",  # preprocess
        "CacheDatasetV2",
        "ShuffleDatasetV3",
        "RepeatDataset",
        "ParallelMapDatasetV2",  # augment
        "BatchDatasetV2",
        "ParallelMapDatasetV2",  # batch_map
        "OptionsDataset",
        "PrefetchDataset",
    ]
    positions = []
    start = 0
    for op in order:
        start = ops.index(op, start) + 1
        positions.append(start)
    assert positions == sorted(positions), ops


def test_options_and_budgets_are_applied(arrays):
    ds = pipeline(
        D.from_arrays(*arrays),
        4,
        deterministic=False,
        private_threads=3,
        ram_budget="64MiB",
        cpu_budget=2,
    )
    options = ds.options()
    assert options.deterministic is False
    assert options.threading.private_threadpool_size == 3
    assert options.autotune.ram_budget == 64 * 2**20
    assert options.autotune.cpu_budget == 2


def test_shuffle_buffer_in_bytes_is_divided_by_the_example_size(arrays):
    # 6 float32 features + an int32 label = 28 bytes per example.
    assert element_bytes(D.from_arrays(*arrays).element_spec) == 28
    ds = pipeline(D.from_arrays(*arrays), 4, shuffle_buffer="280B", deterministic=True)
    shuffle = next(n for n in _graph(ds).node if n.op.startswith("ShuffleDataset"))
    buffer_const = _const_value(_graph(ds), shuffle.input[1])
    assert buffer_const == 10


def _graph(ds):
    graph = tf.compat.v1.GraphDef()
    graph.ParseFromString(ds._as_serialized_graph().numpy())
    return graph


def _const_value(graph, name):
    node = next(n for n in graph.node if n.name == name.split(":")[0])
    return tf.make_ndarray(node.attr["value"].tensor)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1000, 1000), ("64MB", 64_000_000), ("2GiB", 2 * 2**30), ("1.5 kb", 1500), ("7", 7)],
)
def test_parse_bytes(value, expected):
    assert parse_bytes(value, "x") == expected


@pytest.mark.parametrize("value", ["lots", "-3MB", 0, True])
def test_parse_bytes_errors_name_the_argument(value):
    with pytest.raises(ValueError, match="^ram_budget: "):
        parse_bytes(value, "ram_budget")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(batch_size=0), "^pipeline: batch_size must be an integer >= 1, got 0"),
        (dict(batch_size=4, shuffle_buffer=0), "^shuffle_buffer: must be >= 1"),
        (dict(batch_size=4, shuffle_buffer="x"), "^shuffle_buffer: cannot read"),
        (dict(batch_size=4, num_parallel_calls=0), "^num_parallel_calls"),
        (dict(batch_size=4, private_threads=-1), "^private_threads"),
        (dict(batch_size=4, cpu_budget=0), "^cpu_budget"),
        (dict(batch_size=4, ram_budget="0MB"), "^ram_budget"),
    ],
)
def test_bad_arguments_name_the_argument(arrays, kwargs, match):
    with pytest.raises(ValueError, match=match):
        pipeline(D.from_arrays(*arrays), **kwargs)


def test_shuffle_buffer_in_bytes_needs_a_static_size():
    ds = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1.0], [2.0, 3.0]]))
    with pytest.raises(ValueError, match="^shuffle_buffer: given in bytes"):
        pipeline(ds, 1, shuffle_buffer="1MB", drop_remainder=False)


# ---------------------------------------------------------------------------- warnings


def test_warns_once_on_cache_after_random_map(arrays):
    randomized = D.from_arrays(*arrays).map(lambda x, y: (x + tf.random.uniform(()), y))
    first = _warnings_of(lambda: pipeline(randomized, 4, cache=True))
    assert len(first) == 1 and "freezing the augmentation" in first[0]
    assert _warnings_of(lambda: pipeline(randomized, 4, cache=True)) == []  # once
    # Randomness passed as a preprocess step is also caught; as augment it is the right way.
    noisy = lambda x, y: (x + tf.random.stateless_uniform((), seed=[1, 2]), y)  # noqa: E731
    from toolkit.data import builder

    builder._warned.clear()
    assert _warnings_of(lambda: pipeline(D.from_arrays(*arrays), 4, preprocess=noisy, cache=True))
    builder._warned.clear()
    assert not _warnings_of(lambda: pipeline(D.from_arrays(*arrays), 4, augment=noisy, cache=True))


def test_no_warnings_for_a_good_pipeline(arrays, image_dir):
    good = [
        lambda: pipeline(D.from_arrays(*arrays), 4, cache=True, augment=lambda x, y: (x, y)),
        lambda: pipeline(D.image_folder(image_dir, (8, 8)), 4, cache=True),
        lambda: pipeline(
            D.parallel_generator(
                lambda s: iter([np.zeros(3, np.float32)]), [0, 1], tf.TensorSpec((3,))
            ),
            1,
        ),
    ]
    for build in good:
        assert _warnings_of(build) == []


def test_warns_on_from_generator_where_the_parallel_source_applies():
    gen = tf.data.Dataset.from_generator(
        lambda: iter([np.zeros(3, np.float32)] * 4), output_signature=tf.TensorSpec((3,))
    )
    chain, inner = dataset_ops(gen)
    assert any("FlatMap" in name for name in chain) and "GeneratorDataset" in inner
    messages = _warnings_of(lambda: pipeline(gen.prefetch(tf.data.AUTOTUNE), 2))
    assert len(messages) == 1 and "parallel_generator" in messages[0]


def test_warns_when_the_shuffle_buffer_exceeds_the_ram_budget(arrays):
    messages = _warnings_of(
        lambda: pipeline(D.from_arrays(*arrays), 4, shuffle_buffer=1000, ram_budget="10KB")
    )
    assert len(messages) == 1 and "28,000 bytes" not in messages[0]
    assert "would not fit in the RAM budget" in messages[0]
    assert not _warnings_of(
        lambda: pipeline(D.from_arrays(*arrays), 4, shuffle_buffer=100, ram_budget="10KB")
    )


def test_warns_when_a_memory_cache_would_not_fit(arrays):
    messages = _warnings_of(
        lambda: pipeline(D.from_arrays(*arrays), 4, cache=True, shuffle=False, ram_budget="1KB")
    )
    assert len(messages) == 1 and "cache to a file" in messages[0]
    # A file cache is not held in memory: no warning.
    assert not _warnings_of(
        lambda: pipeline(
            D.from_arrays(*arrays),
            4,
            cache="/tmp/x-never-written",
            shuffle=False,
            ram_budget="1KB",
        )
    )


def test_file_cache_is_used(tmp_path, arrays):
    ds = pipeline(D.from_arrays(*arrays), 8, cache=str(tmp_path / "cache"), shuffle=False)
    first = [x.numpy() for x, _ in ds]
    assert list(tmp_path.iterdir())  # cache files written on the first pass
    second = [x.numpy() for x, _ in ds]
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


# ---------------------------------------------------------------------------- benchmark


def test_benchmark_reports_throughput_and_first_batch(arrays):
    ds = pipeline(D.from_arrays(*arrays), 4, repeat=True)
    out = io.StringIO()
    result = D.benchmark(ds, num_batches=30, stream=out)
    assert result.num_batches == 30 and result.batch_size == 4
    assert result.first_batch_s > 0 and result.total_s > 0
    assert result.examples_per_sec == pytest.approx(4 * result.batches_per_sec)
    assert result.batches.timed_steps == 30
    assert "examples/s" in out.getvalue() and "first batch" in out.getvalue()
    d = result.to_dict()
    assert d["batches"]["p50_s"] > 0 and d["examples_per_sec"] > 0


def test_benchmark_with_injected_clock_and_progress_bar(monkeypatch, capsys):
    def run(**kwargs):
        ticks = iter([0.0, 1.0] + [1.0 + 0.5 * i for i in range(1, 11)])
        out = io.StringIO()
        result = D.benchmark(
            [b"batch"] * 20,
            num_batches=10,
            batch_size=2,
            clock=lambda: next(ticks),
            stream=out,
            progress_after_s=0.0,
            **kwargs,
        )
        return result, out.getvalue(), capsys.readouterr().err

    result, out, err = run()  # stderr is not a terminal here: no bar, no carriage return
    assert result.first_batch_s == 1.0
    assert result.total_s == pytest.approx(5.0)
    assert result.examples_per_sec == pytest.approx(4.0)
    assert "examples/s" in out and "\r" not in out + err and "10/10" not in err
    monkeypatch.setenv("TOOLKIT_PROGRESS", "1")  # as on a terminal: tqdm's bar on stderr
    _, out, err = run()
    assert "pipeline alone" in err and "/10 [" in err and "pipeline alone" not in out
    _, out, err = run(verbose=False)  # asked to be quiet: no bar and no summary
    assert err == "" and out == ""


def test_benchmark_errors():
    with pytest.raises(ValueError, match="^num_batches"):
        D.benchmark([1, 2], num_batches=0)
    with pytest.raises(ValueError, match="^dataset: produced no batch"):
        D.benchmark([], num_batches=1, verbose=False)
    with pytest.raises(ValueError, match="^dataset: ended after its first batch"):
        D.benchmark([1], num_batches=3, verbose=False)


def test_benchmark_result_embeds_in_a_run_report(tmp_path, arrays):
    from toolkit.core.stats import summarize
    from toolkit.report import RunReport

    result = D.benchmark(pipeline(D.from_arrays(*arrays), 4, repeat=True), 10, verbose=False)
    report = RunReport(
        name="with-pipeline", steps=summarize([0.01]), extra={"pipeline": result.to_dict()}
    )
    report.write(tmp_path, plot=False)
    loaded = RunReport.load(tmp_path)
    assert loaded.extra["pipeline"]["num_batches"] == 10
    assert loaded.extra["pipeline"]["batches"]["p50_s"] == pytest.approx(result.batches.p50_s)


def test_trap_detection_does_not_copy_the_arrays_a_dataset_holds(monkeypatch):
    """The checks read function graphs only: serializing a from_tensor_slices graph would
    copy its arrays (seconds for hundreds of MB)."""
    ds = tf.data.Dataset.from_tensor_slices(np.zeros((64, 8), "float32"))

    calls = []
    original = tf.data.Dataset._as_serialized_graph

    def recording(self, *args, **kwargs):
        calls.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(tf.data.Dataset, "_as_serialized_graph", recording)
    pipeline(ds.map(lambda x: x * 2.0), 8, cache=True)
    assert calls == [], f"pipeline() serialized dataset graphs: {calls}"


def test_a_batch_larger_than_the_data_with_drop_remainder_is_refused():
    data = D.from_arrays(np.zeros((3, 2), "float32"), np.zeros(3, "int32"))
    with pytest.raises(ValueError, match="batch_size=64 is larger than the 3 examples"):
        pipeline(data, 64)
    assert not any("no batch" in m for m in _warnings_of(lambda: pipeline(data, 2)))
    assert not any("no batch" in m for m in _warnings_of(lambda: pipeline(data, 64, repeat=True)))


# ---------------------------------------------------------------- in-memory arrays: gathered


def _labels_of(ds, batches=None):
    taken = ds if batches is None else ds.take(batches)
    return [b[1].numpy().tolist() for b in taken]


def _epoch(ds):
    return [label for batch in _labels_of(ds) for label in batch]


def test_arrays_are_batched_by_gathering_with_no_per_example_stage():
    x, y = np.arange(40, dtype="float32").reshape(20, 2), np.arange(20)
    ops, _ = dataset_ops(pipeline((x, y), 4, seed=0))
    per_example = {"_ShuffleDataset", "_BatchDataset", "_TensorSliceDataset", "_ShuffleDatasetV3"}
    assert not ops & per_example, ops
    first = next(iter(pipeline((x, y), 4, seed=0)))
    np.testing.assert_array_equal(first[0].numpy()[:, 0] / 2, first[1].numpy())  # rows stay paired


def test_each_epoch_of_arrays_is_a_new_permutation_of_every_example():
    y = np.arange(10)
    ds = pipeline((np.zeros((10, 3), "float32"), y), 4, seed=1, drop_remainder=False)
    assert int(ds.cardinality()) == 3
    epochs = [_epoch(ds) for _ in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(10))
    assert len({tuple(order) for order in epochs}) == 3  # reshuffled each iteration
    again = pipeline((np.zeros((10, 3), "float32"), y), 4, seed=1, drop_remainder=False)
    assert [_epoch(again) for _ in range(3)] == epochs  # the seed fixes the draws
    plain = pipeline((np.zeros((10, 3), "float32"), y), 4, shuffle=False, drop_remainder=False)
    assert _labels_of(plain) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_gathered_batches_keep_static_shapes_when_the_remainder_is_dropped():
    x = {"a": np.zeros((10, 3), "float32"), "b": np.zeros((10,), "int32")}
    ds = pipeline((x, np.arange(10)), 4, seed=0)
    assert int(ds.cardinality()) == 2
    features, labels = ds.element_spec
    assert features["a"].shape == (4, 3) and features["b"].shape == (4,)
    assert labels.shape == (4,)
    only = pipeline((np.zeros((10, 3), "float32"), None), 4, shuffle=False)
    assert only.element_spec.shape == (4, 3)


def test_repeated_arrays_carry_an_epochs_leftover_into_the_next_batch():
    """As repeat-then-batch: no example skipped, no partial batch, epoch after epoch."""
    y = np.arange(10)
    for shuffle in (False, True):
        ds = pipeline((np.zeros((10, 1), "float32"), y), 4, shuffle=shuffle, seed=2, repeat=True)
        assert int(ds.cardinality()) == tf.data.INFINITE_CARDINALITY
        batches = _labels_of(ds, 15)  # 60 examples: 6 epochs
        assert all(len(b) == 4 for b in batches)
        stream = [label for batch in batches for label in batch]
        for epoch in range(6):
            assert sorted(stream[epoch * 10 : (epoch + 1) * 10]) == list(range(10))
    tiny = pipeline((np.zeros((3, 1), "float32"), np.arange(3)), 8, shuffle=False, repeat=True)
    assert _labels_of(tiny, 1) == [[0, 1, 2, 0, 1, 2, 0, 1]]


def test_arrays_with_a_per_example_map_go_through_single_examples(arrays):
    ds = pipeline(arrays, 8, augment=lambda x, y: (x + 1.0, y), seed=0)
    ops, _ = dataset_ops(ds)
    assert "_BatchDataset" in ops
    assert sum(int(b[1].shape[0]) for b in ds) == len(arrays[1]) // 8 * 8


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ((np.zeros((4, 2)), np.zeros(3)), "got 3 labels for 4 examples"),
        ((np.zeros((0, 2)), np.zeros(0)), "no examples"),
        ((np.zeros((4, 2)),), "must be \\(features, labels\\)"),
    ],
)
def test_bad_arrays_name_what_is_wrong(data, match):
    with pytest.raises(ValueError, match=match):
        pipeline(data, 2)


def test_too_few_arrays_for_one_batch_is_refused():
    data = (np.zeros((3, 2), "float32"), np.zeros(3, "int32"))
    with pytest.raises(ValueError, match="batch_size=65 is larger than the 3 examples"):
        pipeline(data, 65)
    assert not any("no batch" in m for m in _warnings_of(lambda: pipeline(data, 65, repeat=True)))


def test_the_toolkit_s_pipelines_run_without_the_autotune_model(arrays):
    # Its thread made destroying the iterator (as fit returns) wait up to its period, seconds
    # after the last step; the maps' AUTOTUNE parallelism and prefetch's buffer do without it.
    built = [
        pipeline(arrays, 4),  # in memory: batches gathered
        pipeline(D.from_arrays(*arrays), 4, augment=lambda x, y: (x, y), repeat=True),
        D.synthetic((3,), batch_size=4),
    ]
    for ds in built:
        assert ds.options().autotune.enabled is False
        next(iter(ds))  # and it runs
    budgeted = pipeline(arrays, 4, cpu_budget=2).options().autotune
    assert budgeted.initial_parallelism == 2 and budgeted.cpu_budget == 2
    # Yours to turn back on: later options win.
    back = tf.data.Options()
    back.autotune.enabled = True
    assert built[0].with_options(back).options().autotune.enabled is True


def test_batched_examples_counts_a_partial_last_batch_as_the_examples_it_holds():
    """1,494 examples in batches of 64 are 1,494, not 24 x 64 = 1,536: the batching stage's
    input says its count through the stages after it; where a stage changes the batches'
    count, batches times batch (an upper bound), and where tf.data cannot tell, None."""
    from toolkit.data.builder import batched_examples

    x, y = np.zeros((1494, 4), "float32"), np.zeros(1494, "int32")
    base = tf.data.Dataset.from_tensor_slices((x, y))
    assert batched_examples(base.batch(64)) == 1494
    assert batched_examples(base.batch(64, drop_remainder=True)) == 23 * 64
    shuffled = base.map(lambda a, b: (a * 2, b)).shuffle(100).batch(64).prefetch(2)
    assert batched_examples(shuffled) == 1494
    assert batched_examples(base.padded_batch(64)) == 1494
    assert batched_examples(tf.data.Dataset.zip((base.batch(64), base.batch(32)))) == 1494
    assert batched_examples(base.batch(64).take(10)) == 640
    assert batched_examples(base.batch(64).repeat(2)) == 48 * 64
    assert batched_examples(base.filter(lambda a, b: True).batch(64)) is None
