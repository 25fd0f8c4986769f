"""A profiler trace read as events, one parser for the report's trace section and anatomy readers.

XSpace goes through XProf's own ``trace_viewer`` converter. XLA keeps each op's ``jax.named_scope``
path in its ``op_name``, joining a fused program's time to its layers. Imports no framework; a bad
file never raises: a reader returns what it could read and an error."""

from __future__ import annotations

import collections
import functools
import gzip
import json
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from toolkit.core.files import parse_json

Event = dict[str, Any]  # one Chrome trace event, as the file has it


def xspace_events(files: list[str]) -> tuple[list[Event], dict[Any, str], str | None]:
    """Complete events of XSpace `files`, process (plane) names by ``pid``, and an error or None."""
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError:
        return [], {}, "XProf is not installed (pip install 'keras-perf-toolkit[profile]')"
    from toolkit.core import native_logs

    events: list[Event] = []
    names: dict[Any, str] = {}
    for path in files:
        try:
            with native_logs.held():  # its converter's C++ lines
                data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
            raw = json.loads(text or "{}").get("traceEvents", ())
        except Exception as e:  # noqa: BLE001 - a converter failure is said, never raised
            why = f"{type(e).__name__}: {e}"
            return events, names, f"XProf could not read {os.path.basename(path)}: {why}"
        events += [e for e in raw if _complete(e)]
        names.update(
            (e.get("pid"), str((e.get("args") or {}).get("name", "")))
            for e in raw
            if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name"
        )
    return events, names, None


def chrome_events(path: str) -> tuple[list[Event], str | None]:
    """Complete events of a Chrome trace ``.json`` or ``.json.gz`` file, and an error or None."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            data = parse_json(f)
    except (OSError, ValueError, EOFError) as e:
        return [], f"cannot read {path}: {e}"
    raw = data.get("traceEvents", ()) if isinstance(data, dict) else data
    return [e for e in raw if _complete(e)] if isinstance(raw, list) else [], None


def _complete(e: Any) -> bool:
    return (
        isinstance(e, dict)
        and e.get("ph") == "X"
        and isinstance(e.get("ts"), int | float)
        and isinstance(e.get("dur"), int | float)
        and isinstance(e.get("name"), str)
    )


def step_events(events: list[Event], name: str) -> list[Event]:
    """Step markers (``train 7``, ``ProfilerStep#7``) in time order; a TF loop's: `name` alone."""
    found = []
    for e in events:
        n = e["name"]
        rest = n[len(name) :].strip()
        if n.startswith(name) and (rest.isdigit() or not rest):
            found.append(e)
    return sorted(found, key=lambda e: (float(e["ts"]), float(e["dur"])))


def step_markers(events: list[Event], name: str) -> list[tuple[float, float]]:
    """``(start, end)`` of each step marker (:func:`step_events`), in time order."""
    return [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in step_events(events, name)]


def innermost(events: list[Event]) -> Iterator[tuple[Event, list[Event]]]:
    """Each event of one thread with the events enclosing it (outermost first), in time order."""
    stack: list[Event] = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        end = e["ts"] + e["dur"]
        while stack and stack[-1]["ts"] + stack[-1]["dur"] < end - 1e-3:
            stack.pop()
        yield e, list(stack)
        stack.append(e)


@functools.cache
def xspace_messages() -> dict[str, Any]:
    """Classes for XSpace and JAX's ``HloProto``/``HloModule`` from descriptors of only the fields
    used (other fields kept as unknown ones): XProf ships no Python module for these, TensorFlow's
    need ``import tensorflow``. ImportError without ``protobuf``."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(
        name="toolkit_trace_subset.proto", package="tk", syntax="proto2"
    )

    def message(name: str, fields: list[tuple[str, int, int, int, str]], parent: Any = None):
        m = (parent.nested_type if parent is not None else fd.message_type).add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
        return m

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("XSpace", [("planes", 1, F.TYPE_MESSAGE, rep, ".tk.XPlane")])
    plane = message(
        "XPlane",
        [
            ("name", 2, F.TYPE_STRING, opt, ""),
            ("lines", 3, F.TYPE_MESSAGE, rep, ".tk.XLine"),
            ("event_metadata", 4, F.TYPE_MESSAGE, rep, ".tk.XPlane.EventEntry"),
            ("stat_metadata", 5, F.TYPE_MESSAGE, rep, ".tk.XPlane.StatEntry"),
        ],
    )
    for entry, value in (("EventEntry", ".tk.XEventMetadata"), ("StatEntry", ".tk.XStatMeta")):
        m = message(
            entry,
            [("key", 1, F.TYPE_INT64, opt, ""), ("value", 2, F.TYPE_MESSAGE, opt, value)],
            plane,
        )
        m.options.map_entry = True
    message("XLine", [("events", 4, F.TYPE_MESSAGE, rep, ".tk.XEvent")])
    message(
        "XEvent",
        [("metadata_id", 1, F.TYPE_INT64, opt, ""), ("stats", 4, F.TYPE_MESSAGE, rep, ".tk.XStat")],
    )
    message(
        "XEventMetadata",
        [
            ("id", 1, F.TYPE_INT64, opt, ""),
            ("name", 2, F.TYPE_STRING, opt, ""),
            ("stats", 5, F.TYPE_MESSAGE, rep, ".tk.XStat"),
        ],
    )
    # A oneof in xplane.proto: proto2 keeps which kind is set, so a 0 stays of its kind.
    message(
        "XStat",
        [
            ("metadata_id", 1, F.TYPE_INT64, opt, ""),
            ("uint64_value", 3, F.TYPE_UINT64, opt, ""),
            ("int64_value", 4, F.TYPE_INT64, opt, ""),
            ("bytes_value", 6, F.TYPE_BYTES, opt, ""),
        ],
    )
    message("XStatMeta", [("id", 1, F.TYPE_INT64, opt, ""), ("name", 2, F.TYPE_STRING, opt, "")])
    message("HloProto", [("hlo_module", 1, F.TYPE_MESSAGE, opt, ".tk.HloModule")])
    message(
        "HloModule",
        [("name", 1, F.TYPE_STRING, opt, ""), ("computations", 3, F.TYPE_MESSAGE, rep, ".tk.Comp")],
    )
    message(
        "Comp",
        [
            ("name", 1, F.TYPE_STRING, opt, ""),
            ("instructions", 2, F.TYPE_MESSAGE, rep, ".tk.Instr"),
            ("id", 5, F.TYPE_INT64, opt, ""),
        ],
    )
    message(
        "Instr",
        [
            ("name", 1, F.TYPE_STRING, opt, ""),
            ("opcode", 2, F.TYPE_STRING, opt, ""),
            ("metadata", 7, F.TYPE_MESSAGE, opt, ".tk.OpMeta"),
            ("called", 38, F.TYPE_INT64, rep, ""),
        ],
    )
    message("OpMeta", [("op_name", 2, F.TYPE_STRING, opt, "")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tk.{name}"))
        for name in ("XSpace", "HloProto", "HloModule")
    }


def hlo_metadata(
    files: list[str], events: list[Event] = ()
) -> dict[tuple[str, str], tuple[str, ...]]:
    """``(module, instruction) -> op names`` (a fusion: all it holds) of XSpace `files`' programs;
    of several with one module name, the newest holding every op `events` ran under it."""
    try:
        classes = xspace_messages()
    except Exception:  # noqa: BLE001 - no protobuf runtime: nothing joined, said by the caller
        return {}
    found: list[tuple[int, dict[tuple[str, str], tuple[str, ...]]]] = []
    for path in files:
        try:
            with open(path, "rb") as f:
                space = classes["XSpace"].FromString(f.read())
        except Exception:  # noqa: BLE001 - an unreadable file joins nothing
            continue
        for plane in space.planes:
            if "metadata" not in plane.name:
                continue
            proto_id = {k for k, v in plane.stat_metadata.items() if v.name == "Hlo Proto"}
            for meta in plane.event_metadata.values():
                number = re.search(r"\((\d+)\)$", meta.name)
                for stat in meta.stats:
                    if stat.metadata_id in proto_id and stat.bytes_value:
                        program = _program(classes, stat.bytes_value)
                        found.append((int(number.group(1)) if number else -1, program))
    ran: dict[str, set[str]] = collections.defaultdict(set)
    for e in events:
        args = e.get("args") or {}
        if "hlo_op" in args:
            ran[str(args.get("hlo_module", ""))].add(str(args["hlo_op"]))
    best: dict[str, tuple[tuple[bool, int], dict[tuple[str, str], tuple[str, ...]]]] = {}
    for number, program in found:
        if not program:
            continue
        module = next(iter(program))[0]
        covers = all((module, op) in program for op in ran.get(module, ()))
        rank = (covers, number)
        if module not in best or rank > best[module][0]:
            best[module] = (rank, program)
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for _, program in best.values():
        out.update(program)
    return out


def _program(classes: Mapping[str, Any], data: bytes) -> dict[tuple[str, str], tuple[str, ...]]:
    try:
        module = classes["HloProto"].FromString(data).hlo_module
        if not module.computations:
            module = classes["HloModule"].FromString(data)
    except Exception:  # noqa: BLE001
        return {}
    by_id = {c.id: c for c in module.computations}
    memo: dict[int, list[str]] = {}

    def held(comp_id: int, depth: int = 0) -> list[str]:
        if comp_id in memo or depth > 8:
            return memo.get(comp_id, [])
        names: list[str] = []
        for ins in by_id[comp_id].instructions if comp_id in by_id else ():
            if ins.called:
                for c in ins.called:
                    names += held(c, depth + 1)
            elif ins.metadata.op_name:
                names.append(ins.metadata.op_name)
        memo[comp_id] = names
        return names

    out = {}
    for comp in module.computations:
        for ins in comp.instructions:
            names = [n for c in ins.called for n in held(c)] if ins.called else []
            if not names and ins.metadata.op_name:
                names = [ins.metadata.op_name]
            out[(module.name, ins.name)] = tuple(collections.Counter(names))
    return out


# Scope tokens: ``kpl<N>`` a layer, others a phase; TensorFlow's ``_N`` (a scope reopened) dropped.
_TOKEN = re.compile(
    r"(?<![A-Za-z0-9])(kp(?:l\d+|opt|loss|metrics|step|model))(?:_\d+)?(?![A-Za-z0-9])"
)


def tokens_in(text: str) -> tuple[str, ...]:
    """The scope tokens in an op's scoped name, outermost first."""
    return tuple(_TOKEN.findall(text))


def layer_token(tokens: tuple[str, ...]) -> str | None:
    """The innermost layer token of `tokens`; None where none is a layer's."""
    return next((t for t in reversed(tokens) if t.startswith("kpl") and t[3:].isdigit()), None)


_CALL = re.compile(r"kpl\d+(?:_\d+)?")


def call_in(text: str) -> str:
    """The op's scopes to its innermost layer token (unique per TF call), minus gradient_tape."""
    parts = [p for p in text.split("/") if p != "gradient_tape"]
    at = [i for i, part in enumerate(parts) if _CALL.fullmatch(part)]
    return "/".join(parts[: at[-1] + 1]) if at else ""


def xla_op_spans(
    event: Event, programs: Mapping[tuple[str, str], tuple[str, ...]], lane: str, backward: str
) -> list[Any] | None:
    """One XLA op's spans, one per distinct ``(tokens, gradient)`` in its program's metadata, fused
    when several layers; `backward` marks a gradient op. None where the program is unknown."""
    from toolkit.core._anatomy import Span, SpanKind

    args = event.get("args") or {}
    op_names = programs.get((str(args.get("hlo_module", "")), str(args.get("hlo_op", ""))))
    if op_names is None and programs:
        return None
    groups = list({(tokens_in(n), backward in n): None for n in op_names or ()}) or [((), False)]
    layers = {layer_token(k) for k, _ in groups}
    fused = len(layers - {None}) > 1
    start, end = float(event["ts"]), float(event["ts"]) + float(event["dur"])
    return [
        Span(start, end, lane, SpanKind.OP, tokens, grad, fused, event["name"])
        for tokens, grad in groups
    ]
