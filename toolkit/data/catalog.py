"""Datasets by name, for recipes: ``synthetic`` | ``digits`` | ``tfds:NAME`` | ``folder:PATH`` |
``tfrecord:GLOB``, shaped exactly as the recipe's :class:`ImageSpec` or :class:`TokenSpec` says.

* ``synthetic``: one random example of the spec, repeated (no input cost).
* ``digits``: the packaged UCI 8×8 digits, resized; as tokens, pixel intensities after ``[CLS]``.
* ``tfds:NAME``: ``train``, and ``test`` or ``validation``; text lower-cased, split on whitespace
  and hashed into the vocabulary.
* ``folder:PATH``: ``PATH/<class>/*.jpg|png``; ``tfrecord:GLOB``: ``write_tfrecords``'s records.

Folder and TFRecord data hold out every k-th example. Bad names and files fail here, before
TensorFlow starts; datasets are built lazily so the runner can choose the device first. Without
TensorFlow, ``digits``, ``synthetic`` and ``folder`` come as NumPy (``ArraySource``,
``ImageFiles``), as :attr:`Data.examples` (what Grain reads) gives them with it."""

from __future__ import annotations

import dataclasses
import glob as _glob
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from toolkit.data import sources, tfrecord
from toolkit.data.arrays import ArraySource, ImageFiles, has_tensorflow, resize_images

__all__ = [
    "Data",
    "load",
]


KINDS = ("synthetic", "digits", "tfds:NAME", "folder:PATH", "tfrecord:GLOB")
SYNTHETIC_EXAMPLES = 4096
PAD, CLS, FIRST_TOKEN = 0, 1, 2
# Cached in memory when the decoded examples are known to take at most this much.
CACHE_LIMIT_BYTES = 512 * 2**20


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """Images of ``(height, width, channels)``, float32 in [0, 1], with an int32 class label."""

    height: int
    width: int
    channels: int = 3
    num_classes: int = 10

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, self.channels)


@dataclasses.dataclass(frozen=True)
class TokenSpec:
    """Token id sequences of ``seq_len`` (int32; 0: padding, 1: [CLS]), with an int32 label."""

    seq_len: int
    vocab_size: int
    num_classes: int = 2

    @property
    def shape(self) -> tuple[int]:
        return (self.seq_len,)


@dataclasses.dataclass
class Data:
    """A recipe's data: functions that build the datasets of single examples, and facts.

    Attributes:
        train, validation: build a `tf.data.Dataset` of ``(features, label)``; validation: or None.
        cache: whether the examples are small enough to keep in memory.
        train_examples: training examples where the dataset cannot say; None when unknown.
        find_bad_file: after reading failed, the file it failed on as ``"PATH (why)"``, or None.
        examples: ``examples(training)``: a split as ArraySource or ImageFiles; None: tf.data."""

    train: Callable[[], Any]
    validation: Callable[[], Any] | None
    num_classes: int
    description: str
    cache: bool = False
    train_examples: int | None = None
    find_bad_file: Callable[[BaseException], str | None] | None = None
    examples: Callable[[bool], Any] | None = None


def _read_error(error: BaseException) -> bool:
    """Whether `error` is one TensorFlow raises for data it cannot read or decode."""
    return type(error).__name__ in ("DataLossError", "InvalidArgumentError")


def parse_dataset_spec(spec: str) -> tuple[str, str]:
    """``"tfds:mnist"`` -> ``("tfds", "mnist")``; ``"digits"`` -> ``("digits", "")``.

    Raises:
        ValueError: an unknown kind or a missing argument, naming the accepted forms."""
    kind, _, arg = (spec or "").partition(":")
    accepted = ", ".join(KINDS)
    if kind in ("synthetic", "digits"):
        if arg:
            raise ValueError(f"--dataset={spec}: {kind!r} takes no ':' argument")
        return kind, ""
    if kind in ("tfds", "folder", "tfrecord"):
        if not arg:
            what = {"tfds": "NAME", "folder": "PATH", "tfrecord": "GLOB"}[kind]
            raise ValueError(f"--dataset={spec}: give {kind}:{what}")
        return kind, arg
    raise ValueError(f"--dataset: unknown dataset {spec!r}; use one of {accepted}")


def _tf():
    import tensorflow as tf

    return tf


def _holdout(ds: Any, fraction: float, keep: bool, total: int | None = None) -> Any:
    """Every k-th example held out, or (`keep`) the rest; a `total` declares the length to Keras."""
    tf = _tf()
    k, train = _every(total or 0, fraction)
    kept = ds.enumerate().filter(lambda i, _: tf.equal(i % k, 0) != keep)
    kept = kept.map(lambda _, example: example)
    if total is None:
        return kept
    return kept.apply(tf.data.experimental.assert_cardinality(train if keep else total - train))


def _every(total: int, fraction: float) -> tuple[int, int]:
    """``(k, training examples)`` of `total`, every k-th held out (k = round(1 / fraction) >= 2)."""
    k = max(2, round(1.0 / fraction))
    return k, total - -(-total // k)


def _fits(examples: int, spec: ImageSpec | TokenSpec) -> bool:
    per_example = 4 * (
        spec.height * spec.width * spec.channels if isinstance(spec, ImageSpec) else spec.seq_len
    )
    return 0 < examples * per_example <= CACHE_LIMIT_BYTES


def _to_image(image: Any, spec: ImageSpec) -> Any:
    """Any image tensor (uint8 or float, 1/3/4 channels, any size) to the spec's float32."""
    tf = _tf()
    if image.dtype == tf.uint8:
        image = tf.cast(image, tf.float32) / 255.0
    image = tf.cast(image, tf.float32)
    if image.shape.rank == 2:
        image = image[..., None]
    channels = image.shape[-1]
    if channels == 4:
        image, channels = image[..., :3], 3
    if channels != spec.channels:
        if spec.channels == 1:
            image = tf.image.rgb_to_grayscale(image)
        else:
            image = tf.repeat(image, spec.channels, axis=-1)
    if tuple(image.shape[:2]) != (spec.height, spec.width):
        image = tf.image.resize(image, (spec.height, spec.width))
    return tf.ensure_shape(image, spec.shape)


def _image_batch(images: np.ndarray, spec: ImageSpec) -> np.ndarray:
    """``_to_image`` in NumPy for a batch of grey ``(n, h, w, 1)`` images in [0, 1]."""
    if spec.channels != images.shape[-1]:
        images = np.repeat(images, spec.channels, axis=-1)
    return resize_images(images, spec.height, spec.width)


def _digit_images(spec: ImageSpec, validation_fraction: float, seed: int) -> Data:
    (x_tr, y_tr), (x_va, y_va) = sources.digits(validation_fraction, seed=seed)

    def make(x: Any, y: Any) -> Callable[[], Any]:
        if not has_tensorflow():
            return lambda: ArraySource(
                x.reshape(-1, 8, 8, 1), y, transform=lambda b: _image_batch(b, spec)
            )

        def build() -> Any:
            tf = _tf()
            ds = sources.from_arrays(x.reshape(-1, 8, 8, 1), y)
            return ds.map(lambda i, label: (_to_image(i, spec), label), tf.data.AUTOTUNE)

        return build

    def arrays(training: bool) -> ArraySource:
        x, y = (x_tr, y_tr) if training else (x_va, y_va)
        return ArraySource(x.reshape(-1, 8, 8, 1), y, transform=lambda b: _image_batch(b, spec))

    return Data(
        make(x_tr, y_tr),
        make(x_va, y_va),
        10,
        f"digits (UCI, {len(x_tr)} train / {len(x_va)} validation), "
        f"8×8 grey to {spec.height}×{spec.width}×{spec.channels}",
        cache=_fits(len(x_tr), spec),
        examples=arrays,
    )


def _check_tfds(name: str) -> None:
    import tensorflow_datasets as tfds

    base = name.split(":")[0].split("/")[0]
    if base not in tfds.list_builders():
        raise ValueError(
            f"--dataset=tfds:{name}: unknown TFDS dataset; see `tfds.list_builders()` for names"
        )


def _tfds_num_classes(name: str, data_dir: str | None, key: str, default: int) -> int:
    import tensorflow_datasets as tfds

    try:
        feature = tfds.builder(name, data_dir=data_dir).info.features[key]
        return int(feature.num_classes)
    except Exception:  # noqa: BLE001 - no metadata: the recipe's default count
        return default


def _tfds_split(name: str, data_dir: str | None, split: str, what: str) -> Any:
    where = data_dir or "the TFDS default data_dir"
    try:
        ds = sources.tfds_dataset(name, split, data_dir=data_dir, download=False)
    except Exception as e:  # TFDS raises many kinds for "not prepared"
        raise ValueError(
            f"--dataset=tfds:{name}: cannot read its {what} split from {where} "
            f"({type(e).__name__}: {e}); prepare it with `tfds build` or point --data_dir at it"
        ) from e
    if int(ds.cardinality()) == 0:
        raise ValueError(
            f"--dataset=tfds:{name}: its {what} split ({split!r}) in {where} has no examples: "
            "prepare it again with `tfds build`, or point --data_dir at a complete copy"
        )
    return ds


def _tfds_validation_split(name: str, data_dir: str | None) -> str | None:
    import tensorflow_datasets as tfds

    try:
        splits = set(tfds.builder(name, data_dir=data_dir).info.splits)
    except Exception:  # noqa: BLE001
        splits = set()
    for split in ("test", "validation"):
        if not splits or split in splits:
            return split
    return None


def _tfds(
    name: str,
    spec: ImageSpec | TokenSpec,
    data_dir: str | None,
    convert: Callable[[Any], Any],
) -> Data:
    _check_tfds(name)
    tf = _tf()
    num_classes = _tfds_num_classes(name, data_dir, "label", spec.num_classes)
    val_split = _tfds_validation_split(name, data_dir)

    def make(split: str, what: str) -> Callable[[], Any]:
        def build() -> Any:
            ds = _tfds_split(name, data_dir, split, what)
            return ds.map(lambda x, y: (convert(x), tf.cast(y, tf.int32)), tf.data.AUTOTUNE)

        return build

    return Data(
        make("train", "train"),
        make(val_split, "validation") if val_split else None,
        num_classes,
        f"tfds:{name} (train / {val_split or 'no validation'}) from "
        f"{data_dir or 'the TFDS default data_dir'}",
    )


# The first bytes of each image format the folder reader decodes.
_MAGIC = {".png": (b"\x89PNG\r\n\x1a\n",), ".jpg": (b"\xff\xd8\xff",), ".jpeg": (b"\xff\xd8\xff",)}


def _check_image_header(image: str) -> None:
    """ValueError naming `image` if its first bytes are not its kind's (the decoder names none)."""
    try:
        with open(image, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise ValueError(f"--dataset=folder:...: cannot read {image} ({e.strerror})") from None
    wanted = _MAGIC[os.path.splitext(image)[1].lower()]
    if not any(head.startswith(m) for m in wanted):
        what = "an empty file" if not head else "not an image of that kind"
        raise ValueError(
            f"--dataset=folder: {image} is {what} (its first bytes are not a "
            f"{os.path.splitext(image)[1].lower().lstrip('.').upper()} header): remove or "
            "replace it"
        )


def _folder(path: str, spec: ImageSpec, validation_fraction: float) -> Data:
    names, images = _folder_images(path)
    k, train_count = _folder_holdout(path, names, images, validation_fraction)
    files = len(images)

    def make(keep: bool) -> Callable[[], Any]:
        if not has_tensorflow():  # decoded with Pillow, a batch at a time
            return lambda: _image_files(images, names, spec, k, keep)

        def build() -> Any:
            tf = _tf()
            ds = sources.image_folder(
                path, (spec.height, spec.width), channels=spec.channels, deterministic=True
            )
            return _holdout(ds, validation_fraction, keep, files).map(
                lambda x, y: (tf.ensure_shape(x, spec.shape), y)
            )

        return build

    return Data(
        make(True),
        make(False),
        len(names),
        f"folder:{path} ({files} images in {len(names)} classes, every {k}th held out)",
        cache=_fits(files, spec),
        train_examples=train_count,
        find_bad_file=lambda e: (
            sources.find_unreadable_image(images, spec.channels) if _read_error(e) else None
        ),
        examples=lambda training: _image_files(images, names, spec, k, training),
    )


def _folder_images(path: str) -> tuple[list[str], list[str]]:
    """``(class names, image paths)`` of ``path/<class>/*``, each header checked before training."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"--dataset=folder:{path}: no such directory")
    try:
        names = sources.class_names(path)
    except ValueError as e:
        raise ValueError(f"--dataset=folder:{path}: {str(e).removeprefix('root: ')}") from e
    images = [
        os.path.join(path, name, f)
        for name in names
        for f in sorted(os.listdir(os.path.join(path, name)))
        if f.lower().endswith(sources.IMAGE_EXTENSIONS)
    ]
    for image in images:
        _check_image_header(image)
    return names, images


def _folder_holdout(
    path: str, names: list[str], images: list[str], validation_fraction: float
) -> tuple[int, int]:
    """``(k, training images)``, refusing a folder a classifier learns nothing from."""
    files = len(images)
    if files == 0:
        raise ValueError(
            f"--dataset=folder:{path}: no {'/'.join(sources.IMAGE_EXTENSIONS)} files in its "
            "class sub-folders"
        )
    if len(names) < 2:
        raise ValueError(
            f"--dataset=folder:{path}: one class only ({names[0]}): a classifier learns "
            "nothing from it; add a sub-folder per class"
        )
    k, train_count = _every(files, validation_fraction)
    if train_count < 1:
        raise ValueError(
            f"--dataset=folder:{path}: {files} image(s), all held out for validation (every "
            f"{k}th): add images, or raise --validation_fraction's denominator"
        )
    empty = sorted(set(names) - {os.path.basename(os.path.dirname(p)) for p in images})
    if empty:  # a class with no example: trained as one that never occurs, silently
        kinds = "/".join(sources.IMAGE_EXTENSIONS)
        raise ValueError(f"--dataset=folder:{path}: class folder(s) {', '.join(empty)} hold no "
                         f"{kinds} files: add images or remove the folder(s)")  # fmt: skip
    return k, train_count


def _image_files(
    images: list[str], names: list[str], spec: ImageSpec, k: int, training: bool
) -> ImageFiles:
    """The folder's split as :class:`ImageFiles`, held out as ``_holdout`` does."""
    labels = np.asarray([names.index(os.path.basename(os.path.dirname(p))) for p in images])
    size = (spec.height, spec.width)
    files = ImageFiles(tuple(images), labels.astype(np.int32), size, spec.channels)
    index = np.arange(len(images))
    return files.subset(index[(index % k != 0) if training else (index % k == 0)])


def _tfrecord_files(pattern: str) -> tuple[list[str], int]:
    """``(files, records)`` matching `pattern`, headers walked: no match, damage or none fails."""
    files = sorted(f for f in _glob.glob(pattern) if not f.endswith(tfrecord.MANIFEST_SUFFIX))
    if not files:
        raise FileNotFoundError(
            f"--dataset=tfrecord:{pattern}: no files match; check the path and the glob pattern"
        )
    records = tfrecord.check_tfrecords(files, f"--dataset=tfrecord:{pattern}")
    if records == 0:
        raise ValueError(
            f"--dataset=tfrecord:{pattern}: {len(files)} file(s) and no record in them: write "
            "the data with toolkit.data.write_tfrecords"
        )
    return files, records


def _tfrecord(
    pattern: str, spec: ImageSpec | TokenSpec, validation_fraction: float, as_tokens: bool
) -> Data:
    files, records = _tfrecord_files(pattern)
    k, train_count = _every(records, validation_fraction)

    def check_first_record() -> None:
        tf = _tf()
        size = 1
        for d in spec.shape:
            size *= d
        for record in tf.data.TFRecordDataset(files[:1]).take(1):
            parsed = tf.io.parse_single_example(
                record, {"features": tf.io.VarLenFeature(tf.float32)}
            )
            found = int(tf.size(parsed["features"].values))
            if found != size:
                shape = "×".join(str(d) for d in spec.shape)
                raise ValueError(
                    f"--dataset=tfrecord:{pattern}: records hold {found} feature values, the "
                    f"model takes {shape} = {size}; write them with "
                    "toolkit.data.write_tfrecords and the model's input shape"
                )

    def make(keep: bool) -> Callable[[], Any]:
        def build() -> Any:
            tf = _tf()
            check_first_record()
            ds = tfrecord.tfrecords(files, spec.shape, deterministic=True)
            if as_tokens:
                ds = ds.map(lambda x, y: (tf.cast(x, tf.int32), y))
            return _holdout(ds, validation_fraction, keep, records)

        return build

    return Data(
        make(True),
        make(False),
        spec.num_classes,
        f"tfrecord:{pattern} ({len(files)} files, {records} records, every {k}th held out)",
        train_examples=train_count,
        find_bad_file=lambda e: (
            tfrecord.find_unreadable_tfrecord(files) if _read_error(e) else None
        ),
    )


def _synthetic_arrays(spec: ImageSpec | TokenSpec, seed: int) -> ArraySource:
    rng = np.random.default_rng(seed)
    if isinstance(spec, TokenSpec):
        words = rng.integers(FIRST_TOKEN, spec.vocab_size, spec.seq_len - 1, dtype=np.int32)
        one = np.concatenate([[CLS], words]).astype(np.int32)
    else:
        one = rng.uniform(size=spec.shape).astype(np.float32)
    label = np.int32(rng.integers(0, spec.num_classes))
    # Views with a zero stride: the copies cost no memory until a batch is read.
    return ArraySource(
        np.broadcast_to(one, (SYNTHETIC_EXAMPLES, *one.shape)),
        np.broadcast_to(label, (SYNTHETIC_EXAMPLES,)),
    )


def _synthetic(spec: ImageSpec | TokenSpec, seed: int) -> Data:
    def build() -> Any:
        if not has_tensorflow():
            return _synthetic_arrays(spec, seed)
        tf = _tf()
        gen = tf.random.Generator.from_seed(seed)
        if isinstance(spec, TokenSpec):
            words = gen.uniform((spec.seq_len - 1,), FIRST_TOKEN, spec.vocab_size, tf.int32)
            features = tf.concat([[CLS], words], axis=0)
        else:
            features = gen.uniform(spec.shape)
        label = gen.uniform((), 0, spec.num_classes, dtype=tf.int32)
        return tf.data.Dataset.from_tensors((features, label)).repeat(SYNTHETIC_EXAMPLES)

    return Data(
        build,
        None,
        spec.num_classes,
        f"synthetic ({SYNTHETIC_EXAMPLES} copies of one random example)",
        examples=lambda training: _synthetic_arrays(spec, seed) if training else None,
    )


def _pad(tokens: Any, seq_len: int) -> Any:
    tf = _tf()
    tokens = tf.concat([[CLS], tf.cast(tokens, tf.int32)], axis=0)[:seq_len]
    tokens = tf.pad(tokens, [[0, seq_len - tf.shape(tokens)[0]]], constant_values=PAD)
    return tf.ensure_shape(tokens, (seq_len,))


def _text_to_tokens(text: Any, spec: TokenSpec) -> Any:
    tf = _tf()
    words = tf.strings.split(tf.strings.lower(text))
    ids = tf.strings.to_hash_bucket_fast(words, spec.vocab_size - FIRST_TOKEN) + FIRST_TOKEN
    return _pad(ids, spec.seq_len)


def _token_rows(x: np.ndarray, seq_len: int) -> np.ndarray:
    """``_pad`` in NumPy for every row of pixel intensities: [CLS], the tokens, padding."""
    tokens = (x * 16).round().astype(np.int32) + FIRST_TOKEN
    rows = np.full((len(x), seq_len), PAD, dtype=np.int32)
    rows[:, 0] = CLS
    width = min(seq_len - 1, tokens.shape[1])
    rows[:, 1 : 1 + width] = tokens[:, :width]
    return rows


def _digit_tokens(spec: TokenSpec, validation_fraction: float, seed: int) -> Data:
    if spec.vocab_size < FIRST_TOKEN + 17:
        raise ValueError(
            f"--dataset=digits as tokens needs --vocab_size >= {FIRST_TOKEN + 17} "
            f"(17 pixel intensities + padding + [CLS]), got {spec.vocab_size}"
        )
    (x_tr, y_tr), (x_va, y_va) = sources.digits(validation_fraction, seed=seed)

    def make(x: Any, y: Any) -> Callable[[], Any]:
        if not has_tensorflow():
            return lambda: ArraySource(_token_rows(x, spec.seq_len), y)

        def build() -> Any:
            tf = _tf()
            tokens = (x * 16).round().astype("int32") + FIRST_TOKEN
            ds = sources.from_arrays(tokens, y)
            return ds.map(lambda t, label: (_pad(t, spec.seq_len), label), tf.data.AUTOTUNE)

        return build

    return Data(
        make(x_tr, y_tr),
        make(x_va, y_va),
        10,
        f"digits as tokens ([CLS] + 64 pixel intensities, {len(x_tr)} train / "
        f"{len(x_va)} validation)",
        cache=True,
        examples=lambda training: ArraySource(
            _token_rows(x_tr if training else x_va, spec.seq_len), y_tr if training else y_va
        ),
    )


def _check_fraction(validation_fraction: float) -> None:
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"--validation_fraction must be in (0, 1), got {validation_fraction}")


def training_files(spec: str, validation_fraction: float = 0.2) -> int | None:
    """How many examples `spec`'s files leave to train on, or None if not files; checked (and
    raising) as :func:`load` does, without a framework, so a bad path is said before TF loads."""
    kind, _, arg = (spec or "").partition(":")
    if kind not in ("folder", "tfrecord"):
        return None
    kind, arg = parse_dataset_spec(spec)
    _check_fraction(validation_fraction)
    if kind == "folder":
        names, images = _folder_images(arg)
        return _folder_holdout(arg, names, images, validation_fraction)[1]
    return _every(_tfrecord_files(arg)[1], validation_fraction)[1]


def load(
    spec: str,
    input_spec: ImageSpec | TokenSpec,
    *,
    data_dir: str | None = None,
    validation_fraction: float = 0.2,
    seed: int = 0,
) -> Data:
    """The dataset `spec` shaped for a model that takes `input_spec`.

    Args:
        spec: ``synthetic``, ``digits``, ``tfds:NAME``, ``folder:PATH`` or ``tfrecord:GLOB``.
        validation_fraction: share held out (digits, folder, tfrecord).
        seed: for the digits split and synthetic data.

    Raises:
        ValueError: an unknown dataset, one that does not fit the model, or a bad fraction.
        FileNotFoundError: a folder or TFRecord pattern that matches nothing."""
    kind, arg = parse_dataset_spec(spec)
    _check_fraction(validation_fraction)
    if kind == "synthetic":
        return _synthetic(input_spec, seed)
    if kind not in ("digits", "folder") and not has_tensorflow():
        raise ValueError(
            f"--dataset={spec}: reading it needs tf.data, and TensorFlow is not installed "
            "here; use --dataset=digits, synthetic or folder:PATH, pass your own arrays, or "
            "install tensorflow"
        )
    if kind == "tfrecord":
        return _tfrecord(arg, input_spec, validation_fraction, isinstance(input_spec, TokenSpec))
    if isinstance(input_spec, TokenSpec):
        if kind == "digits":
            return _digit_tokens(input_spec, validation_fraction, seed)
        if kind == "tfds":
            return _tfds(arg, input_spec, data_dir, lambda t: _text_to_tokens(t, input_spec))
        raise ValueError(
            f"--dataset={spec}: this model reads token sequences; use synthetic, digits, "
            "tfds:NAME (a text dataset) or tfrecord:GLOB"
        )
    if kind == "digits":
        return _digit_images(input_spec, validation_fraction, seed)
    if kind == "tfds":
        return _tfds(arg, input_spec, data_dir, lambda x: _to_image(x, input_spec))
    return _folder(arg, input_spec, validation_fraction)
