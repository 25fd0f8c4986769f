"""The one runner of every recipe: :func:`run` trains a :class:`Task`, reporting even on failure."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from toolkit import backend, distribute
from toolkit.core import compat, files, progress
from toolkit.core._anatomy import Anatomy
from toolkit.core._device_types import Finding
from toolkit.profiling import flops
from toolkit.profiling._timing import LAUNCH, MODEL, SET_UP
from toolkit.profiling.resume_recorder import ResumeRecorder
from toolkit.report import RunReport
from toolkit.report._diagnosis import DiagnosisSection
from toolkit.report._tune import TuneSection
from toolkit.report.context import Resume, RunContext, Strategy
from toolkit.runner import _data
from toolkit.runner._data import input_pipeline
from toolkit.runner.config import TrainConfig
from toolkit.runner.session import profile
from toolkit.runner.task import SetupError, Task, check_report_dir, classification_task

__all__ = [  # for a recipe's author; input_pipeline: how other rooms build a task's data
    "RunResult",
    "SetupError",
    "Task",
    "classification_task",
    "input_pipeline",
    "run",
]


@dataclasses.dataclass
class RunResult:
    """What :func:`run` returns."""

    report: RunReport
    paths: dict[str, str]
    run_dir: str | None
    model: Any
    history: Any
    write_error: str | None = None  # why the report's files could not be written, if so
    train_data: Any = None  # the training dataset `fit` read (tune measures a model again on it)


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
    """Selects `config`'s device (first: TensorFlow fixes visible devices at start); runs preflight.

    Returns:
        ``(device, findings)``.

    Raises:
        SetupError: the device is not here (the message lists what is) or can't be selected."""
    from toolkit import devices

    try:
        device = devices.select(config.device)
        findings = devices.preflight(
            device, policy=config.precision, jit_compile=bool(config.jit_compile)
        )
    except ValueError as e:  # DeviceError
        raise SetupError(str(e)) from e
    return device, findings


def _is_hdf5(path: str) -> bool:
    """Whether `path` is HDF5; an unreadable one counts, so that the load says why."""
    try:
        import h5py

        return bool(h5py.is_hdf5(path))
    except (ImportError, OSError):
        return True


def share_initial_weights(model: Any, path: str) -> str:
    """Loads `path` into `model`, or first writes the model's initial weights there, atomically:
    runs sharing a path start alike on any backend. Returns ``"loaded"`` or ``"written"``.

    Raises:
        SetupError: the file holds another model's weights, or cannot be written."""
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(path):
        raise SetupError(f"--init_weights={path}: it is a directory, not a .weights.h5 file")
    if os.path.exists(path):
        if not _is_hdf5(path):
            raise SetupError(
                f"--init_weights={path}: it is not a Keras weights file (no HDF5 signature: "
                "damaged, empty or another format): delete it or give another path"
            )
        try:
            model.load_weights(path)
        except Exception as e:  # h5py, shape and name errors alike: one line
            raise SetupError(
                f"--init_weights={path}: cannot load it into this model ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}); it holds another model's "
                "weights: delete it or give another path"
            ) from e
        return "loaded"
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".init-", suffix=".weights.h5", dir=directory)
        os.close(fd)
        os.remove(tmp)  # Keras writes the file itself; an existing one would ask to overwrite
        model.save_weights(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise SetupError(f"--init_weights={path}: cannot write it ({e.strerror or e})") from e
    return "written"


def _jit_compile(value: bool | None) -> bool | str | None:
    """`--jit_compile` for ``compile``: None is Keras 3's ``"auto"``; tf_keras has none."""
    if value is None and compat.keras_flavor() == "keras3":
        return "auto"
    return value


LOG_LINES_PER_RUN = 10  # in a log, the default progress: about this many step-time lines
MIN_LOGGED_STEPS = 20  # shorter runs print only their summary


def _nice(n: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50... that is >= `n`."""
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale >= n:
                return m * scale
        scale *= 10


def _steps_per_epoch(config: TrainConfig, train_ds: Any) -> int | None:
    if config.steps_per_epoch:
        return config.steps_per_epoch
    try:
        count = int(train_ds.cardinality()) if hasattr(train_ds, "cardinality") else len(train_ds)
    except (TypeError, ValueError):
        return None
    return count * config.fused_steps if count > 0 else None  # a fused batch holds K steps


def fit_progress(
    config: TrainConfig, train_ds: Any, name: str
) -> tuple[int, int | None, list[Any]]:
    """``(verbose, log_steps, callbacks)``: Keras's own where ``verbose`` is set, else ours."""
    if config.verbose is not None:
        return config.verbose, config.log_steps, []
    shown = progress.mode()
    if shown == progress.BAR:
        from toolkit.profiling.fit_progress import FitProgress

        return 0, config.log_steps, [FitProgress(name)]
    if shown == progress.LINES and config.log_steps is None:
        per_epoch = _steps_per_epoch(config, train_ds)
        total = per_epoch * config.epochs if per_epoch else 0
        if total >= MIN_LOGGED_STEPS:
            return 0, _nice(total / LOG_LINES_PER_RUN), []
    return 0, config.log_steps, []


def run(
    task: Task,
    config: TrainConfig,
    args: Mapping[str, Any] | None = None,
    callbacks: Sequence[Any] = (),
    extra: Mapping[str, Any] | None = None,
    *,
    diagnosis: DiagnosisSection | None = None,
    tune: TuneSection | None = None,
    anatomy: Anatomy | None = None,
) -> RunResult:
    """Trains `task` as `config` says, with step-time profiling, and writes the report.

    Args:
        args: what to record in the report as the flags (default: the config's fields).
        callbacks: more Keras callbacks, run after the profiling ones.
        extra: free-form facts for the report's ``extra``.
        diagnosis: a ``Diagnosis.section()`` for the report.
        tune: a ``TuneResult.section()`` for the report.
        anatomy: the step taken apart, for the report's ``anatomy`` and ``anatomy.png``.

    Returns:
        The report, files written, run directory, trained model and History.

    Raises:
        SetupError: a bad setting, a missing device, or too little data, before anything trains."""
    # The process's stages, for the report's ``process``: (stage, its end, compile seconds).
    stages: list[tuple[str, float, float | None]] = [(LAUNCH, time.perf_counter(), None)]
    config, placed, data = _set_up(task, config)
    stages.append((SET_UP, time.perf_counter(), None))
    findings = [*placed.findings]
    for what, fix in data.notes:  # what the data leaves out: said, and in the report
        progress.say(f"note: {what}; {fix}")
        findings.append(Finding("warning", "fused_steps_remainder", what, fix))
    if config.seed is not None:
        compat.keras().utils.set_random_seed(config.seed)  # again: the data's setup drew from it
    if progress.mode() == progress.BAR:  # a terminal: no long silence before the first bar
        progress.say(f"{task.name}: data ready; building the model, then the first step compiles")
    model, build_compile_s = _compiled_model(task, config, placed.strategy)
    stages.append((MODEL, time.perf_counter(), build_compile_s))
    aside = _fused_aside(config, data.loader, model)
    if aside is not None:
        progress.say(f"note: {aside[0]}; {aside[1]}")
        findings.append(Finding("info", "fused_steps_not_needed", *aside))
    verbose, log_steps, shown = fit_progress(config, data.train, task.name)
    try:
        with _profiling(task, config, placed.cluster, args, log_steps, stages) as prof:
            resume = Resume(config.backup_dir) if config.backup_dir else None
            _describe(prof, _context(task, config, placed, findings, resume), extra, diagnosis,
                      tune)  # fmt: skip
            prof.anatomy = anatomy
            _count_flops(prof, model, config, placed.device)
            resilience = _resilience(resume, placed.share[0])
            fit_callbacks = [*resilience, *prof.callbacks, *shown, *callbacks]
            history = _fit(model, config, data, prof.timer, fit_callbacks, verbose)
            if prof.compute is not None:
                p50 = prof.timer.summary().p50_s
                prof.compute = flops.recheck_peak(prof.compute, p50, placed.device)
    except Exception as e:
        unreadable = _unreadable_file(task, e)
        if unreadable is None:
            raise
        raise unreadable from e
    return RunResult(
        prof.report, prof.paths, prof.run_dir, model, history, prof.write_error, data.train
    )


def _profiling(
    task: Task,
    config: TrainConfig,
    cluster: distribute.Cluster,
    args: Mapping[str, Any] | None,
    log_steps: int | None,
    stages: Sequence[tuple[str, float, float | None]],
) -> Any:
    """The run's profiling session (not entered), where this process reports, `stages` marked."""
    report_dir = config.report_dir
    if report_dir and not cluster.is_chief:  # each worker reports; the chief's is the run's
        report_dir = os.path.join(report_dir, f"worker{cluster.task_index}")
    prof = profile(
        task.name,
        report_dir=report_dir,
        batch_size=config.batch_size,
        warmup_steps=config.warmup_steps,
        trace_steps=config.profile_steps,
        tensorboard=config.tensorboard,
        log_steps=log_steps,
        stop_on_nan=config.stop_on_nan,
        args=dict(args) if args is not None else dataclasses.asdict(config),
    )
    for stage, at, compile_s in stages:
        prof.mark(stage, at, compile_s)
    return prof


def _describe(
    prof: Any,
    context: RunContext,
    extra: Mapping[str, Any] | None,
    diagnosis: DiagnosisSection | None,
    tune: TuneSection | None,
) -> None:
    """The report's account of the run, set before it trains (a report is written if fit fails)."""
    prof.context = context
    prof.extra.update(extra or {})
    prof.diagnosis = diagnosis
    prof.tune = tune


def _count_flops(prof: Any, model: Any, config: TrainConfig, device: Any) -> None:
    """With ``--count_flops``, the model's FLOPs per step and the device's peak into the report."""
    if not config.count_flops:
        return
    # --compile_cache: an uncached peak waits for fit (earlier ops would change compiled keys).
    prof.compute = flops.compute_facts(
        model,
        config.batch_size,
        config.precision,
        device,
        measure_peak=not config.compile_cache,
    )


def _fused_aside(config: TrainConfig, loader: str, model: Any) -> tuple[str, str] | None:
    """``(what, fix)`` where ``--fused_steps`` is set but Keras's own loop is as fast, else None."""
    if config.fused_steps <= 1 or config.distribution_strategy == "data_parallel":
        return None  # over processes, Keras's super-batch layout is not measured here
    seam = backend.get()
    if "fused_steps" in seam.step_loops(loader, model):
        return None
    k = config.fused_steps
    source = {"tf_data": "tf.data", "grain": "Grain"}.get(loader, loader)
    return (
        f"--fused_steps={k} is not needed here: Keras {compat.keras_version()} runs "
        f"--steps_per_execution={k} as one compiled loop itself, as fast from {source} "
        "(benchmarks/scan_vs_fused.py)",
        f"use --steps_per_execution={k} without --fused_steps: the same loop, Keras's own",
    )


def _fit(
    model: Any, config: TrainConfig, data: _data.Inputs, timer: Any, callbacks: list[Any],
    verbose: int,
) -> Any:  # fmt: skip
    """``model.fit`` on the set-up data, the whole call timed; returns its History."""
    with timer.around_fit():
        return model.fit(
            data.train,
            epochs=config.epochs,
            steps_per_epoch=data.train_steps,
            validation_data=data.validation,
            validation_steps=data.validation_steps,
            validation_freq=config.validation_freq,
            shuffle=False,  # the pipeline shuffles; Keras would only warn about a Dataset
            callbacks=callbacks,
            verbose=verbose,
        )


def _unreadable_file(task: Task, error: Exception) -> SetupError | None:
    """A one-line SetupError naming the data file `error` could not read, or None."""
    bad = task.find_bad_file(error) if task.find_bad_file is not None else None
    if bad is None:
        return None
    run_dir = getattr(error, "toolkit_run_dir", None)
    where = f" (the partial report is in {run_dir})" if run_dir else ""
    return SetupError(
        f"{task.dataset or 'the data'}: cannot read {bad}: remove or replace that file{where}"
    )


@dataclasses.dataclass(frozen=True)
class _Placement:
    """Where the run trains, settled before its data; `share`: this process's part of a batch."""

    cluster: distribute.Cluster
    device: Any
    findings: tuple[Any, ...]
    strategy: Any
    global_batch: int
    per_replica: int
    share: tuple[int, int, int]


def _set_up(task: Task, config: TrainConfig) -> tuple[TrainConfig, _Placement, _data.Inputs]:
    """Config (checked once, here), placement, then data, as frameworks need. Raises SetupError."""
    try:
        config = config.validate().effective()
        check_report_dir(config.report_dir)
        check_report_dir(config.backup_dir, "--backup_dir", "or leave --backup_dir out")
        backend.get().check_config(config)  # what this Keras backend cannot run: one line
        placed = _place(task, config)
        if config.seed is not None:
            # Before the data: its shuffle's seed pairs with the global one.
            compat.keras().utils.set_random_seed(config.seed)
        return config, placed, _data.inputs(task, config, placed.share)
    except SetupError:
        raise
    except (ValueError, FileNotFoundError) as e:  # a bad setting (ConfigError), too little data
        raise SetupError(str(e)) from e


def _place(task: Task, config: TrainConfig) -> _Placement:
    """The cluster started, device chosen and strategy made, before any dataset."""
    if config.compile_cache:  # before anything compiles (a command line set it earlier)
        backend.use_compile_cache()
    cluster = _start_cluster(task, config)
    device, findings = setup_device(config)
    strategy = distribute.make_strategy(
        config.distribution_strategy, device, cluster=cluster, cluster_wait=config.cluster_wait
    )
    global_batch, per_replica = distribute.batch_sizes(
        config.batch_size, strategy.num_replicas_in_sync
    )
    share = (0, 1, 1)
    if isinstance(strategy, distribute.ProcessStrategy):  # a keras.distribution
        share = (strategy.process_index, strategy.processes, strategy.num_replicas_in_sync)
    return _Placement(cluster, device, tuple(findings), strategy, global_batch, per_replica, share)


def _compiled_model(task: Task, config: TrainConfig, strategy: Any) -> tuple[Any, float | None]:
    """The task's model, built and compiled in scope and policy, and its compile seconds or None."""
    watch = backend.get().compile_watch(None, time.perf_counter)
    watch.start()
    try:
        model = _built(task, config, strategy)
    finally:
        watch.stop()
    timed = [e.seconds for e in watch.events if e.seconds is not None]
    return model, (sum(timed) if timed else None)


def _built(task: Task, config: TrainConfig, strategy: Any) -> Any:
    keras = compat.keras()
    with precision_policy(config.precision), strategy.scope():
        model = task.build_model()
        optimizer = task.optimizer() if task.optimizer else keras.optimizers.Adam()
        model.compile(
            optimizer=optimizer,
            loss=task.loss,
            metrics=list(task.metrics),
            jit_compile=_jit_compile(config.jit_compile),
            steps_per_execution=config.steps_per_execution,
        )
        backend.get().fuse_train_steps(model, config.fused_steps)
        if config.init_weights:
            share_initial_weights(model, config.init_weights)
    return model


def _context(
    task: Task, config: TrainConfig, placed: _Placement, findings: Sequence[Any],
    resume: Resume | None,
) -> RunContext:  # fmt: skip
    """The report's account of where and how the run trained."""
    processes = placed.share[1]
    return RunContext(
        device=placed.device,
        backend=backend.name(),
        precision=config.precision,
        strategy=Strategy(
            name=config.distribution_strategy,
            replicas=placed.strategy.num_replicas_in_sync,
            global_batch=placed.global_batch,
            per_replica_batch=placed.per_replica,
            processes=processes,
            per_process_batch=placed.global_batch // processes,
            shard_policy=config.shard_policy,
            data_service=config.data_service,
            data_service_mode=config.data_service_mode if config.data_service else None,
        ),
        cluster=placed.cluster,
        preflight=tuple(findings),
        dataset=task.dataset,
        synthetic_data=config.use_synthetic_data,
        smoke=config.smoke,
        resume=resume,
    )


def _resilience(resume: Resume | None, process_index: int) -> list[Any]:
    """``--backup_dir``'s callbacks: Keras's BackupAndRestore and the resume recorder."""
    if resume is None:
        return []
    keras = compat.keras()
    backups = [keras.callbacks.BackupAndRestore(resume.backup_dir)]
    if process_index > 0:
        # Every process restores from the chief's backup; saving is a collective all join, so the
        # others save into a scratch directory of their own.
        backups = [
            keras.callbacks.BackupAndRestore(
                resume.backup_dir, save_freq=2**62, delete_checkpoint=False
            ),
            keras.callbacks.BackupAndRestore(_scratch("toolkit-backup-")),
        ]
    return [*backups, ResumeRecorder(resume)]


def _scratch(prefix: str) -> str:
    """A private temporary directory removed at exit (or, if killed, by the next process)."""
    import atexit

    directory = files.scratch_dir(prefix)
    atexit.register(files.remove_scratch, directory)
    return directory


def _start_cluster(task: Task, config: TrainConfig) -> distribute.Cluster:
    """This process's cluster, started before anything asks for devices (data_parallel: Keras's)."""
    from toolkit.distribute import processes

    if config.distribution_strategy != processes.DATA_PARALLEL or compat.keras_flavor() == (
        "tf_keras"
    ):
        return distribute.cluster_from_flags(config.worker_hosts, config.task_index)
    cluster = processes.cluster(config.worker_hosts, config.task_index)
    if cluster.num_workers > 1 and config.seed is None:
        raise SetupError(
            "--seed: data_parallel over processes needs one seed on every process (the same "
            "initial weights and the same order of the data); give --seed=N"
        )
    if cluster.num_workers > 1 and config.data_service:
        raise SetupError(
            "--data_service: data_parallel over processes reads each process's slice of the "
            "local pipeline; drop --data_service (or use tf.distribute's multi_worker_mirrored "
            "under TF_USE_LEGACY_KERAS=1)"
        )
    agreed = {  # what must agree on every process (the join adds the hosts)
        "run": task.name,
        "backend": backend.name(),
        "batch_size": config.batch_size,
        "epochs": config.epochs,
        "train_steps": config.steps_per_epoch,
        "steps_per_execution": config.steps_per_execution,
        "fused_steps": config.fused_steps,
        "precision": config.precision,
        "seed": config.seed,
    }
    processes.start(cluster, agreed, config.cluster_wait or distribute.CLUSTER_WAIT_S)
    return cluster
