"""The ledger's records and their edges: a fix is data (its setting and value, why, the
saving) rendered as the runner's flag for a recipe and as Python for a script, with the same
numbers on every edge; ``doctor --report`` says only what is true (the compile cache where it
would save, the rule applied where nothing does) and loads no framework; a difference of one
sample a run is not said as a change; old reports still read."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.test_edges import _long_functions
from tests.test_report import make_report
from toolkit.core.files import ReportError
from toolkit.core.stats import format_s
from toolkit.profiling._fixes import Fix, Setting
from toolkit.profiling._ledger_records import PARTS, Ledger, Reader
from toolkit.profiling._timing import ProcessTime, Stage
from toolkit.report import RunContext, RunReport
from toolkit.report._fixes import fix_json, fix_words
from toolkit.report._ledger import (
    compare_ledgers,
    fixes,
    ledger_json,
    ledger_markdown,
    part_changes,
    whole_run_lines,
)
from toolkit.runner.config import as_flags


def _ledger(**over):
    """A ledger's JSON, as report.json holds it (20 s, all parts zero unless given)."""
    base = {
        "from": "fit call",
        "partial": False,
        "wall_s": 20.0,
        "parts": dict.fromkeys(PARTS, 0.0),
        "callbacks": {},
        "compiles": [],
        "recompiles": 0,
        "epochs": 20,
        "steps": 2000,
        "steps_per_epoch": 100,
        "validations": 0,
        "validation_runs_s": [],
        "backend": "tensorflow",
        "jit_compile": "False",
    }
    base.update(over)
    return base


def _parts(**seconds):
    return {**dict.fromkeys(PARTS, 0.0), **seconds}


def _jax_recipe(compile_s=7.0, **over):
    """A short JAX run of a recipe: compile most of it, as JAX timed it (its events)."""
    compiles = [
        {"function": "train", "first": True, "epoch": 0, "step": 0, "seconds": 4.4,
         "backend_seconds": 4.3, "cause": "first call"},
        {"function": "evaluate", "first": True, "epoch": 0, "step": 0, "seconds": 1.2,
         "backend_seconds": 1.1, "cause": "first call"},
        {"function": "validation", "first": True, "epoch": None, "step": None, "seconds": 0.5,
         "backend_seconds": 0.5, "cause": "compiled in the validation", "outside_steps": True},
    ]  # fmt: skip
    seen = 0.4 + compile_s + 0.5 + 0.1
    return _ledger(  # parts adding up to the wall time, as every ledger's do
        wall_s=max(8.0, seen),
        parts=_parts(
            start_up=0.4,
            compile=compile_s,
            steps=0.5,
            validation=0.1,
            other=round(max(8.0, seen) - seen, 6),
        ),
        compiles=compiles,
        backend="jax",
        jit_compile="True",
        epochs=2,
        steps=88,
        **over,
    )


# ---------------------------------------------------------------------------- a fix, spelled


def test_a_fix_is_data_spelled_as_a_flag_for_a_recipe_and_as_python_for_a_script():
    fix = Fix(
        "validation", "validation", 8.0, 6.4, "validation takes 40% of the run",
        Setting("validation_freq", 5, call="model.fit", runner=True),
    )  # fmt: skip
    flag, python = fix_words(fix, as_flags), fix_words(fix)
    assert flag == "validation takes 40% of the run: --validation_freq=5 saves ~6.40 s"
    assert (
        python == "validation takes 40% of the run: model.fit(..., validation_freq=5) saves ~6.40 s"
    )
    # The same numbers on every edge: the record, the JSON, both spellings.
    for spell in (as_flags, None):
        record = fix_json(fix, spell)
        assert record["saves_s"] == fix.saves_s == 6.4 and record["seconds"] == 8.0
        assert (record["setting"], record["value"]) == ("validation_freq", 5)
        assert format_s(record["saves_s"]) in record["words"]
    # A boolean setting: the flag's own negation; a setting the runner has not: Python alike.
    xla = Setting("jit_compile", False, call="model.compile", runner=True)
    batching = Setting("drop_remainder", True, place="on the training data's batching")
    for setting, flag_words, python_words in (
        (xla, "--nojit_compile", "model.compile(..., jit_compile=False)"),
        (batching, "drop_remainder=True on the training data's batching",
         "drop_remainder=True on the training data's batching"),
    ):  # fmt: skip
        fix = Fix("x", "compile", 1.0, None, "why", setting)
        assert fix_words(fix, as_flags) == f"why: {flag_words}"
        assert fix_words(fix) == f"why: {python_words}"


def test_a_report_spells_its_fixes_for_who_reads_it(tmp_path):
    """A report the runner wrote (it has a context) says the flag, in its JSON, its summary
    and its Markdown; a script's own fit says Python."""
    ledger = _ledger(
        parts=_parts(validation=8.0, steps=9.0, compile=3.0),
        validations=20,
        validation_runs_s=[0.4] * 20,
    )
    recipe = make_report("recipe", ledger=ledger, context=RunContext(backend="tensorflow"))
    script = make_report("script", ledger=ledger)
    assert recipe.ledger.reader == Reader(runner=True) and script.ledger.reader == Reader()
    for report, spelled in ((recipe, "--validation_freq=5"),
                            (script, "model.fit(..., validation_freq=5)")):  # fmt: skip
        words = f"{spelled} saves ~6.40 s"
        (saved,) = [f for f in report.to_dict()["ledger"]["fixes"] if f["item"] == "validation"]
        assert saved["fix"] == spelled and words in saved["words"] and saved["value"] == 5
        assert words in report.summary() and words in ledger_markdown(report.ledger)
        paths = report.write(tmp_path / report.name, plot=False)
        loaded = RunReport.load(paths["json"])
        assert loaded.ledger == report.ledger and words in loaded.summary()


# ---------------------------------------------------------------------------- doctor


def test_doctor_proposes_the_compile_cache_for_a_compile_heavy_recipe_run(tmp_path):
    """A recipe's run on JAX, compile most of it, without the cache: ``--compile_cache``,
    its saving what JAX timed compiling (4.3 + 1.1 + 0.5 s), through the command line; the
    model's build, which compiled 2.5 s before the fit (the process's ``model`` stage), is
    said beside it, not added to the fit's saving."""
    stages = (Stage("launch", 7.0), Stage("model", 3.0, 2.5), Stage("fit call", 8.0))
    report = make_report(
        "jax-recipe", ledger=_jax_recipe(), context=RunContext(backend="jax"),
        args={"compile_cache": False}, process=ProcessTime(stages),
    )  # fmt: skip
    report.write(tmp_path / "a", plot=False)
    out = subprocess.run(
        [sys.executable, "-m", "toolkit", "doctor", "--report", str(tmp_path / "a")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[1].startswith("run ledger (fit call 8.00 s): compile 88%"), lines
    assert lines[2] == (
        "fix: compile takes 88% of the run (7.00 s): --compile_cache saves ~5.90 s on each "
        "later run of this model and settings (what the backend timed compiling here; its "
        "tracing is not cached; the first run writes the cache; the model's build, 2.50 s of "
        "compiling before fit, too)"
    ), lines
    assert report.ledger.reader.build_compile_s == 2.5
    assert lines[-1] == (
        "process: 18.0 s to the report = launch 7.00 s + model 3.00 s (compiling 2.50 s) + "
        "fit call 8.00 s"
    ), lines
    (cache,) = [f for f in fixes(report.ledger) if f.item == "compile cache"]
    assert cache.saves_s == pytest.approx(5.9) and cache.setting.name == "compile_cache"
    assert fixes(report.ledger)[0].item == "compile cache"  # the largest saving first


def test_no_fix_lines_state_the_rule_that_was_applied():
    """Each large part without a fix says why: the compile cache on already, a backend whose
    cache keeps none of this step, a script; validation under its share. No line says a part
    is small that is not."""
    tf = _ledger(  # the run: compile 43 %, steps 42 %, validation 12 %
        wall_s=10.0, parts=_parts(compile=4.3, steps=4.2, validation=1.2, other=0.3),
        validations=20, validation_runs_s=[0.06] * 20,
    )  # fmt: skip
    lines = whole_run_lines(RunReport.from_dict(_with(tf, runner=True)).ledger, as_flags)
    assert lines[1:] == [
        "fix: none for compile (43%): --compile_cache would not shorten it: TensorFlow's "
        "cache keeps only what --jit_compile compiles, and this run's step was not compiled "
        "so (tracing is never cached)",
        "fix: none for steps (42%): the training steps themselves: the ledger has no fix for "
        "them (doctor without --report measures whether the input or the step bounds them; "
        "tune searches the step's settings)",
        "fix: none for validation (12%): validating less often is proposed for a run "
        "validated every epoch, at least twice, where validation takes 15% of the run (this "
        "run: 20 validations in 20 epochs)",
    ], lines
    cached = _jax_recipe(compile_s=1.0)  # under XLA's break-even share: the cache alone
    on = RunReport.from_dict(_with(cached, runner=True, compile_cache=True)).ledger
    assert any(
        # 12.5 %: 13 % as the ledger's line and table round it with the other parts
        line.startswith("fix: none for compile (13%): the run had --compile_cache on already")
        for line in whole_run_lines(on, as_flags)
    )
    off = RunReport.from_dict(_with(cached, runner=True)).ledger
    assert any("--compile_cache saves ~1.00 s" in line for line in whole_run_lines(off, as_flags))
    script = RunReport.from_dict(_with(cached, runner=False)).ledger
    assert any(
        "from a script, toolkit.backend.use_compile_cache() before anything compiles" in line
        for line in whole_run_lines(script, as_flags)
    )
    quiet = whole_run_lines(Ledger.from_dict(_ledger(parts=_parts(steps=0.05), wall_s=0.06)))
    assert quiet[1:] == [
        "fix: none: no part took 5% of the run and 0.1 s (the ledger proposes a fix from there)"
    ]


def test_a_jax_step_a_layer_kept_unjitted_is_fixed_by_moving_the_layer_to_the_data():
    """keras.io's augmentation inside the model: RandomRotation rules XLA out, Keras runs
    JAX's step unjitted, op by op (each op compiled alone, too small for the compile cache).
    The fix names the layer and moves it into the input pipeline, in the summary's words and
    the JSON; the compile cache is not proposed, as its own rule says; a step jitted, or on a
    backend whose step runs without a jit anyway (TensorFlow's graph, PyTorch), gets no such
    fix."""
    unjitted = {**_jax_recipe(compile_s=7.0), "jit_compile": "False",
                "unjitted_by": ["RandomRotation 'random_rotation'"]}  # fmt: skip
    report = RunReport.from_dict(_with(unjitted, runner=True))
    (fix,) = [f for f in fixes(report.ledger) if f.item == "unjitted step"]
    assert fix.part == "steps" and fix.saves_s is None and fix.setting is None
    words = fix_words(fix, as_flags)
    assert words.startswith(
        "RandomRotation 'random_rotation' rules XLA out (supports_jit False), so Keras ran "
        "JAX's step unjitted, op by op: the steps took 6% of the run and compile 88%"
    ), words
    assert "apply such layers to the training data (a tf.data or Grain map)" in words
    lines = whole_run_lines(report.ledger, as_flags)
    # not the compile cache (each op compiled alone is too small for it), nor compile left
    # unfixed: the fix's jitted step compiles once
    assert not any("compile_cache" in line or "none for compile" in line for line in lines)
    loaded = Ledger.read(json.loads(json.dumps(report.ledger.to_dict())))
    assert loaded.unjitted_by == ("RandomRotation 'random_rotation'",)
    for other in (
        {**unjitted, "jit_compile": "True"},
        {**unjitted, "backend": "tensorflow"},
        {**unjitted, "backend": "torch"},
    ):
        ledger = RunReport.from_dict(_with(other, runner=True)).ledger
        assert not [f for f in fixes(ledger) if f.item == "unjitted step"], other


def _with(ledger, runner: bool, compile_cache: bool = False):
    """A saved report's JSON holding `ledger`: the runner's (a context) or a script's."""
    context = RunContext(backend=ledger["backend"]) if runner else None
    report = make_report("r", context=context, args={"compile_cache": compile_cache})
    return {**report.to_dict(), "ledger": ledger}


def test_doctor_reads_a_real_report_without_loading_a_framework(tmp_path, make_model):
    """``doctor --report`` on a report a real fit wrote: no TensorFlow, JAX, PyTorch or Keras
    is imported to read a JSON file."""
    from toolkit.runner.session import profile

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 8)).astype("float32"), rng.integers(0, 3, 64).astype("int32")
    with profile("real", report_dir=tmp_path, batch_size=8) as p:
        p.fit(make_model(), x, y, batch_size=8, epochs=2, verbose=0, validation_split=0.25)
    code = (
        "import sys\n"
        "from toolkit.cli import main\n"
        f"status = main(['doctor', '--report', {p.run_dir!r}])\n"
        "loaded = [m for m in ('tensorflow', 'jax', 'torch', 'keras') if m in sys.modules]\n"
        "print('LOADED', status, loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "run ledger (fit call " in out.stdout
    assert out.stdout.splitlines()[-1] == "LOADED 0 []", out.stdout[-2000:]


# ---------------------------------------------------------------------------- two runs


def test_a_difference_of_one_sample_a_run_is_not_said_as_a_change():
    """The compile of two runs of one model, 44 % apart: one sample each, not told from
    noise; validation over 20 runs each, its spread known: a change where it is beyond it."""
    a = _ledger(
        parts=_parts(compile=0.9, validation=4.0, steps=15.1),
        part_samples={**dict.fromkeys(PARTS, 1), "validation": 20},
        part_spread_s={**dict.fromkeys(PARTS), "validation": 0.01},
    )
    b = {**a, "wall_s": 17.6, "parts": _parts(compile=0.5, validation=2.0, steps=15.1)}
    line = compare_ledgers(Ledger.from_dict(a), Ledger.from_dict(b))
    assert line == (
        "ledger, B vs A: validation −2.00 s (−50%); not told from noise (one sample a run): "
        "compile −0.400 s (−44%), fit −2.40 s (−12%)"
    ), line
    changes = {c.label: c for c in part_changes(Ledger.from_dict(a), Ledger.from_dict(b))}
    assert changes["validation"].beyond_noise and not changes["compile"].judged
    noisy = {**b, "part_spread_s": {**dict.fromkeys(PARTS), "validation": 1.0}}
    assert "within noise: validation −2.00 s" in compare_ledgers(
        Ledger.from_dict(a), Ledger.from_dict(noisy)
    )


def test_the_ledger_gives_each_part_and_compile_its_samples(make_model):
    """A real fit: the steps and the validation count their samples and give their spread;
    each compile, the executions its median came from."""
    from toolkit.runner.session import profile

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(96, 8)).astype("float32"), rng.integers(0, 3, 96).astype("int32")
    with profile("samples", batch_size=8) as p:
        p.fit(make_model(), x, y, batch_size=8, epochs=3, verbose=0, validation_split=0.25)
    ledger = p.report.ledger
    assert ledger.part("steps").samples == 3 * 9 and ledger.part("steps").spread_s is not None
    assert ledger.part("validation").samples == 3
    assert ledger.part("compile").samples == len(ledger.compiles) and ledger.compiles
    assert ledger.part("start_up").samples == 1 and ledger.part("start_up").spread_s is None
    first = next(c for c in ledger.compiles if c.function == "train" and c.first)
    assert first.samples > 0


# ---------------------------------------------------------------------------- the JSON edge


def test_ledger_from_dict_names_the_first_field_of_the_wrong_kind():
    """One reader checks what it reads, down to the compiles, callbacks and memory: a value
    of the wrong kind is one ReportError naming its field, never a figure read as None."""
    for over, field in (
        ({"compiles": [{"function": "train", "seconds": "4"}]}, "ledger.compiles[0].seconds"),
        ({"callbacks": {"Mine": {"seconds": 1.0, "calls": 2.5}}}, "ledger.callbacks.Mine.calls"),
        ({"partial": "no"}, "ledger.partial"),
        ({"unseen": ["exit", 3]}, "ledger.unseen[1]"),
        ({"memory": {"every_s": 0.05, "parts": {"steps": []}}}, "ledger.memory.parts.steps"),
    ):
        with pytest.raises(ReportError, match=rf"^field {re.escape(field)} is "):
            Ledger.from_dict(_ledger(**over))


def test_an_older_report_s_ledger_still_reads_and_round_trips():
    """A ledger written before the records (no samples, fixes saved as words only) reads; its
    fixes are read again from its figures; to_dict and from_dict round-trip."""
    old = _ledger(
        parts=_parts(validation=8.0, steps=12.0),
        validations=20,
        validation_runs_s=[0.4] * 20,
        fixes=[{"item": "validation", "seconds": 8.0, "saves_s": 6.4, "fix": "validation_freq=5",
                "words": "validation takes 40% of the run: validation_freq=5 saves ~6.40 s"}],
    )  # fmt: skip
    ledger = Ledger.from_dict(old)
    assert ledger.part("steps").samples == 0 and ledger.part("steps").spread_s is None
    assert ledger.validations == 20 and ledger.validation_calls == (0,) * 20
    assert Ledger.from_dict(json.loads(json.dumps(ledger.to_dict()))) == ledger
    assert ledger.wall_s == 20.0 and ledger.part_seconds["steps"] == 12.0
    (fix,) = ledger_json(ledger)["fixes"]
    assert fix["saves_s"] == 6.4 and fix["value"] == 5
    report = RunReport.from_dict({**make_report().to_dict(), "ledger": old})
    assert report.ledger == ledger  # a script's: no context


def test_the_ledger_s_functions_read_as_named_phases():
    """No function of the ledger's (measuring, its records, its fixes, its reading) is longer
    than 60 lines of code (``tests/test_edges.py``'s rule)."""
    modules = ("toolkit.profiling._ledger", "toolkit.profiling._ledger_records",
               "toolkit.profiling._fixes", "toolkit.report._fixes",
               "toolkit.report._ledger")  # fmt: skip
    long = [f for module in modules for f in _long_functions(module)]
    assert not long, long
