"""The models-2026 profile (issue 52): DeepSeek-V3 MLA decode and (192, 128) prefill, GPT-OSS-120B with sinks
and its two layer kinds, Llama-3-8B decode with an fp8 KV cache -- each shape with its source, the forms set as
the models have them, and none of them in a profile that has a committed baseline."""

from __future__ import annotations

import json
import math
from pathlib import Path

from pytest_attn.core.catalog import MODELS_2026, PROFILES, SHAPES_BY_NAME, profile_variants
from pytest_attn.core.flops import work

ROOT = Path(__file__).resolve().parent.parent


def _cases():
    return {v.case("x").id.removeprefix("x-"): v.case("x") for v in profile_variants("models-2026")}


def test_deepseek_v3_mla_decode_is_the_absorbed_form_at_flashmlas_counts():
    case = _cases()["deepseek-v3-mla-decode-b64-k4096-bf16-causal-latent-fwd"]
    assert (case.heads_q, case.heads_kv, case.head_dim_qk, case.head_dim_v, case.batch) == (128, 1, 576, 512, 64)
    assert case.latent_kv and math.isclose(case.scale, 1 / math.sqrt(192))
    w = work(case)  # FlashMLA: s_q * total_seqlens * h_q * (d + dv) * 2 and its bytes, bf16
    assert (w.flops, w.min_bytes, w.convention) == (73_014_444_032, 319_815_680, "flashmla")
    batches = {(c.batch, c.max_seqlen_k) for c in _cases().values() if c.latent_kv and not c.ragged}
    assert batches == {(b, k) for b in (1, 64, 128) for k in (4096, 32768)}
    serving = _cases()["deepseek-v3-mla-serving-b64-lognorm4096-s5-bf16-causal-latent-fwd"]
    assert serving.cache is not None and serving.latent_kv and serving.batch == 64


def test_deepseek_prefill_has_unequal_head_dims():
    for n in (4096, 16384):
        case = _cases()[f"deepseek-v3-prefill-{n // 1024}k-bf16-causal-fwd"]
        assert (case.head_dim_qk, case.head_dim_v, case.heads_q, case.max_seqlen_q) == (192, 128, 128, n)


def test_gpt_oss_runs_both_layer_kinds_with_sinks():
    ids = [i for i in _cases() if i.startswith("gpt-oss-120b")]
    assert sorted(ids) == sorted(f"gpt-oss-120b-{s}-bf16-{m}-sinks-fwd" for s in ("prefill", "decode-b64-k8192")
                                 for m in ("win127-0", "causal"))
    case = _cases()["gpt-oss-120b-prefill-bf16-win127-0-sinks-fwd"]
    assert (case.heads_q, case.heads_kv, case.head_dim_qk) == (64, 8, 64)
    assert case.mask.bounds == (127, 0)  # the last 128 keys, the query's own included


def test_llama_fp8_kv_decode():
    case = _cases()["llama3-8b-kvfp8-decode-b64-k32768-bf16-kvfp8-causal-fwd"]
    assert case.kv_dtype == "fp8" and case.dtype == "bf16" and (case.heads_q, case.heads_kv) == (32, 8)
    assert work(case).min_bytes == 64 * 32 * 128 * 2 * 2 + 2 * 64 * 32768 * 8 * 128  # q and o bf16, k and v 1 byte


def test_the_profile_runs_no_mask_suite():
    assert profile_variants("models-2026", "masks") == []  # the mask suite's problems are other profiles'


def test_every_shape_has_a_source_and_no_baselined_profile_holds_one():
    assert all(s.source and SHAPES_BY_NAME[s.name] is s for s in MODELS_2026)
    names = {s.name for s in MODELS_2026}
    for profile in (p for p in PROFILES if p != "models-2026"):
        for kind in ("prefill", "decode", "varlen", "masks"):
            assert not names & {v.shape.name for v in profile_variants(profile, kind)}, profile
    for baseline in ROOT.glob("baselines/*/baseline.json"):
        text = baseline.read_text()
        assert not any(f"-{name}-" in text for name in names), baseline
        json.loads(text)  # a real file, read whole


def test_the_summary_names_flashmlas_convention_only_where_a_latent_case_ran():
    from factories import H200, record

    from pytest_attn.core.case import AttnCase
    from pytest_attn.verdicts.table import render

    mla = AttnCase.mla(backend="flashinfer-mla", shape="dsv3", batch=64, seqlen_k=4096)
    with_mla = "\n".join(render([record("flashinfer-mla", 130e-6, case=mla)], H200))
    assert "latent (MLA) cases: FlashMLA's convention" in with_mla
    assert "FlashMLA" not in "\n".join(render([record("fa3", 1e-3)], H200))


def test_the_padded_baseline_counts_sdpas_gqa_copies_so_an_mla_batch_is_skipped_not_run_out_of_memory():
    """Under a mask SDPA takes GQA to its math path, which repeats K and V per query head in fp32: the MLA serving
    step asked 576 GiB of an H200 for one of them and failed; the estimate now says so before allocating."""
    from pytest_attn.backends.torch_padded import SdpaPaddedBackend

    padded = SdpaPaddedBackend()
    serving = _cases()["deepseek-v3-mla-serving-b64-lognorm4096-s5-bf16-causal-latent-fwd"]
    assert padded.workspace_bytes(serving) > 576 * 2**30
    one = _cases()["deepseek-v3-mla-decode-k4096-bf16-causal-latent-fwd"]  # ran: 3.28 GiB at its peak
    assert padded.workspace_bytes(one) < 4 * 2**30


def test_sdpas_math_path_counts_its_fp32_copies_so_mla_batches_are_skipped_not_run_out_of_memory():
    """The math path upcasts q, k and v to fp32 and repeats k and v per query head under GQA: the MLA batches of 64
    and 128 need more than an H200 has free (125 GiB), the batch of 1 and the loop's one sequence at a time do not."""
    from pytest_attn.backends.torch_sdpa import SdpaBackend, SdpaLoopBackend

    math_path, loop = SdpaBackend("math"), SdpaLoopBackend()
    cases = _cases()
    b64 = cases["deepseek-v3-mla-decode-b64-k4096-bf16-causal-latent-fwd"]
    copies = 64 * 4 * (128 * 576 + 128 * 4096 * (576 + 512))  # fp32 q, and k and v per query head
    assert math_path.workspace_bytes(b64) >= copies > 130 * 2**30
    assert loop.workspace_bytes(b64) < 4 * 2**30  # one request at a time: it ran, 160.9 ms on an H200
    assert math_path.workspace_bytes(cases["deepseek-v3-mla-decode-k4096-bf16-causal-latent-fwd"]) < 4 * 2**30
