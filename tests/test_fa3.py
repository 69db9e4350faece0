"""FlashAttention-3 first class, without the library: stand-in modules for the upstream build
(``flash_attn_interface`` + ``flash_attn_config``) and the forward-only ``fa3-fwd`` wheel
(``fa3_fwd_interface`` + ``fa3_fwd_config``, whose interface imports ``flash_attn_config`` as the real 0.0.3
does), each with the ``CONFIG["build_flags"]`` its build writes. The fuzzer's own check judges the outputs."""

from __future__ import annotations

import dataclasses
import importlib
import sys
import types

import pytest
from factories import CPU, H100

torch = pytest.importorskip("torch")

from pytest_attn.backends import fa3  # noqa: E402
from pytest_attn.backends.base import refusal, unavailable  # noqa: E402
from pytest_attn.backends.flash_attn import FA3, FlashAttnFunc, FlashAttnKvcache, FlashAttnVarlen  # noqa: E402
from pytest_attn.core.case import AttnCase, KvCache, Mask  # noqa: E402
from pytest_attn.fuzz.example import run_example  # noqa: E402
from pytest_attn.oracle.reference import attention_rows  # noqa: E402

#: fa3-fwd 0.0.3's build flags (docs: no backward, no local, no paged KV, no fp16)
FWD_ONLY = {"FLASHATTENTION_DISABLE_BACKWARD": True, "FLASHATTENTION_DISABLE_LOCAL": True,
            "FLASHATTENTION_DISABLE_PAGEDKV": True, "FLASHATTENTION_DISABLE_FP16": True,
            "FLASHATTENTION_DISABLE_FP8": False, "FLASHATTENTION_DISABLE_VARLEN": False,
            "FLASHATTENTION_DISABLE_HDIM64": False, "FLASHATTENTION_DISABLE_HDIM96": False,
            "FLASHATTENTION_DISABLE_HDIM128": False, "FLASHATTENTION_DISABLE_HDIM192": False,
            "FLASHATTENTION_DISABLE_HDIM256": False, "FLASH_ATTENTION_DISABLE_HDIMDIFF192": False}
FULL = {flag: False for flag in FWD_ONLY}


def _attend(q, k, v, scale, causal, case):
    one = dataclasses.replace(case, seqlens_q=(q.shape[0],), seqlens_k=(k.shape[0],), softmax_scale=scale,
                              mask=Mask.causal() if causal else Mask.none())
    return attention_rows(q, k, v, one, None, torch.float64).to(q.dtype)


def _interface(name, calls, case_of):
    """FA3's flash_attn_func / flash_attn_varlen_func as the hopper interface takes them (no dropout_p; returns
    (out, lse))."""

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                        v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                        pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
        from flash_attn_config import CONFIG  # noqa: F401 -- the real interface reads it at call time too

        calls.append({"module": name, "causal": causal, "window_size": window_size})
        case = case_of()
        return torch.stack([_attend(q[b], k[b], v[b], softmax_scale, causal, case) for b in range(q.shape[0])]), None

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                               seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                               k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                               num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0,
                               return_attn_probs=False):
        calls.append({"module": name, "causal": causal, "varlen": True})
        cq, ck, case = cu_seqlens_q.tolist(), cu_seqlens_k.tolist(), case_of()
        return torch.cat([_attend(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], softmax_scale, causal,
                                  case) for b in range(len(cq) - 1)]), None

    def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                                cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                                cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                                q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                                window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                                scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                                return_softmax_lse=False):
        """FA3's dense-cache call: new keys written at cache_seqlens in the row cache_batch_idx names, then
        attention over each request's keys (causal bottom-right)."""
        calls.append({"module": name, "kvcache": True, "num_splits": num_splits, "append": k is not None})
        outs, case = [], case_of()
        for i, n in enumerate(cache_seqlens.tolist()):
            row = int(cache_batch_idx[i]) if cache_batch_idx is not None else i
            if k is not None:
                k_cache[row, n : n + k.shape[1]], v_cache[row, n : n + k.shape[1]] = k[i], v[i]
                n += k.shape[1]
            outs.append(_attend(q[i], k_cache[row, :n], v_cache[row, :n], softmax_scale, causal, case))
        return torch.stack(outs)

    return types.SimpleNamespace(__name__=name, flash_attn_func=flash_attn_func,
                                 flash_attn_varlen_func=flash_attn_varlen_func,
                                 flash_attn_with_kvcache=flash_attn_with_kvcache)


class Installed:
    """What is importable: ``install("fwd", flags)`` or ``install("upstream", flags)``; nothing by default."""

    def __init__(self, monkeypatch):
        self.monkeypatch, self.calls, self.case = monkeypatch, [], None
        for name in (fa3.UPSTREAM, fa3.UPSTREAM_CONFIG, fa3.FWD_WHEEL, fa3.FWD_WHEEL_CONFIG):
            monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: ModuleNotFoundError on import

    def install(self, which, flags):
        config = types.SimpleNamespace(CONFIG={"build_flags": dict(flags)})
        if which == "upstream":
            config.__name__ = fa3.UPSTREAM_CONFIG
            self.monkeypatch.setitem(sys.modules, fa3.UPSTREAM_CONFIG, config)
            self.monkeypatch.setitem(sys.modules, fa3.UPSTREAM, _interface(fa3.UPSTREAM, self.calls, lambda: self.case))
            return
        config.__name__ = fa3.FWD_WHEEL_CONFIG
        self.monkeypatch.setitem(sys.modules, fa3.FWD_WHEEL_CONFIG, config)
        self.monkeypatch.setitem(sys.modules, fa3.UPSTREAM_CONFIG, None)  # a fresh process: no alias yet
        interface = _interface(fa3.FWD_WHEEL, self.calls, lambda: self.case)

        def load(name, _real=importlib.import_module):  # the wheel's interface imports flash_attn_config
            if name == fa3.FWD_WHEEL:
                _real(fa3.UPSTREAM_CONFIG)  # raises ModuleNotFoundError without the alias
                return interface
            return _real(name)

        self.monkeypatch.setattr(fa3.importlib, "import_module", load)


@pytest.fixture
def installed(monkeypatch):
    return Installed(monkeypatch)


def _case(backend, **more):
    fields = dict(backend=backend, shape="fuzz", seqlens_q=(5,), seqlens_k=(9,), heads_q=4, heads_kv=2,
                  head_dim_qk=64, head_dim_v=64, dtype="bf16", mask=Mask.causal())
    return AttnCase(**{**fields, **more})


def test_without_either_build_fa3_says_how_to_get_one(installed):
    why = FlashAttnFunc(FA3).available()
    assert "flash-attn 3 (flash_attn_interface) is not installed" in why and "pip install fa3-fwd" in why


@pytest.mark.parametrize("backend", [FlashAttnFunc(FA3), FlashAttnVarlen(FA3)], ids=lambda b: b.name)
def test_the_forward_wheel_imports_through_the_config_alias_and_runs(installed, backend):
    installed.install("fwd", FWD_ONLY)
    assert sys.modules[fa3.UPSTREAM_CONFIG] is None  # before: no alias
    assert backend.available() is None
    assert sys.modules[fa3.UPSTREAM_CONFIG] is sys.modules[fa3.FWD_WHEEL_CONFIG]  # the alias, set by the adapter
    c = _case(backend.name, dtype="fp32", **({"seqlens_q": (5, 3), "seqlens_k": (9, 3)}
                                             if backend.layout == "thd" else {}))
    installed.case = c
    check = run_example(c, backend, CPU, seed=1)
    assert check.ok, check.describe(c)
    assert installed.calls[-1]["module"] == "fa3_fwd_interface" and installed.calls[-1]["causal"] is True


def test_the_forward_wheel_refuses_what_its_config_leaves_out_naming_the_flag(installed):
    installed.install("fwd", FWD_ONLY)
    fa = FlashAttnFunc(FA3)
    assert refusal(fa, _case("fa3"), H100) is None
    assert refusal(fa, _case("fa3", direction="fwd+bwd"), H100) == (
        "this FA3 build has no backward: it is forward only (fa3_fwd_config.CONFIG sets"
        " FLASHATTENTION_DISABLE_BACKWARD)")
    assert refusal(fa, _case("fa3", mask=Mask.window(128, 0)), H100) == (
        "this FA3 build has no sliding window (local attention) (fa3_fwd_config.CONFIG sets"
        " FLASHATTENTION_DISABLE_LOCAL)")
    assert refusal(fa, _case("fa3", dtype="fp16"), H100) == (
        "this FA3 build has no fp16 kernels (fa3_fwd_config.CONFIG sets FLASHATTENTION_DISABLE_FP16)")
    assert refusal(fa, _case("fa3", dtype="fp8"), H100) is None


def test_unequal_head_dims_are_deepseeks_192_128_only(installed):
    installed.install("fwd", FWD_ONLY)
    fa = FlashAttnFunc(FA3)
    assert refusal(fa, _case("fa3", head_dim_qk=192, head_dim_v=128), H100) is None
    assert refusal(fa, _case("fa3", head_dim_qk=128, head_dim_v=64), H100) == (
        "flash-attn 3 (flash_attn_interface) needs the same head dim for q/k and v or (192, 128) (got 128/64)")
    installed.install("fwd", {**FWD_ONLY, "FLASH_ATTENTION_DISABLE_HDIMDIFF192": True,
                              "FLASHATTENTION_DISABLE_HDIM256": True})
    assert refusal(fa, _case("fa3", head_dim_qk=192, head_dim_v=128), H100) == (
        "this FA3 build has no (192, 128) kernels (fa3_fwd_config.CONFIG sets FLASH_ATTENTION_DISABLE_HDIMDIFF192)")
    assert refusal(fa, _case("fa3", head_dim_qk=256, head_dim_v=256), H100) == (
        "this FA3 build has no kernel for head dim 256: its fa3_fwd_config.CONFIG leaves only 64, 96, 128, 192")


def test_the_upstream_build_is_preferred_and_takes_its_backward(installed):
    installed.install("upstream", FULL)
    assert FlashAttnFunc(FA3).available() is None
    assert refusal(FlashAttnFunc(FA3), _case("fa3", direction="fwd+bwd", dtype="fp16"), H100) is None
    assert unavailable(FlashAttnFunc(FA3), H100, "fwd+bwd") is None


def test_fa3_runs_on_hopper_only_and_takes_no_sinks(installed):
    installed.install("fwd", FWD_ONLY)
    fa = FlashAttnFunc(FA3)
    assert refusal(fa, _case("fa3", sinks=True), H100).startswith("fa3 takes no attention sinks")
    assert "runs on sm90 only" in fa.supports(_case("fa3"), dataclasses.replace(H100, compute_capability=(8, 0)))


def test_the_distribution_is_the_wheel_that_is_installed(monkeypatch):
    from importlib import metadata

    def version(dist):
        if dist == "fa3-fwd":
            return "0.0.3"
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(metadata, "version", version)
    assert FlashAttnFunc(FA3).distribution == "fa3-fwd"
    monkeypatch.setattr(metadata, "version", lambda dist: "3.0.0")
    assert FlashAttnFunc(FA3).distribution == "flash-attn-3"


@pytest.mark.parametrize("cache", [None, KvCache(40, 1, 5)], ids=["full-caches", "append-shuffled-rows"])
def test_the_wheels_dense_kv_cache_call_is_fa3_kvcache(installed, cache):
    installed.install("fwd", FWD_ONLY)
    backend = FlashAttnKvcache(FA3)
    assert backend.name == "fa3-kvcache" and backend.available() is None
    c = _case("fa3-kvcache", dtype="fp32", seqlens_q=(1, 1, 1), seqlens_k=(9, 33, 2), cache=cache)
    installed.case = c
    check = run_example(c, backend, CPU, seed=4)  # the cache it leaves behind is checked too
    assert check.ok, check.describe(c)
    assert installed.calls[-1] == {"module": "fa3_fwd_interface", "kvcache": True, "num_splits": 0,
                                   "append": cache is not None}
    assert refusal(backend, dataclasses.replace(c, dtype="bf16"), H100) is None
