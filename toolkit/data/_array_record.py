"""ArrayRecord files, the random-access format Grain reads: written from arrays, read back as a
Grain pipeline's source (``pipeline(ArrayRecords(d), 64, loader="grain")``).

One record per example, in the arrays' order (consecutive runs per file, so batches match the
arrays'): its feature bytes, then its label's; dtypes, shapes and counts are kept once in
``<prefix>.array_record.json``. Read with ``np.frombuffer``, never pickle: a file from elsewhere
holds data, not code. Imports ``array_record`` only when files are written or opened."""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import os
import tempfile
from typing import Any

import numpy as np

from toolkit.core.errors import what_went_wrong
from toolkit.core.files import atomic_write, parse_json

FORMAT = "toolkit.data.write_array_records/1"
SIDECAR_SUFFIX = ".array_record.json"
GRAIN_EXTRA = "pip install 'keras-perf-toolkit[grain]'"
WRITER_OPTIONS = "group_size:1"  # one record per chunk: what random access (and Grain) needs


def _array_record() -> Any:
    """``array_record.python``'s module and data source, or ImportError in one line."""
    try:
        from array_record.python import array_record_data_source, array_record_module
    except ImportError:
        raise ImportError(
            f"ArrayRecord files need the array_record package, which is not installed: "
            f"{GRAIN_EXTRA}"
        ) from None
    return array_record_module, array_record_data_source


def _shard_name(prefix: str, shard: int, shards: int) -> str:
    return f"{prefix}-{shard:05d}-of-{shards:05d}.array_record"


def _fixed_shape(values: Any, name: str) -> np.ndarray:
    """`values` as one array of numbers, or ValueError naming what is wrong."""
    try:
        array = np.asarray(values)
    except ValueError:  # NumPy refuses ragged nested sequences
        array = np.asarray([None])
    if array.dtype == object:
        raise ValueError(
            f"{name}: each example must have the same shape (these are ragged): pad or resize "
            "them to one shape before writing"
        )
    if array.dtype.kind not in "biufc":
        raise ValueError(
            f"{name}: dtype {array.dtype} is not a number: ArrayRecord files here hold numeric "
            "arrays (encode strings as integers first)"
        )
    if array.ndim == 0:
        raise ValueError(f"{name}: one value, not examples: give an array of examples")
    return array


def write_array_records(
    directory: str | os.PathLike[str],
    features: Any,
    labels: Any,
    *,
    num_shards: int = 1,
    prefix: str = "data",
) -> list[str]:
    """Writes ``(features, label)`` pairs over `num_shards` ArrayRecord files, and their sidecar.

    Returns:
        The file paths written, ``<directory>/<prefix>-00000-of-00001.array_record`` ...

    Raises:
        ValueError: lengths that differ, ragged or non-numeric examples, a bad `num_shards`.
        ImportError: the ``[grain]`` extra is not installed."""
    features, labels = _fixed_shape(features, "features"), _fixed_shape(labels, "labels")
    count = len(features)
    if count != len(labels):
        raise ValueError(f"labels: got {len(labels)} labels for {count} examples; they must match")
    if count == 0:
        raise ValueError("features: no examples to write")
    if not 1 <= num_shards <= count:
        raise ValueError(f"num_shards: must be from 1 to the {count} examples, got {num_shards}")
    module, _ = _array_record()
    os.makedirs(directory, exist_ok=True)
    folder = os.fspath(directory)
    runs = np.array_split(np.arange(count), num_shards)
    paths, written = [], {}
    for shard, run in enumerate(runs):
        name = _shard_name(prefix, shard, num_shards)
        path = os.path.join(folder, name)
        handle, partial = tempfile.mkstemp(prefix=f".tmp-{name}-", dir=folder)
        os.close(handle)  # a name of this writer's own: two writers never share one
        try:
            writer = module.ArrayRecordWriter(partial, WRITER_OPTIONS)
            try:
                for i in run:
                    writer.write(np.ascontiguousarray(features[i]).tobytes() + labels[i].tobytes())
            finally:
                writer.close()
            os.replace(partial, path)  # never a half-written file under the final name
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise
        paths.append(path)
        written[name] = len(run)
    sidecar = {
        "format": FORMAT,
        "features": {"dtype": features.dtype.str, "shape": list(features.shape[1:])},
        "labels": {"dtype": labels.dtype.str, "shape": list(labels.shape[1:])},
        "files": written,
    }
    atomic_write(os.path.join(folder, prefix + SIDECAR_SUFFIX), json.dumps(sidecar, indent=1))
    return paths


class ArrayRecords:
    """ArrayRecord files written by :func:`write_array_records` as random-access examples
    (``self[i]``: ``(features, label)``; :meth:`take`: a batch in one read); it pickles.

    Args:
        directory: the folder of the files and their ``.array_record.json``.

    Raises:
        ValueError: the sidecar missing or damaged, a file missing or not holding what it lists.
        ImportError: the ``[grain]`` extra is not installed."""

    def __init__(self, directory: str | os.PathLike[str], prefix: str = "data") -> None:
        folder = os.fspath(directory)
        self.directory, self.prefix = folder, prefix
        sidecar = os.path.join(folder, prefix + SIDECAR_SUFFIX)
        if not os.path.isfile(sidecar):
            raise ValueError(
                f"directory: no {sidecar}: give the folder write_array_records wrote (and its "
                "prefix), or write the files again"
            )
        try:
            with open(sidecar, encoding="utf-8") as f:
                said = parse_json(f)
            if said["format"] != FORMAT:
                raise ValueError(f"format {said['format']!r}, not {FORMAT!r}")
            self.feature_dtype = np.dtype(said["features"]["dtype"])
            self.feature_shape = tuple(int(d) for d in said["features"]["shape"])
            self.label_dtype = np.dtype(said["labels"]["dtype"])
            self.label_shape = tuple(int(d) for d in said["labels"]["shape"])
            listed = {str(name): int(n) for name, n in said["files"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"directory: {sidecar} is damaged ({type(e).__name__}: {e}): write the files "
                "again with write_array_records"
            ) from None
        if not listed or any(d.kind not in "biufc" for d in (self.feature_dtype, self.label_dtype)):
            raise ValueError(
                f"directory: {sidecar} is damaged (no files, or a dtype that is not a number): "
                "write the files again with write_array_records"
            )
        module, sources = _array_record()
        self.paths = tuple(os.path.join(folder, name) for name in sorted(listed))
        self._feature_bytes = self.feature_dtype.itemsize * math.prod(self.feature_shape)
        self.record_bytes = self._feature_bytes + self.label_dtype.itemsize * math.prod(
            self.label_shape
        )
        counts = [listed[os.path.basename(p)] for p in self.paths]
        for path, expected in zip(self.paths, counts, strict=True):
            self._check_file(module, path, expected)
        self._ends = list(np.cumsum(counts))
        # Ranges given, the data source opens no file to count its records again.
        self._source = sources.ArrayRecordDataSource(
            [f"{p}[0:{n}]" for p, n in zip(self.paths, counts, strict=True)]
        )

    def _check_file(self, module: Any, path: str, expected: int) -> None:
        """`path` exists, holds the records the sidecar lists, and its first is of their size."""
        if not os.path.isfile(path):
            raise ValueError(f"directory: {path} is missing: write the files again")
        try:  # Riegeli's errors (a bad footer, a chunk's hash) come as RuntimeError
            reader = module.ArrayRecordReader(path, "readahead_buffer_size:0")
            try:
                if not reader.ok():  # a file cut short opens, not ok, with no records
                    raise RuntimeError("cut short, or not an ArrayRecord file")
                records = reader.num_records()
                first = reader.read([0])[0] if records else b""
            finally:
                with contextlib.suppress(RuntimeError):  # a bad file fails its close too
                    reader.close()
        except RuntimeError as e:
            why = what_went_wrong(e) or "cut short, or not an ArrayRecord file"
            raise ValueError(f"directory: {path} is damaged ({why}): write it again") from None
        if records != expected:
            raise ValueError(
                f"directory: {path} holds {records} records, {expected} when it was written "
                "(cut short or replaced): write it again"
            )
        if records:
            self._check_size(first, path, 0)

    def _check_size(self, record: bytes, path: str, position: int) -> None:
        if len(record) != self.record_bytes:
            raise ValueError(
                f"directory: {path} record {position} holds {len(record)} bytes, not the "
                f"{self.record_bytes} its sidecar says (a damaged file): write it again"
            )

    def _where(self, index: int) -> tuple[str, int]:
        """The file and position of example `index`."""
        shard = bisect.bisect_right(self._ends, index)
        return self.paths[shard], index - (self._ends[shard - 1] if shard else 0)

    def _read(self, indices: list[int]) -> list[bytes]:
        try:
            # One record: read directly (a batch read starts a thread pool per call).
            records = (
                [self._source[indices[0]]]
                if len(indices) == 1
                else self._source.__getitems__(indices)
            )
        except RuntimeError as e:  # Riegeli's checksum caught damaged bytes
            raise ValueError(
                f"directory: {self._damaged(indices)} is damaged ({what_went_wrong(e)}): "
                "write it again"
            ) from None
        for index, record in zip(indices, records, strict=True):
            if len(record) != self.record_bytes:
                self._check_size(record, *self._where(index))
        return records

    def _damaged(self, indices: list[int]) -> str:
        """The file whose record failed to read, by reading the records again one at a time."""
        for index in indices:
            try:
                self._source[index]
            except RuntimeError:
                return self._where(index)[0]
        return f"a file in {self.directory}"

    def __len__(self) -> int:
        return int(self._ends[-1])

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} is outside the {len(self)} examples")
        return self._decode(self._read([index])[0])

    def _decode(self, record: bytes) -> tuple[np.ndarray, np.ndarray]:
        # A writable copy, as arrays and image files give: a map may change it in place.
        data = bytearray(record)
        x = np.frombuffer(data, self.feature_dtype, math.prod(self.feature_shape))
        y = np.frombuffer(data, self.label_dtype, offset=self._feature_bytes)
        return x.reshape(self.feature_shape), y.reshape(self.label_shape)

    def take(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """The examples at `indices`, one batch: one read of every record, decoded as two arrays."""
        keys = [int(i) for i in np.asarray(indices).reshape(-1)]
        if any(not 0 <= i < len(self) for i in keys):
            raise IndexError(f"indices: outside the {len(self)} examples")
        if not keys:
            x, y = self._decode(bytes(self.record_bytes))
            return np.empty((0, *x.shape), x.dtype), np.empty((0, *y.shape), y.dtype)
        rows = np.frombuffer(b"".join(self._read(keys)), np.uint8).reshape(len(keys), -1)
        x = rows[:, : self._feature_bytes].copy().view(self.feature_dtype)
        y = rows[:, self._feature_bytes :].copy().view(self.label_dtype)
        return x.reshape(len(keys), *self.feature_shape), y.reshape(len(keys), *self.label_shape)

    def element_shape(self) -> tuple[int, ...]:
        """The shape of one example's features."""
        return self.feature_shape

    def __repr__(self) -> str:
        return f"ArrayRecords({getattr(self, 'directory', '?')!r}, prefix={self.prefix!r})"
