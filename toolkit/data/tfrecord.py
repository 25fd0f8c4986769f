"""TFRecord files: writing them (with a manifest of each shard's records and bytes), checking them
before a run, finding the unreadable one, reading them as a ``tf.data.Dataset`` of ``(features,
label)``. Bad arguments raise ``ValueError`` (``FileNotFoundError`` for paths) naming it first."""

from __future__ import annotations

import glob as _glob
import json
import math
import os
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from toolkit.core.errors import what_went_wrong
from toolkit.core.files import parse_json

__all__: list[str] = []  # offered through toolkit.data

MANIFEST_SUFFIX = ".manifest.json"  # beside TFRecord shards: each file's records and bytes


def _tf():
    import tensorflow as tf

    return tf


def write_tfrecords(
    directory: str | os.PathLike[str],
    features: np.ndarray,
    labels: np.ndarray,
    *,
    num_shards: int = 4,
    prefix: str = "data",
) -> list[str]:
    """Writes ``(features, label)`` pairs as ``tf.train.Example`` records (``features`` float32
    flattened, ``label`` int64) over `num_shards` files, with ``<prefix>.manifest.json`` of each
    file's records and size, so a file cut short later, even at a record boundary, is found.

    Returns:
        The file paths written, ``<directory>/<prefix>-00000-of-00004.tfrecord`` ..."""
    tf = _tf()
    features = np.asarray(features, np.float32)
    labels = np.asarray(labels)
    if len(features) != len(labels):
        raise ValueError(
            f"labels: got {len(labels)} labels for {len(features)} examples; they must match"
        )
    if num_shards < 1:
        raise ValueError(f"num_shards: must be >= 1, got {num_shards}")
    os.makedirs(directory, exist_ok=True)
    paths = [
        os.path.join(os.fspath(directory), f"{prefix}-{i:05d}-of-{num_shards:05d}.tfrecord")
        for i in range(num_shards)
    ]
    writers = [tf.io.TFRecordWriter(p) for p in paths]
    try:
        for i, (x, y) in enumerate(zip(features, labels, strict=True)):
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "features": tf.train.Feature(
                            float_list=tf.train.FloatList(value=x.reshape(-1))
                        ),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)])),
                    }
                )
            )
            writers[i % num_shards].write(example.SerializeToString())
    finally:
        for w in writers:
            w.close()
    from toolkit.core.files import atomic_write

    counts = [len(range(i, len(features), num_shards)) for i in range(num_shards)]
    manifest = {
        "format": "toolkit.data.write_tfrecords/1",
        "files": {
            os.path.basename(p): {"records": n, "bytes": os.path.getsize(p)}
            for p, n in zip(paths, counts, strict=True)
        },
    }
    atomic_write(
        os.path.join(os.fspath(directory), prefix + MANIFEST_SUFFIX),
        json.dumps(manifest, indent=1),
    )
    return paths


def _masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C that TFRecord stores after each record's length."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _crc32c_table()


def _walk_tfrecord(path: str) -> tuple[int, str | None]:
    """``(records, problem)`` of a TFRecord file from its headers; `problem`: where it breaks."""
    size = os.path.getsize(path)
    records = offset = 0
    with open(path, "rb") as f:
        while offset < size:
            header = f.read(12)
            if len(header) < 12:
                return (
                    records,
                    f"cut short: {size - offset} bytes of a record header at byte {offset}",
                )
            length, crc = struct.unpack("<QI", header)
            if _masked_crc32c(header[:8]) != crc:
                return records, f"corrupt: record {records + 1}'s header at byte {offset}"
            end = offset + 12 + length + 4
            if end > size:
                return records, (
                    f"cut short: record {records + 1} at byte {offset} needs {length} bytes, "
                    f"the file ends {size - offset - 12} bytes later"
                )
            f.seek(end)
            offset, records = end, records + 1
    return records, None


def _manifest_entries(files: Sequence[str]) -> dict[str, tuple[dict[str, int], str]]:
    """What the manifests beside `files` say of them: by path, the entry and the manifest's path."""
    entries: dict[str, tuple[dict[str, int], str]] = {}
    for folder in sorted({os.path.dirname(f) for f in files}):
        for manifest in sorted(
            _glob.glob(os.path.join(_glob.escape(folder), "*" + MANIFEST_SUFFIX))
        ):
            try:
                with open(manifest, encoding="utf-8") as f:
                    listed = parse_json(f).get("files", {})
            except (OSError, ValueError, AttributeError):
                continue  # not ours, or unreadable: the header walk still runs
            for name, entry in listed.items():
                entries[os.path.join(folder, name)] = (entry, manifest)
    return entries


def check_tfrecords(files: Sequence[str], what: str = "files") -> int:
    """Checks TFRecord `files` before they are read and returns how many records they hold: a file
    cut mid-record, with a corrupt header, or with fewer records than a manifest beside it lists is
    named. Damaged record data is left to the reader's CRC (:func:`find_unreadable_tfrecord`).

    Raises:
        ValueError: ``{what}: FILE is cut short / corrupt ...: write it again or leave it out``."""
    listed = _manifest_entries(files)
    total = 0
    for path in files:
        records, problem = _walk_tfrecord(path)
        entry, manifest = listed.get(path, ({}, ""))
        if problem is None and records != entry.get("records", records):
            problem = (
                f"cut short: it holds {records} records, {entry['records']} when it was written "
                f"({manifest})"
            )
        if problem is not None:
            raise ValueError(f"{what}: {path} is {problem}: write it again or leave it out")
        total += records
    return total


def find_unreadable_tfrecord(files: Sequence[str]) -> str | None:
    """The first of `files` TF cannot read, as ``"PATH (message)"`` (errors name none), or None."""
    tf = _tf()
    for path in files:
        try:
            for _ in tf.data.TFRecordDataset(path, buffer_size=1 << 20):
                pass
        except tf.errors.OpError as e:
            return f"{path} ({what_went_wrong(e)})"
    return None


def _files(pattern: str | Sequence[str], what: str) -> list[str]:
    patterns = [pattern] if isinstance(pattern, (str, os.PathLike)) else list(pattern)
    files = sorted(f for p in patterns for f in _glob.glob(os.fspath(p)))
    if not files:
        raise FileNotFoundError(
            f"{what}: no files match {patterns!r}; check the path and the glob pattern"
        )
    return files


def tfrecord_records(
    pattern: str | Sequence[str],
    *,
    shuffle_files: bool = False,
    seed: int | None = None,
    cycle_length: int | None = None,
    deterministic: bool | None = None,
):
    """Serialized records from TFRecord files matching `pattern`, files read in parallel.

    Raises:
        FileNotFoundError: the pattern matches no file."""
    tf = _tf()
    files = _files(pattern, "pattern")
    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_files:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    return ds.interleave(
        tf.data.TFRecordDataset,
        cycle_length=cycle_length or min(len(files), os.cpu_count() or 1),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )


def tfrecord_parser(feature_shape: Sequence[int]) -> Callable[[Any], Any]:
    """Parses a serialized record, or a batch at once, into ``(float32 features, int32 label)``."""
    tf = _tf()
    shape = tuple(int(d) for d in feature_shape)
    size = math.prod(shape)
    spec = {
        "features": tf.io.FixedLenFeature([size], tf.float32),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(serialized: Any) -> Any:
        if serialized.shape.rank == 0:
            parsed = tf.io.parse_single_example(serialized, spec)
            x = tf.reshape(parsed["features"], shape)
        else:
            parsed = tf.io.parse_example(serialized, spec)  # one op for the whole batch
            x = tf.reshape(parsed["features"], (-1, *shape))
        return x, tf.cast(parsed["label"], tf.int32)

    return parse


def tfrecords(
    pattern: str | Sequence[str],
    feature_shape: Sequence[int],
    *,
    shuffle_files: bool = False,
    seed: int | None = None,
    deterministic: bool | None = None,
):
    """Parsed ``(features, label)`` examples, one record at a time; to parse a batch in one op:
    ``pipeline(tfrecord_records(p), bs, batch_map=tfrecord_parser(shape))``."""
    tf = _tf()
    return tfrecord_records(
        pattern, shuffle_files=shuffle_files, seed=seed, deterministic=deterministic
    ).map(
        tfrecord_parser(feature_shape),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )
