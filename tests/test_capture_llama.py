"""Capture from real model code: a tiny Llama built from a config by ``transformers`` (random weights, no
download), a prefill of two prompts then two decode steps through the model's own KV cache, captured and then
replayed in-process. Skipped where transformers is not installed (the ``dev`` extra installs it). In the
end-to-end tier: importing transformers alone costs a worker 3-4 CPU-s (tests/README.md)."""

from __future__ import annotations

import inspect

import pytest
import torch
from factories import attention_suite

import pytest_attn
from pytest_attn.core.workload import load_workload

pytestmark = pytest.mark.e2e

LAYERS, PROMPT, STEPS = 2, 7, 2


@pytest.fixture(scope="module")
def llama():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed: pip install -e .[dev]")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64, attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def cached(model, out) -> dict:
    """The model's own KV cache handed to the next step (``cache=`` since transformers 5.x's rename, else
    ``past_key_values=``)."""
    if "cache" in inspect.signature(model.forward).parameters:
        return {"cache": out.cache}
    return {"past_key_values": out.past_key_values}


def generate(model) -> list[torch.Tensor]:
    """A batch of 2 prompts of 7 tokens, then STEPS greedy decode steps through the model's own cache."""
    ids = torch.randint(0, 128, (2, PROMPT), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        logits = [out.logits]
        for _ in range(STEPS):
            out = model(input_ids=out.logits[:, -1:].argmax(-1), use_cache=True, **cached(model, out))
            logits.append(out.logits)
    return logits


def test_a_tiny_llama_is_captured_and_replayed(llama, pytester):
    plain = generate(llama)
    with pytest_attn.capture(pytester.path / "llama.workload.json") as cap:
        captured = generate(llama)
    assert all(torch.equal(a, b) for a, b in zip(plain, captured, strict=True))  # capture changed nothing
    prefill, *decode = cap.workload.records
    assert len(decode) == STEPS
    c = prefill.call
    assert (c.batch, c.seqlen_q, c.seqlen_k, c.heads, c.kv_heads, c.head_dim) == (2, PROMPT, PROMPT, 4, 2, 16)
    assert (c.mask, c.enable_gqa, c.direction, c.unsupported) == ("causal", True, "fwd", "")
    assert [(r.call.seqlen_q, r.call.seqlen_k) for r in decode] == [(1, PROMPT + 1), (1, PROMPT + 2)]
    assert all(r.call.kv_heads == 2 and r.call.unsupported == "" for r in decode)
    assert [r.count for r in cap.workload.records] == [LAYERS] * (1 + STEPS)  # layers x steps, one record a step
    assert [r.order for r in cap.workload.records] == [0, 1, 2]
    assert prefill.sites == tuple(f"model.layers.{i}.self_attn" for i in range(LAYERS))
    assert load_workload(pytester.path / "llama.workload.json") == cap.workload

    pytester.makepyfile(test_suite=attention_suite("all"))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--attn-profile=cpu", "-k", "wl-llama",
                                          "--attn-workload=llama.workload.json", "--attn-backends=sdpa-math",
                                          "--attn-max-time=0.05", "--attn-min-samples=5")
    result.assert_outcomes(passed=1 + STEPS)
    result.stdout.fnmatch_lines([f"workload llama (llama.workload.json): 3 distinct call(s), {LAYERS * 3} per step",
                                 "  sdpa-math: * of attention per step, MFU n/a; by call site:"
                                 " model.layers.*.self_attn 100.0%"])
