"""Plots of a run's records (pytest_attn.verdicts.plots): decode steps apart from prefill, the roofline's
ceilings, and what is said when matplotlib is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from factories import record

from pytest_attn.core.case import Mask
from pytest_attn.core.catalog import GPT2_SMALL, LLAMA3_8B, QWEN25_7B, decode_shape
from pytest_attn.verdicts.plots import PANELS, points, roofline_ceilings, throughput_series, write_plots


def _records():
    prefill = [record("flash-attn", 1e-3, case=LLAMA3_8B.case("flash-attn", "bf16", Mask.causal(), "fwd")),
               record("flash-attn", 256e-6, case=GPT2_SMALL.case("flash-attn", "bf16", Mask.causal(), "fwd+bwd"))]
    decode = [record("sdpa-cudnn", 20e-6, case=decode_shape(QWEN25_7B, k).case("sdpa-cudnn", "bf16", Mask.causal(),
                                                                                 "fwd")) for k in (4096, 256)]
    return prefill + decode


def test_plots_need_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert write_plots(tmp_path, _records()) == [
        'plots skipped: matplotlib is not installed (pip install matplotlib)']


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    written = write_plots(tmp_path / "rep", _records())
    assert [Path(w).name for w in written] == ["tflops_vs_seqlen.png", "roofline.png"]
    assert all(Path(w).stat().st_size > 1000 for w in written)
    assert write_plots(tmp_path / "none", []) == ["plots skipped: no timed results in this run"]


def test_throughput_plot_keeps_decode_steps_apart_from_prefill():
    # decode steps sit two orders of magnitude below prefill at the same key length; one line through both
    # zigzagged on the first H200 report. The panel comes from the record's lengths, never from a test id.
    series = throughput_series(points(_records()))
    decode = {k: xy for k, xy in series.items() if k[0] == PANELS[1]}
    prefill = {k: xy for k, xy in series.items() if k[0] == PANELS[0]}
    assert list(decode) == [(PANELS[1], "sdpa-cudnn", "fwd")] and [x for x, _ in decode[next(iter(decode))]] == [
        256, 4096]
    assert set(prefill) == {(PANELS[0], "flash-attn", "fwd"), (PANELS[0], "flash-attn", "fwd+bwd")}
    # the decode panel plots TB/s (memory-bound), the prefill panel TFLOP/s
    decode_records = [r for r in _records() if r.case.backend == "sdpa-cudnn"]
    assert sorted(y for xy in decode.values() for _, y in xy) == sorted(r.figures.tbps for r in decode_records)
    assert min(y for xy in prefill.values() for _, y in xy) > 50


def test_a_serving_batch_sits_at_its_mean_length():
    from pytest_attn.core.catalog import SERVING

    mix = SERVING[0]
    r = record("flash-attn-kvcache", 1e-3, case=mix.case("flash-attn-kvcache", "bf16", Mask.causal(), "fwd"))
    [p] = points([r])
    assert p.panel == PANELS[1] and p.keys == round(sum(mix.seqlens_k) / mix.batch) < max(mix.seqlens_k)


def test_roofline_prefers_the_measured_ceilings():
    import dataclasses

    from pytest_attn.core.metrics import CeilingShare

    rs = _records()
    assert roofline_ceilings(rs) == (989, pytest.approx(989 / 4.8), "datasheet ceilings")
    measured = [dataclasses.replace(rs[0], ceilings=CeilingShare(780.0, 0.5, 4.2, 0.1)), *rs[1:]]
    assert roofline_ceilings(measured) == (780.0, pytest.approx(780 / 4.2), "measured ceilings")
