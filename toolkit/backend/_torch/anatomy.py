"""PyTorch's signal for the step's anatomy: the profiler's Chrome trace, with the toolkit's
``record_function`` range around each layer's call and phase. Gradients run later, outside them,
joined to a layer by their forward op's sequence number; a kernel to its launch by correlation."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

from toolkit.core import _trace_events as te
from toolkit.core._anatomy import Span, SpanKind, StepTrace

_AUTOGRAD = "autograd::engine::evaluate_function"
# The longest gap between one layer's gradient functions taken as the engine's own scheduling.
ENGINE_GAP_US = 200.0


def layer_scope(token: str) -> Any:
    """A ``record_function`` range: the ops run inside it nest under it in the trace."""
    import torch

    return torch.profiler.record_function(token)


def anatomy_refusal(model: Any) -> str | None:
    """Why a trace cannot take `model`'s step apart: never (each op runs in its layer's range)."""
    return None


def mark_input(model: Any) -> Any:
    """Nothing to add: its profiler marks the data loader's reads."""
    import contextlib

    return contextlib.nullcontext()


def anatomy_trace(files: list[str]) -> StepTrace:
    """The spans of a PyTorch trace window (top-level ops, kernels, the data loader's reads)."""
    chrome = [f for f in files if f.endswith((".json", ".json.gz"))]
    if not chrome:
        return StepTrace(error="no PyTorch trace file was written")
    events, error = te.chrome_events(chrome[-1])
    if error:
        return StepTrace(error=error)
    host = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime")]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    by_lane: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for e in host:
        by_lane[f"{e.get('pid')}/{e.get('tid')}"].append(e)

    seq_tokens: dict[int, tuple[str, ...]] = {}
    ops: list[tuple[str, dict[str, Any], tuple[str, ...], bool]] = []
    launches: dict[Any, tuple[tuple[str, ...], bool]] = {}
    spans: list[Span] = []
    for lane, lane_events in by_lane.items():
        for e, stack in te.innermost(lane_events):
            tokens = tuple(t for s in stack for t in te.tokens_in(s["name"]))
            in_autograd = next((s for s in stack if s["name"].startswith(_AUTOGRAD)), None)
            top_op = next((s for s in stack if s.get("cat") == "cpu_op"), None)
            args = e.get("args") or {}
            if e.get("cat") == "cpu_op":
                seq = args.get("Sequence number")
                if seq is not None and in_autograd is None and not e["name"].startswith(_AUTOGRAD):
                    seq_tokens.setdefault(seq, tokens)
                if top_op is None:
                    ops.append((lane, e, tokens, e["name"].startswith(_AUTOGRAD)))
            elif e.get("cat") == "cuda_runtime" and "correlation" in args:
                launches[args["correlation"]] = (tokens, in_autograd is not None, top_op)
            elif e.get("cat") == "user_annotation":
                start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
                if e["name"].startswith("enumerate(DataLoader)"):
                    spans.append(Span(start, end, lane, SpanKind.INPUT, name=e["name"]))
                elif te.tokens_in(e["name"]):  # a scope: its host work is its own
                    own = (*tokens, *te.tokens_in(e["name"]))
                    spans.append(Span(start, end, lane, SpanKind.CALL, own, name=e["name"]))

    kind = SpanKind.CALL if kernels else SpanKind.OP
    made = []
    for lane, e, tokens, backward in sorted(ops, key=lambda o: (o[0], o[1]["ts"])):
        if backward:
            tokens = seq_tokens.get((e.get("args") or {}).get("Sequence number"), tokens)
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        last = made[-1] if made else None
        if (last is not None and backward and last.backward and last.lane == lane
                and last.tokens == tokens and 0 <= start - last.end <= ENGINE_GAP_US):  # fmt: skip
            # the autograd engine between two gradient functions of one layer: that layer's
            made[-1] = dataclasses.replace(last, end=start)
        made.append(Span(start, end, lane, kind, tokens, backward, name=e["name"]))
    spans += made
    for k in kernels:
        args = k.get("args") or {}
        tokens, backward, top = launches.get(args.get("correlation"), ((), False, None))
        if backward and top is not None:
            tokens = seq_tokens.get((top.get("args") or {}).get("Sequence number"), tokens)
        start, end = float(k["ts"]), float(k["ts"]) + float(k["dur"])
        lane = f"stream {args.get('stream', k.get('tid'))}"
        spans.append(Span(start, end, lane, SpanKind.OP, tokens, backward, name=k["name"]))
    return StepTrace(
        spans=tuple(spans),
        markers=tuple(te.step_markers(events, "ProfilerStep#")),
        signal="PyTorch's profiler: the toolkit's record_function ranges, gradients joined "
        "by autograd's sequence numbers" + (", kernels by correlation id" if kernels else ""),
        notes=("input: the data loader's reads, as PyTorch's profiler marks them",),
    )


def raw_step(model: Any, batch: Any, per_call: int = 1) -> tuple[Any, str]:
    """The model's training step without Keras's trainer, eager: forward, ``plain_loss`` (and its
    ValueError), ``backward()``, ``optimizer.apply``. Returns ``(timed(n) -> seconds, words)``."""
    import time

    import torch

    from toolkit.backend._common import plain_loss
    from toolkit.core import compat

    keras = compat.keras()
    loss_fn = plain_loss(model)
    x, y, _ = keras.utils.unpack_x_y_sample_weight(batch)
    x, y = keras.tree.map_structure(keras.ops.convert_to_tensor, (x, y))
    variables = model.trainable_weights

    def step() -> Any:
        loss = loss_fn(y, model(x, training=True))
        model.zero_grad()
        loss.backward()
        grads = [v.value.grad for v in variables]
        with torch.no_grad():
            model.optimizer.apply(grads, variables)
        return loss

    def timed(n: int) -> float:
        t = time.perf_counter()
        loss = None
        for _ in range(n * per_call):
            loss = step()
        if loss is not None:
            loss.item()  # the last step done: its loss reaches the host after its work
        return time.perf_counter() - t

    return timed, "forward, the loss, backward() and optimizer.apply, eager"


def layer_alone(
    layer: Any,
    inputs: Sequence[tuple[tuple[int, ...], str]],
    *,
    backward: bool = True,
    jit: bool = False,
    input_grads: bool = True,
) -> Any:
    """One layer's step alone, eager as the model's step runs it: forward with autograd, and with
    `backward` the gradients of its weights and floating inputs (weights alone without
    `input_grads`), on random `inputs` of the shapes its calls saw: ``timed(n) -> seconds``."""
    import time

    import torch

    from toolkit.core import compat

    keras = compat.keras()
    xs = []
    for shape, dtype in inputs:
        if "float" in dtype:
            x = keras.random.uniform(shape, dtype=dtype)
            x.requires_grad_(input_grads)
        else:
            x = keras.ops.zeros(shape, dtype=dtype)
        xs.append(x)

    def timed(n: int) -> float:
        t = time.perf_counter()
        total = None
        for _ in range(n):
            layer.zero_grad()
            for x in xs:
                x.grad = None
            y = layer(*xs, training=True)
            total = sum(part.float().sum() for part in keras.tree.flatten(y))
            if backward:
                total.backward()
        if total is not None:
            total.item()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter() - t

    return timed
