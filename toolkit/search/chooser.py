"""Which Keras backend trains this model fastest on this machine: measured, not guessed.

:func:`compare` runs each installed backend × device (a *contender*) in fresh processes (Keras fixes
its backend at import) with the same flags, data order and initial weights, in interleaved rounds
so a slowing machine slows all alike. By the median per-round ratio to the defaults' *mean* step
(the p50 flatters stalls), the winner must win most rounds, beat ``1 + MIN_GAIN`` and end within
``LOSS_RTOL`` of their final loss (else it trained another model), or the defaults stay. Cached per
target, settings, device and machine for ``--backend=auto``. Imports no framework."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from toolkit import backend as tk_backend
from toolkit.core import _extras as extras
from toolkit.core import children, compat, machine
from toolkit.core import progress as tk_progress
from toolkit.core.cache import Cache
from toolkit.core.stats import whole_calls
from toolkit.runner.config import SEARCHED, SETTINGS, as_flags
from toolkit.search._processes import ChildResult, ChildSpec, probe_devices, run_child
from toolkit.search.engine import MIN_GAIN, Candidate
from toolkit.search.rounds import decide, interleaved_rounds
from toolkit.search.standings import (
    BackendsResult,
    ChooserError,
    Contender,
    Figures,
    Row,
    Run,
    Target,
    loss_agrees,
    num,
    paired_ratio,
    rounds_of,
    speed,
)

__all__ = [
    "compare",
    "contenders",
    "installed_backends",
    "resolve_auto",
    "tune_across",
]

CACHE_FILE = "backends.json"
_CACHE = Cache(CACHE_FILE)
SETTINGS_GAIN = 0.05  # tuned must beat its own defaults by this: twins swing by > MIN_GAIN
DEFAULT_STEPS = 200
DEFAULT_ROUNDS = 3
FINAL_MARGIN = 1.25  # tune --across_backends reserves the final's first round at this × estimate
# The settings that change a step's speed, but those each contender sets itself: the cache key's.
KEYED = tuple(f for f in SETTINGS if f.metadata["speed"] and f.name not in ("backend", "device"))


def choose(rows: Sequence[Row], min_gain: float = MIN_GAIN) -> tuple[Contender, str]:
    """The fastest beating the defaults by > `min_gain`, loss agreeing (else they stay), and why."""
    defaults = rows[0]
    if defaults.error is not None:
        measured = [r for r in rows if not r.failed]
        if not measured:
            return defaults.contender, "no contender ran"
        best = min(measured, key=lambda r: r.median("mean_s") or float("inf"))
        return best.contender, f"the defaults failed ({defaults.error}); fastest of the rest"
    agrees = {r.contender: not r.failed and loss_agrees(defaults, r) is not False for r in rows}
    verdict = decide(
        defaults.contender,
        [r.contender for r in rows[1:]],
        rounds_of(rows),
        speed=speed,
        min_gain=min_gain,
        eligible=agrees.__getitem__,
    )
    if verdict.leader is None:
        if all(r.failed for r in rows[1:]):
            return defaults.contender, "every other contender failed"
        return defaults.contender, "no contender beat the defaults"
    if not verdict.won:
        return defaults.contender, (
            f"{verdict.leader.label()} was only {verdict.ratio:.2f}× the defaults (needs > "
            f"{1 + min_gain:.2f}×): the defaults stay"
        )
    best, best_ratio = next(r for r in rows if r.contender == verdict.pick), verdict.ratio
    plain = _plain_twin(rows, best)
    if plain is not None:
        edge = paired_ratio(plain, best)
        plain_ratio = paired_ratio(defaults, plain)
        if (edge is None or edge <= 1 + SETTINGS_GAIN) and (plain_ratio or 0) > 1 + min_gain:
            return plain.contender, (
                f"{plain_ratio:.2f}× the defaults' mean step, loss agrees; its tuned settings "
                f"were {edge or 0:.2f}× of it (need > {1 + SETTINGS_GAIN:.2f}×): not kept"
            )
    words = f"{best_ratio:.2f}× the defaults' mean step, loss agrees"
    return best.contender, words + _break_even(defaults, best)


def _break_even(defaults: Row, best: Row) -> str:
    """Where the pick's longer first step pays for itself, in words."""
    first_d, first_b = defaults.median("first_step_s"), best.median("first_step_s")
    mean_d, mean_b = defaults.median("mean_s"), best.median("mean_s")
    if None in (first_d, first_b, mean_d, mean_b) or first_b <= first_d:
        return "; ranked by the steady state (the run's length is not known here)"
    gain = mean_d - mean_b
    after = f"after {math.ceil((first_b - first_d) / gain):,} steps" if gain > 0 else "never"
    return (
        f"; its first step costs {first_b - first_d:.2f} s more and pays for itself {after} "
        "(ranked by the steady state: the run's length is not known here)"
    )


def _plain_twin(rows: Sequence[Row], row: Row) -> Row | None:
    """`row`'s backend and device untuned, when `row` is tuned and that twin's loss agrees."""
    c = row.contender
    if not c.settings:
        return None
    for other in rows:
        o = other.contender
        if (o.backend, o.device, o.settings) == (c.backend, c.device, ()) and not other.failed:
            return other if loss_agrees(rows[0], other) is not False else None
    return None


def installed_backends() -> list[str]:
    """Keras's backends whose framework is installed (none is imported)."""
    return list(tk_backend.installed())


def contenders(
    device: str | None = None,
    backends: Sequence[str] | None = None,
    *,
    probe: Callable[[str], list[str]] | None = None,
) -> list[Contender]:
    """Installed backends (or `backends`) × the devices each sees (or `device`), defaults first."""
    if compat.use_legacy_keras():
        raise ChooserError(
            "TF_USE_LEGACY_KERAS=1 selects tf_keras, which trains on TensorFlow only: unset it "
            "to compare Keras 3's backends"
        )
    names = list(backends) if backends else installed_backends()
    known = tk_backend.names()
    if not backends:
        for absent in (b for b in known if b not in names and tk_backend.info(b).extra):
            extras.note_missing(
                tk_backend.info(absent).extra, f"backends: no {absent} contender",
                (tk_backend.info(absent).framework,),
            )  # fmt: skip
    if not names:
        raise ChooserError(f"no Keras backend is installed (pip install one of {', '.join(known)})")
    unknown = [b for b in names if b not in known]
    if unknown:
        raise ChooserError(f"--backends: unknown {', '.join(unknown)}; use {', '.join(known)}")
    missing = [b for b in names if not tk_backend.info(b).installed()]
    if missing:
        raise ChooserError(
            f"--backends: {', '.join(missing)} not installed "
            f"({tk_backend.info(missing[0]).install_hint()})"
        )
    asked = device
    default = os.environ.get("KERAS_BACKEND", tk_backend.DEFAULT)  # a fresh process's
    names.sort(key=lambda b: (b != default, known.index(b)))
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


def _versions() -> dict[str, str | bool]:
    """Frameworks' and Keras's versions (nightly flagged), from metadata: the same before import."""
    out: dict[str, str | bool] = {}
    registered = (d for b in tk_backend.names() for d in tk_backend.info(b).distributions)
    for dist in dict.fromkeys(registered):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    release = compat.keras_release()
    out.update(keras=release.version, keras_nightly=release.nightly)
    return out


def keyed(target: Target) -> dict[str, Any]:
    """What decides `target`'s fastest backend: its file, recipe args, speed settings and device."""
    config = target.config
    return {
        "target": target.name,
        "source": target.source_digest(),
        "params": dict(sorted(target.params.items())),
        "settings": {
            f.name: config[f.name]
            for f in KEYED
            if f.name in config and config[f.name] != f.default
        },
        "device": _device(target),
    }


def cache_key(target: Target, steps: int) -> tuple[str, dict[str, Any]]:
    """``(hash, what was hashed)``: :func:`keyed`, the steps per run and this machine."""
    facts = {
        **keyed(target),
        "steps": steps,
        "machine": machine.machine_facts(**_versions()),
        "legacy": os.environ.get("TF_USE_LEGACY_KERAS", ""),
    }
    return _CACHE.key(facts), facts


def cached(key: str) -> BackendsResult | None:
    """The cached comparison for `key`, if any (a damaged entry is a miss)."""
    return _CACHE.read(key, BackendsResult.from_dict)


def resolve_auto(target: Target) -> str:
    """``--backend=auto``'s backend: the cached winner, else Keras's default (said on stderr)."""
    best = None
    wanted = keyed(target)
    machine_now = machine.machine_facts(**_versions())
    found = [
        e for e in _CACHE.entries()
        if all(e["facts"].get(k) == v for k, v in wanted.items())
        and e["facts"].get("machine") == machine_now
        and e["facts"].get("legacy", "") == os.environ.get("TF_USE_LEGACY_KERAS", "")
    ]  # fmt: skip
    if found:
        newest = max(found, key=lambda e: e.get("stored", 0))
        with contextlib.suppress(KeyError, TypeError, ValueError):
            best = Contender(**newest["result"]["best"])
    recipe = target.name
    if best is None:
        chosen = os.environ.get("KERAS_BACKEND", tk_backend.DEFAULT)
        print(
            f"--backend=auto: no measured winner for {recipe} with these flags on this machine; "
            f"training on {chosen} (measure: python -m toolkit backends --recipe {recipe} ...)",
            file=sys.stderr,
        )
        return chosen
    print(
        f"--backend=auto: {best.backend} (measured fastest for {recipe} here, on {best.device}; "
        "python -m toolkit backends shows the table)",
        file=sys.stderr,
    )
    return best.backend


def compare(
    target: Target | str | Callable[..., Any],
    *,
    backends: Sequence[str] | None = None,
    steps: int = DEFAULT_STEPS,
    rounds: int = DEFAULT_ROUNDS,
    use_cache: bool = True,
    refresh: bool = False,
    progress: Callable[[str], Any] | None = None,
    timeout_s: float = 900.0,
    runner: Callable[[Contender, Target], ChildResult | Figures] | None = None,
    candidates: Sequence[Contender] | None = None,
    budget_s: float | None = None,
) -> BackendsResult:
    """Runs `target` under every contender in interleaved rounds (module docstring).

    Args:
        target: a :class:`Target`, a recipe name, ``"module:function"`` or the function itself.
        backends: to compare (default: every installed one).
        steps: per run (the first execution and the warm-up untimed).
        refresh: measure again, and cache what it finds.
        progress: called with a line per run (default: stderr).
        timeout_s: the longest one run may take.
        runner: one contender's :class:`Figures` or ``ChildResult`` (default: a fresh child).
        candidates: the contenders, the defaults first; given, nothing is cached.
        budget_s: after the first round, a run that would end past it is not started.

    Raises:
        ChooserError: nothing to compare (no backend installed, an unknown one)."""
    target = Target.of(target)
    if rounds < 1 or steps < 8:
        raise ChooserError("backends: --rounds must be >= 1 and --steps >= 8")
    bar_wanted = progress is None  # the default: lines and, on a terminal, a bar of the runs
    progress = progress or tk_progress.say
    key, facts = cache_key(target, steps)
    use_cache = use_cache and candidates is None
    hit = cached(key) if use_cache and not refresh else None
    if hit is not None and (not backends or {r.contender.backend for r in hit.rows}
                            == set(backends)):  # fmt: skip
        progress(f"backends: cached result for this target, flags and machine ({key})")
        return hit
    env = dict(os.environ)
    listed = list(candidates or ()) or _listed(target, backends, env, timeout_s, progress)
    rows = [Row(c) for c in listed]
    length = run_steps(steps, listed, target)
    if length != steps:
        progress(
            f"backends: {length} steps per run, not {steps}: every contender trains as many "
            "steps (their final losses are compared): at least 5 calls of the longest call, "
            "and a whole number of every contender's calls"
        )
    start = time.perf_counter()
    with children.temporary_directory("toolkit-backends-") as tmp:  # an orphan removes it
        shared = _with_settings(target, init_weights=os.path.join(tmp, "initial.weights.h5"))

        def child(c: Contender, on: Target) -> ChildResult:
            spec = ChildSpec("figures", c.backend, c.device, on, _candidate(c), steps=length)
            return run_child(spec, env, timeout_s)

        run = runner or child
        rounds = _rounds(
            rows, lambda c: run(c, shared), rounds, budget_s, length, progress, bar_wanted,
            start,
        )  # fmt: skip
    result = _result(target, rows, key, length, rounds, start)
    if use_cache:
        _store(result, facts, rows, progress)
    return result


def _candidate(c: Contender) -> Candidate | None:
    """The candidate of `c`'s tuned settings (None: the target's own)."""
    return Candidate(**dict(c.settings)) if c.settings else None


def _with_settings(target: Target, **settings: Any) -> Target:
    """`target` with these settings over its config's."""
    return dataclasses.replace(target, config={**target.config, **settings})


def _listed(
    target: Target,
    backends: Sequence[str] | None,
    env: dict[str, str],
    timeout_s: float,
    progress: Callable[[str], Any],
) -> list[Contender]:
    """:func:`contenders` for `target`, each backend's devices asked in a fresh process."""
    asked: list[str] = []

    def probe(name: str) -> Any:
        if not asked:  # once, after the backends named were checked
            progress("backends: asking each backend which devices it sees (a process each)")
        asked.append(name)
        return probe_devices(name, env, min(timeout_s, 300.0))

    return contenders(_device(target), backends, probe=probe)


def _device(target: Target) -> str | None:
    """The device `target`'s config asks for; None for ``auto`` (each backend's own)."""
    device = str(target.config.get("device") or "auto").strip().lower()
    return None if device == "auto" else device


def _result(
    target: Target, rows: list[Row], key: str, length: int, rounds: int, start: float
) -> BackendsResult:
    """The result: runs in round order (for the paired ratios), and the pick."""
    for row in rows:
        row.runs.sort(key=lambda run: run.round)
    best, why = choose(rows)
    return BackendsResult(
        target, rows, best, key, length, rounds, time.perf_counter() - start, False, why
    )


def _store(
    result: BackendsResult,
    facts: dict[str, Any],
    rows: Sequence[Row],
    progress: Callable[[str], Any],
) -> None:
    """Caches `result`, unless a signal or the timeout ended one of its runs."""
    interrupted = sum(row.interrupted for row in rows)
    if not any(row.ok() for row in rows):  # an answer of nothing measured is no answer
        progress("backends: not cached: no contender ran")
    elif interrupted:
        progress(
            f"backends: not cached: {interrupted} run(s) ended by a signal or the timeout "
            "measured nothing; run again for an answer to keep"
        )
    elif not _CACHE.put(result.key, facts, result.to_dict()):
        progress(f"backends: not cached: cannot write {_CACHE.path} (set TOOLKIT_CACHE_DIR)")


def _rounds(
    rows: list[Row],
    run: Callable[[Contender], ChildResult | Figures],
    rounds: int,
    budget_s: float | None,
    length: int,
    progress: Callable[[str], Any],
    bar_wanted: bool,
    start: float,
) -> int:
    """:func:`compare`'s rounds, a line (on a terminal, a bar) per run; returns rounds run."""
    total = rounds * len(rows)
    walls: list[float] = []
    by_contender = {row.contender: row for row in rows}
    bar = tk_progress.bar(total, "backends", unit="run", enabled=bar_wanted)

    def one_run(contender: Contender, r: int) -> Run:
        t0 = time.perf_counter()
        bar.describe(f"backends: round {r + 1}/{rounds} {contender.label()}")
        got = run(contender)
        bar.update()
        done = _run_of(got, r, time.perf_counter() - t0, length)
        walls.append(done.wall_s)
        by_contender[contender].runs.append(done)
        ran = sum(len(x.runs) for x in rows)
        progress(
            f"[{ran}/{total} | {time.perf_counter() - start:.0f} s] round {r + 1}: "
            f"{contender.label()}: {_run_words(done)}"
        )
        return done

    def round_cost(r: int) -> float | None:  # the first round always runs
        return statistics.median(walls) * len(rows) if r else None

    ran, out_of_budget = interleaved_rounds(
        list(by_contender), one_run, max_rounds=rounds, budget_s=budget_s,
        round_cost=round_cost, spent_s=time.perf_counter() - start,
    )  # fmt: skip
    if out_of_budget:
        progress(f"backends: the budget ({budget_s:.0f} s) ends after {len(ran)} round(s)")
    bar.close()
    return len(ran)


def _run_of(got: ChildResult | Figures, r: int, wall_s: float, length: int) -> Run:
    """A contender's run in round `r` from its runner's answer (no timed step: failed)."""
    if isinstance(got, ChildResult):
        figures, error, interrupted = got.figures(), got.error, got.interrupted
    else:
        figures, error, interrupted = got, None, False
    if error is None and (figures is None or not figures.mean_s):
        figures, error = None, f"no timed steps in {length} steps: raise --steps"
    return Run(figures if error is None else None, error, interrupted, r, wall_s)


def _run_words(run: Run) -> str:
    """A run as its progress line says it."""
    f = run.figures
    if run.error is not None or f is None or f.mean_s is None:
        return f"failed: {run.error}"
    return (
        f"mean {f.mean_s * 1e3:.3f} ms/step (p50 {num(f.p50_s and f.p50_s * 1e3, '.3f')}), "
        f"first step {num(f.first_step_s, '.3f')} s"
    )


def run_steps(steps: int, listed: Sequence[Contender], target: Target) -> int:
    """Steps each of `listed` trains: the same for all, since their final losses are compared."""
    own = {k: target.config[k] for k in SEARCHED if target.config.get(k) is not None}

    def per_call(c: Contender) -> int:
        return Candidate(**{**own, **dict(c.settings)}).per_call

    return _common_length(steps, [per_call(c) for c in listed])


def _common_length(steps: int, calls: Sequence[int]) -> int:
    """At least `steps` and 5 of the longest of `calls` (steps a call), a multiple of each."""
    calls = list(calls) or [1]
    return whole_calls(max(steps, 5 * max(calls)), math.lcm(*calls))


@dataclasses.dataclass(frozen=True)
class Searched:
    """A backend's ``tune`` search as :func:`tune_across` reads it (``first_*``: the defaults')."""

    best: Candidate
    defaults: Candidate | None = None
    seconds: float | None = None
    first_s: float | None = None
    first_rate: float | None = None
    batch_size: int | None = None
    untried_s: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, d: Any) -> Searched | None:
        """The search in a ``tune`` child's answer; None where it holds no pick."""
        try:
            trials = d.get("trials") or []
            first = trials[0] if trials else {}
            return cls(
                Candidate.from_dict(d["best"]),
                Candidate.from_dict(first["candidate"]) if "candidate" in first else None,
                _float(d.get("seconds")), _float(first.get("seconds")),
                _float(first.get("examples_per_sec")), d.get("batch_size"),
                _untried_s(d.get("untried")),
            )  # fmt: skip
        except (AttributeError, KeyError, TypeError, ValueError):
            return None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _untried_s(untried: Any) -> tuple[float, ...]:
    """The budget that would have tried each untried candidate (malformed ones left out)."""
    needed = []
    for u in untried if isinstance(untried, list) else []:
        try:
            needed.append(
                float(u["spent_s"]) + float(u["needs_s"]) + float(u.get("reserve_s") or 0)
            )
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return tuple(needed)


def tuned_settings(search: Searched) -> tuple[tuple[str, Any], ...]:
    """A search winner's ``(name, value)`` settings; ``()`` for the defaults (twins pick noise)."""
    if search.defaults == search.best:
        return ()
    return tuple((k, v) for k, v in search.best.values().items() if v is not None)


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
    """The backend as one more ``tune`` axis: each contender searches in a fresh process, then all
    defaults and winners meet in :func:`compare` (a search window can favor losers head to head)."""
    from toolkit.search.tune import check_budget

    target = Target.of(target)
    check_budget(budget_s)  # refused as --tune_budget is, before any process starts
    progress = progress or tk_progress.say
    start = time.perf_counter()
    env = dict(os.environ)
    listed = contenders(
        _device(target), backends, probe=lambda b: probe_devices(b, env, min(timeout_s, 300.0))
    )
    searches = _Searches(target, budget_s, len(listed), env, timeout_s, progress, start)
    tuned = [Contender(c.backend, c.device) for c in listed]  # Keras's defaults, the first first
    for c in listed:
        contender = searches.run(c, steps)
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


class _Searches:
    """:func:`tune_across`'s searches, a fresh process each, its budget share set as it starts."""

    def __init__(
        self,
        target: Target,
        budget_s: float,
        count: int,
        env: dict[str, str],
        timeout_s: float,
        progress: Callable[[str], Any],
        start: float,
    ) -> None:
        self.target, self.budget_s, self.count, self.env = target, budget_s, count, env
        self.timeout_s, self.progress, self.start = timeout_s, progress, start
        self.overheads: list[float] = []  # each child's seconds beyond its search
        self.runs: list[float] = []  # what one run of the final costs, estimated by each
        self.done = 0

    def run(self, c: Contender, steps: int) -> Contender:
        """`c` with the settings its search picked (none: its Keras defaults)."""
        share = search_share(
            time.perf_counter() - self.start, self.budget_s, self.count - self.done,
            self.overheads, self.runs, finalists=2 * self.count,
        )  # fmt: skip
        self.done += 1
        t0 = time.perf_counter()
        self.progress(f"tune {c.label()}: searching, a fresh process ({share:.0f} s budget)")
        spec = ChildSpec("tune", c.backend, c.device, self.target, budget_s=round(share))
        got = run_child(spec, self.env, self.timeout_s, self.progress, f"  {c.label()} ")
        wall = time.perf_counter() - t0
        self.overheads.append(max(wall - share, 0.0))
        found = Searched.from_dict(got.answer) if got.ok else None
        run = final_run_estimate(found, wall, steps) if found is not None else None
        if run is not None:
            self.runs.append(run)
        if found is None:
            why = got.error or "no result"
            self.progress(f"tune {c.label()}: failed ({why}); its Keras defaults stay a contender")
            return Contender(c.backend, c.device)
        tuned = Contender(c.backend, c.device, tuned_settings(found))
        self.progress(
            f"tune {c.label()}: {tuned.settings_words() or 'Keras defaults'} "
            f"({time.perf_counter() - t0:.0f} s of {share:.0f})"
        )
        left = untried_budget(found.untried_s, share, self.budget_s)
        if left is not None:
            count, more = left
            self.progress(  # indented: the line above's, one per search
                f"  {count} setting(s) left untried in its {share:.0f} s; "
                f"--tune_budget={more} tries them"
            )
        return tuned


def untried_budget(
    needed: Sequence[float], share: float, budget_s: float
) -> tuple[int, int] | None:
    """``(count, the --tune_budget that tries them, in tens of s)`` of what a search left out."""
    if not needed or share <= 0:
        return None
    return len(needed), 10 * math.ceil(budget_s * max(needed) / share / 10)


def search_share(
    elapsed_s: float,
    budget_s: float,
    searches_left: int,
    overheads: Sequence[float],
    runs: Sequence[float],
    finalists: int,
) -> float:
    """The ``--tune_budget`` of the next backend's search in :func:`tune_across`: at most half of
    `budget_s` less one final round (`finalists` × median of `runs` × :data:`FINAL_MARGIN`), shared
    by `searches_left`, less a child's median overhead; at least 1 s."""
    final_round = statistics.median(runs) * finalists * FINAL_MARGIN if runs else 0.0
    searching = min(budget_s * 0.5, budget_s - final_round)
    overhead = statistics.median(overheads) if overheads else 0.0
    return max((searching - elapsed_s) / searches_left - overhead, 1.0)


def final_run_estimate(found: Searched, wall_s: float, steps: int = DEFAULT_STEPS) -> float | None:
    """One final run's seconds: overhead, defaults' trial, steps the winner's calls add; or None."""
    if found.seconds is None or found.first_s is None:
        return None
    run = max(wall_s - found.seconds, 0.0) + found.first_s
    rate, batch = found.first_rate, found.batch_size
    if rate and batch:  # the winner's settings, the recipe's flags applied
        run += (_common_length(steps, [found.best.per_call]) - steps) * batch / rate
    return run


def why_slower(
    result: BackendsResult,
    *,
    steps: int = 10,
    timeout_s: float = 900.0,
    runner: Callable[[Contender, Target], Any] | None = None,
) -> tuple[Any, Any, Any] | None:
    """Why `result`'s slowest backend trails its fastest: both steps taken apart in fresh processes
    and diffed, with a fix. ``(contrast or None if one failed, fastest's, slowest's)``, or None."""
    from toolkit.core._anatomy import Anatomy, contrast

    ran = [row for row in result.rows if row.ok()]
    by_backend: dict[str, Row] = {}
    for row in sorted(ran, key=lambda r: r.median("mean_s") or math.inf):
        by_backend.setdefault(row.contender.backend, row)
    if len(by_backend) < 2:
        return None
    rows = list(by_backend.values())
    fast, slow = rows[0], rows[-1]
    env = dict(os.environ)

    def child(c: Contender, on: Target) -> Anatomy:
        spec = ChildSpec("anatomy", c.backend, c.device, on, _candidate(c), steps=steps)
        got = run_child(spec, env, timeout_s)
        if got.ok:
            return Anatomy.from_dict(got.answer)
        return Anatomy.from_dict({"backend": c.backend, "device": c.device, "error": got.error})

    run = runner or child
    tk_progress.say(
        f"backends: taking apart {fast.contender.label()} and {slow.contender.label()}, "
        "each in a fresh process"
    )
    a, b = (run(r.contender, result.target) for r in (fast, slow))
    if a.error or b.error:
        return None, a, b
    titles = [tk_backend.info(r.contender.backend).title for r in (fast, slow)]
    advice = tk_backend.get(slow.contender.backend).jit_advice()
    fix = advice.spelled(as_flags) if advice is not None else None  # said to a verb's user
    # on the speed table's steps: the diff's parts add up to the gap the table shows
    steps = (fast.median("mean_s") or 0.0, slow.median("mean_s") or 0.0)
    return contrast(a, b, titles[0], titles[1], fix=fix, steps=steps), a, b
