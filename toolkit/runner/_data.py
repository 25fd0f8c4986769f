"""The runner's data: batched per ``--data_loader``, split per process, the tf.data service."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from toolkit import distribute
from toolkit.runner.config import TrainConfig

if TYPE_CHECKING:
    from toolkit.runner.task import Task


def examples(source: Any):
    """A Task's data (arrays, a dataset, or a function returning either) as single examples."""
    from toolkit.data import from_arrays

    if callable(source):
        source = source()
    return from_arrays(*source) if isinstance(source, tuple) else source


def example_count(source: Any, known: int | None = None) -> int:
    """The examples held, without reading them; `known` where a dataset can't count them, or -1."""
    from toolkit.data.sources import array_examples

    if isinstance(source, tuple):
        return array_examples(*source)
    count = int(source.cardinality())
    return known if count < 0 and known is not None else count


def _random_access(source: Any, task: Task | None, training: bool, call: bool) -> Any:
    """The data as random-access examples (Grain's), None for tf.data; `call`: call a function."""
    from toolkit.data.arrays import ArraySource, ImageFiles

    if task is not None and task.examples is not None:
        found = task.examples(training)
        if found is not None:
            return found
    if callable(source) and call:
        source = source()
    if isinstance(source, tuple):
        return source if len(source) == 2 else None
    return source if isinstance(source, ArraySource | ImageFiles) else None


def data_loader(
    config: TrainConfig,
    source: Any = None,
    task: Task | None = None,
    training: bool = True,
) -> str:
    """``--data_loader`` resolved: ``tf_data``, ``grain`` (JAX/torch, random access), ``arrays``."""
    from toolkit import backend
    from toolkit.data._grain import has_grain
    from toolkit.data.arrays import has_tensorflow

    if config.data_loader == "grain":
        if config.data_service:
            raise ValueError(
                "--data_loader=grain: the tf.data service serves tf.data pipelines: "
                "--data_loader=tf_data, or leave out --data_service"
            )
        return "grain"
    if config.data_loader == "tf_data" or backend.name() == "tensorflow":
        return "tf_data" if has_tensorflow() else "arrays"
    readable = _random_access(source, task, training, call=False) is not None
    if has_grain() and not config.data_service and readable:
        return "grain"
    return "tf_data" if has_tensorflow() else "arrays"


def epoch_steps(data: Any) -> int | None:
    """``fit``'s steps per epoch of a toolkit Grain pipeline (Keras's adapter has none), or None."""
    if getattr(data, "endless", False) and "grain" in getattr(data, "description", ""):
        return len(data)
    return None


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What the data phase hands fit: batches, steps an epoch (None: the data's end), notes."""

    loader: str
    train: Any
    validation: Any
    train_steps: int | None
    validation_steps: int | None
    notes: tuple[tuple[str, str], ...]


def inputs(task: Task, config: TrainConfig, share: tuple[int, int, int]) -> Inputs:
    """The task's data as `config` says, this process's `share` of each batch, fit's steps."""
    notes: list[tuple[str, str]] = []
    loader = data_loader(config, task.train, task)
    train = dataset(
        task.train, config, training=True, task=task, share=share, notes=notes, loader=loader
    )
    validation = None
    if task.validation is not None:
        validation = dataset(task.validation, config, training=False, task=task, share=share)
    steps = config.steps_per_epoch // config.fused_steps if config.steps_per_epoch else None
    return Inputs(
        loader,
        train,
        validation,
        steps or epoch_steps(train),  # a Grain pipeline's epoch
        epoch_steps(validation),
        tuple(notes),
    )


def array_dataset(
    source: Any,
    config: TrainConfig,
    training: bool,
    task: Task | None,
    whole: bool,
    grain: bool = False,
    notes: list[tuple[str, str]] | None = None,
) -> Any:
    """:func:`_dataset` without tf.data: arrays or image files in batches, or a Grain pipeline."""
    import numpy as np

    from toolkit.data.arrays import ArraySource, ImageFiles, array_batches

    if isinstance(source, tuple) and len(source) == 2:
        source = ArraySource(np.asarray(source[0]), np.asarray(source[1]))
    if not isinstance(source, ArraySource | ImageFiles):
        raise ValueError(
            f"training data of type {type(source).__name__} needs TensorFlow (tf.data), which "
            "is not installed here: give (features, labels) arrays"
        )
    # Fused steps read fused_steps batches at once (one Keras batch), split inside the step.
    count = len(source)
    batch_size = config.batch_size * (config.fused_steps if training else 1)
    _check_enough(count, batch_size, config, training, task)
    _note_fused_leftover(count, config, training, whole, notes)
    if training and config.use_synthetic_data:
        x, y = source.take(np.arange(batch_size) % count)
        rng = np.random.default_rng(config.seed or 0)
        classes = (task.num_classes if task else None) or 2
        fake = ArraySource(
            rng.integers(0, classes, x.shape).astype(x.dtype)
            if np.issubdtype(x.dtype, np.integer)
            else rng.standard_normal(x.shape).astype(x.dtype),
            rng.integers(0, classes, y.shape).astype(y.dtype),
        )
        if grain:
            return _grain(fake, batch_size, False, None, True, max(1, count // batch_size))
        return array_batches(
            fake,
            batch_size,
            repeat=config.steps_per_epoch is not None,
            batches_per_epoch=max(1, count // batch_size),
        )
    if grain:
        return _grain(source, batch_size, training, config.seed, whole, None)
    return array_batches(
        source,
        batch_size,
        shuffle=training,
        seed=config.seed,
        drop_remainder=whole,
        repeat=training and config.steps_per_epoch is not None,
    )


def _grain(
    source: Any, batch_size: int, shuffle: bool, seed: int | None, whole: bool, per_epoch: Any
) -> Any:
    """A Grain pipeline the runner's ``fit`` reads: endless, ``len()`` steps an epoch."""
    from toolkit.data._grain import grain_pipeline

    return grain_pipeline(
        source,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        drop_remainder=whole,
        endless=True,
        batches_per_epoch=per_epoch,
        workers="auto",  # one thread beside a CPU step; beside a GPU's, measured (arrays: threads)
    )


def dataset(
    source: Any,
    config: TrainConfig,
    training: bool,
    task: Task | None = None,
    share: tuple[int, int, int] = (0, 1, 1),
    notes: list[tuple[str, str]] | None = None,
    loader: str | None = None,
):
    """`source` in batches as `config` says; with `share` ``(index, processes, devices)``, process
    `index`'s part of every global batch, laid out as the fused step reads it."""
    from toolkit.distribute.processes import process_slice

    index, processes, devices = share
    loader = loader or data_loader(config, source, task, training)
    return process_slice(
        batches(
            source,
            config,
            training,
            task,
            whole=training or processes > 1,
            loader=loader,
            notes=notes,
        ),
        index,
        processes,
        fused=config.fused_steps if training else 1,
        shards=devices,
    )


def batches(
    source: Any,
    config: TrainConfig,
    training: bool,
    task: Task | None,
    whole: bool,
    loader: str | None = None,
    notes: list[tuple[str, str]] | None = None,
):
    """`source` in batches by `loader` (None: :func:`data_loader`'s); whole ones only when `whole`.

    Raises:
        ValueError: data the loader cannot read, or too little of it for a batch."""
    loader = loader or data_loader(config, source, task, training)
    if loader == "grain":
        return _grain_batches(source, config, training, task, whole, notes)
    if callable(source):
        source = source()
    if loader == "arrays":
        return array_dataset(source, config, training, task, whole, notes=notes)
    return _tf_data_batches(source, config, training, task, whole, notes)


def _grain_batches(
    source: Any,
    config: TrainConfig,
    training: bool,
    task: Task | None,
    whole: bool,
    notes: list[tuple[str, str]] | None = None,
) -> Any:
    """A Grain pipeline of the data's random-access examples (Grain reads nothing else)."""
    readable = _random_access(source, task, training, call=True)
    if readable is None:
        raise ValueError(
            f"--data_loader=grain: {(task and task.dataset) or 'this data'} is read by "
            "tf.data only (a tfds or tfrecord dataset, or a tf.data.Dataset): "
            "--data_loader=tf_data"
        )
    return array_dataset(readable, config, training, task, whole, grain=True, notes=notes)


def _tf_data_batches(
    source: Any,
    config: TrainConfig,
    training: bool,
    task: Task | None,
    whole: bool,
    notes: list[tuple[str, str]] | None = None,
) -> Any:
    """A tf.data pipeline of `source` checked to hold a batch (or ``--use_synthetic_data``'s)."""
    from toolkit.data import pipeline

    if not isinstance(source, tuple):  # arrays stay arrays, batched by gathering (toolkit.data)
        source = examples(source)
    count = example_count(source, task.train_examples if training and task else None)
    batch_size = config.batch_size * (config.fused_steps if training else 1)
    _check_enough(count, batch_size, config, training, task)
    _note_fused_leftover(count, config, training, whole, notes)
    if training and config.use_synthetic_data:
        return _synthetic_batches(source, count, batch_size, config, task)
    built = pipeline(
        source,
        batch_size,
        cache=bool(task and task.cache),
        shuffle=training,
        seed=config.seed,
        drop_remainder=whole,  # validation keeps a partial batch, unless placed (split evenly)
        repeat=training and config.steps_per_epoch is not None,
    )
    return distributed(built, config, training)


def _note_fused_leftover(
    count: int,
    config: TrainConfig,
    training: bool,
    whole: bool,
    notes: list[tuple[str, str]] | None,
) -> None:
    """Notes what fused steps leave out of an epoch, never silently (not with ``--train_steps``)."""
    fused = config.fused_steps
    if notes is None or not training or not whole or fused <= 1 or count < 0:
        return
    if config.steps_per_epoch is not None or config.use_synthetic_data:
        return
    batches = count // config.batch_size
    trained = count // (config.batch_size * fused) * fused
    if trained < batches:
        notes.append(
            (
                f"--fused_steps={fused}: an epoch trains {trained} of its {batches} batches "
                f"of {config.batch_size} (whole fused steps of {fused} batches: the last "
                f"{batches - trained} are left out each epoch)",
                f"a --fused_steps that divides {batches}, or --train_steps, trains every batch",
            )
        )


class TooFewExamples(ValueError):
    """The training data holds fewer examples than one batch."""


def check_training_count(count: int, config: TrainConfig) -> None:
    """Raises ValueError (one line) when `count` training examples fill no batch (counted early)."""
    _check_enough(count, config.batch_size * config.fused_steps, config, True, None)


def _check_enough(
    count: int, batch_size: int, config: TrainConfig, training: bool, task: Task | None
) -> None:
    """Raises ValueError (one line) on no data or (training) under a batch; `count` < 0 passes."""
    if count == 0:  # an empty split or folder: no batch size would help
        what = "training" if training else "validation"
        raise ValueError(
            f"the {what} data has no examples ({(task and task.dataset) or 'the dataset'}): "
            "check the dataset and its split"
        )
    if training and 0 <= count < batch_size and not config.use_synthetic_data:
        # drop_remainder would leave no batch; synthetic batches take the data's shapes only.
        fused = f" × --fused_steps={config.fused_steps}" if config.fused_steps > 1 else ""
        raise TooFewExamples(
            f"--batch_size={config.batch_size}{fused} is larger than the {count} training "
            "examples: lower it (or measure on --use_synthetic_data)"
        )


def _synthetic_batches(
    source: Any, count: int, batch_size: int, config: TrainConfig, task: Task | None
) -> Any:
    """``--use_synthetic_data``: a random batch of the real spec, repeated (a speed upper bound)."""
    from toolkit.data import synthetic

    if count < 0 and config.steps_per_epoch is None:
        raise ValueError(
            "--use_synthetic_data: the training data's length is unknown, so an epoch "
            "would never end; give --train_steps"
        )
    features, labels = examples(source).element_spec
    per_epoch = max(1, count // batch_size) if count > 0 else None
    return distributed(
        synthetic(
            features,
            labels,
            num_classes=(task.num_classes if task else None) or 2,
            num_examples=None if config.steps_per_epoch else per_epoch,
            batch_size=batch_size,
            seed=config.seed or 0,
        ),
        config,
        training=True,
    )


def distributed(dataset: Any, config: TrainConfig, training: bool) -> Any:
    """The training data via the tf.data service if asked; every dataset's auto-shard policy set."""
    if training and config.data_service:
        dataset = distribute.through_data_service(
            dataset,
            config.data_service,
            config.data_service_mode,
            wait_s=config.data_service_wait,
        )
    return distribute.shard(dataset, config.shard_policy)


def input_pipeline(task: Task, config: TrainConfig) -> Any:
    """:func:`run`'s training pipeline for `task`: ``fused_steps × batch_size`` batches shuffled."""
    return dataset(task.train, config.validate().effective(), training=True, task=task)
