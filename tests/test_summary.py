from __future__ import annotations

import dataclasses

from pytest_attn.case import AttnCase, Mask
from pytest_attn.device import DeviceInfo
from pytest_attn.flops import work
from pytest_attn.metrics import figures
from pytest_attn.runner import CaseResult
from pytest_attn.summary import fmt_time, render
from pytest_attn.timing import WarmupReport

H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="2.11", compute_capability=(9, 0), sm_count=132,
                  l2_bytes=60 << 20, total_memory_bytes=141 << 30, driver="580", cuda_version="13.0",
                  nvml_status="ok")


def result(backend, median_s, shape="gpt2-small", clocks=(1980,), timer="kernel-sum", stop="precision",
           expression="", kernels=()):
    case = AttnCase.dense(backend=backend, shape=shape, batch=8, seqlen_q=1024, heads_q=12, head_dim=64,
                          mask=Mask.causal())
    w = work(case)
    return CaseResult(case=case, work=w, figures=figures(w, median_s, H200.peak("bf16"), clocks[0] if clocks else None),
                      samples_s=[median_s] * 10, precision=0.004, stop_reason=stop, timer=timer, timer_note="",
                      calls_per_sample=5, input_sets=2, warmup=WarmupReport([1.0] * 6, 0.1, True),
                      sm_clocks_mhz=list(clocks), check=None, elapsed_s=1.0, expression=expression,
                      kernels=list(kernels))


def test_time_format():
    assert (fmt_time(2.5), fmt_time(0.0123), fmt_time(14.3e-6)) == ("2.500 s", "12.300 ms", "14.30 us")


def test_groups_sit_side_by_side_fastest_first():
    lines = render([result("sdpa-flash", 310e-6), result("sdpa-cudnn", 192e-6), result("flex", 1e-3, "bert-base")],
                   H200, skips=["no CUDA device", "no CUDA device"])
    text = "\n".join(lines)
    assert lines[0].startswith("device: NVIDIA H200 (sm90, 132 SMs")
    gpt2 = text.index("gpt2-small-bf16-causal-fwd:")
    assert gpt2 < text.index("bert-base-bf16-causal-fwd:")
    assert text.index("sdpa-cudnn", gpt2) < text.index("sdpa-flash", gpt2)
    assert "kernel-sum x5" in text and "1980" in text
    assert "2 x no CUDA device" in text


def test_unknown_clock_and_time_cap_are_said():
    text = "\n".join(render([result("sdpa-math", 5e-3, clocks=(), stop="time-cap")], H200))
    row = next(line for line in text.splitlines() if line.strip().startswith("sdpa-math"))
    assert row.split()[8] == "n/a"  # MFU@clk without a clock reading
    assert "stopped at the time-cap" in text


def test_each_result_against_the_fastest_expression_of_the_same_mask():
    custom = "custom_mask (dense bool, 0.001 GB, packed inside each call)"
    results = [result("flashinfer-custom", 5.3e-3, expression=custom),
               result("flash-attn", 1e-3, expression="causal=True"),
               result("flashinfer-packed", 1.2e-3, expression="packed_custom_mask (0.000131 GB, packed once)")]
    text = "\n".join(render(results, H200))
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  flash")}
    assert rows["flash-attn"][4] == "1.00x" and rows["flashinfer-custom"][4] == "5.30x"
    assert rows["flash-attn"][5] == "n/a"  # sdpa-math did not run: no speedup
    assert ("gpt2-small-bf16-causal-fwd: flashinfer-custom (custom_mask (dense bool, 0.001 GB, packed inside each"
            " call)): 5.30x slower than flash-attn (causal=True) for the same mask") in text
    assert "flashinfer-packed (" not in text.split("slow paths")[1]  # 1.2x is under the 1.5x threshold
    assert "mask as: flash-attn: causal=True; flashinfer-packed:" in text


def test_share_of_the_measured_ceiling_by_bound_and_the_timing_self_check_line():
    from pytest_attn.ceilings import Ceilings
    from pytest_attn.selfcheck import TimingCheck
    from pytest_attn.summary import ceiling_fraction

    compute, decode = result("sdpa-cudnn", 192e-6), result("sdpa-cudnn", 9e-6)
    assert compute.figures.bound == "compute"
    ceilings = Ceilings({"bf16": compute.figures.tflops * 2}, copy_tbps=4.0)
    assert ceiling_fraction(compute, ceilings) == 0.5
    assert ceiling_fraction(compute, Ceilings({}, 4.0)) is None  # no matmul in bf16 measured
    assert ceiling_fraction(compute, None) is None
    mem = dataclasses.replace(decode, figures=dataclasses.replace(decode.figures, bound="memory", tbps=1.0))
    assert ceiling_fraction(mem, ceilings) == 0.25
    text = "\n".join(render([compute], H200, ceilings=ceilings))
    row = next(line for line in text.splitlines() if line.strip().startswith("sdpa-cudnn")).split()
    assert row[9] == "50.0%"  # "of ceil", after MFU@clk
    assert "timing self-check" not in text
    checked = [dataclasses.replace(compute, timing_check=TimingCheck(192e-6, 190e-6)),
               dataclasses.replace(result("flex", 1e-3), timing_check=TimingCheck(1e-3, 0.8e-3))]
    text = "\n".join(render(checked, H200))
    assert ("timing self-check: 2 cases, reported median / profiler kernel time 1.011 to 1.250; 1 beyond 5%"
            " (see the notes)") in text
