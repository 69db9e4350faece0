"""KV caches as serving engines hold them (pytest_attn.backends.kvcache), the check of a cache after an
appending call (pytest_attn.oracle.cache), and planted adapter faults -- ignoring each request's cache
length, appending at the wrong position or to the wrong request -- caught before timing and by the
fuzzer. On CPU, through the padded SDPA baseline's machinery."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from factories import fuzz_planted  # noqa: E402

from pytest_attn.backends import Registry  # noqa: E402
from pytest_attn.backends.kvcache import POISON, CachedCall, dense_cache, paged_cache, per_request  # noqa: E402
from pytest_attn.backends.torch_padded import SdpaPaddedBackend  # noqa: E402
from pytest_attn.core.case import AttnCase, CaseError, KvCache, Mask  # noqa: E402
from pytest_attn.core.device import DeviceInfo  # noqa: E402
from pytest_attn.engine.inputs import make_inputs  # noqa: E402
from pytest_attn.engine.runner import CaseFailed, RunSettings, check_case  # noqa: E402
from pytest_attn.fuzz.fuzzer import Fuzzer  # noqa: E402
from pytest_attn.oracle.cache import check_cache  # noqa: E402

CPU = DeviceInfo(kind="cpu", name="cpu", torch_version=torch.__version__)


def serving(lengths=(1, 17, 33, 64), append=1, slots=0, capacity=80, mask=None, backend="sdpa-padded"):
    return AttnCase(backend=backend, shape="serve", seqlens_q=(max(append, 1),) * len(lengths), seqlens_k=lengths,
                    heads_q=4, heads_kv=2, head_dim_qk=8, head_dim_v=8, dtype="fp32", mask=mask or Mask.causal(),
                    cache=KvCache(capacity, append, slots))


def test_a_cache_case_is_validated_with_the_numbers():
    with pytest.raises(CaseError, match=r"cache\.capacity=10 is under the longest request's 64 keys"):
        serving(capacity=10)
    with pytest.raises(CaseError, match="the appended tokens are the queries"):
        AttnCase(backend="x", shape="s", seqlens_q=(2,), seqlens_k=(9,), heads_q=1, heads_kv=1, head_dim_qk=8,
                 head_dim_v=8, cache=KvCache(16, 1))
    with pytest.raises(CaseError, match=r"cache\.slots=2 is under the batch of 4 requests"):
        serving(slots=2)
    case = serving(slots=6)
    assert "cache of 80 keys per request in 6 shuffled slots, 1 appended per request" in case.describe()


def _inputs(case):
    return make_inputs(case, "thd", "cpu", seed=0)


def test_a_dense_cache_holds_each_requests_keys_in_its_row_and_poison_elsewhere():
    case = serving(slots=6)
    inputs = _inputs(case)
    cache = dense_cache(case, inputs.k, inputs.v)
    assert sorted(cache.rows) != list(range(4)) or cache.rows != [0, 1, 2, 3]  # shuffled rows
    assert cache.cached.tolist() == [0, 16, 32, 63] and cache.batch_idx.tolist() == cache.rows
    for i, own in enumerate(per_request(case, inputs.k)):
        row = cache.k[cache.rows[i]]
        n = own.shape[0] - 1  # the appended key is not in the cache before the call
        assert torch.equal(row[:n], own[:n]) and bool((row[n:] == POISON).all())
        assert torch.equal(cache.k_new[i, 0], own[-1])
    spare = [r for r in range(6) if r not in cache.rows]
    assert bool((cache.k[spare] == POISON).all())


def test_a_paged_cache_gives_each_request_its_pages_in_a_shuffled_order():
    case = serving(lengths=(5, 1, 9, 16), append=1)
    inputs = _inputs(case)
    cache = paged_cache(case, inputs.k, inputs.v, page=4)
    assert cache.indptr.tolist() == [0, 2, 3, 6, 10] and cache.last_page_len.tolist() == [1, 1, 1, 4]
    assert cache.indices.tolist() == [p for pages in cache.pages_of for p in pages]
    assert cache.k.shape[0] == 12  # ten pages owned, two spare
    view = cache.view()
    for i, own in enumerate(per_request(case, inputs.k)):
        n = own.shape[0] - 1
        assert torch.equal(view.keys(i)[:n], own[:n]) and bool((view.keys(i)[n:] == POISON).all())
    assert all(bool((t == POISON).all()) for t in view.spare())


def _written(case, inputs, cache, *, shift=0, request_shift=0):
    """Do the append a faulty adapter would: ``shift`` positions late, or into another request's row."""
    cached = case.cache.cached(case.seqlens_k)
    for i, (k, v) in enumerate(zip(per_request(case, inputs.k), per_request(case, inputs.v), strict=True)):
        row = cache.rows[(i + request_shift) % case.batch]
        cache.k[row, cached[i] + shift] = k[-1]
        cache.v[row, cached[i] + shift] = v[-1]
    return cache.view()


@pytest.mark.parametrize(("fault", "message"), [
    (dict(), None),
    (dict(shift=1), r"request 0: cache position 0 \(an appended key.*is not the request's own key 0"),
    (dict(request_shift=1), "request 0: cache position 0 .*is not the request's own key 0"),
])
def test_the_cache_check_names_a_wrong_write(fault, message):
    case = serving()
    inputs = _inputs(case)
    view = _written(case, inputs, dense_cache(case, inputs.k, inputs.v), **fault)
    problem = check_cache(case, inputs.k, inputs.v, view)
    if message is None:
        assert problem is None
    else:
        import re

        assert re.search(message, problem), problem


def test_a_write_past_the_end_or_to_a_spare_row_is_seen():
    case = serving(slots=6)
    inputs = _inputs(case)
    cache = dense_cache(case, inputs.k, inputs.v)
    view = _written(case, inputs, cache)
    cache.k[cache.rows[3], 70] = 0.0
    assert check_cache(case, inputs.k, inputs.v, view) == "request 3: cache position 70, past its 64 keys, was written"
    cache.k[cache.rows[3], 70] = POISON
    spare = next(r for r in range(6) if r not in cache.rows)
    cache.v[spare, 0] = 1.0
    assert check_cache(case, inputs.k, inputs.v, view) == "a cache row or page that no request owns was written"


class Planted(SdpaPaddedBackend):
    """The padded baseline with one planted adapter fault."""

    name = "planted"
    default_enabled = False

    def __init__(self, fault):
        self.fault = fault

    def key_lengths(self, case):
        if self.fault == "first_length":  # cache_seqlens ignored past the first request: all get its length
            return (case.seqlens_k[0],) * case.batch
        return case.seqlens_k

    def prepare(self, case, inputs):
        call = super().prepare(case, inputs)
        if self.fault != "append_late" or case.cache is None or not case.cache.append:
            return call
        view = call.cache
        cached = case.cache.cached(case.seqlens_k)

        def late():  # the new token one position late, the attention reading what it wrote
            out = call()
            for i, (k, v) in enumerate(zip(per_request(case, inputs.k), per_request(case, inputs.v), strict=True)):
                view.keys(i)[cached[i]] = POISON
                view.values(i)[cached[i]] = POISON
                if cached[i] + 1 < view.keys(i).shape[0]:  # a full cache: the token is only lost
                    view.keys(i)[cached[i] + 1] = k[-1]
                    view.values(i)[cached[i] + 1] = v[-1]
            return out

        return CachedCall(late, view)


@pytest.mark.parametrize(("fault", "message"), [
    ("first_length", r"gives a wrong output before timing: max \|out - ref\| = .* at sequence 1"),
    ("append_late", "writes its KV cache wrongly before timing: request 0: cache position 0"),
])
def test_planted_adapter_faults_are_caught_before_timing(fault, message):
    with pytest.raises(CaseFailed, match=message):
        check_case(serving(backend="planted"), Planted(fault), CPU, RunSettings())
    check_case(serving(backend="planted"), Planted("none"), CPU, RunSettings())




@pytest.mark.parametrize("fault", ["first_length", "append_late"])
def test_the_fuzzer_finds_each_planted_cache_fault(fault):
    fuzzer = Fuzzer(Registry([Planted(fault)]), CPU, dtypes=("fp32",))
    with pytest.raises(AssertionError, match="planted gives a wrong result"):
        fuzz_planted(fuzzer)
