"""Data sources (TFRecord files are ``toolkit.data.tfrecord``'s). Each returns a
``tf.data.Dataset`` of single examples with a declared ``element_spec`` (``(features, label)``
pairs unless said otherwise), ready for :func:`toolkit.data.pipeline`.

Bad arguments raise ``ValueError`` (or ``FileNotFoundError`` for paths) whose message starts with
the argument's name, says what was wrong, and what to do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from toolkit.core.errors import what_went_wrong

__all__: list[str] = []  # offered through toolkit.data


Arrays = tuple[np.ndarray, np.ndarray]
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
DEFAULT_CHUNK = 16


def _tf():
    import tensorflow as tf

    return tf


# ---------------------------------------------------------------------------- arrays, synthetic


def from_arrays(features: Any, labels: Any = None):
    """A dataset of ``(features, label)`` pairs (or of features alone) from in-memory arrays.

    Args:
        features: a NumPy array or tensor, or a dict of them, first dimension = examples.
        labels: the same number of labels, or None for features only.

    Raises:
        ValueError: no examples, or labels that don't match the features in number.
    """
    tf = _tf()
    array_examples(features, labels)
    if labels is None:
        return tf.data.Dataset.from_tensor_slices(features)
    return tf.data.Dataset.from_tensor_slices((features, labels))


def array_examples(features: Any, labels: Any = None) -> int:
    """The number of examples in in-memory `features` and `labels` (each an array, a tensor,
    or a dict, list or tuple of them: a multi-input or multi-output model's), counted as
    ``fit`` counts them, by the first leaf of the nest; raises ValueError (one line, naming
    ``features`` or ``labels``) when there are none or any two leaves differ in length.
    Not ``len(labels)``: that is a dict's or a list's number of outputs, not of examples."""
    n_x = nest_rows("features", features)
    if n_x is None:
        raise ValueError("features: nothing given; pass an array or a dict of arrays")
    if n_x == 0:
        raise ValueError("features: no examples (empty array)")
    n_y = None if labels is None else nest_rows("labels", labels)
    if n_y is not None and n_y != n_x:
        raise ValueError(
            f"labels: got {n_y} labels for {n_x} examples; features and labels must "
            "have the same first dimension"
        )
    return n_x


def nest_rows(name: str, nest: Any) -> int | None:
    """The rows (first dimension) every leaf of `nest` has, flattened as ``keras.tree`` and
    ``tf.nest`` flatten it (None leaves, an output without labels, skipped); None: no leaf.
    Raises ValueError (one line, starting with `name`) when two leaves differ in length."""
    rows = [_rows(name, leaf) for leaf in _tf().nest.flatten(nest) if leaf is not None]
    each = {"features": "every feature needs", "labels": "every output's labels need"}
    for other in rows[1:]:
        if other != rows[0]:
            raise ValueError(
                f"{name}: arrays of different lengths ({rows[0]} and {other}); "
                f"{each.get(name, 'every array needs')} one row per example"
            )
    return rows[0] if rows else None


def _rows(name: str, leaf: Any) -> int:
    """A leaf's first dimension (its ``len`` where it has no shape: a list of numbers)."""
    shape = getattr(leaf, "shape", None)
    if shape is not None and len(shape) == 0:
        raise ValueError(f"{name}: a single value where an array of examples belongs")
    if shape is not None and shape[0] is not None:
        return int(shape[0])
    return len(leaf)


def _as_spec(spec: Any, dtype: Any = "float32"):
    tf = _tf()
    if isinstance(spec, tf.TensorSpec):
        return spec
    if isinstance(spec, (tuple, list)) and all(isinstance(d, int) for d in spec):
        return tf.TensorSpec(tuple(spec), dtype)
    raise ValueError(
        f"features: expected a tf.TensorSpec or a shape tuple like (64,), got {spec!r}"
    )


def synthetic(
    features: Any,
    labels: Any = (),
    *,
    num_classes: int = 10,
    num_examples: int | None = None,
    batch_size: int | None = None,
    seed: int = 0,
):
    """Random data of a given spec, made once and repeated: input cost ~0 (an upper bound).

    Like Model Garden's ``--use_synthetic_data``: training on it shows how fast the step is when
    the input pipeline costs nothing. With `batch_size`, one whole batch is made and repeated
    (skip the builder's batching); without, one example is.

    Args:
        features: a `tf.TensorSpec` or a shape tuple (float32) of one example.
        labels: a `tf.TensorSpec` or shape of one label; ``()`` for a class id, None for no
            labels. Integer labels are drawn from ``[0, num_classes)``. Defaults to `()`.
        num_classes: for integer labels. Defaults to `10`.
        num_examples: elements to yield (examples, or batches with `batch_size`). Defaults to
            `None`: forever.
        batch_size: make and repeat whole batches of this size. Defaults to `None`.
        seed: random seed. Defaults to `0`.
    """
    tf = _tf()
    f_spec = _as_spec(features)
    l_spec = None if labels is None else _as_spec(labels, "int32")
    for name, value in (("num_examples", num_examples), ("batch_size", batch_size)):
        if value is not None and value < 1:
            raise ValueError(f"{name}: must be >= 1, got {value}")
    if num_classes < 1:
        raise ValueError(f"num_classes: must be >= 1, got {num_classes}")
    lead = (batch_size,) if batch_size else ()
    gen = tf.random.Generator.from_seed(seed)

    def make(spec):
        shape = lead + tuple(spec.shape)
        if spec.dtype.is_integer:
            return tf.cast(gen.uniform(shape, 0, num_classes, dtype=tf.int64), spec.dtype)
        return tf.cast(gen.normal(shape), spec.dtype)

    element = make(f_spec) if l_spec is None else (make(f_spec), make(l_spec))
    # Nothing to tune, and the autotune model's thread would hold up the end of fit.
    return (
        tf.data.Dataset.from_tensors(element).repeat(num_examples).with_options(no_autotune_model())
    )


def no_autotune_model() -> Any:
    """``tf.data.Options`` with tf.data's autotune *model* off, for the toolkit's pipelines.

    Why: the model runs on a thread of its own that sleeps between optimizations, its period
    doubling from 10 ms up to a minute; destroying the iterator (when ``fit`` returns) wakes
    it to stop, and often it misses the wake-up and sleeps out its period first, so ``fit``
    returned up to that period after its last step (2.5, 5.1, 10.2, 20.5 s seen). What it
    tunes costs little to fix: with the model off, a map given AUTOTUNE runs one call per core
    (up to 16, or ``initial_parallelism``), as the model starts it, and ``prefetch(AUTOTUNE)``
    still grows its buffer when the consumer waits, within the RAM budget. A pipeline that
    wants the model back: ``ds.with_options(o)`` with ``o.autotune.enabled = True``.
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return options


# ---------------------------------------------------------------------------- Python generators


def parallel_generator(
    factory: Callable[[Any], Iterable[Any]],
    shards: Sequence[Any],
    output_signature: Any,
    *,
    chunk_size: int = DEFAULT_CHUNK,
    cycle_length: int | None = None,
    deterministic: bool | None = None,
):
    """A Python generator source read in parallel, in chunks.

    ``factory(shard)`` must return an iterable of elements matching `output_signature` (e.g. a
    generator over one file, or over one slice of the indices). Shards are read concurrently
    through ``interleave(num_parallel_calls=AUTOTUNE)``, and each shard's elements cross into
    TensorFlow `chunk_size` at a time (stacked with NumPy, split again by ``unbatch`` in C++).

    Where the speed comes from, honestly: Python code holds the GIL, so generators on several
    threads do not run Python in parallel (threads alone gain little over ``from_generator``).
    What does scale is (1) paying ``from_generator``'s per-element cost (a Python call through
    ``py_func`` plus conversion, often more than NumPy needs to make a whole batch) once per
    chunk, and (2) overlapping the parts that release the GIL (NumPy on large arrays, file and
    network I/O).
    ``benchmarks/pipeline_generator.py`` prints both. For a generator whose Python work
    dominates, move the work into TensorFlow ops or into processes.

    Args:
        factory: called with one shard; returns an iterable of elements.
        shards: what to split the work by (file names, index ranges, seeds); at least one.
        output_signature: the `tf.TensorSpec` structure of one element; every shape must be
            fully known (chunks are stacked).
        chunk_size: elements per crossing into TensorFlow. Defaults to `16`.
        cycle_length: shards read at once. Defaults to `None` (all, up to the CPU count).
        deterministic: keep the order of elements (slower when a shard stalls). Defaults to
            `None` (follow ``tf.data.Options.deterministic``, on by default).

    Raises:
        ValueError: no shards, a chunk_size < 1, or a signature with unknown dimensions.
    """
    tf = _tf()
    shards = list(shards)
    if not shards:
        raise ValueError("shards: empty; give at least one shard (e.g. range(num_workers))")
    if chunk_size < 1:
        raise ValueError(f"chunk_size: must be >= 1, got {chunk_size}")
    specs = tf.nest.flatten(output_signature)
    for spec in specs:
        if not spec.shape.is_fully_defined():
            raise ValueError(
                f"output_signature: every shape must be fully known to stack chunks, got "
                f"{spec.shape}; use chunk_size=1 with from_generator for ragged elements"
            )
    chunk_signature = tf.nest.map_structure(
        lambda s: tf.TensorSpec((None, *s.shape), s.dtype), output_signature
    )
    shard_values = {i: shard for i, shard in enumerate(shards)}

    def chunks(index: Any) -> Iterator[Any]:
        buffer: list[Any] = []
        for element in factory(shard_values[int(index)]):
            buffer.append(element)
            if len(buffer) == chunk_size:
                yield _stack(buffer, tf)
                buffer = []
        if buffer:
            yield _stack(buffer, tf)

    cycle = cycle_length or min(len(shards), os.cpu_count() or 1)
    return (
        tf.data.Dataset.range(len(shards))
        .interleave(
            lambda i: tf.data.Dataset.from_generator(
                chunks, args=(i,), output_signature=chunk_signature
            ),
            cycle_length=cycle,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
        .unbatch()
    )


def _stack(elements: list[Any], tf: Any) -> Any:
    flat = [tf.nest.flatten(e) for e in elements]
    stacked = [np.stack(column) for column in zip(*flat, strict=True)]
    return tf.nest.pack_sequence_as(elements[0], stacked)


# ---------------------------------------------------------------------------- image folder


def find_unreadable_image(files: Sequence[str], channels: int = 3) -> str | None:
    """The first of `files` that TensorFlow cannot decode as an image, as ``"PATH (the
    decoder's message)"``, or None. Decodes each: for after a decode failed in a pipeline,
    to name the file the decoder's error does not name."""
    tf = _tf()
    for path in files:
        try:
            tf.io.decode_image(tf.io.read_file(path), channels=channels, expand_animations=False)
        except tf.errors.OpError as e:
            return f"{path} ({what_went_wrong(e)})"
    return None


def class_names(root: str | os.PathLike[str]) -> list[str]:
    """Sorted class sub-folder names of an image folder."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"root: no such directory {root!r}")
    names = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if not names:
        raise ValueError(f"root: {root!r} has no class sub-folders (expected root/<class>/*.jpg)")
    return names


def decode_image(
    data: Any, image_size: Sequence[int], channels: int = 3, dtype: str = "float32"
) -> Any:
    """JPEG/PNG bytes to an image of ``image_size + (channels,)``.

    Args:
        data: the encoded bytes (a scalar string tensor).
        image_size: ``(height, width)`` after a bilinear resize.
        channels: 1, 3 or 4. Defaults to `3`.
        dtype: ``"float32"`` scales to [0, 1]; ``"uint8"`` keeps 0-255 pixels, 4× less to
            cache, shuffle and batch (normalize whole batches with :func:`normalize_images`).
    """
    tf = _tf()
    size = tuple(int(s) for s in image_size)
    image = tf.io.decode_image(data, channels=channels, expand_animations=False)
    image = tf.image.resize(image, size)  # float32 0-255, bilinear
    if dtype == "uint8":
        image = tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)
    else:
        image = image / 255.0
    return tf.ensure_shape(image, (*size, channels))


def normalize_images(images: Any, *rest: Any) -> Any:
    """uint8 images (a batch, optionally with labels) to float32 in [0, 1]: a ``batch_map``."""
    tf = _tf()
    out = tf.cast(images, tf.float32) / 255.0
    return (out, *rest) if rest else out


def image_folder(
    root: str | os.PathLike[str],
    image_size: Sequence[int] = (64, 64),
    *,
    channels: int = 3,
    dtype: str = "float32",
    shuffle_files: bool = False,
    seed: int | None = None,
    deterministic: bool | None = None,
    loader: str = "tf_data",
):
    """``(image, label)`` from ``root/<class>/*.{jpg,jpeg,png}``, decoded and resized in parallel.

    ``loader="grain"``: the same files, labels and pixels as an ``ImageFiles`` (decoded with
    Pillow when read, what ``pipeline(..., loader="grain")`` reads in its threads or
    workers); `shuffle_files`, `seed` and `deterministic` are the pipeline's business there.

    Labels are the index of the class folder in sorted order (:func:`class_names`). With
    ``dtype="uint8"`` images stay 0-255 bytes (see :func:`decode_image`), the fast choice when
    the pipeline caches or shuffles them: ``pipeline(..., batch_map=normalize_images)``.

    Raises:
        FileNotFoundError: `root` does not exist.
        ValueError: no class folders, no images, or a bad `image_size`/`channels`.
    """
    if len(image_size) != 2 or min(image_size) < 1:
        raise ValueError(f"image_size: expected (height, width) >= 1, got {image_size!r}")
    if channels not in (1, 3, 4):
        raise ValueError(f"channels: must be 1, 3 or 4, got {channels}")
    if dtype not in ("float32", "uint8"):
        raise ValueError(f"dtype: must be 'float32' or 'uint8', got {dtype!r}")
    names = class_names(root)
    paths, labels = [], []
    for label, name in enumerate(names):
        folder = os.path.join(os.fspath(root), name)
        for f in sorted(os.listdir(folder)):
            if f.lower().endswith(IMAGE_EXTENSIONS):
                paths.append(os.path.join(folder, f))
                labels.append(label)
    if not paths:
        raise ValueError(f"root: no {'/'.join(IMAGE_EXTENSIONS)} files under {os.fspath(root)!r}")
    size = tuple(int(s) for s in image_size)
    if loader == "grain":
        from toolkit.data.arrays import ImageFiles

        return ImageFiles(tuple(paths), np.asarray(labels, np.int32), size, channels, dtype)
    tf = _tf()
    ds = tf.data.Dataset.from_tensor_slices((paths, np.asarray(labels, np.int32)))
    if shuffle_files:
        ds = ds.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    return ds.map(
        lambda path, label: (decode_image(tf.io.read_file(path), size, channels, dtype), label),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )


# ---------------------------------------------------------------------------- TFDS


def tfds_dataset(
    name: str,
    split: str = "train",
    *,
    data_dir: str | None = None,
    as_supervised: bool = True,
    shuffle_files: bool = False,
    read_config: Any = None,
    interleave_cycle_length: int | None = None,
    deterministic: bool | None = None,
    seed: int | None = None,
    decoders: Any = None,
    download: bool = True,
):
    """A TensorFlow Datasets dataset by name, with its reading options passed through.

    Args:
        name: TFDS name, optionally with config/version (``"mnist"``, ``"cifar10:3.0.2"``).
        split: split spec (``"train"``, ``"train[:10%]"``). Defaults to `"train"`.
        data_dir: where prepared data lives. Defaults to TFDS's default.
        as_supervised: ``(features, label)`` pairs instead of dicts. Defaults to `True`.
        shuffle_files: shuffle the order of the files. Defaults to `False`.
        read_config: a `tfds.ReadConfig`; built from the next three when omitted.
        interleave_cycle_length: files read at once. Defaults to TFDS's choice.
        deterministic: keep the order (``ReadConfig.options``). Defaults to `None`.
        seed: file-shuffle seed (``ReadConfig.shuffle_seed``). Defaults to `None`.
        decoders: TFDS decoders (e.g. ``{"image": tfds.decode.SkipDecoding()}``).
        download: download and prepare when missing. Defaults to `True`.

    Raises:
        ValueError: the dataset name is unknown to TFDS.
    """
    import tensorflow_datasets as tfds

    tf = _tf()
    base = name.split(":")[0].split("/")[0]
    if base not in tfds.list_builders():
        raise ValueError(
            f"dataset: unknown TFDS dataset {name!r}; see `tfds.list_builders()` for names"
        )
    if read_config is None:
        options = tf.data.Options()
        if deterministic is not None:
            options.deterministic = deterministic
        kwargs: dict[str, Any] = {"options": options, "shuffle_seed": seed}
        if interleave_cycle_length is not None:
            kwargs["interleave_cycle_length"] = interleave_cycle_length
        read_config = tfds.ReadConfig(**kwargs)
    return tfds.load(
        name,
        split=split,
        data_dir=data_dir,
        as_supervised=as_supervised,
        shuffle_files=shuffle_files,
        read_config=read_config,
        decoders=decoders,
        download=download,
    )


# ---------------------------------------------------------------------------- digits


def digits(validation_fraction: float = 0.2, seed: int = 0) -> tuple[Arrays, Arrays]:
    """The UCI handwritten digits (1797 8×8 images, 10 classes), split for validation.

    Real data that ships inside this package (``digits.csv.gz``, 57 KB, the copy
    scikit-learn ships as ``load_digits``), so it works offline. It is read here rather than
    through scikit-learn: with scikit-learn installed, every ``import keras`` loads it (and
    SciPy) for Keras's scikit-learn wrapper, 0.6 s of CPU in each process, whether or not
    anything uses it. Pixels are scaled from [0, 16] to [0, 1] and flattened to 64 features;
    the split is stratified by class (:func:`_stratified_split`).

    Source: E. Alpaydin and C. Kaynak, "Optical Recognition of Handwritten Digits", UCI
    Machine Learning Repository (1998), https://doi.org/10.24432/C50P49, CC BY 4.0: the test
    set of 1797 digits written by 13 people.

    Returns:
        ``((x_train, y_train), (x_val, y_val))`` with float32 features and int32 labels.
    """
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    import gzip
    from importlib import resources

    packed = resources.files(__package__).joinpath("digits.csv.gz")
    with packed.open("rb") as raw, gzip.open(raw, "rt") as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.float32)
    x = table[:, :-1] / np.float32(16.0)
    y = table[:, -1].astype(np.int32)
    train, val = _stratified_split(y, validation_fraction, seed)
    return (x[train], y[train]), (x[val], y[val])


def _stratified_split(
    labels: np.ndarray, validation_fraction: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a shuffled train/validation split that keeps each class's share.

    The validation set takes ``ceil(fraction × n)`` examples (scikit-learn's count: 360 of
    1797 digits at 0.2), shared among the classes in proportion to their sizes, the
    remainders going to the largest fractions; each class's examples are drawn at random
    (``seed``). Both index arrays are shuffled, so neither is ordered by class.
    """
    labels = np.asarray(labels)
    n = len(labels)
    n_val = int(np.ceil(validation_fraction * n))
    if not 0 < n_val < n:
        raise ValueError(
            f"validation_fraction {validation_fraction} of {n} examples leaves an empty side"
        )
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    share = counts * (n_val / n)
    take = np.floor(share).astype(int)
    order = np.argsort(-(share - take), kind="stable")  # largest remainders first
    take[order[: n_val - take.sum()]] += 1
    train: list[np.ndarray] = []
    val: list[np.ndarray] = []
    for cls, k in zip(classes, take, strict=True):
        members = rng.permutation(np.flatnonzero(labels == cls))
        val.append(members[:k])
        train.append(members[k:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(val))
