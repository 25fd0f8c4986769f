"""Overhead of StepTimer on a fit of ≈0.5 ms steps on one core, vs no callback and a naive timer.

Runs the same compiled model over the same cached data (a few thousand steps per fit) with:
  * no callback (baseline),
  * StepTimer as it comes (its epoch figures added to Keras's logs),
  * StepTimer with ``add_to_logs=False``,
  * StepTimer writing TensorBoard scalars (``tensorboard_dir=``),
  * StepTimer without its memory readings (``memory_every_s=None``): the memory sampling's
    cost is StepTimer's against it (issue 67's goal: at most 1 %),
  * StepTimer without its batch-end hook (an ablation, not a variant anyone runs: the end
    stamps' cost is StepTimer's against it),
  * a naive per-step timer that reads ``logs["loss"]`` every step (what people write first),
  * a user's callback with a batch hook, alone and beside StepTimer, whose ledger times that
    hook at every call (the ledger's cost: the pair's ratio, against StepTimer's alone).
Each fit with a callback runs between two fits without one and is set against their mean (a
baseline on both sides cancels a drift and any effect of running first or second); the
variants come in a fresh random order each round, and the median of each one's ratios is the
figure. A second no-callback fit measured the same way, the A/A control, shows what that
median does when there is nothing to find: the noise floor of the run. The process is pinned
to one core (``--cpus one``, the default): on this 2-core VM a fit spread over both cores ran
3x noisier from fit to fit and a callback's work on Keras's callback thread could hide in the
idle core; on one core every microsecond of it is paid. A regression over 240-300 fits in a
random order (own variant, the previous fit's, the neighbours' mean) put StepTimer's cost there
at 1.08 % ± 0.26 %, nearly all of it its batch-begin hook, and the previous fit's effect at
0.0 %; since that hook only appends a clock reading (the rest is done at the epoch's end),
this benchmark puts StepTimer at 1.006-1.008×.

What else it prints: the cost of StepTimer's two batch hooks called in a loop (about 0.45 µs a
step), its memory readings timed inside a real fit (how many, and each one's cost with its
thread's wait for the interpreter), and each of its hooks timed inside a real fit (the batch
hooks about 4x their cost in the loop: the fit leaves them out of cache), that figure net of
the clocks around the hooks (a no-op hook timed the same way, about 1 µs a call), and each
variant's fastest fit (noise only adds time). The data sits in memory with tf.data
autotuning off, whose end-of-fit iterator teardown can otherwise add seconds to a random fit
(see ``_common.py``).
Prints ``name: X.XX× (baseline A s, toolkit B s)``.
Goal: StepTimer ≤ 1 % overhead (ratio ≤ 1.01). Its verdict rests on each variant's 95 %
interval of the median (distribution-free: ``stats.median_interval``), not on the largest of
the medians, which noise alone lifts: met when every interval lies at or under 1.01, not met
when one lies above, else not settled, with the rounds this run's noise would need.

The whole-fit ratios pair fits seconds apart, and where a host's speed moves by a fifth over
seconds (identical 2 s fits here: 1.45-2.24 s) no affordable number of rounds settles 1 %. So
the goal is read a second way, in the same run: within-fit pairs. A switch callback turns
StepTimer's batch hooks (and the ledger's wrap of a user's batch hook) on and off in blocks of
``--block`` steps inside one fit, a random one of each pair of neighbouring blocks on, and
stamps each block's start: each pair's on block over its off block is the hooks' cost against
a baseline tens of ms away, and a fit gives ~150 pairs. A fit whose switch turns nothing is
that design's A/A control. What a hook costs once a fit or an epoch (train begin and end,
epoch end, the memory thread) is not in the blocks: it is timed directly inside a fit per
variant (milliseconds, well above the clocks' microsecond) and added as a share of the fit.
The second goal line is that sum's interval, met / NOT met / not settled as the first.

Run it under Keras 3 (default) and tf_keras (``TF_USE_LEGACY_KERAS=1``): Keras 3 on the
TensorFlow backend already converts the logs to floats at every step for every fit, so the naive
timer's read costs little there; tf_keras does not, so there the naive read adds a device sync.
Under tf_keras a fit without callbacks skips the batch hooks altogether, and any callback that
has them pays tf_keras's per-step dispatch: a callback whose begin hook only appends a clock
reading measured 1.018× there (15 rounds), StepTimer 1.024× (its own code 0.38 % of the fit),
so the ≤ 1.01 goal is Keras 3's. It also runs without TensorFlow, on JAX or PyTorch
(``KERAS_BACKEND=jax``: the toolkit's NumPy batches; the scalars variant only where
TensorBoard is installed), as on a GPU machine's quiet CPU. There Keras hands every batch end
to a thread pool unless a callback that is not ``async_safe`` overrides the hook, so a plain
batch callback changes Keras's path, not only adds its own cost (benchmarks/README.md).

    python benchmarks/profiler_overhead.py [--steps 1500 --rounds 40 --block 10 --cpus one|all]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import math
import random
import statistics
import time

from _common import mlp_fit_setup, pin_cpus, quiet_gc, scratch, speedup_line

from toolkit.core import progress
from toolkit.core.stats import median_interval


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # Many short rounds rather than a few long ones: more pairs, and each pair's two fits
    # closer together in time.
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=40)
    # Within-fit pairs: short blocks pair best on a host whose speed moves over tens of ms (one
    # core here: 10-step blocks spread as widely as 50-step ones, so ten give five times the
    # pairs); a hook's after-effect on the next step's caches crosses into the next block at one
    # step in `block`.
    parser.add_argument("--block", type=int, default=10, help="steps per within-fit block")
    parser.add_argument(
        "--cpus",
        choices=("one", "all"),
        default="one",
        help="run on one core (default: quieter, and no idle core to hide a callback's work) "
        "or on all of them",
    )
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2: a spread needs two ratios")
    if args.block < 1 or args.steps < 6 * args.block:
        parser.error("--block must be at least 1, and --steps at least 6 blocks of it")
    cores = pin_cpus(args.cpus)  # before TensorFlow starts its threads

    from toolkit.core import compat
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

    class EveryBatch(keras.callbacks.Callback):
        """A user's callback with a batch hook (a counter), as many have: the ledger times
        its every call (two clock reads), which StepTimer alone beside it does not show."""

        def on_train_batch_end(self, batch, logs=None):
            self.n = getattr(self, "n", 0) + 1

    class NoOp(keras.callbacks.Callback):
        """A batch hook that does nothing: timed in a fit, what the clocks around a hook cost."""

        def on_train_batch_begin(self, batch, logs=None):
            pass

    class NoEndStamps(StepTimer):
        """StepTimer without its batch-end hook (Keras then has nothing of it to run on its
        callback thread): what StepTimer's end stamps cost, as an ablation only; the timer's
        figures without its ends are not read."""

        on_train_batch_end = keras.callbacks.Callback.on_train_batch_end

    board = scratch("overhead-tb-")
    variants = {
        "none": lambda: [],
        "StepTimer": lambda: [StepTimer()],
        "batch callback": lambda: [EveryBatch()],
        "StepTimer + batch callback": lambda: [StepTimer(), EveryBatch()],
        "StepTimer, logs off": lambda: [StepTimer(add_to_logs=False)],
        "StepTimer, memory off": lambda: [StepTimer(memory_every_s=None)],
        "StepTimer, no end stamps": lambda: [NoEndStamps()],
        "StepTimer + scalars": lambda: [StepTimer(tensorboard_dir=board)],
        "naive": lambda: [NaiveTimer()],
    }
    if importlib.util.find_spec("tensorboard") is None:  # a GPU host with JAX or PyTorch only
        del variants["StepTimer + scalars"]
    model.fit(ds, epochs=1, verbose=0)  # trace and warm up once for all variants
    # Every fit with a callback sits between two fits without one, and is set against their
    # mean: this machine's speed drifts over seconds (100-step chunks of one long fit
    # correlate 0.7 with the next and 0.3 with the tenth), so the nearer the baseline in time,
    # the more of that drift a pair cancels; a baseline on both sides cancels a linear drift
    # and any effect of running first or second. "none (again)" is the A/A control: a fit
    # without a callback measured like the others, so its line is this run's noise floor.
    variants["none (again)"] = variants["none"]
    # Within-fit pairs: a fit whose switch turns the named callbacks' batch hooks on and off in
    # blocks of `--block` steps; its pairs of neighbouring blocks, one on and one off, set the
    # hooks' cost against a baseline tens of ms away rather than seconds. The switch sits in
    # every such fit, StepTimer too where it is switched: only its batch hooks come and go.
    Switch = _switch_class(keras, args.block)
    switched = {
        "none (again)": lambda: ([], []),
        "StepTimer": lambda: ([t := StepTimer()], [t]),
        "StepTimer + batch callback": lambda: ([t := StepTimer(), b := EveryBatch()], [t, b]),
    }
    blocks: dict[str, list[float]] = {k: [] for k in switched}
    timed = [k for k in variants if k != "none"]
    times: dict[str, list[float]] = {k: [] for k in variants}
    pairs: dict[str, list[float]] = {k: [] for k in timed}
    order = random.Random(0)
    progress.say(
        f"profiler_overhead: {args.rounds} rounds of {2 * len(timed) + len(switched) + 1} fits, "
        f"{args.steps} steps each"
    )

    def fit(name: str) -> float:
        callbacks = variants[name]()
        quiet_gc()
        t0 = time.perf_counter()
        model.fit(ds, epochs=1, verbose=0, callbacks=callbacks)
        seconds = time.perf_counter() - t0
        times[name].append(seconds)
        return seconds

    def switched_fit(name: str) -> None:
        callbacks, targets = switched[name]()
        switch = Switch(targets, order)
        quiet_gc()
        model.fit(ds, epochs=1, verbose=0, callbacks=[switch, *callbacks])
        blocks[name] += switch.ratios()

    with progress.bar(args.rounds, "profiler_overhead", unit="round") as bar:
        before = fit("none")
        for _ in range(args.rounds):
            names = list(timed)
            order.shuffle(names)  # no variant always runs first, last, or after the same one
            for name in names:
                seconds = fit(name)
                after = fit("none")
                pairs[name].append(seconds / ((before + after) / 2))
                before = after
            for name in order.sample(list(switched), len(switched)):
                switched_fit(name)
            before = fit("none")  # the next pair's baseline: not across the switched fits
            bar.update()  # between rounds: outside every timed fit

    ratio = {k: statistics.median(v) for k, v in pairs.items()}
    base = statistics.median(times["none"])
    med = {"none": base} | {k: base * r for k, r in ratio.items()}
    step_ms = med["none"] / args.steps * 1e3
    print(
        f"# {compat.keras_flavor()} {compat.keras_version()}, {args.steps} steps of "
        f"{step_ms:.2f} ms, median of {args.rounds} interleaved rounds, each fit with a "
        f"callback against the no-callback fits on either side of it; {cores}"
    )
    # X < 1 is an overhead: 0.99× means the fit with the callback took 1 % longer.
    print(speedup_line("fit with StepTimer vs no callback", med["none"], med["StepTimer"]))
    print(
        speedup_line(
            "fit with StepTimer, logs off, vs no callback", med["none"], med["StepTimer, logs off"]
        )
    )
    if "StepTimer + scalars" in med:
        print(
            speedup_line(
                "fit with StepTimer + TensorBoard scalars vs no callback",
                med["none"],
                med["StepTimer + scalars"],
            )
        )
    print(
        speedup_line(
            "fit with StepTimer + a batch callback (its hooks timed by the ledger) vs that "
            "callback alone",
            med["batch callback"],
            med["StepTimer + batch callback"],
        )
    )
    print(
        speedup_line(
            "memory sampling overhead (StepTimer with memory vs without)",
            med["StepTimer, memory off"],
            med["StepTimer"],
        )
    )
    print(
        speedup_line(
            "end stamps' overhead (StepTimer with its batch-end hook vs without)",
            med["StepTimer, no end stamps"],
            med["StepTimer"],
        )
    )
    print(speedup_line("naive logs['loss'] timer vs no callback", med["none"], med["naive"]))
    print(speedup_line("StepTimer vs naive timer", med["naive"], med["StepTimer"]))
    print(
        speedup_line(
            "A/A control: a second no-callback fit vs no callback",
            med["none"],
            med["none (again)"],
        )
    )
    for name in timed:
        q1, _, q3 = statistics.quantiles(pairs[name], n=4)
        print(
            f"{name} overhead, 3 decimals: {ratio[name]:.3f}× (95% interval of the median "
            f"{_span(median_interval(pairs[name]))}; paired ratios' middle half {q1:.3f}-{q3:.3f})"
        )
    # The direct cost of the hooks, without the fit's noise (a lower bound: out of a fit they
    # stay in cache).
    hook_s = _hook_cost_per_step(StepTimer)
    print(
        f"StepTimer hooks: {hook_s * 1e6:.2f} µs per step = "
        f"{hook_s / (med['none'] / args.steps) * 100:.3f}% of a {step_ms:.2f} ms step"
    )
    for name, ratios in blocks.items():
        lo, hi = median_interval(ratios)
        print(
            f"within-fit pairs, {name} batch hooks on vs off: {statistics.median(ratios):.3f}× "
            f"(95% interval of the median {_span((lo, hi), 'pairs')}; {len(ratios)} pairs of "
            f"{args.block}-step blocks)"
        )
    hooked, threaded, read_s, read_fit_s, thread_s = _memory_reads_inside_fit(model, ds, StepTimer)
    reads = hooked + threaded
    print(
        f"StepTimer's memory readings inside a real fit: {reads} in a {read_fit_s:.3f} s fit "
        f"({hooked} at batch begins and boundaries, {threaded} by its thread), "
        f"{read_s / max(reads, 1) * 1e6:.1f} µs each (the thread's wait for the interpreter "
        f"included) = {read_s / read_fit_s * 100:.2f}%"
    )
    spent, calls, fit_s = _time_inside_fit(model, ds, variants["StepTimer"])
    inside_s = sum(spent.values())
    # The clocks around a hook cost about what a short hook does: time a no-op hook the same
    # way, in a fit of its own, and take its cost per call off each of StepTimer's calls.
    null_spent, null_calls, _ = _time_inside_fit(model, ds, lambda: [NoOp()])
    per_call = null_spent["on_train_batch_begin"] / null_calls["on_train_batch_begin"]
    net_s = inside_s - per_call * sum(calls.values())
    parts = ", ".join(
        f"{name.removeprefix('on_').replace('_', ' ')} {seconds * 1e3:.2f}"
        for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1])
        if seconds >= 5e-6
    )
    print(
        f"StepTimer's own code inside a real fit (every hook timed): {inside_s * 1e3:.2f} ms of "
        f"a {fit_s:.3f} s fit = {inside_s / fit_s * 100:.2f}% (the clocks around the hooks "
        f"included; ms in each: {parts})"
    )
    print(
        f"StepTimer's own code inside a real fit, net of those clocks: {net_s * 1e3:.2f} ms = "
        f"{net_s / fit_s * 100:.2f}% (a no-op batch hook timed the same way in a fit: "
        f"{per_call * 1e6:.2f} µs a call, {sum(calls.values())} calls)"
    )
    # Noise only ever adds time, so each variant's fastest fit is the closest to its own cost:
    # the best-of ratio, beside the medians the goal is stated in.
    # The A/A control's fits are the baseline here: as many fits as each variant's.
    best = {k: min(v) for k, v in times.items()}
    for name in ("StepTimer", "StepTimer, logs off", "StepTimer + scalars", "naive"):
        if name not in best:
            continue
        print(
            speedup_line(
                f"best of {args.rounds} fits, {name} vs no callback",
                best["none (again)"],
                best[name],
            )
        )
    print(_verdict(pairs, GOAL))
    # The same goal from within-fit pairs: each shipped variant's batch hooks (its blocks; the
    # variants alone share StepTimer's, whose memory readings at due begins the one without
    # memory does not take) plus what it spends once a fit or an epoch (its other hooks, timed
    # in a fit of its own, and the memory thread's readings), as a share of that fit.
    per_fit = {}
    for name in SHIPPED:
        shares = []
        for _ in range(3):  # the median of three fits: one slow epoch end is not the figure
            spent, _, seconds = _time_inside_fit(model, ds, variants[name])
            shares.append(sum(v for k, v in spent.items() if "batch" not in k) / seconds)
        thread = thread_s / read_fit_s if name != "StepTimer, memory off" else 0.0
        per_fit[name] = statistics.median(shares) + thread
    print(
        "per-fit hooks and the memory thread, % of a fit: "
        + ", ".join(f"{name} {share * 100:.2f}" for name, share in per_fit.items())
    )
    print(_composed_verdict(blocks, per_fit, GOAL))


def _verdict(pairs: dict[str, list[float]], goal: float) -> str:
    """The goal's line from the whole-fit ratios: each shipped variant's median with its 95 %
    interval, judged by `_settle`. The largest of five noisy medians is not the figure to judge
    by: at this machine's noise (each median's standard error about 1.5 %) the largest of five
    sits about 1.7 % above the truth with no cost at all. The ledger's variant is judged by its
    rounds' quotients: StepTimer beside a batch callback, over that callback alone."""
    shipped = {k: v for k, v in pairs.items() if k in SHIPPED}
    pair, alone = pairs["StepTimer + batch callback"], pairs["batch callback"]
    shipped["StepTimer + batch callback"] = [a / b for a, b in zip(pair, alone, strict=True)]
    bounds = {k: median_interval(v) for k, v in shipped.items()}
    mid = {k: statistics.median(v) for k, v in shipped.items()}
    control = pairs["none (again)"]
    return _goal_line("logs and scalars on and off", bounds, mid, control, "rounds", goal)


def _composed_verdict(
    blocks: dict[str, list[float]], per_fit: dict[str, float], goal: float
) -> str:
    """The goal's line from within-fit pairs: a shipped variant's cost is its batch hooks'
    (the median ratio of its blocks, with that median's 95 % interval) plus its per-fit share,
    taken as known (milliseconds timed directly, against a noise in its blocks' hundreds of
    µs). The step ratio is put on the whole fit, though Keras's own per-fit work has no hooks
    in it: an upper bound by that work's share. Judged by `_settle`, as the whole-fit line."""
    leg = {k: "StepTimer + batch callback" if "batch" in k else "StepTimer" for k in per_fit}
    bounds, mid = {}, {}
    for name, share in per_fit.items():
        lo, hi = median_interval(blocks[leg[name]])
        bounds[name] = (lo + share, hi + share)
        mid[name] = statistics.median(blocks[leg[name]]) + share
    what = "from within-fit pairs: batch hooks' blocks + per-fit share"
    return _goal_line(what, bounds, mid, blocks["none (again)"], "pairs", goal)


def _goal_line(
    what: str,
    bounds: dict[str, tuple[float, float]],
    mid: dict[str, float],
    samples: list[float],
    unit: str,
    goal: float,
) -> str:
    """The goal's line: the worst variant's figure (`mid`) and 95 % interval (`bounds`), and the
    verdict, against the A/A control's `samples` (as many as each variant's)."""
    worst = max(mid, key=mid.get)
    return (
        f"goal StepTimer <= {goal:.2f}x ({what}; worst {worst} {mid[worst]:.3f}x, 95% interval "
        f"{_span(bounds[worst], unit)}): "
        f"{_settle(bounds, mid, median_interval(samples), len(samples), unit, goal)}"
    )


def _settle(
    bounds: dict[str, tuple[float, float]],
    mid: dict[str, float],
    control: tuple[float, float],
    n: int,
    unit: str,
    goal: float,
) -> str:
    """Met when every variant's 95 % interval lies at or under `goal`, NOT met when one lies
    above it, else not settled: then how many `unit` would settle it, for the variant whose
    interval spans the goal and needs the most. An interval narrows as the square root of its
    samples, so it must shrink by its half-width over its median's distance from the goal."""
    if all(top <= goal for _, top in bounds.values()):
        return "met (every variant's 95% interval at or under it)"
    above = [k for k, (lo, _) in bounds.items() if lo > goal]
    if above:
        high = max(above, key=lambda k: bounds[k][0])
        return f"NOT met ({high}: 95% interval {_span(bounds[high], unit)}, above it)"
    if not all(math.isfinite(hi - lo) for lo, hi in [*bounds.values(), control]):
        return f"not settled: {n} {unit} give no 95% interval (6 at least)"

    def need(name: str) -> int:
        lo, hi = bounds[name]
        gap = max(abs(goal - mid[name]), 1e-4)  # a median on the goal: no count settles it
        return max(6, math.ceil(n * ((hi - lo) / 2 / gap) ** 2))

    spans = [k for k, (lo, hi) in bounds.items() if lo <= goal < hi]
    name = max(spans, key=need)
    return (
        f"not settled at this noise ({name}: 95% interval {_span(bounds[name], unit)} across "
        f"it; the A/A control's {_span(control, unit)}; about {need(name)} {unit} would settle it)"
    )


def _switch_class(keras, block: int):
    """A callback that turns other callbacks' batch hooks on and off in blocks of `block` steps
    inside one fit, in a random order within each pair of blocks, and stamps each block's
    first begin. Keras looks each hook up on the instance at every call, so a hook is switched
    off by an instance attribute: StepTimer's own batch hooks become a C-level no-op, and a
    hook the ledger wraps (``_toolkit_timed``) goes back to the callback's own. A hook that is
    already a C-level no-op (StepTimer's batch end where only the epoch's last is stamped)
    is left to its owner, and the epoch's last block is always on: that end is stamped and
    the timer ends its epoch as in any fit. The switch's own hook runs in both blocks of a
    pair; Keras's call of a switched-off hook (about 0.05 µs) stays in the baseline."""
    import types

    off_hook = "".format
    hooks = ("on_train_batch_begin", "on_train_batch_end")

    class Switch(keras.callbacks.Callback):
        # An instrument, not a user's callback: beside it StepTimer probes for a profiler as
        # it does alone (once an epoch); a user's batch callback still makes it probe at each.
        starts_untold_profiler = False

        def __init__(self, targets, rng) -> None:
            super().__init__()
            self.targets, self.rng = targets, rng
            self.stamps: list[float] = []
            self.on: list[bool] = []
            self.states: list[tuple[object, str, object, object]] | None = None
            self.first = True  # which block of the pair is on: drawn at each pair's first

        def on_train_batch_begin(self, batch, logs=None):
            if batch % block:
                return
            self.stamps.append(time.perf_counter())
            k = batch // block
            if self.states is None:  # the hooks as this fit's train begins set them
                self.states = list(_switches(self.targets))
            if k % 2 == 0:
                self.first = self.rng.random() < 0.5
            on = self.first if k % 2 == 0 else not self.first
            if batch + block >= ((self.params or {}).get("steps") or math.inf):
                on = True  # the epoch's last block: its end stamped, its epoch ended as usual
            self.on.append(on)
            for cb, hook, on_value, off_value in self.states:
                if on and on_value is _ABSENT:
                    vars(cb).pop(hook, None)  # the class's hook again
                else:
                    setattr(cb, hook, on_value if on else off_value)

        def ratios(self) -> list[float]:
            """Each pair's on block over its off block, but the fit's first pair (its first
            steps and readings) and a pair the last block is in (on either way)."""
            took = [b - a for a, b in itertools.pairwise(self.stamps)]
            out = []
            for k in range(2, len(took) - 1, 2):
                if self.on[k] == self.on[k + 1]:
                    continue
                on, off = (took[k], took[k + 1]) if self.on[k] else (took[k + 1], took[k])
                out.append(on / off)
            return out

    def _switches(targets):
        """(callback, hook, its value when on, when off) for each hook the switch turns."""
        timer = targets[0] if targets else None
        for cb in targets:
            for hook in hooks:
                value = vars(cb).get(hook, _ABSENT)
                current = getattr(cb, hook)
                if isinstance(current, types.BuiltinFunctionType):
                    continue  # a C-level no-op already (StepTimer's skipped ends)
                if getattr(current, "_toolkit_timed", False):
                    yield cb, hook, value, current.__wrapped__  # the ledger's wrap, off
                elif cb is timer:
                    yield cb, hook, value, off_hook

    return Switch


_ABSENT = object()


def _span(bounds: tuple[float, float], unit: str = "rounds") -> str:
    """An interval from `median_interval`, as printed (`unit`: what too few of gave none)."""
    lo, hi = bounds
    return f"{lo:.3f}-{hi:.3f}" if math.isfinite(hi - lo) else f"none under 6 {unit}"


GOAL = 1.01  # StepTimer's promise: at most 1 % on a fit's time
# The variants a user can run (the goal is theirs); the others are ablations that find a cost.
SHIPPED = ("StepTimer", "StepTimer, logs off", "StepTimer, memory off", "StepTimer + scalars",
           "StepTimer + batch callback")  # fmt: skip


def _time_inside_fit(model, ds, make) -> tuple[dict[str, float], dict[str, int], float]:
    """Seconds spent in each of the timer's Keras hooks during one real fit (each wrapped in a
    clock on the instance; the batch-begin hook once train begin has set this fit's), the calls
    of each, and the fit's seconds; `make` gives the fit's callbacks, the timer first. The
    batch-end hook is not timed where the fit needs no end stamps but the epoch's last (Keras
    3, data of known length): it is then a C-level no-op, which a clock around it would only
    make dearer, and the one stamped end is left out."""
    callbacks = make()
    timer = callbacks[0]
    spent: dict[str, float] = {}
    calls: dict[str, int] = {}
    clock = time.perf_counter

    def timed(name, hook):
        def call(*args, **kwargs):
            t0 = clock()
            hook(*args, **kwargs)
            spent[name] = spent.get(name, 0.0) + clock() - t0
            calls[name] = calls.get(name, 0) + 1

        call.timed = True
        return call

    for name in dir(timer):
        if name.startswith("on_") and callable(getattr(timer, name)):
            setattr(timer, name, timed(name, getattr(timer, name)))
    train_begin = timer.on_train_begin

    def begin_then_wrap(*args, **kwargs):
        train_begin(*args, **kwargs)
        hook = timer.on_train_batch_begin  # this fit's (StepTimer's train begin resets it)
        if not getattr(hook, "timed", False):
            timer.on_train_batch_begin = timed("on_train_batch_begin", hook)

    timer.on_train_begin = begin_then_wrap
    quiet_gc()
    t0 = clock()
    model.fit(ds, epochs=1, verbose=0, callbacks=callbacks)
    return spent, calls, clock() - t0


def _memory_reads_inside_fit(model, ds, timer_cls) -> tuple[int, int, float, float, float]:
    """How many memory readings one real fit takes (the fit's own hooks', the thread's), their
    seconds, the fit's seconds, and the thread's readings' seconds (outside every hook)."""
    from toolkit.profiling import _memory

    original = _memory.MemorySampler.read
    spent = [0, 0, 0.0, 0.0]
    clock = time.perf_counter

    def read(self, by_thread=False):
        t0 = clock()
        original(self, by_thread)
        spent[1 if by_thread else 0] += 1
        spent[2] += clock() - t0
        if by_thread:
            spent[3] += clock() - t0

    _memory.MemorySampler.read = read
    try:
        quiet_gc()
        t0 = clock()
        model.fit(ds, epochs=1, verbose=0, callbacks=[timer_cls()])
        return spent[0], spent[1], spent[2], clock() - t0, spent[3]
    finally:
        _memory.MemorySampler.read = original


def _hook_cost_per_step(timer_cls, steps: int = 200_000) -> float:
    """Seconds StepTimer's two batch hooks take per step, called as Keras calls them. Out of a
    fit the timer cannot read the fit's input, so it is told what a Keras 3 fit over data of
    known length tells it (only the epoch's last end stamped); tf_keras stamps every end. The
    fit is ended after: its memory thread would otherwise read on through the measurements
    that follow."""
    from toolkit.core import compat

    timer = timer_cls(warmup_steps=0)
    timer.set_params({"steps": steps, "epochs": 1})
    timer.on_train_begin()
    timer._last_end_only = compat.keras_flavor() == "keras3" and not timer._async
    timer.on_epoch_begin(0)
    begin, end = timer.on_train_batch_begin, timer.on_train_batch_end
    try:
        t0 = time.perf_counter()
        for i in range(steps):
            begin(i)
            end(i)
        return (time.perf_counter() - t0) / steps
    finally:
        timer.on_epoch_end(0)
        timer.on_train_end()


if __name__ == "__main__":
    main()
