"""Each result against the others of its problem (pytest_attn.verdicts.peers): vs best, speedup, slow paths.
Pure."""

from __future__ import annotations

import pytest
from factories import record

from pytest_attn.verdicts.peers import peers_of, slow_path_lines


@pytest.fixture
def results():
    return [record("flash-attn", 1e-3, expression="causal=True"),
            record("flashinfer-custom", 4e-3, expression="custom_mask"),
            record("sdpa-flash", 2e-3, expression="is_causal=True"),  # slower kernel, same kind of flag
            record("flex", 2e-3, shape="bert-base")]


def test_each_result_against_the_fastest_of_its_problem(results):
    rel = peers_of(results)
    custom = rel[results[1].name]
    assert (custom.slowdown, custom.fastest, custom.fastest_expression, custom.results) == (4.0, "flash-attn",
                                                                                          "causal=True", 3)
    assert rel[results[3].name].slowdown == 1.0 and rel[results[3].name].results == 1
    assert custom.speedup is None  # sdpa-math did not run
    assert slow_path_lines(results, rel) == [
        "gpt2-small-bf16-causal-fwd: flashinfer-custom (custom_mask): 4.00x slower than flash-attn (causal=True)"
        " for the same mask"]
