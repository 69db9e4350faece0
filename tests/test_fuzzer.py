"""The fuzzer (pytest_attn.fuzz.fuzzer) catches real bugs: a correct CPU back end with planted faults,
each found by the ``ci`` profile within its example budget; the same back end without a fault passes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from factories import fuzz_planted  # noqa: E402

from pytest_attn.backends import Registry  # noqa: E402
from pytest_attn.core import masks  # noqa: E402
from pytest_attn.core.device import DeviceInfo  # noqa: E402
from pytest_attn.core.layouts import sequence  # noqa: E402
from pytest_attn.fuzz.fuzzer import JUDGE_PER_RELATION, Fuzzer, Refused  # noqa: E402
from pytest_attn.oracle.reference import attention_rows  # noqa: E402

CPU = DeviceInfo(kind="cpu", name="cpu", torch_version=torch.__version__)
FAULTS = ("none", "cu_seqlens_off_by_one", "top_left_causal", "gqa_head_mapping", "drop_last_sequence",
          "default_scale")


class Planted:
    """Packed-token attention computed per sequence with the upcast math, plus one planted fault."""

    name = "planted"
    description = "reference math with a planted fault"
    layout = "thd"
    needs_cuda = False
    has_backward = True
    default_enabled = False
    empty_rows = "zero"

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def available(self):
        return None

    def supports(self, case, device):
        return None

    def workspace_bytes(self, case):
        return 0

    def prepare(self, case, inputs):
        fault = self.fault

        def forward():
            out = torch.empty((case.total_q, case.heads_q, case.head_dim_v), dtype=inputs.q.dtype)
            starts_k = inputs.cu_seqlens_k.tolist()
            for i in range(case.batch):
                if fault == "drop_last_sequence" and i == case.batch - 1:
                    continue
                q = sequence(inputs.q, "thd", case, i, "q")
                k = sequence(inputs.k, "thd", case, i, "k")
                v = sequence(inputs.v, "thd", case, i, "k")
                if fault == "cu_seqlens_off_by_one" and i > 0:  # reads keys from one token later
                    lo, n = starts_k[i] + 1, case.seqlens_k[i]
                    k = inputs.k[lo : lo + n] if lo + n <= case.total_k else k
                    v = inputs.v[lo : lo + n] if lo + n <= case.total_k else v
                one = case
                if fault == "top_left_causal" and case.mask.kind == "causal":
                    one = _with(case, mask=masks.causal("top-left"))
                if fault == "default_scale":
                    one = _with(case, softmax_scale=None)
                if fault == "gqa_head_mapping" and case.heads_q != case.heads_kv:  # h -> h % kv, not h // group
                    group = case.heads_q // case.heads_kv
                    k = k.repeat(1, group, 1)
                    v = v.repeat(1, group, 1)
                    one = _with(case, heads_kv=case.heads_q)
                start = sum(case.seqlens_q[:i])
                out[start : start + case.seqlens_q[i]] = attention_rows(q, k, v, one, None, q.dtype)
            return out

        return forward


def _with(case, **changes):
    import dataclasses

    return dataclasses.replace(case, **changes)


def _fuzz(fault: str, direction: str = "fwd") -> None:
    fuzz_planted(Fuzzer(Registry([Planted(fault)]), CPU, dtypes=("fp32",)), direction)


def test_the_correct_back_end_passes():
    _fuzz("none")
    _fuzz("none", "fwd+bwd")


@pytest.mark.parametrize("fault", FAULTS[1:])
def test_the_ci_profile_finds_each_planted_fault(fault):
    with pytest.raises(AssertionError, match="planted gives a wrong result") as info:
        _fuzz(fault)
    assert "replay: PYTHONPATH=. python -m pytest_attn.fuzz '" in str(info.value)


def test_a_back_end_that_cannot_run_here_is_a_refusal_not_a_skip():
    class GpuOnly(Planted):
        needs_cuda = True

    fuzzer = Fuzzer(Registry([GpuOnly("none")]), CPU)
    assert fuzzer.check("planted", "fwd", data=None) == Refused("no CUDA device")


class FlashLike(Planted):
    """Refuses what SDPA's flash kernel refuses -- a mask it would need a dense attn_mask for, such as
    bottom-right causal with seqlen_q != seqlen_k -- and corrupts single-query attention."""

    def supports(self, case, device):
        if case.mask.kind not in ("none", "causal") or (
                case.mask.kind == "causal" and case.seqlens_q != case.seqlens_k and max(case.seqlens_q) > 1):
            return "takes no attn_mask"
        return None

    def prepare(self, case, inputs):
        forward = super().prepare(case, inputs)

        def corrupted():
            out = forward()
            if self.fault == "single_query" and max(case.seqlens_q) == 1:
                out = out * 1.02
            return out

        return corrupted


def test_a_relation_refused_with_one_mask_is_still_fuzzed_with_the_masks_it_takes():
    fuzzer = Fuzzer(Registry([FlashLike("none")]), CPU, dtypes=("fp32",))
    space = fuzzer.space("planted", "fwd")
    kinds = space.relation_kinds()
    assert set(kinds) == {"self", "prefix", "decode", "cross", "serving"}
    assert kinds["prefix"] == ("none",) and "causal" in kinds["self"]


def test_a_fault_in_single_query_attention_is_caught_where_a_causal_probe_would_refuse_decode():
    fuzzer = Fuzzer(Registry([FlashLike("single_query")]), CPU, dtypes=("fp32",))
    with pytest.raises(AssertionError, match="planted gives a wrong result"):
        fuzz_planted(fuzzer)


def test_real_sdpa_flash_forward_reaches_decode_on_cpu():
    from pytest_attn.backends import builtin_registry

    fuzzer = Fuzzer(builtin_registry(), CPU, dtypes=("fp32",))
    kinds = fuzzer.space("sdpa-flash", "fwd").relation_kinds()
    assert "none" in kinds["decode"] and "none" in kinds["cross"]


class DecodeShy(Planted):
    """Takes the probe's small decode case, refuses every decode case the strategy draws."""

    def supports(self, case, device):
        decode = max(case.seqlens_q) <= 4 and case.seqlens_q != case.seqlens_k
        return "refused" if decode and case.shape != "probe" else None


def test_reach_counts_each_relation_and_names_one_that_never_ran():
    fuzzer = Fuzzer(Registry([DecodeShy("none")]), CPU, dtypes=("fp32",))

    @settings(settings.get_profile("ci"), database=None)
    @given(data=st.data())
    def prop(data):
        fuzzer.check("planted", "fwd", data)

    prop()
    reach = fuzzer.reach[("planted", "fwd")]
    assert reach.ran["self"] and reach.ran["cross"] and reach.refused["decode"]
    assert "decode" in reach.missing()
    assert reach.describe().startswith(f"{reach.total} ran: self {reach.ran['self']}")


def test_reach_is_not_judged_on_a_handful_of_examples():
    from pytest_attn.fuzz.fuzzer import Reach

    reach = Reach(("self", "decode"))
    reach.ran["self"] += 9
    assert reach.missing() == ()
    reach.ran["self"] += 1
    assert reach.missing() == ("decode",)


class Compiling(Planted):
    """Compiles one 'kernel' per (head dim, dtype, mask kind) on first use, as FA4 does per shape class,
    and counts them as FA4's adapter does (``compiled_kernels()``)."""

    def __init__(self, fault: str) -> None:
        super().__init__(fault)
        self.kernels: set[tuple] = set()

    def compiled_kernels(self):
        return len(self.kernels)

    def prepare(self, case, inputs):
        self.kernels.add((case.head_dim_qk, case.dtype, case.mask.kind))
        return super().prepare(case, inputs)


def test_reach_says_what_compiling_cost():
    backend = Compiling("none")
    fuzzer = Fuzzer(Registry([backend]), CPU, dtypes=("fp32",), head_dims=(16, 32))
    fuzz_planted(fuzzer)
    reach = fuzzer.reach[("planted", "fwd")]
    assert reach.compiled == len(backend.kernels) >= 2
    assert 0 < reach.compiling_s <= reach.seconds
    assert f"; {reach.compiled} kernel(s) compiled or loaded from a disk cache, the examples that needed one took" \
        in reach.describe()
    plain = Fuzzer(Registry([Planted("none")]), CPU, dtypes=("fp32",), head_dims=(16,))
    fuzz_planted(plain)
    assert plain.reach[("planted", "fwd")].compiled is None  # a back end that cannot say
    assert "compiled" not in plain.reach[("planted", "fwd")].describe()


def _ci(**changes):
    """pytest-attn's ci profile (this suite's own "ci" profile differs), without shrinking."""
    from hypothesis import HealthCheck, Phase

    quiet = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
    return settings(**{"derandomize": True, "max_examples": 50, "deadline": None, "database": None,
                       "suppress_health_check": quiet, "phases": [Phase.explicit, Phase.generate], **changes})


def test_run_gives_every_relation_its_share_of_the_examples():
    # one property that draws the relation first leaves it to Hypothesis' choices, which favour some
    # indices (chunked prefill ran 0 of 67 FA4 examples on an H200); run() gives each its own property
    fuzzer = Fuzzer(Registry([Planted("none")]), CPU, dtypes=("fp32",))
    assert fuzzer.run("planted", "fwd", _ci()) is None
    reach = fuzzer.reach[("planted", "fwd")]
    share = -(-50 // len(reach.relations))
    assert {r: reach.ran[r] + reach.refused[r] for r in reach.relations} == dict.fromkeys(reach.relations, share)
    assert reach.judged == set(reach.relations) and reach.missing() == ()


def test_run_names_a_relation_whose_every_case_is_refused_and_carries_on():
    fuzzer = Fuzzer(Registry([DecodeShy("none")]), CPU, dtypes=("fp32",))
    share = JUDGE_PER_RELATION  # the least each of the five relations must have to be judged
    fuzzer.run("planted", "fwd", _ci(max_examples=5 * share))  # no valid decode example: no error, reach says so
    reach = fuzzer.reach[("planted", "fwd")]
    assert reach.missing() == ("decode",) and reach.refused["decode"]
    assert reach.ran["cross"] and reach.ran["serving"]  # the relations after decode still ran


def test_run_judges_no_relation_on_a_share_too_small_to_mean_anything():
    fuzzer = Fuzzer(Registry([DecodeShy("none")]), CPU, dtypes=("fp32",))
    fuzzer.run("planted", "fwd", _ci(max_examples=8))
    assert fuzzer.reach[("planted", "fwd")].missing() == ()


def test_a_failed_property_is_not_followed_by_a_reach_complaint():
    fuzzer = Fuzzer(Registry([FlashLike("single_query")]), CPU, dtypes=("fp32",))
    with pytest.raises(AssertionError, match="planted gives a wrong result"):
        fuzzer.run("planted", "fwd", _ci())
    reach = fuzzer.reach[("planted", "fwd")]
    assert reach.failed and reach.missing() == ()


class Detached(Planted):
    """Claims a backward, but its output ignores q (``q_free``) or has no autograd graph at all."""

    def __init__(self, how: str) -> None:
        super().__init__("none")
        self.how = how

    def prepare(self, case, inputs):
        import dataclasses

        if self.how == "q_free":  # the right output, but q's gradient never reaches the caller
            return super().prepare(case, dataclasses.replace(inputs, q=inputs.q.detach()))
        forward = super().prepare(case, inputs)
        return lambda: forward().detach()


@pytest.mark.parametrize("how", ["q_free", "detached"])
def test_a_back_end_without_a_gradient_path_gets_a_report_not_an_autograd_error(how):
    from pytest_attn.core.case import AttnCase, Mask
    from pytest_attn.fuzz.example import run_example

    case = AttnCase("planted", "fuzz", (3,), (3,), 1, 1, 8, 8, "fp32", Mask.none(), direction="fwd+bwd")
    check = run_example(case, Detached(how), CPU, seed=0)
    assert not check.ok
    if how == "q_free":
        assert check.tensor == "dq" and check.max_error > 0  # its zero dq against the reference's
    else:
        assert "the output has no autograd graph back to q, k and v" in check.describe(case)


def test_an_exact_result_and_an_exact_reference_say_so_instead_of_ratio_inf():
    from pytest_attn.core.case import AttnCase, Mask
    from pytest_attn.oracle.checks import FullCheck

    case = AttnCase("planted", "fuzz", (3,), (3,), 1, 1, 8, 8, "fp32", Mask.none())
    exact = FullCheck(True, "out", 0.0, 0.0, 1e-5, "nowhere").describe(case)
    assert exact == "out: every element equals the fp64 reference (allowed 1e-05)"
    wrong = FullCheck(False, "out", 0.25, 0.0, 1e-5, "sequence 0, head 0, row 1, column 2").describe(case)
    assert "fp32 math is exact here (allowed 1e-05)" in wrong and "inf" not in wrong
    usual = FullCheck(False, "out", 0.25, 1e-3, 1e-5, "sequence 0, head 0, row 1, column 2").describe(case)
    assert "fp32 math errs 0.001, this is 250x that (allowed 1e-05)" in usual
