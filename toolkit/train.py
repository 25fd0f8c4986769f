"""The one training runner every recipe uses: data, compile, fit under the profiler, report.

A recipe describes *what* to train as a :class:`Task` (model builder, loss, metrics, data);
:func:`run` decides *how*: seeds, the input pipeline, ``compile`` with the chosen
``jit_compile`` and ``steps_per_execution``, ``fit`` with StepTimer (and MemoryWatch /
TraceWindow when asked), and a RunReport that is written even when ``fit`` raises or is
interrupted. Device selection, precision policies and distribution strategies plug in here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolkit import compat
from toolkit.profiling.session import profile
from toolkit.profiling.step_timer import DEFAULT_WARMUP_STEPS
from toolkit.report import RunReport


@dataclasses.dataclass
class TrainConfig:
    """How to train. Every field is validated by :meth:`validate` with the flag's name."""

    epochs: int = 1
    batch_size: int = 32
    steps_per_execution: int = 1
    jit_compile: bool = False
    steps_per_epoch: int | None = None
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    profile_steps: tuple[int, int] | None = None
    memory_watch: bool = False
    report_dir: str | None = "runs"
    seed: int | None = 0
    verbose: int = 0

    def validate(self) -> TrainConfig:
        """Raises ValueError naming the first bad setting and what it must be."""
        positive = ("epochs", "batch_size", "steps_per_execution")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name} must be an integer >= 1, got {value!r}")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise ValueError(f"--steps_per_epoch must be >= 1, got {self.steps_per_epoch!r}")
        if self.warmup_steps < 0:
            raise ValueError(f"--warmup_steps must be >= 0, got {self.warmup_steps!r}")
        if self.profile_steps is not None:
            start, stop = self.profile_steps
            if start < 0 or stop <= start:
                raise ValueError(
                    f"--profile_steps must be start,stop with 0 <= start < stop, got {start},{stop}"
                )
        if self.verbose not in (0, 1, 2):
            raise ValueError(f"--verbose must be 0, 1 or 2, got {self.verbose!r}")
        return self


@dataclasses.dataclass
class Task:
    """What to train.

    Attributes:
        name: the run name in reports.
        build_model: returns an uncompiled Keras model.
        train: ``(features, labels)`` arrays, or a `tf.data.Dataset` of single examples.
        validation: the same for validation, or None.
        loss: a Keras loss (object or name).
        metrics: Keras metrics.
        optimizer: returns a fresh optimizer. Defaults to Adam.
    """

    name: str
    build_model: Callable[[], Any]
    train: Any
    loss: Any
    validation: Any = None
    metrics: Sequence[Any] = ()
    optimizer: Callable[[], Any] | None = None


@dataclasses.dataclass
class RunResult:
    """What :func:`run` returns."""

    report: RunReport
    paths: dict[str, str]
    run_dir: str | None
    model: Any
    history: Any


def _dataset(source: Any, config: TrainConfig, training: bool):
    from toolkit.data import from_arrays, pipeline

    if isinstance(source, tuple):
        source = from_arrays(*source)
    examples = int(source.cardinality())
    if training and 0 <= examples < config.batch_size:
        # drop_remainder would leave no batch at all; Keras would fail obscurely.
        raise ValueError(
            f"--batch_size={config.batch_size} is larger than the {examples} training examples: "
            "lower --batch_size"
        )
    return pipeline(
        source,
        config.batch_size,
        shuffle=training,
        seed=config.seed,
        # Validation keeps its last partial batch: every example counts in the metrics.
        drop_remainder=training,
        repeat=training and config.steps_per_epoch is not None,
    )


def run(
    task: Task,
    config: TrainConfig,
    args: Mapping[str, Any] | None = None,
    callbacks: Sequence[Any] = (),
) -> RunResult:
    """Trains `task` as `config` says, with step-time profiling, and writes the report.

    Args:
        task: what to train.
        config: how to train.
        args: the flags/arguments to record in the report. Defaults to the config's fields.
        callbacks: more Keras callbacks, run after the profiling ones.

    Returns:
        The report, the files written, the run directory, the trained model and the History.
    """
    config.validate()
    keras = compat.keras()
    if config.seed is not None:
        keras.utils.set_random_seed(config.seed)
    train_ds = _dataset(task.train, config, training=True)
    val_ds = None
    if task.validation is not None:
        val_ds = _dataset(task.validation, config, training=False)

    model = task.build_model()
    optimizer = task.optimizer() if task.optimizer else keras.optimizers.Adam()
    model.compile(
        optimizer=optimizer,
        loss=task.loss,
        metrics=list(task.metrics),
        jit_compile=config.jit_compile,
        steps_per_execution=config.steps_per_execution,
    )
    with profile(
        task.name,
        report_dir=config.report_dir,
        batch_size=config.batch_size,
        warmup_steps=config.warmup_steps,
        trace_steps=config.profile_steps,
        memory_watch=config.memory_watch,
        args=dict(args) if args is not None else dataclasses.asdict(config),
    ) as prof:
        history = model.fit(
            train_ds,
            epochs=config.epochs,
            steps_per_epoch=config.steps_per_epoch,
            validation_data=val_ds,
            shuffle=False,  # the pipeline shuffles; Keras would only warn about a Dataset
            callbacks=[*prof.callbacks, *callbacks],
            verbose=config.verbose,
        )
    return RunResult(prof.report, prof.paths, prof.run_dir, model, history)
