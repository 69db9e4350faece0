"""The sustained figure (pytest_attn.core.sustained): settle detection and energy per call on fake NVML traces --
a clock that falls and settles, one that never settles, an energy counter that wraps or is missing."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from pytest_attn.core.sustained import Reading, energy_j, ranking_change, settled_at, sustained

FLOPS = 549.823e9  # Llama-3-8B prefill, causal fwd
CYCLES = 785.2 * 1980  # FA4's call at 1980 MHz (a burst, 785.2 us), in us x MHz: its time scales with 1 / clock


def trace(clock_at, power_at, seconds=6.0, replay_s=0.05, energy_from=10**9, wrap=None, counter=True, jitter=0.0):
    """Replays of about ``replay_s`` back to back; each call takes CYCLES / clock; the counter integrates power."""
    out, t, energy, i = [], 0.0, float(energy_from), 0
    while t < seconds:
        clock = clock_at(t)
        per_call = CYCLES / clock * 1e-6 * (1 + jitter * math.sin(i * 1.7))
        calls = max(1, round(replay_s / per_call))
        t += calls * per_call
        energy += power_at(t) * calls * per_call * 1e3  # mJ
        reading = int(energy) % wrap if wrap else int(energy)
        out.append(Reading(t, calls, calls * per_call, clock, power_at(t), reading if counter else None))
        i += 1
    return out


def falls_and_settles(t):
    return 1455 + 525 * math.exp(-t / 0.4)  # 1980 MHz cold, 1455 MHz at the cap


def test_a_clock_that_falls_and_settles_is_read_over_the_settled_part():
    readings = trace(falls_and_settles, lambda t: 708.0)
    start = settled_at(readings)
    assert start is not None and 1.2 < start < 2.5
    s = sustained(readings, FLOPS, 785.2e-6, 989.4)
    assert s.settled and s.note == ""
    assert s.sm_clock_mhz == pytest.approx(1455, abs=8)
    assert s.median_s == pytest.approx(CYCLES / 1455 * 1e-6, rel=0.006)  # ~1069 us: the clock's share of the loss
    assert s.burst_ratio == pytest.approx(s.median_s / 785.2e-6)
    assert s.energy_source == "energy counter"
    assert s.energy_per_call_j == pytest.approx(708.0 * s.median_s, rel=0.01)  # power x time per call
    assert s.tflops_per_j == pytest.approx(FLOPS / s.energy_per_call_j / 1e12)
    assert s.mfu == pytest.approx(s.tflops / 989.4)
    assert "settled after" in s.describe()


def test_a_clock_that_never_settles_is_said_and_read_over_the_last_third():
    readings = trace(lambda t: 1980 - 90 * t, lambda t: 600 + 20 * t, seconds=5.0)
    assert settled_at(readings) is None
    s = sustained(readings, FLOPS, 785.2e-6, None)
    assert not s.settled and s.settled_after_s is None
    assert "did not settle within 5.0 s" in s.note and "never settled" in s.describe()
    assert 1980 - 90 * 5.0 < s.sm_clock_mhz < 1980 - 90 * 5.0 * 2 / 3  # the last third's clocks
    # why, in the note: what the last third's windows read (an H100's FA4 and FA2 Llama-3-8B fwd did not settle)
    assert "(its last 7 windows of 0.25 s: time per call 937.6-1013 us, SM clock 1534-1658 MHz, power 672-700 W)" \
        in s.note


def test_the_phase_is_kept_window_by_window_in_the_record():
    """The trace the settle rule read travels in the record (JSON): what the clock, the power and the time per call
    did under load, for a plot and for a phase that did not settle."""
    readings = trace(falls_and_settles, lambda t: 708.0, seconds=3.0)
    s = sustained(readings, FLOPS, 785.2e-6, None)
    assert len(s.trace) == 13 and s.trace[0].t_s == 0.0 and s.trace[-1].t_s == 3.0  # the last reading at 3.004 s
    assert s.trace[0].sm_clock_mhz > 1800 and s.trace[-1].sm_clock_mhz == pytest.approx(1455, abs=5)
    assert s.trace[-1].per_call_s == pytest.approx(CYCLES / s.trace[-1].sm_clock_mhz * 1e-6, rel=0.01)
    import dataclasses

    from pytest_attn.core.record import Record

    record = _loaded("fa4", 785.2e-6, 903e-6)
    assert record.sustained is not None
    record = dataclasses.replace(record, sustained=dataclasses.replace(record.sustained, trace=s.trace))
    assert Record.from_json(record.to_json()) == record


def test_a_counter_that_wraps_gives_the_same_energy():
    plain = sustained(trace(falls_and_settles, lambda t: 700.0), FLOPS, None, None)
    wrapped_trace = trace(falls_and_settles, lambda t: 700.0, energy_from=2**32 - 1_000_000, wrap=2**32)
    assert any(b.energy_mj < a.energy_mj for a, b in pairwise(wrapped_trace))  # it did wrap
    wrapped = sustained(wrapped_trace, FLOPS, None, None)
    assert wrapped.energy_source == "energy counter"
    assert wrapped.energy_per_call_j == pytest.approx(plain.energy_per_call_j, rel=1e-3)


def test_a_missing_or_unexplained_counter_falls_back_to_power_times_time():
    missing = sustained(trace(falls_and_settles, lambda t: 700.0, counter=False), FLOPS, None, None)
    assert missing.energy_source == "power x time"
    assert missing.energy_per_call_j == pytest.approx(700.0 * missing.median_s, rel=0.01)
    jump = [Reading(0.1, 10, 0.01, 1500, 700.0, 5_000_000), Reading(0.2, 10, 0.01, 1500, 700.0, 1_000)]
    joules, source = energy_j(jump)  # backwards by a step no wrap explains: a driver reload
    assert source == "power x time" and joules == pytest.approx(70.0)
    assert energy_j([Reading(0.1, 1, 0.1), Reading(0.2, 1, 0.1)]) == (None, "not known")


def test_a_changed_order_under_load_is_said_in_words():
    groups = {"llama3-8b-prefill-bf16-causal-fwd": [("fa4", 785e-6, 903e-6), ("sdpa-cudnn", 911e-6, 1029e-6),
                                                    ("flash-attn", 1560e-6, 1635e-6)],
              "other": [("a", 1e-3, 2e-3), ("b", 1.1e-3, 1.5e-3)]}
    lines = ranking_change(groups)
    assert lines == ["other: under sustained load the order is b, a (1500 us, 2000 us); in a burst it was a, b"]


def _loaded(backend, burst_s, sustained_s, settled=True):
    import dataclasses

    from factories import record

    from pytest_attn.core.sustained import Sustained

    r = record(backend, burst_s, test=f"t::{backend}")
    s = Sustained(phase_s=4.0, settled=settled, settled_after_s=2.0 if settled else None, calls=3000,
                  median_s=sustained_s, sm_clock_mhz=1455.0, power_w=708.0, energy_per_call_j=708.0 * sustained_s,
                  energy_source="energy counter", tflops=r.work.flops / sustained_s / 1e12,
                  tflops_per_j=r.work.flops / (708.0 * sustained_s) / 1e12, mfu=None,
                  burst_ratio=sustained_s / burst_s, note="" if settled else "did not settle within 4.0 s")
    return dataclasses.replace(r, sustained=s)


def test_burst_and_sustained_sit_side_by_side_in_the_table_reports_and_the_json():
    import dataclasses

    from factories import H200

    from pytest_attn.core.record import Record
    from pytest_attn.verdicts.reports import csv_text, sustained_markdown
    from pytest_attn.verdicts.rule import Thresholds, compare
    from pytest_attn.verdicts.runs import by_name
    from pytest_attn.verdicts.table import render

    records = [_loaded("fa4", 785.2e-6, 903e-6), _loaded("flash-attn", 1560e-6, 1635e-6),
               _loaded("sdpa-cudnn", 911e-6, 1029e-6, settled=False)]
    assert Record.from_json(records[0].to_json()) == records[0]  # the figure travels in the record
    text = "\n".join(render(records, H200))
    assert "sustained: the time per call back to back once the SM clock and power settled" in text
    assert "903.00 us (+15%)" in text and "1.029 ms (+13%) ~" in text and "load MHz" in text and "TFLOP/J" in text
    assert "sdpa-cudnn-gpt2-small-bf16-causal-fwd: sustained: did not settle within 4.0 s" in text
    burst_only = dataclasses.replace(records[0], sustained=None)
    assert "sustained" not in "\n".join(render([burst_only], H200))  # n/a everywhere: no column, no line
    md = sustained_markdown(records)
    assert md.startswith("### Under sustained load (--attn-sustained)")
    assert "| `fa4` | 785.20 us | 903.00 us | +15.0% | 1980, 1455 | 708 |" in md
    rows = csv_text(compare(by_name(records), by_name(records), Thresholds())).splitlines()
    assert "sustained_s,sustained_sm_clock_mhz,sustained_power_w,energy_per_call_j,tflops_per_j" in rows[0]
    assert any(",0.000903,1455.0,708.0," in row for row in rows[1:])


def test_the_energy_plot_places_each_back_end_by_tflops_per_joule():
    from pytest_attn.verdicts.plots import energy_points

    points = energy_points([_loaded("fa4", 785.2e-6, 903e-6), _loaded("flash-attn", 1560e-6, 1635e-6)])
    assert list(points) == ["fa4", "flash-attn"]
    (per_j, tflops), = points["fa4"]
    assert tflops == pytest.approx(per_j * 708.0)  # TFLOP/s = TFLOP/J x W


def test_the_trace_plot_follows_each_case_window_by_window(tmp_path):
    """sustained_trace.png: each case's SM clock and its time per call over the burst median, from the phase's
    windows; written with the other plots where matplotlib is installed."""
    import dataclasses

    from pytest_attn.verdicts.plots import sustained_traces, write_plots

    windows = sustained(trace(falls_and_settles, lambda t: 708.0, seconds=3.0), FLOPS, 785.2e-6, None).trace
    fa4 = _loaded("fa4", 785.2e-6, 903e-6)
    fa4 = dataclasses.replace(fa4, sustained=dataclasses.replace(fa4.sustained, trace=windows))
    traces = sustained_traces([fa4, _loaded("flash-attn", 1560e-6, 1635e-6)])  # the second has no trace
    assert list(traces) == [fa4.case.id] and len(traces[fa4.case.id]) == len(windows)
    t, ratio, clock = traces[fa4.case.id][-1]
    assert t == windows[-1].t_s and clock == windows[-1].sm_clock_mhz
    assert ratio == pytest.approx(windows[-1].per_call_s / 785.2e-6)
    pytest.importorskip("matplotlib")
    written = write_plots(tmp_path, [fa4])
    assert str(tmp_path / "sustained_trace.png") in written and (tmp_path / "sustained_trace.png").stat().st_size


def test_on_a_machine_without_a_gpu_the_option_is_refused_at_start_up(pytester):
    from factories import attention_suite

    from pytest_attn.plugin.options import sustained_s

    assert sustained_s("10") == 10.0
    for bad, said in (("suites/", "write --attn-sustained=10, or put --attn-sustained after the test paths"),
                      ("0.5", "give 1 to 600 seconds")):
        with pytest.raises(Exception, match=said):
            sustained_s(bad)
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-sustained=5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--attn-sustained (and --attn-profile=sustained) measures a GPU under sustained load*"
                                 "no GPU is visible here*"])
    assert pytester.runpytest("-p", "no:cacheprovider", "--attn-profile=sustained").ret == pytest.ExitCode.USAGE_ERROR


class _Load:
    """A GPU under load on a fake clock: each replay of 60 calls advances it; NVML reads the clock then."""

    def __init__(self, clock_at):
        self.t, self.clock_at, self.energy = 0.0, clock_at, 0.0

    def replays(self):
        while True:
            per_call = CYCLES / self.clock_at(self.t) * 1e-6
            self.t += 60 * per_call
            self.energy += 700.0 * 60 * per_call * 1e3
            yield 60 * per_call

    def sm_clock_mhz(self):
        return self.clock_at(self.t)

    def power_w(self):
        return 700.0

    def energy_mj(self):
        return int(self.energy)


def test_the_phase_stops_once_settled_for_long_enough_or_at_its_cap():
    from pytest_attn.engine import load_phase

    load = _Load(falls_and_settles)
    readings = load_phase.collect(load.replays(), 60, 30.0, load, clock=lambda: load.t)
    settled = settled_at(readings)
    assert settled is not None and readings[-1].t_s - settled >= load_phase.SETTLED_FOR_S
    assert readings[-1].t_s < 5.0  # not the 30 s cap
    never = _Load(lambda t: 1980 - 60 * t)
    readings = load_phase.collect(never.replays(), 60, 6.0, never, clock=lambda: never.t)
    assert settled_at(readings) is None and 6.0 <= readings[-1].t_s < 6.1
    assert load_phase.calls_per_replay(15e-6, 4) == 3336 and load_phase.calls_per_replay(0.23, 1) == 1


class _LongCalls(_Load):
    """One 0.42 s call a replay (FA2's HunyuanVideo fwd on an H100), at a steady clock."""

    def replays(self):
        while True:
            self.t += 0.42
            self.energy += 670.0 * 0.42 * 1e3
            yield 0.42


def test_long_calls_are_watched_for_enough_calls_once_settled():
    """Settled at once, 1.5 s is 3-4 such calls, over which NVML's coarse energy counter read -9 % on an H100:
    the phase goes on for more than ten settled calls (under its cap), and says their energy."""
    from pytest_attn.core.sustained import sustained
    from pytest_attn.engine import load_phase

    load = _LongCalls(lambda t: 1600.0)
    readings = load_phase.collect(load.replays(), 1, 10.0, load, clock=lambda: load.t)
    settled = settled_at(readings)
    assert settled is not None and sum(r.calls for r in readings if r.t_s > settled) == load_phase.SETTLED_CALLS + 1
    assert 4.0 < readings[-1].t_s < 10.0
    figures = sustained(readings, 1e15, 0.42, 990.0)
    assert figures.energy_per_call_j == pytest.approx(670.0 * 0.42, rel=1e-3) and figures.calls >= 10
    capped = _LongCalls(lambda t: 1600.0)
    readings = load_phase.collect(capped.replays(), 1, 3.0, capped, clock=lambda: capped.t)
    assert 3.0 <= readings[-1].t_s < 3.5  # the cap still ends it
