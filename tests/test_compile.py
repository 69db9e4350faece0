"""The compile phase (pytest_attn.engine.compile): modules found per kind of call, built in parallel
with a line each, a second module found once the first is built, and a failed build skipping the cases
that need it with the compiler's last lines. A fake back end stands in for FlashInfer."""

from __future__ import annotations

import time

import pytest
from factories import H200, dense

pytest.importorskip("torch")

from pytest_attn.backends.base import JitModule
from pytest_attn.core.case import Mask
from pytest_attn.core.masks import document
from pytest_attn.engine import compile as compile_mod
from pytest_attn.engine.compile import call_kind, compile_phase, representative


class Compiling:
    """Needs module A first (fp16: 'bad', which fails to build), then B for causal cases -- which, as with
    FlashInfer, only the first call finds and compiles."""

    name = "fake-jit"
    description = "a back end that compiles on first use"
    layout = "thd"
    needs_cuda = True
    has_backward = False
    default_enabled = True

    def __init__(self, broken=()):
        self.built: set[str] = set()
        self.broken = set(broken)
        self.asked: list[tuple[int, ...]] = []
        self.batches: list[list[str]] = []
        self.in_first_call: list[str] = []

    def available(self):
        return None

    def supports(self, case, device):
        return None

    def workspace_bytes(self, case):
        return 0

    def _wanted(self, case):
        return ["bad" if case.dtype == "fp16" else "A"] + (["B"] if case.mask.kind == "causal" else [])

    def prepare(self, case, inputs):
        for name in self._wanted(case):
            if name not in self.built:  # the first call compiles what is not built
                self.build_module(JitModule(name, "FakeLib", "/cache"))
                self.in_first_call.append(name)
        return lambda: inputs.q

    def missing_modules(self, case, inputs):
        self.asked.append(case.seqlens_k)
        first = self._wanted(case)[0]
        return [] if first in self.built else [JitModule(first, "FakeLib", "/cache")]

    def build_module(self, module):
        if module.name in self.broken:
            raise RuntimeError("Ninja build failed. Ninja output:\n[1/2] nvcc ...\nerror: identifier 'x' is undefined")
        time.sleep(0.05)
        self.built.add(module.name)

    def build_modules(self, modules):  # one build for all, as FlashInfer's one ninja run
        self.batches.append(sorted(m.name for m in modules))
        for module in modules:
            self.build_module(module)

    def module_built(self, module):
        return module.name in self.built

    def built_modules(self):
        return set(self.built)


@pytest.fixture(autouse=True)
def cpu_tensors(monkeypatch):
    import torch

    monkeypatch.setattr(compile_mod, "torch_device", lambda device: torch.device("cpu"))


def test_modules_are_found_per_kind_of_call_and_built_once():
    backend = Compiling()
    cases = [dense("fake-jit", 8192, 8192, Mask.causal(), dtype="bf16"), dense("fake-jit", 4096, 4096, Mask.causal(),
             dtype="bf16"), dense("fake-jit", 1024, 1024, dtype="bf16")]
    said: list[str] = []
    report = compile_phase([(c, backend) for c in cases], H200, said.append)
    assert [b.module.name for b in report.builds] == ["A"]  # every case's first module, built once
    assert backend.in_first_call == ["B"]  # what the first module did not cover: compiled by one call
    assert report.more == ["B"] and any(line.startswith("  first fake-jit call compiled B in") for line in said)
    assert all(not b.error for b in report.builds) and not report.blocked
    assert all(k <= 256 for ks in backend.asked for k in ks)  # asked with small cases: lengths choose no module
    assert said[0] == ("compiling 1 FakeLib module(s) in one parallel build before the first sample (first use;"
                       " cached in /cache):")
    assert any(line.startswith("  built A in") for line in said)
    assert report.lines()[0].startswith("compile: 1 FakeLib module(s) built in parallel before the first sample in")
    assert "then one call of each kind" in report.lines()[0]


def test_independent_modules_are_handed_to_the_library_in_one_build():
    class Many(Compiling):
        def _wanted(self, case):
            return [f"m{case.head_dim_qk}"]

    backend = Many()
    cases = [dense("fake-jit", d=d, dtype="bf16") for d in (64, 128, 256)]
    said: list[str] = []
    report = compile_phase([(c, backend) for c in cases], H200, said.append)
    assert backend.batches == [["m128", "m256", "m64"]] and backend.built == {"m64", "m128", "m256"}
    assert sorted(b.module.name for b in report.builds) == ["m128", "m256", "m64"]
    assert sum(line.startswith("  built m") for line in said) == 3


def test_workers_of_one_host_split_the_first_calls_and_build_every_module():
    class Many(Compiling):
        def _wanted(self, case):
            return [f"m{case.head_dim_qk}"]

        def prepare(self, case, inputs):
            self.in_first_call.append(case.head_dim_qk)
            return super().prepare(case, inputs)

    cases = [dense("fake-jit", d=d, dtype="bf16") for d in (32, 64, 128, 256, 96)]
    mine = {}
    for index in (0, 1):
        backend = Many()
        report = compile_phase([(c, backend) for c in cases], H200, lambda line: None, share=(index, 2))
        mine[index] = sorted(backend.in_first_call)  # (made up to four at once)
        assert backend.built == {"m32", "m64", "m128", "m256", "m96"}  # builds: every module (shared on disk)
        assert report.first_calls == (len(mine[index]), 5)
    assert mine == {0: [32, 96, 128], 1: [64, 256]}  # every kind called once, by one worker (kinds 0, 2, 4: 1, 3)
    assert "then one call of 2 of the 5 kinds (this worker's share)" in report.lines()[0]


def test_with_every_module_built_the_first_calls_still_say_what_they_took():
    backend = Compiling()
    backend.built = {"A", "B"}  # a warm cache: nothing to build, the calls only load
    case = dense("fake-jit", 64, 64, dtype="bf16")
    report = compile_phase([(case, backend)], H200, lambda line: None, share=(1, 2))
    assert report.builds == [] and report.first_calls == (0, 1)
    assert report.lines() == []  # this worker's share was no call
    report = compile_phase([(case, backend)], H200, lambda line: None)
    assert report.first_calls == (1, 1)
    [line] = report.lines()
    assert line.startswith("compile: nothing to build; one call of each kind before the first sample, ")


def test_a_failed_build_skips_its_cases_with_the_compilers_last_lines():
    backend = Compiling(broken={"bad"})
    fp16 = dense("fake-jit", 64, 64, dtype="fp16")
    bf16 = dense("fake-jit", 64, 64, dtype="bf16")
    said: list[str] = []
    report = compile_phase([(fp16, backend), (bf16, backend)], H200, said.append)
    assert report.blocked.keys() == {fp16.id}
    assert "FakeLib could not compile bad" in report.blocked[fp16.id]
    assert report.blocked[fp16.id].endswith("error: identifier 'x' is undefined")
    assert any(line.startswith("  FAILED bad after") and "identifier 'x'" in line for line in said)
    assert "1 failed, their cases skipped" in report.lines()[0]


def test_nothing_on_a_cpu_or_for_back_ends_that_do_not_compile():
    from factories import CPU

    backend = Compiling()
    assert compile_phase([(dense("fake-jit"), backend)], CPU, pytest.fail).builds == []
    assert compile_phase([(dense("x"), object())], H200, pytest.fail).builds == []  # type: ignore[list-item]


def test_representative_cases_keep_what_chooses_a_module():
    causal = dense("b", 8192, 8192, Mask.causal(), hq=32, hkv=8, d=128)
    small = representative(causal)
    assert small.seqlens_q == (64,) and small.seqlens_k == (256,) and small.mask == causal.mask
    decode = representative(dense("b", 1, 32768, Mask.causal()))
    assert (decode.seqlens_q, decode.seqlens_k) == ((1,), (256,))
    doc = dense("b", 96, 96, document((32, 64)))
    assert representative(doc) is doc  # a custom mask's rows depend on the lengths: kept
    assert call_kind(causal, Compiling()) == call_kind(dense("b", 128, 512, Mask.causal(), hq=32, hkv=8, d=128),
                                                         Compiling())
    assert call_kind(causal, Compiling()) != call_kind(dense("b", 8192, 8192, Mask.window(64, 0), hq=32, hkv=8,
                                                             d=128), Compiling())
