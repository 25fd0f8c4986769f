"""The one pipeline builder (builder.py, so it does not shadow ``pipeline``), warning once of the
traps it can see.

Order: preprocess (parallel map) -> cache -> shuffle -> repeat -> augment (parallel map) -> batch ->
batch_map (vectorized) -> options -> prefetch. In-memory arrays with no per-example map skip the
per-example stages: per epoch one permutation cut into batches, one gather per batch."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import warnings
from collections.abc import Callable
from typing import Any

from absl import logging

from toolkit.core.checks import ConfigError, argument, check_batch_fits, check_number

__all__: list[str] = []  # offered through toolkit.data


DEFAULT_SHUFFLE_EXAMPLES = 10_000
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}
_warned: set[str] = set()


class PipelineWarning(UserWarning):
    """A known input-pipeline trap spotted by :func:`pipeline`."""


def warn_once(key: str, message: str, stacklevel: int = 3) -> None:
    """Warns (PipelineWarning + absl log) the first time `key` is seen in this process."""
    if key in _warned:
        return
    _warned.add(key)
    logging.warning("toolkit.data: %s", message)
    warnings.warn(message, PipelineWarning, stacklevel=stacklevel)


def parse_bytes(value: int | str, name: str) -> int:
    """``1_000_000``, ``"64MB"``, ``"1.5GiB"`` -> bytes. Raises ValueError naming `name`."""
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected bytes as an int or a string like '64MB', got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMG]I?B|B)?\s*", str(value), re.IGNORECASE)
        if not m:
            raise ValueError(
                f"{name}: cannot read {value!r} as a size; use an int or e.g. '64MB', '2GiB'"
            )
        n = int(float(m.group(1)) * _UNITS[(m.group(2) or "").upper()])
    if n < 1:
        raise ValueError(f"{name}: must be a positive size, got {value!r}")
    return n


def element_bytes(element_spec: Any) -> int | None:
    """Bytes of one element when every shape is static, else None."""
    import tensorflow as tf

    total = 0
    for spec in tf.nest.flatten(element_spec):
        shape = getattr(spec, "shape", None)
        if shape is None or not shape.is_fully_defined() or spec.dtype == tf.string:
            return None
        total += math.prod(shape.as_list()) * spec.dtype.size
    return total


_STAGE_NAMES = {
    "TensorSliceDataset": "from_tensor_slices",
    "TensorDataset": "from_tensors",
    "GeneratorDataset": "from_generator",
    "FlatMapDataset": "flat_map",
    "MapDataset": "map",
    "ParallelMapDataset": "map(parallel)",
    "BatchDataset": "batch",
    "ParallelBatchDataset": "batch(parallel)",
    "PaddedBatchDataset": "padded_batch",
    "ShuffleDataset": "shuffle",
    "CacheDataset": "cache",
    "MemoryCacheDataset": "cache",
    "RepeatDataset": "repeat",
    "PrefetchDataset": "prefetch",
    "TakeDataset": "take",
    "SkipDataset": "skip",
    "FilterDataset": "filter",
    "InterleaveDataset": "interleave",
    "ParallelInterleaveDataset": "interleave(parallel)",
    "TFRecordDatasetV2": "TFRecordDataset",
    "RangeDataset": "range",
    "ZipDataset": "zip",
    "UnbatchDataset": "unbatch",
}
_HIDDEN_STAGES = {"OptionsDataset", "_OptionsDataset"}


def _first_batch_size(data: Any) -> int | None:
    """The leading dimension of a ``PyDataset``'s first batch; None for anything else."""
    if isinstance(data, dict | list | tuple) or hasattr(data, "shape"):
        return None
    if not (hasattr(data, "__getitem__") and hasattr(data, "__len__")):
        return None
    try:
        first = data[0] if len(data) else None
    except Exception:  # noqa: BLE001 - only a hint for examples/s
        return None
    while isinstance(first, tuple | list) and first:
        first = first[0]
    if isinstance(first, dict) and first:
        first = next(iter(first.values()))
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else None


def infer_batch_size(data: Any) -> int | None:
    """Examples per step, unread: the static batch size, else the nearest batch stage's; or None."""
    spec = getattr(data, "element_spec", None)
    if spec is None:  # a PyDataset of toolkit.data.array_batches says it (a Grain one too)
        size = getattr(data, "batch_size", None)
        if isinstance(size, int):
            return size
        if type(data).__module__.startswith("grain"):  # its nearest batch stage
            from toolkit.data._grain import grain_batch_size

            return grain_batch_size(data)
        return _first_batch_size(data)
    shape = getattr(_first_leaf(spec), "shape", None)
    rank = getattr(shape, "rank", None) if hasattr(shape, "rank") else None
    if shape is not None and not hasattr(shape, "rank"):
        rank = len(shape)
    if rank:
        dim = next(iter(shape))
        if dim is not None:
            return int(dim)
    node, hops = data, 0
    while node is not None and hops < 64:
        size = getattr(node, "_batch_size", None)
        if size is not None:
            try:
                return int(size)
            except (TypeError, ValueError):
                return None
        node, hops = _upstream(node), hops + 1
    return None


def batched_examples(data: Any) -> int | None:
    """An epoch's examples in a batched dataset, unread: exact, else batches × size; or None."""
    batches, size = int(data.cardinality()), infer_batch_size(data)
    if batches <= 0 or not size:
        return None
    node, hops = data, 0
    while node is not None and hops < 64 and getattr(node, "_batch_size", None) is None:
        node, hops = _upstream(node), hops + 1
    upstream = getattr(node, "_input_dataset", None)
    if upstream is None or int(node.cardinality()) != batches:
        return batches * size
    examples = int(upstream.cardinality())
    return examples if (batches - 1) * size < examples <= batches * size else batches * size


def _upstream(node: Any) -> Any:
    """The dataset `node` reads from: its input, or the first of its inputs (``zip``)."""
    found = getattr(node, "_input_dataset", None)
    if found is not None:
        return found
    inputs = getattr(node, "_inputs", None)
    try:
        listed = inputs() if callable(inputs) else []
    except Exception:  # noqa: BLE001 - a dataset class of tf.data's own without the method
        return None
    return listed[0] if listed else None


def _first_leaf(structure: Any) -> Any:
    """The first leaf of a nested spec in ``tf.nest`` order, without importing a framework."""
    while isinstance(structure, (tuple, list, dict)):
        if not structure:
            return None
        structure = structure[sorted(structure)[0]] if isinstance(structure, dict) else structure[0]
    return structure


def describe_pipeline(dataset: Any) -> str:
    """The stages of a tf.data pipeline, source to end, in words (first inputs); nothing runs."""
    if isinstance(getattr(dataset, "description", None), str):
        return dataset.description
    if type(dataset).__module__.startswith("grain"):
        from toolkit.data._grain import describe_grain

        return describe_grain(dataset)
    stages: list[str] = []
    node, hops = dataset, 0
    while node is not None and hops < 256:
        cls = type(node).__name__.lstrip("_")
        if cls not in _HIDDEN_STAGES and type(node).__name__ not in _HIDDEN_STAGES:
            stage = _STAGE_NAMES.get(cls, cls)
            size = getattr(node, "_batch_size", None)
            if size is not None and "batch" in stage:
                with contextlib.suppress(TypeError, ValueError):
                    stage += f"({int(size)})"
            stages.append(stage)
        try:
            inputs = node._inputs()
        except Exception:  # noqa: BLE001 - not a tf.data dataset
            break
        node, hops = (inputs[0] if inputs else None), hops + 1
    return " → ".join(reversed(stages)) or type(dataset).__name__


def dataset_ops(dataset: Any) -> tuple[set[str], set[str]]:
    """The dataset classes on a dataset's input chain and the op types in their functions, from
    Python objects: serializing the graph would copy every array ``from_tensor_slices`` holds."""
    chain: set[str] = set()
    inner: set[str] = set()
    stack, seen = [dataset], set()
    while stack:
        ds = stack.pop()
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        chain.add(type(ds).__name__)
        for value in vars(ds).values():
            graph = getattr(getattr(value, "function", None), "graph", None)
            if graph is None:
                continue
            try:
                graph_def = graph.as_graph_def()
            except Exception:  # noqa: BLE001 - an unusual function: skip it, don't fail
                continue
            inner.update(n.op for n in graph_def.node)
            inner.update(n.op for f in graph_def.library.function for n in f.node_def)
        try:
            stack.extend(ds._inputs())
        except Exception:  # noqa: BLE001 - not a tf.data dataset
            continue
    return chain, inner


def _is_random(op: str) -> bool:
    return ("Random" in op and not op.endswith("Dataset")) or op in (
        "Multinomial",
        "TruncatedNormal",
        "StatelessTruncatedNormalV2",
    )


def _available_ram() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def _over_budget(nbytes: int, budget: int | None) -> int | None:
    """The limit `nbytes` exceeds (the RAM budget, else available RAM), or None if it fits."""
    limit = budget if budget is not None else _available_ram()
    return limit if nbytes > limit else None


def _human(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes:,.0f} bytes"


def pipeline(
    dataset: Any,
    batch_size: int,
    *,
    preprocess: Callable[..., Any] | None = None,
    augment: Callable[..., Any] | None = None,
    batch_map: Callable[..., Any] | None = None,
    cache: bool | str = False,
    shuffle: bool = True,
    shuffle_buffer: int | str | None = None,
    seed: int | None = None,
    repeat: bool = False,
    drop_remainder: bool = True,
    num_parallel_calls: int | None = None,
    deterministic: bool | None = None,
    private_threads: int | None = None,
    ram_budget: int | str | None = None,
    cpu_budget: int | None = None,
    loader: str = "tf_data",
    workers: int | str = 0,
):
    """Builds the training input pipeline from a dataset of single examples.

    ``loader="grain"``: a Grain pipeline by the same rules: `dataset` is random-access examples, the
    maps take NumPy, `num_parallel_calls` is its threads and `workers` its processes.

    Args:
        dataset: a `tf.data.Dataset` of single examples, or ``(features, labels)`` in-memory arrays
            (labels may be None), batched by gathering when there is no per-example map.
        preprocess: per-example map, no randomness; before the cache, so paid once.
        augment: per-example random map; after cache and shuffle, so new randomness every epoch.
        cache: `True` or ``"memory"``: in memory after the first epoch; a path: to that file.
        shuffle_buffer: examples, or bytes (``"64MB"``); default the dataset's size, up to 10 000.
        repeat: repeat forever (pair with ``steps_per_epoch``).
        drop_remainder: drop a last partial batch: static shapes (no retrace), exact examples/s.
        num_parallel_calls: the maps' parallelism (default AUTOTUNE: a call per core, up to 16 or
            `cpu_budget`, with the autotune model off: ``sources.no_autotune_model``).
        deterministic: keep element order in parallel stages (default: TF's, on).
        ram_budget: tf.data's RAM budget, bytes or ``"2GB"``; the warnings check against it too.
        cpu_budget: cores the maps use (default: all).

    Raises:
        ValueError: a size or budget not positive or unreadable; a batch larger than a known
            example count with `drop_remainder`."""
    if loader == "grain":  # the same rules, Grain's stages
        settings = dict(locals())
        from toolkit.data._grain import from_builder

        return from_builder(**settings)
    _refuse_what_tf_data_does_not_read(dataset, loader, workers)
    budget = _checked_sizes(batch_size, num_parallel_calls, private_threads, cpu_budget, ram_budget)
    import tensorflow as tf

    parallel = num_parallel_calls or tf.data.AUTOTUNE
    tail = _Tail(batch_map, parallel, deterministic, private_threads, budget, cpu_budget)
    if isinstance(dataset, tuple):
        from toolkit.data.sources import from_arrays

        if preprocess is None and augment is None:
            ds = _gathered_batches(
                dataset, batch_size, shuffle, seed, repeat, drop_remainder, parallel, deterministic
            )
            return _finish(ds, tail)
        dataset = from_arrays(*dataset)  # a per-example map needs single examples
    ds = _paid_once(dataset, preprocess, cache, tail)
    if shuffle:
        buffer = _shuffle_examples(ds, shuffle_buffer, budget)
        # Before repeat so epochs don't blur; after the cache so each epoch gets a new order.
        ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    if augment is not None:
        ds = ds.map(augment, num_parallel_calls=parallel, deterministic=deterministic)
    if drop_remainder and not repeat:  # a count tf.data knows (not a filter's, -2)
        check_batch_fits("pipeline", batch_size, int(ds.cardinality()))
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    return _finish(ds, tail)


def _refuse_what_tf_data_does_not_read(dataset: Any, loader: str, workers: int | str) -> None:
    """Refuses a loader not tf.data's, workers, or ArrayRecord files, saying what to pass."""
    if loader != "tf_data":
        raise ValueError(f"loader: 'tf_data' or 'grain', got {loader!r}")
    if workers:
        raise ValueError(
            f"workers={workers!r}: worker processes are Grain's (loader='grain'); tf.data's "
            "parallelism is num_parallel_calls"
        )
    from toolkit.data._array_record import ArrayRecords

    if isinstance(dataset, ArrayRecords):
        raise ValueError("dataset: ArrayRecord files are read by Grain: pass loader='grain'")


def _checked_sizes(
    batch_size: int,
    num_parallel_calls: int | None,
    private_threads: int | None,
    cpu_budget: int | None,
    ram_budget: int | str | None,
) -> int | None:
    """The RAM budget in bytes (None: tf.data's default), once every size given is checked."""
    import tensorflow as tf

    check_number(argument("pipeline", "batch_size"), batch_size, integer=True, least=1)
    if batch_size is None:
        raise ConfigError("pipeline: batch_size must be an integer >= 1, got None")
    if num_parallel_calls not in (None, tf.data.AUTOTUNE) and num_parallel_calls < 1:
        raise ValueError(f"num_parallel_calls: must be >= 1 or AUTOTUNE, got {num_parallel_calls}")
    for name, value in (("private_threads", private_threads), ("cpu_budget", cpu_budget)):
        if value is not None and value < 1:
            raise ValueError(f"{name}: must be >= 1, got {value}")
    return parse_bytes(ram_budget, "ram_budget") if ram_budget is not None else None


def _paid_once(
    ds: Any, preprocess: Callable[..., Any] | None, cache: bool | str, tail: _Tail
) -> Any:
    """The stages paid once, not every epoch: the deterministic map, then the cache."""
    _warn_if_generator(ds)
    if preprocess is not None:
        ds = ds.map(preprocess, num_parallel_calls=tail.parallel, deterministic=tail.deterministic)
    if cache:
        ds = _cached(ds, cache, tail.budget)
    return ds


def _warn_if_generator(ds: Any) -> None:
    """Warns (once) when `ds` reads a Python generator on one thread."""
    chain, inner_ops = dataset_ops(ds)
    # from_generator: a flat_map building a GeneratorDataset (parallel_generator's is not here).
    if any("FlatMap" in name for name in chain) and "GeneratorDataset" in inner_ops:
        warn_once(
            "from_generator",
            "this dataset reads a Python generator with from_generator on one thread, one "
            "element per Python call; toolkit.data.parallel_generator(factory, shards, "
            "signature) reads shards in parallel and crosses into TensorFlow in chunks",
            stacklevel=5,  # pipeline's caller, past _paid_once and this
        )


def _cached(ds: Any, cache: bool | str, budget: int | None) -> Any:
    """`ds` cached in memory or to a file, warning if a random map upstream would be frozen."""
    upstream = dataset_ops(ds)
    if any(_is_random(op) for op in upstream[0] | upstream[1]):
        warn_once(
            "cache-after-random",
            "cache() comes after a random map: the first epoch's random values would be "
            "replayed every epoch, freezing the augmentation; pass the random map as "
            "augment= (it runs after the cache) or do not cache",
            stacklevel=5,  # pipeline's caller, past _paid_once and this
        )
    if cache is True or cache == "memory":
        _check_cache_fits(ds, budget)
        return ds.cache()
    return ds.cache(str(cache))


@dataclasses.dataclass(frozen=True)
class _Tail:
    """What the stages after batching take, as the caller gave them (None: tf.data's defaults)."""

    batch_map: Callable[..., Any] | None
    parallel: int
    deterministic: bool | None
    private_threads: int | None
    budget: int | None
    cpu_budget: int | None


def _finish(ds: Any, tail: _Tail) -> Any:
    """The stages after batching: batch_map, options, prefetch."""
    import tensorflow as tf

    if tail.batch_map is not None:
        # Vectorized: one op over the whole batch instead of batch_size small ones.
        ds = ds.map(
            tail.batch_map, num_parallel_calls=tail.parallel, deterministic=tail.deterministic
        )

    from toolkit.data.sources import no_autotune_model

    options = no_autotune_model()
    if tail.deterministic is not None:
        options.deterministic = tail.deterministic
    if tail.private_threads is not None:
        options.threading.private_threadpool_size = tail.private_threads
    if tail.budget is not None:
        options.autotune.ram_budget = tail.budget
    if tail.cpu_budget is not None:
        options.autotune.cpu_budget = tail.cpu_budget
        options.autotune.initial_parallelism = tail.cpu_budget  # what AUTOTUNE maps start at
    ds = ds.with_options(options)
    # Prefetch last: while the model trains on batch N, the pipeline prepares N+1.
    return ds.prefetch(tf.data.AUTOTUNE)


def _gathered_batches(
    arrays: tuple[Any, ...],
    batch_size: int,
    shuffle: bool,
    seed: int | None,
    repeat: bool,
    drop_remainder: bool,
    parallel: int,
    deterministic: bool | None,
) -> Any:
    """Batches of in-memory arrays: per epoch a permutation cut into batches, one gather each."""
    import tensorflow as tf

    n, data = _gatherable(arrays)
    if drop_remainder and not repeat:
        check_batch_fits("pipeline", batch_size, n)
    epochs = _epoch_draws(shuffle, seed, repeat)
    order = _index_order(n, shuffle)
    if repeat:
        ds = _endless_index_batches(epochs, order, batch_size)
    else:
        ds = _epoch_index_batches(epochs, order, n, batch_size, drop_remainder)

    def gather(indices: Any) -> Any:
        return tf.nest.map_structure(lambda t: tf.gather(t, indices), data)

    return ds.map(gather, num_parallel_calls=parallel, deterministic=deterministic)


def _gatherable(arrays: tuple[Any, ...]) -> tuple[int, Any]:
    """``(examples, tensors)`` of ``(features, labels)`` arrays, each array a tensor once."""
    import tensorflow as tf

    from toolkit.data.sources import array_examples

    if len(arrays) != 2:
        raise ValueError(
            f"dataset: a tuple must be (features, labels) arrays, got {len(arrays)} items"
        )
    features, labels = arrays
    n = array_examples(features, labels)
    data = tf.nest.map_structure(
        tf.convert_to_tensor, features if labels is None else (features, labels)
    )
    return n, data


def _epoch_draws(shuffle: bool, seed: int | None, repeat: bool) -> Any:
    """One int64 per epoch, its shuffle seed: endless with `repeat`, else this iteration's one."""
    import tensorflow as tf

    if shuffle:
        # A new draw each time the dataset is iterated, the same sequence for the same seed.
        epochs = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
    else:
        epochs = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat()
    return epochs if repeat else epochs.take(1)


def _index_order(n: int, shuffle: bool) -> Callable[[Any], Any]:
    """From an epoch's draw to its order of the `n` indices: a stateless shuffle, or in order."""
    import tensorflow as tf

    def order(draw: Any) -> Any:
        indices = tf.range(n, dtype=tf.int64)
        if not shuffle:
            return indices
        return tf.random.experimental.stateless_shuffle(
            indices, seed=tf.stack([draw, tf.constant(0, tf.int64)])
        )

    return order


def _endless_index_batches(epochs: Any, order: Callable[[Any], Any], batch_size: int) -> Any:
    """Index batches of endless epochs, as repeat-then-batch (leftovers open the next epoch)."""
    import tensorflow as tf

    def cut(leftover: Any, draw: Any) -> Any:
        stream = tf.concat([leftover, order(draw)], 0)
        whole = tf.shape(stream, out_type=tf.int64)[0] // batch_size * batch_size
        return stream[whole:], tf.reshape(stream[:whole], [-1, batch_size])

    return (
        epochs.scan(tf.zeros([0], tf.int64), cut)
        .flat_map(tf.data.Dataset.from_tensor_slices)
        .apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    )


def _epoch_index_batches(
    epochs: Any, order: Callable[[Any], Any], n: int, batch_size: int, drop_remainder: bool
) -> Any:
    """Index batches of one epoch (a partial last one unless `drop_remainder`), count declared."""
    import tensorflow as tf

    full, rest = divmod(n, batch_size)
    last = 0 if drop_remainder else rest

    def epoch(draw: Any) -> Any:
        indices = order(draw)
        batches = tf.data.Dataset.from_tensor_slices(
            tf.reshape(indices[: full * batch_size], [full, batch_size])
        )
        if last:
            tail = tf.data.Dataset.from_tensors(indices[full * batch_size :])
            batches = batches.concatenate(tail)
        return batches

    per_epoch = full + (1 if last else 0)
    return epochs.flat_map(epoch).apply(tf.data.experimental.assert_cardinality(per_epoch))


def _shuffle_examples(ds: Any, shuffle_buffer: int | str | None, budget: int | None) -> int:
    size = element_bytes(ds.element_spec)
    if isinstance(shuffle_buffer, str):
        nbytes = parse_bytes(shuffle_buffer, "shuffle_buffer")
        if size is None:
            raise ValueError(
                "shuffle_buffer: given in bytes, but the examples have no static size; "
                "give it in examples (an int)"
            )
        buffer = max(1, nbytes // size)
    elif shuffle_buffer is not None:
        if isinstance(shuffle_buffer, bool) or shuffle_buffer < 1:
            raise ValueError(f"shuffle_buffer: must be >= 1 example, got {shuffle_buffer!r}")
        buffer = int(shuffle_buffer)
    else:
        n = int(ds.cardinality())
        buffer = n if 0 < n <= DEFAULT_SHUFFLE_EXAMPLES else DEFAULT_SHUFFLE_EXAMPLES
    limit = _over_budget(buffer * size, budget) if size is not None else None
    if limit is not None:
        warn_once(
            "shuffle-buffer-ram",
            f"the shuffle buffer of {buffer:,} examples × {size:,} bytes = "
            f"{_human(buffer * size)} would not fit in the RAM budget of {_human(limit)}; "
            "give shuffle_buffer in bytes (e.g. '256MB') or shuffle file order instead",
        )
    return buffer


def _check_cache_fits(ds: Any, budget: int | None) -> None:
    n = int(ds.cardinality())
    size = element_bytes(ds.element_spec)
    if n <= 0 or size is None:
        return  # unknown or infinite size: nothing to check against
    limit = _over_budget(n * size, budget)
    if limit is not None:
        warn_once(
            "cache-ram",
            f"cache() in memory would hold {n:,} examples × {size:,} bytes = "
            f"{_human(n * size)}, more than the {_human(limit)} available; cache to a file "
            "(cache='/path/to/cache') or do not cache",
            stacklevel=5,  # pipeline, as when it called this (now through _paid_once, _cached)
        )
