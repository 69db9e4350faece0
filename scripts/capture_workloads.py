"""Capture the shipped workloads (``pytest_attn/workloads/*.workload.json``) from model code built from published
configs, with no weights downloaded: the models are built on PyTorch's ``meta`` device (shapes only, no memory, no
arithmetic), so a step of an 8B model captures in seconds on a CPU. Every SDPA call sees the same shapes it
would on a GPU; the capture records shapes, never values.

    pip install -e .[capture]                     # transformers
    python scripts/capture_workloads.py pytest_attn/workloads/  # all three
    python scripts/capture_workloads.py pytest_attn/workloads/ --only llama3-8b

* ``llama3-8b``: Llama-3-8B (transformers' LlamaForCausalLM, SDPA attention, bf16): a prefill of 4 prompts of
  2,048 tokens, then 128 decode steps through the model's own KV cache.
* ``qwen2.5-7b``: Qwen2.5-7B (Qwen2ForCausalLM), the same step.
* ``hunyuan-video-dit``: one denoising step of a HunyuanVideo-like DiT: 20 double-stream and 40 single-stream
  blocks, each one joint full attention over 111,856 video+text tokens, 24 heads x 128 (bf16). Not Tencent's
  code: a stand-in with the same attention calls (its own calls flash_attn_varlen_func with the text's padding).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json (the fields that shape attention)
LLAMA3_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
             "rope_theta": 500000.0, "rms_norm_eps": 1e-05}
#: https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json
QWEN25_7B = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
             "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "use_sliding_window": False}
#: HunyuanVideo's HYVideo-T/2 (https://github.com/Tencent/HunyuanVideo, hyvideo/modules/models.py):
#: hidden 3072, 24 heads, 20 double-stream and 40 single-stream blocks; 111,856 joint tokens at 720p.
HUNYUAN = {"heads": 24, "head_dim": 128, "double_blocks": 20, "single_blocks": 40, "tokens": 111_856}
PROMPTS, PROMPT_TOKENS, DECODE_STEPS = 4, 2048, 128


def _llm_step(model: Any, steps: int, device: str = "meta", prompts: int = PROMPTS,
              tokens: int = PROMPT_TOKENS) -> None:
    """The step: a prefill of ``prompts`` x ``tokens``, then ``steps`` decode steps through the model's own cache.
    The token ids are zeros: they change no attention call's shape or work (scripts/model_attention.py runs it on
    a GPU)."""
    import inspect

    import torch

    new = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        out = model(input_ids=torch.zeros(prompts, tokens, dtype=torch.long, device=device), use_cache=True)
        for _ in range(steps):
            cache = out.cache if new == "cache" else out.past_key_values
            out = model(input_ids=torch.zeros(prompts, 1, dtype=torch.long, device=device), use_cache=True,
                        **{new: cache})


def llm(kind: str, config: dict[str, Any], steps: int = DECODE_STEPS) -> Callable[[], None]:
    def run() -> None:
        import torch
        import transformers

        cfg = getattr(transformers, f"{kind}Config")(**config, attn_implementation="sdpa")
        with torch.device("meta"):
            model = getattr(transformers, f"{kind}ForCausalLM")(cfg).to(torch.bfloat16).eval()
        _llm_step(model, steps)
    return run


def dit() -> None:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class JointAttention(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, n, _ = x.shape
            q = x.view(b, n, HUNYUAN["heads"], HUNYUAN["head_dim"]).transpose(1, 2)
            return F.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(b, n, -1)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = JointAttention()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.attn(x)

    class Dit(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.double_blocks = nn.ModuleList(Block() for _ in range(HUNYUAN["double_blocks"]))
            self.single_blocks = nn.ModuleList(Block() for _ in range(HUNYUAN["single_blocks"]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in [*self.double_blocks, *self.single_blocks]:
                x = block(x)
            return x

    x = torch.zeros(1, HUNYUAN["tokens"], HUNYUAN["heads"] * HUNYUAN["head_dim"], dtype=torch.bfloat16,
                    device="meta")
    with torch.no_grad():
        Dit()(x)


WORKLOADS: dict[str, tuple[Callable[[], None], str]] = {
    "llama3-8b": (llm("Llama", LLAMA3_8B), "Llama-3-8B config (meta device), 4 x 2,048-token prefill + 128 decode"),
    "qwen2.5-7b": (llm("Qwen2", QWEN25_7B), "Qwen2.5-7B config (meta device), 4 x 2,048-token prefill + 128 decode"),
    "hunyuan-video-dit": (dit, "HunyuanVideo-like DiT step (meta device): 60 blocks x joint attention, 111,856 tokens"),
}


def main(argv: list[str] | None = None) -> int:
    import pytest_attn
    from pytest_attn.capture.command import summary

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder to write NAME.workload.json into")
    parser.add_argument("--only", choices=sorted(WORKLOADS), action="append", help="capture only these")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or WORKLOADS:
        run, how = WORKLOADS[name]
        path = args.out / f"{name}.workload.json"
        with pytest_attn.capture(path, name=name, source=f"scripts/capture_workloads.py: {how}") as cap:
            run()
        assert cap.workload is not None
        print("\n".join(summary(cap.workload, path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
