"""What a baseline can catch on a GPU (pytest_attn.verdicts.power, ``pytest-attn baseline power``): each case's
chance that a slowdown reads SLOWER, from its noise, by hand and against simulated fleets whose truth is known."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
from factories import H200, record

from pytest_attn.verdicts.fleet import center
from pytest_attn.verdicts.power import case_powers, chance_slower, power_lines
from pytest_attn.verdicts.rule import Thresholds, compare
from pytest_attn.verdicts.runs import Bench, bench_of


def test_the_chance_by_hand():
    # sigma 2 %: SLOWER from 3 sigma = 6 %; a 5 % slowdown gets there with P(N(0, 1) >= 0.5)
    assert chance_slower(0.05, 0.02, 0.05) == pytest.approx(0.3085, abs=1e-4)
    # sigma 0.5 %: SLOWER from half the threshold, 2.5 %, five sigma under 5 %
    assert chance_slower(0.05, 0.005, 0.05) == pytest.approx(1.0, abs=1e-6)
    assert chance_slower(0.05, 0.0, 0.05) == 1.0 and chance_slower(0.02, 0.0, 0.05) == 0.0


def _stored(name: str, repeats: dict[str, list[float]]) -> Bench:
    values = [v for vs in repeats.values() for v in vs]
    gpus = tuple(g for g, vs in repeats.items() for _ in vs)
    rec = record("fa4", values[-1], test=name)
    rec = dataclasses.replace(rec, device=dataclasses.replace(H200, uuid=gpus[-1]),
                              timing=dataclasses.replace(rec.timing, repeats_s=tuple(values), repeats_gpu=gpus))
    return bench_of(rec, center(values, gpus))


def _fleet(rng: random.Random, tau: float, run: float, cases: int = 400) -> tuple[dict, dict, dict]:
    """A baseline over three GPUs (two repeats each), and a clean run and a 5 % slower one on a fourth GPU."""
    base, clean, slowed = {}, {}, {}
    for i in range(cases):
        name = f"c{i}"
        offsets = {g: rng.gauss(0, tau) for g in ("GPU-a", "GPU-b", "GPU-c", "GPU-new")}
        base[name] = _stored(name, {g: [1e-3 * math.exp(offsets[g] + rng.gauss(0, run)) for _ in range(2)]
                                    for g in ("GPU-a", "GPU-b", "GPU-c")})
        for out, shift in ((clean, 1.0), (slowed, 1.05)):
            rec = record("fa4", 1e-3 * math.exp(offsets["GPU-new"] + rng.gauss(0, run)) * shift, test=name,
                         precision=0.002)
            out[name] = bench_of(dataclasses.replace(rec, device=dataclasses.replace(H200, uuid="GPU-new")))
    return base, clean, slowed


@pytest.mark.parametrize(("tau", "run"), [(0.006, 0.003), (0.012, 0.01)])
def test_the_expected_share_is_what_a_slowed_run_reads(tau, run):
    """Where the truth is known, the share a clean run expects is what a 5 % slower run reads (within sampling)."""
    base, clean, slowed = _fleet(random.Random(11), tau, run)
    powers = case_powers(base, clean, Thresholds(), 0.05)
    expected = sum(p.chance for p in powers) / len(powers)
    seen = [c.verdict for c in compare(base, slowed, Thresholds())].count("SLOWER") / len(slowed)
    assert abs(expected - seen) < 0.08, (expected, seen)
    assert all(p.best >= p.pair >= p.chance for p in powers)
    if run > 0.005:
        assert 0.2 < expected < 0.9  # a noisy fleet: the check above is not of a share stuck at 1


def test_the_report_names_the_least_likely_and_the_way_past_them():
    powers = case_powers(*_fleet(random.Random(3), 0.012, 0.01, cases=40)[:2], Thresholds(), 0.05)
    lines = power_lines(powers, 0.05, "B on GPU-new")
    assert lines[0].startswith("B on GPU-new: a 5.0% slowdown is expected to read SLOWER on ")
    assert lines[1].startswith("two runs of this GPU gated as one (pytest-attn merge --reruns FIRST.json")
    assert "at best, with this run's own noise taken away" in lines[2]
    assert lines[3].startswith("least likely caught: c") and "between GPUs" in lines[3]
    assert "--attn-ab" in lines[-1]


def test_the_command_reads_a_baseline_and_a_run_and_refuses_another_gpu_model(tmp_path, capsys):
    from pytest_attn.verdicts.cli import main
    from pytest_attn.verdicts.fingerprint import fingerprint_of

    def write(path, seconds: float, device=H200):
        rec = dataclasses.replace(record("fa4", seconds, test="t"), device=device)
        run = {"benchmarks": [{"name": "t", "fullname": "t", "stats": {"median": seconds},
                               "extra_info": rec.to_json()}],
               "machine_info": {"attn_fingerprint": fingerprint_of(rec.device, "not locked").as_dict()}}
        path.write_text(json.dumps(run))
        return str(path)

    base = write(tmp_path / "base.json", 1e-3)
    assert main(["baseline", "power", base, write(tmp_path / "run.json", 1.001e-3)]) == 0
    assert "expected to read SLOWER on 1 of 1 cases" in capsys.readouterr().out
    other = dataclasses.replace(H200, name="NVIDIA H100 80GB HBM3")
    assert main(["baseline", "power", base, write(tmp_path / "h100.json", 1e-3, other)]) == 4
    assert "was recorded on NVIDIA H200; this run is on NVIDIA H100" in capsys.readouterr().out
