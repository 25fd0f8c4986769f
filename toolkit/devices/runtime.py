"""Runtime settings that must come before TensorFlow starts its runtime: thread pools; and
loading TensorFlow with its native start-up lines held (:func:`load_tensorflow`).

(Device memory readings are the backend's: ``toolkit.backend._tensorflow.device_memory``.)
"""

from __future__ import annotations

import os

from toolkit.core import native_logs
from toolkit.devices.selection import DeviceError

__all__: list[str] = []  # offered through toolkit.devices


def load_tensorflow() -> bool:
    """Imports TensorFlow and lists its devices, the two calls that write its C++ start-up
    lines, with those lines held back (:mod:`toolkit.core.native_logs`); False where it is
    not installed.

    Listing devices does not start the runtime: thread pools and visible devices can still
    be set afterwards.
    """
    with native_logs.held():
        try:
            import tensorflow as tf
        except ImportError:
            return False
        tf.config.list_physical_devices()
    return True


def configure_threads(
    intra_op: int | None = None,
    inter_op: int | None = None,
    cores: int | None = None,
) -> dict[str, int]:
    """Sets TensorFlow's intra/inter-op thread pools, as Model Garden's flags do, and suggests
    ``datasets_num_private_threads`` for the input pipeline (``pipeline(private_threads=...)``).

    Defaults: intra-op = all cores, inter-op = 2, private tf.data threads = half the cores (at
    least 1). Must run before TensorFlow starts its runtime.

    Raises:
        DeviceError: a count < 1, or the runtime already started.
    """
    import tensorflow as tf

    cores = cores or os.cpu_count() or 1
    plan = {
        "intra_op": intra_op if intra_op is not None else cores,
        "inter_op": inter_op if inter_op is not None else min(2, cores),
        "datasets_private_threads": max(1, cores // 2),
    }
    for name, value in plan.items():
        if value < 1:
            raise DeviceError(f"{name}: thread counts must be >= 1, got {value}")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(plan["intra_op"])
        tf.config.threading.set_inter_op_parallelism_threads(plan["inter_op"])
    except RuntimeError as e:
        raise DeviceError(
            "configure_threads() came after TensorFlow started its runtime: call it first in "
            "your program, before any op or model"
        ) from e
    return plan
