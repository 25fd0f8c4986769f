"""The one training runner every recipe uses: device, strategy, data, compile, fit, report.

A recipe describes *what* to train as a :class:`Task` (model builder, loss, metrics, data);
:func:`run` decides *how*: it selects the device (``toolkit.devices``), runs the preflight
checks, builds the distribution strategy, sets the precision policy, builds the input pipeline
(``toolkit.data``, or synthetic data of the same spec), compiles under the strategy scope with
the chosen ``jit_compile`` and ``steps_per_execution``, fits with StepTimer (and MemoryWatch /
TraceWindow when asked), and writes a RunReport, also when ``fit`` raises or is interrupted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from toolkit import compat
from toolkit.distribute import STRATEGIES
from toolkit.profiling.session import profile
from toolkit.profiling.step_timer import DEFAULT_WARMUP_STEPS, FUSED_STEPS_ATTR
from toolkit.report import RunReport

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
SMOKE_STEPS = 8


class SetupError(ValueError):
    """A run that cannot start: a bad setting, a device that is not here, data too small.
    The message is one line saying what was wrong and what to do."""


@dataclasses.dataclass
class TrainConfig:
    """How to train. Every field is validated by :meth:`validate` with the flag's name."""

    epochs: int = 1
    batch_size: int = 32
    steps_per_execution: int = 1
    fused_steps: int = 1
    jit_compile: bool = False
    steps_per_epoch: int | None = None
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    profile_steps: tuple[int, int] | None = None
    memory_watch: bool = False
    report_dir: str | None = "runs"
    seed: int | None = 0
    verbose: int = 0
    device: str = "auto"
    precision: str = "float32"
    distribution_strategy: str = "default"
    use_synthetic_data: bool = False
    smoke: bool = False
    log_steps: int | None = None
    count_flops: bool = True
    worker_hosts: str | None = None
    task_index: int = 0
    shard_policy: str = "data"
    data_service: str | None = None
    data_service_mode: str = "parallel_epochs"
    backup_dir: str | None = None

    def validate(self) -> TrainConfig:
        """Raises ValueError naming the first bad setting and what it must be."""
        positive = ("epochs", "batch_size", "steps_per_execution", "fused_steps")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name} must be an integer >= 1, got {value!r}")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise ValueError(f"--train_steps must be >= 1, got {self.steps_per_epoch!r}")
        if self.steps_per_epoch is not None and self.steps_per_epoch % self.fused_steps:
            raise ValueError(
                f"--train_steps={self.steps_per_epoch} must be a multiple of "
                f"--fused_steps={self.fused_steps}"
            )
        if self.log_steps is not None and self.log_steps < 1:
            raise ValueError(f"--log_steps must be >= 1, got {self.log_steps!r}")
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
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"--dtype must be one of {', '.join(PRECISIONS)}, got {self.precision!r}"
            )
        if self.distribution_strategy not in STRATEGIES:
            raise ValueError(
                f"--distribution_strategy must be one of {', '.join(STRATEGIES)}, "
                f"got {self.distribution_strategy!r}"
            )
        from toolkit import distribute
        from toolkit.devices import parse_device_spec

        parse_device_spec(self.device)  # DeviceError (a ValueError) naming the device
        if self.shard_policy not in distribute.SHARD_POLICIES:
            raise ValueError(
                f"--shard_policy must be one of {', '.join(distribute.SHARD_POLICIES)}, "
                f"got {self.shard_policy!r}"
            )
        if self.data_service is not None:
            distribute.service_address(self.data_service)
        if self.data_service_mode not in distribute.SERVICE_MODES:
            raise ValueError(
                f"--data_service_mode must be one of {', '.join(distribute.SERVICE_MODES)}, "
                f"got {self.data_service_mode!r}"
            )
        if self.worker_hosts:
            distribute.tf_config(self.worker_hosts.split(","), self.task_index)
        return self

    def for_measurement(self, steps: int, warmup_steps: int) -> TrainConfig:
        """This config as a short, quiet measurement run (diagnose, tune): one epoch of
        `steps` steps with `warmup_steps` left out, and no report, trace, memory watch, FLOP
        count, smoke shrinking, logging or backup (a measurement must not resume a run)."""
        return dataclasses.replace(
            self,
            epochs=1,
            steps_per_epoch=steps,
            warmup_steps=warmup_steps,
            report_dir=None,
            count_flops=False,
            smoke=False,
            profile_steps=None,
            memory_watch=False,
            log_steps=None,
            verbose=0,
            backup_dir=None,
        )

    def effective(self) -> TrainConfig:
        """The config a run really uses: ``smoke`` shrinks it to a seconds-long run."""
        if not self.smoke:
            return self
        steps = min(self.steps_per_epoch or SMOKE_STEPS, SMOKE_STEPS)
        return dataclasses.replace(
            self,
            epochs=1,
            steps_per_epoch=-(-steps // self.fused_steps) * self.fused_steps,  # whole calls
            warmup_steps=min(self.warmup_steps, 1),
            profile_steps=None,
        )


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


def classification_task(
    name: str,
    data: Any,
    build_model: Callable[[int], Any],
    learning_rate: float = 1e-3,
) -> Task:
    """A Task for a classifier with integer labels and logits out, on a
    ``toolkit.data.catalog.Data``: sparse categorical cross-entropy, accuracy, Adam.

    `build_model` receives the number of classes; keep its last layer float32.
    """
    keras = compat.keras()
    return Task(
        name=name,
        build_model=lambda: build_model(data.num_classes),
        train=data.train,
        validation=data.validation,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        optimizer=lambda: keras.optimizers.Adam(learning_rate),
        num_classes=data.num_classes,
        cache=data.cache,
        dataset=data.description,
    )


@dataclasses.dataclass
class RunResult:
    """What :func:`run` returns."""

    report: RunReport
    paths: dict[str, str]
    run_dir: str | None
    model: Any
    history: Any


def examples(source: Any):
    """A Task's data (arrays, a dataset, or a function returning either) as a dataset of
    single examples."""
    from toolkit.data import from_arrays

    if callable(source):
        source = source()
    return from_arrays(*source) if isinstance(source, tuple) else source


def _dataset(source: Any, config: TrainConfig, training: bool, task: Task | None = None):
    from toolkit.data import pipeline, synthetic

    source = examples(source)
    count = int(source.cardinality())
    # Fused steps read fused_steps batches at once (one Keras batch), split inside the step.
    batch_size = config.batch_size * (config.fused_steps if training else 1)
    if training and 0 <= count < batch_size:
        # drop_remainder would leave no batch at all; Keras would fail obscurely.
        fused = f" × --fused_steps={config.fused_steps}" if config.fused_steps > 1 else ""
        raise ValueError(
            f"--batch_size={config.batch_size}{fused} is larger than the {count} training "
            "examples: lower it"
        )
    if training and config.use_synthetic_data:
        # One random batch of the real spec, repeated: the input costs ~nothing, so the step
        # time is an upper bound for what this model can do here.
        if count < 0 and config.steps_per_epoch is None:
            # Synthetic data repeats; without a known epoch length fit would never end.
            raise ValueError(
                "--use_synthetic_data: the training data's length is unknown, so an epoch "
                "would never end; give --train_steps"
            )
        features, labels = source.element_spec
        batches = max(1, count // batch_size) if count > 0 else None
        return _distributed(
            synthetic(
                features,
                labels,
                num_classes=(task.num_classes if task else None) or 2,
                num_examples=None if config.steps_per_epoch else batches,
                batch_size=batch_size,
                seed=config.seed or 0,
            ),
            config,
            training,
        )
    built = pipeline(
        source,
        batch_size,
        cache=bool(task and task.cache),
        shuffle=training,
        seed=config.seed,
        # Validation keeps its last partial batch: every example counts in the metrics.
        drop_remainder=training,
        repeat=training and config.steps_per_epoch is not None,
    )
    return _distributed(built, config, training)


def _distributed(dataset: Any, config: TrainConfig, training: bool) -> Any:
    """The training data through the tf.data service when asked, and every dataset with its
    auto-shard policy set explicitly."""
    from toolkit import distribute

    if training and config.data_service:
        dataset = distribute.through_data_service(
            dataset, config.data_service, config.data_service_mode
        )
    return distribute.shard(dataset, config.shard_policy)


def input_pipeline(task: Task, config: TrainConfig) -> Any:
    """The training input pipeline :func:`run` builds for `task` under `config`: batched
    (``fused_steps × batch_size`` with fused steps), shuffled, prefetched."""
    return _dataset(task.train, config.validate().effective(), training=True, task=task)


def resume_recorder(extra: dict[str, Any], backup_dir: str) -> Any:
    """A callback, placed after ``BackupAndRestore``, that records in ``extra["resume"]``
    whether the run resumed from a backup and from where: the optimizer's step count right
    after the restore (read once, at the start) and the first epoch this process ran."""
    keras = compat.keras()

    class ResumeRecorder(keras.callbacks.Callback):
        def _steps(self) -> int:
            return int(self.model.optimizer.iterations.numpy())

        def on_train_begin(self, logs: Any = None) -> None:
            done = self._steps()
            extra["resume"] = {
                "backup_dir": backup_dir,
                "resumed": done > 0,
                "steps_before": done,
                "from_epoch": None,
            }

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            if extra["resume"]["from_epoch"] is None:
                extra["resume"]["from_epoch"] = epoch

        def on_train_end(self, logs: Any = None) -> None:
            extra["resume"]["steps_total"] = self._steps()

    return ResumeRecorder()


def fuse_train_steps(model: Any, steps: int) -> None:
    """Makes each Keras training batch run `steps` training steps inside one compiled call.

    The model's ``train_step`` (the one Keras compiles, with ``jit_compile`` as one XLA
    program) receives a batch of ``steps × batch_size`` examples, splits it into `steps`
    batches and runs the original ``train_step`` on each in a ``tf.while_loop``: forward,
    backward, optimizer update and metrics, `steps` times, with no return to the host in
    between. ``steps_per_execution`` still loops *around* the compiled step, in the TF
    runtime, paying a launch, an iterator read and a few control ops per step; this loop
    pays them once per `steps`. Logs are those of the last step (metrics accumulate as
    usual). Call it after ``compile``; StepTimer counts `steps` steps per batch.
    """
    import tensorflow as tf

    if steps < 1:
        raise ValueError(f"--fused_steps must be >= 1, got {steps}")
    setattr(model, FUSED_STEPS_ATTR, steps)
    if steps == 1:
        return
    original = model.train_step

    def split(t: Any) -> Any:
        if t is None:
            return None
        n = t.shape[0]
        return tf.reshape(t, (steps, n // steps if n is not None else -1, *t.shape[1:]))

    def fused_train_step(data: Any) -> Any:
        batches = tf.nest.map_structure(split, data)

        def step(i: Any) -> Any:
            return original(tf.nest.map_structure(lambda t: None if t is None else t[i], batches))

        # The first step outside the loop creates any lazily built state (optimizer slots,
        # metric variables): variables can't be created inside a while loop.
        first = step(0)
        _, logs = tf.while_loop(
            lambda i, _: i < steps, lambda i, _: (i + 1, step(i)), (tf.constant(1), first)
        )
        return logs

    model.train_step = fused_train_step


@contextlib.contextmanager
def precision_policy(name: str) -> Iterator[None]:
    """Keras's global mixed-precision policy for the block, restored afterwards."""
    keras = compat.keras()
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def setup_device(config: TrainConfig) -> tuple[Any, list[Any]]:
    """Selects `config`'s device (first: visible devices can't change once TensorFlow's
    runtime starts) and runs the preflight checks for its precision and XLA setting.

    Returns:
        ``(device, findings)``.

    Raises:
        SetupError: the device is not here (the message lists what is) or can't be selected.
    """
    from toolkit import devices

    try:
        device = devices.select(config.device)
        findings = devices.preflight(
            device, policy=config.precision, jit_compile=config.jit_compile
        )
    except ValueError as e:  # DeviceError
        raise SetupError(str(e)) from e
    return device, findings


def compute_facts(model: Any, batch_size: int, precision: str, device: Any) -> dict[str, Any]:
    """FLOPs per step of `model` at `batch_size` and the device's matmul peak in the compute
    dtype of `precision` (cached per machine), for the report's compute section."""
    from toolkit.profiling import flops

    count = flops.count_flops(model, batch_size)
    dtype = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}.get(precision, "float32")
    facts: dict[str, Any] = {
        "flops_per_step": count.train_step,
        "flops_forward": count.forward,
        "batch_size": batch_size,
        "method": count.method,
        "note": count.note,
        "peak_dtype": dtype,
    }
    if count.train_step is None:
        return facts
    try:
        peak = flops.matmul_peak(device, dtype)
    except Exception as e:  # noqa: BLE001 - MFU is a nicety; training goes on
        facts["note"] = f"no matmul peak: {type(e).__name__}: {e}"
        return facts
    facts["peak_flops_per_s"] = peak["flops_per_s"]
    facts["peak_source"] = peak["source"]
    return facts


def run(
    task: Task,
    config: TrainConfig,
    args: Mapping[str, Any] | None = None,
    callbacks: Sequence[Any] = (),
    extra: Mapping[str, Any] | None = None,
) -> RunResult:
    """Trains `task` as `config` says, with step-time profiling, and writes the report.

    Args:
        task: what to train.
        config: how to train.
        args: the flags/arguments to record in the report. Defaults to the config's fields.
        callbacks: more Keras callbacks, run after the profiling ones.
        extra: more facts for the report's ``extra`` (e.g. a ``diagnosis``).

    Returns:
        The report, the files written, the run directory, the trained model and the History.

    Raises:
        SetupError: a bad setting (naming the flag), a device that is not here (listing what
            is), or too little data, before anything trains.
    """
    from toolkit import distribute

    try:
        config = config.validate().effective()
        cluster = distribute.cluster_from_flags(config.worker_hosts, config.task_index)
        device, findings = setup_device(config)
        # Before any dataset: a multi-worker strategy configures collective ops at start-up.
        strategy = distribute.make_strategy(config.distribution_strategy, device)
        global_batch, per_replica = distribute.batch_sizes(
            config.batch_size, strategy.num_replicas_in_sync
        )
        train_ds = _dataset(task.train, config, training=True, task=task)
        val_ds = None
        if task.validation is not None:
            val_ds = _dataset(task.validation, config, training=False, task=task)
    except SetupError:
        raise
    except (ValueError, FileNotFoundError) as e:  # a bad setting, too little data
        raise SetupError(str(e)) from e
    keras = compat.keras()
    if config.seed is not None:
        keras.utils.set_random_seed(config.seed)
    report_dir = config.report_dir
    if report_dir and not cluster.is_chief:  # each worker reports; the chief's is the run's
        report_dir = os.path.join(report_dir, f"worker{cluster.task_index}")

    with precision_policy(config.precision), strategy.scope():
        model = task.build_model()
        optimizer = task.optimizer() if task.optimizer else keras.optimizers.Adam()
        model.compile(
            optimizer=optimizer,
            loss=task.loss,
            metrics=list(task.metrics),
            jit_compile=config.jit_compile,
            steps_per_execution=config.steps_per_execution,
        )
        fuse_train_steps(model, config.fused_steps)
    with profile(
        task.name,
        report_dir=report_dir,
        batch_size=config.batch_size,
        warmup_steps=config.warmup_steps,
        trace_steps=config.profile_steps,
        memory_watch=config.memory_watch,
        log_steps=config.log_steps,
        args=dict(args) if args is not None else dataclasses.asdict(config),
    ) as prof:
        prof.extra.update(
            device=device.to_dict(),
            precision=config.precision,
            strategy={
                "name": config.distribution_strategy,
                "replicas": strategy.num_replicas_in_sync,
                "global_batch": global_batch,
                "per_replica_batch": per_replica,
                "shard_policy": config.shard_policy,
                "data_service": config.data_service,
                "data_service_mode": config.data_service_mode if config.data_service else None,
            },
            cluster=cluster.to_dict(),
            synthetic_data=config.use_synthetic_data,
            smoke=config.smoke,
            preflight=[dataclasses.asdict(f) for f in findings],
        )
        if task.dataset:
            prof.extra["dataset"] = task.dataset
        prof.extra.update(extra or {})
        if config.count_flops:
            prof.compute = compute_facts(model, config.batch_size, config.precision, device)
        resilience = []
        if config.backup_dir:
            resilience = [
                keras.callbacks.BackupAndRestore(config.backup_dir),
                resume_recorder(prof.extra, config.backup_dir),
            ]
        history = model.fit(
            train_ds,
            epochs=config.epochs,
            steps_per_epoch=(
                config.steps_per_epoch // config.fused_steps if config.steps_per_epoch else None
            ),
            validation_data=val_ds,
            shuffle=False,  # the pipeline shuffles; Keras would only warn about a Dataset
            callbacks=[*resilience, *prof.callbacks, *callbacks],
            verbose=config.verbose,
        )
    return RunResult(prof.report, prof.paths, prof.run_dir, model, history)
