"""Device facts. Every platform-specific TensorFlow device call lives in this module.

For now: device memory as TensorFlow exposes it (CUDA GPUs; Metal and CPU expose none).
"""

from __future__ import annotations

import contextlib

MB = 1024.0 * 1024.0


def device_memory(reset_peak: bool = False) -> dict[str, dict[str, float]]:
    """Current and peak memory of each visible GPU, in MiB, where TensorFlow exposes it.

    Args:
        reset_peak: reset each device's peak counter after reading it, so the next reading's
            peak covers only the time in between. Defaults to `False`.

    Returns:
        ``{"GPU:0": {"current_mb": ..., "peak_mb": ...}}``; empty when no GPU reports memory
        (CPU-only TensorFlow reports zeros for the CPU, which says nothing, so it is left out).
    """
    import tensorflow as tf

    out: dict[str, dict[str, float]] = {}
    for dev in tf.config.list_logical_devices("GPU"):
        name = dev.name.split("device:")[-1]
        try:
            info = tf.config.experimental.get_memory_info(name)
        except (ValueError, tf.errors.OpError, NotImplementedError):
            continue  # e.g. tensorflow-metal exposes no memory info
        out[name] = {"current_mb": info["current"] / MB, "peak_mb": info["peak"] / MB}
        if reset_peak:
            with contextlib.suppress(ValueError, tf.errors.OpError, NotImplementedError):
                tf.config.experimental.reset_memory_stats(name)
    return out
