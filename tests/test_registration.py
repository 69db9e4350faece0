"""Bring your own kernel: back ends from entry points and from a conftest's hook
(pytest_attn.backends.registration, the plugin's registration), and the errors that stop a session at
start-up."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from factories import attention_suite  # noqa: E402

from pytest_attn.backends import Registry, RegistryError, SdpaBackend  # noqa: E402
from pytest_attn.backends.registration import register_entry_points  # noqa: E402
from pytest_attn.core.record import Record  # noqa: E402


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

SUITE = attention_suite("prefill")


def test_a_conftest_back_end_runs_like_a_built_in_one(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-backends=mine,sdpa-math", "--attn-max-time=0.05",
                                "--attn-min-samples=5", "--attn-case=seqlen=64,heads=4,head_dim=32,dtype=fp32",
                                "--attn-case=seqlen=32,heads=4,kv_heads=2,head_dim=32,causal,dtype=bf16",
                                "--benchmark-json=out.json", "-rs")
    result.assert_outcomes(passed=3, skipped=1)  # only the ad-hoc cases; "mine" refuses bf16
    result.stdout.fnmatch_lines(["*mine takes fp32 only*"])
    records = [Record.from_json(b["extra_info"]) for b in json.loads((pytester.path / "out.json").read_text())[
        "benchmarks"]]
    by_backend = {r.case.backend: r for r in records if r.case.shape == "adhoc-b1-sq64-sk64-h4x4-d32"}
    assert by_backend["sdpa-math"].peers.speedup == 1.0 and by_backend["mine"].peers.speedup_vs == "sdpa-math"
    assert by_backend["mine"].peers.speedup > 0 and by_backend["mine"].peak_memory_bytes is None  # CPU: n/a


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
    result.stderr.fnmatch_lines(["*registering back ends: */conftest.py: back end 'mine' is registered twice*"])
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
