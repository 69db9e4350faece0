"""Bring your own kernel: registration (hook, entry points, errors), --attn-case, speedup, peak
memory, NVTX ranges and traces -- with fakes where a GPU would be needed."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from pytest_attn import profiling  # noqa: E402
from pytest_attn.adhoc import AdhocError, parse_case  # noqa: E402
from pytest_attn.backends import Registry, RegistryError, SdpaBackend  # noqa: E402
from pytest_attn.registration import register_entry_points  # noqa: E402

# ---- --attn-case ----------------------------------------------------------------------------


def test_adhoc_cases():
    v = parse_case("batch=4,seqlen=2048,heads=16,head_dim=128,causal,dtype=bf16")
    c = v.case("sdpa-flash")
    assert (c.batch, c.seqlens_q[0], c.seqlens_k[0], c.heads_q, c.heads_kv, c.head_dim_qk, c.dtype) == (
        4, 2048, 2048, 16, 16, 128, "bf16")
    assert c.mask.kind == "causal" and c.direction == "fwd" and v.shape.name == "adhoc-b4-sq2048-sk2048-h16x16-d128"
    decode = parse_case("seqlen_q=1,seqlen_k=8192,heads=32,kv_heads=8,head_dim=128,causal").case("x")
    assert (decode.seqlens_q, decode.seqlens_k, decode.heads_kv) == ((1,), (8192,), 8)
    ragged = parse_case("varlen=1,7,128,300,heads=32,kv_heads=8,head_dim=128,causal")
    assert ragged.case("x").seqlens_q == (1, 7, 128, 300) and ragged.shape.kind == "varlen"
    win = parse_case("seqlen=64,heads=2,head_dim=32,window=16:4,fwd+bwd,name=my-dit")
    assert win.mask == win.mask.window(16, 4) and win.direction == "fwd+bwd" and win.shape.name == "my-dit"


@pytest.mark.parametrize(("spec", "message"), [
    ("seqlen=64,heads=2,head_dim=32,nheads=4", "unknown field 'nheads'; accepted: batch=N"),
    ("seqlen=64,heads=2", "heads= and head_dim= are required"),
    ("seqlen=sixty,heads=2,head_dim=32", "seqlen='sixty' is not an integer"),
    ("seqlen=64,heads=2,head_dim=32,dtype=fp64", "dtype='fp64' is not one of fp16, bf16, fp32, fp8"),
    ("seqlen=64,heads=6,kv_heads=4,head_dim=32", "kv_heads=4 does not divide heads=6"),
    ("heads=2,head_dim=32", "give seqlen="),
    ("seqlen=64,heads=2,head_dim=32,window=a", "window='a' must be LEFT or LEFT:RIGHT"),
    ("seqlen=64,heads=2,head_dim=32,fast", "'fast' is neither field=value nor a flag"),
    ("varlen=1,7,batch=2,heads=2,head_dim=32", "varlen= gives the lengths"),
    ("seqlen=0,heads=2,head_dim=32", "seqlen=0 must be positive"),
])
def test_bad_adhoc_cases_name_the_field(spec, message):
    with pytest.raises(AdhocError, match=message):
        parse_case(spec)


# ---- registration -----------------------------------------------------------------------------


class FakeEntryPoint:
    def __init__(self, name, obj, value="pkg.module:obj"):
        self.name, self.value, self._obj = name, value, obj

    def load(self):
        if isinstance(self._obj, Exception):
            raise self._obj
        return self._obj


def test_entry_points_register_objects_classes_and_factories():
    reg = Registry()

    class Mine(SdpaBackend):
        def __init__(self):
            super().__init__("math")

    sources = register_entry_points(reg, [FakeEntryPoint("a", SdpaBackend("flash")),
                                          FakeEntryPoint("b", lambda: [SdpaBackend("cudnn")])])
    assert reg.names() == ["sdpa-flash", "sdpa-cudnn"] and len(sources) == 2
    register_entry_points(reg, [FakeEntryPoint("c", Mine)])
    assert "sdpa-math" in reg.names()
    with pytest.raises(RegistryError, match=r"entry point 'd' \(pkg.module:obj\) .* failed to load: ImportError: no"):
        register_entry_points(reg, [FakeEntryPoint("d", ImportError("no"))])
    with pytest.raises(RegistryError, match=r"entry point 'e' .*'sdpa-flash' is registered twice"):
        register_entry_points(reg, [FakeEntryPoint("e", SdpaBackend("flash"))])


CONFTEST = '''
import torch
import torch.nn.functional as F


class Mine:
    name = "mine"
    description = "my own attention (SDPA math underneath)"
    layout = "bhsd"
    needs_cuda = False
    has_backward = True
    default_enabled = False

    def available(self):
        return None

    def supports(self, case, device):
        return None if case.dtype == "fp32" else "mine takes fp32 only"

    def workspace_bytes(self, case):
        return 0

    def prepare(self, case, inputs):
        q, k, v = inputs.q, inputs.k, inputs.v
        kw = {"scale": case.scale, "enable_gqa": case.heads_q != case.heads_kv}
        causal = case.mask.kind == "causal" and case.seqlens_q == case.seqlens_k
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)


def pytest_attn_register_backends(registry, config):
    registry.register(Mine())
'''

SUITE = '''
from pytest_attn.plugin import attn_cases


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = attn_cases(metafunc.config, "prefill")
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_attn(attn_bench, case):
    attn_bench(case)
'''


def test_a_conftest_back_end_runs_like_a_built_in_one(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-backends=mine,sdpa-math", "--attn-max-time=0.05",
                                "--attn-min-samples=5", "--attn-case=seqlen=64,heads=4,head_dim=32,dtype=fp32",
                                "--attn-case=seqlen=32,heads=4,kv_heads=2,head_dim=32,causal,dtype=bf16",
                                "--benchmark-json=out.json", "-rs")
    result.assert_outcomes(passed=3, skipped=1)  # only the ad-hoc cases; "mine" refuses bf16
    result.stdout.fnmatch_lines(["*mine takes fp32 only*"])
    benches = {b["extra_info"]["backend"]: b["extra_info"] for b in json.loads((pytester.path / "out.json")
                                                                                .read_text())["benchmarks"]
               if b["extra_info"]["shape"] == "adhoc-b1-sq64-sk64-h4x4-d32"}
    assert benches["sdpa-math"]["speedup"] == 1.0 and benches["mine"]["speedup_vs"] == "sdpa-math"
    assert benches["mine"]["speedup"] > 0 and benches["mine"]["peak_memory_bytes"] is None  # CPU: n/a


def test_bad_registrations_stop_at_start_up(pytester):
    pytester.makeconftest(CONFTEST + "\n\ndef pytest_configure(config):\n    pass\n"
                          "\n\nclass Twice:\n    pass\n" + '''

def pytest_attn_register_backends(registry, config):  # replaces the one above
    registry.register(Mine())
    registry.register(Mine())
''')
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*registering back ends: back end 'mine' is registered twice*"])
    pytester.makeconftest("def pytest_attn_register_backends(registry, config):\n"
                          "    class Half:\n        name = 'half'\n        layout = 'bshd'\n"
                          "    registry.register(Half())\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*is not a pytest-attn back end: it lacks description, needs_cuda*"])
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-case=seqlen=64,heads=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*heads= and head_dim= are required*"])


def test_layouts_are_checked():
    class Odd(SdpaBackend):
        layout = "sbhd"

    with pytest.raises(RegistryError, match="layout='sbhd' is not one of bshd, bhsd, thd"):
        Registry([Odd("math")])


# ---- memory, NVTX, traces -----------------------------------------------------------------------


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

    assert profiling.peak_memory_bytes(step, cuda) == 5000


def test_nvtx_ranges_wrap_warm_up_and_samples(monkeypatch):
    calls = []

    class Recorder:
        def range_push(self, name):
            calls.append(("push", name))

        def range_pop(self):
            calls.append(("pop",))

    monkeypatch.setattr(profiling, "NVTX", lambda: Recorder())
    with profiling.nvtx_range("suites/test_prefill.py::test_prefill[x] samples", True):
        calls.append(("work",))
    with profiling.nvtx_range("not on a GPU", False):
        pass
    assert calls == [("push", "suites/test_prefill.py::test_prefill[x] samples"), ("work",), ("pop",)]


def test_runner_emits_ranges_named_by_test_id(monkeypatch):
    from pytest_attn.case import AttnCase
    from pytest_attn.device import DeviceInfo
    from pytest_attn.runner import RunSettings, _measure

    seen = []
    monkeypatch.setattr("pytest_attn.runner.nvtx_range", lambda name, enabled: _Record(seen, name, enabled))
    case = AttnCase.dense(backend="sdpa-math", shape="t", batch=1, seqlen_q=8, heads_q=2, head_dim=8, dtype="fp32")
    cpu = DeviceInfo(kind="cpu", name="cpu", torch_version="x")
    from pytest_attn.backends import builtin_registry
    from pytest_attn.stopping import StopRule, WarmupRule

    settings = RunSettings(stop=StopRule(min_samples=5, max_time_s=0.05), warmup=WarmupRule(max_time_s=0.05))
    _measure(case, builtin_registry().get("sdpa-math"), cpu, settings, None, "measure", "t.py::test[id]")
    assert seen == [("t.py::test[id] warm-up", False), ("t.py::test[id] samples", False)]


class _Record:
    def __init__(self, seen, name, enabled):
        seen.append((name, enabled))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_trace_per_case_on_cpu(tmp_path):
    path = profiling.write_trace(lambda: torch.ones(4) @ torch.ones(4), tmp_path / "traces" / "case.json")
    assert json.loads(path.read_text())["traceEvents"]
