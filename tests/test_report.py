"""RunReport: JSON schema round trip, atomic writes, Markdown/PNG views, compare and its CLI.
Reports are built from injected step times, except at the end: reports someone else wrote
(a field that is wrong, control characters, a FIFO in a report's place, a number past a float,
compare's like with like), read by the verbs in their own processes from edited copies of one
real ``--smoke`` run's report."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_faults import _last, _report, _run
from toolkit.core.files import atomic_write, parse_json, read_json
from toolkit.core.machine import capture_environment
from toolkit.core.stats import summarize_calls
from toolkit.profiling._compute import Compute
from toolkit.profiling._ledger_records import Ledger
from toolkit.profiling._timing import Epoch, FitCall, ProcessTime, Stage
from toolkit.report import ReportError, RunReport, compare
from toolkit.report import run_report as report_mod
from toolkit.report._cluster import ClusterView
from toolkit.report._diagnosis import DiagnosisSection

from .helpers import run_python


def make_report(name="r", step_s=0.002, jitter_s=0.0001, n=400, batch_size=32, seed=0, **kw):
    rng = np.random.default_rng(seed)
    durations = rng.normal(step_s, jitter_s, size=n).clip(step_s / 10)
    calls = [[0.5, 1, 0, "first"], *([[step_s, 1, 0, "warmup"]] * 3)]
    calls += [[float(d), 1, i * 2 // n, "timed"] for i, d in enumerate(durations)]
    for key, read in (("compute", Compute.from_dict), ("fit_call", FitCall.from_dict),
                      ("cluster", ClusterView.from_dict), ("ledger", Ledger.read)):  # fmt: skip
        if isinstance(kw.get(key), dict):  # given as report.json has it
            kw[key] = read(kw[key])
    return RunReport(
        name=name,
        steps=summarize_calls(calls, batch_size),
        timeline=calls,
        fit_seconds=float(sum(c[0] for c in calls)),
        epochs=[Epoch(0, 1.0, 200, 0.9, {"loss": 1}), Epoch(1, 1.0, 204, 0.9, {"loss": 0.5})],
        metrics={"loss": 0.5, "accuracy": 0.9},
        environment=capture_environment(),
        **kw,
    )


def test_json_round_trip(tmp_path):
    from toolkit.report._tensorboard import TensorBoardRuns

    board = TensorBoardRuns(str(tmp_path), ("train", "validation"), "tensorboard --logdir x")
    r = make_report(args={"epochs": 2}, extra={"flops_per_step": 1.5e6}, tensorboard=board)
    paths = r.write(tmp_path)
    loaded = RunReport.load(paths["json"])
    assert loaded == r and loaded.tensorboard == board
    assert RunReport.load(tmp_path) == r  # a run directory works too
    data = json.loads(Path(paths["json"]).read_text())
    assert data["schema"] == report_mod.SCHEMA and data["schema_version"] == 2
    for key in ("environment", "steps", "epochs", "metrics", "timeline", "status", "args"):
        assert key in data
    for key in ("python", "platform", "cpu_model", "cpu_count", "toolkit_version"):
        assert data["environment"][key]


def test_environment_without_tensorflow_loaded_skips_tf_facts():
    code = (
        "import sys; import toolkit.report; "
        "from toolkit.core.machine import capture_environment; "
        "env = capture_environment(); "
        "assert 'tensorflow' not in sys.modules, 'report imported TensorFlow'; "
        "assert 'tensorflow' not in env and env['python']; print('ok')"
    )
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


KERAS_PAIR = ("keras-nightly", "keras")  # the two distributions of the one `keras` package


def test_keras_release_is_read_from_the_distributions_and_the_loaded_one_decides(tmp_path):
    """Both a release and a nightly installed (the one not installed here written beside it,
    as a real dist-info): before Keras loads, the nightly; once it loads, the one whose
    version it reports. Keras is imported by nobody but the test."""
    from importlib import metadata

    real = next(d for d in KERAS_PAIR if _installed(metadata, d))
    other = next(d for d in KERAS_PAIR if d != real)
    version = "3.16.0.dev1" if other == "keras-nightly" else "3.15.0"
    info = tmp_path / f"{other.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {other}\nVersion: {version}\n")
    code = (
        "import sys; from toolkit.core import compat; before = compat.keras_release(); "
        "assert 'keras' not in sys.modules; import keras; after = compat.keras_release(); "
        "print(before.distribution, before.nightly, after.distribution, after.version, "
        "keras.__version__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(PYTHONPATH=str(tmp_path), KERAS_BACKEND="jax")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    before, nightly, after, after_version, loaded = out.stdout.split()
    assert (before, nightly) == ("keras-nightly", "True")
    assert (after, after_version) == (real, loaded)


def _installed(metadata, dist):
    try:
        return bool(metadata.version(dist))
    except metadata.PackageNotFoundError:
        return False


def test_compare_notes_a_keras_version_or_nightly_difference_from_report_files(tmp_path):
    """Two report files from another Keras, a nightly: compare says so in one note, and show
    names the nightly; two from the same Keras: no note. A report from before the flag was
    recorded is a nightly by its version."""
    release = {"keras": "3.15.1", "keras_nightly": False, "keras_distribution": "keras"}
    nightly = {
        "keras": "3.16.0.dev2026102704",
        "keras_nightly": True,
        "keras_distribution": "keras-nightly",
    }
    for name, keras, seed in (("a", release, 0), ("b", nightly, 1), ("c", release, 2)):
        r = make_report("mlp", seed=seed)
        r.environment = {**r.environment, **keras}
        r.write(tmp_path / name, plot=False)
    run = [sys.executable, "-m", "toolkit"]

    def said(*args):
        out = subprocess.run([*run, *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    note = "note: keras differs: 3.15.1 vs 3.16.0.dev2026102704 (nightly)"
    assert note in said("compare", str(tmp_path / "a"), str(tmp_path / "b")).splitlines()
    assert "keras differs" not in said("compare", str(tmp_path / "a"), str(tmp_path / "c"))
    assert "Keras 3.16.0.dev2026102704 (nightly)" in said("show", str(tmp_path / "b"))
    assert "Keras" not in said("show", str(tmp_path / "a"))  # a release: nothing to flag
    markdown = said("show", "--markdown", str(tmp_path / "b"))
    assert "· Keras 3.16.0.dev2026102704 (nightly)" in markdown
    assert "| keras_nightly | true |" in markdown
    a, b = (RunReport.load(tmp_path / n) for n in "ab")
    b.environment = {**b.environment, "keras": "3.15.1"}  # the same version, a nightly build
    assert compare(a, b).notes == ("keras differs: 3.15.1 vs 3.15.1 (nightly)",)
    old = RunReport.load(tmp_path / "b")
    del old.environment["keras_nightly"], old.environment["keras_distribution"]
    assert not compare(old, RunReport.load(tmp_path / "b")).notes


def test_markdown_and_png(tmp_path):
    r = make_report()
    paths = r.write(tmp_path)
    md = Path(paths["markdown"]).read_text()
    for text in (
        "# Run report: r",
        "| p50 |",
        "| jitter (1.4826·MAD) |",
        "examples/s",
        "## Epochs",
        "## Environment",
        "![step times](steps.png)",
    ):
        assert text in md
    assert Path(paths["png"]).read_bytes()[:4] == b"\x89PNG"
    # It opens with the run in one line, and leaves the machine's name to report.json.
    assert md.splitlines()[2].startswith("**r complete: p50 ") and " examples/s" in md[:200]
    assert "hostname" not in md and "hostname" in r.to_json()


def test_plot_failure_never_loses_the_json(tmp_path, monkeypatch):
    r = make_report()

    def broken(self):
        raise RuntimeError("no display")

    monkeypatch.setattr(RunReport, "plot_png", broken)
    paths = r.write(tmp_path)
    assert "png" not in paths
    assert RunReport.load(paths["json"]) == r
    assert "no plot: RuntimeError: no display" in Path(paths["markdown"]).read_text()


def test_atomic_write_keeps_the_old_file_when_a_write_fails(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    atomic_write(target, "old")

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["report.json"]  # no temporary file left behind


def test_non_finite_values_become_null(tmp_path):
    r = make_report()
    r.metrics = {"loss": float("nan")}
    data = json.loads(r.to_json())
    assert data["metrics"]["loss"] is None


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "no report at"),
        ("{not json", "cannot read report"),
        (json.dumps({"schema": "other"}), r"report.json': not a run report: schema is 'other'"),
        ("[1, 2]", "is not a run report: it holds a JSON list"),
        (json.dumps({"schema": report_mod.SCHEMA, "schema_version": 99}), "newer than"),
    ],
)
def test_load_errors_are_clear(tmp_path, content, match):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ReportError, match=match):
        RunReport.load(path)


def test_bad_status():
    with pytest.raises(ValueError, match="status"):
        make_report(status="done")


# ---------------------------------------------------------------------------- compare


def test_compare_same_distribution_is_within_noise():
    a, b = make_report("a", seed=1), make_report("b", seed=2)
    c = compare(a, b)
    assert c.verdict == "within noise"
    assert c.basis == "step p50"
    assert "within noise" in c.render()


def test_compare_detects_a_real_speedup_and_slowdown():
    base = make_report("base", step_s=0.002)
    fast = make_report("fast", step_s=0.0016, seed=3)
    c = compare(base, fast)
    assert c.verdict == "faster" and c.ratio == pytest.approx(1.25, rel=0.02)
    assert f"B is faster: {c.ratio:.2f}× A's speed" in c.render()
    assert compare(fast, base).verdict == "slower"


def test_compare_sets_the_two_processes_side_by_side_stage_by_stage():
    """The model's build cut by a warm compile cache shows where the fit alone would not;
    a stage one run lacks (a user's own) is 0 s there."""
    a = ProcessTime((Stage("launch", 8.4), Stage("model", 9.3, 9.2), Stage("fit call", 12.0)))
    b = ProcessTime((Stage("launch", 8.4), Stage("model", 0.8, 0.7), Stage("fit call", 4.6),
                     Stage("mine", 0.5)))  # fmt: skip
    c = compare(make_report("a", process=a), make_report("b", process=b))
    assert (
        "process (A → B): 29.7 s → 14.3 s = launch 8.40 s → 8.40 s + model 9.30 s → 0.800 s "
        "+ fit call 12.0 s → 4.60 s + mine 0.000 s → 0.500 s"
    ) in c.render(200)
    assert c.to_dict()["process"]["b"]["stages"][1] == {
        "name": "model", "seconds": 0.8, "compile_s": 0.7
    }  # fmt: skip
    assert "process (A → B)" not in compare(make_report("a", process=a), make_report("b")).render()


def test_compare_noise_band_grows_with_jitter_from_a_floor_of_two_runs_drift():
    # A 15 % difference: clear with tight steps, within noise with few, noisy samples.
    tight = compare(
        make_report(step_s=0.002, jitter_s=2e-5), make_report(step_s=0.0017, jitter_s=2e-5, seed=4)
    )
    noisy = compare(
        make_report(step_s=0.002, jitter_s=8e-4, n=20),
        make_report(step_s=0.0017, jitter_s=8e-4, n=20, seed=4),
    )
    assert tight.verdict == "faster" and tight.noise == pytest.approx(0.10)
    assert noisy.verdict == "within noise" and noisy.noise > tight.noise
    # 3 %, as two runs of one command differ (read 0.97×): no change claimed, however tight
    same = compare(
        make_report(step_s=0.002, jitter_s=2e-5), make_report(step_s=0.00194, jitter_s=2e-5, seed=4)
    )
    assert same.verdict == "within noise" and "±10.0% noise band" in same.render()


def test_compare_per_example_when_batch_sizes_differ():
    a = make_report("bs32", step_s=0.002, batch_size=32)
    b = make_report("bs64", step_s=0.003, batch_size=64, seed=5)  # slower steps, more examples
    c = compare(a, b)
    assert c.verdict == "faster" and c.ratio == pytest.approx(4 / 3, rel=0.02)
    assert c.basis == "step p50 per example" and c.rows[0].label == c.basis


def _verdict_row(c):
    """The row the verdict names, and the B/A the verdict line prints for it."""
    row = next(r for r in c.rows if r.label == c.basis)
    said = re.search(rf"{re.escape(c.basis)}: B/A ([\d.]+)×", c.verdict_line())
    return row, float(said.group(1))


@pytest.mark.parametrize(
    ("a_kw", "b_kw"),
    [
        ({}, {"seed": 2}),  # within noise
        ({"step_s": 0.002}, {"step_s": 0.0016, "seed": 3}),  # faster
        ({"step_s": 0.0016}, {"step_s": 0.002, "seed": 3}),  # slower
        ({"batch_size": 32}, {"step_s": 0.003, "batch_size": 64, "seed": 5}),  # per example
        ({"jitter_s": 8e-4, "n": 20}, {"jitter_s": 8e-4, "n": 20, "seed": 4}),  # noisy
    ],
)
def test_compare_verdict_is_the_tables_statistic(a_kw, b_kw):
    """The verdict is computed on a row of the table and says which: the B/A it prints is
    that row's B over its A (to the printed digits), the table marks the row, and the JSON's
    figure for it has the same change."""
    c = compare(make_report("a", **a_kw), make_report("b", **b_kw))
    row, said = _verdict_row(c)
    assert said == pytest.approx(row.b / row.a, abs=5e-4)
    assert 1 / c.ratio == pytest.approx(row.b / row.a)
    assert f"{c.basis} (verdict)" in c.render()
    shown = f"{row.change() * 100:+.1f}%"
    assert any(shown in line and "(verdict)" in line for line in c.render().splitlines())
    figure = next(f for f in c.to_dict()["figures"] if f["figure"] == c.basis)
    assert figure["change"] == pytest.approx(row.change())


def test_compare_says_when_the_mean_and_the_median_part():
    """A run with a few very slow steps: its mean (examples/s) moves, its median does not.
    The verdict stays the median's and a note says why the throughput row moved."""
    a = make_report("a", step_s=0.002, n=200)
    b = make_report("b", step_s=0.002, n=200, seed=7)
    b.steps = dataclasses.replace(b.steps, mean_s=b.steps.mean_s * 1.4)
    b.steps = dataclasses.replace(b.steps, examples_per_sec=b.steps.batch_size / b.steps.mean_s)
    c = compare(a, b)
    assert c.verdict == "within noise", c.render()
    assert any("the verdict is the median's" in n for n in c.notes), c.notes


def test_compare_notes_environment_differences_and_partial_runs():
    a = make_report("a")
    b = make_report("b", status="partial", error="KeyboardInterrupt")
    b.environment = {**b.environment, "tensorflow": "9.9.9"}
    a.environment = {**a.environment, "tensorflow": "2.21.0"}
    text = compare(a, b).render()
    assert "tensorflow differs" in text and "B is a partial run (KeyboardInterrupt)" in text


def test_compare_without_timed_steps_is_unknown():
    empty = RunReport(name="e", steps=summarize_calls([[1.0, 1, 0, "first"]]))
    assert compare(empty, make_report()).verdict == "unknown"


def test_cli_compare_and_show(tmp_path):
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    make_report("a", step_s=0.002).write(a_dir, plot=False)
    make_report("b", step_s=0.001, seed=9).write(b_dir, plot=False)
    run = [sys.executable, "-m", "toolkit"]
    out = subprocess.run(
        [*run, "compare", str(a_dir), str(b_dir / "report.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "verdict: B is faster" in out.stdout and "step p50" in out.stdout
    out = subprocess.run([*run, "show", str(a_dir)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "== a: complete" in out.stdout
    out = subprocess.run(
        [*run, "compare", str(a_dir), str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "no report at" in out.stderr


def test_cli_compare_fails_a_regression_on_request_and_both_verbs_write_json(tmp_path):
    """``--fail_on_slower``: status 1 when B is slower beyond the noise band, 0 when it is
    faster or within it; ``--json`` on compare and show is plain data for a CI script."""
    dirs = {}
    for name, step_s, seed in (("a", 0.002, 0), ("slow", 0.003, 9), ("same", 0.002, 5)):
        dirs[name] = tmp_path / name
        make_report(name, step_s=step_s, seed=seed).write(dirs[name], plot=False)

    def cli(*argv):
        return subprocess.run(
            [sys.executable, "-m", "toolkit", *argv], capture_output=True, text=True, timeout=60
        )

    out = cli("compare", str(dirs["a"]), str(dirs["slow"]), "--fail_on_slower")
    assert out.returncode == 1, out.stderr
    assert "verdict: B is slower" in out.stdout
    assert out.stderr.strip().count("\n") == 0 and "--fail_on_slower" in out.stderr
    assert cli("compare", str(dirs["slow"]), str(dirs["a"]), "--fail-on-slower").returncode == 0
    out = cli("compare", str(dirs["a"]), str(dirs["same"]), "--fail_on_slower", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["verdict"] == "within noise" and data["a"] == "a" and data["b"] == "same"
    assert 0.98 < data["speed_ratio"] < 1.02 and data["noise_band"] > 0
    p50 = next(f for f in data["figures"] if f["figure"].startswith("step p50"))
    assert p50["unit"] and abs(p50["change"]) < 0.02
    assert cli("compare", str(dirs["a"]), str(dirs["slow"])).returncode == 0  # not asked
    out = cli("show", str(dirs["slow"]), "--json")
    assert out.returncode == 0 and RunReport.from_dict(json.loads(out.stdout)).name == "slow"


def test_compute_section_adds_achieved_flops_and_mfu_from_the_median_step(tmp_path):
    from toolkit.profiling.step_timer import StepTimer

    class Clock:
        t = 0.0

        def __call__(self):
            Clock.t += 0.01
            return Clock.t

    timer = StepTimer(warmup_steps=0, batch_size=8, clock=Clock())
    with timer:
        for _ in range(20):
            timer.step()
    compute = Compute(flops_per_step=2e9, peak_flops_per_s=4e11, peak_dtype="float32")
    r = RunReport.from_callbacks("c", timer, compute=compute)
    assert r.compute.achieved_flops_per_s == pytest.approx(2e11)
    assert r.compute.mfu == pytest.approx(0.5)
    assert "MFU 50.0% of the measured float32 matmul peak 400 GFLOP/s" in r.summary()
    paths = r.write(tmp_path, plot=False)
    assert "| MFU, of the measured peak | 50.0% |" in Path(paths["markdown"]).read_text()
    assert RunReport.load(paths["json"]) == r
    # On a GPU the datasheet lists, its dense figure beside the measured one (MFU as
    # published figures give it); elsewhere, no datasheet words at all.
    sheet = dataclasses.replace(
        compute, datasheet_peak_flops_per_s=4e12, datasheet_peak="NVIDIA H100 SXM, dense tf32"
    )
    gpu = RunReport.from_callbacks("g", timer, compute=sheet)
    assert gpu.compute.datasheet_mfu == pytest.approx(0.05)
    assert (
        "MFU 50.0% of the measured float32 matmul peak 400 GFLOP/s; 5.0% of the datasheet peak "
        "4 TFLOP/s (NVIDIA H100 SXM, dense tf32)"
    ) in gpu.summary()
    markdown = gpu.to_markdown()
    assert "| datasheet peak (NVIDIA H100 SXM, dense tf32) | 4 TFLOP/s |" in markdown
    assert "| MFU, of the datasheet peak | 5.0% |" in markdown
    assert "datasheet peak" not in r.summary() + r.to_markdown()
    uncounted = RunReport.from_callbacks(
        "u", timer, compute=Compute(flops_per_step=None, note="a while loop")
    )
    assert "compute: FLOPs not counted (a while loop)" in uncounted.summary()


def test_reports_written_before_the_compute_section_still_load(tmp_path):
    data = make_report().to_dict()
    del data["compute"]
    (tmp_path / "report.json").write_text(json.dumps(data))
    assert RunReport.load(tmp_path).compute is None


def _as_schema_1(report: RunReport) -> dict:
    """`report` as the toolkit wrote it before schema 2: context, diagnosis and tune in extra."""
    data = json.loads(report.to_json())
    extra = dict(data.pop("context") or {})
    extra.update(diagnosis=data.pop("diagnosis"), tune=data.pop("tune"), **data["extra"])
    data["extra"], data["schema_version"] = extra, 1
    return data


def test_schema_1_reports_load_into_the_typed_context_and_compare(tmp_path):
    from toolkit.devices import DeviceInfo, Finding
    from toolkit.distribute import Cluster
    from toolkit.report import RunContext
    from toolkit.report.context import Resume, Strategy

    context = RunContext(
        device=DeviceInfo("cpu", "/physical_device:CPU:0", 0, "Some CPU", 1024.0),
        precision="mixed_bfloat16",
        strategy=Strategy("mirrored", 1, 32, 32),
        cluster=Cluster("worker", 1, ("h:1", "h:2")),
        preflight=(Finding("info", "cpu-xla", "jit_compile on the CPU", "measure"),),
        dataset="digits (1437 train)",
        resume=Resume("/backup", True, 40, 2, 80),
    )
    diagnosis = DiagnosisSection(10.0, 50.0, 9.0, "input-bound", advice=("cache",),
                                 pipeline="range → batch(32)")  # fmt: skip
    new = make_report(name="v2", context=context, diagnosis=diagnosis, extra={"note": "kept"})
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(_as_schema_1(new)))
    old = RunReport.load(path)
    assert old.context == context and old.diagnosis == diagnosis
    assert old.extra == {"note": "kept"} and old.schema_version == 2
    summary = old.summary()
    for text in ("device: cpu:0 Some CPU", "precision mixed_bfloat16", "worker 1 of 2",
                 "resumed from epoch 2", "diagnosis: input-bound", "data: digits"):  # fmt: skip
        assert text in summary, summary
    assert "## Diagnosis" in old.to_markdown() and "range → batch(32)" in old.to_markdown()
    result = compare(old, new)
    assert result.verdict == "within noise" and not any("differs" in n for n in result.notes)
    new.write(tmp_path / "v2")
    out = subprocess.run(
        [sys.executable, "-m", "toolkit", "compare", str(path), str(tmp_path / "v2")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "verdict: within noise" in out.stdout, out.stderr


def test_context_round_trips_through_json(tmp_path):
    from toolkit.devices import DeviceInfo
    from toolkit.report import RunContext

    context = RunContext(
        device=DeviceInfo("cuda", "/physical_device:GPU:0", 0, "H100", None, (9, 0)),
        backend="tensorflow",
    )
    r = make_report(context=context)
    r.write(tmp_path)
    loaded = RunReport.load(tmp_path)
    assert loaded.context == context and loaded.context.device.compute_capability == (9, 0)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["context"]["cluster"]["is_chief"] is True and data["schema_version"] == 2


def test_report_files_follow_the_umask(tmp_path):
    from toolkit.core.files import atomic_write

    old = os.umask(0o022)
    try:
        path = atomic_write(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o644  # not mkstemp's 0600


def test_compare_says_when_the_two_runs_are_different_models():
    from toolkit.report import compare

    a = make_report("mlp", compute={"flops_per_step": 4_407_040})
    b = make_report("cnn", compute={"flops_per_step": 4_370_000_000})
    notes = " | ".join(compare(a, b).notes)
    assert "different runs: A is 'mlp', B is 'cnn'" in notes
    assert "the models differ: 4,407,040 vs 4,370,000,000 FLOPs per step" in notes
    assert not compare(a, make_report("mlp", seed=1, compute={"flops_per_step": 4_407_040})).notes


FIT_CALL = {"from": "fit call", "whole_s": 9.0, "start_up_s": 1.0, "steps_s": 2.0, "exit_s": 6.0}


def test_the_fit_call_round_trips_and_shows_its_parts(tmp_path):
    r = make_report(fit_call=dict(FIT_CALL))
    paths = r.write(tmp_path, plot=False)
    loaded = RunReport.load(paths["json"])
    assert loaded == r and loaded.fit_call.to_dict() == FIT_CALL
    line = "fit call: 9.00 s = start-up 1.00 s + steps 2.00 s + exit 6.00 s"  # format_s
    assert line in loaded.summary() and line in Path(paths["markdown"]).read_text()
    # An exit that is most of the call names its likely cause; a short one does not.
    assert "iterator's teardown" in loaded.summary()
    quick = {**FIT_CALL, "whole_s": 3.01, "exit_s": 0.01}
    assert "teardown" not in make_report(fit_call=quick).summary()


def test_a_report_written_before_the_fit_call_was_measured_still_reads(tmp_path):
    data = make_report(fit_call=dict(FIT_CALL)).to_dict()
    del data["fit_call"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = RunReport.load(path)
    assert old.fit_call is None
    assert "fit call" not in old.summary() and "fit call" not in old.to_markdown()
    assert compare(old, make_report(fit_call=dict(FIT_CALL))).verdict
    # A value this version cannot read is left out, not a failure.
    data["fit_call"] = "9 s"
    path.write_text(json.dumps(data))
    assert RunReport.load(path).fit_call is None


def test_a_fit_call_timed_from_train_begin_says_its_exit_was_not_timed():
    parts = {"from": "train begin", "whole_s": 3.0, "start_up_s": 0.5, "steps_s": 2.5}
    line = "fit from train begin: 3.00 s = start-up 0.500 s + steps 2.50 s (exit not timed"
    assert line in make_report(fit_call={**parts, "exit_s": None}).summary()


def test_compare_says_only_real_differences_and_which_settings_differ():
    from toolkit.report import compare

    a = make_report("mlp", compute={"flops_per_step": 4_407_040}, args={"fused_steps": 1})
    b = make_report(
        "mlp", seed=1, compute={"flops_per_step": 4_407_040},
        args={"fused_steps": 32, "report_dir": "elsewhere"},
    )  # fmt: skip
    # Device records that differ only in what a note would not show (a memory figure).
    a.environment = {**a.environment, "devices": [{"name": "cpu:0", "memory_mb": 24105.5625}]}
    b.environment = {**b.environment, "devices": [{"name": "cpu:0", "memory_mb": 24105.5}]}
    c = compare(a, b)
    assert not c.notes, c.notes  # the same values, however they were built: no note
    assert c.settings == (("fused_steps", 1, 32),)  # where the report went is no setting
    assert "settings that differ (A → B): --fused_steps 1 → 32" in c.render()
    # A first call of 32 fused steps is counted per step, like against like.
    b.steps = dataclasses.replace(b.steps, first_step_s=3.2, first_step_steps=32)
    row = dict((r[0], r[1:3]) for r in compare(a, b).rows)["first call/step"]
    assert row == (pytest.approx(0.5), pytest.approx(0.1))
    # Two workloads: said plainly, and no speed verdict however far apart they are.
    cnn = make_report("cnn", step_s=0.05, compute={"flops_per_step": 4_370_000_000})
    other = compare(a, cnn)
    assert other.verdict == "different workloads" and other.ratio is None
    assert "verdict: none: A and B are different workloads" in other.render()
    assert "noise band" not in other.render()


def test_a_gate_does_not_pass_on_two_workloads_it_cannot_compare(tmp_path, capsys):
    from toolkit import cli

    a = make_report("mlp", compute={"flops_per_step": 4_407_040})
    b = make_report("cnn", step_s=0.05, compute={"flops_per_step": 4_370_000_000})
    a.write(tmp_path / "a", plot=False)
    b.write(tmp_path / "b", plot=False)
    pair = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert cli.main(["compare", *pair]) == 0  # said plainly, no verdict: not a failure
    assert cli.main(["compare", "--fail_on_slower", *pair]) == 1  # but no gate passes on it
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith("compare: cannot tell whether B is slower (A and B are different")


def _drawn(monkeypatch):
    """The matplotlib figures saved while the block runs (to read their legends and axes)."""
    from matplotlib.figure import Figure

    figures, save = [], Figure.savefig

    def keep(self, *args, **kwargs):
        figures.append(self)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def test_steps_png_explains_itself(monkeypatch):
    """Values on the percentile lines, the epochs marked, and a run of several steps per call
    labelled by call, not by step."""
    figures = _drawn(monkeypatch)
    make_report().plot_png()
    timeline, hist = figures[-1].axes
    said = [t.get_text() for t in hist.get_legend().get_texts()]
    assert [s.split()[0] for s in said] == ["p50", "p90", "p99"] and all(" ms" in s for s in said)
    assert "epoch ends (2 epochs)" in [t.get_text() for t in timeline.get_legend().get_texts()]
    assert hist.get_ylabel() == "timed steps"
    calls = [[0.5, 8, 0, "first"], *[[0.008, 8, i // 10, "timed"] for i in range(20)]]
    fused = RunReport(name="f", steps=summarize_calls(calls, 32), timeline=calls)
    fused.plot_png()
    timeline, hist = figures[-1].axes
    assert hist.get_ylabel() == "timed calls" and "(160 steps)" in hist.get_title()
    assert "a dot: one call of up to 8 steps" in timeline.get_ylabel()


def test_the_report_records_our_flags_not_the_frameworks_own():
    from absl import flags

    from toolkit.runner.flags import flags_for_report

    values = flags.FlagValues()
    flags.DEFINE_integer("epochs", 3, "ours", flag_values=values, module_name="recipes.mlp")
    flags.DEFINE_string(
        "tt_check_filter", None, "TensorFlow's", flag_values=values,
        module_name="tensorflow.python.tpu.tensor_tracer_flags",
    )  # fmt: skip
    flags.DEFINE_bool("alsologtostderr", False, "absl's", flag_values=values, module_name="absl.x")
    values(["prog"])
    assert flags_for_report(values) == {"epochs": 3}


def test_a_noise_band_too_wide_to_bound_a_change_gives_no_verdict_and_no_slower_gate(
    tmp_path, capsys
):
    """A ±100% band or wider bounds no ratio: "too noisy to tell", never "beyond the band",
    with the remedy; --fail_on_slower says it cannot tell rather than that B is slower."""
    from toolkit import cli
    from toolkit.report import compare

    a = make_report("mlp", step_s=0.002, jitter_s=0.0005, n=4)
    b = make_report("mlp", step_s=0.1, jitter_s=0.2, n=4, seed=3)  # far slower, far noisier
    c = compare(a, b)
    assert c.noise >= 1.0 and c.verdict == "too noisy"
    said = c.render()
    assert "beyond" not in said and "verdict: none: the runs are too noisy to tell" in said
    assert "time more steps" in said
    # The same slowdown measured steadily is a verdict again: the rule is the band's width.
    steady = compare(a, make_report("mlp", step_s=0.1, jitter_s=0.0005, n=4, seed=3))
    assert steady.noise < 1.0 and steady.verdict == "slower"
    # A wide band that B's slowdown still passes: "slower" stands (it can only err the other
    # way); inside the band there is no verdict.
    jumpy = make_report("mlp", step_s=0.002, jitter_s=0.006, n=4)
    wide = compare(jumpy, make_report("mlp", step_s=0.1, jitter_s=0.0005, n=4, seed=3))
    assert wide.noise >= 1.0 and wide.verdict == "slower", (wide.noise, wide.ratio)
    near = compare(jumpy, make_report("mlp", step_s=0.003, jitter_s=0.0005, n=4, seed=3))
    assert near.verdict == "too noisy"
    a.write(tmp_path / "a", plot=False)
    b.write(tmp_path / "b", plot=False)
    pair = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert cli.main(["compare", *pair]) == 0
    assert cli.main(["compare", "--fail_on_slower", *pair]) == 1  # no gate passes on it
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("compare: cannot tell whether B is slower (the runs are too noisy")
    assert "slower than A beyond" not in err


# ------------------------------------------------------------------------ reports from elsewhere

BAD_REPORTS = {
    "d['steps']['p50_s'] = 'fast'": "field steps.p50_s is 'fast', not a number or null",
    "del d['steps']['mean_s']": "field steps.mean_s is missing",
    "d['steps']['timed_steps'] = 1.5": "field steps.timed_steps is 1.5, not an integer",
    "d['steps']['max_s'] = -1": "field steps.max_s is -1, not a number >= 0",
    "d['status'] = 'done'": "field status is 'done', not one of complete, partial, diverged",
    "d['metrics']['loss'] = 'low'": "field metrics.loss is 'low', not a number",
    "d['epochs'][0]['seconds'] = '1 s'": "field epochs[0].seconds is '1 s', not a number",
    "d['compute'] = {'mfu': '5%'}": "field compute.mfu is '5%', not a number or null",
    "d['context'] = {'device': {'index': 0}}": (
        "field context.device.kind is missing or null, not a string"
    ),
    "d['cluster'] = {'rows': 5}": "field cluster holds a value this toolkit cannot show",
    "d['trace'] = {'files': 5}": "field trace.files is 5, not a list of file names",
    "d['tensorboard'] = {'logdir': 'r', 'runs': 'train', 'view': 'v'}": (
        "field tensorboard.runs is 'train', not a list of run names"
    ),
    "d['tensorboard'] = {'runs': []}": "field tensorboard.logdir is missing or null, not a string",
    "d['diagnosis'] = {'verdict': 'input-bound', 'input_rate': 1, 'compute_rate': 2}": (
        "field diagnosis.fit_rate is missing or null, not a number"
    ),
    "d['diagnosis'] = {'verdict': 3, 'input_rate': 1, 'compute_rate': 1, 'fit_rate': 1}": (
        "field diagnosis.verdict is 3, not a string"
    ),
    "d['diagnosis'] = {'verdict': 'balanced', 'input_rate': 1, 'compute_rate': 1, 'fit_rate': 1, "
    "'anatomy': {'phases': 5}}": "field diagnosis.anatomy holds a value this toolkit cannot show",
    "d['diagnosis'] = {'verdict': 'balanced', 'input_rate': 1, 'compute_rate': 1, 'fit_rate': 1, "
    "'steps': 'ten'}": "field diagnosis.steps is 'ten', not an integer",
    "d['timeline'] = [[1]]": "field timeline is [[1]], not a list of [seconds, steps, epoch",
    "d['ledger'] = {'wall_s': 2.0, 'parts': {'steps': 7.0, 'other': -5.0}}": (
        "field ledger.parts.other is -5.0, not a number >= 0"
    ),
    "d['ledger'] = {'wall_s': 2.0, 'parts': {'steps': 100.0}}": (
        "field ledger.parts is '100.000000 s in all', not parts adding up to wall_s (2.0 s)"
    ),
}


def test_a_report_from_elsewhere_names_the_field_and_the_file(tmp_path, capsys):
    """A report edited by hand or written by another tool (a string where a number goes, or a
    number no report can hold: a negative part, parts not adding up): show, show --markdown,
    compare, merge and trace each say which field of which file is wrong, in one line,
    status 2."""
    from toolkit.cli import main

    good = tmp_path / "good"
    make_report("good").write(good, plot=False)
    cases = 0
    for i, (edit, words) in enumerate(BAD_REPORTS.items()):
        d = json.loads((good / "report.json").read_text())
        exec(edit, {"d": d})
        bad = tmp_path / f"bad{i}.json"
        bad.write_text(json.dumps(d))
        for argv in (["show", bad], ["show", "--markdown", bad], ["compare", good, bad],
                     ["compare", bad, good], ["merge", good, bad], ["trace", bad]):  # fmt: skip
            assert main([str(a) for a in argv]) == 2, (edit, argv)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith(f"error: '{bad}': {words}"), err
            cases += 1
    assert cases == 6 * len(BAD_REPORTS)
    # The same as a user meets it: a real process, no traceback.
    bad = tmp_path / "bad0.json"
    out = _run([sys.executable, "-m", "toolkit", "show", str(bad)])
    assert out.returncode == 2 and _last(out).startswith(f"error: '{bad}': field steps.p50_s")
    assert "Traceback" not in out.stderr


# ------------------------------------------------------------------- reports someone else wrote

TOOLKIT = [sys.executable, "-m", "toolkit"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One real ``--smoke`` run (batch 32): its run directory and its report as a dict."""
    root = tmp_path_factory.mktemp("smoke")
    out = _run(["--smoke", f"--report_dir={root / 'runs'}"])
    assert out.returncode == 0, out.stderr[-2000:]
    return _report(root / "runs")


def _variant(tmp_path, smoke, name, edit=None, text=None):
    """A copy of the smoke run's directory whose report.json is edited by `edit` (the dict)
    or replaced by `text`."""
    run_dir, data = smoke
    where = tmp_path / name
    shutil.copytree(run_dir, where)
    data = json.loads(json.dumps(data))
    if edit is not None:
        edit(data)
    (where / "report.json").write_text(text if text is not None else json.dumps(data))
    return where


def _verb(*args, timeout=60):
    return _run([*TOOLKIT, *map(str, args)], timeout=timeout)


def test_control_characters_in_a_report_are_shown_escaped_by_every_reader(tmp_path, smoke):
    """An escape sequence in the run's name (a window title, a screen clear) reaches the
    terminal as visible text from show, compare and merge; newline, tab and unicode stay."""
    hostile = "mlp\u001b]0;PWNED\u0007\u001b[2J\u009b ×µ"

    def edit(d):
        d["name"] = hostile
        d["error"] = None
        d["args"]["note\u001b[31m"] = "x\ty"

    bad = _variant(tmp_path, smoke, "bad", edit)
    good = smoke[0]
    outs = [
        _verb("show", bad),
        _verb("show", bad, "--markdown"),
        _verb("show", bad, "--json"),
        _verb("compare", good, bad),
        _verb("compare", good, bad, "--json"),
        _verb("merge", bad),
    ]
    for out in outs:
        seen = out.stdout + out.stderr
        assert "Traceback" not in seen, seen[-2000:]
        assert not any(c in seen for c in "\u001b\u0007\u009b"), repr(seen[-500:])
    assert [o.returncode for o in outs[:5]] == [0] * 5
    assert outs[0].stdout.startswith("== mlp\\x1b]0;PWNED\\x07\\x1b[2J\\x9b ×µ: complete")
    assert "\\x1b]0;PWNED" in outs[3].stdout and "\\x1b]0;PWNED" in outs[5].stderr
    assert outs[5].returncode == 2 and len(outs[5].stderr.strip().splitlines()) == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_or_a_device_is_refused_without_a_blocking_read(tmp_path, smoke):
    """A FIFO named report.json, or /dev/zero, is one line and status 2 at once (it would
    block for a writer, or fill the memory); a symbolic link to a real report still reads; a
    cache file that is a FIFO is a miss, not a hang."""
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "report.json")
    for target, kind in ((fifo_dir, "a FIFO"), ("/dev/zero", "a character device")):
        out = _verb("show", target)
        path = os.path.join(target, "report.json") if target == fifo_dir else target
        assert out.returncode == 2, out.stderr[-2000:]
        assert out.stderr == (
            f"error: cannot read report {str(path)!r}: not a regular file ({kind})\n"
        )
    out = _verb("compare", smoke[0], fifo_dir)
    assert out.returncode == 2 and "not a regular file (a FIFO)" in out.stderr
    link = tmp_path / "link.json"
    link.symlink_to(smoke[0] / "report.json")
    assert _verb("show", link).returncode == 0
    cache = str(fifo_dir / "report.json")
    code = f"from toolkit.core.files import read_json; print(read_json({cache!r}))"
    out = _run([sys.executable, "-c", code], timeout=60)
    assert out.returncode == 0 and out.stdout == "{}\n", out.stderr[-2000:]


@pytest.mark.parametrize(
    ("number", "said"),
    [
        ("1e999", "number 1e999 is not finite as a float"),
        ("Infinity", "number Infinity is not finite"),
        ("NaN", "number NaN is not finite"),
        ("1" + "0" * 400, "is too large for a float"),
    ],
)
def test_a_number_past_a_float_is_one_line(tmp_path, smoke, number, said):
    """``1e999`` (infinity once parsed), ``Infinity``, ``NaN`` or an integer past a float's
    range in a count the ledger makes an int: one line naming the number, status 2, from each
    reader, where it was an OverflowError."""
    text = json.dumps(smoke[1]).replace('"recompiles": 0', f'"recompiles": {number}', 1)
    assert number in text
    bad = _variant(tmp_path, smoke, "bad", text=text)
    for args in (("show", bad), ("compare", smoke[0], bad), ("merge", bad)):
        out = _verb(*args)
        assert out.returncode == 2, out.stderr[-2000:]
        assert out.stderr.startswith("error: cannot read report ") and said in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_ledger_count_that_is_not_a_whole_number_names_its_field(tmp_path, smoke):
    def edit(d):
        d["ledger"]["recompiles"] = 1.5

    out = _verb("show", _variant(tmp_path, smoke, "bad", edit))
    assert out.returncode == 2 and "field ledger.recompiles is 1.5, not an integer" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_strict_numbers_are_for_reports_only():
    """``parse_json`` reads NaN as Python does unless asked (a cache, a peer's message), and
    a cache file that is missing is a miss."""
    assert str(parse_json('{"a": NaN}')["a"]) == "nan"
    assert parse_json('{"a": 1e308, "b": 12}', finite=True) == {"a": 1e308, "b": 12}
    with pytest.raises(ValueError, match="-Infinity"):
        parse_json("[-Infinity]", finite=True)
    assert read_json("/nonexistent/cache.json") == {}


def test_compare_json_says_seconds_and_a_fused_first_call_is_compared_whole(tmp_path, smoke):
    """``compare --json`` gives times in seconds and says "s" (the table shows ms); the first
    call is compared as a whole, as the ledger's compile is, and per step only beside it."""
    run_dir, data = smoke
    first = data["steps"]["first_step_s"]

    def fused(d):
        d["steps"]["first_step_s"] = first * 1.5
        d["steps"]["first_step_steps"] = 4

    b = _variant(tmp_path, smoke, "fused", fused)
    out = _verb("compare", run_dir, b, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    figures = {f["figure"]: f for f in json.loads(out.stdout)["figures"]}
    p50 = figures["step p50"]
    assert p50["unit"] == "s" and p50["a"] == data["steps"]["p50_s"]
    whole = figures["first call"]
    assert whole["unit"] == "s" and whole["a"] == first
    assert whole["b"] == pytest.approx(first * 1.5) and whole["change"] == pytest.approx(0.5)
    assert figures["first call/step"]["b"] == pytest.approx(first * 1.5 / 4)
    text = _verb("compare", run_dir, b).stdout
    assert f"{data['steps']['p50_s'] * 1e3:.3f} ms" in text
    assert "first call/step" not in _verb("compare", run_dir, run_dir).stdout  # unfused


def test_a_batch_size_change_is_the_same_workload_compared_per_example(tmp_path, smoke):
    """Run B at twice the batch: twice the FLOPs a step, the same an example: a speed verdict
    per example, no "different workloads" note; a different model still is one."""
    out = _run(["--smoke", "--batch_size=64", f"--report_dir={tmp_path / 'runs'}"])
    assert out.returncode == 0, out.stderr[-2000:]
    b_dir, b = _report(tmp_path / "runs")
    a_dir, a = smoke
    assert b["compute"]["flops_per_step"] == pytest.approx(
        2 * a["compute"]["flops_per_step"], rel=0.01
    )
    out = _verb("compare", a_dir, b_dir, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["verdict"] != "different workloads", result["notes"]
    assert result["basis"] == "step p50 per example"
    assert not any("models differ" in n for n in result["notes"])

    def bigger(d):
        d["compute"]["flops_per_step"] *= 3

    out = _verb("compare", a_dir, _variant(tmp_path, smoke, "bigger", bigger), "--json")
    result = json.loads(out.stdout)
    assert result["verdict"] == "different workloads"
    assert any("FLOPs per step" in n and "per example" in n for n in result["notes"])


def test_every_view_of_a_report_shows_the_same_numbers(tmp_path):
    """One record, many views: the summary (terminal), report.md, report.json read back, and
    compare's table each show the run's p50, throughput, fit call and epochs' time from the
    same field, formatted by the same function, so a figure never differs between screens."""
    from toolkit.core.stats import format_ms, format_rate, format_s

    r = make_report("a", fit_call=dict(FIT_CALL))
    r.metrics = {"loss": 3.00006}
    r.write(tmp_path, plot=False)
    loaded = RunReport.load(tmp_path)
    summary, markdown = loaded.summary(), (tmp_path / "report.md").read_text()
    table = compare(loaded, r).render(columns=None)
    p50, rate = format_ms(r.steps.p50_s), format_rate(r.steps.examples_per_sec)
    label, wall = r.fit_wall()
    assert (label, wall) == ("fit call", FIT_CALL["whole_s"]) == loaded.fit_wall()
    for view in (summary, markdown):
        assert f"p50 {p50}" in view or f"| p50 | {p50} |" in view, view
        assert rate in view and f"{label}: {format_s(wall)}" in view
        assert "loss 3.000" in view or "| loss | 3.000 |" in view  # never "3" for 3.00006
    row = next(line for line in table.splitlines() if line.startswith(label))
    assert row.split()[2:4] == format_s(wall).split()  # A's column, as show says it
    assert f"{p50}" in table and f"{rate}/s" in table
    epochs = f"epochs: {len(r.epochs)} in {format_s(sum(e.seconds for e in r.epochs))}"
    assert epochs in summary
    for e in r.epochs:
        assert f"| {e.epoch + 1} | {format_s(e.seconds)} | {e.steps} |" in markdown
    shown = json.loads((tmp_path / "report.json").read_text())
    assert format_ms(shown["steps"]["p50_s"]) == p50
    assert format_s(shown["fit_call"]["whole_s"]) == format_s(wall)


def test_mfu_and_throughput_come_from_one_statistic():
    """A run with one slow step: its median and its mean differ. Examples/s is the mean's
    (what the run delivered); MFU's achieved FLOP/s is too, so the two agree."""
    from toolkit.profiling.step_timer import StepTimer

    ticks = iter([0.0] + [0.01 * i for i in range(1, 20)] + [0.29, 0.30, 0.31])
    timer = StepTimer(warmup_steps=0, batch_size=8, clock=lambda: next(ticks))
    with timer:
        for _ in range(21):
            timer.step()
    compute = Compute(flops_per_step=2e9, peak_flops_per_s=4e11, peak_dtype="float32")
    r = RunReport.from_callbacks("c", timer, compute=compute)
    assert r.steps.mean_s != pytest.approx(r.steps.p50_s)
    per_example = 2e9 / 8
    assert r.compute.achieved_flops_per_s == pytest.approx(per_example * r.steps.examples_per_sec)


def test_the_tune_section_reads_the_search_s_record_and_says_its_claim(tmp_path):
    """report.json's ``tune`` is the search's record kept whole; the section reads the pick,
    the trials and the claimed gain from it, and a claim only for a pick handed back."""
    from toolkit.core._gain import FRESH, Gain
    from toolkit.report._tune import TuneSection

    gain = Gain(1.27, 1.22, 1.31, 3, FRESH)
    search = {
        "best_label": "jit_compile=True, steps_per_execution=8", "cache_hit": False,
        "seconds": 12.5, "picked": True, "gain": gain.to_dict(), "key": "k", "why": "",
        "trials": [{"label": "defaults", "examples_per_sec": 1000.0, "error": None},
                   {"label": "jit_compile=True", "examples_per_sec": None, "error": "OOM"}],
    }  # fmt: skip
    tune = TuneSection.from_dict(search)
    assert tune.gain == gain and [t.examples_per_sec for t in tune.trials] == [1000.0, None]
    assert tune.line() == (
        f"tune: {search['best_label']} (searched in 12.5 s, 2 trials); claimed {gain.words()}"
    )
    r = make_report(tune=tune)
    r.write(tmp_path, plot=False)
    loaded = RunReport.load(tmp_path)
    assert loaded.tune == tune and loaded.to_dict()["tune"] == search  # kept whole
    assert tune.line() in loaded.summary()
    assert "| jit_compile=True | — | failed: OOM |" in loaded.to_markdown()
    refused = TuneSection.from_dict({**search, "picked": False})
    assert refused.gain is None and "claimed" not in refused.line()
    older = {k: v for k, v in search.items() if k != "picked"}  # "gain_words" said the claim
    assert TuneSection.from_dict({**older, "gain_words": "1.27×"}).gain == gain
    assert TuneSection.from_dict(older).gain is None
    with pytest.raises(ReportError, match=r"field tune\.trials\[1\]\.examples_per_sec is 'x'"):
        TuneSection.from_dict(
            {**search, "trials": [search["trials"][0], {"examples_per_sec": "x"}]}
        )
