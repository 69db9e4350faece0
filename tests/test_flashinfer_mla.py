"""``flashinfer-mla`` without the library: a stand-in ``BatchMLAPagedAttentionWrapper`` that takes ``plan(metadata=
MLAPlanMetadata.csr(...), ...)`` and ``run(query=, kv_cache=)`` as FlashInfer 0.7.2 documents them, splits the
packed query and cache rows into latent and rope parts as MLA does -- scores ``q_nope . c_kv + q_pe . k_pe``,
values ``c_kv`` -- and reads each request's rows through the planned page indices. The fuzzer's check (every
element against the fp64 oracle) judges the adapter; a stand-in that drops the rope half fails it."""

from __future__ import annotations

import sys
import types
from typing import ClassVar

import pytest
from factories import CPU, H100

torch = pytest.importorskip("torch")

from pytest_attn.backends import builtin_registry  # noqa: E402
from pytest_attn.backends.base import case_refusal  # noqa: E402
from pytest_attn.backends.flashinfer_mla import FlashInferMla  # noqa: E402
from pytest_attn.core.case import MLA_SOFTMAX_SCALE, AttnCase, KvCache, Mask  # noqa: E402
from pytest_attn.fuzz.example import run_example  # noqa: E402


class Metadata:
    def __init__(self, **arrays):
        self.arrays = arrays

    @classmethod
    def csr(cls, qo_indptr, kv_indptr, kv_indices, kv_len_arr):
        return cls(qo=qo_indptr.tolist(), kv=kv_indptr.tolist(), pages=kv_indices.tolist(), lens=kv_len_arr.tolist())


class Mla:
    planned: ClassVar[dict] = {}
    drop_rope = False

    def __init__(self, float_workspace_buffer, use_cuda_graph=False, backend="auto"):
        pass

    def plan(self, *, metadata, num_heads, head_dim_ckv, head_dim_kpe, page_size, causal, sm_scale, q_data_type,
             kv_data_type, use_profiler=False, query_layout="packed", kv_cache_layout="packed"):
        Mla.planned.update(metadata.arrays, heads=num_heads, ckv=head_dim_ckv, kpe=head_dim_kpe, page=page_size,
                           causal=causal, scale=sm_scale)

    def run(self, *, query, kv_cache, out=None, lse=None, return_lse=False, sinks=None):
        p = Mla.planned
        assert query.shape[-1] == kv_cache.shape[-1] == p["ckv"] + p["kpe"] and kv_cache.shape[1] == p["page"]
        outs = []
        for b in range(len(p["qo"]) - 1):
            pages = p["pages"][p["kv"][b]:p["kv"][b + 1]]
            rows = kv_cache[pages].reshape(-1, kv_cache.shape[-1])[: p["lens"][b]].double()
            q = query[p["qo"][b]:p["qo"][b + 1]].double()  # (sq, heads, 576)
            c_kv, k_pe = rows[:, : p["ckv"]], rows[:, p["ckv"]:]
            scores = torch.einsum("qhd,kd->hqk", q[..., : p["ckv"]], c_kv)
            if not Mla.drop_rope:
                scores = scores + torch.einsum("qhd,kd->hqk", q[..., p["ckv"]:], k_pe)
            scores = scores * p["scale"]
            if p["causal"]:
                sq, sk = q.shape[0], rows.shape[0]
                hidden = torch.arange(sk)[None, :] > torch.arange(sq)[:, None] + sk - sq
                scores = scores.masked_fill(hidden, float("-inf"))
            outs.append(torch.einsum("hqk,kd->qhd", torch.softmax(scores, -1), c_kv).to(query.dtype))
        return torch.cat(outs)


@pytest.fixture
def flashinfer(monkeypatch):
    Mla.planned, Mla.drop_rope = {}, False
    fake = types.SimpleNamespace(BatchMLAPagedAttentionWrapper=Mla, mla=types.SimpleNamespace(MLAPlanMetadata=Metadata),
                                 __version__="0.7.2.post1")
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)  # the stand-in runs on the CPU
    return Mla


def _case(**more):
    base = AttnCase.mla(backend="flashinfer-mla", shape="dsv3", batch=3, seqlen_k=70, heads_q=8, dtype="bf16",
                        mask=Mask.causal())
    return AttnCase(**{**base.__dict__, "seqlens_k": (70, 1, 130), **more})


@pytest.mark.parametrize("queries", [1, 2], ids=["decode", "mtp2"])
def test_mla_decode_reads_the_packed_latent_cache_and_matches_the_oracle(flashinfer, queries):
    case = _case(seqlens_q=(queries,) * 3, seqlens_k=(70, queries, 130))
    check = run_example(case, FlashInferMla(), CPU, seed=5)
    assert check.ok, check.describe(case)
    assert (flashinfer.planned["ckv"], flashinfer.planned["kpe"], flashinfer.planned["page"]) == (512, 64, 64)
    assert flashinfer.planned["scale"] == MLA_SOFTMAX_SCALE and flashinfer.planned["lens"] == [70, queries, 130]


def test_a_kernel_that_drops_the_rope_half_is_caught(flashinfer):
    flashinfer.drop_rope = True
    assert not run_example(_case(), FlashInferMla(), CPU, seed=5).ok


def test_flashinfer_mla_runs_latent_cases_only_and_says_why_not():
    mla = FlashInferMla()
    assert mla.supports(_case(), H100) is None
    plain = AttnCase.dense(backend="flashinfer-mla", shape="x", batch=1, seqlen_q=1, seqlen_k=64, heads_q=8,
                           head_dim=128, mask=Mask.causal())
    assert mla.supports(plain, H100).startswith("flashinfer-mla runs absorbed MLA only")
    small = AttnCase.mla(backend="flashinfer-mla", shape="x", batch=1, seqlen_k=64, heads_q=8, latent=32, rope=16)
    assert mla.supports(small, H100) == "FlashInfer's MLA kernels take one latent KV head of 512 + 64 (got 1 x 32 + 16)"
    appends = _case(seqlens_q=(1, 1, 1), cache=KvCache(256, 1))
    assert "writes nothing into it" in mla.supports(appends, H100)
    assert case_refusal(mla, _case(sinks=True), H100).startswith("flashinfer-mla takes no attention sinks")
    assert "flashinfer-mla" in builtin_registry().names() and mla.only_suites == ("decode",)


def test_the_fuzzer_draws_deepseeks_latent_cases_for_it(flashinfer):
    from pytest_attn.fuzz.space import probe_space

    space = probe_space(FlashInferMla(), H100, "fwd")
    assert not isinstance(space, str), space
    assert space.latent_only and space.mla_dims == ((576, 512),) and space.dtypes == ("fp16", "bf16")
    assert dict(space.by_relation) == {"decode": ("none", "causal")} and space.ragged
