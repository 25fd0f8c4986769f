"""The datasheet peak beside the measured one: which GPU names it knows (faked device lists: no
GPU here), which math a float32 step is compared with, and what each backend says of its
float32 matmuls."""

from __future__ import annotations

import pytest

from toolkit.devices import DeviceInfo
from toolkit.devices._datasheet import datasheet_peak


def _gpu(name, capability=(9, 0)):
    return DeviceInfo("cuda", "/physical_device:GPU:0", 0, name, 81_559.0, capability)


@pytest.mark.parametrize(
    ("name", "capability", "dtype", "math", "product", "tflops"),
    [
        # The names TensorFlow, JAX and PyTorch give (nvidia-smi's).
        ("NVIDIA H100 80GB HBM3", (9, 0), "float32", "tf32", "NVIDIA H100 SXM", 494.7),
        ("NVIDIA H100 80GB HBM3", (9, 0), "bfloat16", "bfloat16", "NVIDIA H100 SXM", 989.4),
        ("NVIDIA H100 PCIe", (9, 0), "float16", "float16", "NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", (9, 0), "float32", "tf32", "NVIDIA H200 SXM", 494.7),
        ("NVIDIA A100-SXM4-40GB", (8, 0), "float32", "tf32", "NVIDIA A100", 156.0),
        ("NVIDIA A100 80GB PCIe", (8, 0), "bfloat16", "bfloat16", "NVIDIA A100", 312.0),
        ("NVIDIA L4", (8, 9), "float16", "float16", "NVIDIA L4", 121.0),
        ("NVIDIA A10", (8, 6), "float32", "tf32", "NVIDIA A10", 62.5),
        # Before Ampere there is no TF32: float32 is float32 whatever the framework allows.
        ("Tesla V100-SXM2-16GB", (7, 0), "float32", "float32", "NVIDIA V100 SXM2", 15.7),
        ("Tesla V100-PCIE-16GB", (7, 0), "float16", "float16", "NVIDIA V100 PCIe", 112.0),
        ("Tesla T4", (7, 5), "float32", "float32", "NVIDIA T4", 8.1),
    ],
)
def test_known_gpus_get_their_dense_datasheet_figure(
    name, capability, dtype, math, product, tflops
):
    sheet = datasheet_peak(_gpu(name, capability), dtype, float32_math="tf32")
    assert sheet == {"flops_per_s": pytest.approx(tflops * 1e12), "math": math, "product": product}


def test_no_figure_is_guessed():
    # A GPU not in the table, a look-alike name, a dtype the GPU has no fast path for, a CPU
    # and an Apple GPU: no figure, and the report says only the measured MFU.
    assert datasheet_peak(_gpu("NVIDIA GeForce RTX 3060", (8, 6)), "float32", "tf32") is None
    assert datasheet_peak(_gpu("NVIDIA A10G", (8, 6)), "float32", "tf32") is None
    assert datasheet_peak(_gpu("NVIDIA H100 NVL", (9, 0)), "float32", "tf32") is None
    assert datasheet_peak(_gpu("Tesla T4", (7, 5)), "bfloat16", "tf32") is None
    assert datasheet_peak(DeviceInfo("cpu", "cpu:0", 0, "AMD EPYC"), "float32") is None
    assert datasheet_peak(DeviceInfo("metal", "mps", 0, "METAL"), "float16") is None


def test_float32_without_tf32_is_compared_with_the_float32_figure():
    # PyTorch's default (highest precision): float32 matmuls stay off the tensor cores.
    sheet = datasheet_peak(_gpu("NVIDIA H100 80GB HBM3"), "float32", float32_math="float32")
    assert sheet["math"] == "float32" and sheet["flops_per_s"] == pytest.approx(66.9e12)


@pytest.mark.every_backend
def test_each_backend_says_how_it_runs_float32_matmuls():
    from toolkit import backend

    seam = backend.get()
    expected = {"tensorflow": "tf32", "jax": "tf32", "torch": "float32"}[backend.name()]
    assert seam.float32_matmul_precision() == expected  # each framework's default
    if backend.name() == "torch":
        import torch

        torch.set_float32_matmul_precision("high")
        try:
            assert seam.float32_matmul_precision() == "tf32"
        finally:
            torch.set_float32_matmul_precision("highest")


@pytest.mark.every_backend
def test_compute_facts_put_the_datasheet_figure_of_the_math_the_backend_runs():
    from toolkit import backend
    from toolkit.profiling.flops import Compute, _datasheet

    facts = _datasheet(Compute(peak_dtype="float32"), _gpu("NVIDIA H100 80GB HBM3"))
    math = backend.get().float32_matmul_precision()
    figure = {"tf32": 494.7e12, "float32": 66.9e12}[math]
    assert facts.datasheet_peak_flops_per_s == pytest.approx(figure)
    assert facts.datasheet_peak == f"NVIDIA H100 SXM, dense {math}"
    cpu = DeviceInfo("cpu", "cpu:0", 0, "AMD EPYC")
    assert _datasheet(Compute(), cpu) == Compute()
