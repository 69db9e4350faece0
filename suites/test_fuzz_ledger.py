"""The known-failure ledger (pytest_attn/fuzz/ledger.py): each entry's example must still fail. One that
passes means the library fixed it: the test fails so the entry gets removed (and the fuzzer covers
those cases again)."""

from __future__ import annotations

import pytest

from pytest_attn.backends.base import refusal
from pytest_attn.core.codec import case_from_json
from pytest_attn.fuzz.fuzzer import run_example
from pytest_attn.fuzz.ledger import LEDGER


@pytest.mark.parametrize("entry", LEDGER, ids=[f"{e.backend}: {e.covers}" for e in LEDGER])
def test_known_failure_still_fails(attn_fuzzer, entry):
    case, seed = case_from_json(entry.example)
    assert entry.matches(case), f"the ledger entry's example is not one it covers: {entry.example}"
    backend = attn_fuzzer.registry.get(case.backend)
    device = attn_fuzzer.device
    why = refusal(backend, case, device)
    if why:
        pytest.skip(why)
    check = run_example(case, backend, attn_fuzzer.device, seed)
    if check.ok:
        pytest.fail(f"{entry.backend} now passes the ledger's example ({entry.reason}; {entry.link}): remove the"
                    f" entry from pytest_attn/fuzz/ledger.py. {check.describe(case)}")
