"""The step's anatomy (``toolkit.anatomy``) on models written as the Keras examples write
them, the seed workload's MLP and a model with a planted slow layer, on every installed Keras
backend, each backend in a fresh process. Three checks, each as the one ratio line:

* ``anatomy sums to step``: the phases' sum over the traced steps (the sweep of the trace)
  against the outside clock around the same steps (``perf_counter``, the device waited for
  at both ends). 1.00× is the promise; the issue's bound is ±5 %.
* ``planted layer vs alone``: a 64 → 2048 Dense planted in a small MLP (the layer the
  anatomy must rank first), its forward and backward as the anatomy times them inside the
  step, against the same layer's forward and backward timed alone (the backend's
  ``layer_alone``: its gradients, jitted or in a ``tf.function``, outside any fit). Bound ±25 %.
* ``other's fix, fit's step with it``: where "other" is over a quarter of the step and the
  anatomy named its fix (the backend's compiler, on a step not compiled) and checked it:
  ``fit``'s step on one batch without the fix against with it (X > 1: the fix saves), beside
  the saving the anatomy predicted from the trace's gaps between ops.
* ``Keras's trainer vs the raw step``: ``fit``'s step on one batch repeated against the same
  model's step written without Keras's trainer (the backend's ``raw_step``), per 100 steps:
  X > 1 is what Keras's trainer costs. The seed MLP's figure is P1's floor.

The examples' models come from ``benchmarks/_own_models.py`` (mixup's CNN, the vision
transformer, the bidirectional LSTM), data replaced only. Each model's anatomy's top lines
are printed too, and the fastest and the slowest backend's anatomies of each model diffed in
words (``toolkit.core._anatomy.contrast``), for each model two backends took apart.

    python benchmarks/anatomy.py [--backends tensorflow,jax,torch] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _common import speedup_line

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = ("mixup", "vit", "bilstm")
BATCH = 256
FEATURES = 64


def _seed_mlp():
    """The seed post's MLP: 256 -> 512 -> 10, batch 32, Adam, sparse categorical loss."""
    import numpy as np

    from toolkit.core import compat

    keras = compat.keras()
    model = keras.Sequential(
        [keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
         keras.layers.Dense(10)]
    )  # fmt: skip
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])  # fmt: skip
    rng = np.random.default_rng(0)
    return model, (rng.random((3200, 256), dtype=np.float32), rng.integers(0, 10, 3200)), 32


def _planted():
    import numpy as np

    from toolkit.core import compat

    keras = compat.keras()
    inputs = keras.Input((FEATURES,))
    h = keras.layers.Dense(64, activation="relu", name="little")(inputs)
    h = keras.layers.Dense(2048, activation="relu", name="planted")(h)
    h = keras.layers.Dense(32, activation="relu", name="narrow")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="head")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    data = (rng.random((4096, FEATURES), dtype=np.float32), rng.integers(0, 10, 4096))
    return model, data, BATCH


def _alone(layer, shape, jit: bool) -> float:
    from toolkit.profiling.layers_alone import time_alone

    return time_alone(layer, ((shape, "float32"),), jit=jit, runs=5).both_s


def child(steps: int) -> None:
    """In a fresh process on one backend: one JSON line per model."""
    os.environ.setdefault("OWN_MODELS_STEPS", "60")
    sys.path.insert(0, HERE)
    import _own_models

    import toolkit
    from toolkit.runner.config import TrainConfig

    def emit(name, found, **more):
        print(json.dumps({"model": name, "anatomy": found.to_dict(), **more}), flush=True)

    model, data, batch = _planted()
    found = toolkit.anatomy(model, data, steps=steps, config=TrainConfig(batch_size=batch))
    alone = _alone(model.get_layer("planted"), (batch, FEATURES), model.jit_compile is True)
    emit("planted", found, alone_s=alone)
    model, data, batch = _seed_mlp()
    emit("seed_mlp", toolkit.anatomy(model, data, steps=steps,
                                     config=TrainConfig(batch_size=batch)))  # fmt: skip
    for name in EXAMPLES:
        model, data = getattr(_own_models, f"make_{name}")()
        emit(name, toolkit.anatomy(model, data, steps=steps))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", help="comma-separated (default: every installed one)")
    p.add_argument("--steps", type=int, default=10, help="traced steps per anatomy (10)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.steps)
        return
    sys.path.insert(0, os.path.dirname(HERE))
    from toolkit import backend
    from toolkit.core._anatomy import Anatomy, contrast
    from toolkit.core.stats import format_ms
    from toolkit.report._anatomy import anatomy_top_lines, contrast_lines

    names = args.backends.split(",") if args.backends else list(backend.installed())
    found: dict[tuple[str, str], Anatomy] = {}
    for name in names:
        env = {**os.environ, "KERAS_BACKEND": name, "TOOLKIT_PROGRESS": "0"}
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--steps", str(args.steps)],
            env=env, capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode or not rows:
            print(f"{name}: failed ({out.stderr.strip().splitlines()[-1:] or out.returncode})")
        for row in rows:
            a = Anatomy.from_dict(row["anatomy"])
            found[(name, row["model"])] = a
            label = f"{name} {row['model']}"
            if a.error:
                print(f"{label}: no anatomy: {a.error}")
                continue
            window = a.step_s * a.steps
            print(speedup_line(f"{label}: anatomy sums to step", window,
                               a.traced_sum() * a.steps))  # fmt: skip
            if "alone_s" in row:
                planted = next(x for x in a.layers if x.name == "planted")
                print(speedup_line(f"{label}: planted layer vs alone", row["alone_s"] * 100,
                                   planted.traced_s * 100) + " per 100 steps")  # fmt: skip
                rank = [x.name for x in a.layers].index("planted") + 1
                print(f"  planted layer ranked {rank} of {len(a.layers)}")
            if a.raw_s and a.fit_s:
                print(speedup_line(f"{label}: Keras's trainer vs the raw step", a.fit_s * 100,
                                   a.raw_s * 100) + " per 100 steps")  # fmt: skip
            if a.other_fixed_s is not None and a.fit_s:  # "other" large, its fix checked
                gaps = a.other_gaps_s()
                said = "not predicted" if gaps is None else f"predicted {format_ms(gaps)} saved"
                line = speedup_line(f"{label}: other's fix, fit's step with it", a.fit_s * 100,
                                    a.other_fixed_s * 100)  # fmt: skip
                print(f"{line} per 100 steps ({said} a step)")
            print("\n".join(f"  {line}" for line in anatomy_top_lines(a)))
    for model in (*EXAMPLES, "seed_mlp"):  # the fastest backend against the slowest
        pairs = [(n, found.get((n, model))) for n in names]
        pairs = [(n, a) for n, a in pairs if a is not None and not a.error and a.layers]
        if len(pairs) < 2:
            continue
        (na, a), (nb, b) = sorted(pairs, key=lambda p: p[1].step_s)[:: len(pairs) - 1]
        fix = backend.get(nb).jit_advice()
        titles = (backend.info(na).title, backend.info(nb).title)
        print(f"{model}, the fastest backend against the slowest:")
        print("\n".join(contrast_lines(contrast(a, b, *titles, fix=fix))))


if __name__ == "__main__":
    main()
