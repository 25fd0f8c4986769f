"""The whole ``fit`` call in words (start-up + steps + exit) and the process around it (launch,
set-up, model, fit, after): wall time every user pays and no step shows. StepTimer times train
begin to end; a call also costs the data adapter, building, the callbacks' train begin and the
iterator before its first step, and on TensorFlow the tf.data iterator's destruction after."""

from __future__ import annotations

from toolkit.core.stats import format_s, whole_percents
from toolkit.profiling._timing import (
    AFTER_FIT,
    BEFORE_FIT,
    FIT_CALL,
    IN_PROFILE,
    LAUNCH,
    MODEL,
    SET_UP,
    FitCall,
    ProcessTime,
    Stage,
)

SLOW_EXIT_S, SLOW_EXIT_SHARE = 0.5, 0.05  # an exit this long and large: its likely cause named
SLOW_EXIT_HINT = (
    "on TensorFlow a slow exit is the tf.data iterator's teardown waiting for the autotune "
    "thread; options.autotune.enabled = False on the dataset ends it"
)


def fit_call_line(parts: FitCall) -> str:
    """``fit call: W = start-up + steps + exit``; from train begin when only callbacks timed it."""
    head = "fit call" if parts.timed else "fit from train begin"
    line = (
        f"{head}: {format_s(parts.whole_s)} = start-up {format_s(parts.start_up_s)} + steps "
        f"{format_s(parts.steps_s)}"
    )
    if parts.exit_s is not None:
        line += f" + exit {format_s(parts.exit_s)}"
        if parts.exit_s >= SLOW_EXIT_S and parts.exit_s >= SLOW_EXIT_SHARE * parts.whole_s:
            line += f" ({SLOW_EXIT_HINT})"
        return line
    if parts.timed:
        return f"{line} (fit raised before its end)"
    return f"{line} (exit not timed: call fit through profile().fit)"


STAGE_HOLDS = {  # what each stage the toolkit marks holds, for report.md (yours: its name)
    LAUNCH: "the process's start to the run (the runner, or profile()'s block): the "
    "interpreter, the imports, the script before it",
    SET_UP: "the device, the distribution strategy and the data pipelines",
    MODEL: "the model built and compiled (on JAX each weight's initializer compiles)",
    BEFORE_FIT: "up to the fit call (the runner: the profiling set up, the FLOPs counted)",
    FIT_CALL: "model.fit, start-up to exit: its parts are the ledger's",
    AFTER_FIT: "after the fit returned, to the report",
    IN_PROFILE: "the profiled block, to the report (no fit call was timed)",
}


def _compiling(stage: Stage) -> str:
    """`` (compiling 15.2 s)`` where the backend timed compiles in `stage` (not the fit call)."""
    if not stage.compile_s or stage.name == FIT_CALL:
        return ""
    return f" (compiling {format_s(stage.compile_s)})"


def process_line(process: ProcessTime) -> str:
    """``process: T to the report = launch + set-up + ...``, each stage once (summed)."""
    merged = process.merged()
    stages = " + ".join(f"{s.name} {format_s(s.seconds)}{_compiling(s)}" for s in merged)
    return f"process: {format_s(process.whole_s)} to the report = {stages}"


def process_markdown(process: ProcessTime) -> str:
    """report.md's table of the stages, each with its share and what it holds."""
    merged = process.merged()
    shares = whole_percents([s.seconds for s in merged], process.whole_s)
    out = ["| stage | seconds | share | what it holds |", "|---|---:|---:|---|"]
    for s, pct in zip(merged, shares, strict=True):
        holds = STAGE_HOLDS.get(s.name, "") + _compiling(s)
        out.append(f"| {s.name} | {format_s(s.seconds)} | {pct}% | {holds.strip()} |")
    out.append(f"| **process** | **{format_s(process.whole_s)}** | 100% | to the report |")
    return "\n".join(out) + "\n"


def processes_line(a: ProcessTime, b: ProcessTime) -> str:
    """Two runs' processes stage by stage, for ``compare``; a stage one run lacks is 0 there."""
    sa, sb = ({s.name: s.seconds for s in p.merged()} for p in (a, b))
    names = [*sa, *(n for n in sb if n not in sa)]
    stages = " + ".join(
        f"{n} {format_s(sa.get(n, 0.0))} → {format_s(sb.get(n, 0.0))}" for n in names
    )
    return f"process (A → B): {format_s(a.whole_s)} → {format_s(b.whole_s)} = {stages}"
