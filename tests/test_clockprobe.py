"""Each A/B block's mean SM clock, read on the GPU (pytest_attn.engine.ab.clockprobe): the arithmetic on the
probe's rows, falling back to NVML where the probe cannot run, the arm reading it around exactly the kept
samples, and the pairs judged in cycles when every block has it."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
from factories import CPU, dense
from test_ab import FakeArm

from pytest_attn.engine.ab import clockprobe
from pytest_attn.engine.ab import worker as arm_module
from pytest_attn.engine.ab.clockprobe import mean_clock_mhz, open_probe
from pytest_attn.engine.ab.messages import Block, BlockAnswer, Hello
from pytest_attn.engine.ab.pairing import PairRule, run_pair
from pytest_attn.engine.nvml import NoNvml
from pytest_attn.plugin.ab import result_of
from pytest_attn.verdicts.ab.summaries import csv_text, terminal_lines

GPU = dataclasses.replace(CPU, kind="cuda", name="NVIDIA H200", sm_count=132)


def _rows(start_ns: int, mhz_by_sm: dict[int, float], elapsed_ns: int) -> tuple[list, list]:
    """Two readings of the probe: each SM's counter advanced by its clock x the elapsed time."""
    start = [(sm, 1_000_000 * sm, start_ns) for sm in mhz_by_sm]
    end = [(sm, 1_000_000 * sm + round(mhz * elapsed_ns / 1e3), start_ns + elapsed_ns) for sm, mhz in mhz_by_sm.items()]
    return start, end


def test_the_mean_clock_is_cycles_over_time_sm_by_sm():
    start, end = _rows(10**18, {0: 1800.0, 1: 1810.0, 2: 1790.0, 3: 1500.0, 4: 1805.0}, 50_000_000)
    assert mean_clock_mhz(start, end) == pytest.approx(1800.0, abs=0.01)  # the median SM
    # an SM's first row counts (several probe blocks land on one SM); SMs read once are left out
    assert mean_clock_mhz([*start, (0, 0, 0)], [*end, (9, 5, 5)]) == pytest.approx(1800.0, abs=0.01)
    assert mean_clock_mhz(start, [(7, 1, 1)]) is None  # no SM read twice
    assert mean_clock_mhz([(0, 5, 100)], [(0, 9, 100)]) is None  # no time between the readings


def test_no_probe_means_nvml_and_says_why(monkeypatch):
    def broken():
        raise ImportError("No module named 'triton'")

    monkeypatch.setattr(clockprobe, "_kernel", broken)
    probe, why = open_probe(132)
    assert probe is None and "could not run (ImportError: No module named 'triton')" in why and "NVML" in why

    class Stopped:  # a counter that does not advance: 0 MHz is not believed
        def __init__(self, sm_count):
            pass

        def mark(self):
            return None

        def mean_mhz(self, start, end):
            return 0.0

    torch = pytest.importorskip("torch")
    monkeypatch.setattr(clockprobe, "SmClockProbe", Stopped)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None)
    probe, why = open_probe(132)
    assert probe is None and "read 0.0 MHz, not believed" in why


class Log:
    def __init__(self):
        self.events = []


class FakeTimer:
    calls_per_sample = 1

    def __init__(self, log):
        self.log = log

    def sample(self):
        self.log.events.append("sample")
        return 1e-3


class FakeProbe:
    def __init__(self, log):
        self.log, self.marks = log, 0

    def mark(self):
        self.marks += 1
        self.log.events.append(f"mark{self.marks}")
        return self.marks

    def mean_mhz(self, start, end):
        return 1700.0 + 10 * start + end  # which marks were compared shows in the answer


def test_an_arm_reads_the_clock_around_the_kept_samples_only():
    log = Log()
    arm = arm_module.Arm(lambda: (GPU, NoNvml("a test")), clock_probe=lambda sms: (FakeProbe(log), f"{sms} SMs"))
    assert arm.hello(Hello()).clock == "132 SMs"
    arm.ready = SimpleNamespace(built=SimpleNamespace(timer=FakeTimer(log)))
    answer = arm.block(Block(2, warm=True))
    assert log.events == ["sample", "mark1", "sample", "sample", "mark2"]  # the warm sample is outside
    assert answer.mean_mhz == 1712.0 and len(answer.times) == 2
    cpu = arm_module.Arm(lambda: (CPU, NoNvml("a test")), clock_probe=lambda sms: pytest.fail("no probe on a CPU"))
    assert cpu.hello(Hello()).clock == "no GPU"


class ClockedArm(FakeArm):
    """A fake arm at a power cap: its clock sits ``offset`` off the other's (where its data sit), and each
    block's time is its cycles over that clock; the block answer carries the measured mean clock."""

    def __init__(self, label, factor, clock, log, offset, measured=True):
        super().__init__(label, factor, clock, log)
        self.offset, self.measured = offset, measured

    def ask(self, request, within_s=None):
        answer = super().ask(request, within_s)
        if isinstance(request, Block):
            jitter = 1 + 0.005 * math.sin(len(self.log) * 2.399)  # block to block, deterministic
            mhz = 1800.0 * (1 + self.offset) * jitter
            n = len(answer.times)
            answer = BlockAnswer([100e-6 * self.factor * 1800.0 / mhz] * n, [round(mhz / 15) * 15] * n,  # NVML: 15 MHz
                                 answer.wall_s, mhz if self.measured else None)
        return answer


def _run(b_factor, b_offset, measured=True):
    clock, log = [0.0], []
    a = ClockedArm("A", 1.0, clock, log, 0.0)
    b = ClockedArm("B", b_factor, clock, log, b_offset, measured)
    run = run_pair(({}, {}), "t", [a], [b], PairRule(max_time_s=4.0), clock=lambda: clock[0])
    case = dense("sdpa-math")
    record = SimpleNamespace(median_s=1e-4, clocks=SimpleNamespace(throttle=None))
    return run, result_of("suite::t", case, run, record, record, 0.02)


def test_measured_clocks_judge_the_pairs_in_cycles():
    """B's data sit where it draws more power: a 2.5 % lower clock all along. In time that A/A is SLOWER; in
    cycles, SAME. A 2 % slower B at a 2.5 % higher clock is SAME in time, SLOWER in cycles."""
    run, same = _run(1.0, -0.025)
    assert run.clocks_measured and same.clocks_measured
    assert (same.paired.basis, same.paired.in_time, same.paired.verdict) == ("equal clock", "SLOWER", "SAME")
    assert abs(same.paired.change) < 0.002 and same.paired.in_time_change == pytest.approx(0.0256, abs=0.002)
    assert same.block_mhz[1][0] == pytest.approx(run.b_mean_mhz[0]) and run.stop == "precision"
    _, slower = _run(1.02, 0.025)
    assert (slower.paired.in_time, slower.paired.verdict) == ("SAME", "SLOWER")
    assert any("in time alone SAME" in n for n in slower.notes())
    row = next(line for line in terminal_lines([slower], ["A: x", "B: y"], 0.02) if line.strip().startswith("t "))
    assert "+2.0% (s=" in row and "SLOWER" in row  # the judged change, with the case's clock sensitivity
    assert ",equal clock," in csv_text([slower])


def test_without_every_block_s_clock_the_pairs_are_judged_in_time():
    run, result = _run(1.0, -0.025, measured=False)
    assert not run.clocks_measured and not result.clocks_measured
    assert (result.paired.basis, result.paired.verdict) == ("time", "SLOWER")  # the NVML path, as before
    assert result.block_mhz[1][0] % 15 == 0  # NVML's readings are what it kept
