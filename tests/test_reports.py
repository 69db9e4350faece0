"""Reports of a gated run (pytest_attn.verdicts.reports): the terminal table, Markdown and CSV."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pytest_attn.verdicts.reports import csv_text, markdown, terminal_lines
from pytest_attn.verdicts.rule import Thresholds, compare
from pytest_attn.verdicts.runs import benches

RECORDED = Path(__file__).parent / "data" / "h200_smoke_subset.json"
HUNYUAN = "test_prefill[flash-attn-hunyuan-video-bf16-full-fwd]"


@pytest.fixture
def run():
    return json.loads(RECORDED.read_text())


def _scale(run, name, factor):
    out = copy.deepcopy(run)
    for b in out["benchmarks"]:
        if name in b["fullname"]:
            b["stats"]["median"] *= factor
    return out


def test_reports(run):
    comparisons = compare(benches(run), benches(_scale(run, HUNYUAN, 1.08)), Thresholds())
    md = markdown(comparisons, "baselines/nvidia-h200/baseline.json", ["differs from the baseline: torch: a -> b"])
    assert md.startswith("### pytest-attn: regression (1 SLOWER, 3 SAME)")
    assert f"| `{HUNYUAN}` | 399.671 ms | 431.645 ms | +8.0% | +-4.2% | - | **SLOWER** | 384.7 | 38.9% |" in md
    assert f"- `{HUNYUAN}` SLOWER: moved +8.0% against noise of +-4.2% (3 sigma, both runs)" in md
    assert "> differs from the baseline: torch: a -> b" in md
    rows = csv_text(comparisons).splitlines()
    assert rows[0].startswith("benchmark,group,backend,baseline_s,current_s,change,verdict") and len(rows) == 5
    lines = terminal_lines(comparisons, "base.json")
    assert lines[0] == "against base.json at a 5.0% threshold: 1 SLOWER, 3 SAME"
    row = next(line for line in lines if HUNYUAN in line)
    assert row.split()[1:] == ["399.671", "ms", "431.645", "ms", "+8.0%", "+-4.2%", "SLOWER"]  # each verdict once
    assert sum(HUNYUAN in line for line in lines) == 1
    assert any(line.startswith("  SLOWER / FASTER: moved by the noise column") for line in lines)


def test_advice_names_the_clocks_only_where_a_gpu_ran():
    """A CPU run was told to "lock the clocks" for an AMBIGUOUS verdict."""
    from factories import record

    from pytest_attn.core.device import DeviceInfo
    from pytest_attn.verdicts.runs import by_name

    cpu = DeviceInfo("cpu", "Xeon", "2.13")
    for device, says in ((cpu, "keep the machine otherwise idle"), (None, "lock the clocks (--attn-lock-clocks)")):
        kw = {"device": device, "clocks": ()} if device else {}
        base = by_name([record("sdpa-math", 1e-3, precision=0.05, stop="time-cap", **kw)])
        now = by_name([record("sdpa-math", 1.04e-3, precision=0.05, stop="time-cap", **kw)])
        comparisons = compare(base, now, Thresholds())
        assert [c.verdict for c in comparisons] == ["AMBIGUOUS"]
        text = "\n".join([*terminal_lines(comparisons, "b.json"), markdown(comparisons, "b.json")])
        assert says in text and ("lock the clocks" in text) == (device is None), text
