"""The between-GPU spread (pytest_attn.verdicts.fleet) and the gate that uses it: a baseline's repeats tagged with the
GPU that measured each, the spread within and between GPUs read from them, and a run on another GPU judged with it."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from factories import H200, record

from pytest_attn.core.record import Record
from pytest_attn.verdicts.baseline import add_repeat
from pytest_attn.verdicts.decision import gpu_notes, own_gpu_note
from pytest_attn.verdicts.fleet import ALLOWANCE, FleetNoise, center, gpu_factor, spread
from pytest_attn.verdicts.rule import Noise, Thresholds, compare, side_sigma
from pytest_attn.verdicts.runs import Bench, bench_of, benches


# ---- the pure pieces, by hand ------------------------------------------------------------------------
def test_the_spread_within_and_between_gpus_by_hand():
    s = spread([1.00, 1.02, 1.10, 1.12], ["a", "a", "b", "b"])
    # within: each GPU's two repeats 1 % either side of their mean (relative), one degree of freedom each
    within = ((1.00 / 1.01 - 1) ** 2 + (1.02 / 1.01 - 1) ** 2 + (1.10 / 1.11 - 1) ** 2 + (1.12 / 1.11 - 1) ** 2) / 2
    assert s.run == pytest.approx(math.sqrt(within))
    assert s.gpus == ("a", "b") and s.repeats == (2, 2)
    assert s.tau_sq_raw == pytest.approx((math.log(1.11) - math.log(1.01)) ** 2 / 2)
    # tau takes out what the runs put into the GPUs' medians: run^2 * mean(1/k) = run^2 / 2
    assert s.tau(0.01) == pytest.approx(math.sqrt(s.tau_sq_raw - 0.01**2 / 2))
    assert s.center_variance(0.01) == pytest.approx(0.01**2 * (1 / 2 + 1 / 2) / 4)


def test_one_gpu_reads_as_before_tags_existed():
    s = spread([1.0, 1.01, 0.99], ["a", "a", "a"])
    assert s.tau_sq_raw is None and s.tau(0.01) is None
    assert s.run == pytest.approx(0.01)  # core.stats.relative_spread of the three
    assert s.center_variance(0.004) == pytest.approx(0.004**2 / 3)
    assert center([1.0, 1.01, 0.99], ["a"] * 3) == 1.0
    assert spread([1.0, 1.01], []).gpus == ("",)  # untagged: one unknown GPU


def test_the_centre_counts_each_gpu_once():
    # three repeats on a, one on b: the median of all would sit with a; the centre is between the GPUs
    assert center([1.0, 1.0, 1.0, 1.1], ["a", "a", "a", "b"]) == pytest.approx(math.sqrt(1.1))


def test_an_outlier_repeat_is_left_out_first():
    s = spread([1.0, 1.01, 5.0, 1.0], ["a", "a", "b", "b"])
    assert s.repeats == (2, 1)


@pytest.mark.parametrize(("gpus", "current", "factor"), [
    (("a",), "a", 0.0),  # the same GPU: no GPU offset between them
    (("a",), "b", 2.0),  # two draws of a GPU's offset
    (("a", "b", "c"), "b", 2 / 3),  # 1 + 1/3 - 2/3
    (("a", "b", "c"), "d", 4 / 3),  # 1 + 1/3
    (("",), None, 0.0),  # nothing known: read as before GPUs were recorded
    (("a", "b"), None, 1.5),  # an unknown GPU against two: another GPU
])
def test_the_gpu_factor(gpus, current, factor):
    s = spread([1.0] * len(gpus), list(gpus))
    assert gpu_factor(s, current) == pytest.approx(factor)


def test_the_pooled_tau_is_the_median_case_corrected_for_two_gpus():
    # tau_sq_raw of two GPUs is one degree of freedom: its median is 0.455 tau^2
    spreads = [("fa4", "compute", spread([1.0, 1.0 + d], ["a", "b"])) for d in (0.001, 0.004, 0.006, 0.01, 0.02)]
    fleet = FleetNoise.of(spreads, run=0.0)
    mid = (math.log(1.006)) ** 2 / 2
    assert fleet.pooled["compute"] == pytest.approx(math.sqrt(mid / 0.4549))
    assert fleet.gpus == 2 and fleet.cases == {"compute": 5}
    assert "fa4/compute" not in fleet.pooled  # five cases are too few to pool a back end's own
    assert fleet.tau("fa4", "compute", None) == (fleet.pooled["compute"], "pooled")
    assert fleet.tau("fa4", "compute", 0.05) == (0.05, "own")
    assert fleet.tau("fa4", "memory", None) == (ALLOWANCE["memory"], "allowance")
    tight = FleetNoise.of([("fa4", "memory", spread([1.0, 1.0 + d], ["a", "b"])) for d in (0.0, 0.001, 0.002)], 0.0)
    assert tight.pooled["memory"] < ALLOWANCE["memory"]  # GPUs of one host that agree: another host may not
    assert tight.tau("fa4", "memory", None) == (ALLOWANCE["memory"], "allowance")
    more = FleetNoise.of([*spreads, ("fa4", "compute", spread([1.0, 1.03], ["a", "b"]))], run=0.0)
    assert more.pooled["fa4/compute"] == more.pooled["compute"] and more.cases["fa4/compute"] == 6


# ---- the gate --------------------------------------------------------------------------------------
def _on(gpu: str, rec: Record) -> Record:
    return dataclasses.replace(rec, device=dataclasses.replace(H200, uuid=gpu))


def _stored(name: str, repeats: dict[str, list[float]]) -> Bench:
    """A baseline's case whose repeats (seconds) were measured on the GPUs named."""
    values = [v for vs in repeats.values() for v in vs]
    gpus = tuple(g for g, vs in repeats.items() for _ in vs)
    rec = _on(gpus[-1], record("fa4", values[-1], test=name))
    rec = dataclasses.replace(rec, timing=dataclasses.replace(rec.timing, repeats_s=tuple(values), repeats_gpu=gpus))
    return bench_of(rec, center(values, gpus))


def _run(name: str, seconds: float, gpu: str) -> Bench:
    return bench_of(_on(gpu, record("fa4", seconds, test=name, precision=0.002)))


def _fleet_baseline(odd: dict[str, list[float]]) -> dict[str, Bench]:
    """Twenty cases whose two GPUs agree within 0.2 %, and the case ``odd``."""
    base = {f"c{i}": _stored(f"c{i}", {"GPU-a": [1e-3, 1.001e-3], "GPU-b": [1.002e-3, 1.001e-3]}) for i in range(20)}
    base["odd"] = _stored("odd", odd)
    return base


def test_gpus_that_differ_by_4_percent_do_not_call_3_percent_slower_and_gpus_that_agree_catch_5():
    base = _fleet_baseline({"GPU-a": [1e-3, 1.002e-3], "GPU-b": [1.04e-3, 1.042e-3]})
    odd_centre = base["odd"].median_s
    cur = {**{f"c{i}": _run(f"c{i}", 1.001e-3, "GPU-new") for i in range(20)},
           "odd": _run("odd", odd_centre * 1.03, "GPU-new"), "c0": _run("c0", 1.0015e-3 * 1.05, "GPU-new")}
    out = {c.name: c for c in compare(base, cur, Thresholds(), Noise.of(base, cur))}
    assert out["odd"].verdict != "SLOWER" and out["odd"].gpu_source == "own"
    assert out["c0"].verdict == "SLOWER"
    assert all(out[f"c{i}"].verdict == "SAME" for i in range(1, 20))


def test_a_run_on_a_gpu_of_the_baseline_is_compared_with_that_gpu_s_own_repeats():
    # GPU-b runs the case 4 % slower than GPU-a: a run on GPU-b 3 % over its own repeats is a 3 % change, not 5 %
    base = _fleet_baseline({"GPU-a": [1e-3, 1.002e-3], "GPU-b": [1.04e-3, 1.042e-3]})
    on_b = next(c for c in compare(base, {"odd": _run("odd", 1.041e-3 * 1.03, "GPU-b")}, Thresholds(),
                                   Noise.of(base, {})) if c.name == "odd")
    assert on_b.own_repeats == 2 and on_b.gpu_noise == 0 and on_b.gpu_source == ""
    assert own_gpu_note([on_b]) == ["1 case(s) compared with the repeats this GPU measured (2-2 each): its own offset"
                                    " cancels, so no between-GPU noise is added (the baseline's other GPUs are left"
                                    " out for them)"]
    assert on_b.change == pytest.approx(0.03, abs=1e-9)
    assert on_b.verdict == "SLOWER"
    # the same median on a GPU the baseline never saw is judged against the centre, with tau x sqrt(1 + 1/2)
    on_new = next(c for c in compare(base, {"odd": _run("odd", 1.041e-3 * 1.03, "GPU-new")}, Thresholds(),
                                     Noise.of(base, {})) if c.name == "odd")
    assert on_new.own_repeats == 0 and on_new.verdict == "AMBIGUOUS" and own_gpu_note([on_new]) == []
    # one repeat of this GPU is not enough to stand alone: one odd run must not decide
    one = _fleet_baseline({"GPU-a": [1e-3, 1.002e-3], "GPU-b": [1.04e-3]})
    on_one = next(c for c in compare(one, {"odd": _run("odd", 1.04e-3, "GPU-b")}, Thresholds(), Noise.of(one, {}))
                  if c.name == "odd")
    assert on_one.own_repeats == 0 and on_one.gpu_noise > 0
    assert on_new.change == pytest.approx(1.041e-3 * 1.03 / base["odd"].median_s - 1)
    tau = math.sqrt(spread([1e-3, 1.002e-3, 1.04e-3, 1.042e-3], ["a", "a", "b", "b"]).tau_sq_raw)
    assert on_new.gpu_noise == pytest.approx(3 * math.sqrt(max(0, tau**2 - 0.0025**2 / 2)) * math.sqrt(1.5),
                                             rel=0.05)


def test_a_gpu_of_the_baseline_reads_the_clock_of_its_own_repeats():
    base = _fleet_baseline({"GPU-a": [1e-3, 1e-3], "GPU-b": [1e-3, 1e-3]})
    stored = base["odd"]
    clocks = (1500.0, 1500.0, 1900.0, 1900.0)
    base["odd"] = dataclasses.replace(stored, repeats_clock_mhz=clocks, sm_clock_mhz=1700.0)
    run = dataclasses.replace(_run("odd", 1e-3, "GPU-b"), sm_clock_mhz=1900.0)
    got = next(c for c in compare(base, {"odd": run}, Thresholds(), Noise.of(base, {})) if c.name == "odd")
    assert got.own_repeats == 2 and got.cycles_change == pytest.approx(0.0) and got.verdict == "SAME"


def test_a_one_gpu_baseline_takes_the_allowance_for_another_gpu_and_says_what_would_sharpen_it():
    base = {"c": _stored("c", {"GPU-a": [1e-3, 1.001e-3, 0.999e-3]})}
    same = compare(base, {"c": _run("c", 1e-3, "GPU-a")}, Thresholds(), Noise.of(base, {}))[0]
    other = compare(base, {"c": _run("c", 1e-3, "GPU-b")}, Thresholds(), Noise.of(base, {}))[0]
    assert same.gpu_noise == 0 and same.verdict == "SAME"
    assert other.gpu_source == "allowance"
    assert other.gpu_noise == pytest.approx(3 * ALLOWANCE["compute"] * math.sqrt(2))
    tight = compare(base, {"c": _run("c", 1e-3, "GPU-b")}, Thresholds(default=0.03), Noise.of(base, {}))
    notes = gpu_notes(tight)
    assert len(notes) == 1 and notes[0].startswith("1 case(s) held back by how much GPUs of the model differ")
    assert "add two clean runs of each GPU to the baseline" in notes[0]
    assert "1 of them the baseline measured on fewer than 3 GPUs (one: the allowance" in notes[0]
    assert gpu_notes([same]) == []


def test_a_case_many_gpus_disagree_on_is_sharpened_by_this_gpu_s_own_runs_not_by_more_gpus():
    # five GPUs spread 2 % a GPU on this case: a 3 % change on a sixth is AMBIGUOUS, and more GPUs would not narrow it
    def baseline(extra: dict[str, list[float]]) -> dict[str, Bench]:
        agree = {f"GPU-{i}": [1e-3, 1.001e-3] for i in range(5)}
        base = {f"a{i}": _stored(f"a{i}", agree) for i in range(20)}  # the rest of the baseline: GPUs agree
        offsets = (0.98, 0.99, 1.0, 1.01, 1.02)
        base["c"] = _stored("c", {**{f"GPU-{i}": [1e-3 * o, 1e-3 * o * 1.001] for i, o in enumerate(offsets)}, **extra})
        return base

    base = baseline({})
    held = next(c for c in compare(base, {"c": _run("c", 1.03e-3, "GPU-new")}, Thresholds(), Noise.of(base, {}))
                if c.name == "c")
    assert held.verdict == "AMBIGUOUS" and held.gpu_source == "own"
    notes = gpu_notes([held])
    assert len(notes) == 1 and "The own repeats of the GPU that ran a case take that part away" in notes[0]
    assert "fewer than 3 GPUs" not in notes[0] and "more GPUs" not in notes[0]
    # as the note says: two clean runs of this GPU in the baseline, and the same 3 % reads SLOWER
    own = baseline({"GPU-new": [1e-3, 1.001e-3]})
    sharp = next(c for c in compare(own, {"c": _run("c", 1.03e-3, "GPU-new")}, Thresholds(), Noise.of(own, {}))
                 if c.name == "c")
    assert sharp.own_repeats == 2 and sharp.verdict == "SLOWER" and gpu_notes([sharp]) == []


def test_a_cpu_has_no_gpu_noise():
    base = {"c": _stored("c", {"": [1e-3, 1.001e-3]})}
    out = compare(base, {"c": _run("c", 1e-3, "")}, Thresholds(), Noise.of(base, {}, cpu=True))[0]
    assert out.gpu_noise == 0


def test_adding_a_repeat_tags_it_with_its_gpu_and_centres_the_median():
    def run_json(seconds: float, gpu: str, name: str = "t") -> dict:
        rec = _on(gpu, record("fa4", seconds, test=name))
        return {"benchmarks": [{"name": name, "fullname": name, "stats": {"median": seconds},
                                "extra_info": rec.to_json()}]}

    stored = run_json(1.0e-3, "GPU-a")
    stored, _, _ = add_repeat(stored, run_json(1.002e-3, "GPU-a"))
    stored, added, refused = add_repeat(stored, run_json(1.05e-3, "GPU-b"))
    assert (added, refused) == (1, [])
    bench = benches(stored)["t"]
    assert bench.repeats_gpu == ("GPU-a", "GPU-a", "GPU-b")
    assert bench.median_s == pytest.approx(math.sqrt(1.001e-3 * 1.05e-3))  # each GPU once, not 1.002e-3


def test_an_untagged_baseline_reads_its_repeats_as_its_record_s_gpu():
    rec = _on("GPU-old", record("fa4", 1e-3, test="t"))
    rec = dataclasses.replace(rec, timing=dataclasses.replace(rec.timing, repeats_s=(1e-3, 1.001e-3)))
    assert bench_of(rec).repeats_gpu == ("GPU-old", "GPU-old")


def test_a_run_s_sampling_noise_is_counted_once_not_again_beside_the_between_run_spread():
    # the between-run spread is measured from repeats' medians, which carry their samples' noise already: clean
    # reruns on unseen H100s and H200s read 0.4-0.6 of the noise the sum of the two assumed (docs/gpu-validation.md)
    steady = _run("c", 1e-3, "GPU-new")  # precision 0.2 %: CI half-width, so within = 0.1 %
    assert side_sigma(steady, 0.01) == pytest.approx(0.01)
    capped = dataclasses.replace(steady, spread=0.04)  # a time-capped run: its own CI is the wider
    assert side_sigma(capped, 0.01) == pytest.approx(0.04 / 1.959964, rel=1e-4)
    stored = _stored("c", {"GPU-a": [1e-3, 1.002e-3], "GPU-b": [1.01e-3, 1.011e-3]})
    assert side_sigma(stored, 0.01) == pytest.approx(0.01 * math.sqrt((1 / 2 + 1 / 2) / 2**2))


# ---- what it does over many cases, simulated -----------------------------------------------------
def _simulate(shift: float, rng: random.Random, tau: float = 0.006, run: float = 0.003, cases: int = 300) -> list[str]:
    """A baseline over three GPUs (two repeats each) and a run on a fourth, for ``cases`` cases whose GPU offsets
    are drawn with spread ``tau`` and runs with ``run``; the run slowed by ``shift``."""
    base, cur = {}, {}
    gpus = ("GPU-a", "GPU-b", "GPU-c")
    for i in range(cases):
        name = f"c{i}"
        offsets = {g: rng.gauss(0, tau) for g in (*gpus, "GPU-new")}
        reps = {g: [1e-3 * math.exp(offsets[g] + rng.gauss(0, run)) for _ in range(2)] for g in gpus}
        base[name] = _stored(name, reps)
        cur[name] = _run(name, 1e-3 * math.exp(offsets["GPU-new"] + rng.gauss(0, run)) * (1 + shift), "GPU-new")
    return [c.verdict for c in compare(base, cur, Thresholds(), Noise.of(base, cur))]


def test_simulated_a_three_gpu_baseline_holds_on_a_fourth_gpu_and_still_catches_5_percent():
    rng = random.Random(7)
    clean = _simulate(0.0, rng)
    slowed = _simulate(0.05, rng)
    assert clean.count("SLOWER") + clean.count("FASTER") == 0
    assert slowed.count("SLOWER") >= 0.95 * len(slowed)


# ---- pytest-attn baseline add ----------------------------------------------------------------------
def _run_file(path, seconds: float, gpu: str, **extra) -> str:
    from pytest_attn.verdicts.fingerprint import fingerprint_of

    rec = _on(gpu, record("fa4", seconds, test="t"))
    run = {"benchmarks": [{"name": "t", "fullname": "t", "stats": {"median": seconds}, "extra_info": rec.to_json()}],
           "machine_info": {"attn_fingerprint": fingerprint_of(rec.device, "not locked").as_dict()}, **extra}
    path.write_text(__import__("json").dumps(run))
    return str(path)


def test_baseline_add_records_then_adds_runs_of_other_gpus(tmp_path, capsys):
    from pytest_attn.verdicts.baseline import load_baseline
    from pytest_attn.verdicts.cli import main

    target = tmp_path / "nvidia-h200" / "baseline.json"
    medians = (("GPU-a", 1e-3), ("GPU-b", 1.01e-3), ("GPU-c", 0.99e-3))
    runs = [_run_file(tmp_path / f"{g}.json", s, g) for g, s in medians]
    assert main(["baseline", "add", str(target), *runs]) == 0
    out = capsys.readouterr().out
    assert out.count("a repeat added to 1 cases") == 2 and f"{runs[0]}: saved 1 results" in out
    assert benches(load_baseline(target))["t"].repeats_gpu == ("GPU-a", "GPU-b", "GPU-c")


def test_baseline_add_refuses_a_partial_run_or_one_without_a_fingerprint_before_writing(tmp_path, capsys):
    from pytest_attn.verdicts.cli import main

    target = tmp_path / "baseline.json"
    whole = _run_file(tmp_path / "a.json", 1e-3, "GPU-a")
    cut = _run_file(tmp_path / "b.json", 1e-3, "GPU-b", attn_partial={"reason": "interrupted", "cases_measured": 1})
    assert main(["baseline", "add", str(target), whole, cut]) == 4
    assert "is a partial run (interrupted, 1 cases measured)" in capsys.readouterr().out and not target.exists()
    bare = tmp_path / "c.json"
    bare.write_text('{"benchmarks": [{"name": "t", "stats": {"median": 0.001}}]}')
    assert main(["baseline", "add", str(target), str(bare)]) == 4
    assert "has no fingerprint" in capsys.readouterr().out and not target.exists()
