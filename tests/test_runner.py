"""run_case end to end on the CPU, with fake back ends for the failure paths."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.backends import SdpaBackend  # noqa: E402
from pytest_attn.core.case import AttnCase, Mask  # noqa: E402
from pytest_attn.core.device import DeviceInfo  # noqa: E402
from pytest_attn.core.record import Record  # noqa: E402
from pytest_attn.engine.runner import (  # noqa: E402
    CaseFailed,
    CaseSkipped,
    RunSettings,
    check_can_run,
    check_case,
    run_case,
)
from pytest_attn.engine.stopping import StopRule, WarmupRule  # noqa: E402

CPU = DeviceInfo(kind="cpu", name="cpu", torch_version=torch.__version__)
FAST = RunSettings(stop=StopRule(min_samples=5, max_time_s=0.05), warmup=WarmupRule(max_time_s=0.05))


def case(backend="sdpa-math", direction="fwd", mask=Mask.causal()):
    return AttnCase.dense(backend=backend, shape="tiny", batch=2, seqlen_q=32, seqlen_k=48, heads_q=4, heads_kv=2,
                          head_dim=16, dtype="fp32", mask=mask, direction=direction)


class FakeBackend:
    name = "fake"
    description = "test double"
    layout = "bhsd"
    needs_cuda = False
    has_backward = True
    default_enabled = True

    def __init__(self, forward=None, reason=None):
        self._forward, self._reason = forward, reason
        self.inputs = None

    def available(self):
        return None

    def supports(self, case, device):
        return self._reason

    def workspace_bytes(self, case):
        return 0

    def prepare(self, case, inputs):
        self.inputs = weakref.ref(inputs.q)
        return lambda: self._forward(inputs)


def test_cpu_case_measures_and_reports():
    result = run_case(case(), SdpaBackend("math"), CPU, FAST, label="t.py::test[x]")
    assert result.timing.timer == "cpu" and len(result.timing.samples_s) >= 5
    assert result.check is not None and result.check.max_error <= result.check.allowed
    assert result.test == "t.py::test[x]" and result.case == case() and result.device == CPU
    assert result.figures.mfu_datasheet is None and result.clocks.sm_clock_mhz is None  # CPU: not known
    assert result.figures.flops_convention == "exact-mask" and result.figures.tflops > 0
    assert result.work.flops == 2 * 32 * 4 * sum(min(48, i + 1 + 16) for i in range(32)) * 2
    assert Record.from_json(result.to_json()) == result


def test_fwd_bwd_runs_the_backward():
    result = run_case(case(direction="fwd+bwd"), SdpaBackend("math"), CPU, FAST)
    fwd = run_case(case(), SdpaBackend("math"), CPU, FAST)
    assert result.work.flops == round(3.5 * fwd.work.flops)


def test_check_case_checks_and_runs_once():
    calls = []

    def sdpa(inputs):
        import torch.nn.functional as F

        calls.append(1)
        return F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, enable_gqa=True)

    assert check_case(case(mask=Mask.none()), FakeBackend(sdpa), CPU, FAST) is None
    assert len(calls) == 2  # the check's call and one run of the step, nothing timed


def test_skips_say_why():
    with pytest.raises(CaseSkipped, match=r"^no CUDA device$"):
        run_case(case("sdpa-efficient"), SdpaBackend("efficient"), CPU, FAST)
    with pytest.raises(CaseSkipped, match=r"^not today$"):
        run_case(case("fake"), FakeBackend(reason="not today"), CPU, FAST)
    nobwd = FakeBackend()
    nobwd.has_backward = False
    with pytest.raises(CaseSkipped, match="fake has no backward pass"):
        run_case(case("fake", "fwd+bwd"), nobwd, CPU, FAST)


def test_memory_check_skips_before_allocating():
    gpu = DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="x", l2_bytes=60 << 20)
    big = AttnCase.dense(backend="sdpa-math", shape="hunyuan-video", batch=1, seqlen_q=111_856, heads_q=24,
                         head_dim=128)
    with pytest.raises(CaseSkipped) as info:
        check_can_run(big, SdpaBackend("math"), gpu, free_bytes=120 << 30)
    assert "needs about 3" in str(info.value) and "GiB of GPU memory" in str(info.value)
    assert "120.00 GiB is free" in str(info.value)


def test_wrong_output_fails_with_the_worst_element():
    def top_left(inputs):
        import torch.nn.functional as F

        return F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, is_causal=True, enable_gqa=True)

    with pytest.raises(CaseFailed, match=r"wrong output before timing: max \|out - ref\| = .* at sequence"):
        run_case(case("fake"), FakeBackend(top_left), CPU, FAST)


def _bottom_right(inputs):
    import torch.nn.functional as F

    sq, sk = inputs.q.shape[-2], inputs.k.shape[-2]
    mask = torch.ones(sq, sk, dtype=torch.bool).tril(diagonal=sk - sq)
    return F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, attn_mask=mask, enable_gqa=True)


def test_a_wrong_output_an_adapter_knows_for_a_library_bug_is_a_skip_that_says_so():
    """SDPA's memory-efficient kernel with an attn_mask past 2^32 elements (pytorch/pytorch#187227) gives wrong rows:
    a back end that names the bug for the case turns its wrong output into a skip naming it and what was measured;
    a right output is measured as any (the library fixed); a wrong output it names no bug for still fails."""

    def top_left(inputs):
        import torch.nn.functional as F

        return F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, is_causal=True, enable_gqa=True)

    class Known(FakeBackend):
        def known_wrong(self, c):
            return "a known bug in the library (issue 1)" if c.max_seqlen_k == 48 else None

    with pytest.raises(CaseSkipped, match=r"^a known bug in the library \(issue 1\)\. Measured here: .*wrong output"):
        run_case(case("fake"), Known(top_left), CPU, FAST)
    with pytest.raises(CaseFailed, match="wrong output before timing"):
        run_case(AttnCase.dense(backend="fake", shape="tiny", batch=2, seqlen_q=32, seqlen_k=40, heads_q=4, heads_kv=2,
                                head_dim=16, dtype="fp32", mask=Mask.causal()), Known(top_left), CPU, FAST)
    assert run_case(case("fake"), Known(_bottom_right), CPU, FAST).median_s > 0


def test_sdpa_efficient_names_the_mask_offset_bug_from_2_to_the_32_mask_elements():
    efficient, mask = SdpaBackend("efficient"), SdpaBackend("efficient", force_mask=True)
    hunyuan = AttnCase.dense(backend="sdpa-efficient-mask", shape="hunyuan-video", batch=1, seqlen_q=111_856,
                             heads_q=24, head_dim=128, dtype="bf16", mask=Mask.causal())
    said = mask.known_wrong(hunyuan)
    assert said and "pytorch/pytorch#187227" in said and "from 2^32 / 111856 = 38397 on" in said
    assert efficient.known_wrong(hunyuan) is None  # is_causal: no mask tensor to read
    under = AttnCase.dense(backend="sdpa-efficient-mask", shape="s", batch=1, seqlen_q=65_536, seqlen_k=65_535,
                           heads_q=1, head_dim=64, dtype="bf16", mask=Mask.causal())
    assert mask.known_wrong(under) is None
    assert SdpaBackend("math", force_mask=True).known_wrong(hunyuan) is None


def test_backend_error_fails_the_case_and_releases_its_tensors():
    backend = FakeBackend(lambda inputs: (_ for _ in ()).throw(RuntimeError("CUDA error: an illegal memory access")))
    with pytest.raises(CaseFailed, match="fake-tiny-fp32-causal-fwd: its forward raised RuntimeError: CUDA error") \
            as info:
        run_case(case("fake"), backend, CPU, RunSettings(verify=False))
    gc.collect()
    assert backend.inputs() is None  # the case's tensors are freed although the failure is kept
    assert "Traceback" not in str(info.value) and len(str(info.value).splitlines()) == 3  # what, where, what to do


def test_out_of_memory_message():
    backend = FakeBackend(lambda inputs: (_ for _ in ()).throw(RuntimeError("CUDA out of memory. Tried to allocate")))
    with pytest.raises(CaseFailed, match="its memory was released and the session goes on"):
        run_case(case("fake"), backend, CPU, RunSettings(verify=False))


def test_a_gpu_size_case_on_a_cpu_is_refused_before_it_starts_with_the_estimate():
    hunyuan = AttnCase.dense(backend="sdpa-math", shape="hunyuan-video", batch=1, seqlen_q=111_856, heads_q=24,
                             head_dim=128, dtype="fp32")
    settings = RunSettings(cpu_gflops={"fp32": 100.0})
    with pytest.raises(CaseSkipped) as info:
        check_can_run(hunyuan, SdpaBackend("math"), CPU, None, settings)
    # 4 x 111,856^2 x 24 heads x 128 = 153,745 GFLOP: 12,300 s at 12.5 GFLOP/s
    assert ("one call is 153,744.6 GFLOP: about 3.4 h on this CPU (a fp32 matmul runs at 100 GFLOP/s here,"
            " attention at about 12% of that)") in str(info.value)
    assert str(info.value).endswith("Run it on a GPU, or give it a smaller shape")  # the plugin knows better
    check_can_run(case(), SdpaBackend("math"), CPU, None, settings)  # a tiny case runs


def test_a_case_that_would_not_fit_in_host_memory_is_refused():
    with pytest.raises(CaseSkipped, match=r"of host memory .* but 0.00 GiB is free; skipped before allocating"):
        check_can_run(case(), SdpaBackend("math"), CPU, free_bytes=1024)


def test_host_free_memory_is_read_from_meminfo(tmp_path):
    from pytest_attn.engine.probe import host_free_bytes

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n")
    assert host_free_bytes(meminfo) == 20000000 * 1024
    assert host_free_bytes(tmp_path / "missing") is None


def test_a_cpu_call_slower_than_the_limit_is_skipped_after_two_calls():
    import time

    calls = []

    def slow(inputs):
        import torch.nn.functional as F

        calls.append(1)
        time.sleep(0.05)
        return F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, enable_gqa=True)

    with pytest.raises(CaseSkipped, match=r"one call takes \d+\.\d s on this CPU, over the 0.02 s a call may take"):
        run_case(case(mask=Mask.none()), FakeBackend(slow), CPU, RunSettings(cpu_call_limit_s=0.02))
    assert len(calls) == 2  # the first call alone may pay the process's one-time costs


def test_the_cpu_call_limit_is_read_when_settings_are_made(monkeypatch):
    """A test whose run must not trip the limit on a loaded machine raises it before the session makes its settings
    (the A/B's arms get it from there): test_ab's real run on a 2-core CI box saw a tiny case's call take 1.9 s."""
    from pytest_attn.engine import settings

    assert RunSettings().cpu_call_limit_s == settings.CPU_CALL_LIMIT_S == 0.5
    monkeypatch.setattr(settings, "CPU_CALL_LIMIT_S", 600.0)
    assert RunSettings().cpu_call_limit_s == 600.0


def test_on_a_cpu_the_time_caps_read_the_clock_the_timer_reads(monkeypatch, fake_clock):
    """A run on a fake clock (as the gate's end-to-end tests make) does the same work however loaded the machine is:
    its warm-up's and its sampling's caps are 0.08 s and 0.2 s of the fake clock, 10-12 ms a call, not of the
    host's (where these calls take microseconds: thousands of calls, fewer on a busy machine)."""
    import torch.nn.functional as F

    from pytest_attn.engine import timers

    monkeypatch.setattr(timers, "CPU_CLOCK", fake_clock)
    calls = []

    def ten_ms(inputs):
        calls.append(1)
        fake_clock.advance(0.01 * (1 + 0.2 * (len(calls) % 2)))  # 10 and 12 ms: neither settled nor precise
        return F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, enable_gqa=True)

    settings = RunSettings(stop=StopRule(min_samples=5, max_time_s=0.2, target_precision=0.001),
                           warmup=WarmupRule(min_time_s=0.05, max_time_s=0.08))
    record = run_case(case(mask=Mask.none()), FakeBackend(ten_ms), CPU, settings)
    assert record.timing.stop_reason == "time-cap"
    assert 15 <= len(record.timing.samples_s) <= 20  # 0.2 s of 10-12 ms calls
    assert 7 <= record.timing.warmup_calls <= 9  # 0.08 s of them


def test_a_slow_first_call_alone_does_not_skip_a_cpu_case():
    import time

    calls = []

    def first_slow(inputs):
        import torch.nn.functional as F

        calls.append(1)
        if len(calls) == 1:
            time.sleep(1.5)  # autograd's threads starting, kernels loading: once per process
        return F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, enable_gqa=True)

    # the limit well above what a tiny call takes even on a loaded machine (a 0.2 s one could be missed there)
    record = run_case(case(mask=Mask.none()), FakeBackend(first_slow), CPU,
                      dataclasses.replace(FAST, cpu_call_limit_s=1.0))
    assert record.median_s < 1.0


def _nan_at(t, index):
    t = t.clone()
    t[index] = float("nan")
    return t


@pytest.mark.parametrize(("where", "message"), [
    ("unsampled-row", r"gives a wrong output before timing: nan \(the whole tensor was checked"),
    ("gradient", r"gives a wrong gradient dv before timing: nan \(the whole tensor was checked"),
])
def test_nan_anywhere_fails_before_timing(where, message):
    import torch.nn.functional as F

    def planted(inputs):
        out = F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, enable_gqa=True)
        if where == "unsampled-row":  # row 5 of sequence 1: first, last, middle and random rows miss it here
            return _nan_at(out, (1, 0, 5, 0))
        return out + 0 * _nan_dv(inputs.v)  # NaN flows into dv only, through the backward

    direction = "fwd" if where == "unsampled-row" else "fwd+bwd"
    with pytest.raises(CaseFailed, match=message):
        run_case(case(mask=Mask.none(), direction=direction), FakeBackend(planted), CPU, FAST)


class _NanGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):
        return v.clone()

    @staticmethod
    def backward(ctx, grad):
        return _nan_at(grad, (0, 0, 3, 0))


def _nan_dv(v):
    return _NanGrad.apply(v).sum()


def test_a_fwd_bwd_record_carries_the_gradient_check_and_its_cost():
    result = run_case(case(direction="fwd+bwd"), SdpaBackend("math"), CPU, FAST)
    check = result.check
    assert check is not None and check.grad_rows > 0 and check.grad_max_error <= check.grad_allowed
    assert check.seconds > 0 and check.grad_tensor in ("dq", "dk", "dv")


def test_on_a_gpu_a_garbage_collection_runs_only_when_a_case_would_not_fit(monkeypatch):
    """A full collection with torch loaded takes ~0.2 s: before every case it was a third of a warm smoke run."""
    from pytest_attn.engine import runner

    gpu = DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="x", l2_bytes=60 << 20)
    small = case("sdpa-math")
    need = runner.required_bytes(small, SdpaBackend("math"), gpu)
    free = {"bytes": 10 * need}
    released = []
    monkeypatch.setattr(runner, "gpu_free_bytes", lambda: free["bytes"])
    monkeypatch.setattr(runner, "_release", lambda device: released.append(device) or free.update(bytes=10 * need))
    assert runner.make_room(small, SdpaBackend("math"), gpu, FAST) == int(10 * need * FAST.memory_headroom)
    assert released == []  # it fits: no collection
    free["bytes"] = need // 2  # the previous case's memory still held, until a collection frees it
    assert runner.make_room(small, SdpaBackend("math"), gpu, FAST) == int(10 * need * FAST.memory_headroom)
    assert released == [gpu]
    monkeypatch.setattr(runner, "_release", lambda device: released.append(device))  # nothing to free
    free["bytes"] = need // 2
    with pytest.raises(CaseSkipped, match="GiB of GPU memory"):
        runner.make_room(small, SdpaBackend("math"), gpu, FAST)
    released.clear()
    with pytest.raises(CaseSkipped, match="no CUDA"):  # refused by its back end: no collection for that
        runner.make_room(small, FakeBackend(reason="no CUDA here"), gpu, FAST)
    assert released == []
