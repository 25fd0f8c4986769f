"""The run's ledger in words, in a table, beside another run's, and what each fix would save.

The ledger itself is measured by ``toolkit.profiling._ledger`` (StepTimer keeps it); this is
its reading, pure Python like the rest of the report side. :func:`fixes` turns its largest
items into a fix and the seconds it would save over the whole run, each prediction made from
this run's own figures (``benchmarks/ledger.py`` applies each fix in fresh processes and
prints the predicted saving beside the measured one):

* recompiles for a new input shape (a ragged last batch): their time, saved by
  ``drop_remainder=True``;
* validation: its runs beyond ``validation_freq=k``'s, each at the median run's time;
* a callback: ModelCheckpoint's saves beyond one every k epochs; any other callback's time;
* a slow exit on TensorFlow (tf.data's autotune teardown), the input where it was timed;
* XLA's compile where it is a large share of a short run: what each step must gain to pay
  for it (break-even), not a saving (only measuring the other setting says that: ``tune``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "LABELS",
    "compare_ledgers",
    "fix_lines",
    "fixes",
    "format_s",
    "ledger_line",
    "ledger_markdown",
]

LABELS = {
    "start_up": "start-up",
    "compile": "compile",
    "steps": "steps",
    "input": "input",
    "validation": "validation",
    "callbacks": "callbacks",
    "exit": "exit",
    "other": "other",
}
# An item is worth a fix line from this share of the run and this many seconds.
SHARE, MIN_S = 0.05, 0.1
VALIDATION_SHARE = 0.15
COMPILE_SHARE = 0.25
EVERY = 5  # validation_freq / checkpoints every this many epochs, as the fixes propose


def format_s(seconds: float | None) -> str:
    """Seconds as the ledger writes them everywhere: ``0.042 s``, ``1.23 s``, ``12.3 s``."""
    if seconds is None:
        return "—"
    a = abs(seconds)
    if a >= 100:
        return f"{seconds:,.0f} s"
    if a >= 10:
        return f"{seconds:.1f} s"
    if a >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds:.3f} s"


def _share(part: float | None, wall: float) -> str:
    return f"{part / wall:.0%}" if part is not None and wall > 0 else "—"


def _count(value: Any) -> int:
    """A count the ledger holds (``recompiles``, ``epochs``, ``steps``): the whole number of a
    finite number, 0 for anything else. The reader checks these fields (``_fields``); this is
    for a ledger handed in as a mapping, where ``int(inf)`` would be an OverflowError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value) if math.isfinite(value) else 0


def ledger_line(ledger: Mapping[str, Any]) -> str:
    """The whole fit in words, largest part first: ``run ledger (fit call 12.3 s): steps 49 %,
    validation 23 %, compile 17 % (1 recompile), callbacks 6 % (ModelCheckpoint 0.61 s), ...``."""
    wall = float(ledger.get("wall_s") or 0.0)
    parts = ledger.get("parts") or {}
    shown = sorted(
        ((k, v) for k, v in parts.items() if v is not None and k in LABELS),
        key=lambda kv: -kv[1],
    )
    bits = []
    for key, value in shown:
        if wall > 0 and value < 0.01 * wall and key != "steps":
            continue  # under 1 %: in the table, not in the line
        bit = f"{LABELS[key]} {_share(value, wall)}"
        if key == "compile":
            n = _count(ledger.get("recompiles"))
            if n:
                bit += f" ({n} recompile{'s' if n != 1 else ''})"
        if key == "callbacks":
            top = next(iter((ledger.get("callbacks") or {}).items()), None)
            if top is not None:
                bit += f" ({top[0]} {format_s(top[1]['seconds'])})"
        bits.append(bit)
    head = "fit call" if ledger.get("from") == "fit call" else "from train begin"
    partial = ", partial" if ledger.get("partial") else ""
    line = f"run ledger ({head} {format_s(wall)}{partial}): " + ", ".join(bits)
    if parts.get("input") is None and ledger.get("input_read_s"):
        read = float(ledger["input_read_s"])
        line += f"; input read in the steps {_share(read, wall)} (overlapping the device)"
    elif parts.get("input") is None:
        line += "; input inside the steps"
    if ledger.get("from") != "fit call":
        line += "; exit not timed: call fit through profile().fit"
    elif parts.get("exit") is None:
        line += "; the fit raised before its end"
    return line


def fixes(ledger: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ledger's largest items, each with its fix and the seconds it would save over the
    whole run (``saves_s``; None where this run alone cannot say), largest first."""
    wall = float(ledger.get("wall_s") or 0.0)
    if wall <= 0:
        return []
    parts = ledger.get("parts") or {}
    epochs = _count(ledger.get("epochs"))
    out: list[dict[str, Any]] = []
    compiles = [c for c in ledger.get("compiles") or [] if isinstance(c, Mapping)]

    shaped = [c for c in compiles if not c.get("first") and _is_shape(c.get("cause"))]
    for function in ("train", "evaluate"):
        mine = [c for c in shaped if c.get("function") == function]
        seconds = sum(float(c.get("seconds") or 0.0) for c in mine)
        if not mine or seconds < MIN_S:
            continue
        data = "training" if function == "train" else "validation"
        n = len(mine)
        # Whole batches only: the recompile goes, and so does the partial batch of each epoch
        # (or each validation), a step at the median step's time.
        step = float((ledger.get("step_s") or {}).get(function) or 0.0)
        runs = epochs if function == "train" else _count(ledger.get("validations"))
        saves = seconds + runs * step
        out.append(
            {
                "item": f"recompile ({function})",
                "seconds": seconds,
                "saves_s": saves,
                "fix": f"drop_remainder=True on the {data} data's batching",
                "words": (
                    f"{n} recompile{'s' if n != 1 else ''} of the {function} step for a new "
                    f"input shape ({mine[0].get('cause')}, epoch {_n(mine[0].get('epoch'))}) "
                    f"cost {format_s(seconds)}: drop_remainder=True on the {data} data's "
                    f"batching (or a batch size that divides it) saves ~{format_s(saves)} "
                    "(the recompile, and the partial batch each pass)"
                ),
            }
        )
    other = [c for c in compiles if not c.get("first") and not _is_shape(c.get("cause"))]
    seconds = sum(float(c.get("seconds") or 0.0) for c in other)
    if other and seconds >= MIN_S and seconds >= SHARE * wall:
        out.append(
            {
                "item": "recompile (other)",
                "seconds": seconds,
                "saves_s": None,
                "fix": "keep the step's inputs and settings fixed",
                "words": (
                    f"{len(other)} recompile(s) cost {format_s(seconds)} "
                    f"({other[0].get('cause')}): the step compiled again mid-run"
                ),
            }
        )

    validation = parts.get("validation")
    runs_s = [float(x) for x in ledger.get("validation_runs_s") or []]
    runs = len(runs_s)
    # Only a run validated every epoch (one already thinned has its own validation_freq).
    every_epoch = runs == epochs
    if validation and every_epoch and runs >= 2 and validation >= VALIDATION_SHARE * wall:
        k = min(EVERY, epochs)
        kept = epochs // k
        per_run = statistics.median(runs_s)
        saves = per_run * max(0, runs - kept)
    else:
        saves = 0.0
    if saves >= MIN_S:
        out.append(
            {
                "item": "validation",
                "seconds": validation,
                "saves_s": saves,
                "fix": f"validation_freq={k}",
                "words": (
                    f"validation takes {_share(validation, wall)} of the run ({runs} runs, "
                    f"{format_s(per_run)} each): validation_freq={k} saves ~{format_s(saves)}"
                ),
            }
        )

    for name, c in (ledger.get("callbacks") or {}).items():
        seconds = float(c.get("seconds") or 0.0)
        if seconds < MIN_S or seconds < SHARE * wall:
            continue
        per_epoch = seconds / max(1, epochs)
        head = f"{name} spends {format_s(per_epoch)} per epoch ({_share(seconds, wall)} of the run)"
        if name == "ModelCheckpoint" and epochs >= 2:
            k = min(EVERY, epochs)
            saves = per_epoch * (epochs - epochs // k)
            fix = f"save every {k} epochs (save_freq={k} × the steps per epoch)"
            words = f"{head}: saving every {k} epochs saves ~{format_s(saves)}"
        else:
            saves = seconds
            fix = f"call {name} less often, or make it cheaper"
            words = (
                f"{head}: without it the run is up to ~{format_s(seconds)} shorter (less "
                "where it overlapped other work, such as tf.data's between epochs)"
            )
        out.append(
            {"item": f"callback {name}", "seconds": seconds, "saves_s": saves, "fix": fix,
             "words": words}
        )  # fmt: skip

    exit_s = parts.get("exit")
    if exit_s is not None and exit_s >= 0.5 and exit_s >= SHARE * wall:
        tf = ledger.get("backend") == "tensorflow"
        fix = (
            "options.autotune.enabled = False on the tf.data dataset (its teardown waits "
            "for the autotune thread)"
            if tf
            else "close the input's iterator and worker processes sooner"
        )
        out.append(
            {
                "item": "exit",
                "seconds": exit_s,
                "saves_s": exit_s if tf else None,
                "fix": fix,
                "words": f"the fit exits {format_s(exit_s)} after its last step: {fix}",
            }
        )

    input_s = parts.get("input")
    if input_s is not None and input_s >= 0.2 * wall and input_s >= MIN_S:
        out.append(
            {
                "item": "input",
                "seconds": input_s,
                "saves_s": None,
                "fix": "cache, prefetch or more input workers (diagnose measures the pipeline)",
                "words": (
                    f"the steps waited {format_s(input_s)} for their input "
                    f"({_share(input_s, wall)} of the run): cache, prefetch or more workers "
                    "save up to that much"
                ),
            }
        )

    read = ledger.get("input_read_s")
    if parts.get("input") is None and read and read >= 0.2 * wall:
        out.append(
            {
                "item": "input",
                "seconds": read,
                "saves_s": None,
                "fix": "cache, prefetch or more input workers (diagnose measures the pipeline)",
                "words": (
                    f"the host spent {format_s(read)} ({_share(read, wall)} of the run) reading "
                    "batches while the device ran the steps: diagnose says whether the steps "
                    "waited for them"
                ),
            }
        )

    compile_s = parts.get("compile")
    first = next((c for c in compiles if c.get("first") and c.get("function") == "train"), None)
    steps = _count(ledger.get("steps"))
    jit = str(ledger.get("jit_compile")).lower() == "true"
    if jit and compile_s and compile_s >= COMPILE_SHARE * wall and first is not None and steps:
        first_s = float(first.get("seconds") or 0.0)
        per_step = first_s / steps
        words = (
            f"compile takes {_share(compile_s, wall)} of the run ({format_s(first_s)} for "
            f"XLA's first call): over this run's {steps:,} steps it pays for itself only if "
            f"XLA saves {per_step * 1e3:.3g} ms a step (tune measures jit_compile both ways "
            "over the run)"
        )
        out.append(
            {"item": "compile", "seconds": compile_s, "saves_s": None,
             "fix": "jit_compile=False, or a longer run", "words": words,
             "break_even_ms": per_step * 1e3}
        )  # fmt: skip
    # A fix with a saving first, the largest first; then what only says where time went.
    out.sort(
        key=lambda f: (
            f["saves_s"] is None,
            -(f["saves_s"] if f["saves_s"] is not None else f["seconds"]),
        )
    )
    return [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in f.items()} for f in out]


def _n(epoch: Any) -> str:
    return str(int(epoch) + 1) if isinstance(epoch, int) else "?"


def _is_shape(cause: Any) -> bool:
    text = str(cause or "").lower()
    return "shape" in text or "size mismatch" in text


def fix_lines(ledger: Mapping[str, Any], limit: int = 3) -> list[str]:
    """``fix: ...`` for the largest items (the ledger's own, else computed now)."""
    found = ledger.get("fixes")
    if not isinstance(found, list):
        found = fixes(ledger)
    return [f"fix: {f['words']}" for f in found[:limit] if isinstance(f, Mapping)]


def ledger_markdown(ledger: Mapping[str, Any]) -> str:
    """The ledger's section of report.md: its parts, callbacks, compiles and fixes."""
    wall = float(ledger.get("wall_s") or 0.0)
    parts = ledger.get("parts") or {}
    out = [f"{ledger_line(ledger)}\n", "| part | seconds | share |", "|---|---:|---:|"]
    for key, label in LABELS.items():
        value = parts.get(key)
        out.append(f"| {label} | {format_s(value)} | {_share(value, wall)} |")
    out.append(f"| **fit** | **{format_s(wall)}** | 100% |")
    callbacks = ledger.get("callbacks") or {}
    if callbacks:
        out += ["", "| callback | seconds | hook calls |", "|---|---:|---:|"]
        out += [
            f"| {k} | {format_s(v['seconds'])} | {v['calls']:,} |" for k, v in callbacks.items()
        ]
    for name, seconds in (ledger.get("overlapped") or {}).items():
        out.append(f"\n{name}: {format_s(seconds)} on Keras's callback thread (overlapped)")
    compiles = ledger.get("compiles") or []
    if compiles:
        out += ["", "| compile | epoch | step | seconds | cause |", "|---|---:|---:|---:|---|"]
        for c in compiles:
            epoch = _n(c.get("epoch")) if c.get("epoch") is not None else "—"
            step = c.get("step") if c.get("step") is not None else "—"
            cause = str(c.get("cause") or "—").replace("|", "\\|")
            out.append(
                f"| {c.get('function')} | {epoch} | {step} | {format_s(c.get('seconds'))} | "
                f"{cause} |"
            )
        out.append(f"\nCompiles found by: {ledger.get('signal') or '—'}.")
    found = ledger.get("fixes") or []
    if found:
        out.append("")
        out += [f"- fix: {f['words']}" for f in found]
    for o in ledger.get("other_where") or []:
        if isinstance(o, Mapping) and float(o.get("seconds") or 0.0) >= 0.01 * wall:
            out.append(f"\nOther: {format_s(o.get('seconds'))} at {o.get('where')}.")
    for what in ledger.get("unseen") or []:
        out.append(f"\n_Not seen: {what}._")
    return "\n".join(out) + "\n"


def compare_ledgers(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> str | None:
    """``ledger, B vs A: compile +5.2 s, validation −30 %, wall −2.1 s``: each part that moved
    by at least 0.1 s and 10 %; None where either run has no ledger."""
    if not a or not b:
        return None
    pa, pb = a.get("parts") or {}, b.get("parts") or {}
    bits = []
    for key in (*LABELS, "wall"):
        x = a.get("wall_s") if key == "wall" else pa.get(key)
        y = b.get("wall_s") if key == "wall" else pb.get(key)
        if x is None or y is None:
            continue
        delta = float(y) - float(x)
        if abs(delta) < MIN_S or (x and abs(delta) < 0.1 * abs(float(x))):
            continue
        label = "fit" if key == "wall" else LABELS[key]
        sign = "+" if delta >= 0 else "−"
        bit = f"{label} {sign}{format_s(abs(delta))}"
        if x:
            bit += f" ({sign}{abs(delta) / abs(float(x)):.0%})"
        bits.append(bit)
    if not bits:
        return "ledger, B vs A: no part moved by 0.1 s and 10 %"
    return "ledger, B vs A: " + ", ".join(bits)


def bar_segments(ledger: Mapping[str, Any]) -> Sequence[tuple[str, float]]:
    """``(label, seconds)`` of each part that took time, in the ledger's order (the bar)."""
    parts = ledger.get("parts") or {}
    return [(LABELS[k], float(parts[k])) for k in LABELS if parts.get(k) and parts[k] > 0]
