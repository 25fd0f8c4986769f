"""What fused, read from XLA's optimized HLO and the post-Grappler graphs, and the demos run."""

from __future__ import annotations

import pytest

from toolkit.bench import fusion
from toolkit.bench import kernels as bench_kernels

# Trimmed from TF 2.21's optimized HLO of matmul + hard_swish on the CPU.
HLO = """HloModule a_inference_hs_37__.1, is_scheduled=true

%fused_computation (param_0.1: f32[128,3072]) -> f32[128,3072] {
  %param_0.1 = f32[128,3072]{1,0} parameter(0)
  %Relu6.4 = f32[] constant(0), metadata={op_type="Relu6" op_name="Relu6"}
  %add.2 = f32[] constant(3), metadata={op_type="AddV2" op_name="add"}
  %add.1 = f32[128,3072]{1,0} broadcast(%add.2), dimensions={}, metadata={op_type="AddV2"}
  %add.0 = f32[128,3072]{1,0} add(%param_0.1, %add.1), metadata={op_type="AddV2" op_name="add"}
  %Relu6.2 = f32[] constant(6), metadata={op_type="Relu6" op_name="Relu6"}
  %Relu6.1 = f32[128,3072]{1,0} broadcast(%Relu6.2), dimensions={}
  %Relu6.0 = f32[128,3072]{1,0} clamp(%Relu6.4, %add.0, %Relu6.1), metadata={op_type="Relu6"}
  %mul.0 = f32[128,3072]{1,0} multiply(%param_0.1, %Relu6.0), metadata={op_type="Mul"}
  %constant.1 = f32[] constant(0.166666672), metadata={op_type="RealDiv" op_name="truediv"}
  ROOT %multiply.1 = f32[128,3072]{1,0} multiply(%mul.0, %constant.1), metadata={op_type="RealDiv"}
}

ENTRY %a_inference_hs_37__.1 (arg0.1: f32[128,768], arg1.1: f32[768,3072]) -> f32[128,3072] {
  %arg0.1 = f32[128,768]{1,0} parameter(0), parameter_replication={false}
  %arg1.1 = f32[768,3072]{1,0} parameter(1), parameter_replication={false}
  %MatMul.2 = f32[128,3072]{1,0} dot(%arg0.1, %arg1.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_type="MatMul" op_name="MatMul"}
  ROOT %broadcast_multiply_fusion = f32[128,3072]{1,0} fusion(%MatMul.2), kind=kLoop, calls=%fused_computation, metadata={op_type="RealDiv"}
}
"""  # noqa: E501


def test_hlo_kernels_name_the_fusion_and_its_ops():
    kernels = bench_kernels.hlo_kernels(HLO)
    assert kernels.names == ("dot(MatMul)", "fusion(kLoop: Relu6, AddV2, Mul, RealDiv)")
    assert kernels.count == 2
    assert kernels.fusions == (
        "one kLoop fusion holds Relu6, AddV2, Mul, RealDiv (HLO add, clamp, multiply)",
    )


def test_hlo_custom_calls_and_no_entry():
    text = (
        "ENTRY %main (p: f32[8,8]) -> f32[8,8] {\n"
        "  %p = f32[8,8]{1,0} parameter(0)\n"
        '  ROOT %gemm = f32[8,8]{1,0} custom-call(%p, %p), custom_call_target="__cublas$gemm"\n'
        "}\n"
    )
    assert bench_kernels.hlo_kernels(text).names == ("custom-call(__cublas$gemm)",)
    assert bench_kernels.hlo_kernels("HloModule empty").source.startswith("optimized HLO: no ENTRY")


@pytest.fixture(scope="module")
def demos():
    return fusion.fusion_demos("tiny", repeats=2, min_time_s=0.001)


def test_matmul_hard_swish_fuses_under_xla_not_in_graph_mode(demos):
    demo = demos[0]
    assert demo.chain_ops == ("MatMul", "AddV2", "Relu6", "Mul", "RealDiv")
    graph, xla = demo.get(demo.chain, "graph"), demo.get(demo.chain, "xla")
    assert graph.kernels.count == 5 and not graph.kernels.fusions  # Grappler: no such pattern
    assert xla.kernels.count == 2 and len(xla.kernels.fusions) == 1
    assert all(op in xla.kernels.fusions[0] for op in ("AddV2", "Relu6", "Mul", "RealDiv"))
    fused, unfused = demo.fused_and_unfused()
    assert (fused.mode, unfused.mode) == ("xla", "graph")
    findings = "\n".join(demo.findings())
    assert "matmul + hard_swish, fused (xla, 2 kernels) vs unfused (graph, 5 kernels)" in findings
    assert "× (baseline " in findings and "cost of the epilogue over the bare matmul" in findings
    assert all(v.gflops_per_s > 0 for v in demo.variants)


def test_conv_bias_relu_is_a_grappler_pattern(demos):
    demo = demos[1]
    graph, xla = demo.get(demo.chain, "graph"), demo.get(demo.chain, "xla")
    assert graph.kernels.count == 1 and "Fused" in graph.kernels.names[0]
    assert xla.kernels.count <= 2 and "BiasAdd" in xla.kernels.fusions[0]
    assert demo.fused_and_unfused()[0].mode == "graph"
    record = demo.to_dict()
    assert record["fused"] == "graph" and record["chain_ops"] == ["Conv2D", "BiasAdd", "Relu"]
    assert "| conv2d + bias + relu | graph |" in demo.render()
