"""The run's ledger, checked: its parts against an outside clock, and each fix it proposes
applied in fresh processes, its predicted saving beside the measured one.

Five runs, each with waste planted as people plant it:

* ``mlp``: the mlp recipe (digits, through the runner) with a validation set four times the
  training set (``validation_fraction=0.8``), validated every epoch;
* ``cnn``: the cnn recipe (digits at 32×32, through the runner) with Keras's
  ``ModelCheckpoint`` saving every epoch;
* ``weather``: a forecasting LSTM written as the Keras example writes it
  (``timeseries_dataset_from_array``, no ``drop_remainder``) on JAX: the last batch of each
  dataset is ragged, and JAX compiles the step again for it;
* ``text``: text classification written as the Keras example writes it (``TextVectorization``
  in tf.data, an embedding bag) with a callback that scores a held-out sample at every
  epoch's end, as the examples' custom callbacks do;
* ``compile``: the mlp recipe on JAX for two epochs, without ``--compile_cache``: compile is
  most of a short run, and the ledger proposes the cache, its saving predicted from what JAX
  timed compiling. The fixed side runs with ``--compile_cache`` on a cache its first run
  wrote (one run before the rounds, not counted): what every later run of the recipe gets.

Each run goes in its own fresh process, with this script's clock around ``fit`` (wrapped on
the model, ``_common.timed_fit``), ``--rounds`` times, interleaved with the same run with one
fix applied (the ledger's own fix, its setting and value read from the fix's record:
``validation_freq=5``, ModelCheckpoint's ``save_freq`` of 5 epochs, ``drop_remainder=True``,
the callback left out, ``compile_cache``). Prints, per run::

    ledger sums to wall: 1.00× (outside clock 3.21 s, ledger 3.21 s; other 2 %)
    predicted saving vs measured: 0.95× (--validation_freq=5: predicted 1.20 s, measured 1.26 s)

The predicted saving is the median of the unfixed runs' predictions, the measured one the
difference of the two sides' median outside clocks. Goals: every ledger 1.00 ± 0.02 of the
outside clock; every prediction within ±25 % or 1 s of the measurement.

    python benchmarks/ledger.py [--runs mlp,cnn,weather,text,compile] [--rounds 3]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys

from _common import scratch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARK = "LEDGER-CHILD "
# run -> (Keras backend, what was planted, the fix items it is checked on)
RUNS = {
    "mlp": ("tensorflow", "mlp recipe, validation 4x the training set", ("validation",)),
    "cnn": ("tensorflow", "cnn recipe, ModelCheckpoint every epoch", ("callback ModelCheckpoint",)),
    "weather": (
        "jax",
        "Keras example: weather LSTM on timeseries_dataset_from_array (ragged last batches)",
        ("recompile (train)", "recompile (evaluate)"),
    ),
    "text": (
        "tensorflow",
        "Keras example: text classification, a scoring callback at every epoch's end",
        ("callback SampleScore",),
    ),
    "compile": ("jax", "mlp recipe on JAX, 2 epochs, no compile cache", ("compile cache",)),
}
EPOCHS = {"mlp": 30, "cnn": 20, "weather": 4, "text": 8, "compile": 2}
RECIPES = {"mlp": "mlp", "cnn": "cnn", "compile": "mlp"}  # the runs through the runner
CNN_STEPS = 4  # the cnn's epochs are this many steps: its checkpoints a real share


# ---------------------------------------------------------------------------- the runs


def _recipe_run(name: str, fix: dict | None, fit_s: list[float]) -> dict:
    """A recipe through the runner, its model's fit timed by this script's clock."""
    import importlib

    from _common import timed_fit

    from toolkit.core import compat
    from toolkit.runner import train
    from toolkit.runner.config import TrainConfig

    recipe = importlib.import_module(f"recipes.{RECIPES[name]}")
    keras = compat.keras()
    callbacks, freq = [], 1
    if name == "mlp":
        task = recipe.build_task(validation_fraction=0.8)
        if fix is not None:  # the fix's setting, as data: validation_freq and its value
            assert fix["setting"] == "validation_freq", fix
            freq = int(fix["value"])
    elif name == "cnn":
        task = recipe.build_task()
        save_freq = CNN_STEPS  # every epoch
        if fix is not None:  # ModelCheckpoint's save_freq: k epochs' steps
            assert fix["setting"] == "save_freq", fix
            save_freq = int(fix["value"])
        path = os.path.join(scratch("ledger-ckpt-"), "model.keras")
        callbacks = [keras.callbacks.ModelCheckpoint(path, save_freq=save_freq)]
    else:
        task = recipe.build_task()
    build = task.build_model
    task.build_model = lambda *a: timed_fit(build(*a), fit_s)
    config = TrainConfig(
        epochs=EPOCHS[name],
        steps_per_epoch=CNN_STEPS if name == "cnn" else None,
        # The cnn validates once, at its end: its checkpoints are the waste planted there.
        validation_freq=EPOCHS[name] if name == "cnn" else freq,
        count_flops=False,
        compile_cache=name == "compile" and fix is not None,
    )
    result = train.run(task, config, callbacks=callbacks)
    return result.report.ledger


def _weather(fix: dict | None, fit_s: list[float]) -> dict:
    """keras.io/examples/timeseries/timeseries_weather_forecasting, its data synthetic."""
    import numpy as np
    from _common import timed_fit

    from toolkit import profile
    from toolkit.core import compat

    keras = compat.keras()
    rng = np.random.default_rng(0)
    t = np.arange(6000, dtype="float32")
    features = np.stack(
        [np.sin(t / (20 + 7 * k)) + 0.1 * rng.normal(size=t.size) for k in range(7)], 1
    )
    features = features.astype("float32")
    past, future, step, batch = 120, 12, 6, 256
    split = 4500

    def dataset(start: int, stop: int, item: str | None):
        x = features[start:stop]
        y = features[start + past + future : stop + past + future, 1][: len(x)]
        ds = keras.utils.timeseries_dataset_from_array(
            x, y, sequence_length=past // step, sampling_rate=step, batch_size=batch
        )
        if fix is not None and fix["item"] == item:  # the fix: whole batches only
            ds = ds.unbatch().batch(batch, drop_remainder=True)
        return ds

    train_ds = dataset(0, split - past - future, "recompile (train)")
    val_ds = dataset(split, len(features) - past - future, "recompile (evaluate)")
    inputs = keras.Input((past // step, features.shape[1]))
    outputs = keras.layers.Dense(1)(keras.layers.LSTM(32)(inputs))
    model = timed_fit(keras.Model(inputs, outputs), fit_s)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    with profile("weather", batch_size=batch) as prof:
        prof.fit(model, train_ds, epochs=EPOCHS["weather"], validation_data=val_ds, verbose=0)
    return prof.report.ledger


def _text(fix: dict | None, fit_s: list[float]) -> dict:
    """keras.io/examples/nlp/text_classification_from_scratch's shape, its reviews synthetic,
    with a callback that scores a held-out sample at each epoch's end."""
    import numpy as np
    import tensorflow as tf
    from _common import timed_fit

    from toolkit import profile
    from toolkit.core import compat

    keras = compat.keras()
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(2000)]
    texts = [" ".join(rng.choice(words, size=60)) for _ in range(3000)]
    labels = rng.integers(0, 2, size=len(texts)).astype("float32")
    vectorize = keras.layers.TextVectorization(max_tokens=5000, output_sequence_length=100)
    vectorize.adapt(tf.data.Dataset.from_tensor_slices(texts[:2000]).batch(256))
    raw = tf.data.Dataset.from_tensor_slices((texts[:2500], labels[:2500])).batch(32)
    train_ds = raw.map(lambda x, y: (vectorize(x), y)).cache().prefetch(tf.data.AUTOTUNE)
    val_ds = (
        tf.data.Dataset.from_tensor_slices((texts[2500:], labels[2500:]))
        .batch(32)
        .map(lambda x, y: (vectorize(x), y))
        .cache()
    )
    sample = vectorize(tf.constant(texts)).numpy()

    class SampleScore(keras.callbacks.Callback):
        """Scores a held-out sample at each epoch's end (predictions and a threshold sweep),
        as the examples' custom callbacks do."""

        def on_epoch_end(self, epoch, logs=None):
            scores = self.model.predict(sample, batch_size=64, verbose=0).ravel()
            for threshold in np.linspace(0.05, 0.95, 400):
                np.mean((scores > threshold) == (labels > 0.5))

    inputs = keras.Input((100,), dtype="int64")
    x = keras.layers.Embedding(5000, 64)(inputs)
    x = keras.layers.GlobalAveragePooling1D()(x)
    outputs = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Dense(64, "relu")(x))
    model = timed_fit(keras.Model(inputs, outputs), fit_s)
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    callbacks = [] if fix is not None else [SampleScore()]
    with profile("text", batch_size=32) as prof:
        prof.fit(model, train_ds, epochs=EPOCHS["text"], validation_data=val_ds, verbose=0,
                 callbacks=callbacks)  # fmt: skip
    return prof.report.ledger


def child(name: str, fix: dict | None) -> None:
    import logging

    from toolkit.report._ledger import ledger_json

    logging.getLogger("toolkit").setLevel(logging.WARNING)
    os.environ.setdefault("TOOLKIT_PROGRESS", "0")
    fit_s: list[float] = []
    if name in RECIPES:
        ledger = _recipe_run(name, fix, fit_s)
    elif name == "weather":
        ledger = _weather(fix, fit_s)
    else:
        ledger = _text(fix, fit_s)
    # The ledger as report.json holds it: its fixes spelled for the reader, with each one's
    # setting and value as data (what the fixed side applies).
    print(MARK + json.dumps({"outside_s": fit_s[-1], "ledger": ledger_json(ledger)}), flush=True)


# ---------------------------------------------------------------------------- the parent


@functools.cache
def compile_cache_dir() -> str:
    """The ``compile`` runs' own cache (``TOOLKIT_CACHE_DIR``): private, empty at first."""
    return scratch("ledger-compile-cache-")


def run_child(name: str, fix: dict | None) -> dict:
    env = {**os.environ, "KERAS_BACKEND": RUNS[name][0], "TF_CPP_MIN_LOG_LEVEL": "2"}
    if name == "compile":  # the cache the fixed side reads, written by its first run
        env["TOOLKIT_CACHE_DIR"] = compile_cache_dir()
    env["PYTHONPATH"] = os.pathsep.join([HERE, ROOT, env.get("PYTHONPATH", "")])
    job = json.dumps({"name": name, "fix": fix})
    out = subprocess.run(
        [sys.executable, __file__, "--child", job], capture_output=True, text=True,
        env=env, cwd=ROOT, timeout=900, check=False,
    )  # fmt: skip
    for line in out.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
    raise RuntimeError(f"{name} (fix {fix and fix['item']}) failed: {' | '.join(tail)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        job = json.loads(args.child)
        child(job["name"], job["fix"])
        return
    sys.path.insert(0, ROOT)
    from toolkit.profiling._ledger_records import Ledger
    from toolkit.report._ledger import format_s, ledger_line

    sums_ok, predictions_ok, predictions = [], [], 0
    for name in args.runs.split(","):
        backend, planted, items = RUNS[name]
        print(f"== {name} ({backend}): {planted}", flush=True)
        base, fixed = [], {item: [] for item in items}
        fixes_seen: dict[str, list[dict]] = {item: [] for item in items}
        primed: list[dict] = []  # the compile cache's first run: not counted
        for _ in range(args.rounds):
            got = run_child(name, None)
            base.append(got)
            for f in got["ledger"].get("fixes") or []:
                if f["item"] in fixes_seen:
                    fixes_seen[f["item"]].append(f)
            for item in items:
                if fixes_seen[item]:
                    if item == "compile cache" and not primed:  # the first run writes it
                        primed.append(run_child(name, fixes_seen[item][-1]))
                    fixed[item].append(run_child(name, fixes_seen[item][-1]))
        for got in base:
            ledger = got["ledger"]
            total = sum(v for v in ledger["parts"].values() if v is not None)
            ratio = total / got["outside_s"]
            sums_ok.append(abs(ratio - 1.0) <= 0.02)
            other = ledger["parts"]["other"] / ledger["wall_s"]
            print(
                f"ledger sums to wall: {ratio:.2f}× (outside clock {format_s(got['outside_s'])}, "
                f"ledger {format_s(total)}; other {other:.0%})"
            )
        print(ledger_line(Ledger.from_dict(base[0]["ledger"])))
        base_s = statistics.median(g["outside_s"] for g in base)
        for item in items:
            seen = fixes_seen[item]
            if not seen or not fixed[item]:
                print(f"predicted saving vs measured: none: the ledger proposed no {item} fix")
                predictions_ok.append(False)
                continue
            predicted = statistics.median(f["saves_s"] for f in seen)
            fixed_s = statistics.median(g["outside_s"] for g in fixed[item])
            measured = base_s - fixed_s
            ratio = predicted / measured if measured > 0 else float("inf")
            ok = abs(predicted - measured) <= max(0.25 * abs(measured), 1.0)
            predictions_ok.append(ok)
            predictions += 1
            print(
                f"predicted saving vs measured: {ratio:.2f}× ({seen[-1]['fix']}: predicted "
                f"{format_s(predicted)}, measured {format_s(measured)}; fit {format_s(base_s)} "
                f"-> {format_s(fixed_s)}, medians of {len(base)} and {len(fixed[item])} fresh "
                "processes)",
                flush=True,
            )
    met = "met" if all(sums_ok) else "NOT met"
    print(f"goal ledger 1.00 ± 0.02 of the outside clock: {met} ({sum(sums_ok)} of {len(sums_ok)})")
    met = "met" if all(predictions_ok) and predictions_ok else "NOT met"
    print(
        f"goal predictions within ±25 % or 1 s: {met} ({sum(predictions_ok)} of "
        f"{len(predictions_ok)})"
    )


if __name__ == "__main__":
    main()
