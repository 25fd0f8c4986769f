"""The largest batch that fits (issue 67), checked: ``toolkit.fits``'s line against peaks
measured in real fresh processes, on a CPU (each peak: the process's peak resident memory).

Four targets: two recipes through the runner, and two models written as the Keras examples
write them, their data replaced by synthetic data of the same shapes, handed to ``fits`` as
a user would, in memory (``fits(model, data)``: the model goes to each fresh process as a
``.keras`` file, the data as arrays):

* ``mlp``: the mlp recipe on synthetic 128×128×3 images (4,096 of them: its largest
  batch), 64 units a layer: an MLP's activations are a few KB an example, its input batch is
  what grows (the digits' 8×8 would add too little an example to measure, and 64×64×3 with
  1,024 units measured 13 KB an example, within the noise);
* ``cnn``: the cnn recipe, its defaults (digits at 32×32, 1,437 training examples: the largest
  batch it runs);
* ``convnet``: keras.io/examples/vision/mnist_convnet (two Conv2D and pooling blocks,
  dropout, softmax; 28×28×1 arrays, one-hot labels);
* ``text``: keras.io/examples/nlp/text_classification_from_scratch (an embedding of 20,000
  words, two strided Conv1D, global max pooling; 500 token ids an example, vectorized in
  ``tf.data`` by ``TextVectorization`` as the example does).

Per target:

1. ``toolkit.fits`` measures three batch sizes, each in a fresh process, and fits its line;
2. the limit is the line's peak at ``--far`` (4) times the largest batch measured (the
   measured base plus that many examples; for a recipe, at most 90 % of its examples): what
   fits then predicts is an extrapolation, as a user's is, not an interpolation between its
   own points;
3. ``predicted peak vs measured``: the predicted batch (never one measured) run in one more
   fresh process, the line's peak there over the measured one;
4. ``largest batch predicted vs found``: fits' answer (as ``fits(..., limit=...)`` gives
   it: a check that misses the line by more than 5 %, or lands over the limit, adds its point
   to the line, which predicts again) against the largest batch whose measured peak stays
   under the limit, found by real runs (from fits' answer, a bracket and a bisection to
   within ``--tolerance`` of the batch, :data:`MAX_PROBES` runs at most).

Prints, per target and over all of them (the geometric mean of the ratios, and the worst)::

    cnn: predicted peak vs measured: 0.97× (batch 1,024: predicted 1.95 GB, measured ...)
    cnn: largest batch predicted vs found: 1.02× (predicted 905, the line's first 1,024; ...)

5. ``memory sampling overhead``: StepTimer with its memory readings (every 50 ms, and the
   first epoch's two counts) against StepTimer without them (``memory_every_s=None``), in
   interleaved pairs of fits in this process (``--overhead_rounds``; ``--only_overhead`` runs
   this section alone), the median paired ratio; one reading's own cost beside it.

Each section is a function (:func:`predicted_peak_section`, :func:`largest_batch_section`,
:func:`sampling_overhead_section`)
of the targets measured once (:func:`measure_targets`); main() runs them in order, so a
section is appended by writing its function and one line in main().

    python benchmarks/memory.py [--targets mlp,cnn,convnet,text] [--far 4] [--steps 4]
        [--overhead_rounds 10] [--only_overhead]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGETS = ("mlp", "cnn", "convnet", "text")
SIZES = {"mlp": (512, 1024, 2048), "cnn": (64, 128, 256), "convnet": (128, 256, 512),
         "text": (64, 128, 256)}  # fmt: skip
MOST = {"mlp": 4096, "cnn": 1437}  # a recipe's training examples: its largest batch
MAX_PROBES = 3  # fresh processes the search for the largest batch adds, at most
GROW = 1.15  # the bracket's step above a batch that fits


# ---------------------------------------------------------------------------- the targets


def _recipe(name: str) -> Any:
    from toolkit.search.standings import Target

    params = {"mlp": {"dataset": "synthetic", "image_size": 128, "channels": 3,
                      "hidden_units": 64}, "cnn": {}}[name]  # fmt: skip
    return Target(name, None, params, {})


def mnist_convnet() -> tuple[Any, Any]:
    """keras.io/examples/vision/mnist_convnet, on 4,096 random 28×28×1 images."""
    import numpy as np

    from toolkit.core import compat

    keras = compat.keras()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10, activation="softmax"),
    ])  # fmt: skip
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    rng = np.random.default_rng(0)
    x = rng.random((4096, 28, 28, 1), dtype="float32")
    y = keras.utils.to_categorical(rng.integers(0, 10, 4096), 10)
    return model, (x, y)


def text_classifier() -> tuple[Any, Any]:
    """keras.io/examples/nlp/text_classification_from_scratch, on 2,048 random reviews of
    words from a vocabulary of 20,000, vectorized in tf.data as the example does."""
    import numpy as np
    import tensorflow as tf

    from toolkit.core import compat

    keras = compat.keras()
    keras.utils.set_random_seed(0)
    max_features, sequence_length, embedding_dim = 20000, 500, 128
    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(max_features)])
    texts = [" ".join(rng.choice(words, size=200)) for _ in range(2048)]
    labels = rng.integers(0, 2, size=len(texts)).astype("float32")
    vectorize_layer = keras.layers.TextVectorization(
        max_tokens=max_features, output_mode="int", output_sequence_length=sequence_length
    )
    vectorize_layer.adapt(tf.data.Dataset.from_tensor_slices(texts).batch(256))

    def vectorize_text(text, label):
        return vectorize_layer(tf.expand_dims(text, -1)), label

    raw = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(32)
    train_ds = raw.map(vectorize_text).cache().prefetch(buffer_size=10)
    inputs = keras.Input(shape=(None,), dtype="int64")
    x = keras.layers.Embedding(max_features, embedding_dim)(inputs)
    x = keras.layers.Dropout(0.5)(x)
    x = keras.layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = keras.layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    x = keras.layers.Dropout(0.5)(x)
    predictions = keras.layers.Dense(1, activation="sigmoid", name="predictions")(x)
    model = keras.Model(inputs, predictions)
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model, train_ds


BUILDERS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "convnet": mnist_convnet, "text": text_classifier,
}  # fmt: skip


# ---------------------------------------------------------------------------- the measurements


@dataclasses.dataclass
class Measured:
    """One target measured: `fits`'s result (its line), the limit set from it, the batch
    predicted under it, and every peak measured by this script's own runs ({batch: MiB})."""

    name: str
    what: tuple[Any, Any]  # (model or Target, data or None): what fits and measure_peak take
    found: Any  # memory_fit.BatchFit
    limit_mb: float
    predicted: int
    peaks: dict[int, float] = dataclasses.field(default_factory=dict)

    def peak(self, batch: int, steps: int) -> float:
        """The measured peak at `batch` (a fresh process, once per batch)."""
        from toolkit.search.memory_fit import measure_peak

        if batch not in self.peaks:
            model, data = self.what
            got = measure_peak(model, data, batch_size=batch, steps=steps, progress=_quiet)
            if not got.ok:
                raise RuntimeError(f"{self.name}: {got.words()}")
            self.peaks[batch] = float(got.peak_mb)
        return self.peaks[batch]


def _quiet(_line: str) -> None:
    pass


def measure_targets(names: list[str], far: float, steps: int) -> list[Measured]:
    """Each target's line (``toolkit.fits``, no check), and the limit at `far` times its
    largest batch measured, the batch predicted under it."""
    from toolkit import fits

    out = []
    for name in names:
        what = BUILDERS[name]() if name in BUILDERS else (_recipe(name), None)
        found = fits(*what, batch_sizes=SIZES[name], steps=steps, check=False, progress=_quiet)
        line = found.line
        print(f"== {name}: {line.words() if line else found.why}", flush=True)
        # far × the largest batch measured, within the examples a recipe holds
        limit = line.at(min(far * SIZES[name][-1], 0.9 * MOST.get(name, 1 << 30)))
        predicted = line.largest_under(limit)
        if predicted is None:
            print(f"{name}: skipped: {found.why or 'the peak does not grow measurably'}")
            continue
        out.append(Measured(name, what, found, limit, predicted))
    return out


def predicted_peak_section(measured: list[Measured], steps: int) -> list[float]:
    """``predicted peak vs measured``: each predicted batch (never one of those measured)
    run once more, the line's peak there over the measured one; then over all targets."""
    from toolkit.core.stats import format_mb

    print("## predicted peak vs measured, at a batch size not measured", flush=True)
    ratios = []
    for m in measured:
        predicted, got = m.found.line.at(m.predicted), m.peak(m.predicted, steps)
        ratios.append(predicted / got)
        print(
            f"{m.name}: predicted peak vs measured: {ratios[-1]:.2f}× (batch {m.predicted:,}: "
            f"predicted {format_mb(predicted)}, measured {format_mb(got)})",
            flush=True,
        )
    _overall("predicted peak vs measured", ratios, measured)
    return ratios


def largest_batch_section(measured: list[Measured], steps: int, tolerance: float) -> list[float]:
    """``largest batch predicted vs found``: fits' answer under the limit (its check's refit
    included) over the largest batch whose measured peak stays under it, searched by real
    runs."""
    from toolkit.core.stats import format_mb

    print("## largest batch predicted vs found, under the base + far × batch", flush=True)
    ratios = []
    for m in measured:
        answer = _answer(m, steps)
        found = _largest_found(m, answer, steps, tolerance)
        ratios.append(answer / found)
        print(
            f"{m.name}: largest batch predicted vs found: {ratios[-1]:.2f}× (predicted "
            f"{answer:,}, the line's first {m.predicted:,}; found {found:,} by "
            f"{len(m.peaks)} more fresh processes; limit {format_mb(m.limit_mb)})",
            flush=True,
        )
    _overall("largest batch predicted vs found", ratios, measured)
    return ratios


def _answer(m: Measured, steps: int) -> int:
    """What ``fits(..., limit=m.limit_mb)`` answers from the same points: the line's
    prediction, checked (the run section 1 made); where the check lands over the limit or
    misses the line by more than ``memory_fit.MISS``, the line through it too predicts again
    (fits then checks that once more: here it is the search's first run)."""
    from toolkit.search.memory_fit import MISS, PeakLine

    line, got = m.found.line, m.peak(m.predicted, steps)
    if got <= m.limit_mb and abs(line.at(m.predicted) / got - 1) <= MISS:
        return m.predicted
    points = [(p.batch_size, p.peak_mb) for p in m.found.points] + [(m.predicted, got)]
    again = PeakLine.through(points).largest_under(m.limit_mb)
    return max(1, min(again or m.predicted, MOST.get(m.name, 1 << 30)))


def _largest_found(m: Measured, start: int, steps: int, tolerance: float) -> int:
    """The largest batch measured under the limit: from `start`, a bracket (up by
    :data:`GROW` while it fits, else down to the largest batch fits measured), then bisection
    until the bracket is within `tolerance` of the batch, :data:`MAX_PROBES` runs at most."""
    most = MOST.get(m.name, 1 << 30)
    budget = len(m.peaks) + MAX_PROBES
    under = [b for b, peak in m.peaks.items() if peak <= m.limit_mb and b < start]
    over = [b for b, peak in m.peaks.items() if peak > m.limit_mb and b > start]
    fits_at = m.peak(start, steps) <= m.limit_mb
    lo = start if fits_at else max([m.found.points[-1].batch_size, *under])
    hi = min(over, default=None) if fits_at else start
    while hi is None and len(m.peaks) < budget and lo < most:
        up = min(most, math.ceil(lo * GROW))
        lo, hi = (up, None) if m.peak(up, steps) <= m.limit_mb else (lo, up)
    hi = hi or lo + 1  # out of runs, or at the data's end, still under the limit: lo stands
    while hi - lo > max(1, tolerance * lo) and len(m.peaks) < budget:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if m.peak(mid, steps) <= m.limit_mb else (lo, mid)
    return lo


def _overall(what: str, ratios: list[float], measured: list[Measured]) -> None:
    """The ratios over all targets: their geometric mean, and the one farthest from 1."""
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    worst = max(range(len(ratios)), key=lambda i: abs(math.log(ratios[i])))
    print(
        f"overall: {what}: {mean:.2f}× (geometric mean of {len(ratios)} targets; farthest "
        f"{ratios[worst]:.2f}×, {measured[worst].name})",
        flush=True,
    )


def sampling_overhead_section(rounds: int, steps: int) -> float:
    """StepTimer with its memory readings against StepTimer without them, on one compiled MLP
    over cached batches (about 1 s a fit), in interleaved pairs (A B, then B A: a drift or an
    order effect cancels), in this process: the median of the paired ratios is the figure.
    The readings' own cost, timed in a loop, is printed beside it (no fit's noise)."""
    import statistics
    import time

    from _common import mlp_fit_setup, quiet_gc, speedup_line

    from toolkit.profiling._memory import MemorySampler
    from toolkit.profiling.step_timer import StepTimer

    print("## memory sampling overhead: StepTimer with memory vs without", flush=True)
    _, model, ds = mlp_fit_setup(steps)
    model.fit(ds, epochs=1, verbose=0)  # trace and warm up once for both

    def fit(every_s: float | None) -> float:
        quiet_gc()
        t0 = time.perf_counter()
        model.fit(ds, epochs=1, verbose=0, callbacks=[StepTimer(memory_every_s=every_s)])
        return time.perf_counter() - t0

    off, on, ratios = [], [], []
    for k in range(rounds):
        order = (None, 0.05) if k % 2 == 0 else (0.05, None)
        got = {every: fit(every) for every in order}
        off.append(got[None])
        on.append(got[0.05])
        ratios.append(got[0.05] / got[None])
    base = statistics.median(off)
    print(speedup_line("memory sampling overhead", base, base * statistics.median(ratios)))
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    sampler = MemorySampler(time.perf_counter, lambda: 0, 0.05, None)
    t0 = time.perf_counter()
    for _ in range(2000):
        sampler.read()
    reading_s = (time.perf_counter() - t0) / 2000
    print(
        f"# {rounds} pairs of {steps}-step fits ({base:.2f} s each): paired ratios' middle "
        f"half {q1:.3f}-{q3:.3f} (this machine's noise now); one reading {reading_s * 1e6:.0f} "
        f"µs, every 50 ms: {reading_s / 0.05 * 100:.2f} % of one core"
    )
    return statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--far", type=float, default=4.0)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument(
        "--overhead_rounds",
        type=int,
        default=10,
        help="pairs of fits for the memory sampling overhead (0: none)",
    )
    parser.add_argument("--overhead_steps", type=int, default=1500)
    parser.add_argument("--only_overhead", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    os.environ.setdefault("TOOLKIT_PROGRESS", "0")
    if not args.only_overhead:
        measured = measure_targets(args.targets.split(","), args.far, args.steps)
        predicted_peak_section(measured, args.steps)
        largest_batch_section(measured, args.steps, args.tolerance)
    if args.overhead_rounds:
        sampling_overhead_section(args.overhead_rounds, args.overhead_steps)


if __name__ == "__main__":
    main()
