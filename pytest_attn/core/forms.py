"""The forms a case may take beyond plain softmax attention, and what makes one invalid. Pure.

Each is forward only and shows in the case's group id:

* ``sinks`` (``-sinks``): a learnable sink logit per query head joins the softmax denominator (GPT-OSS; FA4's
  ``learnable_sink``, FlashInfer's ``sinks=``): ``out = sum_j e^(s_j - m) v_j / (e^(sink_h - m) + sum_j e^(s_j - m))``.
* ``latent_kv`` (``-latent``): absorbed MLA decode (DeepSeek-V3): one latent KV head of ``head_dim_qk`` = latent +
  rope columns is the key, and its first ``head_dim_v`` columns are the values (``AttnCase.mla``). Kept as
  plain (d_qk, d_v, heads_kv=1) plus one flag: every FLOP, byte and layout rule of the other fields holds
  unchanged, and a back end that reads ``v`` gets the right values.
* ``kv_dtype="fp8"`` (``-kvfp8``): an e4m3 KV cache with one scale per tensor, dequantised as
  ``k_fp8.float() * k_scale``; q and the output keep the case's dtype.
"""

from __future__ import annotations

from typing import Protocol


class WithForms(Protocol):
    """What :func:`form_problem` reads of a case (:class:`~.case.AttnCase`, which imports this module)."""

    @property
    def dtype(self) -> str: ...
    @property
    def direction(self) -> str: ...
    @property
    def head_dim_qk(self) -> int: ...
    @property
    def head_dim_v(self) -> int: ...
    @property
    def sinks(self) -> bool: ...
    @property
    def latent_kv(self) -> bool: ...
    @property
    def kv_dtype(self) -> str | None: ...
    @property
    def forms(self) -> tuple[str, ...]: ...

#: KV-cache dtypes other than the case's own (``kv_dtype``): e4m3 with a per-tensor scale.
KV_DTYPES: tuple[str, ...] = ("fp8",)
#: DeepSeek-V3's softmax scale for absorbed MLA: 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) = 1/sqrt(128 + 64),
#: the head dim before absorption, not the 576 columns of the latent key.
MLA_SOFTMAX_SCALE = 192**-0.5
#: The forms a case may use beyond plain attention; a back end lists those it takes in ``forms``.
FORMS: tuple[str, ...] = ("sinks", "latent-kv", "fp8-kv")


class CaseError(ValueError):
    """An invalid case; the message names the field and the value."""


def form_problem(case: WithForms) -> str | None:
    """Why ``case``'s forms are invalid (naming the field), or None."""
    for name in ("sinks", "latent_kv"):
        if not isinstance(getattr(case, name), bool):
            return f"{name}={getattr(case, name)!r} must be True or False"
    if case.kv_dtype is not None and case.kv_dtype not in KV_DTYPES:
        return f"kv_dtype={case.kv_dtype!r} is not one of {', '.join(KV_DTYPES)} (or None: the case's dtype)"
    if case.kv_dtype is not None and case.dtype == "fp8":
        return (f"kv_dtype={case.kv_dtype!r} with dtype='fp8': an all-fp8 case has its KV in fp8 already; give"
                " kv_dtype with a 16- or 32-bit query dtype")
    if case.latent_kv and case.head_dim_v >= case.head_dim_qk:
        return (f"latent_kv with head_dim_v={case.head_dim_v} >= head_dim_qk={case.head_dim_qk}: the values are the"
                " first head_dim_v columns of the key, so the key needs the rope columns after them (DeepSeek-V3:"
                " 576 and 512)")
    if case.forms and case.direction != "fwd":
        return (f"{', '.join(case.forms)}: a forward only (the oracle's gradient check does not take them yet);"
                " give direction='fwd'")
    return None
