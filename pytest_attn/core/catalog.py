"""Named attention shapes of real models, and the profiles that select among them.

Each shape notes where its numbers come from. A *variant* is a shape with a dtype, a mask and a
direction; a suite crosses the profile's variants with the selected back ends.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from . import masks
from .case import MLA_SOFTMAX_SCALE, AttnCase, KvCache, Mask

PROFILES: tuple[str, ...] = ("smoke", "default", "full", "cpu", "sustained", "models-2026")

#: Back ends the smoke profile leaves to the others when the default back ends are selected: FlashInfer's
#: batch, paged and decode kernels each need further modules that only their first call reveals, compiled
#: one after another (on an H200: 181 s of first calls after an 87 s parallel build of the first modules).
#: FlashInfer stays in smoke through single-request prefill, with flags and with a custom mask. Name them
#: in --attn-backends to run them with smoke anyway. FlashInfer's sink wrapper takes sink cases, which smoke has not.
SMOKE_LEAVES_OUT: tuple[str, ...] = ("flashinfer-ragged", "flashinfer-paged", "flashinfer-decode-p16",
                                     "flashinfer-decode-p256", "flashinfer-decode-tc-p16", "flashinfer-bsr",
                                     "flashinfer-sink")


KINDS: tuple[str, ...] = ("prefill", "decode", "varlen", "masks")


@dataclass(frozen=True)
class Shape:
    name: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    head_dim: int
    causal: bool  # the model's own mask
    source: str
    decode: bool = False
    seqlens: tuple[int, ...] = ()  # a ragged batch: one length per sequence (queries == keys)
    cache: KvCache | None = None  # a serving batch: ragged KV caches (seqlens_k), new tokens appended
    seqlens_k: tuple[int, ...] = ()  # with cache: each request's keys after the call
    # the forms beyond plain attention (pytest_attn.core.forms)
    head_dim_v: int = 0  # 0: head_dim
    sinks: bool = False
    latent_kv: bool = False
    kv_dtype: str | None = None
    softmax_scale: float | None = None  # None: 1/sqrt(head_dim)

    @property
    def kind(self) -> str:
        """Which suite the shape belongs to: "decode", "varlen" or "prefill"."""
        return "decode" if self.decode else "varlen" if self.seqlens else "prefill"

    def case(self, backend: str, dtype: str, mask: Mask, direction: str) -> AttnCase:
        if self.cache is not None:
            seqlens_q, seqlens_k = (self.seqlen_q,) * self.batch, self.seqlens_k
        elif self.seqlens:
            seqlens_q = seqlens_k = self.seqlens
        else:
            seqlens_q, seqlens_k = (self.seqlen_q,) * self.batch, (self.seqlen_k,) * self.batch
        return AttnCase(
            backend=backend, shape=self.name, seqlens_q=seqlens_q, seqlens_k=seqlens_k, heads_q=self.heads_q,
            heads_kv=self.heads_kv, head_dim_qk=self.head_dim, head_dim_v=self.head_dim_v or self.head_dim,
            dtype=dtype, mask=mask, direction=direction, softmax_scale=self.softmax_scale, cache=self.cache,
            sinks=self.sinks, latent_kv=self.latent_kv, kv_dtype=self.kv_dtype,
        )

    @property
    def own_mask(self) -> Mask:
        return Mask.causal() if self.causal else Mask.none()


@dataclass(frozen=True)
class Model:
    """The attention head layout of a real model, for decode shapes."""

    name: str
    heads_q: int
    heads_kv: int
    head_dim: int
    source: str


QWEN25_7B = Model("qwen2.5-7b", 28, 4, 128, "Qwen2.5-7B config.json: 28 attention heads, 4 KV heads, hidden 3584")
LLAMA3_8B_HEADS = Model("llama3-8b", 32, 8, 128, "Llama-3-8B config.json: 32 attention heads, 8 KV heads, dim 128")
LLAMA3_70B_HEADS = Model("llama3-70b", 64, 8, 128, "Llama-3-70B config.json: 64 attention heads, 8 KV heads, dim 128")


def decode_shape(model: Model, keys: int, batch: int = 1, queries: int = 1) -> Shape:
    """``queries`` new tokens per sequence (1 = plain decode; more = speculative verification)
    against a KV cache of ``keys`` keys, for ``batch`` sequences."""
    step = "decode" if queries == 1 else f"spec{queries}"
    name = f"{model.name}-{step}{'' if batch == 1 else f'-b{batch}'}-k{keys}"
    what = "one new token" if queries == 1 else f"{queries} draft tokens verified at once"
    return Shape(
        name, batch, queries, keys, model.heads_q, model.heads_kv, model.head_dim, True,
        f"{model.source}; {what} against a KV cache of {keys} keys, batch {batch}",
        decode=True,
    )


def serving_mix(model: Model, batch: int, median: int, sigma: float, seed: int, capacity: int,
                append: int = 1) -> Shape:
    """A serving decode step: ``batch`` requests whose cache lengths are drawn from a long-tailed
    log-normal distribution (``median``, ``sigma``; Python's ``random.Random(seed)``), clipped to
    the ``capacity`` of the allocated cache, each appending ``append`` new tokens and attending over its
    own length. The name carries the distribution and the seed, so the batch is the same everywhere."""
    rng = random.Random(seed)
    cached = [min(max(round(rng.lognormvariate(math.log(median), sigma)), 0), capacity - append) for _ in range(batch)]
    seqlens_k = tuple(n + append for n in cached)
    drawn = f"cache lengths ~ lognormal(median {median}, sigma {sigma}), seed {seed}"
    step = "serving" if append == 1 else f"serving-spec{append}"
    return Shape(
        f"{model.name}-{step}-b{batch}-lognorm{median}-s{seed}", batch, append, max(seqlens_k), model.heads_q,
        model.heads_kv, model.head_dim, True,
        f"{model.source}; {batch} requests, {drawn} (min {min(seqlens_k)}, max {max(seqlens_k)} keys), cache of"
        f" {capacity:,} keys each, {append} new token(s) appended per request",
        decode=True, cache=KvCache(capacity, append, 0, drawn), seqlens_k=seqlens_k,
    )


def _decode(keys: int) -> Shape:
    return decode_shape(QWEN25_7B, keys)


HUNYUAN_VIDEO = Shape(
    "hunyuan-video", 1, 111_856, 111_856, 24, 24, 128, False,
    "HunyuanVideo (Tencent, 2024) full-attention DiT blocks: 24 heads x 128;"
    " 111,856 joint video+text tokens, the length users quote for a 720p generation",
)
GPT2_SMALL = Shape(
    "gpt2-small", 8, 1024, 1024, 12, 12, 64, True,
    "GPT-2 small (Radford et al. 2019; HF config): 12 heads, n_embd 768, context 1024; batch 8",
)
GPT3_LIKE = Shape(
    "gpt3-like", 2, 2048, 2048, 96, 96, 128, True,
    "GPT-3 175B (Brown et al. 2020, table 2.1): 96 heads x 128, context 2048; batch 2",
)
BERT_BASE = Shape(
    "bert-base", 16, 512, 512, 12, 12, 64, False,
    "BERT-base (Devlin et al. 2019): 12 heads, hidden 768, 512 tokens; batch 16",
)
BERT_LARGE = Shape(
    "bert-large", 8, 512, 512, 16, 16, 64, False,
    "BERT-large (Devlin et al. 2019): 16 heads, hidden 1024, 512 tokens; batch 8",
)
LLAMA3_8B = Shape(
    "llama3-8b-prefill", 1, 8192, 8192, 32, 8, 128, True,
    "Llama-3-8B config.json: 32 attention heads, 8 KV heads, head dim 128, context 8192; one prompt",
)
LONG_8K = Shape(
    "long-8k", 1, 8192, 8192, 8, 8, 64, False,
    "long-sequence sweep (flash-attn benchmark style): 1 x 8192, 8 heads x 64",
)
LONG_16K = Shape(
    "long-16k", 1, 16384, 16384, 8, 8, 64, False,
    "long-sequence sweep (flash-attn benchmark style): 1 x 16384, 8 heads x 64",
)
DECODE_KEYS: tuple[int, ...] = (64, 256, 1024, 4096, 16384, 32768)
DECODE = tuple(_decode(k) for k in DECODE_KEYS)
DECODE_BATCHED = tuple(decode_shape(QWEN25_7B, k, b) for b in (8, 64) for k in DECODE_KEYS)
DECODE_OTHER = (
    decode_shape(LLAMA3_8B_HEADS, 4096, 16),
    decode_shape(LLAMA3_70B_HEADS, 4096, 16),
    decode_shape(LLAMA3_70B_HEADS, 32768, 1),
)
SPEC_DECODE = tuple(decode_shape(QWEN25_7B, k, 1, 4) for k in (1024, 4096, 32768))
# Serving decode: a batch of requests with ragged caches and appends, padded (sdpa-padded) and not.
SERVING = (
    serving_mix(LLAMA3_8B_HEADS, 64, 1024, 1.2, 7, 32768),
    serving_mix(QWEN25_7B, 256, 512, 1.0, 11, 16384),
    serving_mix(LLAMA3_8B_HEADS, 64, 1024, 1.2, 7, 32768, append=4),
)

# Ragged batches (Llama-3-8B heads), packed as varlen tokens.
VARLEN_MIXED = Shape(
    "varlen-mixed5", 5, 1025, 1025, 32, 8, 128, True,
    "five prompts of very different lengths, 1 to 1,025 tokens (a tile-boundary mix); Llama-3-8B heads",
    seqlens=(1, 7, 128, 300, 1025),
)
VARLEN_SKEWED = Shape(
    "varlen-skewed32", 32, 8192, 8192, 32, 8, 128, True,
    "a skewed serving batch: one 8,192-token prompt and 31 short ones (a long tail of chat turns);"
    " Llama-3-8B heads",
    seqlens=(8192, 2048, 1024, 600, 512, 377, 300, 256, 200, 150, 128, 128, 100, 90, 64, 64,
             50, 40, 33, 32, 17, 16, 16, 9, 8, 7, 5, 4, 3, 2, 1, 1),
)
VARLEN_UNIFORM = Shape(
    "varlen-uniform16x1024", 16, 1024, 1024, 32, 8, 128, True,
    "16 prompts of 1,024 tokens packed as varlen: compares with the same batch padded; Llama-3-8B heads",
    seqlens=(1024,) * 16,
)
VARLEN = (VARLEN_MIXED, VARLEN_SKEWED, VARLEN_UNIFORM)

# The mask suite's mid-size problem: HunyuanVideo's heads at 8,192 tokens.
VIDEO_8K = Shape(
    "video-8k", 1, 8192, 8192, 24, 24, 128, False,
    "HunyuanVideo heads (24 x 128) at 8,192 tokens: the mask suite's mid-size problem",
)

# Tiny shapes for machines without a GPU: every code path (GQA, sq != sk causal, decode, ragged) in
# milliseconds on a CPU.
CPU_SHAPES = (
    Shape("tiny-mha", 2, 128, 128, 4, 4, 32, False, "pytest-attn CPU profile: small multi-head"),
    Shape("tiny-gqa-causal", 2, 96, 96, 8, 2, 32, True, "pytest-attn CPU profile: GQA 4:1, causal"),
    Shape("tiny-cross-causal", 1, 48, 80, 4, 4, 32, True,
          "pytest-attn CPU profile: seqlen_q != seqlen_k, bottom-right causal"),
    Shape("tiny-decode", 4, 1, 256, 8, 1, 64, True, "pytest-attn CPU profile: MQA decode step", decode=True),
    Shape("tiny-spec", 2, 3, 96, 8, 2, 32, True, "pytest-attn CPU profile: 3 draft tokens against 96 keys",
          decode=True),
    Shape("tiny-varlen", 4, 64, 64, 4, 2, 32, True, "pytest-attn CPU profile: ragged batch across tile sizes",
          seqlens=(1, 7, 33, 64)),
    serving_mix(Model("tiny", 8, 2, 32, "pytest-attn CPU profile: GQA 4:1"), 8, 48, 1.0, 3, 256),
)
TINY_MASKS = Shape("tiny-masks", 1, 128, 128, 4, 4, 32, False, "pytest-attn CPU profile: the mask suite")

# What Hopper serves in 2026 (issue 52): the profile models-2026, kept out of the baselined profiles until
# a GPU run baselines it. DeepSeek-V3 config.json: 128 heads, kv_lora_rank 512, qk_rope_head_dim 64,
# qk_nope_head_dim 128, v_head_dim 128; GPT-OSS-120B config.json: 64 q / 8 kv heads x 64, sliding_window 128
# on alternate layers, a learnable sink per head.
_DSV3 = "DeepSeek-V3 config.json (128 heads, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128)"
_MLA = Model("deepseek-v3-mla", 128, 1, 576, f"{_DSV3}; absorbed MLA decode: one latent KV head of 512 + 64,"
             " values its first 512, scale 1/sqrt(192) (FlashMLA's shape class)")
MLA_DECODE = tuple(dataclasses.replace(decode_shape(_MLA, keys, batch), head_dim_v=512, latent_kv=True,
                                       softmax_scale=MLA_SOFTMAX_SCALE)
                   for batch in (1, 64, 128) for keys in (4096, 32768))
MLA_SERVING = dataclasses.replace(serving_mix(_MLA, 64, 4096, 1.0, 5, 32768), head_dim_v=512, latent_kv=True,
                                  softmax_scale=MLA_SOFTMAX_SCALE)
DSV3_PREFILL = tuple(Shape(f"deepseek-v3-prefill-{n // 1024}k", 1, n, n, 128, 128, 192, True,
                           f"{_DSV3}; prefill before absorption: q/k 128 + 64 = 192, v 128; one prompt of {n:,}",
                           head_dim_v=128) for n in (4096, 16384))
_GPT_OSS = Model("gpt-oss-120b", 64, 8, 64, "GPT-OSS-120B config.json: 64 q / 8 kv heads x 64, sliding_window 128"
                 " on alternate layers (window(127, 0): the last 128 keys), a learnable sink logit per head")
GPT_OSS = (Shape("gpt-oss-120b-prefill", 1, 8192, 8192, 64, 8, 64, True, f"{_GPT_OSS.source}; one 8,192-token"
                 " prompt", sinks=True),
           dataclasses.replace(decode_shape(_GPT_OSS, 8192, 64), sinks=True))
#: GPT-OSS's two layer kinds: the sliding window of 128 tokens (vLLM passes window_size (127, 0)), and full causal.
GPT_OSS_MASKS = (Mask.window(127, 0), Mask.causal())
_LLAMA_FP8 = Model("llama3-8b-kvfp8", 32, 8, 128, f"{LLAMA3_8B_HEADS.source}; KV cache in fp8 (e4m3), one scale"
                   " per tensor")
FP8_KV_DECODE = tuple(dataclasses.replace(decode_shape(_LLAMA_FP8, keys, batch), kv_dtype="fp8")
                      for batch, keys in ((16, 4096), (64, 32768)))
MODELS_2026 = (*MLA_DECODE, MLA_SERVING, *DSV3_PREFILL, *GPT_OSS, *FP8_KV_DECODE)

SHAPES: tuple[Shape, ...] = (
    HUNYUAN_VIDEO, GPT2_SMALL, GPT3_LIKE, BERT_BASE, BERT_LARGE, LLAMA3_8B, LONG_8K, LONG_16K,
    *DECODE, *DECODE_BATCHED, *DECODE_OTHER, *SPEC_DECODE, *SERVING, *VARLEN, VIDEO_8K, *CPU_SHAPES, TINY_MASKS,
    *MODELS_2026,
)
SHAPES_BY_NAME = {s.name: s for s in SHAPES}


@dataclass(frozen=True)
class Variant:
    """A shape with dtype, mask and direction: one problem, before a back end is chosen."""

    shape: Shape
    dtype: str
    mask: Mask
    direction: str

    def case(self, backend: str) -> AttnCase:
        return self.shape.case(backend, self.dtype, self.mask, self.direction)


def _variants(
    shapes: Iterable[Shape],
    dtypes: Iterable[str],
    *,
    both_masks: bool,
    directions: Iterable[str] = ("fwd", "fwd+bwd"),
) -> list[Variant]:
    out: list[Variant] = []
    for shape in shapes:
        masks = [Mask.none(), Mask.causal()] if both_masks and not shape.decode else [shape.own_mask]
        dirs = ("fwd",) if shape.decode else tuple(directions)
        out.extend(Variant(shape, dt, m, d) for dt in dtypes for m in masks for d in dirs)
    return out


def _mask_variants(profile: str) -> list[Variant]:
    """The mask suite: one logical mask per variant; every back end expresses it its own way."""
    if profile == "cpu":
        return [Variant(TINY_MASKS, dt, m, "fwd") for dt in ("fp32", "bf16") for m in (
            masks.all_true(), Mask.causal(), masks.document((32, 64, 32)), masks.random_block_sparse(16, 0.3),
            masks.prefix_lm(32), masks.causal("top-left"), Mask.window(24, 0))]
    smoke = [
        Variant(VIDEO_8K, "bf16", Mask.causal(), "fwd"),
        Variant(VIDEO_8K, "bf16", masks.random_block_sparse(128, 0.25), "fwd"),
    ]
    if profile == "smoke":
        return smoke
    more = [
        Variant(HUNYUAN_VIDEO, "bf16", masks.all_true(), "fwd"),
        Variant(VIDEO_8K, "bf16", masks.all_true(), "fwd"),
        Variant(VIDEO_8K, "bf16", masks.document((2048, 3072, 1024, 2048)), "fwd"),
        Variant(VIDEO_8K, "bf16", masks.prefix_lm(1024), "fwd"),
        Variant(VIDEO_8K, "bf16", Mask.window(1024, 0), "fwd"),
        Variant(HUNYUAN_VIDEO, "bf16", Mask.causal(), "fwd"),
    ]
    return smoke + more


def _profile_variants(profile: str) -> list[Variant]:
    if profile == "smoke":  # every suite and library in a few minutes on one GPU (README: the measured time)
        return [
            Variant(LLAMA3_8B, "bf16", Mask.causal(), "fwd"),
            Variant(GPT2_SMALL, "bf16", Mask.causal(), "fwd+bwd"),
            Variant(SHAPES_BY_NAME["llama3-8b-decode-b16-k4096"], "bf16", Mask.causal(), "fwd"),
            Variant(SHAPES_BY_NAME["qwen2.5-7b-spec4-k4096"], "bf16", Mask.causal(), "fwd"),
            Variant(SERVING[0], "bf16", Mask.causal(), "fwd"),
            Variant(VARLEN_MIXED, "bf16", Mask.causal(), "fwd"),
        ]
    if profile == "default":
        prefill = (HUNYUAN_VIDEO, GPT2_SMALL, GPT3_LIKE, BERT_BASE, BERT_LARGE, LLAMA3_8B, LONG_8K, LONG_16K)
        decode = [s for s in (*DECODE, *DECODE_BATCHED) if s.seqlen_k in (256, 4096, 32768)]
        return (_variants(prefill, ("bf16",), both_masks=False)
                + _variants([*decode, *DECODE_OTHER, *SPEC_DECODE[1:], *SERVING], ("bf16",), both_masks=False)
                + _variants(VARLEN, ("bf16",), both_masks=True))
    if profile == "full":
        prefill = (HUNYUAN_VIDEO, GPT2_SMALL, GPT3_LIKE, BERT_BASE, BERT_LARGE, LLAMA3_8B, LONG_8K, LONG_16K)
        return (_variants(prefill, ("bf16", "fp16"), both_masks=True)
                + _variants([*DECODE, *DECODE_BATCHED, *DECODE_OTHER, *SPEC_DECODE, *SERVING], ("bf16", "fp16"),
                            both_masks=False)
                + _variants(VARLEN, ("bf16", "fp16"), both_masks=True))
    if profile == "cpu":
        return _variants(CPU_SHAPES, ("fp32", "bf16"), both_masks=False)
    if profile == "sustained":  # "what will my model see": prefill and training steps at the power cap
        return [Variant(shape, "bf16", Mask.causal() if shape.causal else Mask.none(), direction)
                for shape in (LLAMA3_8B, HUNYUAN_VIDEO) for direction in ("fwd", "fwd+bwd")]
    if profile == "models-2026":
        return [Variant(shape, "bf16", mask, "fwd") for shape in MODELS_2026
                for mask in (GPT_OSS_MASKS if shape in GPT_OSS else (shape.own_mask,))]
    raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")


def profile_variants(profile: str, kind: str = "all") -> list[Variant]:
    """The problems a profile runs for one suite kind ("prefill", "decode", "varlen", "masks", or
    "all" but masks), before back ends and the --attn-dtypes/--attn-directions filters."""
    if kind not in (*KINDS, "all"):
        raise ValueError(f"unknown suite kind {kind!r}; choose one of {', '.join(KINDS)}")
    if kind == "masks":
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
        return [] if profile in ("sustained", "models-2026") else _mask_variants(profile)
    variants = _profile_variants(profile)
    return variants if kind == "all" else [v for v in variants if v.shape.kind == kind]
