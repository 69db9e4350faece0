"""Named attention shapes of real models, and the profiles that select among them.

Each shape notes where its numbers come from. A *variant* is a shape with a dtype, a mask and a
direction; a suite crosses the profile's variants with the selected back ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .case import AttnCase, Mask

PROFILES: tuple[str, ...] = ("smoke", "default", "full", "cpu")


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

    def case(self, backend: str, dtype: str, mask: Mask, direction: str) -> AttnCase:
        return AttnCase.dense(
            backend=backend,
            shape=self.name,
            batch=self.batch,
            seqlen_q=self.seqlen_q,
            seqlen_k=self.seqlen_k,
            heads_q=self.heads_q,
            heads_kv=self.heads_kv,
            head_dim=self.head_dim,
            dtype=dtype,
            mask=mask,
            direction=direction,
        )

    @property
    def own_mask(self) -> Mask:
        return Mask.causal() if self.causal else Mask.none()


def _decode(keys: int) -> Shape:
    return Shape(
        f"qwen2.5-7b-decode-k{keys}", 1, 1, keys, 28, 4, 128, True,
        "Qwen2.5-7B config.json: 28 attention heads, 4 KV heads, hidden 3584 (head dim 128);"
        " one new token against a KV cache of this many keys",
        decode=True,
    )


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

# Tiny shapes for machines without a GPU: every code path (GQA, sq != sk causal, decode) in
# milliseconds on a CPU.
CPU_SHAPES = (
    Shape("tiny-mha", 2, 128, 128, 4, 4, 32, False, "pytest-attn CPU profile: small multi-head"),
    Shape("tiny-gqa-causal", 2, 96, 96, 8, 2, 32, True, "pytest-attn CPU profile: GQA 4:1, causal"),
    Shape("tiny-cross-causal", 1, 48, 80, 4, 4, 32, True,
          "pytest-attn CPU profile: seqlen_q != seqlen_k, bottom-right causal"),
    Shape("tiny-decode", 4, 1, 256, 8, 1, 64, True, "pytest-attn CPU profile: MQA decode step", decode=True),
)

SHAPES: tuple[Shape, ...] = (
    HUNYUAN_VIDEO, GPT2_SMALL, GPT3_LIKE, BERT_BASE, BERT_LARGE, LLAMA3_8B, LONG_8K, LONG_16K,
    *DECODE, *CPU_SHAPES,
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


def profile_variants(profile: str) -> list[Variant]:
    """The problems a profile runs (before back ends and the --attn-dtypes filter are applied)."""
    if profile == "smoke":  # about a minute on one GPU
        return [
            Variant(HUNYUAN_VIDEO, "bf16", Mask.none(), "fwd"),
            Variant(LLAMA3_8B, "bf16", Mask.causal(), "fwd"),
            Variant(GPT2_SMALL, "bf16", Mask.causal(), "fwd+bwd"),
            Variant(SHAPES_BY_NAME["qwen2.5-7b-decode-k4096"], "bf16", Mask.causal(), "fwd"),
        ]
    if profile == "default":
        prefill = (HUNYUAN_VIDEO, GPT2_SMALL, GPT3_LIKE, BERT_BASE, BERT_LARGE, LLAMA3_8B, LONG_8K, LONG_16K)
        decode = [s for s in DECODE if s.seqlen_k in (256, 4096, 32768)]
        return _variants(prefill, ("bf16",), both_masks=False) + _variants(decode, ("bf16",), both_masks=False)
    if profile == "full":
        prefill = (HUNYUAN_VIDEO, GPT2_SMALL, GPT3_LIKE, BERT_BASE, BERT_LARGE, LLAMA3_8B, LONG_8K, LONG_16K)
        return _variants(prefill, ("bf16", "fp16"), both_masks=True) + _variants(
            DECODE, ("bf16", "fp16"), both_masks=False
        )
    if profile == "cpu":
        return _variants(CPU_SHAPES, ("fp32", "bf16"), both_masks=False)
    raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
