"""Correctness fuzzing: every selected back end, forward and forward+backward, on varlen batches.

One property per back end and direction -- run as one Hypothesis run per relation of key to query
lengths the back end takes, each with its share of the profile's examples, so none is left to chance --
the same strategies for all (pytest_attn.fuzz.strategies):
ragged batches with lengths at tile edges, q/k lengths that differ (cross-attention, chunked prefill,
decode), every GQA ratio, the head dims and dtypes each back end takes, none / causal / window /
block-sparse / prefix-LM masks, explicit softmax scales. Every output element (and gradient) is
compared with an fp64 reference: within 2x (3x for gradients) the error of PyTorch math in the same
precision. A failure prints the shrunk case, the worst element, both errors and a replay command.

Profiles (Hypothesis' --hypothesis-profile): ci (CPU default, derandomized, small), gpu (GPU default,
200 examples), thorough (2,000).
"""

from __future__ import annotations

import pytest

from pytest_attn.plugin import fuzz_targets


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fuzz_target" in metafunc.fixturenames:
        targets = fuzz_targets(metafunc.config)
        metafunc.parametrize("fuzz_target", targets, ids=[f"{b}-{d.replace('+', '')}" for b, d in targets])


def test_fuzz_varlen(attn_fuzzer, fuzz_target):
    attn_fuzzer.run(*fuzz_target)
