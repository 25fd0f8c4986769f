"""TrainConfig: how to train, and the one validator of every setting.

The command line (``toolkit.flags``) and the Python API build the same :class:`TrainConfig`,
and both get the same checks from :meth:`TrainConfig.validate`, whose messages name the flag
(``--train_steps``) and, where the Python field is called differently, the field too
(``--train_steps (steps_per_epoch) must be >= 1, got 0``). The flags define no bounds of their
own, so a bad value reads the same from a recipe, ``python -m toolkit tune`` or a notebook.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

from absl import logging

from toolkit import backend, distribute
from toolkit.devices import parse_device_spec
from toolkit.profiling.stats import DEFAULT_WARMUP_STEPS, whole_calls

__all__ = ["PRECISIONS", "SMOKE_STEPS", "ConfigError", "TrainConfig", "flag_name"]

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
SMOKE_STEPS = 8
# Python field -> flag, where they differ.
_FLAGS = {"steps_per_epoch": "train_steps", "verbose": "log_verbosity"}


class ConfigError(ValueError):
    """A setting that cannot work: one line naming the flag (and field), the value, and what
    it must be."""


def flag_name(field: str) -> str:
    """``--train_steps (steps_per_epoch)`` for a field whose flag is named differently, else
    ``--batch_size``."""
    flag = _FLAGS.get(field)
    return f"--{flag} ({field})" if flag else f"--{field}"


def _bad(field: str, what: str, value: Any) -> ConfigError:
    return ConfigError(f"{flag_name(field)} must be {what}, got {value!r}")


@dataclasses.dataclass
class TrainConfig:
    """How to train. :meth:`validate` checks every field (the runner calls it)."""

    epochs: int = 1
    batch_size: int = 32
    steps_per_execution: int = 1
    fused_steps: int = 1
    jit_compile: bool | None = None  # None: Keras's "auto" (XLA on JAX; off on a TF CPU, torch)
    compile_cache: bool = False  # compiled programs kept on disk for the next run
    steps_per_epoch: int | None = None
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    profile_steps: tuple[int, int] | None = None
    memory_watch: bool = False
    tensorboard: bool = False
    report_dir: str | None = "runs"
    seed: int | None = 0
    verbose: int | None = None  # None: the toolkit's progress (toolkit.progress)
    device: str = "auto"
    precision: str = "float32"
    distribution_strategy: str = "default"
    use_synthetic_data: bool = False
    smoke: bool = False
    log_steps: int | None = None
    stop_on_nan: bool = True
    count_flops: bool = True
    worker_hosts: str | None = None
    task_index: int = 0
    cluster_wait: float = distribute.CLUSTER_WAIT_S  # seconds; 0: TensorFlow's own wait
    shard_policy: str = "data"
    data_service: str | None = None
    data_service_mode: str = "parallel_epochs"
    backup_dir: str | None = None
    backend: str | None = None  # None: the one Keras trains on (toolkit.backend.name())
    init_weights: str | None = None  # a .weights.h5 to start from (written first if missing)

    def validate(self) -> TrainConfig:
        """Returns self, or raises ConfigError naming the first bad setting and what it must
        be."""
        for name in ("epochs", "batch_size", "steps_per_execution", "fused_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _bad(name, "an integer >= 1", value)
        for name in ("steps_per_epoch", "log_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise _bad(name, ">= 1", value)
        if self.steps_per_epoch is not None and self.steps_per_epoch % self.fused_steps:
            raise ConfigError(
                f"--train_steps={self.steps_per_epoch} must be a multiple of "
                f"--fused_steps={self.fused_steps}"
            )
        for name in ("warmup_steps", "task_index"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise _bad(name, ">= 0", value)
        wait = self.cluster_wait
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:
            raise _bad("cluster_wait", "a number of seconds >= 0 (0: TensorFlow's own wait)", wait)
        if self.profile_steps is not None:
            start, stop = self.profile_steps
            if start < 0 or stop <= start:
                raise ConfigError(
                    f"--profile_steps must be start,stop with 0 <= start < stop, got {start},{stop}"
                )
        if self.tensorboard and not self.report_dir:
            raise ConfigError(
                "--tensorboard writes into the run's directory: give --report_dir "
                "(TensorBoard then reads <report_dir>)"
            )
        if self.tensorboard and importlib.util.find_spec("tensorboard") is None:
            raise ConfigError(
                "--tensorboard needs TensorBoard, which the base install leaves out: "
                "pip install 'keras-perf-toolkit[profile]'"
            )
        if self.verbose not in (None, 0, 1, 2):
            raise _bad("verbose", "0, 1 or 2 (or unset: the toolkit's progress)", self.verbose)
        choices = (
            ("precision", PRECISIONS),
            ("distribution_strategy", distribute.STRATEGIES),
            ("shard_policy", distribute.SHARD_POLICIES),
            ("data_service_mode", distribute.SERVICE_MODES),
        )
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                raise _bad(name, f"one of {', '.join(allowed)}", getattr(self, name))
        if self.backend is not None and self.backend not in backend.BACKENDS:
            raise _bad("backend", f"one of {', '.join(backend.BACKENDS)}", self.backend)
        if self.backend is not None and self.backend != backend.name():
            raise ConfigError(
                f"--backend={self.backend}: Keras trains on {backend.name()} in this process; "
                "give --backend on the command line, or set KERAS_BACKEND before importing Keras"
            )
        weights = self.init_weights
        if weights is not None and not str(weights).endswith(".weights.h5"):
            raise _bad("init_weights", "a Keras weights file ending in .weights.h5", weights)
        try:
            parse_device_spec(self.device)
            if self.data_service is not None:
                distribute.service_address(self.data_service)
            if self.worker_hosts:
                distribute.tf_config(self.worker_hosts.split(","), self.task_index)
        except ValueError as e:  # DeviceError, DistributeError: already one line with the flag
            raise ConfigError(str(e)) from None
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
            tensorboard=False,
            log_steps=None,
            verbose=0,
            backup_dir=None,
        )

    def effective(self) -> TrainConfig:
        """The config a run really uses: ``smoke`` shrinks it to a seconds-long run."""
        if not self.smoke:
            return self
        steps = min(self.steps_per_epoch or SMOKE_STEPS, SMOKE_STEPS)
        steps = whole_calls(steps, self.fused_steps)
        window = self.profile_steps
        if window is not None:  # kept where it fits the smoke run, never dropped silently
            start, stop = window
            if start >= steps:
                logging.warning(
                    "--smoke: --profile_steps=%d,%d starts after the smoke run's %d steps: "
                    "no trace (run without --smoke, or trace earlier steps)",
                    start,
                    stop,
                    steps,
                )
                window = None
            elif stop > steps:
                logging.warning(
                    "--smoke: --profile_steps=%d,%d traced as %d,%d (a smoke run has %d steps)",
                    start,
                    stop,
                    start,
                    steps,
                    steps,
                )
                window = (start, steps)
        return dataclasses.replace(
            self,
            epochs=1,
            steps_per_epoch=steps,
            warmup_steps=min(self.warmup_steps, 1),
            profile_steps=window,
        )
