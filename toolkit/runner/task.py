"""What a run trains (:class:`Task`), and the error of a run that cannot start: its own module,
so the data step and the runner both read it without needing each other."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from toolkit.core import compat

__all__ = ["SetupError", "Task", "classification_task"]


class SetupError(ValueError):
    """A run that cannot start: a bad setting, a device that is not here, data too small (one
    line saying what to do)."""


@dataclasses.dataclass
class Task:
    """What to train.

    Attributes:
        name: the run name in reports.
        build_model: returns an uncompiled Keras model (keep its last layer float32 for mixed
            precision).
        train: ``(features, labels)`` arrays, a `tf.data.Dataset` of single examples, or a function
            returning either (called after the device is chosen).
        loss: a Keras loss (object or name).
        validation: the same for validation, or None.
        metrics: Keras metrics.
        optimizer: returns a fresh optimizer (default: Adam).
        num_classes: label classes, for synthetic labels (default: 2).
        cache: keep the examples in memory after the first epoch.
        dataset: what the data is, for the report.
        train_examples: training examples where the dataset cannot say.
        find_bad_file: after reading failed, the file it failed on as ``"PATH (why)"``, or None.
        examples: ``examples(training)``: a split as random-access examples, what Grain reads; None:
            Grain reads `train` / `validation` when they are arrays."""

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

    `build_model` receives the number of classes. With `decay_steps`, the learning rate follows a
    cosine down to 1 % over that many steps, so the final accuracy is the converged one."""
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


# What a run adds under its report directory, well within this.
RUN_SUFFIX_BYTES = 160


def _check_path_length(path: str, where: str, flag: str, given: str, instead: str) -> None:
    """The file system's limits, before anything trains: a name too long, or a path the run's
    files would push past the longest path."""

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
    """Raises SetupError (one line, naming `flag`, with `instead`) when runs cannot be written
    under `report_dir`: found before anything trains.

    It makes nothing: a uniquely named file is created and removed in the directory, or in its
    nearest existing ancestor, so workers started together cannot trip over each other's checks."""
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
