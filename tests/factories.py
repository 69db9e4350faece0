"""Result records for the plugin's own tests: built through the real FLOP model and figures, with the
timing and clocks a test asks for."""

from __future__ import annotations

from pytest_attn.core.case import AttnCase, Mask
from pytest_attn.core.device import DeviceInfo
from pytest_attn.core.flops import work
from pytest_attn.core.metrics import figures
from pytest_attn.core.record import Clocks, Record, Timing

H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="2.11", compute_capability=(9, 0), sm_count=132,
                  l2_bytes=60 << 20, total_memory_bytes=141 << 30, driver="580", cuda_version="13.0",
                  nvml_status="ok")
H100 = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", torch_version="2.11", compute_capability=(9, 0))
A100 = DeviceInfo(kind="cuda", name="NVIDIA A100-SXM4-80GB", torch_version="2.11", compute_capability=(8, 0))
T4 = DeviceInfo(kind="cuda", name="Tesla T4", torch_version="2.11", compute_capability=(7, 5))
CPU = DeviceInfo(kind="cpu", name="cpu", torch_version="cpu")


def dense(backend: str, sq: int = 16, sk: int = 16, mask: Mask | None = None, *, hq: int = 4, hkv: int = 4, d: int = 64,
          dv: int | None = None, dtype: str = "bf16", batch: int = 1, direction: str = "fwd") -> AttnCase:
    """A small uniform batch for ``backend``."""
    return AttnCase.dense(backend=backend, shape="t", batch=batch, seqlen_q=sq, seqlen_k=sk, heads_q=hq,
                          heads_kv=hkv, head_dim=d, head_dim_v=dv, dtype=dtype, mask=mask or Mask.none(),
                          direction=direction)


def record(backend: str, median_s: float, *, case: AttnCase | None = None, shape: str = "gpt2-small",
           clocks: tuple[int, ...] = (1980,), timer: str = "kernel-sum", stop: str = "precision",
           expression: str = "", precision: float = 0.004, test: str = "", device: DeviceInfo = H200) -> Record:
    """A measured result of ``backend`` with ``median_s`` (GPT-2 small's causal prefill unless ``case``)."""
    case = case or AttnCase.dense(backend=backend, shape=shape, batch=8, seqlen_q=1024, heads_q=12, head_dim=64,
                                  mask=Mask.causal())
    w = work(case)
    clock = clocks[0] if clocks else None
    return Record(
        test=test, case=case, device=device,
        timing=Timing((median_s,) * 10, median_s, precision, stop, timer, calls_per_sample=5, input_sets=2,
                      warmup_calls=6, warmup_s=0.1, elapsed_s=1.0),
        work=w, figures=figures(w, median_s, device.peak(case.dtype), clock),
        clocks=Clocks.of(list(clocks), "not locked", None), expression=expression,
    )


def attention_suite(kind: str = "all") -> str:
    """A test file (for pytester) parametrised over the selected profile's cases of ``kind``, each
    measured with ``attn_bench``: the shape of ``suites/test_prefill.py``."""
    return f'''
from pytest_attn.plugin import attn_cases


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = attn_cases(metafunc.config, "{kind}")
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_attn(attn_bench, case):
    attn_bench(case)
'''


def fuzz_planted(fuzzer, direction: str = "fwd", backend: str = "planted") -> None:
    """Run the fuzzer's property for ``backend`` with the ci profile's budget, without shrinking or an
    example database: these tests ask whether a planted fault is found within the budget (what a failure
    shrinks to is test_strategies' business; shrinking took most of their time). Raises what it finds."""
    from hypothesis import Phase, given, settings
    from hypothesis import strategies as st

    @settings(settings.get_profile("ci"), database=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
    @given(data=st.data())
    def prop(data):
        fuzzer.check(backend, direction, data)

    prop()
