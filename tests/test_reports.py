"""Reports of a gated run (pytest_attn.verdicts.reports): the terminal table, Markdown and CSV."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pytest_attn.verdicts.gate import Thresholds, compare
from pytest_attn.verdicts.reports import csv_text, markdown, terminal_lines
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
    assert f"| `{HUNYUAN}` | 399.671 ms | 431.645 ms | +8.0% | +-5.0% | - | **SLOWER** | 384.7 | 38.9% |" in md
    assert f"- `{HUNYUAN}` SLOWER: moved +8.0% against noise of +-5.0% (3 sigma, both runs)" in md
    assert "> differs from the baseline: torch: a -> b" in md
    rows = csv_text(comparisons).splitlines()
    assert rows[0].startswith("benchmark,group,backend,baseline_s,current_s,change,verdict") and len(rows) == 5
    lines = terminal_lines(comparisons, "base.json")
    assert lines[0] == "against base.json at a 5.0% threshold: 1 SLOWER, 3 SAME"
    row = next(line for line in lines if HUNYUAN in line)
    assert row.split()[1:] == ["399.671", "ms", "431.645", "ms", "+8.0%", "+-5.0%", "SLOWER"]  # each verdict once
    assert sum(HUNYUAN in line for line in lines) == 1
    assert any(line.startswith("  SLOWER / FASTER: moved by the noise column") for line in lines)
