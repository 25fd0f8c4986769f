"""What a run trains (:class:`Task`) and why it cannot start: apart, so data and runner share it."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from toolkit.core import compat

__all__ = ["SetupError", "Task", "classification_task"]


class SetupError(ValueError):
    """A run that cannot start (bad setting, missing device, little data): one line, what to do."""


@dataclasses.dataclass
class Task:
    """What to train.

    Attributes:
        name: the run name in reports.
        build_model: returns an uncompiled model (last layer float32, for mixed precision).
        train: ``(x, y)`` arrays, a dataset of examples, or a function called after device choice.
        loss: a Keras loss (object or name).
        validation: the same for validation, or None.
        optimizer: returns a fresh optimizer (default: Adam).
        num_classes: label classes, for synthetic labels (default: 2).
        cache: keep the examples in memory after the first epoch.
        dataset: what the data is, for the report.
        train_examples: training examples where the dataset cannot say.
        find_bad_file: after reading failed, the file it failed on as ``"PATH (why)"``, or None.
        examples: ``examples(training)``: a split as random access, for Grain (None: arrays)."""

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
    """A Task for a logits classifier with integer labels on a ``toolkit.data.catalog.Data``.

    Sparse categorical cross-entropy, accuracy, Adam; `build_model(num_classes)`; `decay_steps`: a
    cosine decay to 1 % over them, so the final accuracy is the converged one."""
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


RUN_SUFFIX_BYTES = 160  # what a run adds under its report directory, with room to spare


def _check_path_length(path: str, where: str, flag: str, given: str, instead: str) -> None:
    """The file system's limits before anything trains: each name's, the path's plus a run's."""

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
    """Raises SetupError (one line, naming `flag`, with `instead`) if runs cannot be written there.

    Makes nothing: it probes with a unique temporary file, so concurrent workers never collide."""
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
