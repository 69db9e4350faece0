"""Profiler hooks (pytest_attn.engine.profiler): peak memory, NVTX ranges named by test id, traces --
with fakes where a GPU would be needed."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.backends import builtin_registry  # noqa: E402
from pytest_attn.core.case import AttnCase  # noqa: E402
from pytest_attn.core.device import DeviceInfo  # noqa: E402
from pytest_attn.engine import measure, profiler, runner  # noqa: E402
from pytest_attn.engine.runner import RunSettings  # noqa: E402
from pytest_attn.engine.stopping import StopRule, WarmupRule  # noqa: E402


class FakeCuda:
    """torch.cuda's memory counters, driven by what the step allocates."""

    def __init__(self):
        self.allocated, self.peak = 100, 100

    def synchronize(self):
        return None

    def memory_allocated(self):
        return self.allocated

    def reset_peak_memory_stats(self):
        self.peak = self.allocated

    def max_memory_allocated(self):
        return self.peak


def test_peak_memory_beyond_the_inputs():
    cuda = FakeCuda()

    def step():  # a math-style call: a big temporary, then a smaller output
        cuda.peak = cuda.allocated + 5000
        cuda.allocated += 64
        return "out"

    assert profiler.peak_memory_bytes(step, cuda) == 5000


def test_nvtx_ranges_wrap_warm_up_and_samples(monkeypatch):
    calls = []

    class Recorder:
        def range_push(self, name):
            calls.append(("push", name))

        def range_pop(self):
            calls.append(("pop",))

    monkeypatch.setattr(profiler, "NVTX", lambda: Recorder())
    with profiler.nvtx_range("suites/test_prefill.py::test_prefill[x] samples", True):
        calls.append(("work",))
    with profiler.nvtx_range("not on a GPU", False):
        pass
    assert calls == [("push", "suites/test_prefill.py::test_prefill[x] samples"), ("work",), ("pop",)]


def test_runner_emits_ranges_named_by_test_id(monkeypatch):
    seen = []
    monkeypatch.setattr(measure, "nvtx_range", lambda name, enabled: _Record(seen, name, enabled))
    case = AttnCase.dense(backend="sdpa-math", shape="t", batch=1, seqlen_q=8, heads_q=2, head_dim=8, dtype="fp32")
    cpu = DeviceInfo(kind="cpu", name="cpu", torch_version="x")
    settings = RunSettings(stop=StopRule(min_samples=5, max_time_s=0.05), warmup=WarmupRule(max_time_s=0.05))
    runner.run_case(case, builtin_registry().get("sdpa-math"), cpu, settings, label="t.py::test[id]")
    assert seen == [("t.py::test[id] warm-up", False), ("t.py::test[id] samples", False)]


class _Record:
    def __init__(self, seen, name, enabled):
        seen.append((name, enabled))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_trace_per_case_on_cpu(tmp_path):
    path = profiler.write_trace(lambda: torch.ones(4) @ torch.ones(4), tmp_path / "traces" / "case.json")
    assert json.loads(path.read_text())["traceEvents"]
