"""What fusion buys: a matmul with a ``hard_swish`` epilogue, and conv2d + bias + relu.

As in the TVM-on-M1 post's BERT layer, a framework runs hard_swish after the gemm as four kernels
over the whole result, a fusing compiler as one. The chain runs in TensorFlow's three modes; its
kernels (``toolkit.bench.kernels``) show what fused: Grappler's remapper fuses conv2d + bias + relu
in graph mode but not hard_swish, XLA the epilogue; eager runs one per op. GFLOP/s count the
matmul's (or conv's) FLOPs only, as the post does."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from toolkit import backend
from toolkit.bench.kernels import Kernels, graph_kernels, kernels_text, op_types, xla_kernels
from toolkit.bench.measure import MODES, inputs_on, run_case
from toolkit.bench.table import Timing, format_ms
from toolkit.core import _fields as fields
from toolkit.core import machine
from toolkit.core.files import atomic_write, jsonable
from toolkit.core.stats import speedup_line

__all__ = [
    "FusionDemo",
    "fusion_demos",
]


@dataclasses.dataclass(frozen=True)
class Variant(fields.Record):
    """One timed computation of a demo in one mode."""

    EXTRA = ("ms", "gflops_per_s")  # derived, for readers of the JSON

    name: str
    mode: str
    timing: Timing | None
    reason: str | None
    flops: float
    kernels: Kernels

    @property
    def ms(self) -> float | None:
        return self.timing.ms if self.timing else None

    @property
    def gflops_per_s(self) -> float | None:
        return self.flops / (self.timing.ms * 1e-3) / 1e9 if self.timing else None


@dataclasses.dataclass
class FusionDemo:
    """A bare op and the op with its epilogue, each in every mode, and what fused."""

    title: str
    bare: str
    chain: str
    chain_ops: tuple[str, ...]
    shapes: str
    device: str
    dtype: str
    variants: list[Variant]

    def get(self, name: str, mode: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name and v.mode == mode), None)

    def _timed_chain(self) -> list[Variant]:
        return [v for v in self.variants if v.name == self.chain and v.timing]

    def fused_and_unfused(self) -> tuple[Variant, Variant] | None:
        """``(fused, unfused)``: fewest kernels (XLA on a tie), most (graph on a tie); or None."""
        timed = [v for v in self._timed_chain() if v.kernels.count]
        if len(timed) < 2:
            return None
        order = {m: i for i, m in enumerate(MODES)}
        fused = min(timed, key=lambda v: (v.kernels.count, -order[v.mode]))
        unfused = max(timed, key=lambda v: (v.kernels.count, v.mode == "graph"))
        if fused.kernels.count >= unfused.kernels.count:
            return None
        return fused, unfused

    def epilogue_cost(self) -> dict[str, float]:
        """Per mode, how much slower the chain is than the bare op, in %."""
        out = {}
        for mode in MODES:
            bare, chain = self.get(self.bare, mode), self.get(self.chain, mode)
            if bare and chain and bare.timing and chain.timing:
                out[mode] = (chain.timing.ms / bare.timing.ms - 1.0) * 100.0
        return out

    def table(self) -> str:
        """A Markdown table: variant, mode, ms, GFLOP/s, kernels, what ran."""
        lines = [
            "| variant | mode | ms | GFLOP/s | kernels | what ran |",
            "|---|---|---|---|---|---|",
        ]
        for v in self.variants:
            gflops = f"{v.gflops_per_s:.1f}" if v.gflops_per_s else "n/a"
            if v.timing is None:
                ran = f"n/a: {v.reason}"
            elif v.kernels.names:
                ran = ", ".join(v.kernels.names)
            else:
                ran = v.kernels.source
            count = str(v.kernels.count) if v.kernels.names else "?"
            lines.append(
                f"| {v.name} | {v.mode} | {format_ms(v.timing.ms if v.timing else None)} | "
                f"{gflops} | {count} | {ran} |"
            )
        return "\n".join(lines)

    def findings(self) -> list[str]:
        """What fused, in words, and the ratio lines (time per 1000 calls, in seconds)."""
        lines = []
        for v in self._timed_chain():
            if v.mode == "eager":
                continue
            if not v.kernels.names:
                lines.append(f"{v.mode}: kernels {v.kernels.source}")
                continue
            fused = "; ".join(v.kernels.fusions) if v.kernels.fusions else "nothing fused"
            lines.append(
                f"{v.mode}: {len(self.chain_ops)} TF ops ({', '.join(self.chain_ops)}) ran as "
                f"{kernels_text(v.kernels.count)}: {fused}"
            )
        pair = self.fused_and_unfused()
        if pair:
            fused, unfused = pair
            lines.append(
                speedup_line(
                    f"{self.chain}, fused ({fused.mode}, {kernels_text(fused.kernels.count)}) vs "
                    f"unfused ({unfused.mode}, {kernels_text(unfused.kernels.count)}), "
                    "per 1000 calls",
                    unfused.timing.ms,  # type: ignore[union-attr]
                    fused.timing.ms,  # type: ignore[union-attr]
                )
            )
        else:
            lines.append(f"{self.chain}: no mode ran it as fewer kernels than another")
        graph, xla = self.get(self.chain, "graph"), self.get(self.chain, "xla")
        if graph and xla and graph.timing and xla.timing:
            lines.append(
                speedup_line(
                    f"{self.chain}, XLA vs graph, per 1000 calls", graph.timing.ms, xla.timing.ms
                )
            )
        cost = self.epilogue_cost()
        if cost:
            lines.append(
                f"cost of the epilogue over the bare {self.bare}: "
                + ", ".join(f"{mode} {pct:+.0f}%" for mode, pct in cost.items())
            )
        return lines

    def render(self) -> str:
        head = f"## {self.title}: {self.shapes}, {self.dtype} on {self.device}"
        return "\n".join([head, "", self.table(), "", *self.findings()])

    def to_dict(self) -> dict[str, object]:
        pair = self.fused_and_unfused()
        return {
            "title": self.title,
            "bare": self.bare,
            "chain": self.chain,
            "chain_ops": list(self.chain_ops),
            "shapes": self.shapes,
            "device": self.device,
            "dtype": self.dtype,
            "variants": [v.to_dict() for v in self.variants],
            "fused": pair[0].mode if pair else None,
            "unfused": pair[1].mode if pair else None,
            "epilogue_cost_pct": self.epilogue_cost(),
            "findings": self.findings(),
        }


def hard_swish(x: Any) -> Any:
    """``x * relu6(x + 3) / 6`` written as the TVM post's separate ops."""
    import tensorflow as tf

    return x * tf.nn.relu6(x + 3.0) / 6.0


def _measure(
    title: str,
    bare: tuple[str, Callable[..., Any]],
    chain: tuple[str, Callable[..., Any]],
    inputs: Sequence[Any],
    flops: float,
    shapes: str,
    device: Any,
    dtype: str,
    modes: Sequence[str],
    **timing_kwargs: Any,
) -> FusionDemo:
    variants = []
    for name, fn in (bare, chain):
        for mode in modes:
            timing, reason = run_case(fn, inputs, device, mode, **timing_kwargs)
            if timing is None:
                kernels = Kernels((), (), "not run")
            elif mode == "graph":
                kernels = graph_kernels(fn, inputs, device.logical_name)
            elif mode == "xla":
                kernels = xla_kernels(fn, inputs, device.logical_name)
            else:
                kernels = Kernels(op_types(fn, inputs), (), "eager: one kernel per TF op")
            variants.append(Variant(name, mode, timing, reason, flops, kernels))
    return FusionDemo(
        title=title,
        bare=bare[0],
        chain=chain[0],
        chain_ops=op_types(chain[1], inputs),
        shapes=shapes,
        device=f"{device.kind}:{device.index} {device.human_name}",
        dtype=dtype,
        variants=variants,
    )


def _normal_inputs(shapes: Sequence[tuple[int, ...]], device: Any, dtype: str) -> tuple[Any, ...]:
    import tensorflow as tf

    return inputs_on(device, lambda rng: [tf.cast(rng.normal(s), dtype) for s in shapes])


def matmul_hard_swish(
    m: int = 128,
    n: int = 3072,
    k: int = 768,
    *,
    device: Any = None,
    dtype: str = "float32",
    modes: Sequence[str] = MODES,
    **timing_kwargs: Any,
) -> FusionDemo:
    """The TVM post's BERT matmul (``a: M x K``, ``b: K x N``) alone and with hard_swish."""
    import tensorflow as tf

    from toolkit import devices

    device = device or devices.resolve("auto", backend="tensorflow")
    inputs = _normal_inputs([(m, k), (k, n)], device, dtype)

    def matmul(a: Any, b: Any) -> Any:
        return tf.matmul(a, b)

    def matmul_hs(a: Any, b: Any) -> Any:
        return hard_swish(tf.matmul(a, b))

    post_shape = (m, n, k) == (128, 3072, 768)
    return _measure(
        "matmul + hard_swish" + (" (the TVM post's BERT shape)" if post_shape else ""),
        ("matmul", matmul),
        ("matmul + hard_swish", matmul_hs),
        inputs,
        2.0 * m * n * k,
        f"M, N, K = {m}, {n}, {k}",
        device,
        dtype,
        modes,
        **timing_kwargs,
    )


def conv_bias_relu(
    batch: int = 8,
    size: int = 56,
    channels: int = 64,
    filters: int = 64,
    *,
    device: Any = None,
    dtype: str = "float32",
    modes: Sequence[str] = MODES,
    **timing_kwargs: Any,
) -> FusionDemo:
    """A 3x3 ``SAME`` conv2d (a ResNet stage-1 layer by default) alone and with bias + relu."""
    import tensorflow as tf

    from toolkit import devices

    device = device or devices.resolve("auto", backend="tensorflow")
    inputs = _normal_inputs(
        [(batch, size, size, channels), (3, 3, channels, filters), (filters,)], device, dtype
    )

    def conv(x: Any, w: Any, b: Any) -> Any:
        return tf.nn.conv2d(x, w, strides=1, padding="SAME")

    def conv_br(x: Any, w: Any, b: Any) -> Any:
        return tf.nn.relu(tf.nn.bias_add(conv(x, w, b), b))

    return _measure(
        "conv2d + bias + relu",
        ("conv2d", conv),
        ("conv2d + bias + relu", conv_br),
        inputs,
        2.0 * batch * size * size * 9 * channels * filters,
        f"x {batch}x{size}x{size}x{channels}, filter 3x3x{channels}x{filters}",
        device,
        dtype,
        modes,
        **timing_kwargs,
    )


def fusion_demos(size: str = "default", **kwargs: Any) -> list[FusionDemo]:
    """Both demos; ``size="tiny"`` shrinks the shapes for tests (the others use the post's)."""
    if size == "tiny":
        return [
            matmul_hard_swish(16, 64, 32, **kwargs),
            conv_bias_relu(2, 8, 4, 4, **kwargs),
        ]
    return [matmul_hard_swish(**kwargs), conv_bias_relu(**kwargs)]


def write(demos: Sequence[FusionDemo], directory: str, settings: dict[str, Any]) -> dict[str, str]:
    """Writes ``fusion.json`` (the record, with the environment) and ``fusion.md``, atomically."""
    record = {
        "schema": "toolkit.fusion/1",
        "settings": settings,
        "environment": machine.capture_environment(backend.framework_facts()),
        "demos": [d.to_dict() for d in demos],
    }
    return {
        "json": atomic_write(
            os.path.join(directory, "fusion.json"), json.dumps(jsonable(record), indent=1)
        ),
        "markdown": atomic_write(
            os.path.join(directory, "fusion.md"), "\n\n".join(d.render() for d in demos) + "\n"
        ),
    }
