"""Data sources (TFRecord files: ``toolkit.data.tfrecord``), each a ``tf.data.Dataset`` of single
examples with a declared ``element_spec``. Bad arguments raise ``ValueError`` (``FileNotFoundError``
for paths) starting with the argument's name and saying what to do."""

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


def from_arrays(features: Any, labels: Any = None):
    """A dataset of ``(features, label)`` pairs (or of features alone) from in-memory arrays.

    Raises:
        ValueError: no examples, or labels that don't match the features in number."""
    tf = _tf()
    array_examples(features, labels)
    if labels is None:
        return tf.data.Dataset.from_tensor_slices(features)
    return tf.data.Dataset.from_tensor_slices((features, labels))


def array_examples(features: Any, labels: Any = None) -> int:
    """Examples in in-memory `features` and `labels`, counted as ``fit`` does by the first leaf
    (``len`` counts a dict's outputs); ValueError naming the argument if none or leaves differ."""
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
    """The rows every non-None leaf of `nest` has (None: no leaf); ValueError if two differ."""
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

    With `batch_size`, one whole batch is repeated (skip the builder's batching); else one example.

    Args:
        features: a `tf.TensorSpec` or a shape tuple (float32) of one example.
        labels: a spec or shape of one label; ``()``: a class id below `num_classes`; None: none.
        num_examples: elements to yield (examples, or batches with `batch_size`); None: forever."""
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
    """``tf.data.Options`` with tf.data's autotune *model* off, for the toolkit's pipelines: its
    thread sleeps ever longer between optimizations and often missed ``fit``'s iterator teardown,
    so ``fit`` returned seconds late. AUTOTUNE maps still run a call per core; prefetch still grows.
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return options


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

    ``factory(shard)`` yields elements of `output_signature`; shards are read through
    ``interleave(AUTOTUNE)``, crossing into TensorFlow `chunk_size` elements at a time. The GIL
    stays: what scales is ``from_generator``'s per-element cost paid once per chunk, and overlapped
    work that releases the GIL (NumPy, I/O); Python-bound work belongs in TF ops or processes.

    Args:
        shards: what to split the work by (file names, index ranges, seeds); at least one.
        output_signature: the `tf.TensorSpec` structure of one element, shapes fully known.
        cycle_length: shards read at once (default: all, up to the CPU count).
        deterministic: keep the order of elements (default: ``tf.data.Options.deterministic``).

    Raises:
        ValueError: no shards, a chunk_size < 1, or a signature with unknown dimensions."""
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


def find_unreadable_image(files: Sequence[str], channels: int = 3) -> str | None:
    """The first of `files` TF cannot decode, as ``"PATH (message)"`` (decode errors name none)."""
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
    """JPEG/PNG bytes (a scalar string tensor) to an image of ``image_size + (channels,)``.

    Args:
        image_size: ``(height, width)`` after a bilinear resize.
        dtype: ``"float32"`` scales to [0, 1]; ``"uint8"`` keeps bytes, 4× less to cache and shuffle
            (normalize batches with :func:`normalize_images`)."""
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

    ``loader="grain"``: the same as an ``ImageFiles`` (Pillow decodes on read). Labels: the class
    folder's sorted index. Pair ``dtype="uint8"`` with ``batch_map=normalize_images``.

    Raises:
        FileNotFoundError: `root` does not exist.
        ValueError: no class folders, no images, or a bad `image_size`/`channels`."""
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
        name: TFDS name, optionally with config/version (``"cifar10:3.0.2"``).
        read_config: a `tfds.ReadConfig`; built from the next three when omitted.
        deterministic: keep the order (``ReadConfig.options``).
        decoders: TFDS decoders (e.g. ``{"image": tfds.decode.SkipDecoding()}``).

    Raises:
        ValueError: the dataset name is unknown to TFDS."""
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


def digits(validation_fraction: float = 0.2, seed: int = 0) -> tuple[Arrays, Arrays]:
    """The UCI handwritten digits (8×8 images, 10 classes), with a stratified validation split.

    Shipped in the package (``digits.csv.gz``, scikit-learn's ``load_digits`` copy) and read here,
    not through scikit-learn, whose presence makes every ``import keras`` load it and SciPy. Pixels
    scaled to [0, 1], flattened. Source: E. Alpaydin and C. Kaynak, "Optical Recognition of
    Handwritten Digits", UCI ML Repository, https://doi.org/10.24432/C50P49, CC BY 4.0.

    Returns:
        ``((x_train, y_train), (x_val, y_val))`` with float32 features and int32 labels."""
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
    """Shuffled train/validation indices keeping class shares; ``ceil(fraction × n)`` held out."""
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
