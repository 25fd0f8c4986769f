"""What fusion buys: a matmul with a ``hard_swish`` epilogue, and conv2d + bias + relu.

The TVM-on-M1 post fuses ``hard_swish(x) = x * relu6(x + 3) / 6`` into the matmul of a BERT
layer (M, N, K = 128, 3072, 768): a traditional framework runs it as five kernels (the gemm,
then add, relu6, multiply, divide, each reading and writing the whole M x N result), a
fusing compiler as one. This module measures the same chain in TensorFlow's three modes and
says what actually fused, from what TensorFlow exposes:

* graph mode: the partition graphs the runtime executed after Grappler's rewrites (captured
  with the eager context's graph collection). Grappler's remapper (oneDNN on x86 CPUs, cuDNN /
  cuBLASLt on CUDA) fuses a fixed list of patterns: conv2d + bias + relu is on it, the
  hard_swish chain is not.
* XLA: the optimized HLO module (``experimental_get_compiler_ir(stage="optimized_hlo")``); each
  top-level instruction of its entry computation that computes is a kernel, and each
  ``fusion`` lists the TensorFlow ops it holds.
* eager: one kernel per op, by construction.

GFLOP/s count the matmul's (or convolution's) FLOPs only, as the TVM post does; the
element-wise epilogue adds a few FLOPs per output element, well under 1 % here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from toolkit.bench.measure import MODES, Timing, error_reason, inputs_on, run_case, sync

# Graph nodes that move or name data rather than compute.
_GRAPH_NON_KERNELS = frozenset(
    {
        "_Arg",
        "_Retval",
        "_DeviceArg",
        "_DeviceRetval",
        "Const",
        "HostConst",
        "Identity",
        "NoOp",
        "_Send",
        "_Recv",
        "_HostSend",
        "_HostRecv",
        "Placeholder",
    }
)
# HLO entry instructions that launch no work of their own.
_HLO_NON_KERNELS = frozenset(
    {
        "parameter",
        "constant",
        "tuple",
        "get-tuple-element",
        "bitcast",
        "after-all",
        "partition-id",
        "replica-id",
    }
)
_HLO_BORING = frozenset({"parameter", "constant", "broadcast", "bitcast", "reshape", "tuple"})

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*.*?\s([a-z][\w\-]*)\(")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_KIND = re.compile(r"kind=(k\w+)")
_OP_TYPE = re.compile(r'op_type="([^"]+)"')
_TARGET = re.compile(r'custom_call_target="([^"]+)"')


@dataclasses.dataclass(frozen=True)
class Kernels:
    """What one compiled computation ran.

    Attributes:
        names: one entry per kernel, e.g. ``_MklMatMul`` or
            ``fusion(kLoop: AddV2, Relu6, Mul, RealDiv)``.
        fusions: one line per fused group: what it holds.
        source: where this was read from, or why it could not be.
    """

    names: tuple[str, ...]
    fusions: tuple[str, ...]
    source: str

    @property
    def count(self) -> int:
        return len(self.names)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "count": self.count}


# ---------------------------------------------------------------------------- HLO


def parse_hlo(text: str) -> tuple[str | None, dict[str, list[tuple[str, str, str]]]]:
    """``(entry name, {computation: [(instruction, opcode, line), ...]})`` of HLO text."""
    computations: dict[str, list[tuple[str, str, str]]] = {}
    entry, current = None, None
    for line in text.splitlines():
        if current is None:
            m = _COMPUTATION.match(line.strip())
            if m and not line.startswith(" "):
                current = m.group(2)
                computations[current] = []
                if m.group(1):
                    entry = current
            continue
        if line.strip() == "}":
            current = None
            continue
        m = _INSTRUCTION.match(line)
        if m:
            computations[current].append((m.group(1), m.group(2), line))
    return entry, computations


def _op_types(lines: Sequence[str]) -> list[str]:
    found: dict[str, None] = {}
    for line in lines:
        m = _OP_TYPE.search(line)
        if m:
            found.setdefault(m.group(1), None)
    return list(found)


def hlo_kernels(text: str) -> Kernels:
    """The kernels of an optimized HLO module: its entry computation's computing
    instructions; each fusion is described by the TensorFlow ops (``op_type``) it holds."""
    entry, computations = parse_hlo(text)
    if entry is None:
        return Kernels((), (), "optimized HLO: no ENTRY computation found")
    names, fusions = [], []
    for _, opcode, line in computations[entry]:
        if opcode in _HLO_NON_KERNELS:
            continue
        if opcode == "fusion":
            called = _CALLS.search(line)
            inner = computations.get(called.group(1), []) if called else []
            kind = _KIND.search(line)
            ops = _op_types([ln for _, op, ln in inner if op not in ("parameter",)])
            hlo_ops = list(dict.fromkeys(op for _, op, _ in inner if op not in _HLO_BORING))
            label = f"fusion({kind.group(1) if kind else '?'}: {', '.join(ops) or '?'})"
            names.append(label)
            fusions.append(
                f"one {kind.group(1) if kind else ''} fusion holds {', '.join(ops) or '?'} "
                f"(HLO {', '.join(hlo_ops) or '?'})"
            )
        elif opcode == "custom-call":
            target = _TARGET.search(line)
            names.append(f"custom-call({target.group(1) if target else '?'})")
        else:
            ops = _op_types([line])
            names.append(f"{opcode}({ops[0]})" if ops else opcode)
    return Kernels(tuple(names), tuple(fusions), "XLA optimized HLO")


def xla_kernels(fn: Callable[..., Any], args: Sequence[Any], device_name: str) -> Kernels:
    """:func:`hlo_kernels` of `fn` compiled with XLA for `device_name`."""
    import tensorflow as tf

    try:
        compiled = tf.function(fn, autograph=False, jit_compile=True)
        with tf.device(device_name):  # the IR is compiled for the scope's device
            text = compiled.experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    except Exception as e:  # noqa: BLE001 - the fusion report is a nicety, the timing stands
        return Kernels((), (), f"not exposed: {error_reason(e)}")
    return hlo_kernels(text)


# ---------------------------------------------------------------------------- graph mode


def _graph_node_name(node: Any) -> str:
    fused = list(node.attr["fused_ops"].list.s) if "fused_ops" in node.attr else []
    return f"{node.op}[{'+'.join(s.decode() for s in fused)}]" if fused else node.op


def graph_kernels(fn: Callable[..., Any], args: Sequence[Any], device_name: str) -> Kernels:
    """The compute nodes of the partition graphs that ran `fn` as a ``tf.function`` (after
    Grappler's rewrites), from the eager context's graph collection."""
    import tensorflow as tf

    try:
        from tensorflow.python.eager import context

        ctx = context.context()
        fresh = tf.function(fn, autograph=False)  # graphs are collected when instantiated
        ctx.enable_graph_collection()
        try:
            with tf.device(device_name):
                sync(fresh(*args))
            metadata = ctx.export_run_metadata()
        finally:
            ctx.disable_graph_collection()
    except Exception as e:  # noqa: BLE001 - a private API: report, do not fail the timing
        return Kernels((), (), f"not exposed: {error_reason(e)}")
    nodes = [
        node
        for function_graph in metadata.function_graphs
        for graph in function_graph.partition_graphs
        for node in graph.node
        if node.op not in _GRAPH_NON_KERNELS
    ]
    if not nodes:
        return Kernels((), (), "not exposed: the runtime returned no partition graphs")
    names = tuple(_graph_node_name(n) for n in nodes)
    fusions = tuple(
        f"{name} is one kernel (a Grappler remapper pattern)"
        for name in names
        if "[" in name or "Fused" in name
    )
    return Kernels(names, fusions, "graph partitions after Grappler")


def op_types(fn: Callable[..., Any], args: Sequence[Any]) -> tuple[str, ...]:
    """The TensorFlow ops `fn` is written as, in order (what eager runs, a kernel each)."""
    import tensorflow as tf

    graph = tf.function(fn, autograph=False).get_concrete_function(*args).graph
    return tuple(op.type for op in graph.get_operations() if op.type not in _GRAPH_NON_KERNELS)


# ---------------------------------------------------------------------------- the demos


@dataclasses.dataclass(frozen=True)
class Variant:
    """One timed computation of a demo in one mode."""

    name: str
    mode: str
    timing: Timing | None
    reason: str | None
    flops: float
    kernels: Kernels

    @property
    def gflops_per_s(self) -> float | None:
        return self.flops / (self.timing.ms * 1e-3) / 1e9 if self.timing else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "ms": self.timing.ms if self.timing else None,
            "timing": self.timing.to_dict() if self.timing else None,
            "reason": self.reason,
            "flops": self.flops,
            "gflops_per_s": self.gflops_per_s,
            "kernels": self.kernels.to_dict(),
        }


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
        """``(fused, unfused)`` chain variants: the fewest kernels (XLA on a tie) against the
        most (graph on a tie); None when nothing fused or kernels could not be read."""
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
        from toolkit.bench.table import format_ms

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
        from toolkit.bench.table import speedup_line

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

    def to_dict(self) -> dict[str, Any]:
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


def kernels_text(count: int) -> str:
    """``1 kernel`` / ``5 kernels``."""
    return f"{count} kernel" + ("" if count == 1 else "s")


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

    device = device or devices.resolve("auto")
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

    device = device or devices.resolve("auto")
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
    import json
    import os

    from toolkit.report import _jsonable, atomic_write, capture_environment

    record = {
        "schema": "toolkit.fusion/1",
        "settings": settings,
        "environment": capture_environment(),
        "demos": [d.to_dict() for d in demos],
    }
    return {
        "json": atomic_write(
            os.path.join(directory, "fusion.json"), json.dumps(_jsonable(record), indent=1)
        ),
        "markdown": atomic_write(
            os.path.join(directory, "fusion.md"), "\n\n".join(d.render() for d in demos) + "\n"
        ),
    }
