"""GPU vendors' dense datasheet peaks, so MFU can also be read as Lightning and Composer users read
it: of the figure the chip is sold on (above the measured matmul peak, but the same for every such
GPU, so it compares across machines and with published figures). NVIDIA's dense figures (a "with
sparsity" one halved); a device not in the table gets no figure, never a guess."""

from __future__ import annotations

import re
from typing import Any

# (name pattern, product, {math: dense TFLOP/s}); the first match counts: variants go first.
_TABLE: tuple[tuple[str, str, dict[str, float]], ...] = (
    (
        r"H100.*PCIe",
        "NVIDIA H100 PCIe",
        {"float32": 51.2, "tf32": 378.0, "bfloat16": 756.0, "float16": 756.0},
    ),
    (
        r"H100(?!.*NVL)",
        "NVIDIA H100 SXM",
        {"float32": 66.9, "tf32": 494.7, "bfloat16": 989.4, "float16": 989.4},
    ),
    (
        r"H200(?!.*NVL)",
        "NVIDIA H200 SXM",
        {"float32": 66.9, "tf32": 494.7, "bfloat16": 989.4, "float16": 989.4},
    ),
    (r"A100", "NVIDIA A100", {"float32": 19.5, "tf32": 156.0, "bfloat16": 312.0, "float16": 312.0}),
    (r"L40S", "NVIDIA L40S", {"float32": 91.6, "tf32": 183.0, "bfloat16": 362.0, "float16": 362.0}),
    (r"\bL4\b", "NVIDIA L4", {"float32": 30.3, "tf32": 60.0, "bfloat16": 121.0, "float16": 121.0}),
    (
        r"\bA10\b",
        "NVIDIA A10",
        {"float32": 31.2, "tf32": 62.5, "bfloat16": 125.0, "float16": 125.0},
    ),
    (r"V100.*PCIE", "NVIDIA V100 PCIe", {"float32": 14.0, "float16": 112.0}),
    (r"V100", "NVIDIA V100 SXM2", {"float32": 15.7, "float16": 125.0}),
    (r"\bT4\b", "NVIDIA T4", {"float32": 8.1, "float16": 65.0}),
)
_TF32_CAPABILITY = (8, 0)  # Ampere: the first GPUs with TF32 tensor cores


def datasheet_peak(device: Any, dtype: str, float32_math: str = "float32") -> dict[str, Any] | None:
    """The datasheet's dense peak of `device` for matmuls in `dtype`, or None if not in the table.

    Args:
        float32_math: ``"tf32"`` where the backend runs float32 matmuls on TF32 tensor cores.

    Returns:
        ``{"flops_per_s", "math", "product"}``: the figure, the math it is for, and the product."""
    if getattr(device, "kind", None) != "cuda":
        return None
    name = str(getattr(device, "human_name", ""))
    found = next((row for row in _TABLE if re.search(row[0], name, flags=re.IGNORECASE)), None)
    if found is None:
        return None
    _, product, figures = found
    math = dtype
    capability = getattr(device, "compute_capability", None) or (0, 0)
    if dtype == "float32" and float32_math == "tf32" and tuple(capability) >= _TF32_CAPABILITY:
        math = "tf32" if "tf32" in figures else "float32"
    if math not in figures:
        return None
    return {"flops_per_s": figures[math] * 1e12, "math": math, "product": product}
