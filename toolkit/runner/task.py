"""What a run trains: a :class:`Task` (model builder, loss, metrics, data), and the error of a
run that cannot start. Its own module so that the data step (``toolkit.runner._data``) and the
runner (``toolkit.runner.train``) both read it without needing each other.
"""

from __future__ import annotations

import dataclasses
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
