"""``scripts/measure_readme.py`` times the README's commands and keeps its tables in docs/gpu-validation.md (the one
home of dated figures): the tables are found there, and ``--update-doc`` rewrites one table and nothing else."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "measure_readme.py"


@pytest.fixture(scope="module")
def measure():
    spec = importlib.util.spec_from_file_location("measure_readme", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_the_tables_live_in_the_evidence_not_the_readme(measure):
    assert measure.DOC.name == "gpu-validation.md"
    assert "<!-- measured:" not in (measure.ROOT / "README.md").read_text()
    cpu, gpu = measure.recorded_figures("cpu"), measure.recorded_figures("gpu")
    assert cpu["pytest tests/"] and all(f.endswith(" s") for f in cpu["pytest tests/"])
    assert gpu["pytest suites/ --attn-profile=smoke"]


def test_updating_rewrites_one_table_and_nothing_else(measure):
    text = ("# doc\n<!-- measured:cpu -->\n| old cpu |\n<!-- /measured:cpu -->\nbetween\n"
            "<!-- measured:gpu -->\n| old gpu |\n<!-- /measured:gpu -->\nend\n")
    new = measure.with_table(text, "cpu", "| new cpu |\n")
    assert new == text.replace("| old cpu |\n", "| new cpu |\n")
    assert measure.with_table("# no tables here\n", "cpu", "| x |\n") is None

