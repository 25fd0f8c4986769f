"""Is the anatomy true on models nobody here wrote? Six models adapted from keras.io examples
(data replaced by random arrays of the examples' shapes, sizes cut to fit a 2-core CPU), on
every installed Keras backend, each backend in a fresh process. For each model and backend:

* ``top layer vs alone``: the anatomy's top-ranked layer, its figure as shown (forward +
  backward per step), against the same layer timed alone again afterwards by this script
  (``toolkit.profiling.layers_alone.time_alone``, five runs: the layer compiled as the
  model's step, on inputs of its shapes; a layer on the model's own inputs without their
  gradients, which the step never takes). Goal: within 0.75-1.25×.
* ``top-3 ranking agrees``: the anatomy's three slowest layers against the three slowest of
  every layer timed alone by this script (``k of 3`` in both; a layer within 10 % of the
  third's time alone ties with it: equal layers rank in any order). Goal: 3 of 3.
* ``backward share vs measured``: the anatomy's backward over forward + backward, against the
  whole model timed alone again by this script, forward-only and forward+backward (``1 -
  forward / both``; the gradients of the weights, none of the data's, as the step takes
  them). The anatomy times the model alone itself and shows that split: this line checks
  that what it shows is what holds, through the layers fitted inside it and a step that
  could not hold it all. Goal: within ±10 points.
* ``input stall in input`` (the first model of each backend only): the same model fed by a
  ``keras.utils.PyDataset`` that sleeps 20 ms a batch; what the anatomy's input phase
  gained over the unstalled run, against the wait the stall can add: 20 ms, or the growth of
  the untraced step where that is less (tf.data reads ahead: the step computes while the
  next batch sleeps). Goal: >= 0.9.
* ``other share``: "other" over the shown step. Goal: <= 25 % where the step is >= 5 ms.
* ``Keras's own cost over the raw step``: fit's step over the raw step's (a floor: compiled
  as fit's), minus one.
* ``anatomy wall time``: ``toolkit.anatomy`` from call to return (raw step included).

    python benchmarks/anatomy_truth.py [--backends tensorflow,jax,torch] [--models a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STALL_S = 0.020
TIE = 0.10  # layers whose times alone are this close rank alike
BATCH = 32


# ---------------------------------------------------------------------------- the models


def conv1d(keras, rng):
    """keras.io "Timeseries classification from scratch": three Conv1D+BN+ReLU blocks."""
    inputs = keras.Input((200, 1))
    x = inputs
    for _ in range(3):
        x = keras.layers.Conv1D(64, 3, padding="same")(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(x))
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model, (rng.random((640, 200, 1), dtype="float32"), rng.integers(0, 2, 640))


def transformer(keras, rng):
    """keras.io "Text classification with Transformer": token and position embedding, one
    Transformer block (MultiHeadAttention, a feed-forward pair, two LayerNorms)."""
    maxlen, vocab, embed, heads, ff = 100, 2000, 32, 2, 32

    class TokenAndPositionEmbedding(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.token_emb = keras.layers.Embedding(vocab, embed)
            self.pos_emb = keras.layers.Embedding(maxlen, embed)

        def call(self, x):
            positions = keras.ops.arange(0, keras.ops.shape(x)[-1], 1)
            return self.token_emb(x) + self.pos_emb(positions)

    inputs = keras.Input((maxlen,), dtype="int32")
    x = TokenAndPositionEmbedding()(inputs)
    attn = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=embed)(x, x)
    x = keras.layers.LayerNormalization(epsilon=1e-6)(x + keras.layers.Dropout(0.1)(attn))
    f = keras.layers.Dense(ff, activation="relu")(x)
    f = keras.layers.Dense(embed)(f)
    x = keras.layers.LayerNormalization(epsilon=1e-6)(x + keras.layers.Dropout(0.1)(f))
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(20, activation="relu")(keras.layers.Dropout(0.1)(x))
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(x))
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model, (rng.integers(0, vocab, (640, maxlen)).astype("int32"),
                   rng.integers(0, 2, 640))  # fmt: skip


def mixer(keras, rng):
    """keras.io "Image classification with modern MLP models" (MLP-Mixer): patches, then
    blocks mixing across patches and across channels."""
    patches, hidden = 64, 64

    def block(x):
        y = keras.layers.LayerNormalization(epsilon=1e-6)(x)
        y = keras.layers.Permute((2, 1))(y)
        y = keras.layers.Dense(patches, activation="gelu")(y)
        y = keras.layers.Dense(patches)(y)
        x = x + keras.layers.Permute((2, 1))(y)
        y = keras.layers.LayerNormalization(epsilon=1e-6)(x)
        y = keras.layers.Dense(hidden, activation="gelu")(y)
        return x + keras.layers.Dense(hidden)(y)

    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(hidden, 4, strides=4)(inputs)  # 8x8 patches of 4x4
    x = keras.layers.Reshape((patches, hidden))(x)
    for _ in range(2):
        x = block(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(inputs, keras.layers.Dense(10)(x))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, (rng.random((640, 32, 32, 3), dtype="float32"), rng.integers(0, 10, 640))


def mnist_cnn(keras, rng):
    """keras.io "Simple MNIST convnet"."""
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10, activation="softmax"),
    ])  # fmt: skip
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model, (rng.random((640, 28, 28, 1), dtype="float32"), rng.integers(0, 10, 640))


def imbalanced_mlp(keras, rng):
    """keras.io "Imbalanced classification: credit card fraud detection": a wide MLP."""
    model = keras.Sequential([
        keras.Input((30,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(1, activation="sigmoid"),
    ])  # fmt: skip
    model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
    return model, (rng.random((640, 30), dtype="float32"), rng.integers(0, 2, 640))


def weather_lstm(keras, rng):
    """keras.io "Timeseries forecasting for weather prediction": an LSTM over 120 steps."""
    model = keras.Sequential([keras.Input((120, 7)), keras.layers.LSTM(32), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    return model, (rng.random((640, 120, 7), dtype="float32"),
                   rng.random((640, 1), dtype="float32"))  # fmt: skip


MODELS = {f.__name__: f for f in (conv1d, transformer, mixer, mnist_cnn, imbalanced_mlp,
                                  weather_lstm)}  # fmt: skip


# ---------------------------------------------------------------------------- one backend


def _leaves(model, batch):
    """Each layer the anatomy may rank, by name: ``(layer, its inputs' specs)``, the specs
    seen by one forward call of the model under the anatomy's own scopes."""
    from toolkit.profiling.anatomy import Scopes

    with Scopes(model) as scopes:
        model(batch, training=False)
    out = {}
    for e in scopes.entries.values():
        if e.inputs and all(d is not None for shape, _ in e.inputs for d in shape):
            out[e.name] = (e.layer, e.inputs)
    return out


def _stalled(keras, data):
    class Stalled(keras.utils.PyDataset):
        """The model's data, a batch at a time, each read waiting STALL_S."""

        def __len__(self):
            return len(data[0]) // BATCH

        def __getitem__(self, i):
            time.sleep(STALL_S)
            s = slice(i * BATCH, (i + 1) * BATCH)
            return data[0][s], data[1][s]

    return Stalled()


def child(names: list[str]) -> None:
    """In a fresh process on one backend: one JSON line per model."""
    import numpy as np

    import toolkit
    from toolkit.core import compat
    from toolkit.profiling.layers_alone import fed_by_data, time_alone
    from toolkit.runner.config import TrainConfig

    keras = compat.keras()
    rows = []
    for name in names:
        rng = np.random.default_rng(0)
        model, data = MODELS[name](keras, rng)
        t = time.perf_counter()
        found = toolkit.anatomy(model, data, steps=10, config=TrainConfig(batch_size=BATCH))
        wall = time.perf_counter() - t
        row = {"model": name, "anatomy": found.to_dict(), "wall_s": wall}
        if not found.error:
            jit = model.jit_compile is True
            spec = ((BATCH, *data[0].shape[1:]), str(data[0].dtype))
            alone = {}
            by_name = _leaves(model, data[0][:BATCH])
            fed = fed_by_data(model)  # the step takes no gradient of these layers' inputs
            for x in found.layers:
                if x.alone_s is None or x.name not in by_name:
                    continue  # the anatomy's own check did not time it: nothing to compare
                layer, specs = by_name[x.name]
                try:
                    grads = id(layer) not in fed
                    alone[x.name] = (
                        x.calls
                        * time_alone(layer, specs, jit=jit, runs=5, input_grads=grads).both_s
                    )
                except Exception as e:  # noqa: BLE001 - said in the row
                    alone[x.name] = f"{type(e).__name__}: {e}"
            row["alone"] = alone
            whole = time_alone(model, (spec,), jit=jit, runs=5, input_grads=False)
            row["model_forward_s"], row["model_both_s"] = whole.forward_s, whole.both_s
        rows.append(row)
    # The stall last: on PyTorch, a PyDataset read through tf.data (as the toolkit reads
    # every form of your data) leaves the process's later LSTM backward 4-6x slower (torch
    # 2.13 beside TF 2.21); measured first, it would slow every model after it.
    if rows:
        model, data = MODELS[names[0]](keras, np.random.default_rng(0))
        t = time.perf_counter()
        config = TrainConfig(batch_size=BATCH)
        # as a user runs it: the raw step and fit's step on one batch check the input too
        stalled = toolkit.anatomy(model, _stalled(keras, data), steps=10, config=config)
        rows[0]["stalled"] = stalled.to_dict()
        rows[0]["stalled_wall_s"] = time.perf_counter() - t
    for row in rows:
        print(json.dumps(row), flush=True)


# ---------------------------------------------------------------------------- the lines


def lines(backend_name: str, row: dict) -> list[str]:
    from toolkit.core._anatomy import Anatomy, Phase

    a = Anatomy.from_dict(row["anatomy"])
    label = f"{backend_name} {row['model']}"
    if a.error:
        return [f"{label}: no anatomy: {a.error}"]
    out = []
    timed = {k: v for k, v in row.get("alone", {}).items() if isinstance(v, float)}
    top = a.layers[0] if a.layers else None
    if top is not None and top.name in timed:
        # a layer holding others (attention, a recurrent layer's cell) is timed with them:
        # its row and theirs, as the anatomy shows them, against that
        shown = top.seconds + sum(
            x.seconds for x in a.layers if top.alone_with_held and x.name.startswith(top.name + "/")
        )
        held = " with the layers it holds" if top.alone_with_held else ""
        out.append(f"{label}: top layer vs alone: {shown / timed[top.name]:.2f}× "
                   f"({top.name}{held}: alone {timed[top.name] * 1e3:.3f} ms, "
                   f"anatomy {shown * 1e3:.3f} ms)")  # fmt: skip
    # the ranking is of rows: a layer timed with those it holds is not one row's time
    timed = {k: v for k, v in timed.items()
             if not any(x.name == k and x.alone_with_held for x in a.layers)}  # fmt: skip
    if len(timed) >= 3:
        truth = sorted(timed, key=timed.get, reverse=True)[:3]
        shown = [x.name for x in a.layers if not x.alone_with_held][:3]
        # Layers alike (a Transformer's blocks, two equal convolutions) cost the same: any of
        # them ranks third. A shown layer within TIE of the third's time alone counts.
        floor = timed[truth[-1]] * (1 - TIE)
        k = sum(1 for n in shown if n in truth or timed.get(n, 0.0) >= floor)
        out.append(f"{label}: top-3 ranking agrees: {k} of 3 (anatomy {', '.join(shown)}; "
                   f"alone {', '.join(truth)}; ties within {TIE:.0%})")  # fmt: skip
    fwd, bwd = a.phase(Phase.FORWARD), a.phase(Phase.BACKWARD)
    both, forward = row.get("model_both_s"), row.get("model_forward_s")
    if fwd + bwd > 0 and both and forward:
        shown, measured = bwd / (fwd + bwd), max(0.0, 1 - forward / both)
        ratio = shown / measured if measured > 0 else float("inf")
        out.append(f"{label}: backward share vs measured: {ratio:.2f}× "
                   f"({shown * 100:.0f} % vs {measured * 100:.0f} %, "
                   f"{(shown - measured) * 100:+.0f} points)")  # fmt: skip
    if "stalled" in row:
        s = Anatomy.from_dict(row["stalled"])
        if s.error:
            out.append(f"{label}: input stall: no anatomy: {s.error}")
        else:
            # The input the stall added, against the wait it could add: the stall itself, or
            # less where the pipeline reads ahead (tf.data's prefetch: the step computes while
            # the next batch sleeps) and the untraced step grew by less.
            got = s.phase(Phase.INPUT) - a.phase(Phase.INPUT)
            added = (s.untraced_s or s.step_s) - (a.untraced_s or a.step_s)
            wait = min(STALL_S, added)
            ratio = f"{got / wait:.2f}×" if wait > 1e-4 else "n/a (the step did not wait)"
            out.append(f"{label}: input stall in input: {ratio} (input +{got * 1e3:.1f} ms of "
                       f"a {wait * 1e3:.1f} ms wait; the {STALL_S * 1e3:.0f} ms stall added "
                       f"{added * 1e3:.1f} ms to the step)")  # fmt: skip
    step = a.shown_step_s()
    other = a.phase(Phase.OTHER) / step if step > 0 else 0.0
    out.append(f"{label}: other share: {other * 100:.1f} % (step {step * 1e3:.3f} ms)")
    if a.raw_s and a.fit_s:
        out.append(f"{label}: Keras's own cost over the raw step: {a.fit_s / a.raw_s - 1:+.1%} "
                   f"(fit {a.fit_s * 1e3:.3f} ms, raw {a.raw_s * 1e3:.3f} ms)")  # fmt: skip
    out.append(f"{label}: anatomy wall time: {row['wall_s']:.1f} s")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", help="comma-separated (default: every installed one)")
    p.add_argument("--models", help=f"comma-separated, of {', '.join(MODELS)} (default: all)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    names = args.models.split(",") if args.models else list(MODELS)
    if args.child:
        child(names)
        return
    sys.path.insert(0, os.path.dirname(HERE))
    from toolkit import backend

    for name in args.backends.split(",") if args.backends else list(backend.installed()):
        env = {**os.environ, "KERAS_BACKEND": name, "TOOLKIT_PROGRESS": "0"}
        done = subprocess.run(
            [sys.executable, __file__, "--child", "--models", ",".join(names)],
            env=env, capture_output=True, text=True, timeout=3600, check=False,
        )  # fmt: skip
        rows = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
        if done.returncode or len(rows) < len(names):
            print(f"{name}: failed ({done.stderr.strip().splitlines()[-1:] or done.returncode})")
        for row in rows:
            print("\n".join(lines(name, row)), flush=True)


if __name__ == "__main__":
    main()
