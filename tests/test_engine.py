"""The search engine with injected measurements and clocks: the search's order, the budget,
failures, the never-slower rule, the head-to-head rounds and the choice. No framework runs."""

from __future__ import annotations

import json

import pytest

from tests.helpers import fake_rates
from toolkit.search import engine as en
from toolkit.search import rounds as rd
from toolkit.search.tune import TuneResult

SPACE = en.Space(
    precision=("float32", "mixed_bfloat16"),
    jit_compile=(False, True),
    steps_per_execution=(1, 8),
    fused_steps=(1, 8),
)


class Clock:
    def __init__(self, step=1.0):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def test_search_starts_from_defaults_and_finds_the_best_with_fewer_trials_than_the_grid():
    trials, exhausted = en.search(fake_rates, SPACE, budget_s=1e9)
    assert trials[0].candidate == en.Candidate() and not exhausted
    best = en.choose(trials)
    assert best == en.Candidate(jit_compile=True, steps_per_execution=8)
    assert len(trials) < len(SPACE.grid()) == 16
    assert len({t.candidate for t in trials}) == len(trials)  # nothing measured twice


def test_the_search_goes_to_the_loops_corner_first_then_each_knob_then_shorter_loops():
    space = en.Space(
        jit_compile=(False, True), steps_per_execution=(1, 8, 32), fused_steps=(1, 8, 32)
    )
    assert len(space.grid()) == 16  # 18 less the two calls of 1024 steps (the cap)
    assert all(c.steps_per_execution * c.fused_steps <= 256 for c in space.grid())

    def overhead(c):  # examples/s of a 1 ms step with 10 ms of fixed cost a call
        return 1000.0 / (1.0 + 10.0 / (c.steps_per_execution * c.fused_steps))

    trials, _ = en.search(lambda c: overhead(c) * (1.5 if c.jit_compile else 1.0), space)
    order = [(t.candidate.jit_compile, t.candidate.steps_per_execution, t.candidate.fused_steps)
             for t in trials]  # fmt: skip
    # Defaults; the corner (fused steps longest, then steps per execution as the cap allows);
    # XLA there; then fused steps one value shorter, which loses. Steps per execution one
    # shorter is not measured: the defaults and the corner put the call's overhead at 10 ms,
    # so 32 steps a call would lose ~39 % (only noise could make it win).
    assert order == [(False, 1, 1), (False, 8, 32), (True, 8, 32), (True, 8, 8)]
    assert en.choose(trials) == en.Candidate(jit_compile=True, steps_per_execution=8,
                                             fused_steps=32)  # fmt: skip

    # Where a longer loop does not help, the shorter one is taken, not a coin flip.
    flat, _ = en.search(lambda c: 100.0 + 10.0 * (c.fused_steps > 1), space)
    assert (en.choose(flat).steps_per_execution, en.choose(flat).fused_steps) == (1, 8)
    # A peak below the longest loop (8 fused steps: 32 spill out of a cache, say) is found.
    peaked, _ = en.search(lambda c: {1: 100.0, 8: 300.0, 32: 150.0}[c.fused_steps] +
                          c.steps_per_execution, space)  # fmt: skip
    assert en.choose(peaked).fused_steps == 8 and len(peaked) < len(space.grid())


def test_the_knobs_interact_so_their_order_does_not_decide():
    """bfloat16 wins without XLA and loses with it (an emulated dtype XLA cannot fuse): the
    first knob set must not lock in what the next one overturns."""
    space = en.Space(
        precision=("float32", "mixed_bfloat16"), jit_compile=(False, True),
        steps_per_execution=(1, 8), fused_steps=(1, 8),
    )  # fmt: skip

    def rate(c):
        xla, bf16 = c.jit_compile, c.precision == "mixed_bfloat16"
        base = {(False, False): 100.0, (False, True): 120.0, (True, False): 300.0}
        return base.get((xla, bf16), 200.0) * (1 + 0.5 * (c.fused_steps > 1))

    trials, _ = en.search(rate, space)
    best = en.choose(trials)
    assert (best.precision, best.jit_compile, best.fused_steps) == ("float32", True, 8)
    # bf16 with XLA is measured, loses, and float32 with XLA stays: no second pass needed.
    seen = {(t.candidate.precision, t.candidate.jit_compile) for t in trials}
    assert ("mixed_bfloat16", True) in seen and len(trials) < len(space.grid())

    # When precision is set after XLA and changes the best, XLA is tried again at it.
    def rate2(c):
        xla, bf16 = c.jit_compile, c.precision == "mixed_bfloat16"
        return {(False, False): 100.0, (True, False): 150.0, (True, True): 180.0}.get(
            (xla, bf16), 400.0
        )

    trials, _ = en.search(rate2, space)
    best = en.choose(trials)
    assert (best.precision, best.jit_compile) == ("mixed_bfloat16", False)


def test_a_shorter_steps_per_execution_is_measured_only_where_it_could_win():
    space = en.Space(jit_compile=(False,), steps_per_execution=(1, 8, 32), fused_steps=(1,))

    def calls(overhead_ms):  # a 1 ms step and a call's fixed cost
        return lambda c: 1000.0 / (1.0 + overhead_ms / c.steps_per_execution)

    heavy, _ = en.search(calls(5.0), space)  # 32 -> 8 steps a call: ~11 % slower
    assert [t.candidate.steps_per_execution for t in heavy] == [1, 32]
    assert en.choose(heavy).steps_per_execution == 32
    light, _ = en.search(calls(0.05), space)  # 0.5 % slower, within the noise: measured
    assert [t.candidate.steps_per_execution for t in light] == [1, 32, 8]
    assert en.call_overhead(light[0], light[1]) == pytest.approx(0.05e-3, rel=1e-6)  # seconds


def test_a_failing_candidate_is_recorded_and_skipped():
    def measure(c):
        if c.jit_compile:
            raise RuntimeError("XLA is not available on this device\nmore detail")
        return fake_rates(c)

    trials, _ = en.search(measure, SPACE, budget_s=1e9)
    failed = [t for t in trials if t.error]
    assert failed and failed[0].error == "RuntimeError: XLA is not available on this device"
    assert failed[0].examples_per_sec is None
    assert en.choose(trials).jit_compile is False
    result = TuneResult(en.choose(trials), trials, "k", False, 1.0)
    assert "failed: RuntimeError: XLA is not available" in result.markdown()


def test_tune_result_took_says_how_many_candidates_an_early_end_tried():
    """A search that ended well inside its budget measured every candidate its space holds
    (your compiled model's: XLA and steps per execution where they could win): the first
    line says how many, so 5.7 s of a 40 s budget reads as a small space, not a lost one."""
    trials, _ = en.search(fake_rates, en.Space(jit_compile=(False, True), steps_per_execution=(1,),
                                               fused_steps=(1,)), budget_s=1e9)  # fmt: skip
    result = TuneResult(en.choose(trials), trials, "k", False, 5.7, budget_s=40.0)
    assert result.took() == "5.7 s of a 40 s budget: all 2 candidates tried"
    assert TuneResult(en.choose(trials), trials, "k", False, 41.0, budget_s=40.0).took() == (
        "41.0 s of a 40 s budget"
    )
    alone = TuneResult(trials[0].candidate, trials[:1], "k", False, 1.9, budget_s=40.0)
    assert alone.took() == "1.9 s of a 40 s budget: the defaults alone"  # nothing else to try


def test_the_budget_stops_the_search_but_the_defaults_are_always_measured():
    trials, exhausted = en.search(fake_rates, SPACE, budget_s=2.5, clock=Clock())
    assert exhausted and trials[0].candidate == en.Candidate() and len(trials) <= 3
    trials, exhausted = en.search(fake_rates, SPACE, budget_s=0.0, clock=Clock())
    assert exhausted and [t.candidate for t in trials] == [en.Candidate()]


def test_never_slower_than_the_defaults():
    d = en.Trial(en.Candidate(), 100.0, 1.0)
    slower = en.Trial(en.Candidate(jit_compile=True), 90.0, 1.0)
    noise = en.Trial(en.Candidate(steps_per_execution=8), 101.5, 1.0)
    faster = en.Trial(en.Candidate(fused_steps=8), 130.0, 1.0)
    assert en.choose([d, slower]) == en.Candidate()
    assert en.choose([d, slower, noise]) == en.Candidate()  # within 2 %: keep the defaults
    assert en.choose([d, slower, noise, faster]) == en.Candidate(fused_steps=8)
    failed_defaults = en.Trial(en.Candidate(), None, 1.0, "boom")
    assert en.choose([failed_defaults, slower]) == slower.candidate


def _noisy(true_rates, lucky):
    """Measurements of `true_rates` (label -> examples/s) where each candidate in `lucky` gets
    one window 40 % too fast (its first: the search's), as a busy neighbour can give."""
    seen = {}

    def measure(c):
        seen[c] = seen.get(c, 0) + 1
        rate = true_rates.get(c, 100.0)
        return rate * (1.4 if c in lucky and seen[c] == 1 else 1.0)

    return measure


def test_a_lucky_window_does_not_win_the_head_to_head():
    lucky = en.Candidate(fused_steps=8)  # really 2 % slower, but its one window was +40 %
    measure = _noisy({en.Candidate(): 100.0, lucky: 98.0}, {lucky})
    trials, _ = en.search(measure, SPACE, budget_s=1e9)
    assert en.choose(trials) == lucky  # one window each: fooled
    pick, rounds, why, exhausted = rd.confirm(measure, trials, budget_s=1e9)
    assert pick == en.Candidate() and rounds and not exhausted  # head to head: not fooled
    assert "defaults stay" in why
    defaults = trials[0]
    assert len(defaults.rates) == 1 + len(rounds) and defaults.spread() == "±0%"
    lucky_trial = next(t for t in trials if t.candidate == lucky)
    assert lucky_trial.spread() and lucky_trial.examples_per_sec == pytest.approx(98.0)


def test_a_real_gain_is_confirmed_and_its_spread_reported():
    modest = en.Candidate(jit_compile=True)
    measure = _noisy({en.Candidate(): 100.0, modest: 110.0}, set())
    trials, _ = en.search(measure, SPACE, budget_s=1e9)
    pick, rounds, why, _ = rd.confirm(measure, trials, budget_s=1e9)
    assert pick == modest
    assert 2 <= len(rounds) <= rd.MAX_ROUNDS and "won 2 of 2" in why  # +10 %: two rounds
    # A large gain, in the search and again head to head, needs one round only.
    measure = _noisy({en.Candidate(): 100.0, modest: 150.0}, set())
    big, _ = en.search(measure, SPACE, budget_s=1e9)
    pick, one, why_big, _ = rd.confirm(measure, big, budget_s=1e9)
    assert pick == modest and len(one) == 1 and "one round" in why_big
    result = TuneResult(pick, trials, "k", False, 1.0, False, rounds, why)
    table = result.markdown()
    assert "| spread | runs |" in table and "| head to head (paired) |" in table
    again = TuneResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.confirm_rounds == rounds and again.trials[0].rates == trials[0].rates


def test_one_round_is_enough_only_when_the_search_and_the_round_agree_on_the_order():
    a, b = en.Candidate(fused_steps=8), en.Candidate(jit_compile=True, fused_steps=8)
    # b's search window is the fastest, its first round window the slowest: two windows
    # that disagree on a and b are no verdict, however far both are ahead of the defaults.
    sequences = {en.Candidate(): [100.0] * 9, a: [300.0] * 9, b: [310.0, 200.0] + [290.0] * 7}

    def measure(c):
        return sequences.get(c, [50.0] * 9).pop(0)

    space = en.Space(jit_compile=(False, True), steps_per_execution=(1,), fused_steps=(1, 8))
    trials, _ = en.search(measure, space, budget_s=1e9)
    pick, rounds, why, _ = rd.confirm(measure, trials, budget_s=1e9)
    assert len(rounds) >= 2 and "one round" not in why and pick == a


def test_the_budget_is_a_promise_not_a_start_deadline():
    clock = Clock(step=0.0)

    def measure(c):
        clock.t += 4.0  # every candidate takes 4 s
        return fake_rates(c)

    space = en.Space(
        precision=("float32", "mixed_bfloat16"), steps_per_execution=(1, 8), fused_steps=(1, 8)
    )
    trials, exhausted = en.search(measure, space, budget_s=13.0, clock=clock)
    assert exhausted and len(trials) == 3 and clock.t <= 13.0  # a 4th would end at 16 s
    pick, rounds, _, out = rd.confirm(measure, trials, budget_s=13.0, clock=clock, spent_s=clock.t)
    assert out and not rounds and clock.t <= 13.0
    # Nothing confirmed: only a gain beyond UNCONFIRMED_GAIN in one window is taken.
    assert pick == en.choose(trials, rd.UNCONFIRMED_GAIN)


def test_the_first_xla_candidate_is_expected_to_cost_more_and_then_what_xla_cost():
    """XLA's compile is not known until an XLA candidate ran: the first is expected to cost
    XLA_FIRST_COST times the slowest candidate so far, and is not started where that would
    end past the budget; after one ran, XLA candidates are expected to cost what XLA did."""
    clock = Clock(step=0.0)
    cost = {False: 3.0, True: 12.0}  # a CNN here: graph trials 3 s, its XLA trial far more

    def measure(c):
        clock.t += cost[c.jit_compile]
        return fake_rates(c)

    # 6 s spent; the first XLA candidate is expected at 3 × 3 s: past a 14 s budget, so
    # it is not started, while the graph candidates after it (3 s) still are.
    trials, exhausted = en.search(measure, SPACE, budget_s=14.0, clock=clock)
    assert exhausted and clock.t <= 14.0 and len(trials) >= 3
    assert not any(t.candidate.jit_compile for t in trials)
    # With room for it, it runs (and wins); the next XLA candidate is then expected to take
    # 12 s too, and is not started past the budget.
    clock.t = 0.0
    trials, exhausted = en.search(measure, SPACE, budget_s=25.0, clock=clock)
    assert exhausted and clock.t == 18.0
    assert [t.candidate.jit_compile for t in trials] == [False, False, True]
    assert sum(en.expected_cost(en.Candidate(jit_compile=True), trials)) == 12.0


def test_a_candidate_the_budget_cannot_hold_is_left_untried_and_the_cheaper_ones_run():
    """The budget is spent on what fits: XLA's first compile is expected from the compiles
    measured (XLA_COMPILE_FACTOR times the longest), and its window from the others'. Where
    that does not fit, the search goes on with the cheaper candidates, and says what it left
    and the budget that would have tried it."""
    clock = Clock(step=0.0)
    compile_s = {False: 1.0, True: 6.0}  # a graph trace 1 s, XLA 6 s; each window 2 s

    def measure(c):
        clock.t += compile_s[c.jit_compile] + 2.0
        return fake_rates(c)

    space = en.Space(jit_compile=(False, True), steps_per_execution=(1, 8), fused_steps=(1,))
    compiles = {False: 1.0, True: 6.0}
    trials, untried = en.search(
        measure, space, budget_s=8.0, clock=clock,
        compile_of=lambda c: compiles[c.jit_compile],
    )  # fmt: skip
    # Defaults (3 s) and spe=8 (3 s) fit; XLA, expected at 4 × 1 s + 2 s, does not.
    assert [t.candidate.jit_compile for t in trials] == [False, False] and clock.t == 6.0
    assert [u.candidate.jit_compile for u in untried] == [True]
    (xla,) = untried
    assert (xla.compile_s, xla.needs_s, xla.spent_s) == (4.0, 6.0, 6.0)
    assert xla.budget_s() == 12.0  # what would have started it
    # With a budget that holds it, it runs, and is then expected to cost what it took.
    clock.t = 0.0
    trials, untried = en.search(
        measure, space, budget_s=60.0, clock=clock,
        compile_of=lambda c: compiles[c.jit_compile],
    )  # fmt: skip
    assert not untried and any(t.candidate.jit_compile for t in trials)
    assert en.expected_cost(en.Candidate(jit_compile=True), trials) == (6.0, 2.0)


def test_a_candidate_whose_window_does_not_fit_is_sampled_over_a_shorter_one():
    clock = Clock(step=0.0)
    sampled = []

    def measure(c):
        clock.t += 1.0 + 8.0  # 1 s compile, 8 s window
        return fake_rates(c)

    def sample(c, window_s):
        sampled.append((c, window_s))
        clock.t += 1.0 + window_s
        return fake_rates(c)

    space = en.Space(jit_compile=(False,), steps_per_execution=(1, 8), fused_steps=(1,))
    trials, untried = en.search(
        measure, space, budget_s=14.0, clock=clock, compile_of=lambda c: 1.0, sample=sample
    )
    # 9 s spent: spe=8's 9 s does not fit the 5 s left, a 4 s window (half of 8 s) does.
    assert not untried and [c.steps_per_execution for c, _ in sampled] == [8]
    assert sampled[0][1] == 4.0 and trials[1].sampled and not trials[0].sampled
    assert clock.t <= 14.0
    # A window under SAMPLE_SHARE of the usual is no measurement: left untried.
    clock.t, sampled[:] = 0.0, []
    trials, untried = en.search(
        measure, space, budget_s=11.5, clock=clock, compile_of=lambda c: 1.0, sample=sample
    )
    assert not sampled and len(untried) == 1 and len(trials) == 1


def test_the_rounds_reserve_is_spent_on_the_search_only_while_nothing_beats_the_defaults():
    clock = Clock(step=0.0)

    def measure(c):
        clock.t += 4.0
        return 100.0 if c == en.Candidate() else 90.0  # nothing beats the defaults

    space = en.Space(jit_compile=(False, True), steps_per_execution=(1, 8), fused_steps=(1,))
    free = {"compile_of": lambda c: 0.0, "clock": clock, "budget_s": 12.0, "reserve_s": 6.0}
    trials, untried = en.search(measure, space, **free)
    assert len(trials) == 3 and not untried  # no round to hold time for: all 12 s searched

    def winning(c):  # spe=8 beats the defaults: 6 s are kept for the rounds
        clock.t += 4.0
        return fake_rates(c)

    clock.t = 0.0
    trials, untried = en.search(winning, space, **free)
    assert clock.t == 8.0 and untried and all(u.reserve_s == 6.0 for u in untried)
    assert all(u.budget_s() == 18.0 for u in untried)


def test_nothing_beat_the_defaults_is_said_only_when_something_was_measured_against_them():
    alone = [en.Trial(en.Candidate(), 100.0, 1.0)]
    assert rd.confirm(lambda c: 100.0, alone, budget_s=1e9)[2] == "only the defaults were measured"
    failed = [*alone, en.Trial(en.Candidate(jit_compile=True), None, 1.0, "XlaRuntimeError")]
    said = rd.confirm(lambda c: 100.0, failed, budget_s=1e9)[2]
    assert said == "only the defaults were measured (1 other setting(s) failed)"
    slower = [*alone, en.Trial(en.Candidate(jit_compile=True), 90.0, 1.0)]
    assert rd.confirm(lambda c: 100.0, slower, budget_s=1e9)[2] == (
        "nothing beat the defaults in the search"
    )


def test_window_steps_time_at_least_three_whole_calls():
    warmup, total = en.window_steps(en.Candidate(steps_per_execution=8, fused_steps=4), 48)
    assert warmup == 32 and total % 32 == 0 and total - 2 * 32 >= 3 * 32
    # A call as long as the window: its first call is warm-up enough.
    warmup, total = en.window_steps(en.Candidate(steps_per_execution=8, fused_steps=32), 48, 1)
    assert warmup == 0 and total == 2 * 256


def test_rounds_rotate_the_order_and_stop_on_the_budget_or_when_settled():
    clock = Clock()
    order = []

    def measure(entrant, r):
        order.append((r, entrant))
        if entrant == "flaky" and r == 1:
            raise RuntimeError("one bad run")
        return 1.0

    rounds, exhausted = rd.interleaved_rounds(
        ["a", "b", "flaky"], measure, max_rounds=3, clock=clock
    )
    assert not exhausted and len(rounds) == 3
    assert [e for r, e in order if r == 1] == ["b", "flaky", "a"]  # rotated by one
    assert "flaky" not in rounds[1] and rounds[2]["flaky"] == 1.0  # a raise: no result, no crash
    # A round that would end past the budget is not started; the first may be exempt (None).
    rounds, exhausted = rd.interleaved_rounds(
        ["a", "b"], lambda e, r: 1.0, max_rounds=5, budget_s=20,
        round_cost=lambda r: None if r == 0 else 20.0, clock=Clock(step=5.0),
    )  # fmt: skip
    assert exhausted and len(rounds) == 1
    rounds, _ = rd.interleaved_rounds(
        ["a"], lambda e, r: 1.0, max_rounds=5, settled=lambda done: len(done) == 2
    )
    assert len(rounds) == 2


def test_decide_needs_the_median_gain_and_most_rounds_won():
    rounds = [{"d": 100.0, "x": 110.0, "y": 150.0}, {"d": 100.0, "x": 111.0, "y": 90.0},
              {"d": 100.0, "x": 109.0, "y": 95.0}]  # fmt: skip
    verdict = rd.decide("d", ["x", "y"], rounds)
    assert verdict.pick == "x" and verdict.won and verdict.wins == 3 and verdict.rounds == 3
    assert rd.paired_ratios(rounds, "d", "y") == [1.5, 0.9, 0.95]  # y lost most rounds
    close = [{"d": 100.0, "x": 101.0}, {"d": 100.0, "x": 101.5}]
    verdict = rd.decide("d", ["x"], close)  # won every round, by less than MIN_GAIN
    assert verdict.pick == "d" and verdict.leader == "x" and not verdict.won
    assert rd.decide("d", ["x"], rounds, eligible=lambda e: e != "x").leader is None
    # Speeds from step times: the lower time is the faster.
    times = [{"d": {"mean_s": 0.02}, "x": {"mean_s": 0.01}}]
    assert rd.decide("d", ["x"], times, speed=lambda f: 1 / f["mean_s"]).ratio == 2.0


def test_the_cache_is_keyed_by_facts_and_a_bad_file_is_a_miss(tmp_path, monkeypatch):
    from toolkit.core.cache import Cache

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    cache = Cache("answers.json")
    key = cache.key({"model": "m", "cpu": "x"})
    assert key == cache.key({"cpu": "x", "model": "m"}) != cache.key({"model": "n", "cpu": "x"})
    assert cache.get(key) is None and list(cache.entries()) == []
    assert cache.put(key, {"model": "m"}, {"best": 1})
    assert cache.get(key) == {"best": 1}
    (entry,) = cache.entries()
    assert entry["facts"] == {"model": "m"} and entry["stored"] > 0
    (tmp_path / "cache" / "answers.json").write_text("{not json")
    assert cache.get(key) is None  # a corrupt file is a miss, not an error
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(blocked / "sub"))
    assert cache.put(key, {}, {"best": 2}) is False  # a read-only cache is skipped


def test_the_knobs_derive_from_the_settings_table():
    """A searched setting is declared once, in the settings table, with how tune searches it:
    the candidate's field and default, its label, its flag, whether it is a compile argument,
    and its axis in the space all come from there (here with --compile_cache as one more)."""
    from toolkit.runner.config import SEARCHED, SEARCHED_SETTINGS, SearchContext, Searched

    assert [name for name, _ in en.Candidate.SEARCHED] == list(SEARCHED)
    c = en.Candidate(jit_compile=True, steps_per_execution=8)
    assert c.flags() == "--precision=float32 --jit_compile --steps_per_execution=8 --fused_steps=1"
    assert c.label() == "float32 xla spe=8 fused=1"
    assert c.compile_kwargs() == {"jit_compile": True, "steps_per_execution": 8}
    assert en.Space().defaults() == en.Candidate()
    # One more searched setting: a field of the table (here --compile_cache) with how.
    extra = Searched(
        lambda ctx: (False, True) if ctx is None or not ctx.step_s else (False,),
        lambda v: "cached" if v else None,
        default=False,
    )
    candidate, space = en.knob_types([*SEARCHED_SETTINGS, ("compile_cache", extra)])
    k = candidate(compile_cache=True)
    assert k.compile_cache is True and candidate().compile_cache is False
    assert k.label().endswith(" cached") and candidate().label() == en.Candidate().label()
    assert k.flags().endswith("--compile_cache") and candidate().flags().endswith(
        "--nocompile_cache"
    )
    assert "compile_cache" not in k.compile_kwargs()  # not a model.compile argument
    assert space().compile_cache == (False, True)
    small = space(jit_compile=(False,), steps_per_execution=(1,), fused_steps=(1,))
    assert {c.compile_cache for c in small.grid()} == {False, True}
    assert extra.values(SearchContext(step_s=0.5)) == (False,)


def test_the_tune_table_names_each_row_by_what_it_changes_and_fits_80_columns():
    """A row is named by what it changes from the defaults (``xla fused=32``), the defaults'
    row as ``defaults``, spelled out under the table: full labels in every row wrapped each to
    four lines at 80 columns, the defaults' own one word a line beside short changes, and the
    note column repeated the table's own row names in a second table."""
    from dataclasses import replace

    from toolkit.core import terminal
    from toolkit.search._tune_screen import defaults_line, table

    defaults = en.Candidate(precision="float32", jit_compile=False, steps_per_execution=1,
                            fused_steps=1)  # fmt: skip
    pick = en.Candidate(precision="float32", jit_compile=True, steps_per_execution=1,
                        fused_steps=32)  # fmt: skip
    other = en.Candidate(precision="mixed_bfloat16", jit_compile=True, steps_per_execution=1,
                         fused_steps=8)  # fmt: skip
    trials = [en.Trial(defaults, 44_093.5, 1.0), en.Trial(pick, 369_108.7, 1.0),
              en.Trial(other, 134_764.1, 1.0)]  # fmt: skip
    shown = terminal.show(table(trials, pick, []), 80).splitlines()
    assert all(len(line) <= 80 for line in shown), shown
    assert sum(1 for line in shown if line.startswith("─")) == 1, shown  # one table
    rows = [line for line in shown if "examples" not in line and "×" in line]
    assert rows[0].startswith("xla fused=32 ") and rows[0].rstrip().endswith("chosen"), rows
    assert rows[1].startswith("mixed_bfloat16 ") and rows[2].startswith("defaults "), rows
    assert len(shown) <= 4 + 2 * len(trials) + 2, shown  # a header and at most 2–3 lines a row
    short = [en.Trial(defaults, 1_268.8, 1.0), en.Trial(replace(defaults, steps_per_execution=4),
             1_345.2, 1.0)]  # fmt: skip
    shown = terminal.show(table(short, short[1].candidate, []), 80).splitlines()
    row = [line for line in shown if "1,268.8" in line]  # the defaults' row, beside "spe=4"
    assert row[0].startswith("defaults ") and shown[-1] == row[0], shown  # on one line
    assert defaults_line(defaults) == (
        "defaults: the float32 precision policy, jit_compile=False, steps_per_execution=1, no "
        "fused steps"
    )
