"""Which Keras backend trains this model fastest on this machine: measured, not guessed.

Keras 3 trains on TensorFlow, JAX and PyTorch, and which is fastest depends on the model and
the machine (on this 2-core CPU the seed MLP's step is ~0.35 ms on JAX, ~0.7 ms on TensorFlow
and ~1.9 ms on PyTorch; Keras's own A100 benchmarks find TensorFlow fastest for some models and
JAX for others). :func:`compare` answers for a recipe or for your own model-building function:

* every installed backend × device (``cpu``; ``cuda``, ``metal`` or ``gpu`` where that backend
  sees one; or only the ``--device`` given) is a *contender*;
* each run is a fresh process (Keras fixes its backend at import, and a finished run's threads
  would eat into the next one's cores), the same recipe and flags, the same data order (the
  seed), and the same initial weights: the first run writes them to a ``.weights.h5`` file
  that every later run loads (``--init_weights``, Keras's backend-neutral format);
* the contenders run in interleaved rounds (each round all of them, in a rotated order), so
  that a machine that slows down for a while slows every contender alike;
* per contender: the first step (tracing / compilation), the steady p50 and mean ms/step
  (medians over the rounds, the mean's spread), examples/s, MFU, and the final training
  loss, which must
  agree with the defaults' within ``LOSS_RTOL`` (different backends round differently; a
  larger gap says that they did not train the same model the same way);
* the winner is the fastest by the median of its per-round ratios to the defaults (Keras's
  default backend on the default device) of the *mean* step time: the time training takes.
  The p50 alone flatters a backend whose steps stall now and then (JAX's asynchronous
  dispatch here: p50 0.33 ms, mean 0.58 ms on the digits MLP). It must beat them by more than
  ``MIN_GAIN`` and
  train to an agreeing loss, else the defaults stay: the chooser never hands back something
  slower than not choosing.

The result is cached in ``$TOOLKIT_CACHE_DIR/backends.json`` under a key of the target, its
flags (run-length and output flags left out), the device asked for and the machine (CPU,
installed framework versions), and written as JSON, Markdown and a PNG. A recipe run with
``--backend=auto`` trains on the cached winner (:func:`resolve_auto`).

This module imports no framework: the measuring happens in the child processes
(``python -m toolkit backends --child``), through :func:`measure_task` / :func:`measure_model`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib import metadata, util
from typing import Any

from toolkit import compat, machine
from toolkit import progress as tk_progress
from toolkit.backend import flag_value
from toolkit.files import atomic_write, read_json, update_json

__all__ = [
    "CACHE_FILE",
    "LOSS_RTOL",
    "MIN_GAIN",
    "SETTINGS_GAIN",
    "BackendsResult",
    "Contender",
    "Row",
    "Target",
    "cache_key",
    "cached",
    "choose",
    "compare",
    "contenders",
    "installed_backends",
    "measure_model",
    "measure_task",
    "resolve_auto",
    "tune_across",
    "tuned_settings",
]

CACHE_FILE = "backends.json"
BACKENDS = ("tensorflow", "jax", "torch")  # Keras 3's, its default first
MIN_GAIN = 0.02
# Tuned settings must beat their own backend's defaults by this much to be kept: one round of
# a final can swing ~10 % (JAX with steps_per_execution=32 measured 1.03× and 0.91× of plain
# JAX on the seed MLP in two runs).
SETTINGS_GAIN = 0.05
LOSS_RTOL = 0.05  # seed-to-seed on the digits MLP: 2 %; backend-to-backend, same start: 1.4 %
DEFAULT_STEPS = 200
DEFAULT_ROUNDS = 3
# tune --across_backends: the final's first round is reserved at this many times its estimate
# (on the small CNN, an estimate without margin let a 90 s budget run 95 s).
FINAL_MARGIN = 1.25
# Flags that change how long a run is or what it writes, not how fast a step is: left out of
# the cache key, and overridden in the children.
RUN_FLAGS = frozenset(
    {
        "epochs", "train_steps", "report_dir", "log_steps", "log_verbosity", "tensorboard",
        "profile_steps", "memory_watch", "smoke", "warmup_steps", "backup_dir", "diagnose",
        "diagnose_steps", "autotune", "tune_budget", "init_weights", "backend", "verbosity",
        "v", "count_flops", "stop_on_nan",
    }
)  # fmt: skip
_DISTRIBUTIONS = ("tensorflow", "keras", "tf_keras", "jax", "jaxlib", "torch")


class ChooserError(ValueError):
    """A comparison that cannot run (nothing to compare, a bad target): one line."""


@dataclasses.dataclass(frozen=True)
class Target:
    """What to train: a recipe (``recipe``) or ``module:function`` returning your compiled
    model and batched data (``model_fn``), and the flags the runs get."""

    recipe: str | None = None
    model_fn: str | None = None
    flags: tuple[str, ...] = ()

    def label(self) -> str:
        return f"recipe {self.recipe}" if self.recipe else f"--model_fn {self.model_fn}"

    @classmethod
    def of(cls, what: Any, flags: Sequence[str] = ()) -> Target:
        """A Target from a recipe name, ``"module:function"``, or your model-building function
        itself (returning ``(compiled model, batched data)``; it must be importable by name:
        defined at the top of a module, not in ``__main__``, the children import it)."""
        if isinstance(what, Target):
            return what
        if callable(what):
            module, name = getattr(what, "__module__", None), getattr(what, "__qualname__", "")
            if not module or module == "__main__" or "<" in name:
                raise ChooserError(
                    f"{name or what!r}: the runs import your function by name in fresh "
                    "processes: define it at the top of a module (not __main__, not nested)"
                )
            return cls(None, f"{module}:{name}", tuple(flags))
        if isinstance(what, str) and ":" in what:
            return cls(None, what, tuple(flags))
        return cls(str(what), None, tuple(flags))

    def argv(self) -> list[str]:
        what = ["--recipe", self.recipe] if self.recipe else ["--model_fn", str(self.model_fn)]
        return [*what, *self.flags]


@dataclasses.dataclass(frozen=True)
class Contender:
    """One backend on one kind of device, optionally with tuned settings (recipe flags such
    as ``--steps_per_execution=32``: ``tune --across_backends``)."""

    backend: str
    device: str = "cpu"
    settings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", tuple(self.settings))

    def label(self) -> str:
        return f"{self.backend} {self.device}" + (" tuned" if self.settings else "")

    def flags(self) -> str:
        return " ".join([f"--backend={self.backend}", f"--device={self.device}", *self.settings])


@dataclasses.dataclass
class Row:
    """One contender's runs (one per round; a failed run has ``error``)."""

    contender: Contender
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def ok(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if not r.get("error") and r.get("mean_s")]

    def median(self, key: str) -> float | None:
        values = [r[key] for r in self.ok() if r.get(key) is not None]
        return statistics.median(values) if values else None

    def spread(self, key: str = "mean_s") -> tuple[float, float] | None:
        values = [r[key] for r in self.ok() if r.get(key) is not None]
        return (min(values), max(values)) if values else None

    @property
    def error(self) -> str | None:
        return None if self.ok() else next((r["error"] for r in self.runs if r.get("error")), None)

    def to_dict(self) -> dict[str, Any]:
        return {"contender": dataclasses.asdict(self.contender), "runs": self.runs}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Row:
        return cls(Contender(**d["contender"]), list(d["runs"]))


@dataclasses.dataclass
class BackendsResult:
    """Every contender's runs, the winner, and where the answer came from. ``rows[0]`` is the
    defaults (Keras's default backend on the default device)."""

    target: Target
    rows: list[Row]
    best: Contender
    key: str
    steps: int
    rounds: int
    seconds: float
    cache_hit: bool = False
    why: str = ""

    @property
    def defaults(self) -> Row:
        return self.rows[0]

    def row(self, contender: Contender) -> Row:
        return next(r for r in self.rows if r.contender == contender)

    def ratio(self, row: Row) -> float | None:
        """The median over rounds of the defaults' mean step / this row's (> 1: faster)."""
        return _paired_ratio(self.defaults, row)

    def loss_agrees(self, row: Row) -> bool | None:
        return _loss_agrees(self.defaults, row)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": dataclasses.asdict(self.target),
            "rows": [r.to_dict() for r in self.rows],
            "best": dataclasses.asdict(self.best),
            "key": self.key,
            "steps": self.steps,
            "rounds": self.rounds,
            "seconds": self.seconds,
            "why": self.why,
            "loss_rtol": LOSS_RTOL,
            "min_gain": MIN_GAIN,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], cache_hit: bool = True) -> BackendsResult:
        t = d["target"]
        target = Target(t.get("recipe"), t.get("model_fn"), tuple(t.get("flags") or ()))
        return cls(
            target, [Row.from_dict(r) for r in d["rows"]], Contender(**d["best"]), d["key"],
            d["steps"], d["rounds"], d["seconds"], cache_hit, d.get("why", ""),
        )  # fmt: skip

    def table(self) -> str:
        """The contenders as a Markdown table, fastest first, failures last."""
        lines = [
            "| backend | device | first step s | p50 ms/step | mean ms/step (spread) | "
            "examples/s | MFU | vs defaults | final loss | note |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]

        def order(row: Row) -> float:
            mean = row.median("mean_s")
            return mean if mean is not None else float("inf")

        for row in sorted(self.rows, key=order):
            c = row.contender
            if row.error is not None:
                lines.append(f"| {c.backend} | {c.device} | — | — | — | — | — | — | — | "
                             f"failed: {row.error} |")  # fmt: skip
                continue
            lo, hi = row.spread() or (0.0, 0.0)
            p50, mean = row.median("p50_s"), row.median("mean_s") or 0.0
            first, eps, mfu = (
                row.median("first_step_s"),
                row.median("examples_per_sec"),
                (row.median("mfu")),
            )
            loss = row.median("loss")
            agrees = self.loss_agrees(row)
            notes = []
            if row is self.defaults:
                notes.append("defaults")
            if c == self.best:
                notes.append("**chosen**")
            if c.settings:
                notes.append(" ".join(c.settings))
            if agrees is False:
                notes.append(f"loss differs > {LOSS_RTOL:.0%}")
            failed = len(row.runs) - len(row.ok())
            if failed:
                notes.append(f"{failed} run(s) failed")
            ratio = self.ratio(row)
            lines.append(
                f"| {c.backend} | {c.device} | {_num(first, '.3f')} | "
                f"{_num(p50 and p50 * 1e3, '.3f')} | "
                f"{mean * 1e3:.3f} ({lo * 1e3:.3f}–{hi * 1e3:.3f}) | {_num(eps, ',.0f')} | "
                f"{'n/a' if mfu is None else f'{mfu:.1%}'} | "
                f"{'—' if ratio is None else f'{ratio:.2f}×'} | {_num(loss, '.4g')} | "
                f"{', '.join(notes)} |"
            )
        return "\n".join(lines)

    def summary(self) -> str:
        source = "cache" if self.cache_hit else f"measured in {self.seconds:.0f} s"
        return (
            f"backends: {self.target.label()}, {self.steps} steps per run, medians of "
            f"{self.rounds} interleaved rounds, each run a fresh process ({source})\n"
            f"{self.table()}\n"
            f"{self.loss_line()}\n"
            f"chosen: {self.best.flags()} ({self.why})"
        )

    def loss_line(self) -> str:
        """Whether every contender's final loss agrees with the defaults' within
        ``LOSS_RTOL`` (same data, same initial weights: a backend that disagrees computes
        something else, and is never chosen)."""
        base = self.defaults.median("loss")
        if base is None or base != base:
            return "losses: the defaults have no final loss to compare with"
        differ, unknown = [], []
        for row in self.rows[1:]:
            agrees = self.loss_agrees(row)
            if agrees is None:
                unknown.append(row.contender.label())
            elif not agrees:
                loss = row.median("loss")
                gap = "NaN" if loss != loss else f"{abs(loss - base) / max(abs(base), 1e-12):.1%}"
                differ.append(f"{row.contender.label()} ({gap} off)")
        line = f"losses: the defaults' final loss {base:.4g}; "
        if differ:
            line += f"more than {LOSS_RTOL:.0%} off: {', '.join(differ)}"
        else:
            line += f"every other agrees within {LOSS_RTOL:.0%}"
        if unknown:
            line += f"; no loss from {', '.join(unknown)}"
        return line

    def write(self, out_dir: str, plot: bool = True) -> dict[str, str]:
        """``backends.json``, ``backends.md`` and (with matplotlib) ``backends.png`` under
        `out_dir`, each written atomically."""
        paths = {
            "json": atomic_write(
                os.path.join(out_dir, "backends.json"), json.dumps(self.to_dict(), indent=1)
            ),
            "markdown": atomic_write(
                os.path.join(out_dir, "backends.md"), f"# Backends\n\n{self.summary()}\n"
            ),
        }
        if plot and util.find_spec("matplotlib") is not None:
            paths["png"] = atomic_write(os.path.join(out_dir, "backends.png"), self._png())
        return paths

    def _png(self) -> bytes:
        import io

        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure

        rows = [r for r in self.rows if r.error is None]
        rows.sort(key=lambda r: r.median("mean_s") or 0.0)
        fig = Figure(figsize=(7, 1.2 + 0.5 * max(1, len(rows))))
        ax = fig.subplots()
        labels = [r.contender.label() for r in rows]
        p50 = [1e3 * (r.median("mean_s") or 0.0) for r in rows]
        spread = [r.spread() or (0.0, 0.0) for r in rows]
        err = [
            [p - 1e3 * lo for p, (lo, _) in zip(p50, spread, strict=True)],
            [1e3 * hi - p for p, (_, hi) in zip(p50, spread, strict=True)],
        ]
        colors = ["tab:green" if r.contender == self.best else "tab:blue" for r in rows]
        ax.barh(labels, p50, xerr=err, color=colors, capsize=3)
        ax.invert_yaxis()
        ax.set_xlabel("mean ms per training step, median of rounds (whiskers: min–max); "
                      "lower is better")  # fmt: skip
        ax.set_title(f"{self.target.label()}: which backend trains fastest here")
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _paired_ratio(base: Row, row: Row) -> float | None:
    """Median over the rounds both ran of base mean step / row mean step."""
    ratios = [
        a["mean_s"] / b["mean_s"]
        for a, b in zip(base.runs, row.runs, strict=False)
        if not a.get("error") and not b.get("error") and a.get("mean_s") and b.get("mean_s")
    ]
    return statistics.median(ratios) if ratios else None


def _loss_agrees(base: Row, row: Row) -> bool | None:
    a, b = base.median("loss"), row.median("loss")
    if a is None or b is None:
        return None
    if a != a or b != b:  # NaN: no agreement
        return False
    return abs(b - a) <= LOSS_RTOL * max(abs(a), 1e-12)


def choose(rows: Sequence[Row], min_gain: float = MIN_GAIN) -> tuple[Contender, str]:
    """The fastest contender whose median paired ratio to the defaults (``rows[0]``) exceeds
    ``1 + min_gain`` and whose loss agrees with theirs; else the defaults. Returns the pick and
    why, in words."""
    defaults = rows[0]
    if defaults.error is not None:
        measured = [r for r in rows if r.error is None]
        if not measured:
            return defaults.contender, "no contender ran"
        best = min(measured, key=lambda r: r.median("mean_s") or float("inf"))
        return best.contender, f"the defaults failed ({defaults.error}); fastest of the rest"
    best, best_ratio = defaults, 1.0
    for row in rows[1:]:
        ratio = _paired_ratio(defaults, row)
        if ratio is None or _loss_agrees(defaults, row) is False:
            continue
        if ratio > best_ratio:
            best, best_ratio = row, ratio
    if best is defaults:
        return defaults.contender, "no contender beat the defaults"
    if best_ratio <= 1 + min_gain:
        return defaults.contender, (
            f"{best.contender.label()} was only {best_ratio:.2f}× the defaults (needs > "
            f"{1 + min_gain:.2f}×): the defaults stay"
        )
    plain = _plain_twin(rows, best)
    if plain is not None:
        edge = _paired_ratio(plain, best)
        plain_ratio = _paired_ratio(defaults, plain)
        if (edge is None or edge <= 1 + SETTINGS_GAIN) and (plain_ratio or 0) > 1 + min_gain:
            return plain.contender, (
                f"{plain_ratio:.2f}× the defaults' mean step, loss agrees; its tuned settings "
                f"were {edge or 0:.2f}× of it (need > {1 + SETTINGS_GAIN:.2f}×): not kept"
            )
    return best.contender, f"{best_ratio:.2f}× the defaults' mean step, loss agrees"


def _plain_twin(rows: Sequence[Row], row: Row) -> Row | None:
    """The same backend and device with Keras's default settings, when `row` has tuned ones
    and its twin ran with an agreeing loss."""
    c = row.contender
    if not c.settings:
        return None
    for other in rows:
        o = other.contender
        if (o.backend, o.device, o.settings) == (c.backend, c.device, ()) and other.error is None:
            return other if _loss_agrees(rows[0], other) is not False else None
    return None


# ---------------------------------------------------------------------------- what to compare


def installed_backends() -> list[str]:
    """Keras's backends whose framework is installed (none is imported)."""
    return [b for b in BACKENDS if util.find_spec(b) is not None]


def _without(argv: Sequence[str], names: frozenset[str] | set[str]) -> list[str]:
    """`argv` without the flags in `names` (``--name=v``, ``--name v``, ``--[no]name``)."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        flag = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if flag is not None and (flag in names or (flag[:2] == "no" and flag[2:] in names)):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            skip = "=" not in arg and flag in names and nxt is not None and not nxt.startswith("-")
            continue
        out.append(arg)
    return out


def _probe_devices(backend: str, env: dict[str, str], timeout: float) -> list[str]:
    """The device kinds `backend` sees here, asked in a fresh process (``cpu`` first)."""
    code = (
        "import json, sys\n"
        "from toolkit import devices\n"
        f"print(json.dumps(sorted({{d.kind for d in devices.detect({backend!r})}})))\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
            env={**env, "KERAS_BACKEND": backend}, check=True,
        )  # fmt: skip
        kinds = json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return ["cpu"]
    return ["cpu", *(k for k in kinds if k != "cpu")]


def contenders(
    flags: Sequence[str] = (),
    backends: Sequence[str] | None = None,
    *,
    probe: Callable[[str], list[str]] | None = None,
) -> list[Contender]:
    """Every installed backend (or `backends`) × the devices it sees, the defaults first
    (Keras's default backend, on the default device: its accelerator if it has one). With
    ``--device=D`` in `flags`, only D."""
    if compat.use_legacy_keras():
        raise ChooserError(
            "TF_USE_LEGACY_KERAS=1 selects tf_keras, which trains on TensorFlow only: unset it "
            "to compare Keras 3's backends"
        )
    names = list(backends) if backends else installed_backends()
    if not names:
        raise ChooserError("no Keras backend is installed (pip install tensorflow, jax or torch)")
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        raise ChooserError(f"--backends: unknown {', '.join(unknown)}; use {', '.join(BACKENDS)}")
    missing = [b for b in names if util.find_spec(b) is None]
    if missing:
        raise ChooserError(
            f"--backends: {', '.join(missing)} not installed (pip install "
            f"'keras-perf-toolkit[{missing[0]}]')"
        )
    asked = flag_value(flags, "device")
    default = os.environ.get("KERAS_BACKEND", "tensorflow")
    names.sort(key=lambda b: (b != default, BACKENDS.index(b)))
    out = []
    for name in names:
        if asked and asked.strip().lower() != "auto":
            kinds = [asked.strip().lower()]
        else:
            kinds = (probe or (lambda b: ["cpu"]))(name)
            # The default device is the accelerator when there is one: the defaults run there.
            kinds = [*kinds[1:], kinds[0]] if len(kinds) > 1 and name == names[0] else kinds
        out.extend(Contender(name, kind) for kind in kinds)
    return out


# ---------------------------------------------------------------------------- keys and cache


def _versions() -> dict[str, str]:
    out = {}
    for dist in _DISTRIBUTIONS:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def cache_key(target: Target, steps: int) -> tuple[str, dict[str, Any]]:
    """``(hash, what was hashed)``: the target, its flags without the run-length and output
    ones, the steps per run, and this machine (CPU, installed framework versions)."""
    flags = sorted(_without(target.flags, RUN_FLAGS))
    facts = {
        "target": target.recipe or target.model_fn,
        "flags": flags,
        "steps": steps,
        "machine": machine.machine_facts(**_versions()),
        "legacy": os.environ.get("TF_USE_LEGACY_KERAS", ""),
    }
    return machine.machine_key(facts), facts


def _cache_path() -> str:
    return os.path.join(machine.cache_dir(), CACHE_FILE)


def cached(key: str) -> BackendsResult | None:
    entry = read_json(_cache_path()).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        return BackendsResult.from_dict(entry["result"])
    except (KeyError, TypeError, ValueError):
        return None


def _store(result: BackendsResult, facts: dict[str, Any]) -> None:
    entry = {"facts": facts, "result": result.to_dict(), "stored": time.time()}
    update_json(_cache_path(), result.key, entry)


def _recipe_of_command(argv: Sequence[str]) -> str:
    """The recipe this process runs: ``python -m recipes.R`` (while the package imports,
    ``sys.argv[0]`` is still ``-m``: the interpreter's own command line says which), or a
    recipe file run by path."""
    command = list(getattr(sys, "orig_argv", []))
    if "-m" in command[:-1]:
        module = command[command.index("-m") + 1]
        if module.startswith("recipes."):
            return module.split(".", 1)[1]
    return os.path.splitext(os.path.basename(argv[0]))[0]


def resolve_auto(argv: Sequence[str], recipe: str | None = None) -> list[str]:
    """`argv` with ``--backend=auto`` replaced by the cached winner for this recipe and its
    flags (any run length), or by Keras's default when nothing is cached (said on stderr).
    Reads the cache only: imports no framework. Other command lines come back unchanged."""
    argv = list(argv)
    if (flag_value(argv[1:], "backend") or "").strip().lower() != "auto":
        return argv
    name = recipe or _recipe_of_command(argv)
    rest = _without(argv[1:], {"backend"})
    best = None
    entries = read_json(_cache_path())
    wanted = sorted(_without(rest, RUN_FLAGS))
    machine_now = machine.machine_facts(**_versions())
    found = [
        e for e in entries.values()
        if isinstance(e, dict) and e.get("facts", {}).get("target") == name
        and e["facts"].get("flags") == wanted and e["facts"].get("machine") == machine_now
        and e["facts"].get("legacy", "") == os.environ.get("TF_USE_LEGACY_KERAS", "")
    ]  # fmt: skip
    if found:
        newest = max(found, key=lambda e: e.get("stored", 0))
        with contextlib.suppress(KeyError, TypeError):
            best = Contender(**newest["result"]["best"])
    if best is None:
        chosen = os.environ.get("KERAS_BACKEND", "tensorflow")
        print(
            f"--backend=auto: no measured winner for {name} with these flags on this machine; "
            f"training on {chosen} (measure: python -m toolkit backends --recipe {name} ...)",
            file=sys.stderr,
        )
    else:
        chosen = best.backend
        print(
            f"--backend=auto: {chosen} (measured fastest for {name} here, on {best.device}; "
            "python -m toolkit backends shows the table)",
            file=sys.stderr,
        )
    out = []
    for arg in argv:  # in place: a verb's flags stay after the verb
        if arg.startswith("--backend=") and arg.split("=", 1)[1].strip().lower() == "auto":
            arg = f"--backend={chosen}"
        elif arg == "auto" and out and out[-1] == "--backend":
            arg = chosen
        out.append(arg)
    return out


# ---------------------------------------------------------------------------- the comparison


def compare(
    target: Target | str | Callable[..., Any],
    *,
    backends: Sequence[str] | None = None,
    steps: int = DEFAULT_STEPS,
    rounds: int = DEFAULT_ROUNDS,
    use_cache: bool = True,
    progress: Callable[[str], Any] | None = None,
    timeout_s: float = 900.0,
    runner: Callable[[Contender, list[str]], dict[str, Any]] | None = None,
    candidates: Sequence[Contender] | None = None,
    budget_s: float | None = None,
) -> BackendsResult:
    """Runs `target` under every contender in interleaved rounds (module docstring).

    Args:
        target: the recipe or model function, with its flags: a :class:`Target`, a recipe
            name, ``"module:function"`` or the function itself (:meth:`Target.of`).
        backends: the backends to compare. Defaults to every installed one.
        steps: training steps per run (the first execution and the warm-up are left out of
            the steady figures). Defaults to `200`.
        rounds: interleaved rounds. Defaults to `3`.
        use_cache: read and write the cache. Defaults to `True`.
        progress: called with a line per run. Defaults to printing to stderr.
        timeout_s: the longest one run may take. Defaults to `900`.
        runner: runs one contender with the given extra flags and returns its figures
            (default: a fresh ``python -m toolkit backends --child`` process).
        candidates: the contenders, the defaults first (default: :func:`contenders`); given,
            nothing is cached.
        budget_s: seconds the rounds may take: after the first round, a run that would end
            past it (judged by the median run so far) is not started. Defaults to no limit.

    Raises:
        ChooserError: nothing to compare (no backend installed, an unknown one).
    """
    target = Target.of(target)
    if rounds < 1 or steps < 8:
        raise ChooserError("backends: --rounds must be >= 1 and --steps >= 8")
    bar_wanted = progress is None  # the default: lines and, on a terminal, a bar of the runs
    progress = progress or tk_progress.say
    key, facts = cache_key(target, steps)
    use_cache = use_cache and candidates is None
    if use_cache:
        hit = cached(key)
        if hit is not None and (not backends or {r.contender.backend for r in hit.rows}
                                == set(backends)):  # fmt: skip
            progress(f"backends: cached result for this target, flags and machine ({key})")
            return hit
    env = dict(os.environ)
    asked: list[str] = []

    def probe(name: str) -> Any:
        if not asked:  # once, after the backends named were checked
            progress("backends: asking each backend which devices it sees (a process each)")
        asked.append(name)
        return _probe_devices(name, env, min(timeout_s, 300.0))

    listed = list(candidates or ()) or contenders(target.flags, backends, probe=probe)
    rows = [Row(c) for c in listed]
    length = run_steps(steps, listed, target.flags)
    if length != steps:
        progress(
            f"backends: {length} steps per run, not {steps}: every contender trains as many "
            "steps (their final losses are compared): at least 5 calls of the longest call, "
            "and a whole number of every contender's calls"
        )
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="toolkit-backends-") as tmp:
        weights = os.path.join(tmp, "initial.weights.h5")
        run = runner or (lambda c, extra: _child(target, c, length, extra, env, timeout_s))
        total = rounds * len(rows)
        walls: list[float] = []
        bar = tk_progress.bar(total, "backends", unit="run", enabled=bar_wanted)
        for r in range(rounds):
            order = rows[r % len(rows) :] + rows[: r % len(rows)]
            if r and budget_s is not None:  # whole rounds only: the pairs stay paired
                cost = statistics.median(walls) * len(rows)
                if time.perf_counter() - start + cost > budget_s:
                    progress(f"backends: the budget ({budget_s:.0f} s) ends after {r} round(s)")
                    rounds = r
                    break
            for row in order:
                t0 = time.perf_counter()
                bar.describe(f"backends: round {r + 1}/{rounds} {row.contender.label()}")
                figures = run(row.contender, [f"--init_weights={weights}"])
                bar.update()
                if not figures.get("error") and not figures.get("mean_s"):
                    figures = {"error": f"no timed steps in {length} steps: raise --steps"}
                figures["wall_s"] = time.perf_counter() - t0
                walls.append(figures["wall_s"])
                figures["round"] = r
                row.runs.append(figures)
                done = sum(len(x.runs) for x in rows)
                shown = (
                    f"failed: {figures['error']}" if figures.get("error")
                    else f"mean {figures['mean_s'] * 1e3:.3f} ms/step (p50 "
                    f"{_num(figures.get('p50_s') and figures['p50_s'] * 1e3, '.3f')}), first "
                    f"step {_num(figures.get('first_step_s'), '.3f')} s"
                )  # fmt: skip
                progress(
                    f"[{done}/{total} | {time.perf_counter() - start:.0f} s] round {r + 1}: "
                    f"{row.contender.label()}: {shown}"
                )
        bar.close()
    for row in rows:  # runs in round order, for the paired ratios
        row.runs.sort(key=lambda f: f["round"])
    best, why = choose(rows)
    result = BackendsResult(
        target, rows, best, key, length, rounds, time.perf_counter() - start, False, why
    )
    if use_cache:
        _store(result, facts)
    return result


def run_steps(steps: int, listed: Sequence[Contender], flags: Sequence[str]) -> int:
    """How many steps each of `listed` trains in :func:`compare`: the same for all, since
    their final losses are compared (a contender with 256 steps a call that trained 1280
    steps, against 200 for the others, ended at a loss 75 % lower and was turned away as
    computing something else). At least `steps` and 5 calls of the longest call (the first
    call, a warm-up and timed ones), a whole number of every contender's calls (steps per
    execution × fused steps, from its settings, else `flags`)."""

    def per_call(c: Contender) -> int:
        n = 1
        for name in ("steps_per_execution", "fused_steps"):
            value = flag_value(c.settings, name) or flag_value(flags, name)
            with contextlib.suppress(TypeError, ValueError):
                n *= max(1, int(value))  # type: ignore[arg-type]
        return n

    return _common_length(steps, [per_call(c) for c in listed])


def _common_length(steps: int, calls: Sequence[int]) -> int:
    """At least `steps` and 5 of the longest of `calls` (steps a call), a multiple of each."""
    import math

    calls = list(calls) or [1]
    every = math.lcm(*calls)
    least = max(steps, 5 * max(calls))
    return -(-least // every) * every


def tuned_settings(result: dict[str, Any]) -> tuple[str, ...]:
    """The recipe flags of a ``TuneResult.to_dict()``'s winner; ``()`` when the winner is the
    search's defaults (its first trial): the same run as the backend's plain contender, which
    must not stand in the final twice (two identical contenders measured 0.76× apart on the
    small CNN: a pick between them would be a pick of noise)."""
    from toolkit.tune import Candidate

    best = Candidate(**result["best"])
    trials = result.get("trials") or []
    if trials and Candidate(**trials[0]["candidate"]) == best:
        return ()
    return tuple(best.flags().split())


def tune_across(
    target: Target,
    *,
    budget_s: float = 240.0,
    backends: Sequence[str] | None = None,
    steps: int = DEFAULT_STEPS,
    rounds: int = DEFAULT_ROUNDS,
    progress: Callable[[str], Any] | None = None,
    timeout_s: float = 900.0,
) -> BackendsResult:
    """The backend as one more axis of ``tune``: each contender (backend × device) runs its own
    ``tune`` search in a fresh process (at most half of `budget_s`, shared equally, less what
    one round of the final is estimated to need: :func:`search_share`), then every
    contender with Keras's default settings (the defaults among them: always a candidate) and
    every contender's tuned winner meet head to head in :func:`compare`'s interleaved rounds
    (same data, same initial weights; the rest of the budget), and :func:`choose`'s
    never-slower rule picks. A backend's Keras defaults stay in the final: a search's one
    window can prefer settings that lose head to head (on JAX, steps_per_execution=32 won a
    search and was 0.90× of JAX's defaults in fresh processes).
    """
    progress = progress or tk_progress.say
    start = time.perf_counter()
    env = dict(os.environ)
    listed = contenders(
        target.flags, backends, probe=lambda b: _probe_devices(b, env, min(timeout_s, 300.0))
    )
    overheads: list[float] = []  # each child's seconds beyond its search: start-up, build
    runs: list[float] = []  # what one run of the final costs, estimated from each child
    flags = _without(target.flags, {"device", "backend", "tune_budget"})
    what = ["--recipe", target.recipe] if target.recipe else ["--model_fn", str(target.model_fn)]
    tuned = [Contender(c.backend, c.device) for c in listed]  # Keras's defaults, the first first
    for i, c in enumerate(listed):
        # What is left of the searches' part, shared by the searches still to run, less what a
        # child spends outside its search (measured on the ones before): the budget holds
        # whatever the device probes, the earlier children and the final's least round take.
        share = search_share(
            time.perf_counter() - start, budget_s, len(listed) - i, overheads, runs,
            finalists=2 * len(listed),
        )  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="toolkit-tune-") as tmp:
            out = os.path.join(tmp, "tune.json")
            argv = [
                sys.executable, "-m", "toolkit", "tune", *what, "--json_out", out,
                f"--backend={c.backend}", f"--device={c.device}", *flags,
                f"--tune_budget={share:.0f}",
            ]  # fmt: skip
            t0 = time.perf_counter()
            progress(f"tune {c.label()}: searching, a fresh process ({share:.0f} s budget)")
            lines = _follow(argv, {**env, "KERAS_BACKEND": c.backend}, timeout_s, progress,
                            prefix=f"  {c.label()} ")  # fmt: skip
            found = read_json(out) if lines is not None else {}
            wall = time.perf_counter() - t0
            overheads.append(max(wall - share, 0.0))
            run = final_run_estimate(found, wall, steps)
            if run is not None:
                runs.append(run)
        if not found.get("best"):
            why = (lines[-1] if lines else "?") if lines is not None else "timed out"
            progress(f"tune {c.label()}: failed ({why}); its Keras defaults stay a contender")
            settings: tuple[str, ...] = ()
        else:
            settings = tuned_settings(found)
            progress(
                f"tune {c.label()}: {' '.join(settings) or 'Keras defaults'} "
                f"({time.perf_counter() - t0:.0f} s of {share:.0f})"
            )
        contender = Contender(c.backend, c.device, settings)
        if contender not in tuned:
            tuned.append(contender)
    left = max(budget_s - (time.perf_counter() - start), 0.0)
    result = compare(
        target, steps=steps, rounds=rounds, progress=progress, timeout_s=timeout_s,
        candidates=tuned, budget_s=left, use_cache=False,
    )  # fmt: skip
    took = time.perf_counter() - start
    if took > budget_s * 1.05:
        progress(
            f"backends: the searches and the final took {took:.0f} s of a {budget_s:.0f} s "
            f"budget: one head-to-head round of the {len(tuned)} contenders is the least it runs "
            f"(a fresh process each); raise --tune_budget to give the searches more"
        )
    return result


def search_share(
    elapsed_s: float,
    budget_s: float,
    searches_left: int,
    overheads: Sequence[float],
    runs: Sequence[float],
    finalists: int,
) -> float:
    """The ``--tune_budget`` of the next backend's search in :func:`tune_across`.

    The searches get at most half of `budget_s`, and never the time one round of the final
    needs: `finalists` runs (a backend's defaults and its tuned winner each) at the median of
    `runs` (each search's estimate of one final run, :func:`final_run_estimate`), with
    :data:`FINAL_MARGIN` to spare (a final run also times more steps than the trial). What is left
    is shared by the `searches_left`, less what a child spends outside its search (the median
    of `overheads`: start-up, data, report). Never below 1 s: a search then measures the
    defaults alone.
    """
    final_round = statistics.median(runs) * finalists * FINAL_MARGIN if runs else 0.0
    searching = min(budget_s * 0.5, budget_s - final_round)
    overhead = statistics.median(overheads) if overheads else 0.0
    return max((searching - elapsed_s) / searches_left - overhead, 1.0)


def final_run_estimate(
    found: dict[str, Any], wall_s: float, steps: int = DEFAULT_STEPS
) -> float | None:
    """Seconds one fresh-process run of the final will take for this contender, from its
    search's child: the child's time outside its search (start-up, data, report) plus the
    search's first trial (the defaults: build, compile, one window), plus, where the winner's
    calls make every final run longer than `steps` (:func:`run_steps`), the defaults' steps
    beyond it (from the batch size the child reports, ``batch_size``). None when the search
    did not say."""
    trials = found.get("trials") or []
    seconds = found.get("seconds")
    if not trials or seconds is None or trials[0].get("seconds") is None:
        return None
    run = max(wall_s - seconds, 0.0) + trials[0]["seconds"]
    rate, batch, best = (
        trials[0].get("examples_per_sec"),
        found.get("batch_size"),
        found.get("best"),
    )
    if rate and batch and best:  # the winner's settings, the recipe's flags applied
        call = best.get("steps_per_execution", 1) * best.get("fused_steps", 1)
        run += (_common_length(steps, [call]) - steps) * batch / rate
    return run


def _follow(
    argv: list[str],
    env: dict[str, str],
    timeout_s: float,
    progress: Callable[[str], Any],
    prefix: str = "",
) -> list[str] | None:
    """Runs `argv`, passing its progress lines (``[n | ...]``, ``tune: ...``) on to `progress`
    as they come, with `prefix`; returns its stderr's non-empty lines, or None when it ran
    past `timeout_s` (then it is killed)."""
    import threading

    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    lines: list[str] = []
    try:
        for raw in proc.stderr:  # type: ignore[union-attr]
            line = raw.rstrip()
            if not line:
                continue
            lines.append(line)
            if line.startswith(("[", "tune:")):
                progress(prefix + line)
        proc.wait()
    finally:
        timer.cancel()
    return None if killed.is_set() else lines


def _child(
    target: Target,
    contender: Contender,
    steps: int,
    extra: list[str],
    env: dict[str, str],
    timeout_s: float,
) -> dict[str, Any]:
    """One run in a fresh ``python -m toolkit backends --child`` process: its figures, or
    ``{"error": ...}`` with the child's last error line."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    flags = _without(target.flags, {"device", "backend"})
    argv = [
        sys.executable, "-m", "toolkit", "backends", "--child", out, "--steps", str(steps),
        *(["--recipe", target.recipe] if target.recipe else ["--model_fn", str(target.model_fn)]),
        f"--backend={contender.backend}", f"--device={contender.device}", *flags,
        *contender.settings, *extra,
    ]  # fmt: skip
    child_env = {**env, "KERAS_BACKEND": contender.backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    if target.model_fn:  # the user's module imports in the child as it does here
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        child_env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).strip(
            os.pathsep
        )
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=child_env, check=False
        )
        figures = read_json(out)
        if done.returncode != 0 or not figures:
            lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("error:")]
            why = (errors or lines or [f"exit status {done.returncode}"])[-1]
            return {"error": why.removeprefix("error: ").strip()}
        return figures
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout_s:.0f} s"}
    finally:
        with contextlib.suppress(OSError):
            os.remove(out)


# ---------------------------------------------------------------------------- in the child


def _figures(report: Any) -> dict[str, Any]:
    from toolkit import backend

    steps = report.steps
    compute = report.compute or {}
    metrics = report.metrics or {}
    loss = metrics.get("loss")
    return {
        "backend": backend.name(),
        "first_step_s": steps.first_step_s,
        "p50_s": steps.p50_s,
        "mean_s": steps.mean_s,
        "examples_per_sec": steps.examples_per_sec,
        "timed_steps": steps.timed_steps,
        "batch_size": steps.batch_size,
        "mfu": compute.get("mfu"),
        "loss": float(loss) if loss is not None else None,
    }


def measure_task(task: Any, config: Any, steps: int) -> dict[str, Any]:
    """One contender's figures for a recipe's Task in this process: a run of `steps` steps
    (one epoch, nothing written), FLOPs counted for MFU."""
    from toolkit import train

    # At least the first call, one more and three timed ones, whatever a call holds.
    per_call = config.steps_per_execution * config.fused_steps
    total = max(steps, 5 * per_call)
    total = -(-total // per_call) * per_call
    cfg = dataclasses.replace(
        config, epochs=1, steps_per_epoch=total, report_dir=None, verbose=0, smoke=False,
        profile_steps=None, memory_watch=False, tensorboard=False, log_steps=None,
        backup_dir=None,
    )  # fmt: skip
    return _figures(train.run(task, cfg).report)


def measure_model(model: Any, data: Any, config: Any, steps: int) -> dict[str, Any]:
    """One contender's figures for your compiled model on your batched data in this process
    (the same initial weights through ``config.init_weights``)."""
    from toolkit import devices, train
    from toolkit.data import infer_batch_size
    from toolkit.profiling.stats import utilization

    dataset, _ = train.as_batches(data, config.batch_size)
    if config.init_weights:
        train.share_initial_weights(model, config.init_weights)
    batch = infer_batch_size(dataset)
    per_call = max(1, train.steps_per_execution(model))
    report = train.measured_fit(
        model, dataset, max(steps, 5 * per_call), config.warmup_steps, batch_size=batch
    )
    figures = _figures(report)
    if config.count_flops and batch and figures["p50_s"]:
        with contextlib.suppress(Exception):
            facts = train.compute_facts(
                model, batch, config.precision, devices.resolve(config.device)
            )
            figures["mfu"] = utilization(
                facts.get("flops_per_step"), figures["p50_s"], facts.get("peak_flops_per_s")
            )["mfu"]
    return figures
