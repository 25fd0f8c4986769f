"""A BERT-style encoder built from Keras layers (no download): train it, or time inference.

The encoder is BERT's (Devlin et al. 2019): token + learned position embeddings, layer norm,
then ``--layers`` post-norm blocks of multi-head self-attention (padding masked) and a GELU
feed-forward of ``4 × hidden``, a tanh pooler on the [CLS] token and a linear classifier.
Layers, hidden size, heads and sequence length are flags; BERT-base is
``--layers=12 --hidden_size=768 --heads=12``.

Training (``--mode=train``, default) goes through the shared runner like every recipe. Data:
``synthetic`` token ids (default), ``digits`` as token sequences ([CLS] + 64 pixel
intensities: a real offline task), ``tfds:NAME`` for a text dataset (words hashed into the
vocabulary) or ``tfrecord:GLOB``.

``--mode=inference`` reproduces the table of the TVM BERT post: latency at batch 1 for
sequence lengths 64, 128 and 256, and throughput at batch 4, printed and written to
``<report_dir>/<timestamp>/inference.{json,md}``::

    python -m recipes.bert --smoke
    python -m recipes.bert --dataset=digits --seq_len=65 --vocab_size=32 \\
        --epochs=10
    python -m recipes.bert --mode=inference
    python -m recipes.bert --mode=inference --layers=12 --hidden_size=768 \\
        --heads=12 --jit_compile
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING, Annotated, Any

from absl import flags

from toolkit import app
from toolkit.core import compat
from toolkit.data import catalog
from toolkit.runner import flags as tk_flags
from toolkit.runner.config import ConfigError, TrainConfig
from toolkit.runner.flags import Flag

if TYPE_CHECKING:  # the runner imports Keras: loaded when a task is built
    from toolkit.runner import train

INFERENCE_SEQ_LENS = (64, 128, 256)
LATENCY_BATCH, THROUGHPUT_BATCH = 1, 4
FLAGS = flags.FLAGS


def bert_encoder(
    seq_len: int,
    vocab_size: int,
    classes: int,
    *,
    layers: int = 2,
    hidden_size: int = 128,
    heads: int = 2,
    dropout: float = 0.1,
) -> Any:
    """A BERT-style classifier on ``(batch, seq_len)`` int32 token ids (0 = padding)."""
    if hidden_size % heads:
        raise ConfigError(f"--hidden_size={hidden_size} must be a multiple of --heads={heads}")
    keras = compat.keras()
    L = keras.layers
    if compat.keras_flavor() == "keras3":
        ops = keras.ops  # any backend
    else:  # tf_keras has no keras.ops: TensorFlow's own
        import tensorflow as ops

    class PositionEmbedding(L.Layer):
        """Adds a learned embedding of each position."""

        def build(self, input_shape: Any) -> None:
            self.table = self.add_weight(
                name="positions", shape=tuple(input_shape[1:]), initializer="glorot_uniform"
            )

        def call(self, x: Any) -> Any:
            return x + ops.cast(self.table, x.dtype)

    class PaddingMask(L.Layer):
        """``(batch, seq, seq)`` attention mask: no query attends to a padding key."""

        def call(self, ids: Any) -> Any:
            keys = ops.not_equal(ids, 0)[:, None, :]
            return ops.tile(keys, [1, ops.shape(ids)[1], 1])

    ids = keras.Input((seq_len,), dtype="int32", name="token_ids")
    mask = PaddingMask()(ids)
    x = L.Embedding(vocab_size, hidden_size)(ids)
    x = L.LayerNormalization(epsilon=1e-12)(PositionEmbedding()(x))
    x = L.Dropout(dropout)(x)
    for _ in range(layers):
        attention = L.MultiHeadAttention(heads, hidden_size // heads, dropout=dropout)(
            x, x, attention_mask=mask
        )
        x = L.LayerNormalization(epsilon=1e-12)(x + L.Dropout(dropout)(attention))
        ffn = L.Dense(4 * hidden_size, activation="gelu")(x)
        ffn = L.Dropout(dropout)(L.Dense(hidden_size)(ffn))
        x = L.LayerNormalization(epsilon=1e-12)(x + ffn)
    pooled = L.Dense(hidden_size, activation="tanh")(x[:, 0])  # the [CLS] position
    logits = L.Dense(classes, dtype="float32")(L.Dropout(dropout)(pooled))  # float32 logits
    return keras.Model(ids, logits, name="bert")


def build_task(
    dataset: str = "synthetic",
    *,
    layers: Annotated[int, Flag("Encoder blocks.", lower_bound=1)] = 2,
    hidden_size: Annotated[int, Flag("Hidden size (a multiple of --heads).", lower_bound=8)] = 128,
    heads: Annotated[int, Flag("Attention heads.", lower_bound=1)] = 2,
    seq_len: Annotated[int, Flag("Tokens per example (training).", lower_bound=2)] = 128,
    vocab_size: Annotated[
        int, Flag("Vocabulary size (BERT's uncased: 30522).", lower_bound=19)
    ] = 30522,
    num_classes: Annotated[int, Flag("Classes, when the dataset does not say.", lower_bound=2)] = 2,
    dropout: Annotated[float, Flag("Dropout rate.", lower_bound=0.0, upper_bound=0.9)] = 0.1,
    learning_rate: float = 1e-4,
    data_dir: str | None = None,
    validation_fraction: float = 0.2,
    seed: int = 0,
) -> train.Task:
    """The BERT-style classification task; usable without flags (e.g. from a notebook). Its
    parameters are the recipe's flags (``tk_flags.define_task_flags`` below)."""
    from toolkit.runner import train

    if hidden_size % heads:
        raise ConfigError(f"--hidden_size={hidden_size} must be a multiple of --heads={heads}")
    spec = catalog.TokenSpec(seq_len, vocab_size, num_classes)
    data = catalog.load(
        dataset, spec, data_dir=data_dir, validation_fraction=validation_fraction, seed=seed
    )

    def build_model(classes: int) -> Any:
        return bert_encoder(
            seq_len,
            vocab_size,
            classes,
            layers=layers,
            hidden_size=hidden_size,
            heads=heads,
            dropout=dropout,
        )

    return train.classification_task("bert", data, build_model, learning_rate)


# Flags read by main, not build_task: defined here, so that --help lists --mode before the task's
# flags and --inference_runs after them.
tk_flags.define_flag("enum", "mode", "train", ["train", "inference"], "Train, or time inference.")
tk_flags.define_task_flags(build_task, epochs=1, batch_size=32)
tk_flags.define_flag(
    "integer", "inference_runs", 30, "Timed calls per inference figure.", lower_bound=1
)


def inference_table(
    config: TrainConfig,
    *,
    vocab_size: int,
    layers: int,
    hidden_size: int,
    heads: int,
    runs: int = 30,
    seq_lens: tuple[int, ...] = INFERENCE_SEQ_LENS,
) -> dict[str, Any]:
    """Latency at batch 1 and throughput at batch 4 for each sequence length, on the device
    and precision of `config` (with XLA when ``config.jit_compile``)."""
    import tensorflow as tf

    from toolkit.profiling.flops import count_flops
    from toolkit.profiling.inference import measure_inference
    from toolkit.runner import train

    device, findings = train.setup_device(config)
    rows = []
    with train.precision_policy(config.precision), tf.device(device.logical_name):
        for seq_len in seq_lens:
            model = bert_encoder(
                seq_len, vocab_size, 2, layers=layers, hidden_size=hidden_size, heads=heads
            )
            fn = tf.function(
                lambda x, m=model: m(x, training=False), jit_compile=config.jit_compile
            )
            row: dict[str, Any] = {"seq_len": seq_len}
            for key, batch in (("latency", LATENCY_BATCH), ("throughput", THROUGHPUT_BATCH)):
                ids = tf.random.stateless_uniform(
                    (batch, seq_len), (config.seed or 0, seq_len), 1, vocab_size, tf.int32
                )
                row[key] = measure_inference(fn, ids, batch_size=batch, runs=runs).to_dict()
            row["flops_batch4"] = count_flops(model, THROUGHPUT_BATCH).forward
            rows.append(row)
    return {
        "model": {
            "layers": layers,
            "hidden_size": hidden_size,
            "heads": heads,
            "vocab_size": vocab_size,
        },
        "device": device.to_dict(),
        "precision": config.precision,
        "jit_compile": config.jit_compile,
        "preflight": [dataclasses.asdict(f) for f in findings],
        "rows": rows,
    }


def format_inference_table(table: dict[str, Any]) -> str:
    """The table as Markdown: one row per sequence length."""
    m = table["model"]
    d = table["device"]
    lines = [
        f"BERT-style encoder L={m['layers']} H={m['hidden_size']} A={m['heads']}, "
        f"{table['precision']}, {d['kind']}:{d['index']} {d['human_name']}, "
        f"XLA {'on' if table['jit_compile'] else 'off'}",
        "",
        "| seq len | latency batch 1 p50 (ms) | p90 (ms) | throughput batch 4 (seq/s) "
        "| batch 4 GFLOP/s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in table["rows"]:
        lat = r["latency"]["latency"]
        thr = r["throughput"]
        gflops = (
            f"{r['flops_batch4'] * thr['throughput_calls'] / thr['throughput_s'] / 1e9:.1f}"
            if r.get("flops_batch4")
            else "n/a"
        )
        lines.append(
            f"| {r['seq_len']} | {lat['p50_s'] * 1e3:.2f} | {lat['p90_s'] * 1e3:.2f} | "
            f"{thr['examples_per_sec']:.1f} | {gflops} |"
        )
    for f in table.get("preflight") or []:
        lines.append(f"preflight [{f['severity']}] {f['code']}: {f['message']}")
    return "\n".join(lines)


def _inference_main() -> None:
    from toolkit import backend
    from toolkit.core.files import atomic_write
    from toolkit.core.machine import capture_environment
    from toolkit.runner.session import new_run_dir

    try:
        config = tk_flags.config_from_flags()
    except ValueError as e:  # ConfigError
        app.fail(e, 2)
    if backend.name() != "tensorflow":
        app.fail(
            app.UsageError(
                f"--mode=inference measures through tf.function; --backend={backend.name()} "
                "trains (--mode=train) but does not run it: use --backend=tensorflow"
            ),
            2,
        )
    try:
        table = inference_table(
            config,
            vocab_size=FLAGS.vocab_size,
            layers=FLAGS.layers,
            hidden_size=FLAGS.hidden_size,
            heads=FLAGS.heads,
            runs=2 if config.smoke else FLAGS.inference_runs,
            seq_lens=INFERENCE_SEQ_LENS,
        )
    except ValueError as e:  # SetupError included
        app.fail(e)
    text = format_inference_table(table)
    print(text)
    if config.report_dir:
        run_dir = new_run_dir(config.report_dir)
        record = {
            **table,
            "environment": capture_environment(backend.framework_facts()),
            "args": tk_flags.flags_for_report(),
        }
        for name, data in (
            ("inference.json", json.dumps(record, indent=1)),
            ("inference.md", f"# BERT inference\n\n{text}\n"),
        ):
            print(f"{name}: {atomic_write(os.path.join(run_dir, name), data)}")


_train_main = app.recipe_main(build_task)


def main(argv: list[str]) -> None:
    if FLAGS.mode == "inference":
        if len(argv) > 1:
            app.fail(app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}"), 2)
        _inference_main()
    else:
        _train_main(argv)


if __name__ == "__main__":
    app.run(main)
