"""Advice said to a script: the recipes' flags as your own ``compile`` and ``fit`` take them.

``diagnose(model, data)`` and ``tune(model, data)`` measure your own model; their advice is
drawn from the same facts as a recipe's, where it names flags (``--jit_compile``). For a
script, :func:`as_python` says each the way Python does it (``model.compile(...,
jit_compile=True)``).
"""

from __future__ import annotations

import re

__all__: list[str] = []  # diagnose's own helper (as_python)

# A recipe's flag, and what the same advice says to a script's own model and fit.
_AS_PYTHON = (
    (r"--jit_compile\b", "model.compile(..., jit_compile=True)"),
    (r"--steps_per_execution=(\d+)\b", r"model.compile(..., steps_per_execution=\1)"),
    (r"--steps_per_execution\b", "model.compile(..., steps_per_execution=8)"),
    (r"--fused_steps=K\b", "fused steps (K steps in one compiled call; recipes: --fused_steps)"),
    (r"--precision=([\w-]+)", r"keras.mixed_precision.set_global_policy('\1')"),
    (r"--device=(\w+)", r"with keras.device('\1'): around building, compile and fit"),
    (r"--backend=(\w+)", r"KERAS_BACKEND=\1 (set before Keras is imported)"),
)


def as_python(advice: str) -> str:
    """One piece of advice with the recipes' flags said as a script does it:
    ``--jit_compile`` as ``model.compile(..., jit_compile=True)``, ``--precision=X`` as
    ``keras.mixed_precision.set_global_policy('X')``; the rest unchanged."""
    for flag, python in _AS_PYTHON:
        advice = re.sub(flag, python, advice)
    return advice
