"""The step's anatomy in the report room (toolkit.report._anatomy): terminal lines that fit,
shares that add up, the slowest layer first, Keras's own cost in words that read right, the
report.json field's round trip and refusal, the picture, and compare's contrast. Anatomies are
built by hand; nothing here trains or traces."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from toolkit.core._advice import Advice
from toolkit.core._anatomy import Anatomy, LayerTime, Phase, PhaseTime, contrast
from toolkit.core.stats import format_ms, summarize_calls
from toolkit.report import ReportError, RunReport, compare
from toolkit.report._anatomy import (
    ANATOMY_PNG,
    anatomy_figure,
    anatomy_lines,
    anatomy_markdown,
    anatomy_png,
    anatomy_top_lines,
    contrast_lines,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LONG = "functional_1/residual_stage_with_a_long_name_{i}/conv2d_transpose_with_bias_{i}"


def anatomy(layers: int = 14, scale: float = 1.0, **kw) -> Anatomy:
    """A CNN's step on TensorFlow: long nested names, more layers than the table shows, one
    layer called twice, fused time, the input phase unseen; shuffled, so the view must sort."""
    made = [
        LayerTime(
            LONG.format(i=i) if i % 2 else f"dense_{i}",
            "Conv2DTranspose" if i % 2 else "Dense",
            forward_s=scale * 1e-3 * (i + 1),
            backward_s=scale * 2e-3 * (i + 1),
            calls=2 if i == 4 else 1,
            flops=3e9 * (i + 1) if i % 3 else None,
            fused_s=2e-4 if i == 5 else 0.0,
        )
        for i in range(layers)
    ]
    made = made[::2] + made[1::2]  # not slowest first
    forward = sum(x.forward_s for x in made) + 1e-3
    backward = sum(x.backward_s for x in made) + 2e-3
    phases = (
        PhaseTime(Phase.INPUT, 0.0, "read inside the traced step on TensorFlow"),
        PhaseTime(Phase.FORWARD, forward),
        PhaseTime(Phase.BACKWARD, backward),
        PhaseTime(Phase.OPTIMIZER, scale * 8e-3),
        PhaseTime(Phase.METRICS, scale * 1e-3),
        PhaseTime(Phase.HOST, scale * 5e-4),
        PhaseTime(Phase.OTHER, scale * 2e-3),
    )
    traced = sum(p.seconds for p in phases)
    fields = {
        "backend": "tensorflow",
        "device": "NVIDIA H100 80GB HBM3 (GPU 0), CUDA 12.4, driver 550.54.15",
        "steps": 20,
        "step_s": traced * 1.02,
        "traced_s": traced,
        "untraced_s": traced * 0.97,
        "phases": phases,
        "layers": tuple(made),
        "fused_s": 1.5e-3,
        "signal": "TensorFlow's profiler (XPlane) with the toolkit's layer name scopes",
        "notes": ("the input is read inside the traced step: " + "its time is in other " * 6,),
        "raw_s": traced * 0.9,
        "raw_how": "a tf.function around GradientTape and apply_gradients",
        "fit_s": traced,
    }
    return Anatomy(**{**fields, **kw})


def slowest(a: Anatomy) -> LayerTime:
    return max(a.layers, key=lambda x: x.seconds)


def _holding() -> Anatomy:
    """An attention block timed alone with its projections, past the band (reconciled)."""
    from toolkit.core._anatomy import reconcile

    held = (
        LayerTime("multi_head_attention", "MultiHeadAttention", 5e-4, 5e-4, alone_s=6e-3,
                  alone_forward_s=2e-3, alone_with_held=True),
        LayerTime("multi_head_attention/query", "EinsumDense", 5e-4, 5e-4, alone_s=2e-3,
                  alone_forward_s=1e-3),
    )  # fmt: skip
    a = anatomy(layers=3)
    a = dataclasses.replace(a, layers=(*a.layers, *held), untraced_s=None, step_s=a.traced_s)
    return reconcile(a)


def _other_large() -> Anatomy:
    """A step whose "other" is most of it, split by the trace, its fix named."""
    a = anatomy(layers=2)
    phases = tuple(
        dataclasses.replace(p, seconds=0.02) if p.phase == Phase.OTHER else p for p in a.phases
    )
    fix = Advice.of(
        "try {0} (torch.compile: its first step compiles for tens of seconds; "
        "measure whether the steps win it back)",
        {"jit_compile": True},
    )
    return dataclasses.replace(a, phases=phases, other_between_s=0.015, ops_per_step=1234.0,
                               other_fix=fix)  # fmt: skip


def _gan() -> Anatomy:
    """A GAN's step: its generator's layer called twice, one call differentiated."""
    a = anatomy(layers=2)
    called = dataclasses.replace(a.layers[0], calls=2, backward_calls=1)
    return dataclasses.replace(a, layers=(called, *a.layers[1:]))


CASES = {
    "full": anatomy(),
    "gan": _gan(),
    "holding": _holding(),
    "one layer": anatomy(layers=1),
    "no layers": anatomy(layers=0),
    "trainer faster": anatomy(raw_s=0.2),
    "disagrees": anatomy(step_s=1.0, untraced_s=None, fused_s=0.0),
    "error": Anatomy("torch", device="cpu", error="no kernel in the trace: " + "x" * 120),
    "other large": _other_large(),
}


@pytest.mark.parametrize("width", [60, 80, 120])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_line_fits_the_width(case, width):
    lines = anatomy_lines(CASES[case], width=width)
    assert lines
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, "\n".join(too_long)


def test_contrast_lines_fit_and_say_slower_or_faster():
    fast, slow = anatomy(), anatomy(scale=6.0, step_s=0.5)
    c = contrast(fast, slow, "JAX", "PyTorch", fix="torch.compile: jit_compile=True")
    lines = contrast_lines(c)
    assert all(len(line) <= 80 for line in lines), lines
    text = " ".join(line.strip() for line in lines)
    assert text.startswith(f"PyTorch is {slow.step_s / fast.step_s:.2f}× slower than JAX")
    assert lines[-1] == "try: torch.compile: jit_compile=True"
    back = " ".join(contrast_lines(contrast(slow, fast, "PyTorch", "JAX")))
    assert back.startswith(f"JAX is {slow.step_s / fast.step_s:.2f}× faster than PyTorch")
    assert "try:" not in back


def test_the_phase_shares_add_up_to_the_step():
    a = anatomy()
    lines = anatomy_lines(a)
    names = [p.value for p in Phase]
    shares = [
        float(m.group(1))
        for line in lines
        if any(line.startswith(n + " ") for n in names)
        for m in [re.search(r"(\d+\.\d) %", line)]
        if m
    ]
    assert len(shares) == len(names) - 1  # the unseen input shows words, not a share
    assert sum(shares) == pytest.approx(100.0, abs=0.5)
    unseen = next(line for line in lines if line.startswith("input "))
    assert "not seen: read inside" in unseen
    assert any(
        line.startswith("phases sum to 0.98× the traced step on the outside clock")
        for line in lines
    )
    assert any("the profiler's own cost" in line for line in lines)


def test_profiler_line_claims_no_cost_where_the_traced_step_was_the_faster():
    """A profiler never makes a step faster: a traced step under the untraced one is the two
    timings' noise, said as no cost seen (it read 'its own cost: a traced step takes 0.75×')."""
    a = anatomy()
    slower = dataclasses.replace(a, untraced_s=a.step_s / 0.75)
    (line,) = [x for x in anatomy_lines(slower) if x.startswith("the profiler's own cost")]
    assert line.startswith("the profiler's own cost: none seen, a traced step took 0.75× ")
    assert "scaled up to the untraced step" in " ".join(anatomy_lines(slower))
    costly = dataclasses.replace(a, untraced_s=a.step_s / 1.5)
    (line,) = [x for x in anatomy_lines(costly) if x.startswith("the profiler's own cost")]
    assert line.startswith("the profiler's own cost: a traced step takes 1.50× ")


def test_other_is_always_shown_and_a_disagreement_said():
    a = anatomy(step_s=1.0)
    a = dataclasses.replace(a, phases=tuple(p for p in a.phases if p.phase != Phase.OTHER))
    text = "\n".join(anatomy_lines(a))
    assert re.search(r"^other +0\.000 +0\.0 %", text, re.M)
    assert "they disagree by more than 5 %" in text


def test_the_slowest_layer_comes_first_and_the_rest_are_counted():
    a = anatomy()
    lines = anatomy_lines(a)
    rule = next(i for i, line in enumerate(lines) if line.startswith("layer "))
    first = lines[rule + 2]
    assert first.split()[0].endswith(slowest(a).name.rpartition("/")[2][-12:])
    assert any(line.startswith("and 4 more layers (") for line in lines)
    assert any("×2" in line for line in lines)  # the layer called twice
    # a layer left out that shows its alone figure is counted where no row marks it
    held = [dataclasses.replace(x, alone_s=1e-3) if x.name == "dense_0" else x for x in a.layers]
    text = " ".join(" ".join(anatomy_lines(dataclasses.replace(a, layers=tuple(held)))).split())
    assert "for 1 the alone time is shown" in text and "1 of them at their alone figure" in text
    assert any(line.startswith("XLA fused several layers' ops together") for line in lines)
    top = anatomy_top_lines(a, n=2)
    assert 2 <= len(top) <= 4
    assert top[1].startswith(f"slowest layers: {slowest(a).name} (Conv2DTranspose)")
    # doctor's line says whose split of forward and backward it shows: the model's timed
    # alone where it was, else the trace's own (anatomy, which times it, read otherwise)
    split = "forward and backward as the trace split them"
    assert (split in top[0]) is (a.model_alone_s is None), top[0]
    checked = dataclasses.replace(a, model_alone_s=0.01, model_alone_forward_s=0.004)
    assert split not in anatomy_top_lines(checked)[0]
    unchecked = dataclasses.replace(a, model_alone_s=None)
    assert split in anatomy_top_lines(unchecked)[0]


def test_keras_trainer_cost_reads_right_both_ways():
    a = anatomy()
    text = "\n".join(anatomy_lines(a))
    assert re.search(r"^Keras's trainer adds 11\.1 % per step over the raw step$", text, re.M)
    assert "raw step: a tf.function around GradientTape" in text.replace("\n    ", " ")
    faster = anatomy(raw_s=anatomy().fit_s * 1.03)
    said = "\n".join(anatomy_lines(faster))
    assert "adds -" not in said and "adds −" not in said
    assert "Keras's fit step is 2.9 % faster than the raw step" in said
    assert any("faster than the raw step" in line for line in anatomy_top_lines(faster))
    # a percent either way is the rounds' own spread on a shared host, not a finding
    near = " ".join(" ".join(anatomy_lines(anatomy(raw_s=anatomy().fit_s * 1.008))).split())
    assert "adds nothing measurable per step over the raw step (within noise)" in near
    unmeasured = "\n".join(anatomy_lines(anatomy(raw_s=None)))
    assert "Keras's" not in unmeasured


def test_an_anatomy_that_could_not_be_taken_says_only_why():
    a = CASES["error"]
    lines = anatomy_lines(a)
    assert lines[0].startswith("inside the step: the anatomy could not be taken (torch on cpu)")
    assert all(line.startswith("  ") for line in lines[1:])  # one line, folded
    (top,) = anatomy_top_lines(a)
    assert top.replace(" ", "") == "".join(lines).replace(" ", "")
    assert anatomy_png(a, "unused.png") is None
    assert "could not be taken" in anatomy_markdown(a)


def _report(name: str = "cnn", step_s: float = 0.05, **kw) -> RunReport:
    calls = [[1.0, 1, 0, "first"], *([[step_s, 1, 0, "timed"]] * 30)]
    return RunReport(name=name, steps=summarize_calls(calls, 32), timeline=calls, **kw)


def test_the_anatomy_round_trips_through_report_json(tmp_path):
    a = anatomy()
    report = _report(anatomy=a)
    paths = report.write(tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["anatomy"] == json.loads(json.dumps(a.to_dict()))
    assert data["anatomy"]["phases"][0] == {
        "phase": "input",
        "seconds": 0.0,
        "unseen": "read inside the traced step on TensorFlow",
    }
    loaded = RunReport.load(tmp_path)
    assert loaded.anatomy == a
    assert loaded == report
    assert "inside the step:" in loaded.summary()
    markdown = (tmp_path / "report.md").read_text()
    assert "\n## Inside the step\n" in markdown
    assert f"![inside the step]({ANATOMY_PNG})" in markdown
    assert paths["anatomy_png"] == str(tmp_path / ANATOMY_PNG)
    assert (tmp_path / ANATOMY_PNG).read_bytes().startswith(PNG_MAGIC)
    assert _report().to_dict()["anatomy"] is None
    assert RunReport.load(_report().write(tmp_path / "none", plot=False)["json"]).anatomy is None


def test_the_picture_is_a_png(tmp_path):
    path = anatomy_png(anatomy(layers=30), str(tmp_path / "a.png"))
    assert path == str(tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes().startswith(PNG_MAGIC)
    assert anatomy_png(anatomy(layers=0), str(tmp_path / "b.png")) is not None


def _drawn_texts(fig):
    """Every text the figure draws: titles, labels, legends, the bars' labels, and the tick
    labels inside their axis's range (matplotlib keeps others it does not draw)."""
    from matplotlib.text import Text

    ticks, shown = set(), []
    for ax in fig.get_axes():
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            low, high = sorted(limits)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks.update((id(tick.label1), id(tick.label2)))
                if ax.axison and low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    shown.append(tick.label1)
    shown += [t for t in fig.findobj(Text) if id(t) not in ticks]
    return [t for t in shown if t.get_visible() and t.get_text().strip()]


LONG_NAMES = "functional_model_with_long_name/encoder_block_{i}/multi_head_attention_proj_{i}"


@pytest.mark.parametrize("layers", [0, 3, 15, 30, "long"])
def test_no_text_of_the_picture_overlaps_another_or_leaves_it(layers):
    pytest.importorskip("matplotlib")
    if layers == "long":  # 15 layers, every name and kind long
        a = anatomy(layers=15)
        renamed = [
            dataclasses.replace(x, name=LONG_NAMES.format(i=i), kind="MultiHeadAttention")
            for i, x in enumerate(a.layers)
        ]
        a = dataclasses.replace(a, layers=tuple(renamed))
    else:
        a = anatomy(layers=layers)
    fig = anatomy_figure(a)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = _drawn_texts(fig)
    said = " ".join(t.get_text() for t in texts)
    assert "Inside one training step" in said and "ms per step" in said
    assert "optimizer: 8.000 ms" in said  # the legend names every phase with its ms
    assert "input: not seen in the trace" in said
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    width, height = fig.bbox.width, fig.bbox.height
    outside = [w for w, b in boxes if b.x0 < 0 or b.y0 < 0 or b.x1 > width or b.y1 > height]
    assert not outside
    overlaps = [
        (w1, w2) for n, (w1, b1) in enumerate(boxes) for w2, b2 in boxes[n + 1 :]
        if b1.overlaps(b2)
    ]  # fmt: skip
    assert not overlaps
    # A label inside the phase bar stays inside its own segment (else the legend says it).
    phase_axes = fig.get_axes()[-1]
    for text in phase_axes.texts:
        if text.get_visible():
            (segment,) = [
                bar for bar in phase_axes.patches
                if bar.get_x() <= text.get_position()[0] <= bar.get_x() + bar.get_width()
            ]  # fmt: skip
            inside = segment.get_window_extent(renderer)
            box = text.get_window_extent(renderer)
            assert inside.x0 <= box.x0 and box.x1 <= inside.x1, text.get_text()
    if a.layers:  # each layer's bar ends with its ms and share, inside the axes
        layer_axes = fig.get_axes()[0]
        assert len(layer_axes.texts) == min(len(a.layers), 15)
        right = layer_axes.get_window_extent(renderer).x1
        assert all(t.get_window_extent(renderer).x1 <= right for t in layer_axes.texts)


LAYER = {"name": "dense", "forward_s": 1e-3, "backward_s": 2e-3}


@pytest.mark.parametrize(
    ("anatomy_json", "field"),
    [
        ([1, 2], "field anatomy is [1, 2], not an object"),
        ({"steps": 3}, "field anatomy.backend is missing or null, not a string"),
        ({"backend": "jax", "step_s": -1}, "field anatomy.step_s is -1, not a number >= 0"),
        ({"backend": "jax", "phases": [{"phase": "lunch", "seconds": 1}]}, "phases[0].phase"),
        ({"backend": "jax", "layers": [{"name": "d", "forward_s": "1"}]}, "layers[0].forward_s"),
        ({"backend": "jax", "layers": [{**LAYER, "calls": 1.5}]}, "layers[0].calls"),
        ({"backend": "jax", "notes": "one"}, "field anatomy.notes"),
        (
            {"backend": "jax", "layers": [{**LAYER, "alone_with_held": "yes"}]},
            "layers[0].alone_with_held",
        ),
        # hand-edited: no step, an absurd figure, the phases gone
        ({"backend": "jax", "phases": [], "step_s": 0}, "field anatomy.step_s is 0, not a time"),
        (
            {"backend": "jax", "phases": [{"phase": "forward", "seconds": 1e300}]},
            "field anatomy.phases[0].seconds is 1e+300, not seconds per step up to 86,400",
        ),
        ({"backend": "jax", "step_s": 0.01}, "field anatomy.phases is missing"),
    ],
)
def test_a_malformed_anatomy_is_refused_in_one_line(tmp_path, anatomy_json, field):
    data = _report().to_dict()
    data["anatomy"] = anatomy_json
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError) as raised:
        RunReport.load(path)
    message = str(raised.value)
    assert field in message and "\n" not in message
    assert message.startswith(repr(str(path)))


def test_compare_sets_the_two_anatomies_side_by_side():
    base = anatomy()
    conv = tuple(
        dataclasses.replace(x, forward_s=x.forward_s * 8, backward_s=x.backward_s * 8)
        if x.kind == "Conv2DTranspose"
        else x
        for x in base.layers
    )
    grew = [sum(getattr(x, k) for x in conv) - sum(getattr(x, k) for x in base.layers)
            for k in ("forward_s", "backward_s")]  # fmt: skip
    phases = tuple(
        dataclasses.replace(p, seconds=p.seconds + {Phase.FORWARD: grew[0],
                                                    Phase.BACKWARD: grew[1]}.get(p.phase, 0.0))
        for p in base.phases
    )  # fmt: skip
    traced = sum(p.seconds for p in phases)
    slow = dataclasses.replace(base, layers=conv, phases=phases, traced_s=traced,
                               step_s=traced * 1.02)  # fmt: skip
    ratio = slow.step_s / base.step_s
    # the runs' median steps as the anatomies' outside clocks read them: nothing to rescale
    result = compare(_report("jax-run", step_s=base.step_s, anatomy=base),
                     _report("torch-run", step_s=slow.step_s, anatomy=slow))  # fmt: skip
    said = " ".join(line.strip() for line in contrast_lines(result.anatomy))
    assert said in " ".join(x.strip() for x in result.render().split("\n"))
    assert said.startswith(f"torch-run is {ratio:.2f}× slower than jax-run")
    assert "the Conv2DTranspose layers (7) 8.00×" in said  # the largest part, named first
    assert "note:" not in said  # the table's steps are the anatomies' own
    assert all(len(line) <= 80 for line in contrast_lines(result.anatomy))
    parts = result.to_dict()["anatomy"]["parts"]
    assert parts[0]["what"] == "the Conv2DTranspose layers (7)"
    same = compare(_report(step_s=base.step_s, anatomy=base),
                   _report(step_s=slow.step_s, anatomy=slow))  # fmt: skip
    assert f"B is {ratio:.2f}× slower than A" in same.render()
    # a table whose steps differ from the anatomies': the parts are put on the table's
    # steps, add up to its gap, and a note says so
    off = compare(_report("jax-run", step_s=0.05, anatomy=base),
                  _report("torch-run", step_s=0.2, anatomy=slow)).anatomy  # fmt: skip
    assert (off.a_step_s, off.b_step_s) == (0.05, 0.2)
    gap = sum(p.gap_s for p in off.parts) + (off.rest.gap_s if off.rest else 0.0)
    assert gap == pytest.approx(0.2 - 0.05)
    assert len(off.notes) == 2 and "the table's step" in off.notes[0]
    assert compare(_report(anatomy=base), _report()).anatomy is None
    assert compare(_report(), _report()).to_dict()["anatomy"] is None


def test_contrast_counts_a_layer_held_by_another_as_its_holder():
    """JAX gives an LSTM's scan to its cell, PyTorch keeps it in the LSTM: set side by side,
    both are the LSTM's."""
    from toolkit.core._anatomy import Anatomy, LayerTime, Phase, PhaseTime, contrast

    phases = (PhaseTime(Phase.FORWARD, 0.01), PhaseTime(Phase.BACKWARD, 0.01))
    jax = Anatomy("jax", step_s=0.02, phases=phases, layers=(
        LayerTime("bi/forward_lstm/lstm_cell", "LSTMCell", 0.004, 0.004),
        LayerTime("bi/forward_lstm", "LSTM", 0.001, 0.0),
    ))  # fmt: skip
    torch = Anatomy("torch", step_s=0.08, phases=phases, layers=(
        LayerTime("bi/forward_lstm", "LSTM", 0.03, 0.04),
    ))  # fmt: skip
    parts = {p.what: p for p in contrast(jax, torch, "JAX", "PyTorch").parts}
    lstm = parts["the LSTM layer (1)"]
    assert lstm.a_s == pytest.approx(0.009) and lstm.b_s == pytest.approx(0.07)
    assert not any("LSTMCell" in what for what in parts)


def test_a_layer_whose_calls_did_not_all_take_a_gradient_says_how_many_did():
    a = _gan()
    text = " ".join(" ".join(anatomy_lines(a, width=80)).split())
    assert " ×2/1" in text and "×N/M: M of its N calls took a gradient" in text, text
    assert "| 2/1 |" in anatomy_markdown(a)
    plain = "\n".join(anatomy_lines(anatomy(layers=2), width=80))
    assert "×N/M" not in plain and "/1 " not in plain


def test_a_layer_timed_with_the_layers_it_holds_is_said_so():
    lines = anatomy_lines(_holding(), 80)
    text = " ".join(" ".join(lines).split())  # the folded lines read as one
    assert "a layer that holds others (name/inner rows) is timed with them" in text, lines
    assert "a multi_head_attention: traced" in text and "layers it holds" in text, lines
    assert all(len(line) <= 80 for line in lines), lines


def test_a_large_other_is_taken_apart_with_the_fix_it_implies():
    a = CASES["other large"]
    assert a.phase(Phase.OTHER) > 0.25 * a.phases_sum()
    text = " ".join(line.strip() for line in anatomy_lines(a, width=80))
    assert "other is " in text and "of the step: in the trace, 75% of it the host" in text
    assert "1,234 ops a step, about 0.012 ms between each two" in text
    assert "fewer, larger ops shrink it: try jit_compile=True" in text
    gaps = a.other_gaps_s()  # the shown other, in the trace's share of host gaps
    assert gaps == pytest.approx(a.phase(Phase.OTHER) * 0.75)
    assert f"predicted to save {format_ms(gaps)} a step (those gaps)" in text
    assert "measured: fit" not in text and a.other_fix_held() is None  # no check: none claimed
    small = anatomy()  # other at a few % of the step: nothing to explain
    assert "other is" not in " ".join(anatomy_lines(small))
    assert Anatomy.from_dict(a.to_dict()) == a


def test_a_large_other_s_fix_is_said_as_its_check_measured_it():
    """The predicted saving is checked by fit's step with the fix: saved, within the noise
    between two runs, or a cost (the advice then turns: leave it off)."""
    a = dataclasses.replace(CASES["other large"], fit_s=0.010)
    said = {}
    for fixed in (0.006, 0.0095, 0.013):
        checked = dataclasses.replace(a, other_fixed_s=fixed)
        text = " ".join(line.strip() for line in anatomy_lines(checked, width=80))
        assert f"measured: fit's step {format_ms(0.010)} -> {format_ms(fixed)} with it" in text
        said[fixed] = (checked.other_fix_held(), text)
        assert Anatomy.from_dict(checked.to_dict()) == checked
    assert said[0.006][0] is True and f"(saves {format_ms(0.004)}: try it)" in said[0.006][1]
    assert said[0.0095][0] is None and "the noise between two runs: no saving" in said[0.0095][1]
    assert said[0.013][0] is False and "leave it off" in said[0.013][1]


def test_layer_names_cut_to_the_column_are_told_apart():
    """A nested layer keeps its own name after ``…/``; where those meet (keras.io's seq2seq
    Transformer showed three ``…/query`` rows for an encoder's and a decoder's attention),
    the path's tail, then its head and tail, tell the rows apart."""
    from toolkit.report._anatomy import _shorts

    names = ["transformer_decoder/multi_head_attention_2/query",
             "transformer_encoder/multi_head_attention/query",
             "transformer_decoder/multi_head_attention_1/query", "base/b_conv0",
             "encoder/block/conv2d_12"]  # fmt: skip
    shown = _shorts(names, 13)
    assert shown == ["…tion_2/query", "…ention/query", "…tion_1/query", "base/b_conv0",
                     "…/conv2d_12"]  # fmt: skip
    assert all(len(x) <= 13 for x in shown)
    # where tails meet too (a BiLSTM's four cells), the outer layers by their initials
    cells = [f"bidirectional{n}/{way}_lstm{n}/lstm_cell" for n in ("", "_1")
             for way in ("forward", "backward")]  # fmt: skip
    assert _shorts(cells, 13) == ["b/f/lstm_cell", "b/b/lstm_cell", "b_1/f_1/lstm…",
                                  "b_1/b_1/lstm…"]  # fmt: skip
