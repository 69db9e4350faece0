"""What a measurement is asked to do (:class:`RunSettings`), how a case ends when it cannot be measured
(:class:`CaseSkipped`, :class:`CaseFailed`), and the memory one input set needs. Shared by the runner (one
process) and the A/B arms (:mod:`.ab.worker`). Pytest-free; imports no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..backends.base import Backend
from ..core import flops
from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.record import TimerPin
from .stopping import StopRule, WarmupRule
from .timers import GRAPH_THRESHOLD_S


class CaseSkipped(Exception):
    """The case cannot run here; the message says why and what to do."""


class TooLongHere(CaseSkipped):
    """One call of the case would take (or took) longer on this CPU than a call may: ``what`` says so and why,
    ``gflop`` is its work, ``fits_gflop`` the work a call may have here. The message ends in advice true anywhere
    (a GPU, or a smaller shape); the caller, which knows where the case came from (a profile, ``--attn-case``),
    may give better (:attr:`what` without it)."""

    ADVICE = "Run it on a GPU, or give it a smaller shape"

    def __init__(self, what: str, gflop: float, fits_gflop: float) -> None:
        super().__init__(f"{what} {self.ADVICE}")
        self.what, self.gflop, self.fits_gflop = what, gflop, fits_gflop


class CaseFailed(Exception):
    """The case ran and failed (wrong output, out of memory, a back-end error)."""


class WrongOutput(CaseFailed):
    """The check before timing found the output (or a gradient) wrong."""


#: On a CPU, a case whose one call would take longer than this is skipped before it starts: a single
#: call in torch's C++ cannot be interrupted, so Ctrl-C would wait for it (HunyuanVideo: most of an hour),
#: and a case takes some 20 calls (check, warm-up, samples).
CPU_CALL_LIMIT_S = 0.5
#: Attention on a CPU reaches about this share of a matrix product's rate (measured here, torch 2.13, a
#: 1 x 8 x 1024 x 64 causal case: SDPA's math kernel 15 GFLOP/s, its flash kernel 85, against fp32 and bf16
#: matmuls at 100 and 195 GFLOP/s): estimates err towards running.
CPU_ATTENTION_SHARE = 0.125


@dataclass(frozen=True)
class RunSettings:
    timer: str = "auto"
    stop: StopRule = field(default_factory=StopRule)
    warmup: WarmupRule = field(default_factory=WarmupRule)
    verify: bool = True
    peak_tflops: float | None = None
    memory_headroom: float = 0.9  # use at most this fraction of free memory
    drop_throttled: bool = False  # drop samples under 75 % of the nominal SM clock (nvbench's rule)
    verify_timing: bool = False  # one extra profiled run: kernel time vs the reported median
    trace_dir: Path | None = None  # one Chrome trace per case here
    clock_lock: str = "not locked"  # the achieved clock-lock state, recorded with every result
    cpu_gflops: dict[str, float] | None = None  # a CPU run: its matmul rate per dtype, to refuse cases it cannot finish
    cpu_call_limit_s: float = field(default_factory=lambda: CPU_CALL_LIMIT_S)  # read when made: tests may raise it
    events_from_s: float = GRAPH_THRESHOLD_S  # ``auto`` times calls this long or longer with events
    min_input_sets: int = 1  # graph timers rotate at least this many input sets
    pin: TimerPin | None = None  # the case's baseline record's timer, calls per sample and input sets (one case's)
    sustained_s: float | None = None  # --attn-sustained: the cap of each case's back-to-back phase (GPU)


def required_bytes(case: AttnCase, backend: Backend, device: DeviceInfo) -> int:
    """Device memory one input set of this case needs: its tensors, gradients for fwd+bwd, the back
    end's workspace and the L2-flush buffer."""
    return flops.tensor_bytes(case) + backend.workspace_bytes(case) + 2 * (device.l2_bytes or 0)
