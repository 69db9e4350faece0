"""The result record: every figure one measured case has, in one frozen, typed value that travels.

The engine makes a :class:`Record` per case; the terminal table, the gate, reports, plots, stored
baselines and -- across processes -- pytest-xdist workers and merged shards all read it. Its JSON
form (:meth:`Record.to_json`) is what pytest-benchmark saves as each benchmark's ``extra_info``,
written in one place (the plugin's hand-over), and :meth:`Record.from_json` reads it back:
``Record.from_json(r.to_json()) == r``.

The JSON carries ``schema`` and ``version``. A newer version than this code knows is refused with both
numbers; unknown keys inside a known version are ignored, so a reader keeps working when fields are
added. Non-finite floats are written as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (strict JSON).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeGuard, Union

from .case import AttnCase
from .codec import case_from_dict, case_to_dict
from .device import DeviceInfo
from .flops import Work
from .kernel_names import KernelCall
from .metrics import CeilingShare, Figures
from .stats import median, relative_drift
from .sustained import Sustained
from .throttle import ThrottleReport

SCHEMA = "pytest-attn.record"
VERSION = 1
TIMING_TOLERANCE = 0.05  # --attn-verify-timing: reported median vs the profiler's kernel time


@dataclass(frozen=True)
class TimerPin:
    """What makes two medians comparable: the timer that took them, the calls one sample covers and the
    input sets rotated. A gated run measures each case as its baseline record says (the plugin pins it),
    and the gate never compares two medians whose pins differ (verdict TIMER)."""

    timer: str
    calls_per_sample: int = 1
    input_sets: int = 1

    def describe(self) -> str:
        return f"{self.timer} x{self.calls_per_sample}"


#: How ``Timing.timer_choice`` begins for a timer pinned by a baseline's record, and for one asked for.
PINNED_CHOICE = "pinned by the baseline's record"
ASKED_CHOICE = "--attn-timer="


@dataclass(frozen=True)
class Timing:
    """How the median was measured, and how far it can be trusted."""

    samples_s: tuple[float, ...]  # seconds per call, one per sample, as kept (after --attn-drop-throttled)
    median_s: float
    precision: float  # half-width of the median's 95 % CI over the median (inf with < 5 samples)
    stop_reason: str  # "precision", "time-cap" or "sample-cap"; in an A/B arm the pairs' stop (engine.pairing)
    timer: str  # "cpu", "cuda-event", "cuda-graph" or "kernel-sum"
    timer_note: str = ""
    calls_per_sample: int = 1
    input_sets: int = 1  # rotated copies of the inputs (cold L2 under graph timing)
    warmup_calls: int = 0
    warmup_s: float = 0.0
    warmup_settled: bool = True
    prepare_s: float = 0.0  # inputs, plan/compile, check, warm-up, graph capture: before the first sample
    elapsed_s: float = 0.0
    setup_s: float = 0.0  # of prepare_s: inputs, the back end's plan and first call (compilation), the check
    graph_replay_s: float | None = None  # the replay figure behind kernel-sum (median per call)
    repeats_s: tuple[float, ...] = ()  # a stored baseline: the median of each independent run (--attn-add-to-baseline)
    drift: float | None = None  # the samples' trend over the sampling, relative (see core.stats.relative_drift)
    l2: str = ""  # the cache condition the figure is for (cold or warm L2, input sets rotated)
    capture: str = ""  # graph-timed cases: what the eager-vs-replay check found
    timer_choice: str = ""  # why this timer: pinned by a baseline, asked for, or the call's length (and the warm-up's)
    host_gap: float | None = None  # a call of 5 ms or more: the share of its events reading the GPU idled (1 - kernels
    # of one profiled call / the warm-up's events estimate): what of an events figure moves with the host
    kernels_s: float | None = None  # a call of 5 ms or more: one profiled call's kernels (s), where they were read
    repeats_gpu: tuple[str, ...] = ()  # the GPU (UUID) of each of ``repeats_s`` ("" unknown; () not recorded)

    @property
    def pin(self) -> TimerPin:
        """The timer, calls per sample and input sets: what another median must share to be compared."""
        return TimerPin(self.timer, self.calls_per_sample, self.input_sets)

    @property
    def chose_its_timer(self) -> bool:
        """The run chose this timer itself (by the call's length): neither a baseline's pin nor --attn-timer."""
        return bool(self.timer_choice) and not self.timer_choice.startswith((PINNED_CHOICE, ASKED_CHOICE))

    @property
    def launch_gap_s(self) -> float | None:
        return None if self.graph_replay_s is None else self.graph_replay_s - self.median_s


@dataclass(frozen=True)
class Clocks:
    """The SM clock NVML read while sampling, the clock-lock state, and throttling."""

    sm_clock_mhz: float | None = None  # median over the samples
    sm_clock_min_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    lock: str = "not locked"
    throttle: ThrottleReport | None = None
    drift: float | None = None  # the SM clock's trend over the sampling, relative (negative: it fell)
    repeats_sm_clock_mhz: tuple[float, ...] = ()  # a stored baseline: each repeat's median, as timing.repeats_s

    @classmethod
    def of(cls, clocks_mhz: list[int], lock: str, throttle: ThrottleReport | None) -> Clocks:
        if not clocks_mhz:
            return cls(lock=lock, throttle=throttle)
        return cls(median(clocks_mhz), min(clocks_mhz), max(clocks_mhz), lock, throttle,
                   relative_drift([float(c) for c in clocks_mhz]))


@dataclass(frozen=True)
class Check:
    """The checks a call passed before it was timed: every output (and gradient) element finite, and
    sampled rows of every sequence against the fp64 reference -- the output, and for fwd+bwd dq, dk and
    dv -- with what each cost."""

    rows: int
    max_error: float
    math_error: float  # the same math in the case's dtype
    allowed: float
    worst: str
    seconds: float = 0.0  # the whole check: finite pass, output rows, gradient rows
    grad_rows: int = 0  # sampled query and key rows of the gradient check (fwd+bwd)
    grad_max_error: float | None = None  # of the gradient the check found closest to its allowance
    grad_allowed: float | None = None
    grad_tensor: str = ""
    grad_kv_heads: int = 0  # kv heads the gradient check covered, with their query heads (long cases: a few)
    cache: str = ""  # a call that writes a KV cache: what of it was checked after the call
    spot_checks: int = 0  # checks of the same call at random points during sampling (engine.spotcheck)
    spot_seconds: float = 0.0  # what they cost, all together


@dataclass(frozen=True)
class TimingCheck:
    """``--attn-verify-timing``: the reported median against the profiler's kernel time."""

    reported_s: float
    kernel_s: float
    tolerance: float = TIMING_TOLERANCE

    @property
    def ratio(self) -> float:
        return self.reported_s / self.kernel_s if self.kernel_s > 0 else math.inf

    @property
    def ok(self) -> bool:
        return abs(self.ratio - 1) <= self.tolerance

    def describe(self) -> str:
        verdict = "agrees with" if self.ok else "DIFFERS from"
        return (f"reported median {self.reported_s * 1e6:.2f} us {verdict} the profiler's kernel time"
                f" {self.kernel_s * 1e6:.2f} us (ratio {self.ratio:.3f}, tolerance {self.tolerance:.0%})")


@dataclass(frozen=True)
class Hbm:
    """``--attn-hbm``: DRAM bytes one warm call moved, by Nsight Compute."""

    read_bytes: float
    write_bytes: float
    kernels: int
    min_bytes: int

    @property
    def amplification(self) -> float:
        return (self.read_bytes + self.write_bytes) / self.min_bytes if self.min_bytes else math.inf

    def describe(self) -> str:
        return (f"HBM read {self.read_bytes / 1e9:.3f} GB, written {self.write_bytes / 1e9:.3f} GB over"
                f" {self.kernels} kernels; minimal {self.min_bytes / 1e9:.3f} GB: IO amplification"
                f" {self.amplification:.2f}x")


@dataclass(frozen=True)
class Peers:
    """This result against the others of the same problem (known once the whole group has run)."""

    slowdown: float  # median / the fastest median of the group (1.0 for the fastest)
    fastest: str
    fastest_expression: str
    results: int  # results in the group
    speedup: float | None = None  # the reference back end's median / this one's (None: it did not run)
    speedup_vs: str = "sdpa-math"


@dataclass(frozen=True)
class Record:
    """One measured case. ``test`` is the pytest node id that measured it ("" outside pytest)."""

    test: str
    case: AttnCase
    device: DeviceInfo
    timing: Timing
    work: Work
    figures: Figures
    clocks: Clocks = field(default_factory=Clocks)
    ceilings: CeilingShare = field(default_factory=CeilingShare)
    check: Check | None = None
    kernels: tuple[KernelCall, ...] = ()
    expression: str = ""  # how the back end expressed the mask
    peak_memory_bytes: int | None = None  # one call's allocation beyond its inputs (GPU only)
    timing_check: TimingCheck | None = None
    hbm: Hbm | None = None
    hbm_note: str = ""  # why HBM traffic was not measured, when it was asked for
    peers: Peers | None = None
    sustained: Sustained | None = None  # --attn-sustained: back to back, once the clock and power settled
    version: int = VERSION

    @property
    def median_s(self) -> float:
        return self.timing.median_s

    @property
    def name(self) -> str:
        """The benchmark's name as pytest-benchmark and the gate key it: the test id, or the case id."""
        return self.test or self.case.id

    def to_json(self) -> dict[str, Any]:
        data = {"schema": SCHEMA, "id": self.case.id, "group": self.case.group}
        data.update(_encode(self))
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a pytest-attn record (no schema {SCHEMA!r})")
        version = data.get("version")
        if not isinstance(version, int) or version > VERSION:
            raise ValueError(f"record version {version!r} is newer than this pytest-attn reads ({VERSION}):"
                             " upgrade pytest-attn to read it")
        record = _decode(cls, data)
        assert isinstance(record, Record)
        return record


def is_record(data: object) -> TypeGuard[dict[str, Any]]:
    """True when ``data`` (a benchmark's ``extra_info``) holds a record."""
    return isinstance(data, dict) and data.get("schema") == SCHEMA


# ---- the JSON codec: dataclasses by their fields, the case by its codec ---------------------------
def _encode(value: Any) -> Any:
    if isinstance(value, AttnCase):
        return case_to_dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(tp: Any, data: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        if data is None:
            return None
        arms = [a for a in typing.get_args(tp) if a is not type(None)]
        return _decode(arms[0], data)
    if tp is AttnCase:
        return case_from_dict(data, strict_mask=False)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        known = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: _decode(hints[k], v) for k, v in data.items() if k in known})
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v) for v in data)
        return tuple(_decode(a, v) for a, v in zip(args, data, strict=True))
    if origin is dict:
        _, value_type = typing.get_args(tp)
        return {k: _decode(value_type, v) for k, v in data.items()}
    if tp is float:
        return float(data)
    return data
