"""What the three backend modules share: the seam's contract (:data:`SEAM`), the matmul peak's
timing protocol, and for JAX and PyTorch the one-step-per-batch step and the settings only
TensorFlow runs. Imports no framework."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from toolkit.core.events import FUSED_STEPS_ATTR
from toolkit.core.stats import MatmulRun

if TYPE_CHECKING:
    from toolkit.core._advice import Advice
    from toolkit.core._anatomy import StepTrace
    from toolkit.core._device_types import DeviceInfo, Finding, PlacementReport, PreflightContext

MB = 1024.0 * 1024.0


class Seam(Protocol):
    """The functions every backend module implements: the seam's contract, as a type.
    :func:`toolkit.backend.get` returns the module as a ``Seam`` (one by its functions, PEP 544), so
    a type checker sees every call; a missing function fails at first import, named."""

    # devices: toolkit.devices asks these (each module's devices.py)
    def apple_gpu_path(self) -> tuple[str, str, str]: ...
    def augmentation_scope(self, device: DeviceInfo | None) -> AbstractContextManager[Any]: ...
    def detect_devices(self) -> list[DeviceInfo]: ...
    def device_scope(self, device: DeviceInfo) -> AbstractContextManager[Any]: ...
    def framework_device(self, device: DeviceInfo) -> Any: ...
    def placement(
        self, fn: Callable[..., Any], args: Any, kwargs: Any, gpu_selected: bool | None
    ) -> PlacementReport: ...
    def preflight(self, device: DeviceInfo, context: PreflightContext) -> list[Finding]: ...
    def reaches_apple_gpu(self) -> bool: ...
    def select_device(self, device: DeviceInfo, memory_growth: bool) -> None: ...
    def visible_devices(self) -> list[DeviceInfo]: ...
    def why_no_device(self, kind: str) -> str | None: ...

    # how it trains: what the search's advice, StepTimer and toolkit.distribute ask
    def dispatches_asynchronously(self) -> bool: ...
    def jit_advice(self) -> Advice | None: ...
    def loop_advice(self, fused: bool = True) -> Advice: ...
    def trains_under_tf_distribute(self) -> bool: ...

    # measuring
    def check_config(self, config: Any) -> None: ...
    def compile_watch(self, model: Any, clock: Callable[[], float]) -> CompileWatch: ...
    def count_flops(
        self, model: Any, batch_size: int
    ) -> tuple[int | None, int | None, str, str | None]: ...
    def data_parallel(self) -> tuple[Any, int]: ...
    def device_memory(self, reset_peak: bool = False) -> dict[str, dict[str, float]]: ...
    def device_memory_limit(self) -> dict[str, float]: ...
    def fit_batches(
        self, model: Any, fit_data: dict[str, Any]
    ) -> tuple[str, Iterator[Any]] | None: ...
    def float32_matmul_precision(self) -> str: ...
    def framework_facts(self) -> dict[str, Any]: ...
    def fuse_train_steps(self, model: Any, steps: int) -> None: ...
    def gather_processes(self, values: list[float]) -> list[list[float]]: ...
    def intra_op_threads(self) -> int: ...
    def measure_matmul_peak(
        self, device: Any, dtype: str = "float32", size: int = 2048, seconds: float = 0.15
    ) -> MatmulRun: ...
    def anatomy_refusal(self, model: Any) -> str | None: ...
    def anatomy_trace(self, files: list[str]) -> StepTrace: ...
    def layer_alone(
        self,
        layer: Any,
        inputs: Sequence[tuple[tuple[int, ...], str]],
        *,
        backward: bool = True,
        jit: bool = ...,
        input_grads: bool = True,
    ) -> Any: ...
    def layer_scope(self, token: str) -> Any: ...
    def live_tensors(self, cheap_only: bool = False) -> tuple[list[Any], str, bool]: ...
    def mark_input(self, model: Any) -> AbstractContextManager[Any]: ...
    def raw_step(self, model: Any, batch: Any, per_call: int = 1) -> tuple[Any, str]: ...
    def private_caches(self) -> str | None: ...
    def processes(self) -> tuple[int, int]: ...
    def profiler_probe(self) -> Any: ...
    def quiet_retracing(self) -> AbstractContextManager[None]: ...
    def searched_jit(self) -> tuple[bool, ...]: ...
    def start_processes(
        self,
        coordinator: str,
        num_processes: int,
        process_id: int,
        wait_s: float,
        before: Callable[[], Any] = ...,
    ) -> None: ...
    def start_trace(
        self, logdir: str, host_level: int, python_level: int, device_level: int
    ) -> None: ...
    def step_loops(self, loader: str = "", model: Any = None) -> tuple[str, ...]: ...
    def step_marker(self, step: int) -> Any: ...
    def stop_trace(self) -> None: ...
    def trace_files(self, names: list[str]) -> list[str]: ...
    def use_compile_cache(self, directory: str) -> str: ...
    def wait_for_device(self) -> None: ...
    def weights_digest(self, model: Any) -> str: ...


# The seam's function names, in the order the protocol declares them (each module's __all__).
SEAM = tuple(n for n, v in vars(Seam).items() if not n.startswith("_") and callable(v))


def missing_from_seam(module: Any) -> list[str]:
    """The seam's functions `module` does not implement (none: it is a :class:`Seam`)."""
    return [n for n in SEAM if not callable(getattr(module, n, None))]


PEAK_RUNS = 7


def calibrated_peak(timed: Callable[[int], float], size: int, seconds: float) -> MatmulRun:
    """FLOP/s of chained ``size``² matmuls, `timed(n)` running n and waiting once: the first call
    compiles, the loop is calibrated to about `seconds`, one run is left out (clocks ramp up), the
    best of :data:`PEAK_RUNS` counts; ``spread_pct`` (median vs best) says how far to trust it."""
    timed(1)
    n = max(1, round(seconds / max(timed(2) / 2, 1e-6)))
    timed(n)
    runs = sorted(timed(n) for _ in range(PEAK_RUNS))
    best, median = runs[0], runs[len(runs) // 2]
    return MatmulRun(2.0 * size**3 * n / best, (median / best - 1.0) * 100.0, PEAK_RUNS)


def refuse_tf_only(config: Any, backend: str, fused: bool = False) -> None:
    """ValueError (one line) for ``tf.distribute`` strategies, and fused steps unless `fused`."""
    if config.fused_steps > 1 and not fused:
        raise ValueError(
            f"--fused_steps={config.fused_steps}: fused steps are a loop inside the compiled "
            f"train step, which --backend={backend} does not compile; use --fused_steps=1 (or "
            "--backend=tensorflow or jax)"
        )
    if config.distribution_strategy not in ("default", "data_parallel"):
        raise ValueError(
            f"--distribution_strategy={config.distribution_strategy} is tf.distribute's: on "
            f"--backend={backend} train with the default strategy or data_parallel (or use "
            "--backend=tensorflow)"
        )


def mark_fused_steps(model: Any, steps: int) -> bool:
    """Records `steps` on `model`; whether there is a loop to build. ValueError below 1."""
    if steps < 1:
        raise ValueError(f"--fused_steps must be >= 1, got {steps}")
    setattr(model, FUSED_STEPS_ATTR, steps)
    return steps > 1


def one_step_per_batch(model: Any, steps: int) -> None:
    """The training step as Keras compiles it, one step per batch (``refuse_tf_only`` ran first)."""
    if steps != 1:
        raise ValueError(f"--fused_steps={steps} needs --backend=tensorflow or jax")
    setattr(model, FUSED_STEPS_ATTR, 1)


def keras_device_scope(framework_device: Any) -> contextlib.AbstractContextManager:
    """``keras.device``: where a block's ops go on a backend without a device context of its own."""
    import keras

    return keras.device(framework_device)


def no_augmentation_pin(device: Any) -> contextlib.AbstractContextManager:
    """Nothing to pin: tf.data's random ops run on the CPU (only tensorflow-metal lacks kernels)."""
    return contextlib.nullcontext()


def no_retracing_noise() -> contextlib.AbstractContextManager:
    """Nothing to silence: only TensorFlow warns about retracing."""
    return contextlib.nullcontext()


def has_float64(model: Any) -> bool:
    """Whether Keras computes in or `model` holds float64 (Apple GPUs have no float64 kernels)."""
    from toolkit.core import compat

    try:
        if str(compat.keras().config.floatx()) == "float64":
            return True
    except Exception:  # noqa: BLE001 - tf_keras spells it keras.backend.floatx
        try:
            if str(compat.keras().backend.floatx()) == "float64":
                return True
        except Exception:  # noqa: BLE001
            pass
    if model is None:
        return False
    return any("float64" in str(getattr(w, "dtype", "")) for w in getattr(model, "weights", []))


def digest(arrays: Any) -> str:
    """A fingerprint of `arrays` (NumPy, in order): the same weights give the same one."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


@dataclasses.dataclass
class CompileEvent:
    """One compile a backend's signal found; `at` is the clock (None for a counter read at
    :meth:`CompileWatch.poll`), `seconds` the backend's own duration, `where` the poll label."""

    function: str | None
    at: float | None = None
    seconds: float | None = None
    cause: str | None = None
    where: str | None = None


class CompileWatch:
    """What a backend says of one fit's compiles and input time, for the ledger; this base sees
    nothing. Each backend's ``compile_watch`` returns a subclass reading its own signal, no sync.

    Attributes:
        signal: how compiles are found, in words.
        input_seen: ``"inside"`` the train function, ``"between"`` steps, or ``""`` (profiler only).
        events: a :class:`CompileEvent` per compile found.
        input_spans: ``(start, seconds)`` of each batch read timed inside a train function."""

    signal = "none: only each function's first call is counted as a compile"
    input_seen = ""

    def __init__(self, model: Any = None, clock: Callable[[], float] | None = None) -> None:
        self.model = model
        self.events: list[CompileEvent] = []
        self.input_spans: list[tuple[float, float]] = []

    def start(self) -> None:
        """Called at the fit's train begin."""

    def poll(self, where: str) -> None:
        """Reads counter-based signals: compiles since the last poll happened in `where`."""

    def test_begin(self) -> None:
        """Called at each validation's begin (the evaluation function exists by then)."""

    def stop(self) -> None:
        """Called when the fit has ended (also on a raise); undoes what :meth:`start` changed."""


def shape_change(before: Any, now: Any) -> str | None:
    """Words for how a batch's ``((shape, dtype), ...)`` signature changed, or None."""
    if before is None or now is None or before == now:
        return None
    if len(before) != len(now):
        return f"input structure: {len(now)} arrays (was {len(before)})"
    for (s0, d0), (s1, d1) in zip(before, now, strict=True):
        if s0 != s1:
            return f"input shape {tuple(s1)} (was {tuple(s0)})"
        if d0 != d1:
            return f"input dtype {d1} (was {d0})"
    return None


def plain_loss(model: Any) -> Callable[[Any, Any], Any]:
    """The model's compiled loss as a plain ``loss(y_true, y_pred)``, for a step written without
    Keras's trainer: per-output losses and ``loss_weights`` summed and paired as ``CompileLoss``
    does. Raises ValueError for no loss, or losses added by layers."""
    loss = getattr(model, "loss", None)
    if not loss:  # (tf_keras: [] for none)
        raise ValueError("the raw step takes the compiled loss; this model compiles none")
    if model.losses:
        raise ValueError("the raw step takes the compiled loss; this model's layers add their own")
    names = list(getattr(model, "output_names", None) or ())
    # (Keras keeps the weights on its loss container, not the model)
    container = getattr(model, "_compile_loss", None) or getattr(model, "compiled_loss", None)
    weights = _flat_per_output(getattr(container, "_user_loss_weights", None), names)
    losses = loss if isinstance(loss, dict | list | tuple) else [loss]  # (tracking wraps one)
    fns = [None if f is None else _one_loss(f) for f in _flat_per_output(losses, names)]

    def summed(y_true: Any, y_pred: Any) -> Any:
        preds = _flat_per_output(y_pred, names)
        # one loss for every output, as Keras maps it over them
        each = fns * len(preds) if len(fns) == 1 else fns
        weighed = (weights * len(each) if len(weights) == 1 else weights) or [None] * len(each)
        trues = _flat_per_output(y_true, names)
        used = [i for i, f in enumerate(each) if f is not None]
        if len(trues) == len(used) != len(preds):  # labels for the outputs with a loss only
            trues = [trues[used.index(i)] if i in used else None for i in range(len(each))]
        if not len(trues) == len(preds) == len(each) == len(weighed):
            raise ValueError(
                f"{len(trues)} labels, {len(preds)} outputs, {len(each)} losses and "
                f"{len(weighed)} loss weights do not pair"
            )
        total = None
        for i in used:
            value = each[i](trues[i], preds[i])
            value = value if weighed[i] is None else value * weighed[i]
            total = value if total is None else total + value
        return total

    return summed


def _flat_per_output(value: Any, names: Sequence[str]) -> list[Any]:
    """Per output, in order: a dict by output name, a list flattened, else [value]; None: []."""
    from toolkit.core import compat

    if value is None:
        return []
    if isinstance(value, dict) and names and set(names) <= set(value):
        return [value[name] for name in names]
    if isinstance(value, dict | list | tuple):
        return list(compat.keras().tree.flatten(value))
    return [value]


def _one_loss(loss: Any) -> Callable[[Any, Any], Any]:
    """One output's loss (a name, function or ``Loss``) as its batch's mean, as Keras reduces it."""
    from toolkit.core import compat

    keras = compat.keras()
    fn = keras.losses.get(loss)
    if isinstance(fn, keras.losses.Loss):
        return fn
    ops = keras.ops

    def mean_loss(y_true: Any, y_pred: Any) -> Any:
        # per example: labels' rank matched to the outputs', then averaged, as Keras's wrapper does
        if len(y_true.shape) == len(y_pred.shape) - 1 and y_pred.shape[-1] == 1:
            y_true = ops.expand_dims(y_true, -1)
        elif len(y_pred.shape) == len(y_true.shape) - 1 and y_true.shape[-1] == 1:
            y_true = ops.squeeze(y_true, -1)
        return ops.mean(fn(y_true, y_pred))

    return mean_loss
