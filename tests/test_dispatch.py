"""Kernel names and the attn_kernels matching rule (pure); relative-to-fastest figures."""

from __future__ import annotations

import pytest

from pytest_attn.dispatch import check_kernels, short_name, summarize

FA_SPLIT = ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
            "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, "
            "false, false, true, true, false, false>(Flash_fwd_params)")
FA_COMBINE = "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128>, 4, 1, true>(Flash_fwd_params)"
FA_ONE = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4> >(Flash_fwd_params)"


def test_short_names():
    assert short_name(FA_SPLIT) == "flash::flash_fwd_splitkv_kernel"
    assert short_name("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8") == (
        "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8")
    assert short_name("void at::native::(anonymous namespace)::fill_kernel<float>(float*, int)") == (
        "at::native::anon::fill_kernel")
    assert short_name("void flashinfer::SinglePrefillWithKVCacheKernel<KernelTraits<(MaskMode)2>>(Params)") == (
        "flashinfer::SinglePrefillWithKVCacheKernel")


def test_summarize_counts_launches_by_full_name():
    calls = summarize([FA_SPLIT, FA_COMBINE, FA_SPLIT])
    assert [(c.name, c.count) for c in calls] == [("flash::flash_fwd_splitkv_kernel", 2),
                                                  ("flash::flash_fwd_splitkv_combine_kernel", 1)]


def test_check_kernels_matches_whole_names_only():
    names = [short_name(FA_SPLIT), short_name(FA_COMBINE)]
    assert check_kernels(names, must=["flash_fwd_splitkv_kernel", "flash::flash_fwd_splitkv_combine_kernel"]) is None
    # "flash_fwd_kernel" must not match the split kernel by substring
    assert check_kernels(names, must_not=["flash_fwd_kernel"]) is None
    problem = check_kernels([short_name(FA_ONE)], must=["flash_fwd_splitkv_kernel"])
    assert problem == ("expected a kernel matching 'flash_fwd_splitkv_kernel' (kernels that ran: "
                       "flash::flash_fwd_kernel)")
    assert "matches the forbidden 'flash_fwd_.*'" in check_kernels(names, must_not=["flash_fwd_.*"])


@pytest.fixture
def results():
    from test_summary import result

    return [result("flash-attn", 1e-3, expression="causal=True"),
            result("flashinfer-custom", 4e-3, expression="custom_mask"),
            result("sdpa-flash", 2e-3, expression="is_causal=True"),  # slower kernel, same kind of flag
            result("flex", 2e-3, shape="bert-base")]


def test_relative_to_fastest(results):
    from pytest_attn.relative import relative_to_fastest, slow_path_lines

    rel = relative_to_fastest(results)
    custom = rel[results[1].case.id]
    assert (custom.slowdown, custom.fastest, custom.fastest_expression, custom.peers) == (4.0, "flash-attn",
                                                                                        "causal=True", 3)
    assert rel[results[3].case.id].slowdown == 1.0 and rel[results[3].case.id].peers == 1
    assert custom.as_extra_info()["slowdown_vs_fastest"] == 4.0
    assert slow_path_lines(results, rel) == [
        "gpt2-small-bf16-causal-fwd: flashinfer-custom (custom_mask): 4.00x slower than flash-attn (causal=True)"
        " for the same mask"]
