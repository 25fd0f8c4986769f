"""Overhead of StepTimer on a fit of ≈1 ms steps, against no callback and a naive timer.

Runs the same compiled model over the same cached data (a few thousand steps per fit) with:
  * no callback (baseline),
  * StepTimer as it comes (its epoch figures added to Keras's logs),
  * StepTimer with ``add_to_logs=False``,
  * StepTimer writing TensorBoard scalars (``tensorboard_dir=``),
  * a naive per-step timer that reads ``logs["loss"]`` every step (what people write first).
Fits are interleaved over several rounds, in a fresh random order each round (a fixed rotation
always ran the same variant right after the baseline, which measured it 2-6 % slow in two runs
out of two), and each variant's fit is set
against the no-callback fit *of the same round*: the median of those paired ratios is the
figure (a shared machine's slow minutes hit both sides of a pair alike, where medians taken
apart can land in different minutes). Each line prints the baseline's median time and that
time multiplied by the median paired ratio.

What the fit-level figure can and cannot see: StepTimer's two batch hooks cost 0.6 µs a step
(printed below, 0.12 % of a 0.5 ms step; 1.0 µs before the timed-step fast path). The paired
ratios' middle half spans ±2-5 % on this 2-core VM, and the figure moves by that much from run
to run with the same code: a callback with no hooks at all measured 1.008× in one run, and a
naive timer 0.997× to 1.022×. The training thread's CPU time (``time.thread_time``) was tried
as a quieter measure and swung as much. So a 1 % goal is below what one run here resolves;
the line below says so rather than round it. The data sits in
memory with tf.data autotuning off, whose end-of-fit iterator teardown can otherwise add
seconds to a random fit
(see ``_common.py``).
Prints ``name: X.XX× (baseline A s, toolkit B s)``.
Goal: StepTimer ≤ 1 % overhead (ratio ≤ 1.01).

Run it under Keras 3 (default) and tf_keras (``TF_USE_LEGACY_KERAS=1``): Keras 3 on the
TensorFlow backend already converts the logs to floats at every step for every fit, so the naive
timer's read costs little there; tf_keras does not, so there the naive read adds a device sync.

    python benchmarks/profiler_overhead.py [--steps 1500 --rounds 21]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

from _common import mlp_fit_setup, quiet_gc, speedup_line

from toolkit import progress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # Many short rounds rather than a few long ones: more pairs, and each pair's two fits
    # closer together in time.
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()

    from toolkit import compat
    from toolkit.profiling.step_timer import StepTimer

    keras, model, ds = mlp_fit_setup(args.steps)

    class NaiveTimer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter() - self.t0)
            self.losses.append(float(logs["loss"]))  # reads the tensor: a sync per step

        def on_train_begin(self, logs=None):
            self.times, self.losses = [], []

    board = tempfile.mkdtemp(prefix="overhead-tb-")
    variants = {
        "none": lambda: [],
        "StepTimer": lambda: [StepTimer()],
        "StepTimer, logs off": lambda: [StepTimer(add_to_logs=False)],
        "StepTimer + scalars": lambda: [StepTimer(tensorboard_dir=board)],
        "naive": lambda: [NaiveTimer()],
    }
    model.fit(ds, epochs=1, verbose=0)  # trace and warm up once for all variants
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    order = random.Random(0)
    progress.say(
        f"profiler_overhead: {args.rounds} rounds of {len(names)} fits, {args.steps} steps each"
    )
    with progress.bar(args.rounds, "profiler_overhead", unit="round") as bar:
        for _ in range(args.rounds):
            order.shuffle(names)  # no variant always runs first, last, or after the same one
            for name in names:
                make = variants[name]
                callbacks = make()
                quiet_gc()
                t0 = time.perf_counter()
                model.fit(ds, epochs=1, verbose=0, callbacks=callbacks)
                times[name].append(time.perf_counter() - t0)
            bar.update()  # between rounds: outside every timed fit

    pairs = {
        k: [t / base for t, base in zip(v, times["none"], strict=True)] for k, v in times.items()
    }
    ratio = {k: statistics.median(v) for k, v in pairs.items()}
    med = {k: statistics.median(times["none"]) * ratio[k] for k in times}
    step_ms = med["none"] / args.steps * 1e3
    print(
        f"# {compat.keras_flavor()} {compat.keras_version()}, {args.steps} steps of "
        f"{step_ms:.2f} ms, median of {args.rounds} interleaved rounds, paired"
    )
    # X < 1 is an overhead: 0.99× means the fit with the callback took 1 % longer.
    print(speedup_line("fit with StepTimer vs no callback", med["none"], med["StepTimer"]))
    print(
        speedup_line(
            "fit with StepTimer, logs off, vs no callback", med["none"], med["StepTimer, logs off"]
        )
    )
    print(
        speedup_line(
            "fit with StepTimer + TensorBoard scalars vs no callback",
            med["none"],
            med["StepTimer + scalars"],
        )
    )
    print(speedup_line("naive logs['loss'] timer vs no callback", med["none"], med["naive"]))
    print(speedup_line("StepTimer vs naive timer", med["naive"], med["StepTimer"]))
    for name in ("StepTimer", "StepTimer, logs off", "StepTimer + scalars", "naive"):
        q1, _, q3 = statistics.quantiles(pairs[name], n=4)
        print(
            f"{name} overhead, 3 decimals: {ratio[name]:.3f}× "
            f"(paired ratios' middle half {q1:.3f}–{q3:.3f}: the noise of this machine now)"
        )
    # Fit-to-fit noise on a shared machine is a few percent, larger than the 1 % goal; the
    # direct cost of the hooks per step bounds the overhead without that noise.
    hook_s = _hook_cost_per_step(StepTimer)
    print(
        f"StepTimer hooks: {hook_s * 1e6:.2f} µs per step = "
        f"{hook_s / (med['none'] / args.steps) * 100:.3f}% of a {step_ms:.2f} ms step"
    )
    inside_s, fit_s = _time_inside_fit(model, ds, StepTimer)
    print(
        f"StepTimer's own code inside a real fit (every hook timed): {inside_s * 1e3:.2f} ms of "
        f"a {fit_s:.3f} s fit = {inside_s / fit_s * 100:.2f}% (the clocks around the hooks "
        "included)"
    )
    # Noise only ever adds time, so each variant's fastest fit is the closest to its own cost:
    # the best-of ratio, beside the medians the goal is stated in.
    best = {k: min(v) for k, v in times.items()}
    for name in ("StepTimer", "StepTimer, logs off", "StepTimer + scalars", "naive"):
        print(
            speedup_line(
                f"best of {args.rounds} fits, {name} vs no callback", best["none"], best[name]
            )
        )
    worst = max(med[k] for k in variants if k.startswith("StepTimer")) / med["none"]
    verdict = "met" if worst <= 1.01 else "NOT met"
    q1, _, q3 = statistics.quantiles(pairs["naive"], n=4)
    print(
        f"goal StepTimer <= 1.01x (logs and scalars on and off, worst {worst:.3f}x): {verdict}; "
        f"this run's noise: paired ratios of the naive timer spread {q1:.3f}-{q3:.3f}"
    )


def _time_inside_fit(model, ds, timer_cls) -> tuple[float, float]:
    """Seconds spent in the timer's Keras hooks during one real fit (each wrapped in a clock on
    the instance), and the fit's seconds."""
    timer = timer_cls()
    spent = [0.0]
    clock = time.perf_counter

    def timed(hook):
        def call(*args, **kwargs):
            t0 = clock()
            hook(*args, **kwargs)
            spent[0] += clock() - t0

        return call

    for name in dir(timer):
        if name.startswith("on_") and callable(getattr(timer, name)):
            setattr(timer, name, timed(getattr(timer, name)))
    quiet_gc()
    t0 = clock()
    model.fit(ds, epochs=1, verbose=0, callbacks=[timer])
    return spent[0], clock() - t0


def _hook_cost_per_step(timer_cls, steps: int = 200_000) -> float:
    """Seconds StepTimer's two batch hooks take per step, called as Keras calls them."""
    timer = timer_cls(warmup_steps=0)
    timer.set_params({"steps": steps, "epochs": 1})
    timer.on_train_begin()
    timer.on_epoch_begin(0)
    begin, end = timer.on_train_batch_begin, timer.on_train_batch_end
    t0 = time.perf_counter()
    for i in range(steps):
        begin(i)
        end(i)
    return (time.perf_counter() - t0) / steps


if __name__ == "__main__":
    main()
