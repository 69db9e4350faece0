"""The result record (pytest_attn.core.record): one typed value, a versioned JSON form that round-trips,
and the figures it carries."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from factories import H200, record

from pytest_attn.core import masks
from pytest_attn.core.case import AttnCase, Mask
from pytest_attn.core.kernel_names import KernelCall
from pytest_attn.core.metrics import CeilingShare
from pytest_attn.core.record import SCHEMA, VERSION, Check, Clocks, Hbm, Peers, Record, TimingCheck, is_record
from pytest_attn.core.throttle import ThrottleReport


def full_record() -> Record:
    """A record with every optional part filled, a ragged batch and a custom mask."""
    case = AttnCase("flashinfer-ragged", "varlen-mixed5", (1, 7, 128), (1, 9, 200), 32, 8, 128, 128, "bf16",
                    masks.prefix_lm(3), "fwd+bwd", softmax_scale=0.125)
    r = record("flashinfer-ragged", 2.5e-4, case=case, test="suites/test_varlen.py::test_varlen[x]", precision=math.inf)
    return dataclasses.replace(
        r,
        clocks=Clocks(1650.0, 1575, 1695, "locked at 1755 MHz", ThrottleReport(8, 8, {"power cap": 8}, 1)),
        ceilings=CeilingShare(790.0, 0.61, 4.2, 0.05),
        check=Check(16, 1e-3, 6e-4, 2.1e-3, "sequence 0, row 3, head 1, column 7"),
        kernels=(KernelCall("flashinfer::BatchPrefillWithRaggedKVCacheKernel", "void flashinfer::B(Params)", 1),),
        expression="custom_mask per sequence (packed at plan)", peak_memory_bytes=1 << 20,
        timing_check=TimingCheck(2.5e-4, 2.49e-4), hbm=Hbm(1.2e9, 3e8, 2, 10**9), hbm_note="",
        peers=Peers(1.7, "flash-attn-varlen", "causal=True", 3, 41.2, "sdpa-math"),
    )


@pytest.mark.parametrize("make", [full_record, lambda: record("sdpa-math", 1e-3)], ids=["full", "plain"])
def test_json_round_trip(make):
    r = make()
    text = json.dumps(r.to_json(), allow_nan=False)  # strict JSON: non-finite floats are written as text
    back = Record.from_json(json.loads(text))
    assert back == r
    assert back.case.seqlens_q == r.case.seqlens_q and back.case.direction == r.case.direction
    assert back.case.dtype == r.case.dtype and back.case.mask.id == r.case.mask.id


def test_the_json_names_the_case_and_carries_what_readers_need():
    data = full_record().to_json()
    assert data["schema"] == SCHEMA and data["version"] == VERSION and is_record(data)
    assert data["id"] == "flashinfer-ragged-varlen-mixed5-bf16-prefixlm3-fwdbwd"
    assert data["group"] == "varlen-mixed5-bf16-prefixlm3-fwdbwd"
    assert data["case"]["seqlens_q"] == [1, 7, 128] and data["case"]["direction"] == "fwd+bwd"
    assert data["timing"]["precision"] == "inf"
    assert data["work"]["flops"] > 0 and data["work"]["fa2_flops"] > 0 and data["figures"]["fa2_tflops"] > 0
    assert data["clocks"]["throttle"]["reasons"] == {"power cap": 8}
    assert data["device"]["name"] == "NVIDIA H200"


def test_a_mask_that_cannot_be_rebuilt_travels_by_name():
    mine = Mask.custom("my-sparse", rows_fn=lambda sq, sk, r: np.ones((len(r), sk), dtype=bool))
    r = record("flex", 1e-3, case=AttnCase("flex", "s", (8,), (8,), 2, 2, 16, 16, mask=mine))
    back = Record.from_json(r.to_json())
    assert back == r and back.case.id == r.case.id


def test_versions_and_foreign_data_are_refused_with_the_reason():
    data = record("sdpa-math", 1e-3).to_json()
    with pytest.raises(ValueError, match="record version 99 is newer than this pytest-attn reads"):
        Record.from_json({**data, "version": 99})
    with pytest.raises(ValueError, match="not a pytest-attn record"):
        Record.from_json({"backend": "flash-attn", "tflops": 1.0})
    assert Record.from_json({**data, "added_later": {"x": 1}}) == Record.from_json(data)  # unknown keys ignored


def test_clocks_from_the_samples():
    assert Clocks.of([1980, 1650, 1700], "not locked", None) == Clocks(1700, 1650, 1980, "not locked", None)
    assert Clocks.of([], "not locked", None).sm_clock_mhz is None
    assert record("x", 1e-3, device=H200).name == "x-gpt2-small-bf16-causal-fwd"  # no test id: the case id


def test_timing_self_check():
    ok = TimingCheck(15.83e-6, 15.84e-6)
    assert ok.ok and ok.describe() == ("reported median 15.83 us agrees with the profiler's kernel time 15.84 us"
                                       " (ratio 0.999, tolerance 5%)")
    launch_bound = TimingCheck(100e-6, 14e-6)  # one event pair around a 14 us call
    assert not launch_bound.ok and "DIFFERS" in launch_bound.describe()
    assert TimingCheck(1e-3, 0.0).ratio == float("inf")  # a graph that captured no kernel
