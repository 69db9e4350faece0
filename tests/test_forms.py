"""The forms beyond plain attention (issue 52) -- sinks, absorbed MLA, unequal head dims, an fp8 KV cache --
in the case model, the inputs, the fp64 oracle and the FLOP/byte model, each against small cases worked by
hand here (1 query, 2 keys, tiny head dims), never against the oracle's own formula."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.core.case import MLA_SOFTMAX_SCALE, AttnCase, CaseError, Mask  # noqa: E402
from pytest_attn.core.codec import case_from_json, case_json  # noqa: E402
from pytest_attn.core.flops import flops, min_bytes, work  # noqa: E402
from pytest_attn.core.layouts import Inputs  # noqa: E402
from pytest_attn.engine.inputs import E4M3_MAX, make_inputs  # noqa: E402
from pytest_attn.oracle.checks import check_full  # noqa: E402
from pytest_attn.oracle.reference import Extras, attention_rows, reference_attention  # noqa: E402

LN2, LN3 = math.log(2.0), math.log(3.0)


def _case(**fields):
    base = dict(backend="reference", shape="hand", seqlens_q=(1,), seqlens_k=(2,), heads_q=1, heads_kv=1,
                head_dim_qk=1, head_dim_v=1, dtype="fp32", softmax_scale=1.0)
    return AttnCase(**{**base, **fields})


def _t(rows):
    """(tokens, 1 head, d) fp64 from a list of rows."""
    return torch.tensor(rows, dtype=torch.float64)[:, None, :]


def _sinks(*logits):
    return torch.tensor(logits, dtype=torch.float64)


def _oracle(case, q, k, v, extras=None):
    extras = extras if extras is not None else Extras()
    return attention_rows(q, k, v, case, None, torch.float64, extras)[:, 0, :].flatten().tolist()


# ---- sinks --------------------------------------------------------------------------------------------
def test_a_sink_joins_the_softmax_denominator():
    # scores 0 and ln 2 -> e^0 = 1, e^ln2 = 2; sink logit 0 -> e^0 = 1: out = (1*1 + 2*3) / (1 + 2 + 1) = 7/4
    case = _case(sinks=True)
    q, k, v = _t([[1.0]]), _t([[0.0], [LN2]]), _t([[1.0], [3.0]])
    assert _oracle(case, q, k, v, Extras(sinks=_sinks(0.0))) == pytest.approx([7 / 4], abs=1e-12)
    # sink logit ln 2: denominator 1 + 2 + 2 = 5 -> 7/5; without a sink 7/3
    assert _oracle(case, q, k, v, Extras(sinks=_sinks(LN2))) == pytest.approx([7 / 5], abs=1e-12)
    assert _oracle(_case(), q, k, v) == pytest.approx([7 / 3], abs=1e-12)


def test_each_query_head_has_its_own_sink_and_a_row_without_keys_gives_zero():
    # two query heads over one kv head (GQA): sinks 0 and ln 2 give 7/4 and 7/5
    case = _case(sinks=True, heads_q=2, mask=Mask.causal(), seqlens_q=(3,), seqlens_k=(2,))
    q = torch.ones((3, 2, 1), dtype=torch.float64)
    k, v = _t([[0.0], [LN2]]), _t([[1.0], [3.0]])
    out = attention_rows(q, k, v, case, None, torch.float64, Extras(sinks=_sinks(0.0, LN2)))
    # bottom-right causal, 3 queries over 2 keys: row 0 sees none (0), row 1 key 0 only, row 2 both
    assert out[0].flatten().tolist() == [0.0, 0.0]
    assert out[1].flatten().tolist() == pytest.approx([1 / 2, 1 / 3], abs=1e-12)  # e^0 / (e^0 + e^sink)
    assert out[2].flatten().tolist() == pytest.approx([7 / 4, 7 / 5], abs=1e-12)


# ---- absorbed MLA -------------------------------------------------------------------------------------
def test_mla_scores_use_latent_and_rope_and_values_are_the_latent():
    # latent 2 + rope 1: q = [1, 0 | 1]; key 0 = [0, 0 | 0] (score 0), key 1 = [ln2, 7 | ln2] (score ln2 + ln2 = ln 4)
    # weights 1/5, 4/5; values are the keys' first two columns: out = 4/5 * [ln2, 7]
    case = _case(heads_q=1, head_dim_qk=3, head_dim_v=2, latent_kv=True)
    q, k = _t([[1.0, 0.0, 1.0]]), _t([[0.0, 0.0, 0.0], [LN2, 7.0, LN2]])
    wrong_v = _t([[100.0, 100.0], [100.0, 100.0]])  # a latent case never reads v
    assert _oracle(case, q, k, wrong_v) == pytest.approx([0.8 * LN2, 5.6], abs=1e-12)
    # the rope half dropped would give weights 1/3, 2/3: out = 2/3 * [ln2, 7] -- a different number
    assert _oracle(case, q[..., :2], k[..., :2].contiguous(), wrong_v) != pytest.approx([0.8 * LN2, 5.6])


def test_the_mla_builder_is_deepseek_v3_decode():
    case = AttnCase.mla(backend="reference", shape="dsv3", batch=2, seqlen_k=4096)
    assert (case.heads_q, case.heads_kv, case.head_dim_qk, case.head_dim_v) == (128, 1, 576, 512)
    assert case.latent_kv and case.scale == MLA_SOFTMAX_SCALE == pytest.approx(1 / math.sqrt(128 + 64))
    assert case.id == "reference-dsv3-bf16-full-latent-fwd"


def test_mla_inputs_give_values_equal_to_the_keys_latent_columns():
    case = AttnCase.mla(backend="reference", shape="x", batch=2, seqlen_k=5, heads_q=4, latent=8, rope=4,
                        dtype="fp32")
    inputs = make_inputs(case, "thd", "cpu", seed=3)
    assert torch.equal(inputs.v, inputs.k[..., :8]) and inputs.v.is_contiguous()


# ---- unequal head dims --------------------------------------------------------------------------------
def test_unequal_head_dims_hand_case():
    # q = [1, 0]; keys [0, 0] and [ln3, 5]: scores 0, ln 3 -> weights 1/4, 3/4; values of 3 columns
    case = _case(head_dim_qk=2, head_dim_v=3)
    q, k, v = _t([[1.0, 0.0]]), _t([[0.0, 0.0], [LN3, 5.0]]), _t([[4.0, 0.0, 0.0], [0.0, 4.0, 8.0]])
    assert _oracle(case, q, k, v) == pytest.approx([1.0, 3.0, 6.0], abs=1e-12)


# ---- fp8 KV cache ------------------------------------------------------------------------------------
def test_an_fp8_cache_is_dequantised_by_its_scales():
    # k_fp8 = [0, 2] (exact in e4m3), k_scale = ln2 / 2 -> keys 0, ln 2 -> weights 1/3, 2/3
    # v_fp8 = [4, 1], v_scale = 0.5 -> values 2, 0.5: out = 2/3 + 1/3 = 1
    case = _case(kv_dtype="fp8")
    q = _t([[1.0]])
    k = torch.tensor([[[0.0]], [[2.0]]]).to(torch.float8_e4m3fn)
    v = torch.tensor([[[4.0]], [[1.0]]]).to(torch.float8_e4m3fn)
    extras = Extras(k_scale=LN2 / 2, v_scale=0.5)
    assert _oracle(case, q, k, v, extras) == pytest.approx([1.0], abs=1e-12)
    # the v scale applied twice: values 1 and 0.25 -> 1/3 + 1/6 = 1/2
    assert _oracle(case, q, k, v, Extras(k_scale=LN2 / 2, v_scale=0.25)) == pytest.approx([0.5], abs=1e-12)


def test_fp8_inputs_hold_e4m3_and_a_scale_mapping_the_largest_element_to_448():
    case = _case(kv_dtype="fp8", seqlens_q=(4,), seqlens_k=(9,), head_dim_qk=8, head_dim_v=8, dtype="bf16",
                 softmax_scale=None)
    inputs = make_inputs(case, "thd", "cpu", seed=1)
    assert inputs.q.dtype == torch.bfloat16 and inputs.k.dtype == inputs.v.dtype == torch.float8_e4m3fn
    assert float(inputs.k.float().abs().max()) == E4M3_MAX and inputs.k_scale != 1.0
    plain = make_inputs(_case(seqlens_q=(4,), seqlens_k=(9,), head_dim_qk=8, head_dim_v=8, dtype="bf16",
                              softmax_scale=None), "thd", "cpu", seed=1)
    real = inputs.k.float() * inputs.k_scale  # within e4m3's 3-bit mantissa of the bf16 keys a plain case draws
    assert torch.allclose(real, plain.k.float(), rtol=2**-3, atol=inputs.k_scale)
    assert torch.equal(inputs.q, plain.q)  # the forms draw after the plain tensors: q does not move


# ---- the whole oracle on drawn inputs -----------------------------------------------------------------
@pytest.mark.parametrize("fields", [
    dict(sinks=True, heads_q=4, heads_kv=2, mask=Mask.causal()),
    dict(kv_dtype="fp8", dtype="bf16"),
    dict(latent_kv=True, heads_q=4, heads_kv=1, head_dim_qk=24, head_dim_v=16),
    dict(head_dim_qk=24, head_dim_v=16),
    dict(sinks=True, kv_dtype="fp8", latent_kv=True, heads_q=4, heads_kv=1, head_dim_qk=24, head_dim_v=16,
         dtype="bf16"),
])
def test_the_reference_passes_its_own_check_and_a_planted_fault_does_not(fields):
    case = _case(**{"seqlens_q": (5, 3), "seqlens_k": (7, 9), "head_dim_qk": 16, "head_dim_v": 16,
                    "softmax_scale": None, **fields})
    inputs = make_inputs(case, "thd", "cpu", seed=7)
    out = reference_attention(inputs, case)
    assert check_full(case, inputs, out, "thd").ok
    wrong = Inputs(inputs.q, inputs.k, inputs.v, "thd", inputs.cu_seqlens_q, inputs.cu_seqlens_k,
                   sinks=None if case.sinks else torch.zeros(case.heads_q), k_scale=inputs.k_scale * 1.5,
                   v_scale=inputs.v_scale)
    assert not check_full(case, inputs, reference_attention(wrong, case), "thd").ok


# ---- the case model ----------------------------------------------------------------------------------
def test_the_forms_are_in_the_id_and_survive_the_json_round_trip():
    case = _case(sinks=True, kv_dtype="fp8", latent_kv=True, head_dim_qk=3, head_dim_v=2, mask=Mask.window(128))
    assert case.id == "reference-hand-fp32-kvfp8-win128-0-sinks-latent-fwd"
    assert case.forms == ("sinks", "latent-kv", "fp8-kv")
    assert case_from_json(case_json(case, 5)) == (case, 5)
    assert "sinks" not in case_json(_case(), 0)  # a plain case's JSON is unchanged


@pytest.mark.parametrize(("fields", "words"), [
    (dict(kv_dtype="fp16"), "kv_dtype='fp16' is not one of fp8"),
    (dict(kv_dtype="fp8", dtype="fp8"), "an all-fp8 case has its KV in fp8 already"),
    (dict(latent_kv=True, head_dim_qk=2, head_dim_v=2), "the key needs the rope columns"),
    (dict(sinks=True, direction="fwd+bwd"), "sinks: a forward only"),
    (dict(sinks=1), "sinks=1 must be True or False"),
])
def test_an_invalid_form_says_which_field_and_why(fields, words):
    with pytest.raises(CaseError, match=words):
        _case(**fields)


# ---- FLOPs and bytes ---------------------------------------------------------------------------------
def test_a_sink_adds_no_flops_and_its_logits_bytes():
    plain = AttnCase.dense(backend="x", shape="s", batch=1, seqlen_q=4, seqlen_k=8, heads_q=2, head_dim=16,
                           dtype="bf16")
    sunk = AttnCase(**{**plain.__dict__, "sinks": True})
    assert flops(sunk) == flops(plain) == 2 * (16 + 16) * 2 * 4 * 8
    assert min_bytes(sunk) - min_bytes(plain) == 4 * 2  # fp32 logit per query head


def test_mla_decode_counts_as_flashmla_does():
    # FlashMLA tests/test_flash_mla.py: FLOPS = s_q * total_seqlens * h_q * (d + dv) * 2,
    # bytes = (total_seqlens * h_kv * d + b * s_q * h_q * d + b * s_q * h_q * dv) * 2 (bf16)
    b, s_k, h_q = 64, 4096, 128
    case = AttnCase.mla(backend="x", shape="s", batch=b, seqlen_k=s_k)
    w = work(case)
    assert w.flops == 1 * (b * s_k) * h_q * (576 + 512) * 2 == 73_014_444_032
    assert w.min_bytes == (b * s_k * 1 * 576 + b * 1 * h_q * 576 + b * 1 * h_q * 512) * 2 == 319_815_680
    assert w.convention == "flashmla"
    # two queries per request under a causal mask (MTP): FlashMLA still counts every pair
    mtp = AttnCase.mla(backend="x", shape="s", batch=1, seqlen_q=2, seqlen_k=10, heads_q=1, mask=Mask.causal())
    assert flops(mtp) == 2 * 10 * 1 * 1088 * 2


def test_an_fp8_cache_counts_one_byte_per_key_and_value_element():
    # 1 x 1 query, 8 keys, 2 q heads / 1 kv head, d 16, q and o bf16: q 2*16*2 + k 8*16 + v 8*16 + o 2*16*2
    case = AttnCase(backend="x", shape="s", seqlens_q=(1,), seqlens_k=(8,), heads_q=2, heads_kv=1, head_dim_qk=16,
                    head_dim_v=16, dtype="bf16", kv_dtype="fp8")
    assert min_bytes(case) == 64 + 128 + 128 + 64
    assert work(case).convention == "exact-mask"


def test_unequal_dims_count_each_dot_product_at_its_own_width():
    case = AttnCase.dense(backend="x", shape="s", batch=1, seqlen_q=3, heads_q=1, head_dim=192, head_dim_v=128,
                          mask=Mask.causal())
    assert flops(case) == 2 * (192 + 128) * 1 * (1 + 2 + 3)


# ---- back ends on the CPU ----------------------------------------------------------------------------
from pytest_attn.backends import builtin_registry  # noqa: E402
from pytest_attn.backends.base import case_refusal, refusal  # noqa: E402
from pytest_attn.core.device import DeviceInfo  # noqa: E402
from pytest_attn.fuzz.example import run_example  # noqa: E402

CPU = DeviceInfo(kind="cpu", name="cpu", torch_version=torch.__version__)


def _drawn(backend, **fields):
    base = dict(backend=backend, shape="cpu", seqlens_q=(5,), seqlens_k=(9,), heads_q=4, heads_kv=2,
                head_dim_qk=16, head_dim_v=16, dtype="fp32")
    return AttnCase(**{**base, **fields})


@pytest.mark.parametrize("name", ["sdpa-math", "sdpa-loop", "reference"])
@pytest.mark.parametrize("mask", [Mask.none(), Mask.causal(), Mask.window(2, 1)])
def test_sdpa_takes_sinks_as_one_more_key_and_matches_the_oracle(name, mask):
    backend = builtin_registry().get(name)
    case = _drawn(name, sinks=True, mask=mask, **({"seqlens_q": (5, 2), "seqlens_k": (9, 4)}
                                                   if name != "sdpa-math" else {}))
    assert refusal(backend, case, CPU) is None
    check = run_example(case, backend, CPU, seed=11)
    assert check.ok, check.describe(case)


def test_the_hand_case_through_sdpa_math_with_a_sink():
    # the first hand case (7/4) through the back end itself, built from its own inputs
    backend = builtin_registry().get("sdpa-math")
    case = _case(backend="sdpa-math", sinks=True)
    inputs = Inputs(torch.tensor([[[[1.0]]]]), torch.tensor([[[[0.0], [LN2]]]]), torch.tensor([[[[1.0], [3.0]]]]),
                    "bhsd", sinks=torch.tensor([0.0]))
    assert backend.prepare(case, inputs)().flatten().tolist() == pytest.approx([7 / 4], rel=1e-6)


@pytest.mark.parametrize("name", ["sdpa-math", "sdpa-flash", "sdpa-loop", "flex", "reference"])
@pytest.mark.parametrize("dims", [(192, 128), (24, 16)])
def test_unequal_head_dims_run_end_to_end_on_the_cpu(name, dims):
    backend = builtin_registry().get(name)
    case = _drawn(name, head_dim_qk=dims[0], head_dim_v=dims[1], mask=Mask.causal())
    why = refusal(backend, case, CPU)
    if why is not None:
        pytest.skip(why)
    check = run_example(case, backend, CPU, seed=2)
    assert check.ok, check.describe(case)


@pytest.mark.parametrize("name", ["sdpa-math", "sdpa-loop", "reference"])
def test_mla_runs_on_every_back_end_that_takes_its_dims(name):
    backend = builtin_registry().get(name)
    case = AttnCase.mla(backend=name, shape="cpu", batch=2, seqlen_k=17, heads_q=8, latent=32, rope=16, dtype="fp32")
    assert refusal(backend, case, CPU) is None
    check = run_example(case, backend, CPU, seed=4)
    assert check.ok, check.describe(case)


@pytest.mark.parametrize(("name", "fields", "words"), [
    ("sdpa-flash", dict(sinks=True), "SDPA's flash kernel takes no attn_mask, and a sink logit needs one (one"
                                    " more key, biased by the sink)"),
    ("sdpa-math", dict(kv_dtype="fp8"), "SDPA has no fp8 path"),
    ("sdpa-flash", dict(head_dim_v=8), "SDPA's flash kernel requires q, k and v to have the same last dimension"
                                       " (head_dim_qk=16, head_dim_v=8)"),
    ("flex", dict(kv_dtype="fp8"), "flex_attention has no fp8 path"),
    ("flex", dict(sinks=True), "flex takes no attention sinks (a learnable sink logit per query head in the softmax"
                               " denominator): it does not list 'sinks' in its forms"),
    ("varlen", dict(sinks=True, kv_dtype="fp8", dtype="bf16"),
     "varlen takes no attention sinks (a learnable sink logit per query head in the softmax denominator) and no"
     " fp8 (e4m3) KV cache with a per-tensor scale: it does not list 'sinks', 'fp8-kv' in its forms"),
])
def test_a_back_end_that_cannot_take_a_form_says_so(name, fields, words):
    backend = builtin_registry().get(name)
    assert case_refusal(backend, _drawn(name, **fields, seqlens_k=(5,)), CPU) == words


def test_the_reference_takes_an_fp8_cache():
    backend = builtin_registry().get("reference")
    case = _drawn("reference", kv_dtype="fp8", dtype="bf16", sinks=True)
    assert refusal(backend, case, CPU) is None
    assert run_example(case, backend, CPU, seed=5).ok
