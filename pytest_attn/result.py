"""The result of one measured case, and everything a reader needs to trust (or question) it in the
benchmark JSON's ``extra_info``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .stopping import median

if TYPE_CHECKING:
    from . import flops
    from .case import AttnCase
    from .dispatch import KernelCall
    from .metrics import Figures
    from .reference import RowCheck
    from .selfcheck import TimingCheck
    from .throttle import ThrottleReport
    from .timing import WarmupReport


@dataclass(frozen=True)
class CaseResult:
    case: AttnCase
    work: flops.Work
    figures: Figures
    samples_s: list[float]
    precision: float
    stop_reason: str
    timer: str
    timer_note: str
    calls_per_sample: int
    input_sets: int
    warmup: WarmupReport
    sm_clocks_mhz: list[int]
    check: RowCheck | None
    elapsed_s: float
    replay_s: list[float] = field(default_factory=list)  # graph-replay figures behind kernel-sum
    kernels: list[KernelCall] = field(default_factory=list)  # what one call launched (profiled untimed)
    expression: str = ""  # how the back end expressed the mask
    prepare_s: float = 0.0  # inputs, plan/compile, check, warm-up, graph capture: before any sample
    throttle: ThrottleReport | None = None
    clock_lock: str = "not locked"
    timing_check: TimingCheck | None = None  # --attn-verify-timing
    peak_memory_bytes: int | None = None  # one call's allocation beyond its inputs (GPU only)

    @property
    def median_s(self) -> float:
        return self.figures.median_s

    @property
    def sm_clock_mhz(self) -> float | None:
        return median(self.sm_clocks_mhz) if self.sm_clocks_mhz else None

    def extra_info(self) -> dict[str, Any]:
        """Everything a reader needs to trust (or question) the figure, for the benchmark JSON."""
        info: dict[str, Any] = {
            "attn_case": self.case.describe(),
            "backend": self.case.backend,
            "shape": self.case.shape,
            "batch": self.case.batch,
            "max_seqlen_q": self.case.max_seqlen_q,
            "max_seqlen_k": self.case.max_seqlen_k,
            "flops": self.work.flops,
            "fa2_flops": self.work.fa2_flops,
            "min_bytes": self.work.min_bytes,
            "mask_density": self.work.density,
            "timer": self.timer,
            "timer_note": self.timer_note,
            "calls_per_sample": self.calls_per_sample,
            "input_sets": self.input_sets,
            "samples": len(self.samples_s),
            "precision": self.precision,
            "stop_reason": self.stop_reason,
            "prepare_s": self.prepare_s,
            "warmup_calls": self.warmup.calls,
            "warmup_s": self.warmup.elapsed_s,
            "warmup_settled": self.warmup.settled,
            "sm_clock_mhz": self.sm_clock_mhz,
            "sm_clock_min_mhz": min(self.sm_clocks_mhz) if self.sm_clocks_mhz else None,
            "sm_clock_max_mhz": max(self.sm_clocks_mhz) if self.sm_clocks_mhz else None,
        }
        info["clock_lock"] = self.clock_lock
        info["peak_memory_bytes"] = self.peak_memory_bytes
        if self.throttle is not None:
            info.update(self.throttle.as_extra_info())
        if self.timing_check is not None:
            info.update(self.timing_check.as_extra_info())
        if self.expression:
            info["mask_expression"] = self.expression
        if self.kernels:
            info["kernels"] = list(dict.fromkeys(k.name for k in self.kernels))
            info["kernel_launches"] = {k.full[:300]: k.count for k in self.kernels}
        if self.replay_s:
            replay = median(self.replay_s)
            info.update(graph_replay_s=replay, launch_gap_s=replay - self.median_s)
        info.update(self.figures.as_extra_info())
        if self.check is not None:
            info.update(check_rows=self.check.rows_checked, check_max_error=self.check.max_error,
                        check_math_error=self.check.lowp_error)
        return info
