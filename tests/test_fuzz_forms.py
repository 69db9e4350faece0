"""The fuzzer draws the forms beyond plain attention (sinks, unequal head dims, absorbed MLA, an fp8 KV cache)
for the back ends that take them, and finds -- and shrinks -- a planted fault in each: a sink ignored or
counted twice, the rope half of MLA dropped, a KV scale applied twice. The faults live here, never in the
product."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from factories import fuzz_planted  # noqa: E402

from pytest_attn.backends import Registry, builtin_registry  # noqa: E402
from pytest_attn.core.device import DeviceInfo  # noqa: E402
from pytest_attn.core.layouts import sequence  # noqa: E402
from pytest_attn.fuzz.fuzzer import Fuzzer  # noqa: E402
from pytest_attn.fuzz.space import probe_space  # noqa: E402
from pytest_attn.fuzz.strategies import Space, attn_cases  # noqa: E402
from pytest_attn.oracle.reference import Extras, attention_rows  # noqa: E402

CPU = DeviceInfo(kind="cpu", name="cpu", torch_version=torch.__version__)
FAULTS = ("sink_ignored", "sink_twice", "rope_dropped", "kv_scale_twice")


class Planted:
    """The oracle's own math per sequence, taking every form, with one planted fault."""

    name = "planted"
    description = "reference math with a planted fault in a form"
    layout = "thd"
    needs_cuda = False
    has_backward = False
    default_enabled = False
    empty_rows = "zero"
    forms = ("sinks", "fp8-kv")

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def available(self):
        return None

    def supports(self, case, device):
        return None

    def workspace_bytes(self, case):
        return 0

    def _extras(self, inputs):
        extras = Extras.of(inputs)
        if self.fault == "sink_ignored":
            return dataclasses.replace(extras, sinks=None)
        if self.fault == "sink_twice" and extras.sinks is not None:  # e^sink counted twice: sink + ln 2
            return dataclasses.replace(extras, sinks=extras.sinks + math.log(2.0))
        if self.fault == "kv_scale_twice":
            return dataclasses.replace(extras, k_scale=extras.k_scale ** 2, v_scale=extras.v_scale ** 2)
        return extras

    def prepare(self, case, inputs):
        extras = self._extras(inputs)

        def forward():
            out = torch.empty((case.total_q, case.heads_q, case.head_dim_v), dtype=inputs.q.dtype)
            for i in range(case.batch):
                q, k, v = (sequence(t, "thd", case, i, w) for t, w in ((inputs.q, "q"), (inputs.k, "k"),
                                                                      (inputs.v, "k")))
                one = case
                if self.fault == "rope_dropped" and case.latent_kv:  # scores from the latent columns only
                    dv = case.head_dim_v
                    q, k = q[..., :dv], k[..., :dv]
                    one = dataclasses.replace(case, latent_kv=False, head_dim_qk=dv, softmax_scale=case.scale)
                start = sum(case.seqlens_q[:i])
                out[start : start + case.seqlens_q[i]] = attention_rows(q, k, v, one, None, torch.float32, extras)
            return out

        return forward


def _fuzzer(fault: str) -> Fuzzer:
    return Fuzzer(Registry([Planted(fault)]), CPU, dtypes=("fp32",), head_dims=(8, 16))


def test_the_space_of_a_back_end_that_takes_every_form_draws_each():
    space = _fuzzer("none").space("planted", "fwd")
    assert isinstance(space, Space)
    assert space.sinks and space.kv_fp8 and (192, 128) in space.dim_pairs and space.mla_dims

    @settings(settings.get_profile("ci"), database=None, max_examples=200,
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=attn_cases(backend="planted", space=space))
    def draws(case):
        seen.update(case.forms)
        if case.head_dim_qk != case.head_dim_v and not case.latent_kv:
            seen.add("unequal")
        if (case.head_dim_qk, case.head_dim_v) == (192, 128):
            seen.add("192-128")

    seen: set[str] = set()
    draws()
    assert seen == {"sinks", "latent-kv", "fp8-kv", "unequal", "192-128"}


def test_no_form_is_drawn_for_a_backward():
    space = _fuzzer("none").space("planted", "fwd")  # a space with every form, asked for a backward

    @settings(settings.get_profile("ci"), database=None, max_examples=30)
    @given(case=attn_cases(backend="planted", space=space, direction="fwd+bwd", relations=("self", "decode")))
    def plain(case):
        assert case.forms == ()

    plain()


def test_sdpa_math_is_fuzzed_with_sinks_unequal_dims_and_mla_on_the_cpu():
    space = probe_space(builtin_registry().get("sdpa-math"), CPU, "fwd")
    assert isinstance(space, Space)
    assert space.sinks and not space.kv_fp8 and (192, 128) in space.dim_pairs and (48, 32) in space.mla_dims
    flash = probe_space(builtin_registry().get("sdpa-flash"), CPU, "fwd")
    assert isinstance(flash, Space) and (flash.sinks, flash.dim_pairs, flash.mla_dims) == (False, (), ())


def test_the_correct_back_end_passes():
    fuzz_planted(_fuzzer("none"))


@pytest.mark.parametrize("fault", FAULTS)
def test_the_ci_profile_finds_each_planted_fault_in_a_form(fault):
    with pytest.raises(AssertionError, match="planted gives a wrong result"):
        fuzz_planted(_fuzzer(fault))


SHRUNK = {  # what each fault shrinks to: the form that carries it, and the words the report has for it
    "sink_ignored": "sink logit per head",
    "rope_dropped": "latent KV (values = the key's first",
    "kv_scale_twice": "KV cache fp8 with a per-tensor scale",
}


@pytest.mark.parametrize("fault", list(SHRUNK))
def test_a_fault_shrinks_to_a_small_case_of_its_form(fault):
    fuzzer = Fuzzer(Registry([Planted(fault)]), CPU, dtypes=("fp32",), head_dims=(8,))

    # shrinking is what this asks about: Hypothesis' explain phase after it (which parts of the example matter)
    # took half the test's time
    @settings(settings.get_profile("ci"), database=None, max_examples=50,
              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink])
    @given(data=st.data())
    def prop(data):  # one relation: shrinking is what this asks about, not the reach
        fuzzer.check("planted", "fwd", data, relation="decode")

    with pytest.raises(AssertionError) as info:
        prop()
    report = str(info.value).splitlines()[0]
    assert SHRUNK[fault] in report
    assert report.startswith("planted gives a wrong result on 1 x sq=1 sk=")  # one sequence, one query


class MlaOnly(Planted):
    """An MLA kernel (as FlashMLA or FlashInfer's MLA wrapper): latent cases only."""

    def supports(self, case, device):
        return None if case.latent_kv else "an MLA kernel: latent cases only"


def test_an_mla_only_kernel_is_fuzzed_on_latent_cases_and_its_dropped_rope_found():
    fuzzer = Fuzzer(Registry([MlaOnly("none")]), CPU, dtypes=("fp32",))
    space = fuzzer.space("planted", "fwd")
    assert isinstance(space, Space) and space.latent_only and space.mla_dims == ((24, 16), (48, 32))
    fuzz_planted(fuzzer)
    assert fuzzer.reach[("planted", "fwd")].ran["decode"] > 0
    with pytest.raises(AssertionError, match="planted gives a wrong result"):
        fuzz_planted(Fuzzer(Registry([MlaOnly("rope_dropped")]), CPU, dtypes=("fp32",)))


class SinksOnly(Planted):
    """A sink kernel (as FlashInfer's sink wrapper): sink cases only."""

    def supports(self, case, device):
        return None if case.sinks else "a sink kernel: sink cases only"


def test_a_sinks_only_kernel_is_fuzzed_with_a_sink_on_every_case_and_its_faults_found():
    fuzzer = Fuzzer(Registry([SinksOnly("none")]), CPU, dtypes=("fp32",))
    space = fuzzer.space("planted", "fwd")
    assert isinstance(space, Space) and space.sinks and space.sinks_only
    assert space.queries is None and {"self", "prefix", "decode", "serving"} <= set(dict(space.by_relation))

    @settings(settings.get_profile("ci"), database=None, max_examples=20)
    @given(case=attn_cases(backend="planted", space=space))
    def every_case_has_a_sink(case):
        assert case.sinks

    every_case_has_a_sink()
    fuzz_planted(fuzzer)
    assert sum(fuzzer.reach[("planted", "fwd")].ran.values()) > 0
    for fault in ("sink_ignored", "sink_twice"):
        with pytest.raises(AssertionError, match="planted gives a wrong result"):
            fuzz_planted(Fuzzer(Registry([SinksOnly(fault)]), CPU, dtypes=("fp32",)))
