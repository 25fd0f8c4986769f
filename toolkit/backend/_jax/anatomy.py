"""JAX's signal for the step's anatomy: the compiled program's ops as the profiler times them,
joined to the XSpace file's program metadata, whose ``op_name`` keeps each ``jax.named_scope`` path
(``transpose`` marks the gradient); a fusion's time goes to each scope it holds (fused: several)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from toolkit.core import _trace_events as te
from toolkit.core import compat
from toolkit.core._anatomy import Span, SpanKind, StepTrace


def layer_scope(token: str) -> Any:
    """A named scope XLA keeps in the ``op_name`` of every op traced under it."""
    import jax

    return jax.named_scope(token)


INPUT_RANGE = "kpinput"  # the profiler range around each batch the train function reads
# An XLA op event's name for a CUDA graph's worth of kernels (``command_buffer_1``)
COMMAND_BUFFER = "command_buffer"


def anatomy_refusal(model: Any) -> str | None:
    """Why a trace cannot take `model`'s step apart (None: it can): an eager or unjitted step
    (Keras's ``"auto"`` for a layer ruling XLA out) compiles each op alone, without named scopes."""
    if getattr(model, "run_eagerly", False):
        return (
            "the model runs eagerly (run_eagerly=True): on JAX each eager operation is "
            "compiled alone, without the named scopes around it, so no op can be given its "
            "layer or phase; compile it without run_eagerly to take apart the step fit runs"
        )
    if getattr(model, "jit_compile", True) is not False:
        return None
    ruling = compat.xla_ruled_out(model)
    if not ruling:
        return (
            "the step is not compiled (jit_compile=False): on JAX Keras then runs it op by "
            "op, each operation compiled alone, without the named scopes around it, so no op "
            "can be given its layer or phase; compile it with jit_compile=True to take apart "
            "the step fit runs"
        )
    return (
        f"the step is not compiled: {compat.ruling_xla_out(ruling)}, so Keras runs JAX's "
        "step op by op, each operation compiled alone, without the named scopes around it, "
        "and no op can be given its layer or phase; apply such layers to the dataset (a "
        "tf.data or Grain map) instead, and the step compiles"
    )


@contextlib.contextmanager
def mark_input(model: Any) -> Iterator[None]:
    """While open, each batch `model`'s train function reads is in an :data:`INPUT_RANGE` range."""
    import jax

    original = getattr(model, "train_function", None)
    if original is None:
        yield
        return

    def batches(iterator: Any) -> Iterator[Any]:
        it = iter(iterator)
        while True:
            with jax.profiler.TraceAnnotation(INPUT_RANGE):
                try:
                    batch = next(it)
                except StopIteration:
                    return
            yield batch

    def marked(state: Any, iterator: Any, *args: Any, **kwargs: Any) -> Any:
        return original(state, batches(iterator), *args, **kwargs)

    model.train_function = marked
    try:
        yield
    finally:
        if model.train_function is marked:  # not rebuilt by Keras since
            model.train_function = original


def unjoined_notes(joined: float, unjoined: float, buffered: float) -> list[str]:
    """Why some ops' time joined no layer, where over 5 %: `buffered` ran in XLA's command buffers
    (CUDA graphs); `unjoined` came from programs the trace has no metadata for. Both are other."""
    total = max(joined + unjoined + buffered, 1e-9)
    notes = []
    if buffered > 0.05 * total:
        notes.append(
            f"{buffered / total:.0%} of the ops' time ran inside XLA's command buffers (CUDA "
            "graphs), which the trace names by the buffer, not by its ops: counted as other; "
            "to see it layer by layer, start the process with "
            "XLA_FLAGS=--xla_gpu_enable_command_buffer= (the step then launches each kernel "
            "on its own, as without CUDA graphs, and may run slower)"
        )
    if unjoined > 0.05 * total:
        notes.append(
            f"{unjoined / total:.0%} of the ops' time came from programs whose metadata the "
            "trace did not carry: counted as other"
        )
    return notes


def anatomy_trace(files: list[str]) -> StepTrace:
    """The spans of a JAX trace window (XLA's ops, the host's transfers and calls)."""
    events, processes, error = te.xspace_events(files)
    if error and not events:
        return StepTrace(error=error)
    programs = te.hlo_metadata(files, events)
    device = {pid for pid, name in processes.items() if "/device:" in name}
    spans: list[Span] = []
    joined, unjoined, buffered = 0.0, 0.0, 0.0
    for e in events:
        args = e.get("args") or {}
        lane = f"{e.get('pid')}/{e.get('tid')}"
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        name = e["name"]
        if "hlo_op" in args:
            if device and e.get("pid") not in device:
                spans.append(Span(start, end, lane, SpanKind.CALL, name=name))
                continue
            if (str(args.get("hlo_module", "")), str(args["hlo_op"])) in programs:
                joined += end - start
            elif str(args["hlo_op"]).startswith(COMMAND_BUFFER):
                buffered += end - start
            else:
                unjoined += end - start
            spans += te.xla_op_spans(e, programs, lane, "transpose(") or [
                Span(start, end, lane, SpanKind.OP, name=name)
            ]
        elif name.startswith(("PjitFunction", "PmapFunction")) or (
            not device and name.startswith("ThunkExecutor::Execute")
        ):
            # the host's call into a program, or XLA's CPU runtime running one: the program's time
            spans.append(Span(start, end, lane, SpanKind.CALL, name=name))
        elif name.startswith("DevicePut") or name == INPUT_RANGE:
            spans.append(Span(start, end, lane, SpanKind.INPUT, name=name))
    notes = [
        "input and Keras's work between steps: the host's batch transfers are timed; the "
        "rest of the host's work shows where nothing computes",
        *unjoined_notes(joined, unjoined, buffered),
    ]
    return StepTrace(
        spans=tuple(spans),
        markers=tuple(te.step_markers(events, "train")),
        signal="XLA's ops joined to the compiled program's named scopes (the profiler's "
        "XSpace, read by XProf)",
        notes=tuple(notes),
        error=error,
    )


def raw_step(model: Any, batch: Any, per_call: int = 1) -> tuple[Any, str]:
    """The model's training step without Keras's trainer: ``stateless_call``, ``jax.value_and_grad``
    of ``plain_loss`` (and its ValueError) and ``stateless_apply``, jitted, the state donated as
    Keras does (on copies). Returns ``(timed(n) -> seconds for n × `per_call` steps, words)``."""
    import time

    import jax
    import jax.numpy as jnp

    from toolkit.backend._common import plain_loss
    from toolkit.core import compat

    loss_fn = plain_loss(model)
    x, y, _ = compat.keras().utils.unpack_x_y_sample_weight(batch)
    optimizer = model.optimizer

    def loss_and_state(tv: Any, ntv: Any, x: Any, y: Any) -> Any:
        y_pred, ntv = model.stateless_call(tv, ntv, x, training=True)
        return loss_fn(y, y_pred), ntv

    def step(tv: Any, ntv: Any, ov: Any, x: Any, y: Any) -> Any:
        (loss, ntv), grads = jax.value_and_grad(loss_and_state, has_aux=True)(tv, ntv, x, y)
        tv, ov = optimizer.stateless_apply(ov, grads, tv)
        return tv, ntv, ov, loss

    # jitted as Keras jits the model's own step (not where a layer rules XLA out)
    jitted = bool(getattr(model, "jit_compile", True))
    if jitted:
        step = jax.jit(step, donate_argnums=(0, 1, 2))
    state = [
        [jnp.array(v.value, copy=True) for v in vs]
        for vs in (model.trainable_variables, model.non_trainable_variables, optimizer.variables)
    ]
    x, y = jax.tree.map(jnp.asarray, (x, y))

    def timed(n: int) -> float:
        t = time.perf_counter()
        for _ in range(n * per_call):
            tv, ntv, ov, _ = step(*state, x, y)
            state[:] = [tv, ntv, ov]
        jax.block_until_ready(state)
        return time.perf_counter() - t

    how = "stateless_call, jax.value_and_grad and stateless_apply"
    return timed, f"jax.jit of {how}" if jitted else f"{how}, op by op (as the model's step)"


# Each way of timing a jitted layer runs about this long (at most this many calls), twice.
PICK_S, PICK_MOST = 0.01, 64


def layer_alone(
    layer: Any,
    inputs: Sequence[tuple[tuple[int, ...], str]],
    *,
    backward: bool = True,
    jit: bool = True,
    input_grads: bool = True,
) -> Any:
    """One layer's step alone, as the model's step runs it: its forward, and with `backward` the
    gradients of its weights and floating inputs (weights alone without `input_grads`), on random
    `inputs` of the shapes its calls saw, jitted unless `jit` is False: ``timed(n) -> seconds``.
    Jitted, the n calls run in one ``lax.fori_loop``, each pass on the last one's result (none
    hoisted or dropped), unless the layer's own program called n times runs faster."""
    import time

    import jax
    import jax.numpy as jnp

    xs = [_input(jax, jnp, shape, dtype, i) for i, (shape, dtype) in enumerate(inputs)]
    floating = [i for i, x in enumerate(xs) if jnp.issubdtype(x.dtype, jnp.floating)]
    if not input_grads:
        floating = []
    tv = [v.value for v in layer.trainable_variables]
    ntv = [v.value for v in layer.non_trainable_variables]

    # stateless_call hands keyword arguments to call as they are
    kwargs = {"training": True} if getattr(layer, "_call_has_training_arg", False) else {}

    def summed(tree: Any) -> Any:
        return sum(jnp.sum(t.astype(jnp.float32)) for t in jax.tree.leaves(tree))

    def total(tv: Any, moving: Any, args: list[Any], ntv: Any) -> Any:
        args = list(args)
        for i, x in zip(floating, moving, strict=True):
            args[i] = x
        y, ntv = layer.stateless_call(tv, ntv, *args, **kwargs)
        return summed(y), ntv

    argnums = (0, 1) if floating else 0
    fn = jax.grad(total, argnums=argnums, has_aux=True) if backward else total

    def once(carry: Any) -> Any:  # x + 0, where nothing can prove it 0
        acc, state = carry
        never = acc < -3e38
        args = [x + never.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.number) else x
                for x in xs]  # fmt: skip
        out, state = fn(tv, [args[i] for i in floating], args, state)
        return acc + summed(out), state

    moving = [xs[i] for i in floating]

    # The layer's state (a Dropout's seed, BatchNorm's moving figures) carries over, as in the step
    def called(fn: Any) -> Any:
        def timed(n: int) -> float:
            t = time.perf_counter()
            out, state = None, ntv
            for _ in range(n):
                out, state = fn(tv, moving, xs, state)
            jax.block_until_ready(out)
            return time.perf_counter() - t

        return timed

    if not jit:
        return called(fn)
    looped = jax.jit(lambda n, ntv: jax.lax.fori_loop(0, n, lambda _, c: once(c), (0.0, ntv)))

    def in_loop(n: int) -> float:
        t = time.perf_counter()
        jax.block_until_ready(looped(n, ntv))
        return time.perf_counter() - t

    # XLA's CPU backend runs some ops far slower inside a loop: each way run briefly, faster kept
    each = called(jax.jit(fn))
    each(1), in_loop(1)  # their compiles
    k = max(1, min(PICK_MOST, round(PICK_S / max(each(1), 1e-7))))
    faster_in_loop = min(in_loop(k) for _ in range(2)) <= min(each(k) for _ in range(2))
    return in_loop if faster_in_loop else each


def _input(jax: Any, jnp: Any, shape: tuple[int, ...], dtype: str, i: int) -> Any:
    kind = jnp.dtype(dtype)
    if jnp.issubdtype(kind, jnp.floating):
        return jax.random.uniform(jax.random.PRNGKey(i), shape, dtype=kind)
    return jnp.zeros(shape, dtype=kind)
