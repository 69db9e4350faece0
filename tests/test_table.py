"""The end-of-session table (pytest_attn.verdicts.table): problems side by side, fastest first, and the
notes that say which figures to doubt. Pure, over result records."""

from __future__ import annotations

import dataclasses
import re

from factories import H200, record

from pytest_attn.core.metrics import Ceilings, ceiling_share
from pytest_attn.core.record import TimingCheck
from pytest_attn.verdicts.table import fmt_time, render


def _cells(lines, backend):
    """The cells of ``backend``'s row by column name (columns are two or more spaces apart)."""
    header = next(line for line in lines if line.strip().startswith("backend"))
    row = next(line for line in lines if line.strip().startswith(backend + " "))
    return dict(zip(re.split(r"\s{2,}", header.strip()), re.split(r"\s{2,}", row.strip()), strict=True))


def test_time_format():
    assert (fmt_time(2.5), fmt_time(0.0123), fmt_time(14.3e-6)) == ("2.500 s", "12.300 ms", "14.30 us")


def test_groups_sit_side_by_side_fastest_first():
    results = [record("sdpa-flash", 310e-6), record("sdpa-cudnn", 192e-6), record("flex", 1e-3, shape="bert-base")]
    lines = render(results, H200, skips=["no CUDA device", "no CUDA device"])
    text = "\n".join(lines)
    assert lines[0].startswith("device: NVIDIA H200 (sm90, 132 SMs")
    gpt2 = text.index("gpt2-small-bf16-causal-fwd:")
    assert gpt2 < text.index("bert-base-bf16-causal-fwd:")
    assert text.index("sdpa-cudnn", gpt2) < text.index("sdpa-flash", gpt2)
    assert "kernel-sum x5" in text and "1980" in text
    assert "2 x no CUDA device" in text


def test_unknown_clock_and_time_cap_are_said():
    lines = render([record("sdpa-math", 5e-3, clocks=(), stop="time-cap")], H200)
    cells = _cells(lines, "sdpa-math")
    assert "MFU@clk" not in cells and "SM MHz" not in cells  # without a clock reading: n/a on every row, left out
    assert "MFU" in cells and "stopped at the time-cap" in "\n".join(lines)


def test_each_result_against_the_fastest_expression_of_the_same_mask():
    custom = "custom_mask (dense bool, 0.001 GB, packed inside each call)"
    results = [record("flashinfer-custom", 5.3e-3, expression=custom),
               record("flash-attn", 1e-3, expression="causal=True"),
               record("flashinfer-packed", 1.2e-3, expression="packed_custom_mask (0.000131 GB, packed once)")]
    lines = render(results, H200)
    text = "\n".join(lines)
    assert _cells(lines, "flash-attn")["vs best"] == "1.00x"
    assert _cells(lines, "flashinfer-custom")["vs best"] == "5.30x"
    assert "speedup" not in _cells(lines, "flash-attn")  # sdpa-math did not run: n/a on every row, left out
    assert ("gpt2-small-bf16-causal-fwd: flashinfer-custom (custom_mask (dense bool, 0.001 GB, packed inside each"
            " call)): 5.30x slower than flash-attn (causal=True) for the same mask") in text
    assert "flashinfer-packed (" not in text.split("slow paths")[1]  # 1.2x is under the 1.5x threshold
    assert "mask as: flash-attn: causal=True; flashinfer-packed:" in text


def test_share_of_the_measured_ceiling_by_bound_and_the_timing_self_check_line():
    compute = record("sdpa-cudnn", 192e-6)
    assert compute.figures.bound == "compute"
    ceilings = Ceilings({"bf16": compute.figures.tflops * 2}, copy_tbps=4.0)
    compute = dataclasses.replace(compute, ceilings=ceiling_share(compute.figures.tflops, compute.figures.tbps,
                                                                  "bf16", ceilings))
    lines = render([compute], H200)
    text = "\n".join(lines)
    assert _cells(lines, "sdpa-cudnn")["of ceil"] == "50.0%"
    assert "timing self-check" not in text
    checked = [dataclasses.replace(compute, timing_check=TimingCheck(192e-6, 190e-6)),
               dataclasses.replace(record("flex", 1e-3), timing_check=TimingCheck(1e-3, 0.8e-3))]
    text = "\n".join(render(checked, H200))
    assert ("timing self-check: 2 cases, reported median / profiler kernel time 1.011 to 1.250; 1 beyond 5%"
            " (see the notes)") in text


def test_a_clock_that_fell_while_sampling_is_flagged():
    from pytest_attn.verdicts.table import result_notes

    falling = record("flash-attn", 1e-3, clocks=tuple(1980 - 20 * i for i in range(10)))
    [note] = [n for n in result_notes(falling) if "fell" in n]
    assert "the SM clock fell 9.5% while it was sampled (1980 -> 1800 MHz at the extremes" in note
    steady = record("flash-attn", 1e-3, clocks=(1980, 1965, 1980, 1980, 1965, 1980))
    assert not [n for n in result_notes(steady) if "fell" in n]


def test_a_memory_bound_problem_reads_tb_per_s_against_the_copy_ceiling_first():
    from pytest_attn.core.case import Mask
    from pytest_attn.core.catalog import QWEN25_7B, decode_shape

    case = decode_shape(QWEN25_7B, 4096, 64).case("flash-attn-kvcache", "bf16", Mask.causal(), "fwd")
    decode = record("flash-attn-kvcache", 100e-6, case=case)
    assert decode.figures.bound == "memory"
    header = list(_cells(render([decode], H200), "flash-attn-kvcache"))
    assert header[:5] == ["backend", "median", "±95%", "vs best", "TB/s"]  # (speedup: n/a, left out)
    assert header.index("TB/s") < header.index("TFLOP/s")
    assert list(_cells(render([record("flash-attn", 1e-3)], H200), "flash-attn"))[4] == "TFLOP/s"


def test_a_table_wider_than_the_terminal_loses_its_least_needed_columns_and_says_which():
    """At 120 columns the GPU table (15 columns, about 145 wide) drops FLOP/B and bound first; a note names what
    went and where it still is; prose is wrapped; without a width nothing is dropped."""
    ceilings = Ceilings({"bf16": 750.0}, copy_tbps=4.0)

    def full(backend, median_s):
        r = record(backend, median_s)
        return dataclasses.replace(r, peak_memory_bytes=64 << 20, ceilings=ceiling_share(
            r.figures.tflops, r.figures.tbps, "bf16", ceilings))

    results = [full("sdpa-cudnn", 192e-6), full("flash-attn-varlen", 1.56e-3), full("sdpa-math", 55e-3)]
    wide = render(results, H200)
    assert max(map(len, wide)) > 120 and "FLOP/B" in "\n".join(wide)
    fitted = render(results, H200, width=120)
    assert max(map(len, fitted)) <= 120
    assert "FLOP/B" not in _cells(fitted, "sdpa-cudnn") and "median" in _cells(fitted, "sdpa-cudnn")
    assert any(line.startswith("note: left out to fit 120 columns: FLOP/B") for line in fitted)
    narrow = render(results, H200, width=40)  # no column set fits: each row's name gets a line of its own
    assert "  sdpa-cudnn" in narrow


def test_a_saved_run_to_compare_with_gives_each_case_its_change_and_flags_a_jump():
    """--benchmark-compare's comparison was only in pytest-benchmark's ~250-column tables, and a 10.9x jump
    (220.78 us -> 2.408 ms) was flagged nowhere."""
    from pytest_attn.verdicts.rule import Thresholds, compare
    from pytest_attn.verdicts.runs import by_name

    saved = [record("sdpa-flash", 220.78e-6, test="t::a"), record("sdpa-cudnn", 192e-6, test="t::b")]
    now = [record("sdpa-flash", 2.408e-3, test="t::a"), record("sdpa-cudnn", 192.5e-6, test="t::b"),
           record("flex", 1e-3, shape="bert-base", test="t::c")]
    mine = by_name(now)
    comparisons = [c for c in compare(by_name(saved), mine, Thresholds()) if c.name in mine]
    lines = render(now, H200, compared=("saved run 0003_abc", comparisons))
    text = "\n".join(lines)
    assert "vs saved: the median's change against saved run 0003_abc (--benchmark-compare): 1 SLOWER, 1 SAME" in text
    assert _cells(lines, "sdpa-flash")["vs saved"] == "+990.7% SLOWER"
    assert _cells(lines, "sdpa-cudnn")["vs saved"] == "+0.3%"
    assert _cells(lines, "flex")["vs saved"] == "new"
    assert "vs saved" not in "\n".join(render(now, H200))  # n/a on every row without a run to compare with


def test_a_problem_measured_on_two_gpus_says_vs_best_compares_them():
    """A paired A/B spreads a problem's cases over the GPUs: its block says so, as "vs best" then spans them."""
    one, two = (dataclasses.replace(H200, uuid=f"GPU-{i}") for i in (1, 2))
    apart = render([record("flash-attn", 1e-3, device=one), record("sdpa-flash", 2e-3, device=two)], one)
    assert any("measured on 2 GPUs: \"vs best\" compares them" in line for line in apart)
    together = render([record("flash-attn", 1e-3, device=one), record("sdpa-flash", 2e-3, device=one)], one)
    assert not any("measured on" in line for line in together)
