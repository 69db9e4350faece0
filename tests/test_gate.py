"""The gate's verdict rule (pytest_attn.verdicts.rule) on synthetic runs with known noise -- a 5 % shift
at the recorded noise is SLOWER, an A/A pair is SAME, overlapping evidence is AMBIGUOUS, a change
that vanishes in clock cycles is CLOCK, a SAME hidden by a faster clock is AMBIGUOUS -- and on a
recorded H200 run (tests/data: four results of the smoke profile, recorded before the result record
existed: legacy runs must still gate)."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from pathlib import Path

import pytest

from pytest_attn.core.stats import relative_precision
from pytest_attn.verdicts.reports import explain, headline
from pytest_attn.verdicts.rule import (
    FLOOR,
    Noise,
    Thresholds,
    compare,
    matched,
    parse_fraction,
    parse_override,
    regressions,
    verdict,
)
from pytest_attn.verdicts.runs import Bench, benches
from pytest_attn.verdicts.verdict import DEFAULT_FAIL_ON, parse_fail_on

RECORDED = Path(__file__).parent / "data" / "h200_smoke_subset.json"
HUNYUAN = "test_prefill[flash-attn-hunyuan-video-bf16-full-fwd]"
DECODE = "test_decode[flash-attn-kvcache-qwen2.5-7b-decode-k4096-bf16-causal-fwd]"


# ---- the rule ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "sigma", "expected"), [
    (0.0, 0.005, "SAME"),
    (0.05, 0.005, "SLOWER"),  # a 5 % shift at 0.5 % noise
    (0.05, 0.01, "SLOWER"),  # 5 % > 3 sigma = 3 %
    (-0.05, 0.01, "FASTER"),
    (0.02, 0.005, "SAME"),  # real but under half the threshold, and 2 % + 1.5 % rules out 5 %
    (0.03, 0.005, "SLOWER"),  # over half the threshold and over 3 sigma
    (0.03, 0.02, "AMBIGUOUS"),  # over half the threshold, within 3 sigma = 6 %
    (0.0, 0.02, "AMBIGUOUS"),  # no change seen, but 6 % of noise cannot rule out 5 %
    (0.01, 0.012, "SAME"),  # 1 % + 3.6 % < 5 %: a change of 5 % is ruled out
    (0.01, 0.014, "AMBIGUOUS"),  # 1 % + 4.2 % >= 5 %: it is not
])
def test_the_rule(change, sigma, expected):
    assert verdict(change, sigma, 0.05) == expected


def _samples(rng: random.Random, median: float, spread: float, n: int = 40) -> list[float]:
    """``n`` samples around ``median`` with a relative standard deviation of ``spread`` (a skewed tail,
    as GPU times have)."""
    return [median * (1 + rng.gauss(0, spread) + abs(rng.gauss(0, spread / 2))) for _ in range(n)]


def _bench(rng: random.Random, name: str, true_s: float, between: float, *, repeats: int = 1, within: float = 0.01,
           clock: float | None = None) -> Bench:
    """One run's view of a case whose true time is ``true_s``: each repeat's median moves by the
    between-run noise, and its samples scatter by ``within``."""
    medians, precision = [], 0.0
    for _ in range(repeats):
        samples = _samples(rng, true_s * (1 + rng.gauss(0, between)), within)
        medians.append(sorted(samples)[len(samples) // 2])
        precision = relative_precision(samples)
    median = sorted(medians)[len(medians) // 2]
    return Bench(name, "g", "b", median, precision, repeats_s=tuple(medians) if repeats > 1 else (),
                 sm_clock_mhz=clock, stop_reason="precision")


def _pairs(shift: float, between: float, cases: int = 400, seed: int = 0) -> list[str]:
    """Verdicts of ``cases`` synthetic cases: a baseline of 3 repeats, then one run ``shift`` slower."""
    rng = random.Random(seed)
    base, cur = {}, {}
    for i in range(cases):
        true_s = 1e-3 * (1 + i % 7)
        base[f"c{i}"] = _bench(rng, f"c{i}", true_s, between, repeats=3)
        cur[f"c{i}"] = _bench(rng, f"c{i}", true_s * (1 + shift), between)
    return [c.verdict for c in compare(base, cur, Thresholds())]


def test_at_low_noise_an_a_a_pair_is_same_and_a_five_percent_shift_is_slower_every_time():
    found = _pairs(0.0, 0.003)
    assert found.count("SAME") == len(found)
    assert _pairs(0.05, 0.003).count("SLOWER") == len(found)


def test_at_wider_noise_false_alarms_stay_rare_and_a_five_percent_shift_is_never_same():
    """0.7 % between-run noise per run (a 3-repeat baseline estimates it roughly): the rule trades a few
    AMBIGUOUS for almost no false SLOWER."""
    found = _pairs(0.0, 0.007)
    assert found.count("SLOWER") + found.count("FASTER") <= 0.01 * len(found)
    assert found.count("SAME") >= 0.9 * len(found)
    shifted = _pairs(0.05, 0.007)
    assert shifted.count("SLOWER") >= 0.95 * len(shifted) and "SAME" not in shifted


def test_a_shift_under_the_threshold_is_not_called_faster():
    found = _pairs(0.03, 0.003)
    assert "FASTER" not in found and found.count("SLOWER") > found.count("SAME")


def test_noise_is_measured_from_repeats_with_a_floor_or_assumed_without():
    rng = random.Random(1)
    quiet = {f"c{i}": _bench(rng, f"c{i}", 1e-3, 0.0, repeats=3, within=0.0001) for i in range(5)}
    noise = Noise.of(quiet, {})
    assert noise.pooled is not None and noise.between(quiet["c0"], quiet["c0"]) == FLOOR
    plain = {"c": Bench("c", "g", "b", 1e-3, 0.001)}
    assert Noise.of(plain, plain).between(plain["c"], plain["c"]) == 0.01
    assert "assumed 1.0%" in Noise.of(plain, plain).describe()
    assert Noise.of(plain, plain, cpu=True).between(plain["c"], plain["c"]) == 0.05


def test_on_a_cpu_every_case_takes_the_largest_spread():
    """The 2-core CI VM, CPU profile, 3-run baseline: the cases' medians spread 0.2 % to 26 % (one case's
    repeats 3.9, 6.1, 4.0 ms), and clean reruns moved cases whose own repeats agreed by +40 to +67 %.
    Pooled by the median that was SLOWER; pooled by the largest spread it is AMBIGUOUS, while 300 %
    is still SLOWER."""
    base = {f"c{i}": Bench(f"c{i}", "g", "b", 1e-3, 0.01, repeats_s=(1e-3, 1.002e-3, 0.998e-3)) for i in range(19)}
    base["jumpy"] = Bench("jumpy", "g", "b", 4.0e-3, 0.01, repeats_s=(3.945e-3, 6.067e-3, 3.998e-3))
    cur = {name: Bench(name, "g", "b", b.median_s, 0.01) for name, b in base.items()}
    cur["c0"] = Bench("c0", "g", "b", 1.45e-3, 0.01)  # a clean rerun's jump
    median_pooled = compare(base, cur, Thresholds(), Noise.of(base, cur))  # as on a GPU
    worst = Noise.of(base, cur, cpu=True)
    assert worst.pooled == pytest.approx(0.259, abs=0.001) and "the largest of any case" in worst.describe()
    assert {c.name: c.verdict for c in median_pooled}["c0"] == "SLOWER"
    assert {c.name: c.verdict for c in compare(base, cur, Thresholds(), worst)}["c0"] == "AMBIGUOUS"
    cur["c0"] = Bench("c0", "g", "b", 4e-3, 0.01)  # 300 % injected
    assert {c.name: c.verdict for c in compare(base, cur, Thresholds(), worst)}["c0"] == "SLOWER"


# ---- clocks and convergence ----------------------------------------------------------------------
def test_a_slowdown_that_vanishes_in_cycles_is_a_clock_effect():
    base = {"c": Bench("c", "g", "b", 1e-3, 0.002, repeats_s=(1e-3, 1.001e-3, 0.999e-3), sm_clock_mhz=1980)}
    clocked_down = {"c": Bench("c", "g", "b", 1.08e-3, 0.002, sm_clock_mhz=1980 / 1.08)}
    [c] = compare(base, clocked_down, Thresholds())
    assert c.verdict == "CLOCK" and c.cycles_change == pytest.approx(0.0, abs=1e-9)
    assert "the SM clock moved -7.4% (1980 -> 1833 MHz), so the GPU ran slower, not the code" in c.notes[0]
    real = {"c": Bench("c", "g", "b", 1.08e-3, 0.002, sm_clock_mhz=1980)}
    assert compare(base, real, Thresholds())[0].verdict == "SLOWER"
    assert not regressions(compare(base, clocked_down, Thresholds()))  # CLOCK fails only when asked
    assert regressions(compare(base, clocked_down, Thresholds()), ("SLOWER", "CLOCK"))


def test_a_clock_that_carries_a_small_change_over_the_line_says_the_code_moved_too():
    """H200, 3 % injected: +3.0 % in time, +2.2 % in cycles at noise +-1.1 %: CLOCK, but not "not the code"."""
    base = {"c": Bench("c", "g", "b", 1e-3, 0.0005, repeats_s=(1e-3, 1e-3, 1e-3), sm_clock_mhz=1950)}
    cur = {"c": Bench("c", "g", "b", 1.03e-3, 0.0005, sm_clock_mhz=1950 * 1.022 / 1.03)}
    [c] = compare(base, cur, Thresholds())
    assert c.verdict == "CLOCK" and c.in_time == "SLOWER"
    assert c.cycles_change == pytest.approx(0.022)
    assert "not the code" not in c.notes[0] and "under the 2.5% that counts as slower" in c.notes[0]


def test_a_faster_clock_hiding_a_slower_kernel_is_not_same():
    """The code 5 % slower, the clock 4.5 % faster: +0.5 % in time is SAME by time alone; in cycles it
    is +5 %, so the verdict is AMBIGUOUS, with the clock named and no advice to add repeats."""
    base = {"c": Bench("c", "g", "b", 1e-3, 0.002, repeats_s=(1e-3, 1.001e-3, 0.999e-3), sm_clock_mhz=1890)}
    hidden = {"c": Bench("c", "g", "b", 1.005e-3, 0.002, sm_clock_mhz=1890 * 1.05 / 1.005)}
    [c] = compare(base, hidden, Thresholds())
    assert (c.in_time, c.verdict) == ("SAME", "AMBIGUOUS")
    assert "SAME in time (+0.5%) but +5.0% in clock cycles" in c.notes[0] and "faster clock can hide" in c.notes[0]
    assert "add repeats" not in explain(c)
    steady = {"c": Bench("c", "g", "b", 1.005e-3, 0.002, sm_clock_mhz=1890)}
    assert compare(base, steady, Thresholds())[0].verdict == "SAME"


def test_only_a_clock_that_rose_can_hide_a_slowdown():
    """The cycle check of a SAME is for slowdowns a faster clock hides: a clock under one step (1 %)
    higher, or a lower clock (a hidden speedup), leaves SAME alone."""
    base = {"c": Bench("c", "g", "b", 1e-3, 0.002, repeats_s=(1e-3, 1.001e-3, 0.999e-3), sm_clock_mhz=1890)}

    def now(time_s: float, clock: float) -> str:
        return compare(base, {"c": Bench("c", "g", "b", time_s, 0.002, sm_clock_mhz=clock)}, Thresholds())[0].verdict

    assert now(1.005e-3, 1890 * 1.045) == "AMBIGUOUS"  # +0.5 % in time, +5 % in cycles: the clock rose 4.5 %
    assert now(1.018e-3, 1890 * 1.009) == "SAME"  # +2.7 % in cycles, SLOWER there, but the clock rose under a step
    assert now(0.995e-3, 1890 * 0.955) == "SAME"  # -5 % in cycles at a slower clock: a speedup, not hidden harm


def test_a_clock_fallen_under_the_power_cap_is_not_called_the_gpus_doing():
    """H200, 5 % injected: +6.0 % in time, +2.0 % in cycles, the clock 1980 -> 1905 MHz with every sample
    at the power cap -- the injected matmuls' own power draw. CLOCK, naming both readings and the flag."""
    from factories import record

    from pytest_attn.core.record import Clocks
    from pytest_attn.core.throttle import ThrottleReport

    base = {"c": Bench("c", "g", "b", 1e-3, 0.002, repeats_s=(1e-3, 1e-3, 1e-3), sm_clock_mhz=1980,
                       repeats_clock_mhz=(1980, 1980, 1980))}
    capped = record("flash-attn", 1.06e-3)
    capped = dataclasses.replace(capped, clocks=Clocks(1905, 1890, 1920, "not locked",
                                                       ThrottleReport(10, 10, {"power cap": 10})))
    [c] = compare(base, {"c": Bench("c", "g", "b", 1.06e-3, 0.002, record=capped, sm_clock_mhz=1905)}, Thresholds())
    assert c.verdict == "CLOCK"
    assert "with 10 of 10 samples at the power cap: either the GPU ran slower, or this code draws" in c.notes[0]
    assert "not the code" not in c.notes[0] and "--attn-fail-on=slower,clock" in c.notes[0]
    assert regressions([c], parse_fail_on("slower,clock"))


def _capped_run(time_s: float, clock: float, capped: int = 10) -> dict[str, Bench]:
    """A run of case "c" at ``clock`` MHz with ``capped`` of 10 samples at the power cap."""
    from factories import record

    from pytest_attn.core.record import Clocks
    from pytest_attn.core.throttle import ThrottleReport

    r = dataclasses.replace(record("fa4", time_s), clocks=Clocks(
        clock, clock, clock, "not locked", ThrottleReport(10, capped, {"power cap": capped} if capped else {})))
    return {"c": Bench("c", "g", "fa4", time_s, 0.002, record=r, sm_clock_mhz=clock)}


def test_at_the_power_cap_a_slowdown_with_cycles_not_ruled_out_is_clock_naming_both_readings():
    """H200s outside the baseline, FA4 Llama-3-8B prefill fwd at the power cap: unchanged code read +5.4 % in time,
    +2.6 % in cycles, the clock 2.4 % lower; with 5 % injected, +7.7 % and +4.0 %, the clock 3.5 % lower. The
    cycles cannot tell the two apart, so neither is SLOWER (calling both SLOWER failed the unchanged run): CLOCK,
    whose note names both readings and how to gate them. Off the cap, a clock fall alone is CLOCK too."""
    reps = (1e-3, 1.012e-3, 0.988e-3)
    base = {"c": Bench("c", "g", "fa4", 1e-3, 0.002, repeats_s=reps, sm_clock_mhz=1845,
                       repeats_clock_mhz=(1845,) * 3)}
    for time, cycles in ((1.054e-3, 0.026), (1.077e-3, 0.040)):
        [c] = compare(base, _capped_run(time, 1845 * (1 + cycles) / (time / 1e-3)), Thresholds())
        assert (c.in_time, c.verdict) == ("SLOWER", "CLOCK") and c.cycles_change == pytest.approx(cycles)
        assert verdict(c.cycles_change, c.noise / 3, 0.05) == "AMBIGUOUS"
        assert "of 10 samples at the power cap: either the GPU ran slower, or this code draws more" in c.notes[0]
        assert "--attn-fail-on=slower,clock" in c.notes[0]
    uncapped = compare(base, _capped_run(1.077e-3, 1845 * 1.04 / 1.077, capped=0), Thresholds())[0]
    assert uncapped.verdict == "CLOCK" and "power cap" not in uncapped.notes[0]


def _run_at(time_s: float, clock: float, case: str = "compute") -> dict[str, Bench]:
    """A run of case "c" at ``clock`` MHz: GPT-2's prefill (bound by compute) or a decode step (by memory)."""
    from factories import dense, record

    shape = dense("fa4", sq=1, sk=4096, hq=32, hkv=8, d=128) if case == "memory" else None
    r = record("fa4", time_s, case=shape, clocks=(round(clock),))
    assert r.figures.bound == case
    return {"c": Bench("c", "g", "fa4", time_s, 0.002, record=r, sm_clock_mhz=clock)}


def test_a_compute_bound_case_slower_in_time_at_a_faster_clock_is_slower_when_its_cycles_are():
    """An H200 outside the baseline, 5 % injected: FA4's Llama-3-8B prefill read +3.2 % in time against a band of
    4.2 %, its clock 1845 -> 1905 MHz, +5.4 % in cycles: AMBIGUOUS, the faster clock hiding the work. A
    compute-bound case that rose by half the threshold in time at a faster clock is judged by its cycles; a
    memory-bound one, whose cycles follow the clock without its time, and a rise under half the threshold are not."""
    base = {"c": Bench("c", "g", "fa4", 1e-3, 0.002, repeats_s=(1e-3, 1.018e-3, 0.982e-3), sm_clock_mhz=1845,
                       repeats_clock_mhz=(1845,) * 3)}
    [c] = compare(base, _run_at(1.032e-3, 1905), Thresholds())
    assert (c.in_time, c.verdict) == ("AMBIGUOUS", "SLOWER") and c.cycles_change == pytest.approx(0.0656, abs=0.001)
    assert "bound by compute, so it took longer at a faster clock" in c.notes[0]
    assert compare(base, _run_at(1.032e-3, 1905, "memory"), Thresholds())[0].verdict == "AMBIGUOUS"
    under_half = compare(base, _run_at(1.02e-3, 1980), Thresholds())[0]
    in_cycles = verdict(under_half.cycles_change, under_half.noise / 3, 0.05)
    assert (under_half.verdict, in_cycles) == ("AMBIGUOUS", "SLOWER")
    same_clock = compare(base, _run_at(1.032e-3, 1845), Thresholds())[0]
    assert same_clock.verdict == "AMBIGUOUS"


def test_with_clocks_moving_between_runs_an_a_a_pair_stays_same():
    """Clocks recorded on both sides, each run's clock 0.5 % off at random, the time following it: the
    cycle check costs an A/A pair no SAME, and a 5 % slowdown at a 4 % faster clock is never SAME."""
    rng = random.Random(3)
    base, same, hidden = {}, {}, {}
    for i in range(200):
        name = f"c{i}"
        clocks = [1900 * (1 + rng.gauss(0, 0.005)) for _ in range(3)]
        b = _bench(rng, name, 1e-3 * 1900 / clocks[1], 0.003, repeats=3, clock=clocks[1])
        base[name] = b
        now = 1900 * (1 + rng.gauss(0, 0.005))
        same[name] = _bench(rng, name, 1e-3 * 1900 / now, 0.003, clock=now)
        hidden[name] = _bench(rng, name, 1.05e-3 * 1900 / (now * 1.04), 0.003, clock=now * 1.04)
    assert [c.verdict for c in compare(base, same, Thresholds())].count("SAME") == len(base)
    assert "SAME" not in [c.verdict for c in compare(base, hidden, Thresholds())]


def test_a_case_that_did_not_converge_says_so():
    base = {"c": Bench("c", "g", "b", 1e-3, 0.002, repeats_s=(1e-3, 1e-3, 1e-3))}
    capped = {"c": Bench("c", "g", "b", 1e-3, 0.008, stop_reason="time-cap")}
    [c] = compare(base, capped, Thresholds())
    assert c.notes == ("this run did not converge (time cap; its median's 95% CI is +-0.8%)",)


# ---- fail-on, thresholds, matches ----------------------------------------------------------------
def test_fail_on_names_verdicts():
    assert parse_fail_on("slower,missing") == ("SLOWER", "MISSING")
    with pytest.raises(ValueError, match="give one or more of slower, timer, missing, clock, ambiguous, faster"):
        parse_fail_on("worse")


@pytest.fixture
def run():
    return json.loads(RECORDED.read_text())


def _scale(run, name, factor, precision=None):
    out = copy.deepcopy(run)
    for b in out["benchmarks"]:
        if name in b["fullname"]:
            b["stats"]["median"] *= factor
            if precision is not None:
                b["extra_info"]["precision"] = precision
    return out


def _verdicts(base, cur, thresholds=None):
    return {c.name.split("::")[-1]: c.verdict for c in compare(benches(base), benches(cur), thresholds or Thresholds())}


def test_a_legacy_run_gates_with_the_assumed_noise(run):
    assert set(_verdicts(run, copy.deepcopy(run)).values()) == {"SAME"}
    v = _verdicts(run, _scale(run, HUNYUAN, 1.08))  # +8 % against 3 x sqrt(2) x 1 % assumed
    assert v[HUNYUAN] == "SLOWER" and list(v.values()).count("SAME") == 3
    assert _verdicts(run, _scale(run, DECODE, 0.9))[DECODE] == "FASTER"
    noisy = _scale(run, HUNYUAN, 1.0, precision=0.05)
    assert _verdicts(noisy, _scale(run, HUNYUAN, 1.08, precision=0.05))[HUNYUAN] == "AMBIGUOUS"


def test_new_and_missing(run):
    fewer = copy.deepcopy(run)
    fewer["benchmarks"] = [b for b in fewer["benchmarks"] if DECODE not in b["fullname"]]
    assert _verdicts(fewer, run)[DECODE] == "NEW"
    assert _verdicts(run, fewer)[DECODE] == "MISSING"
    comparisons = compare(benches(run), benches(fewer), Thresholds())
    assert not regressions(comparisons, ("SLOWER", "TIMER")) and len(regressions(comparisons)) == 1  # MISSING fails
    assert matched(comparisons) == 3


def test_thresholds_per_backend_and_group(run):
    slower = _scale(run, HUNYUAN, 1.08)
    loose = Thresholds.build(0.05, [parse_override("backend:flash-attn=20%")])
    assert _verdicts(run, slower, loose)[HUNYUAN] == "SAME"
    group = next(b["group"] for b in run["benchmarks"] if HUNYUAN in b["fullname"])
    tight = Thresholds.build(0.3, [parse_override(f"group:{group}=5%")])
    assert _verdicts(run, slower, tight)[HUNYUAN] == "SLOWER"
    assert parse_fraction("5%") == parse_fraction("0.05") == 0.05
    with pytest.raises(ValueError, match="must look like backend:NAME=10%"):
        parse_override("flex=10%")
    with pytest.raises(ValueError, match="is not a number or a percentage"):
        parse_fraction("fast")


def test_spread_falls_back_to_the_iqr_without_pytest_attn_precision(run):
    plain = copy.deepcopy(run)
    for b in plain["benchmarks"]:
        del b["extra_info"]["precision"]
    e = benches(plain)[next(iter(benches(plain)))]
    b = next(x for x in plain["benchmarks"] if x["fullname"] == e.name)
    assert e.spread == pytest.approx(b["stats"]["iqr"] / 2 / b["stats"]["median"])


def test_a_threshold_override_must_name_a_known_back_end():
    t = Thresholds.build(0.05, [parse_override("backend:fa9=5%"), parse_override("backend:flex=10%")])
    assert t.unknown(["flex", "flash-attn"]) == ["backend:fa9"]


def test_records_are_read_back_from_a_run_and_legacy_runs_still_gate(run):
    from factories import record

    from pytest_attn.plugin.benchjson import benchmark_entry

    r = record("flash-attn", 1e-3, test="suites/test_prefill.py::test_prefill[x]", precision=0.02)
    new = {"benchmarks": [benchmark_entry(r)]}
    read = benches(new)[r.name]
    assert read.record == r and read.spread == 0.02 and read.backend == "flash-attn" and read.median_s == 1e-3
    assert read.sm_clock_mhz == 1980 and read.stop_reason == "precision"
    legacy = benches(run)  # flat extra_info, written before the record existed: no record, still a median
    assert all(b.record is None and b.median_s > 0 and b.backend for b in legacy.values())


def _timed(median_s: float, timer: str = "kernel-sum", calls: int = 8, test: str = "suite::case"):
    from factories import record

    r = record("sdpa-cudnn", median_s, timer=timer, test=test)
    return dataclasses.replace(r, timing=dataclasses.replace(r.timing, calls_per_sample=calls))


@pytest.mark.parametrize("change", [0.0, 0.004, 1.5466, -0.4])
@pytest.mark.parametrize("timer, calls", [("cuda-event", 1), ("kernel-sum", 1), ("kernel-sum", 16), ("cuda-graph", 8)])
def test_medians_of_two_timers_are_never_compared(change, timer, calls):
    """On an H100 a clean rerun read a cuDNN fwd+bwd step at 506.59 us by events against the baseline's 198.99 us
    by kernel-sum x8 (+154.6 %, SLOWER); any other timer or calls per sample is TIMER, never SAME, SLOWER or
    FASTER -- whatever the medians say -- and fails the run by default, saying what differs and what to do."""
    from pytest_attn.verdicts.runs import bench_of

    base = {"suite::case": bench_of(_timed(198.99e-6))}
    cur = {"suite::case": bench_of(_timed(198.99e-6 * (1 + change), timer, calls))}
    (c,) = compare(base, cur, Thresholds())
    assert c.verdict == "TIMER" and c.verdict in DEFAULT_FAIL_ON
    assert f"the baseline timed it by kernel-sum x8 (2 input set(s)), this run by {timer} x{calls}" in c.notes[0]
    assert "not compared" in c.notes[0] and "--attn-timer" in c.notes[0]
    assert regressions([c]) == [c] and headline([c]) == "failed on 1 TIMER"
    assert headline([c], fail_on=("SLOWER",)) == "not gated: nothing compared (1 TIMER)"  # never "no regression"
    (same,) = compare(base, {"suite::case": bench_of(_timed(198.99e-6 * (1 + change)))}, Thresholds())
    assert same.verdict != "TIMER"  # the same timer and calls: compared as ever


def test_a_timer_the_run_chose_itself_says_the_run_was_not_measured_against_the_baseline():
    """The CI workflow's shards ran with --attn-baseline=off and were merged and gated: 11 cases of a 2 x H200
    run were TIMER, and the note said to drop --attn-timer, which no one had given. A run that chose its own timer
    is told to run with the baseline it is gated against; a pinned or --attn-timer run keeps the old advice."""
    from pytest_attn.verdicts.runs import bench_of

    base = {"suite::case": bench_of(_timed(6.3e-3, "cuda-event", 1))}
    for choice, says in (("a call under 5 ms (the warm-up: 6.1 ms by events)", "--attn-baseline=auto"),
                         ("--attn-timer=kernel-sum", "without --attn-timer")):
        r = _timed(6.1e-3, "kernel-sum", 1)
        r = dataclasses.replace(r, timing=dataclasses.replace(r.timing, timer_choice=choice))
        (c,) = compare(base, {"suite::case": bench_of(r)}, Thresholds())
        assert c.verdict == "TIMER" and says in c.notes[0]
        assert ("not measured against this baseline" in c.notes[0]) == (says == "--attn-baseline=auto")


def test_a_baseline_from_another_gpu_of_the_model_counts_the_unit_to_unit_noise():
    """On an H100 the FA2 varlen decode step (17.03 us, repeats within 0.2 %) read +2.9 % on another H100 of the
    model: SLOWER against the repeats' noise alone, AMBIGUOUS once the two GPUs' difference (a memory-bound case's
    allowance, verdicts.fleet) is counted; on the GPU that recorded the baseline, the same move is still SLOWER. A
    5 % slowdown is SLOWER either way."""
    from factories import H200, dense, record

    from pytest_attn.verdicts.runs import bench_of

    step = dense("flash-attn", sq=1, sk=4096, hq=32, hkv=8, d=128, batch=8)  # memory-bound

    def bench(median_s, uuid, repeats=()):
        r = record("flash-attn", median_s, case=step, device=dataclasses.replace(H200, uuid=uuid), test="t",
                   precision=0.003)
        return bench_of(dataclasses.replace(r, timing=dataclasses.replace(r.timing, repeats_s=repeats)))

    base = {"t": bench(17.03e-6, "GPU-a", (17.01e-6, 17.04e-6, 17.03e-6))}
    verdicts = {}
    for uuid in ("GPU-a", "GPU-b"):
        for change in (0.029, 0.05):
            (c,) = compare(base, {"t": bench(17.03e-6 * (1 + change), uuid)}, Thresholds())
            verdicts[uuid, change] = c.verdict
    assert verdicts == {("GPU-a", 0.029): "SLOWER", ("GPU-b", 0.029): "AMBIGUOUS",
                        ("GPU-a", 0.05): "SLOWER", ("GPU-b", 0.05): "SLOWER"}


def test_an_events_figure_with_the_host_in_it_counts_that_share_as_noise():
    """FA4's varlen fwd+bwd on an H100, pinned to events by the committed baseline (7.541 ms, repeats 7.641, 7.641,
    7.541), read 7.248 ms on another host whose warm-up profiled its kernels 2 % under its events (and 7.041 ms
    with 5 %): FASTER against the repeats alone, AMBIGUOUS once that share is noise. A kernel-sum figure, or an
    events one without host gaps, is judged as before."""
    from factories import H200, record

    from pytest_attn.verdicts.runs import bench_of

    def bench(median_s, timer="cuda-event", host_gap=None, repeats=()):
        r = record("fa4-varlen", median_s, device=H200, test="t", precision=0.006)
        timing = dataclasses.replace(r.timing, timer=timer, host_gap=host_gap, repeats_s=repeats)
        return bench_of(dataclasses.replace(r, timing=timing))

    base = {"t": bench(7.541e-3, repeats=(7.641e-3, 7.641e-3, 7.541e-3))}
    (plain,) = compare(base, {"t": bench(7.248e-3)}, Thresholds())
    (gapped,) = compare(base, {"t": bench(7.248e-3, host_gap=0.02)}, Thresholds())
    assert (plain.verdict, gapped.verdict) == ("FASTER", "AMBIGUOUS")
    assert any("2.0% of which the GPU sat idle while the host launched" in n for n in gapped.notes)
    (kernels,) = compare({"t": bench(7.541e-3, "kernel-sum", repeats=(7.641e-3, 7.641e-3, 7.541e-3))},
                         {"t": bench(7.248e-3, "kernel-sum", host_gap=0.02)}, Thresholds())
    assert kernels.verdict == "FASTER" and not any("host" in n for n in kernels.notes)


def test_a_baseline_whose_host_gap_was_not_recorded_takes_it_from_this_run_s_kernels():
    """The same case on an H100 (2026-11-26): baseline 7.541 ms by events, written before gaps were recorded;
    this run 7.319 ms by events with no gap of its own (its warm-up read 7.04 ms, its kernels 7.16 ms): FASTER
    against the repeats and this run's gap alone. What this run's kernels leave of the baseline's median (5 %)
    is the baseline's gap as far as anything tells: AMBIGUOUS, with a note that says so. A baseline that recorded
    its gap (none) is judged on it."""
    from factories import H200, record

    from pytest_attn.verdicts.runs import bench_of

    def bench(median_s, host_gap=None, kernels_s=None, repeats=()):
        r = record("fa4-varlen", median_s, device=H200, test="t", precision=0.006)
        timing = dataclasses.replace(r.timing, timer="cuda-event", host_gap=host_gap, kernels_s=kernels_s,
                                     repeats_s=repeats)
        return bench_of(dataclasses.replace(r, timing=timing))

    legacy = {"t": bench(7.541e-3, repeats=(7.641e-3, 7.641e-3, 7.541e-3))}
    (without,) = compare(legacy, {"t": bench(7.319e-3, host_gap=0.0)}, Thresholds())
    (judged,) = compare(legacy, {"t": bench(7.319e-3, host_gap=0.0, kernels_s=7.16e-3)}, Thresholds())
    assert (without.verdict, judged.verdict) == ("FASTER", "AMBIGUOUS")
    assert any("the baseline's own gap was not recorded" in n for n in judged.notes)
    recorded = {"t": bench(7.541e-3, host_gap=0.0, repeats=(7.641e-3, 7.641e-3, 7.541e-3))}
    (kept,) = compare(recorded, {"t": bench(7.319e-3, host_gap=0.0, kernels_s=7.16e-3)}, Thresholds())
    assert kept.verdict == "FASTER"
