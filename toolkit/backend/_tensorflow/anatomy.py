"""TensorFlow's signal for the step's anatomy: a traced ``tf.function``'s ops by name scope, read
through XProf; gradients sit under ``gradient_tape/``, the batch comes by ``IteratorGetNext``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit.core import _trace_events as te
from toolkit.core._anatomy import Span, SpanKind, StepTrace


def layer_scope(token: str) -> Any:
    """A name scope the ops built under it carry in their names."""
    import tensorflow as tf

    return tf.name_scope(token)


def anatomy_refusal(model: Any) -> str | None:
    """Why a trace cannot take `model`'s step apart (None: it can): eager ops keep no name scope."""
    if getattr(model, "run_eagerly", False):
        return (
            "the model runs eagerly (run_eagerly=True): on TensorFlow an eager op keeps no "
            "name scope, so no op can be given its layer or phase; compile it without "
            "run_eagerly to take apart the step fit runs"
        )
    return None


def mark_input(model: Any) -> Any:
    """Nothing to add: the step's own IteratorGetNext op marks the wait for a batch."""
    import contextlib

    return contextlib.nullcontext()


def anatomy_trace(files: list[str]) -> StepTrace:
    """The spans of a TensorFlow trace window (ops, the step's get-next, the function call)."""
    events, processes, error = te.xspace_events(files)
    if error and not events:
        return StepTrace(error=error)
    device = {pid for pid, name in processes.items() if "/device:" in name}
    programs = te.hlo_metadata(files, events)  # XLA's compiled steps (jit_compile), where any ran
    # XProf groups each op the step's executor ran under its step (``group_id``); the ops of
    # tf.data's functions (a generator's PyFunc, a map's ops) run beside the step ungrouped.
    grouped = any("group_id" in (e.get("args") or {}) and (e.get("args") or {}).get("long_name")
                  for e in events)  # fmt: skip
    spans = []
    for e in events:
        args = e.get("args") or {}
        lane = f"{e.get('pid')}/{e.get('tid')}"
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        scoped = str(args.get("long_name") or args.get("tf_op") or "")
        if e["name"].startswith("Iterator::"):
            continue  # tf.data's iterators: the step's wait on them is its IteratorGetNext
        if scoped and grouped and "group_id" not in args and "hlo_op" not in args:
            continue  # the input pipeline's own ops, beside the step: the step waits on them
        if "hlo_op" in args and not (device and e.get("pid") not in device):
            # an op of an XLA program: its TensorFlow ops' names are in its metadata
            spans += te.xla_op_spans(e, programs, lane, "gradient_tape") or []
        elif scoped:
            op_type = scoped.rpartition(":")[2]
            on_host_beside_device = device and e.get("pid") not in device
            if op_type.startswith("IteratorGetNext") or "IteratorGetNext" in e["name"]:
                kind = SpanKind.INPUT
            elif on_host_beside_device:
                kind = SpanKind.CALL  # the host launching what the device computes
            else:
                kind = SpanKind.OP
            spans.append(
                Span(
                    start,
                    end,
                    lane,
                    kind,
                    te.tokens_in(scoped),
                    "gradient_tape" in scoped,
                    name=scoped.rpartition("/")[2],
                    call=te.call_in(scoped),
                )
            )
        elif e["name"].startswith("IteratorGetNextOp::DoCompute"):
            # the step's get-next computed on tf.data's iterator thread: the step waits on it
            spans.append(Span(start, end, lane, SpanKind.INPUT, name="IteratorGetNext"))
        elif "tf_function_call" in args:
            spans.append(Span(start, end, lane, SpanKind.CALL, name=e["name"]))
    return StepTrace(
        spans=tuple(spans),
        markers=tuple(te.step_markers(events, "train")),
        signal="TensorFlow's ops by name scope (the profiler's XSpace, read by XProf)",
        notes=(
            "input: the step's own IteratorGetNext wait; tf.data's threads and their ops "
            "run beside it",
        ),
        error=error,
    )


def raw_step(model: Any, batch: Any, per_call: int = 1) -> tuple[Any, str]:
    """The model's training step without Keras's trainer, compiled as ``fit`` compiles it: a
    ``tf.function`` with a ``GradientTape``, ``plain_loss`` (its ValueError), ``optimizer.apply``,
    `per_call` of them in one outer ``tf.function``. Returns ``(timed(n) -> seconds, words)``."""
    import time

    import tensorflow as tf

    from toolkit.backend._common import plain_loss
    from toolkit.core import compat

    loss_fn = plain_loss(model)
    x, y, _ = compat.keras().utils.unpack_x_y_sample_weight(batch)
    x, y = tf.nest.map_structure(tf.convert_to_tensor, (x, y))
    variables = model.trainable_variables
    jit = bool(getattr(model, "jit_compile", False))

    @tf.function(jit_compile=jit)
    def one(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, variables)
        model.optimizer.apply(grads, variables)
        return loss

    step = one
    if per_call > 1:

        @tf.function
        def step(x: Any, y: Any) -> Any:
            loss = one(x, y)
            for _ in tf.range(per_call - 1):
                loss = one(x, y)
            return loss

    def timed(n: int) -> float:
        t = time.perf_counter()
        out = None
        for _ in range(n):
            out = step(x, y)
        if out is not None:
            out.numpy()  # the last step done (each waits on the one before through the weights)
        return time.perf_counter() - t

    loop = f", {per_call} a call in one tf.function" if per_call > 1 else ""
    how = f"a tf.function{' (XLA)' if jit else ''} with a GradientTape, the loss, optimizer.apply"
    return timed, how + loop


def layer_alone(
    layer: Any,
    inputs: Sequence[tuple[tuple[int, ...], str]],
    *,
    backward: bool = True,
    jit: bool = False,
    input_grads: bool = True,
) -> Any:
    """One layer's step alone, as the model's step runs it: forward, and with `backward` the
    gradients of its weights and floating inputs (weights alone without `input_grads`), on random
    `inputs` of the shapes its calls saw, XLA-compiled where `jit`: ``timed(n) -> seconds``.
    The n calls run in one call's ``tf.while_loop``, as in the step's graph (from Python each would
    pay a host cost the step never pays), each pass on the last's result: none hoisted or pruned."""
    import time

    import tensorflow as tf

    xs = []
    for shape, dtype in inputs:
        kind = tf.as_dtype(dtype)
        xs.append(tf.random.uniform(shape, dtype=kind) if kind.is_floating
                  else tf.zeros(shape, dtype=kind))  # fmt: skip
    watched = [i for i, x in enumerate(xs) if x.dtype.is_floating] if input_grads else []

    def shifted(acc: Any) -> list[Any]:  # x + 0, where nothing can prove it 0
        never = acc < -3e38
        return [x + tf.cast(never, x.dtype) if x.dtype.is_floating or x.dtype.is_integer
                else x for x in xs]  # fmt: skip

    def summed(ts: Any) -> Any:
        return tf.add_n([tf.reduce_sum(tf.cast(getattr(t, "values", t), tf.float32))
                         for t in tf.nest.flatten(ts)])  # fmt: skip

    def body(i: Any, acc: Any) -> tuple[Any, Any]:
        args = shifted(acc)
        if not backward:
            return i + 1, acc + summed(layer(*args, training=True))
        with tf.GradientTape() as tape:
            tape.watch([args[j] for j in watched])
            out = summed(layer(*args, training=True))
        grads = tape.gradient(out, [*(args[j] for j in watched), *layer.trainable_variables])
        kept = [g for g in grads if g is not None]
        return i + 1, acc + (summed(kept) if kept else out)

    @tf.function(jit_compile=jit)
    def calls(n: Any) -> Any:
        return tf.while_loop(lambda i, acc: i < n, body, (tf.constant(0), tf.constant(0.0)))[1]

    def timed(n: int) -> float:
        t = time.perf_counter()
        calls(tf.constant(n)).numpy()
        return time.perf_counter() - t

    return timed
