"""What a run trains: a :class:`Task` (model builder, loss, metrics, data), and the error of a
run that cannot start. Its own module so that the data step (``toolkit.runner._data``) and the
runner (``toolkit.runner.train``) both read it without needing each other.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from toolkit.core import compat

__all__ = ["SetupError", "Task", "classification_task"]


class SetupError(ValueError):
    """A run that cannot start: a bad setting, a device that is not here, data too small.
    The message is one line saying what was wrong and what to do."""


@dataclasses.dataclass
class Task:
    """What to train.

    Attributes:
        name: the run name in reports.
        build_model: returns an uncompiled Keras model (built under the strategy scope and
            the precision policy; keep its last layer float32 for mixed precision).
        train: ``(features, labels)`` arrays, a `tf.data.Dataset` of single examples, or a
            function returning either (called after the device is chosen: building a
            dataset starts TensorFlow's runtime, after which visible devices are fixed).
        loss: a Keras loss (object or name).
        validation: the same for validation, or None.
        metrics: Keras metrics.
        optimizer: returns a fresh optimizer. Defaults to Adam.
        num_classes: label classes, for synthetic labels. Defaults to `None` (2).
        cache: keep the examples in memory after the first epoch. Defaults to `False`.
        dataset: what the data is, for the report. Defaults to `None`.
        train_examples: the number of training examples where the dataset cannot say (a
            filtered one), for the checks before training. Defaults to `None`.
        find_bad_file: after training stopped on an error reading the data, the file it
            failed on as ``"PATH (why)"``, or None (``toolkit.data.catalog.Data``'s). Defaults
            to `None`.
        examples: ``examples(training)``: the training (True) or validation (False) data as
            random-access examples (``toolkit.data.catalog.Data``'s), what a Grain pipeline
            reads (``--data_loader``); None: Grain reads `train` / `validation` when they are
            arrays. Defaults to `None`.
    """

    name: str
    build_model: Callable[[], Any]
    train: Any
    loss: Any
    validation: Any = None
    metrics: Sequence[Any] = ()
    optimizer: Callable[[], Any] | None = None
    num_classes: int | None = None
    cache: bool = False
    dataset: str | None = None
    train_examples: int | None = None
    find_bad_file: Callable[[BaseException], str | None] | None = None
    examples: Callable[[bool], Any] | None = None


def classification_task(
    name: str,
    data: Any,
    build_model: Callable[[int], Any],
    learning_rate: float = 1e-3,
    decay_steps: int | None = None,
) -> Task:
    """A Task for a classifier with integer labels and logits out, on a
    ``toolkit.data.catalog.Data``: sparse categorical cross-entropy, accuracy, Adam.

    `build_model` receives the number of classes; keep its last layer float32. With
    `decay_steps`, the learning rate follows a cosine from `learning_rate` down to 1 % of it
    over that many steps (then stays there): the last epochs move the weights little, so
    the final accuracy is the converged one, not one point of a swing (batch norm's moving
    statistics lag weights that still move fast).
    """
    keras = compat.keras()

    def optimizer() -> Any:
        rate = learning_rate
        if decay_steps:
            rate = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps, alpha=0.01)
        return keras.optimizers.Adam(rate)

    return Task(
        name=name,
        build_model=lambda: build_model(data.num_classes),
        train=data.train,
        validation=data.validation,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        optimizer=optimizer,
        num_classes=data.num_classes,
        cache=data.cache,
        dataset=data.description,
        train_examples=data.train_examples,
        find_bad_file=data.find_bad_file,
        examples=data.examples,
    )


# What a run adds under its report directory: <timestamp>/<file> (the longest, with a worker's
# subdirectory and a trace's plugins/profile/<run>/<host>.xplane.pb, well under this).
RUN_SUFFIX_BYTES = 160


def _check_path_length(path: str, where: str, flag: str, given: str, instead: str) -> None:
    """The file system's limits, before anything trains: a name longer than a name can be
    there (ENAMETOOLONG once the run makes it), or a path its run's files would push past the
    longest path."""

    def limit(name: str, default: int) -> int:
        try:
            return int(os.pathconf(where if os.path.isdir(where) else os.path.dirname(where),
                                   name))  # fmt: skip
        except (OSError, ValueError):
            return default

    name_max = limit("PC_NAME_MAX", 255)
    for part in path.split(os.sep):
        size = len(os.fsencode(part))
        if size > name_max:
            raise SetupError(
                f"{flag}: the name {part[:16]}… is {size} bytes, more than the {name_max} a "
                f"file name can have here; choose a shorter name, {instead}"
            )
    path_max = limit("PC_PATH_MAX", 4096)
    if len(os.fsencode(path)) + RUN_SUFFIX_BYTES > path_max:
        raise SetupError(
            f"{flag}: the path is {len(os.fsencode(path))} bytes, and a run's files under it "
            f"would pass the {path_max} a path can have here; choose a shorter one, {instead}"
        )


def check_report_dir(
    report_dir: str | None,
    flag: str = "--report_dir",
    instead: str = "or --report_dir= to write nothing",
) -> None:
    """Raises SetupError (one line, naming `flag`, with `instead` as the other way out) when
    runs cannot be written under `report_dir` (or a backup under ``--backup_dir``): found
    before anything trains, not after.

    It makes nothing: a file with a unique name is created and removed again in the directory,
    or, when the directory is still missing, in its nearest existing ancestor (where the run
    will make it). So processes started together with one report directory (the workers of a
    cluster) cannot trip over each other's checks, and a run that fails before training leaves
    nothing behind.
    """
    if not report_dir:
        return
    path = os.path.abspath(os.path.expanduser(report_dir))
    if os.path.exists(path) and not os.path.isdir(path):
        raise SetupError(
            f"{flag}={report_dir}: it is a file, not a directory; choose a directory, {instead}"
        )
    where = path
    while not os.path.exists(where):
        if os.path.islink(where):  # a loop (ln -s loop loop), or a link to nowhere
            raise SetupError(
                f"{flag}={report_dir}: {where} is a symbolic link that leads nowhere (a loop, "
                f"or a place that is gone); choose a directory, {instead}"
            )
        where = os.path.dirname(where)
    _check_path_length(path, where, flag, report_dir, instead)
    try:
        if not os.path.isdir(where):
            raise NotADirectoryError(0, f"{where} is a file, not a directory")
        probe = tempfile.NamedTemporaryFile(dir=where, prefix=".write-test-")  # noqa: SIM115
        probe.close()
    except OSError as e:
        raise SetupError(
            f"{flag}={report_dir}: cannot write there ({e.strerror or e}); choose a "
            f"writable directory, {instead}"
        ) from None
