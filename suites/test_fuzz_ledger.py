"""The known-failure ledger (pytest_attn/fuzz/ledger.py): each entry's example must still fail. One that
passes means the library fixed it: the test fails so the entry gets removed (and the fuzzer covers
those cases again)."""

from __future__ import annotations

import pytest

from pytest_attn.backends.base import refusal
from pytest_attn.core.codec import case_from_json
from pytest_attn.fuzz.example import run_example
from pytest_attn.fuzz.ledger import LEDGER
from pytest_attn.plugin import attn_session


@pytest.mark.parametrize("entry", LEDGER, ids=[f"{e.backend}: {e.covers}" for e in LEDGER])
def test_known_failure_still_fails(request, attn_device, entry):
    case, seed = case_from_json(entry.example)
    assert entry.matches(case), f"the ledger entry's example is not one it covers: {entry.example}"
    backend = attn_session(request.config).registry.get(case.backend)
    why = refusal(backend, case, attn_device)
    if why:
        pytest.skip(why)
    check = run_example(case, backend, attn_device, seed)
    if check.ok:
        pytest.fail(f"{entry.backend} now passes the ledger's example ({entry.reason}; {entry.link}): remove the"
                    f" entry from pytest_attn/fuzz/ledger.py. {check.describe(case)}")
