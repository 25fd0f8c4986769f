"""Which kernels a TensorFlow computation really ran, parsed into :class:`Kernels`.

Graph mode: the partition graphs after Grappler (its remapper fuses a fixed list of patterns); XLA:
the optimized HLO entry's computing instructions, a ``fusion`` with its ops; eager: one per op."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from toolkit.bench.measure import error_reason, sync
from toolkit.core import _fields as fields

__all__ = [
    "Kernels",
    "kernels_text",
]

_GRAPH_NON_KERNELS = frozenset(  # graph nodes that move or name data rather than compute
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
_HLO_NON_KERNELS = frozenset(  # HLO entry instructions that launch no work of their own
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
class Kernels(fields.Record):
    """What one compiled computation ran.

    Attributes:
        names: one entry per kernel (``_MklMatMul``, ``fusion(kLoop: AddV2, Relu6, Mul, RealDiv)``).
        fusions: one line per fused group: what it holds.
        source: where this was read from, or why it could not be."""

    EXTRA = ("count",)

    names: tuple[str, ...]
    fusions: tuple[str, ...]
    source: str

    @property
    def count(self) -> int:
        return len(self.names)


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
    """An optimized HLO module's entry instructions that compute; a fusion as its TF ops."""
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


def _graph_node_name(node: Any) -> str:
    fused = list(node.attr["fused_ops"].list.s) if "fused_ops" in node.attr else []
    return f"{node.op}[{'+'.join(s.decode() for s in fused)}]" if fused else node.op


def graph_kernels(fn: Callable[..., Any], args: Sequence[Any], device_name: str) -> Kernels:
    """The compute nodes of the partition graphs that ran `fn` as a ``tf.function``."""
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


def kernels_text(count: int) -> str:
    """``1 kernel`` / ``5 kernels``."""
    return f"{count} kernel" + ("" if count == 1 else "s")
