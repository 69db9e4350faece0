"""Kernel names and the attn_kernels matching rule (pytest_attn.core.kernel_names). Pure."""

from __future__ import annotations

from pytest_attn.core.kernel_names import check_kernels, short_name, summarize

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


def test_a_replay_must_launch_the_eager_kernels_times_the_calls():
    from pytest_attn.core.kernel_names import launch_mismatch

    eager = [FA_SPLIT, FA_COMBINE, "Memset (Device)"]
    assert launch_mismatch(eager, [FA_SPLIT, FA_COMBINE] * 8, calls=8) is None
    missing = launch_mismatch(eager, [FA_COMBINE] * 8, calls=8)  # the main kernel left out of the capture
    assert missing == ("the CUDA graph does not replay what the eager call runs: per call, eager"
                       " flash::flash_fwd_splitkv_kernel x1, flash::flash_fwd_splitkv_combine_kernel x1; replayed"
                       " flash::flash_fwd_splitkv_combine_kernel x1")
    assert "replayed no kernels" in launch_mismatch(eager, [], calls=8)
    assert "x7/8" in launch_mismatch(eager, [FA_SPLIT] * 7 + [FA_COMBINE] * 8, calls=8)
    # a copy is a copy whether it ran on a copy engine (eager, on an H200) or as the driver's kernel (a replay)
    copying = [FA_SPLIT, "Memcpy DtoD (Device -> Device)", FA_COMBINE]
    assert launch_mismatch(copying, [FA_SPLIT, FA_COMBINE, "memcpy32_post"] * 8, calls=8) is None
    assert launch_mismatch(copying, [FA_SPLIT, "memcpy128 kernel"] * 8, calls=8) is not None  # combine missing
