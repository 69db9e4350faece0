"""FlashAttention-4 (``flash_attn.cute``) adapters without the library: a stand-in module that does what
FA4 4.0.0b36's ``interface.py`` does with its arguments -- windows resolved as its
``_resolve_causal_local_window`` resolves them (only ``None`` is an unbounded side), a paged cache read
through ``page_table`` and ``seqused_k`` -- and computes the answer in float64. The fuzzer's own check
(``run_example``: every element against the fp64 reference) judges what the adapters make of it."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest
from factories import CPU, H100, H200

torch = pytest.importorskip("torch")

from pytest_attn.backends.flash_attn import FA2, FA4, Fa4Paged, FlashAttnFunc, FlashAttnVarlen  # noqa: E402
from pytest_attn.core.case import AttnCase, KvCache, Mask  # noqa: E402
from pytest_attn.fuzz.example import run_example  # noqa: E402
from pytest_attn.fuzz.space import probe_space  # noqa: E402


def _resolve(causal, left, right):
    """FA4's ``_resolve_causal_local_window``: both sides negative means no window; otherwise a side is
    unbounded only when it is None, and a negative number is taken as it stands."""
    if left is not None and right is not None and left < 0 and right < 0:
        left = right = None
    if causal:
        right = 0
    return left, right


def _attend(q, k, v, scale, causal, window):
    """One sequence, ``q (sq, h, d)``, ``k/v (sk, hk, d)``, FA4's bottom-right alignment; a row that sees no
    key gets 0 (as FA4 writes it)."""
    left, right = _resolve(causal, *window)
    sq, sk = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    kk = k.double().repeat_interleave(group, 1)
    vv = v.double().repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), kk) * (scale or q.shape[-1] ** -0.5)
    i = torch.arange(sq)[:, None] + sk - sq
    j = torch.arange(sk)[None, :]
    visible = torch.ones(sq, sk, dtype=torch.bool)
    if left is not None:
        visible &= j >= i - left
    if right is not None:
        visible &= j <= i + right
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.nan_to_num(torch.softmax(scores, -1), nan=0.0)
    return torch.einsum("hqk,khd->qhd", probs, vv).to(q.dtype)


def fake_fa4(calls):
    """``flash_attn.cute`` as FA4 4.0.0b36 takes its arguments (returns ``(out, lse)``)."""

    def flash_attn_func(q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False,
                        window_size=(None, None), learnable_sink=None, softcap=0.0, num_splits=1, pack_gqa=None,
                        deterministic=False, return_lse=False):
        calls.append({"causal": causal, "window_size": window_size})
        out = torch.stack([_attend(q[b], k[b], v[b], softmax_scale, causal, window_size) for b in range(q.shape[0])])
        return out, None

    def flash_attn_varlen_func(q, k, v, qv=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                               max_seqlen_k=None, min_seqlen_k=None, seqused_q=None, seqused_k=None,
                               gather_kv_indices=None, page_table=None, softmax_scale=None, causal=False,
                               window_size=(None, None), learnable_sink=None, softcap=0.0, num_splits=1,
                               pack_gqa=None, deterministic=False, return_lse=False):
        calls.append({"causal": causal, "window_size": window_size, "paged": page_table is not None,
                      "num_splits": num_splits})
        if page_table is not None:  # q (b, sq, h, d), k/v (pages, page, hk, d); keys through the table
            assert cu_seqlens_k is None and page_table.dtype == torch.int32 and seqused_k.dtype == torch.int32
            outs = []
            for b in range(q.shape[0]):
                n = int(seqused_k[b])
                keys = k[page_table[b].long()].reshape(-1, *k.shape[2:])[:n]
                values = v[page_table[b].long()].reshape(-1, *v.shape[2:])[:n]
                outs.append(_attend(q[b], keys, values, softmax_scale, causal, window_size))
            return torch.stack(outs), None
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        out = torch.cat([_attend(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], softmax_scale, causal,
                                 window_size) for b in range(len(cq) - 1)])
        return out, None

    return types.SimpleNamespace(flash_attn_func=flash_attn_func, flash_attn_varlen_func=flash_attn_varlen_func,
                                 __name__="flash_attn.cute")


@pytest.fixture
def fa4_calls(monkeypatch):
    calls: list[dict] = []
    monkeypatch.setitem(sys.modules, "flash_attn.cute", fake_fa4(calls))
    return calls


def case(backend, sq, sk, mask, **more):
    fields = dict(backend=backend, shape="fuzz", seqlens_q=sq, seqlens_k=sk, heads_q=1, heads_kv=1, head_dim_qk=16,
                  head_dim_v=16, dtype="fp32", mask=mask)
    return AttnCase(**{**fields, **more})


@pytest.mark.parametrize("backend", [FlashAttnFunc(FA4), FlashAttnVarlen(FA4)], ids=lambda b: b.name)
@pytest.mark.parametrize(("mask", "window"), [
    (Mask.window(0, -1), (0, None)),  # the fuzzer's finding on an H200: rows saw no key at all
    (Mask.window(-1, 1), (None, 1)),
    (Mask.window(3, 2), (3, 2)),
], ids=["left0-right-unbounded", "left-unbounded", "both-bounded"])
def test_fa4_gets_an_unbounded_window_side_as_none(fa4_calls, backend, mask, window):
    c = case(backend.name, (5,), (5,), mask) if backend.layout == "bshd" else case(backend.name, (2, 5), (7, 5), mask)
    check = run_example(c, backend, CPU, seed=0)
    assert fa4_calls[-1]["window_size"] == window
    assert check.ok, check.describe(c)


def test_a_minus_one_side_is_what_fa4_takes_literally(fa4_calls):
    """Why the spelling matters: passing FA2's -1 to FA4 (what the adapter did) leaves row 1 of the
    fuzzer's example without keys -- the stand-in reproduces the H200's wrong result."""
    c = case("fa4", (2,), (2,), Mask.window(0, -1))
    q = torch.randn(1, 2, 1, 16, dtype=torch.float64)
    kv = torch.randn(1, 2, 1, 16, dtype=torch.float64)
    fa4 = sys.modules["flash_attn.cute"]
    right, _ = fa4.flash_attn_func(q, kv, kv, window_size=(0, None))
    wrong, _ = fa4.flash_attn_func(q, kv, kv, window_size=(0, -1))
    assert torch.equal(wrong[0, 1], torch.zeros_like(wrong[0, 1])) and not torch.allclose(right, wrong)
    assert FlashAttnFunc(FA2).expression(c) == "window_size=(0, -1)"  # FA2 spells it -1 ...
    assert FlashAttnFunc(FA4).expression(c) == "window_size=(0, None)"  # ... FA4 None


def test_fa4_paged_reads_the_cache_through_its_page_table(fa4_calls):
    backend = Fa4Paged()
    c = case("fa4-paged", (2, 2, 2), (2, 300, 129), Mask.causal(), heads_q=4, heads_kv=2)
    assert backend.supports(dataclasses.replace(c, dtype="bf16"), H100) is None
    check = run_example(c, backend, CPU, seed=3)  # the cache is checked after the call too: nothing written
    assert check.ok, check.describe(c)
    assert fa4_calls[-1] == {"causal": True, "window_size": (None, None), "paged": True, "num_splits": 1}
    assert backend.workspace_bytes(c) == (1 + 3 + 2 + 2) * 128 * 2 * (16 + 16) * 4  # whole pages, 2 spare


def test_fa4_paged_refuses_what_it_cannot_do():
    paged = Fa4Paged()
    appends = case("fa4-paged", (1, 1), (5, 9), Mask.causal(), cache=KvCache(16, 1), dtype="bf16")
    assert "writes no new tokens" in paged.supports(appends, H200)
    slots = case("fa4-paged", (1, 1), (5, 9), Mask.causal(), cache=KvCache(16, 0, 4), dtype="bf16")
    assert "shuffled cache rows" in paged.supports(slots, H200)
    ragged = case("fa4-paged", (1, 2), (5, 9), Mask.none(), dtype="bf16")
    assert "same number of queries" in paged.supports(ragged, H200)
    assert paged.supports(case("fa4-paged", (1,), (5,), Mask.none(), dtype="bf16"), H200) is None
    assert paged.name == "fa4-paged" and paged.only_suites == ("decode",) and not paged.has_backward
    odd = case("fa4", (4,), (4,), Mask.none(), dtype="bf16", head_dim_qk=59, head_dim_v=59)
    assert FlashAttnFunc(FA4).supports(odd, H200) == (
        "flash-attn 4 (flash_attn.cute) takes head dims in multiples of 8 (got 59)")
    assert FlashAttnFunc(FA2).supports(dataclasses.replace(odd, backend="flash-attn"), H200) is None


def test_fa4_is_fuzzed_on_its_own_head_dims_unless_told(fa4_calls):
    space = probe_space(FlashAttnFunc(FA4), H200, "fwd")
    assert not isinstance(space, str) and space.head_dims == (64, 128)
    told = probe_space(FlashAttnFunc(FA4), H200, "fwd", head_dims=(32, 96))
    assert not isinstance(told, str) and told.head_dims == (32, 96)
    fa2 = probe_space(FlashAttnFunc(FA2), H200, "fwd")
    assert isinstance(fa2, str) or len(fa2.head_dims) > 2  # FA2 is not narrowed (not installed here: a reason)


def test_fa4_counts_the_kernels_its_process_compiled(monkeypatch):
    def entry_point(keys):
        def fn():
            return None

        fn.compile_cache = types.SimpleNamespace(cache=dict.fromkeys(keys))  # type: ignore[attr-defined]
        return fn

    interface = types.SimpleNamespace(_flash_attn_fwd=entry_point([("bf16", 64), ("bf16", 128)]),
                                      _flash_attn_bwd=entry_point([("bf16", 64)]), helper=len, VERSION="x")
    monkeypatch.setitem(sys.modules, "flash_attn.cute.interface", interface)
    assert FlashAttnFunc(FA4).compiled_kernels() == 3
    assert FlashAttnFunc(FA2).compiled_kernels() is None  # FA2 ships compiled
    monkeypatch.delitem(sys.modules, "flash_attn.cute.interface")
    assert FlashAttnVarlen(FA4).compiled_kernels() == 0  # not imported yet: nothing compiled


NOISY_TEST = '''
import warnings

from flash_attn.cute import noisy as fa4_noisy
from quack import noisy as quack_noisy


def test_compiles():
    warnings.warn("Argument aux_data (position 13) cannot be converted to a JitArgument for function 'kernel'. Its"
                  " type `<class 'flash_attn.cute.utils.AuxData'>` is not supported.", UserWarning)
    warnings.warn("Argument x (position 2) cannot be converted to a JitArgument for function 'mine'. Its type"
                  " `<class 'my.Thing'>` is not supported.", UserWarning)
    fa4_noisy.compile()
    quack_noisy.compile()
    exec("import warnings; warnings.warn('warpgroup.OperandMajorMode is deprecated, use cute.nvgpu.OperandMajorMode"
         " instead', DeprecationWarning)", {"__name__": "generated"})
    warnings.warn("my_api is deprecated, use my_other_api", DeprecationWarning)
'''
#: What FA4 and quack (4.0.0b36, quack 0.6.5) trigger on import and compile with nvidia-cutlass-dsl 4.8
NOISY_LIBRARY = '''
import warnings


def compile():
    warnings.warn("cutlass.utils.LayoutEnum is deprecated; use cutlass.tensor_utils.LayoutEnum instead.",
                  DeprecationWarning)
'''


def test_fa4s_and_the_dsls_noise_is_filtered_in_attention_runs_only(pytester):
    pytester.makepyfile(test_noisy=NOISY_TEST)
    for package in ("flash_attn", "flash_attn/cute", "quack"):
        pytester.mkpydir(package)
        (pytester.path / package / "noisy.py").write_text(NOISY_LIBRARY)
    attention = pytester.runpytest("-p", "no:cacheprovider", "--attn-profile=cpu")
    out = attention.stdout.str()
    assert "flash_attn.cute.utils.AuxData" not in out  # FA4's own, on purpose: not the user's business
    assert "LayoutEnum" not in out and "OperandMajorMode" not in out  # the DSL's deprecations in FA4's code
    assert "my.Thing" in out  # the DSL's same warning about someone else's code is shown
    assert "my_api is deprecated" in out  # and a DeprecationWarning of the user's own
    unrelated = pytester.runpytest("-p", "no:cacheprovider")  # no attention run: the plugin filters nothing
    for text in ("flash_attn.cute.utils.AuxData", "LayoutEnum", "OperandMajorMode"):
        assert text in unrelated.stdout.str()


def test_an_fa4_assertion_at_the_first_call_is_its_refusal(monkeypatch):
    from pytest_attn.backends.base import Unsupported
    from pytest_attn.engine.inputs import make_inputs

    def asserting(q, k, v, softmax_scale=None, causal=False, window_size=(None, None)):
        raise AssertionError("(head_dim, head_dim_v)=(16, 16) is not supported on SM90.")

    library = types.SimpleNamespace(flash_attn_func=asserting)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", library)
    monkeypatch.setitem(sys.modules, "flash_attn", library)
    c = case("fa4", (4,), (4,), Mask.none())
    with pytest.raises(Unsupported, match=r"fa4 refused this case: \(head_dim, head_dim_v\)=\(16, 16\) is not"):
        FlashAttnFunc(FA4).prepare(c, make_inputs(c, "bshd", "cpu"))
    with pytest.raises(AssertionError):  # FA2 checks by raising: an assertion there is a bug, not a refusal
        FlashAttnFunc(FA2).prepare(c, make_inputs(c, "bshd", "cpu"))
