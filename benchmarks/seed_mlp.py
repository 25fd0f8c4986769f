"""The seed post's MLP training code vs the same model and step count through
toolkit.runner.train.

Seed (as published): MLP 256 -> 512 -> 10, batch 32, batches made by NumPy in a Python
generator read with ``from_generator``, one ``train_on_batch`` call per step, 1000 steps; run
without and with its ``.prefetch(AUTOTUNE)``. The seed's timer covers the loop, its first call
(tracing) included.

Toolkit: the same model, optimizer, metrics, batch size and number of steps through
``toolkit.runner.train.run`` with its fast settings: the same amount of random data made once
with NumPy and fed by the builder (``pipeline``: batch, prefetch), ``fit`` instead of a Python loop,
``fused_steps=100`` (100 training steps inside one compiled train step) and ``jit_compile``
(so each 100-step loop is one XLA program). FLOP counting is off: it is not training.

Three comparisons, because the first call's XLA compilation (~2.5 s here) does not shrink with
the step count while the steps do:

* steady state: time per 1000 steps after the first call, on both sides;
* the seed's timed region: the training loop, first call (tracing/compilation) included;
  on the toolkit's side the whole ``fit`` call, timed around it (its data adapter, the
  optimizer's variables, the first call's compile, the steps, the iterator's end);
* the whole ``run()`` call: data, model build, compile, training and the report;
* with ``--compile_cache`` (each backend, a later run of the same script): the training loop
  with its compile read from the toolkit's cache of compiled programs. Not the first run, so
  not the goal's figure; what re-running costs.

Then the same toolkit run under each other Keras backend that is installed (``--backends``),
against the same seed figures: JAX with ``fused_steps=100`` (a ``jax.lax.scan`` of 100 steps
in one jitted call, rolled on a CPU since the step has no convolution: unrolled, its compile
alone took longer than the seed's loop; Keras 3.15's ``steps_per_execution=50`` there is a Python
loop of jitted calls, about 2x slower a step here, and 3.16's scan of it stacks the batches on the
host each call: ``scan_vs_fused.py``), PyTorch eager with one step per call (``torch.compile``
costs ~40 s here). On JAX and PyTorch a step is
timed where it finished (its batch end), not where it was queued (docs/guide.md), so the
steady-state sums are exact.

And, where JAX is installed, a floor: the same step written by hand in JAX (``floor_run``: no
Keras, no toolkit, no metric, the data on the device first), and the ratios it reaches. On
this 2-core CPU that floor is what bounds the ratios, not the toolkit, so the goals are set
against it, on the backend the toolkit would pick for each: the steady state at least 0.95 of
the hand-written step's, the loop with its compile at least 0.9 of the floor's loop (its own
trace, compile and steps).

The figures are medians of ``--rounds`` interleaved rounds (step times here drift by ±10 %
between runs), and each run gets a fresh process: a finished tf.data pipeline can leave
threads behind (autotuning, the generator's) that would eat into the next run's 2 cores.

    python benchmarks/seed_mlp.py [--steps 1000] [--fused_steps 100] [--backends jax,torch]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import quiet_gc, speedup_line, timed_fit

from toolkit.core import progress

# The toolkit's settings for the seed MLP on each other backend (see the module docstring).
BACKEND_SETTINGS = {
    "jax": ["--fused_steps=100", "--steps_per_execution=1", "--jit_compile"],
    "torch": ["--fused_steps=1", "--steps_per_execution=1", "--no-jit_compile"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--fused_steps", type=int, default=100)
    parser.add_argument("--steps_per_execution", type=int, default=1)
    parser.add_argument("--jit_compile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--data_loader", default="auto", help="the toolkit's input: auto, tf_data, grain"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    parser.add_argument(
        "--backends", default="jax,torch", help="other Keras backends to run the toolkit under"
    )
    parser.add_argument(
        "--compile_cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time each backend's later runs, their compile read from --compile_cache",
    )
    parser.add_argument(
        "--part",
        choices=["seed", "seed_prefetch", "toolkit", "cached", "floor"],
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.part == "floor":
        print(json.dumps(floor_run(args.steps, args.fused_steps)))
        return
    if args.part:
        print(json.dumps(measure(args)))
        return

    # --compile_cache's, this run's; removed at exit even when a part fails
    cache = tempfile.TemporaryDirectory(prefix="seed-mlp-compiled-")
    cache_dir = cache.name

    def part(name: str, backend: str = "tensorflow") -> list[float]:
        argv = [sys.executable, __file__, *sys.argv[1:], f"--part={name}"]
        if backend != "tensorflow":
            argv += BACKEND_SETTINGS[backend]
        env = {**os.environ, "KERAS_BACKEND": backend, "TOOLKIT_CACHE_DIR": cache_dir}
        out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
        return json.loads(out.stdout.strip().splitlines()[-1])

    from statistics import median

    from toolkit.core import compat

    others = [b for b in args.backends.split(",") if b.strip()]
    missing = [b for b in others if importlib.util.find_spec(b) is None]
    others = [b for b in others if b not in missing]
    # the floor's steady state needs a call after its first (its 100 steps a call, as on JAX)
    has_jax = importlib.util.find_spec("jax") is not None and args.steps >= 200
    rounds, cached, floors = [], [], []
    backends = [b for b in ["tensorflow", *others] if b != "torch"]  # torch: eager here
    if args.compile_cache:  # untimed runs that fill the cache (the key holds the trace order)
        for backend in backends:
            for _ in range(2):
                part("cached", backend)
    runs = 3 + len(others) + (len(backends) if args.compile_cache else 0) + has_jax
    progress.say(f"seed_mlp: {args.rounds} rounds of {runs} runs")
    with progress.bar(args.rounds, "seed_mlp", unit="round") as bar:
        for _ in range(args.rounds):
            rounds.append(
                [part(name) for name in ("seed", "seed_prefetch", "toolkit")]
                + [part("toolkit", backend) for backend in others]
            )
            if args.compile_cache:
                cached.append([part("cached", backend) for backend in backends])
            if has_jax:
                floors.append(part("floor", "jax"))
            bar.update()
    cache.cleanup()
    medians = [
        [median(r[i][k] for r in rounds) for k in range(len(rounds[0][i]))]
        for i in range(len(rounds[0]))
    ]
    (seed_plain, seed_plain_step), (seed_prefetch, seed_prefetch_step), (wall, fit, step, _) = (
        medians[:3]
    )
    seed_best, seed_step = min(seed_plain, seed_prefetch), min(seed_plain_step, seed_prefetch_step)
    print(
        f"# {compat.keras_flavor()} {compat.keras_version()}, {args.steps} steps of batch 32; "
        f"toolkit on tensorflow: fused_steps={args.fused_steps}, steps_per_execution="
        f"{args.steps_per_execution}, jit_compile; medians of {args.rounds} interleaved rounds, "
        "each run in a fresh process"
    )
    print(speedup_line("seed with its prefetch vs without", seed_plain, seed_prefetch))
    print(
        speedup_line(
            "steady state, per 1000 steps after the first call, vs the seed's best",
            seed_step * 1000,
            step * 1000,
        )
    )
    print(
        speedup_line(
            "training loop (the fit call), first call (compile) included, vs the seed's best",
            seed_best,
            fit,
        )
    )
    print(
        speedup_line(
            "whole toolkit.runner.train.run call (data, build, compile, report) vs the seed's best",
            seed_best,
            wall,
        )
    )
    best = {"tensorflow": (step, fit)}
    for backend, (_, b_fit, b_step, _) in zip(others, medians[3:], strict=True):
        best[backend] = (b_step, b_fit)
        settings = " ".join(BACKEND_SETTINGS[backend])
        print(
            speedup_line(
                f"{backend} backend ({settings}), steady state per 1000 steps, vs the seed's best",
                seed_step * 1000,
                b_step * 1000,
            )
        )
        print(
            speedup_line(
                f"{backend} backend, the 1000-step loop with its compile, vs the seed's best",
                seed_best,
                b_fit,
            )
        )
    if cached:
        for i, backend in enumerate(backends):
            c_fit = median(r[i][1] for r in cached)
            print(
                speedup_line(
                    f"{backend} backend, a later run: the 1000-step loop with its compile read "
                    "from --compile_cache, vs the seed's best",
                    seed_best,
                    c_fit,
                )
            )
    if floors:
        f_loop, f_compile, f_step = (median(f[k] for f in floors) for k in range(3))
        print(
            f"floor, the same step written by hand in JAX (no Keras, no metric, data already "
            f"on the device): {f_step * 1e3:.3f} ms/step after its first call (fastest of 5 "
            f"passes); its trace and "
            f"compile {f_compile:.2f} s; its {args.steps}-step loop {f_loop:.2f} s. Against the "
            f"seed, by hand: {seed_step / f_step:.2f}x in steady state, "
            f"{seed_best / f_loop:.2f}x for the loop"
        )
    if "jax" in best:
        print(
            speedup_line(
                f"jax backend's {args.steps}-step loop with its compile, vs the tensorflow "
                "backend's",
                best["tensorflow"][1],
                best["jax"][1],
            )
        )
    # The goals, against the floor, on the backend the toolkit would pick for each (keras-perf
    # backends measures it).
    fastest = min(best, key=lambda b: best[b][0])
    quickest = min(best, key=lambda b: best[b][1])
    if not floors:
        print("goals: not measured (set against the floor, which needs jax and >= 200 steps)")
    else:
        steady_met = f_step / best[fastest][0] >= 0.95
        loop_met = f_loop / best[quickest][1] >= 0.9
        print(
            speedup_line(
                f"goal: steady state per 1000 steps, on {fastest}, vs the hand-written floor's "
                f"(>= 0.95×: {'met' if steady_met else 'NOT met'})",
                f_step * 1000,
                best[fastest][0] * 1000,
            )
        )
        print(
            speedup_line(
                f"goal: the {args.steps}-step loop with its compile, on {quickest}, vs the "
                f"floor's (>= 0.9×: {'met' if loop_met else 'NOT met'})",
                f_loop,
                best[quickest][1],
            )
        )
    for backend in missing:
        print(f"{backend} backend: not installed (pip install 'keras-perf-toolkit[{backend}]')")


def floor_run(steps: int, fused_steps: int) -> list[float]:
    """The floor: the seed's MLP step written by hand in JAX (no Keras, no toolkit, no
    metric): dense-relu-dense, softmax cross-entropy, Adam with Keras's defaults, `fused_steps`
    steps in one jitted ``lax.scan``, the data on the device before the clock starts. Returns
    (the loop: trace, compile and every step; the trace and compile alone; time per step
    after the first call, the fastest of 5 passes)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    batch_size = 32
    calls = steps // fused_steps
    rng = np.random.default_rng(0)
    xs = jax.device_put(rng.random((calls, fused_steps, batch_size, 256), dtype=np.float32))
    ys = jax.device_put(rng.integers(0, 10, (calls, fused_steps, batch_size)).astype(np.int32))

    def glorot(key, fan_in, fan_out):
        limit = np.sqrt(6 / (fan_in + fan_out))
        return jax.random.uniform(key, (fan_in, fan_out), jnp.float32, -limit, limit)

    k1, k2 = jax.random.split(jax.random.key(0))
    params = {
        "w1": glorot(k1, 256, 512),
        "b1": jnp.zeros(512),
        "w2": glorot(k2, 512, 10),
        "b2": jnp.zeros(10),
    }
    zeros = jax.tree.map(jnp.zeros_like, params)
    state = (params, zeros, zeros, jnp.zeros((), jnp.float32))
    lr, beta1, beta2, eps = 1e-3, 0.9, 0.999, 1e-7  # keras.optimizers.Adam's defaults

    def loss_fn(p, x, y):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        logp = jax.nn.log_softmax(h @ p["w2"] + p["b2"])
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def step(carry, batch):
        p, m, v, t = carry
        loss, g = jax.value_and_grad(loss_fn)(p, *batch)
        t = t + 1
        m = jax.tree.map(lambda m, g: beta1 * m + (1 - beta1) * g, m, g)
        v = jax.tree.map(lambda v, g: beta2 * v + (1 - beta2) * g * g, v, g)
        rate = lr * jnp.sqrt(1 - beta2**t) / (1 - beta1**t)
        p = jax.tree.map(lambda p, m, v: p - rate * m / (jnp.sqrt(v) + eps), p, m, v)
        return (p, m, v, t), loss

    @jax.jit
    def fused(carry, x, y):
        return jax.lax.scan(step, carry, (x, y))

    start = time.perf_counter()
    compiled = fused.lower(state, xs[0], ys[0]).compile()
    compile_s = time.perf_counter() - start
    state, losses = compiled(state, xs[0], ys[0])
    losses.block_until_ready()
    after_first = time.perf_counter()
    for i in range(1, calls):
        state, losses = compiled(state, xs[i], ys[i])
    losses.block_until_ready()
    end = time.perf_counter()
    # A floor is the best the step can do: the steady state is the fastest of this pass and
    # 4 more of the same calls (one pass is ~0.15 s, short enough for a neighbour to move it).
    passes = [end - after_first]
    for _ in range(4):
        begin = time.perf_counter()
        for i in range(1, calls):
            state, losses = compiled(state, xs[i], ys[i])
        losses.block_until_ready()
        passes.append(time.perf_counter() - begin)
    assert np.isfinite(float(losses[-1]))
    return [end - start, compile_s, min(passes) / (steps - fused_steps)]


def measure(args: argparse.Namespace) -> list[float]:
    """One part, in this process: the seed's (total, per step) or the toolkit's
    (run() call, fit, per step, first call). TensorFlow is imported for the seed's parts
    only: the toolkit's run on JAX or PyTorch needs none (a GPU machine may have none)."""

    import numpy as np

    from toolkit.core import compat
    from toolkit.runner import train
    from toolkit.runner.config import TrainConfig

    keras = compat.keras()
    batch_size, steps = 32, args.steps

    def mlp():
        return keras.Sequential(
            [
                keras.Input((256,)),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )

    def seed_run(prefetch: bool) -> tuple[float, float]:
        """(the seed's timed loop, its time per step after the first call)."""
        import tensorflow as tf

        def load_data(size=steps * batch_size):  # the seed's generator
            for _ in range(0, size, batch_size):
                yield np.random.rand(batch_size, 256).astype(np.float32)

        ds = tf.data.Dataset.from_generator(
            load_data, output_signature=tf.TensorSpec((batch_size, 256), tf.float32)
        )
        if prefetch:
            ds = ds.prefetch(tf.data.AUTOTUNE)
        model = mlp()
        model.compile(
            optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"]
        )
        start = time.perf_counter()
        after_first = last = None
        for batch in ds.take(steps):
            model.train_on_batch(batch, np.random.randint(0, 10, batch_size))
            last = time.perf_counter()
            after_first = after_first or last
        # The seed's timer stops after the loop, so it includes the iterator's teardown (with
        # autotuning on, up to the autotuner's next tick); the per-step figure does not.
        end = time.perf_counter()
        return end - start, (last - after_first) / (steps - 1)

    def toolkit_run() -> tuple[float, float, float, float]:
        """(the whole run() call, the fit call's wall time, time per step after the first
        call, the first call: its trace, compile and steps). The fit call is timed around
        it, as the seed's loop is: its setup (the data adapter, the optimizer's variables),
        the first call's trace and compile, the steps, and the iterator's end, not only from
        its train-begin to its train-end callback."""
        fit_calls: list[float] = []
        start = time.perf_counter()
        rng = np.random.default_rng(0)
        x = rng.random((steps * batch_size, 256), dtype=np.float32)
        y = rng.integers(0, 10, steps * batch_size).astype(np.int32)
        task = train.Task(
            name="seed-mlp",
            build_model=lambda: timed_fit(mlp(), fit_calls),
            train=(x, y),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            num_classes=10,
        )
        config = TrainConfig(
            epochs=1,
            batch_size=batch_size,
            steps_per_execution=args.steps_per_execution,
            fused_steps=args.fused_steps,
            jit_compile=args.jit_compile,
            count_flops=False,
            report_dir=None,
            compile_cache=args.part == "cached",
            data_loader=args.data_loader,
        )
        result = train.run(task, config)
        wall = time.perf_counter() - start
        report = result.report
        assert report.steps.total_steps == steps, report.steps.total_steps
        assert int(result.model.optimizer.iterations.numpy()) == steps
        assert len(fit_calls) == 1, fit_calls
        after_first = [c for c in report.timeline if c[3] != "first"]
        steady = sum(c[0] for c in after_first) / sum(c[1] for c in after_first)
        first = sum(c[0] for c in report.timeline if c[3] == "first")
        return wall, fit_calls[0], steady, first

    quiet_gc()
    if args.part in ("toolkit", "cached"):
        return list(toolkit_run())
    return list(seed_run(prefetch=args.part == "seed_prefetch"))


if __name__ == "__main__":
    main()
