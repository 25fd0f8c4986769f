"""Your own model, measured right: StepTimer, ``diagnose`` and ``tune`` on models and pipelines
written as users write them (``benchmarks/_own_models.py``: a GAN with its own
``train_step``, a contrastive model, a zipped and mapped mixup pipeline, a multi-input model
fed dicts, a bidirectional LSTM, a vision transformer with augmentation layers), on every
backend where each runs, each figure printed beside an independent measurement made in fresh
processes with a clock of this script's own:

* **StepTimer**: examples/s of a fit's steps after a warm-up, against a plain
  ``time.perf_counter`` at each batch end in the same fit (this script's callback);
* **diagnose**: its verdict, against fresh-process fits of the real pipeline and of one batch
  repeated (input costs nothing), each over a window of at least 3 s after a warm-up fit,
  twice in turn (the faster kept), in ``--rounds`` processes (the median ratio): the real fit
  at least 0.9× the step alone is compute-bound, below 0.8× input-bound, between balanced;
* **tune**, in the README's two forms, ``tune(build)`` (the pick confirmed in fresh processes
  that call ``build`` again) and ``tune(model, data)`` (this process alone), each with a
  ``--budget`` of 30 s: what it measured (two settings at least, or what it left untried said),
  and the gain it claims against interleaved fresh-process fits of the defaults and its pick,
  timed by this script's clock, each for as long as tune's own fresh runs
  (``FRESH_WINDOW_S``) at its own rate.

Lines like ``mixup/tensorflow: tune(build) claims 1.31× (1.22–1.40, 2 rounds in fresh
processes) ..., fresh processes 1.27×``. The goal: no errors, every verdict agreeing, every
claim within ±10 % of the fresh-process ratio or said as unconfirmed, no trusted setting slower.

    python benchmarks/own_models.py [--models mixup,gan] [--backends tensorflow,jax]
        [--budget 30] [--tune_forms fresh,python] [--checks steptimer,diagnose]
        [--rounds 3] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from toolkit.search.fresh import FRESH_WINDOW_S  # a tune pair's window: as tune's fresh runs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WARMUP = 10  # steps before this script's clock starts (the first call compiles)
WINDOW_S = 3.0  # the verdict reference's timed windows, at least
COMPUTE_AT, INPUT_BELOW = 0.9, 0.8  # the independent verdict's lines (fit / step alone)


# ---------------------------------------------------------------------------- in a child


def _build(name: str):
    sys.path.insert(0, HERE)
    import _own_models

    return getattr(_own_models, f"make_{name}")()


class _Clock:
    """This script's own clock: ``time.perf_counter`` at every batch end. With `window_s`, it
    ends the fit once that long has passed after the warm-up, with `min_calls` timed calls."""

    def __init__(self, window_s: float | None = None, spe: int = 1, min_calls: int = 10):
        from toolkit.core import compat

        keras = compat.keras()
        stamps = self.stamps = []
        first = max(1, -(-WARMUP // spe))  # the stamp the timed window starts at

        class Stamp(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                stamps.append(time.perf_counter())
                timed = len(stamps) - 1 - first
                if window_s and timed >= min_calls and stamps[-1] - stamps[first] >= window_s:
                    self.model.stop_training = True

        self.callback = Stamp()

    def rate(self, batch_size: int, spe: int = 1) -> float:
        """Examples/s from the batch end after the warm-up to the last."""
        first = max(1, -(-WARMUP // spe))
        ends = self.stamps[first:]
        return batch_size * spe * (len(ends) - 1) / (ends[-1] - ends[0])


def _batch_size(data) -> int:
    import tensorflow as tf

    first = tf.nest.flatten(next(iter(data.take(1))))[0]
    return int(first.shape[0])


def _fit(model, data, steps: int, callbacks=(), spe: int = 1):
    model.fit(data.repeat(), epochs=1, steps_per_epoch=-(-steps // spe) * spe,
              callbacks=list(callbacks), verbose=0)  # fmt: skip


def _fit_alone(model, data, steps: int, callbacks=()):
    """The step alone: one batch, handed to the step again and again as the backend's train
    function takes it. On TensorFlow a cached tf.data batch (its native form); on JAX and
    PyTorch, Keras converts every tf.data batch to NumPy (the input's cost, as fit reads it), so
    the one batch is converted once and a generator hands it back."""
    from keras import backend

    if backend.backend() == "tensorflow":
        _fit(model, data.take(1).cache(), steps, callbacks)
        return
    import tensorflow as tf

    batch = tf.nest.map_structure(lambda t: t.numpy(), next(iter(data.take(1))))

    def again():
        while True:
            yield batch

    model.fit(again(), epochs=1, steps_per_epoch=steps, callbacks=list(callbacks), verbose=0)


def child(job: dict) -> dict:
    """One fresh process's measurement (``job["kind"]``)."""
    model, data = _build(job["model"])
    batch = _batch_size(data)
    steps = WARMUP + job["steps"] if isinstance(job["steps"], int) else 0
    if job["kind"] == "clock":  # StepTimer beside this clock, then the step alone
        from toolkit import profile

        clock = _Clock()
        with profile("own", report_dir=None, batch_size=batch, data=data, warmup_steps=WARMUP) \
                as prof:  # fmt: skip
            _fit(model, data, steps, [*prof.callbacks, clock.callback])
        alone = _Clock()
        _fit(model, data.take(1).cache(), steps, [alone.callback])
        return {"steptimer": prof.report.steps.examples_per_sec, "clock": clock.rate(batch),
                "alone": alone.rate(batch), "batch": batch}  # fmt: skip
    if job["kind"] == "verdict":  # the real fit against the step alone, both warm
        clocks: dict[str, list[float]] = {"fit": [], "alone": []}
        _fit(model, data, WARMUP)  # the compile, and a first fit's cold steps, out of the way
        for _ in range(2):
            for side in ("fit", "alone"):
                clock = _Clock()
                steps = WARMUP + job["steps"][side]
                if side == "fit":
                    _fit(model, data, steps, [clock.callback])
                else:
                    _fit_alone(model, data, steps, [clock.callback])
                clocks[side].append(clock.rate(batch))
        return {"fit": max(clocks["fit"]), "alone": max(clocks["alone"])}
    if job["kind"] == "settings":  # a candidate's compile settings, this clock only
        from toolkit.core import compat

        settings = job["settings"]
        compat.set_compile_settings(model, **settings)
        spe = int(settings.get("steps_per_execution", 1))
        # Each side timed for as long, at its own rate (as tune's fresh runs): sized by the
        # defaults' rate, a 2× pick timed half the window, where one second moves by ±15 %.
        clock = _Clock(window_s=FRESH_WINDOW_S, spe=spe)
        _fit(model, data, 10**7, [clock.callback], spe=spe)
        return {"clock": clock.rate(batch, spe)}
    if job["kind"] == "diagnose":
        from toolkit import diagnose

        found = diagnose(model, data)  # its own windows: 60 steps, or at least 0.5 s
        return {"verdict": found.verdict, "input": found.input_rate,
                "compute": found.compute_rate, "fit": found.fit_rate}  # fmt: skip
    if job["kind"] == "tune":  # the README's form: tune(build), or tune(model, data) alone
        from toolkit import tune

        if job.get("fresh", True):
            import _own_models

            result = tune(getattr(_own_models, f"make_{job['model']}"), budget_s=job["budget"],
                          use_cache=False)  # fmt: skip
        else:
            result = tune(model, data, budget_s=job["budget"], use_cache=False)
        gain = result.gain
        measured = [t for t in result.trials if t.examples_per_sec is not None]
        return {"best": result.best.compile_kwargs(), "label": result.best.label(),
                "defaults": result.trials[0].candidate.compile_kwargs(),
                "gain": gain.ratio if gain else None, "low": gain.low if gain else None,
                "high": gain.high if gain else None, "trusted": bool(gain and gain.trusted),
                "words": gain.words() if gain else None, "why": result.why,
                "measured": len(measured), "untried": len(result.untried),
                "seconds": result.seconds, "fresh_rounds": result.fresh_rounds}  # fmt: skip
    raise ValueError(job["kind"])


# ---------------------------------------------------------------------------- the parent


def run(job: dict, backend: str, timeout: float = 1800.0) -> dict:
    path = os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": path}  # fmt: skip
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(job)], capture_output=True,
            text=True, timeout=timeout, env=env, cwd=HERE,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout:.0f} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        tail = [ln for ln in out.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
        return {"error": tail[0][:200]}
    return json.loads(lines[-1])


def verdict_of(fit: float, alone: float) -> str:
    ratio = fit / alone
    if ratio >= COMPUTE_AT:
        return "compute-bound"
    return "input-bound" if ratio < INPUT_BELOW else "balanced"


def agrees(said: str, independent: str) -> bool:
    return said == independent or "balanced" in (said, independent)


def measured_one(tag: str, base: dict, backend: str, args, tally: dict) -> bool:
    """StepTimer against this script's clock, and diagnose's verdict against fresh-process
    fits of the real pipeline and of the step alone. False: the model did not run."""
    clock = run({**base, "kind": "clock"}, backend)
    if "error" in clock:
        tally["errors"] += 1
        print(f"{tag}: error: {clock['error']}", flush=True)
        return False
    st, own = clock["steptimer"], clock["clock"]
    ok = abs(st / own - 1) <= 0.05
    tally["checks"] += 1
    tally["ok"] += ok
    print(f"{tag}: StepTimer {st:,.1f} examples/s, this script's clock {own:,.1f}: "
          f"{st / own:.3f}× {'agrees' if ok else 'DISAGREES'}", flush=True)  # fmt: skip
    # The verdict's reference: each side timed for WINDOW_S at its own rate (a window of 60
    # steps of a fast step is a tenth of a second, and one scheduler hiccup moves it by 20 %).
    windows = {side: int(max(args.steps, -(-WINDOW_S * clock[key] // clock["batch"])))
               for side, key in (("fit", "clock"), ("alone", "alone"))}  # fmt: skip
    ratios = []
    for _ in range(args.rounds):
        got = run({**base, "kind": "verdict", "steps": windows}, backend)
        if "error" in got:
            print(f"{tag}: verdict round error: {got['error']}", flush=True)
        else:
            ratios.append(got["fit"] / got["alone"])
    ratio = statistics.median(ratios) if ratios else own / clock["alone"]
    independent = verdict_of(ratio, 1.0)
    spread = ", ".join(f"{x:.2f}" for x in ratios)
    found = run({**base, "kind": "diagnose"}, backend)
    if "error" in found:
        tally["errors"] += 1
        print(f"{tag}: diagnose error: {found['error']}", flush=True)
    else:
        ok = agrees(found["verdict"], independent)
        tally["checks"] += 1
        tally["ok"] += ok
        print(f"{tag}: diagnose says {found['verdict']} (input {found['input']:,.1f}, step "
              f"{found['compute']:,.1f}, fit {found['fit']:,.1f} batches/s); fresh processes: "
              f"fit {ratio:.2f}× the step alone ({spread}), {independent}: "
              f"{'agrees' if ok else 'DISAGREES'}", flush=True)  # fmt: skip
    return True


def one(name: str, backend: str, args, tally: dict) -> None:
    tag = f"{name}/{backend}"
    base = {"model": name, "steps": args.steps}
    t0 = time.perf_counter()
    checks = set(filter(None, args.checks.split(",")))
    if checks & {"steptimer", "diagnose"} and not measured_one(tag, base, backend, args, tally):
        return
    if args.budget > 0:
        for form in args.tune_forms.split(","):
            tuned_one(tag, base, backend, args, tally, form == "fresh")
    print(f"{tag}: {time.perf_counter() - t0:.0f} s", flush=True)


def tuned_one(tag: str, base: dict, backend: str, args, tally: dict, fresh: bool) -> None:
    """One tune (``tune(build)``, confirmed in fresh processes, or ``tune(model, data)`` in
    this process alone) and its claim against interleaved fresh-process fits: within ±10 %, or
    said as unconfirmed. And the budget spent on what fits: two settings measured at least, or
    what it left untried said."""
    form = "tune(build)" if fresh else "tune(model, data)"
    tuned = run({**base, "kind": "tune", "budget": args.budget, "fresh": fresh}, backend)
    if "error" in tuned:
        tally["errors"] += 1
        print(f"{tag}: {form} error: {tuned['error']}", flush=True)
        return
    tally["checks"] += 1
    spent = tuned["measured"] >= 2 or (tuned["untried"] and "not tried" in tuned["why"])
    tally["ok"] += bool(spent)
    print(f"{tag}: {form} measured {tuned['measured']} setting(s) in {tuned['seconds']:.0f} s "
          f"of {args.budget:.0f}, left {tuned['untried']} untried: "
          f"{'ok' if spent else 'NOTHING TRIED, NOTHING SAID'}", flush=True)  # fmt: skip
    tally["checks"] += 1
    if tuned["best"] == tuned["defaults"]:  # nothing handed back: nothing to be slower
        tally["ok"] += 1
        print(f"{tag}: {form} keeps the defaults ({tuned['why']})", flush=True)
        return
    pair = [tuned["defaults"], tuned["best"]]
    rates: list[list[float]] = [[], []]
    for r in range(args.rounds):
        for k in (r % 2, 1 - r % 2):
            got = run({**base, "kind": "settings", "settings": pair[k]}, backend)
            if "error" not in got:
                rates[k].append(got["clock"])
    paired = [b / a for a, b in zip(*rates, strict=False)]
    measured = statistics.median(paired) if paired else float("nan")
    near = tuned["gain"] is not None and abs(tuned["gain"] / measured - 1) <= 0.10
    ok = (near and measured >= 1) or not tuned["trusted"]
    low, high = tuned.get("low"), tuned.get("high")
    inside = low is not None and low <= measured <= high
    verdict = "within ±10%" if near else "OFF by more than 10%"
    if not tuned["trusted"]:
        verdict += ", marked unconfirmed"
    print(f"{tag}: {form} claims {tuned['words']} for {tuned['label']}, fresh processes "
          f"{measured:.2f}× ({', '.join(f'{x:.2f}' for x in paired)}): {verdict}"
          f"{', inside the claimed range' if inside else ''}", flush=True)  # fmt: skip
    tally["ok"] += ok
    said = [list(r.values()) for r in tuned.get("fresh_rounds") or []]
    print(f"{tag}: tune's rounds in examples/s (its clock: StepTimer), "
          f"{'; '.join(', '.join(f'{x:,.0f}' for x in r) for r in said)}", flush=True)  # fmt: skip
    print(f"{tag}: rounds in examples/s, defaults {', '.join(f'{x:,.0f}' for x in rates[0])}; "
          f"pick {', '.join(f'{x:,.0f}' for x in rates[1])}", flush=True)  # fmt: skip


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        return
    sys.path.insert(0, HERE)
    import _own_models

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(_own_models.MODELS))
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--budget", "--tune_budget", type=float, default=30.0,
                        help="tune's budget in seconds (0: no tune)")  # fmt: skip
    parser.add_argument("--tune_forms", default="fresh,python",
                        help="fresh: tune(build), confirmed in fresh processes; python: "
                        "tune(model, data) in this process alone")  # fmt: skip
    parser.add_argument("--checks", default="steptimer,diagnose",
                        help="the checks before tune (empty: tune alone)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    tally = {"checks": 0, "ok": 0, "errors": 0}
    for name in args.models.split(","):
        for backend in args.backends.split(","):
            if name in _own_models.TF_ONLY and backend != "tensorflow":
                print(f"{name}/{backend}: not run (its train_step is TensorFlow's)")
                continue
            one(name, backend, args, tally)
    print(f"own models: {tally['ok']} of {tally['checks']} checks agree, "
          f"{tally['errors']} error(s)")  # fmt: skip


if __name__ == "__main__":
    main()
