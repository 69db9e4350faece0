"""Every ``--attn-*`` option: its converter, its default and its help.

Converters raise ``argparse.ArgumentTypeError`` naming the option and the valid values, so a bad value
stops the run at start-up; defaults are already converted values, so nothing depends on argparse
converting a default (``pytest --help`` configures without parsing them). :func:`given` says which
options the command line set: the plugin does nothing costly unless one was, or an attention case
is collected.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ..core.adhoc import parse_case
from ..core.case import DIRECTIONS, DTYPES, canonical_dtype
from ..core.catalog import PROFILES, Variant
from ..core.converters import option_value
from ..core.percent import parse_percent
from ..core.replay import Replay, replay_file
from ..engine.ab.spec import ArmSpec, parse_ab
from ..engine.ab.waits import FLOOR_S
from ..engine.clocks import LockRequest, parse_lock
from ..engine.stopping import MAX_SAMPLES
from ..engine.threads import usable_cpus
from ..engine.timers import TIMER_KINDS
from ..verdicts.ab.paired import AB_THRESHOLD
from ..verdicts.rule import DEFAULT_THRESHOLD, parse_override
from ..verdicts.verdict import DEFAULT_FAIL_ON, fail_on_help, parse_fail_on

T = TypeVar("T")

#: dest -> (flag, default) of every option this plugin adds, for :func:`given`.
DEFAULTS: dict[str, tuple[str, Any]] = {}


def comma_list(choices: tuple[str, ...], what: str,
               canonical: Callable[[str], str] = str.strip) -> Callable[[str], tuple[str, ...]]:
    """Converter for ``a,b,c`` lists whose items, each through ``canonical``, must be among ``choices``."""

    def parse(text: str) -> tuple[str, ...]:
        items = tuple(canonical(x) for x in text.split(",") if x.strip())
        if not items:
            raise ValueError(f"empty {what} list; choose from {', '.join(choices)}")
        bad = [x for x in items if x not in choices]
        if bad:
            raise ValueError(f"unknown {what} {', '.join(map(repr, bad))}; valid: {', '.join(choices)}")
        return items

    return option_value(f"--attn-{what}s", parse)


def _names(text: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise ValueError("empty back-end list; name at least one, or 'default' or 'all'")
    return items


def _choice(what: str, choices: tuple[str, ...], hint: str = "") -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"unknown {what} {text!r}; valid: {', '.join(choices)}{hint}")
        return text

    return parse


def _number(what: str, parse: Callable[[str], T], noun: str, minimum: float, maximum: float = math.inf,
            most: str = "") -> Callable[[str], T]:
    def convert(text: str) -> T:
        try:
            value = parse(text)
        except ValueError:
            raise ValueError(f"{what} must be {noun}, got {text!r}") from None
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise ValueError(f"{what} must be a finite number, got {text!r}")
        if value < minimum or not value > 0:  # type: ignore[operator]
            limit = "positive" if minimum <= 1 else f">= {minimum:g} (fewer cannot estimate the precision)"
            raise ValueError(f"{what} must be {limit}, got {text!r}")
        if value > maximum:  # type: ignore[operator]  # what the engine cannot honour: refused now, not in each case
            raise ValueError(f"{what}={text} is more than {maximum:,g}, {most}; give {minimum:g} to {maximum:,g}")
        return value

    return option_value(what, convert)


def positive_float(what: str) -> Callable[[str], float]:
    return _number(what, float, "a number", 0)


def positive_int(what: str, minimum: int = 1) -> Callable[[str], int]:
    return _number(what, int, "a whole number", minimum)


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"--attn-hbm: {text!r} is not a regular expression ({exc})") from None


def _head_dims(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"head dims must be comma-separated integers, got {text!r}") from None
    if not dims or any(d <= 0 for d in dims):
        raise ValueError(f"head dims must be positive integers, got {text!r}")
    return dims


def _threads(text: str) -> str | int:
    if text == "auto":
        return "auto"
    threads = positive_int("--attn-cpu-threads")(text)
    if threads > usable_cpus():
        raise argparse.ArgumentTypeError(f"--attn-cpu-threads={threads}: this process may use {usable_cpus()} CPUs;"
                                         f" give at most {usable_cpus()}, or auto (half of them)")
    return threads


def _shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise ValueError(f"--attn-shard={text!r}: give I/N with 1 <= I <= N, e.g. 1/2 for the first of two shards")
    return int(m[1]), int(m[2])


# ---- the converters, one per option that takes a value --------------------------------------------
profile = option_value("--attn-profile", _choice("profile", ("auto", *PROFILES),
                                              " (auto: 'default' on a GPU, 'cpu' without)"))
backend_names = option_value("--attn-backends", _names)
dtypes = comma_list(DTYPES, "dtype", canonical_dtype)
directions = comma_list(DIRECTIONS, "direction")
timer = option_value("--attn-timer", _choice("timer", TIMER_KINDS))
second_look = option_value("--attn-second-look", _choice("mode", ("auto", "on", "off")))
precision = option_value("--attn-precision", lambda t: parse_percent(t, "--attn-precision"))
min_samples = _number("--attn-min-samples", int, "a whole number", 5, MAX_SAMPLES, "the most samples a case takes")
adhoc_case = option_value("--attn-case", parse_case)  # (an AdhocError is a ValueError)
workload_file = option_value("--attn-workload", replay_file)
lock_clocks = option_value("--attn-lock-clocks", parse_lock)
hbm_pattern = option_value("--attn-hbm", _regex)
inject_slowdown = option_value("--attn-inject-slowdown", lambda t: parse_percent(t, "--attn-inject-slowdown",
                                                                              upper=10.0))
fuzz_head_dims = option_value("--attn-fuzz-head-dims", _head_dims)
threshold = option_value("--attn-threshold", lambda t: parse_percent(t, "--attn-threshold", upper=10.0))
threshold_for = option_value("--attn-threshold-for", parse_override)
cpu_threads = option_value("--attn-cpu-threads", _threads)
fail_on = option_value("--attn-fail-on", parse_fail_on)
shard = option_value("--attn-shard", _shard)
ab_arms = option_value("--attn-ab", lambda t: parse_ab(t, Path.cwd()))
NO_LOCK = LockRequest("off")
#: ``--attn-sustained`` without a value: the cap of each case's back-to-back phase, in seconds.
DEFAULT_SUSTAINED_S = 10.0


def _sustained(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"--attn-sustained takes the cap in seconds, got {text!r}: write --attn-sustained=10, or put"
                         " --attn-sustained after the test paths (alone it means 10 s)") from None
    if not (math.isfinite(seconds) and 1 <= seconds <= 600):
        raise ValueError(f"--attn-sustained={text}: give 1 to 600 seconds (the load settles within a few)")
    return seconds


sustained_s = option_value("--attn-sustained", _sustained)
ab_threshold = option_value("--attn-ab-threshold", lambda t: parse_percent(t, "--attn-ab-threshold", upper=10.0))


def _add(group: Any, flag: str, default: Any, **kwargs: Any) -> None:
    dest = flag.lstrip("-").replace("-", "_")
    DEFAULTS[dest] = (flag, default)
    group.addoption(flag, default=default, **kwargs)


def add_options(parser: pytest.Parser) -> None:
    g = parser.getgroup("attn", "pytest-attn: GPU attention benchmarks")
    _add(g, "--attn-profile", "auto", type=profile, metavar="NAME",
        help="case set: smoke (a few minutes on one GPU), default, full, cpu (tiny shapes, no GPU), sustained"
             " (Llama-3-8B prefill and HunyuanVideo, fwd and fwd+bwd, with --attn-sustained: what a model sees at the"
             " power cap); auto = default on a GPU, cpu without (default: auto)")
    _add(g, "--attn-backends", ("default",), type=backend_names, metavar="LIST",
         help="comma-separated back ends, or 'default' / 'all' (default: every built-in but the slow reference)")
    _add(g, "--attn-dtypes", None, type=dtypes, metavar="LIST",
         help="keep only these dtypes of the profile: fp16,bf16,fp32,fp8")
    _add(g, "--attn-directions", None, type=directions, metavar="LIST",
         help="keep only these directions: fwd, fwd+bwd")
    _add(g, "--attn-peak-tflops", None, type=positive_float("--attn-peak-tflops"), metavar="TFLOPS",
         help="dense peak TFLOP/s to compute MFU against (for GPUs not in the peak table)")
    _add(g, "--attn-timer", "auto", type=timer, metavar="KIND",
         help="auto (kernel-sum over CUDA-graph replays for calls < 5 ms, CUDA events otherwise), cuda-event,"
              " cuda-graph, kernel-sum, cpu")
    _add(g, "--attn-precision", 0.01, type=precision, metavar="PCT",
         help="stop sampling when the median's 95%% CI half-width is below this (default 1%%)")
    _add(g, "--attn-max-time", None, type=positive_float("--attn-max-time"), metavar="SECONDS",
         help="cap on sampling time per case (default by profile: smoke 2, default 3, full 5, cpu 0.5)")
    _add(g, "--attn-min-samples", 10, type=min_samples, metavar="N",
         help=f"samples to take at least, 5 to {MAX_SAMPLES:,} (default 10)")
    _add(g, "--attn-case", [], type=adhoc_case, action="append", metavar="SPEC",
         help="an ad-hoc problem, e.g. \"batch=4,seqlen=2048,heads=16,head_dim=128,causal,dtype=bf16\""
              " (repeatable); without --attn-profile only these run, with it they run beside the catalog")
    _add(g, "--attn-workload", [], type=workload_file, action="append", metavar="FILE",
         help="replay a captured workload (python -m pytest_attn.capture): each record a case, as --attn-case")
    _add(g, "--attn-speedup-vs", "sdpa-math", metavar="BACKEND",
         help="the back end every result's speedup is measured against on the same problem (default: sdpa-math)")
    _add_measure_options(g)
    _add_fuzz_options(g)
    _add_gate_options(g)


def _add_measure_options(g: Any) -> None:
    _add(g, "--attn-trace-dir", None, type=Path, metavar="DIR",
         help="write one PyTorch-profiler Chrome trace per case (3 calls, after sampling) into DIR")
    _add(g, "--attn-lock-clocks", NO_LOCK, type=lock_clocks, metavar="off|base|max|MHZ[:require]",
         help="lock the SM clock for the session through NVML (needs root) and restore it at the end;"
              " :require stops at start-up if it cannot, :try (default) warns and records 'not locked'")
    _add(g, "--attn-verify-timing", False, action="store_true",
         help="one extra profiled run per case: flag it when the profiler's kernel time and the reported"
              " median differ by more than 5%%")
    _add(g, "--attn-hbm", None, type=hbm_pattern, metavar="REGEX",
         help="re-run the cases whose id matches REGEX under Nsight Compute (ncu) and report HBM bytes read"
              " and written against the minimal bytes (IO amplification)")
    _add(g, "--attn-drop-throttled", False, action="store_true",
         help="drop samples taken under 75%% of the nominal SM clock (nvbench's rule); count reported")
    _add(g, "--attn-inject-slowdown", None, type=inject_slowdown, metavar="PCT",
         help="make every back end this much slower on purpose (calibrated matmuls after each call, inside the"
              " timed graph on a GPU): shows that the regression gate turns red")
    _add(g, "--attn-no-verify", False, action="store_true",
         help="skip the check of sampled output rows against the fp64 reference before timing")
    _add(g, "--attn-compile-only", False, action="store_true",
         help="build the kernel modules the selected cases need (FlashInfer's JIT), then stop: nothing is"
              " measured. Warms a CI runner's cache (FLASHINFER_WORKSPACE_BASE)")
    _add(g, "--attn-shard", None, type=shard, metavar="I/N",
         help="run the I-th of N shares of the problems (whole), balanced by their expected time (the baseline's,"
              " else a model's); combine the shards' JSON with pytest-attn merge")
    _add(g, "--attn-sustained", None, type=sustained_s, nargs="?", const=DEFAULT_SUSTAINED_S, metavar="SECONDS",
         help="after each case's burst figure, run it back to back until the SM clock and power settle (at most"
              " SECONDS, default 10) and report the time per call there, its clock, power and energy per call"
              " (TFLOP/J): what prefill and training throughput see at the power cap. GPU only")
    _add(g, "--attn-cpu-threads", "auto", type=cpu_threads, metavar="N|auto",
         help="torch's CPU threads: auto (default) = half the CPUs this process may use on a machine without a"
              " GPU (a busy core stalls every thread of a full-width pool), torch's own choice on a GPU machine")


def _add_fuzz_options(g: Any) -> None:
    _add(g, "--attn-fuzz", False, action="store_true",
         help="run the fuzz suite on a GPU too (it is opt-in there: it compiles kernels for many shapes);"
              " naming a test_fuzz file on the command line does the same")
    _add(g, "--attn-fuzz-head-dims", None, type=fuzz_head_dims, metavar="LIST",
         help="fuzz only these head dims (default: every one a back end takes, e.g. 16 ... 256 on a GPU);"
              " --attn-dtypes narrows the fuzzed dtypes too")
    _add(g, "--attn-fuzz-examples", None, type=positive_int("--attn-fuzz-examples"), metavar="N",
         help="examples per property, overriding the Hypothesis profile's max_examples"
              " (e.g. a short run of a back end that compiles per example, like flex)")


def _add_gate_options(g: Any) -> None:
    _add(g, "--attn-baseline", "auto", metavar="PATH|auto|off",
         help="baseline to gate against: auto = baselines/<gpu-key>/baseline.json when it exists (default)")
    _add(g, "--attn-baselines-dir", "baselines", metavar="DIR",
         help="folder of per-GPU baselines, relative to the rootdir (default: baselines)")
    _add(g, "--attn-threshold", DEFAULT_THRESHOLD, type=threshold, metavar="PCT",
         help="a change must exceed this (and both runs' noise) to be SLOWER/FASTER (default 5%%)")
    _add(g, "--attn-threshold-for", [], type=threshold_for, action="append",
         metavar="KIND:NAME=PCT", help="per back end or group: backend:flex=10%% or group:NAME=3%% (repeatable)")
    _add(g, "--attn-fail-on", DEFAULT_FAIL_ON, type=fail_on, metavar="LIST", help=fail_on_help())
    _add(g, "--attn-save-baseline", False, action="store_true",
         help="store this run as the baseline for this device (baselines/<device-key>/baseline.json; on a CPU,"
              " cpu-<model>)")
    _add(g, "--attn-add-to-baseline", False, action="store_true",
         help="add this run to the stored baseline of this device as one more independent repeat: each case's"
              " between-run noise is then measured (record with --attn-save-baseline, then add two more)")
    _add(g, "--attn-force", False, action="store_true",
         help="with --attn-save-baseline: replace a baseline recorded on another GPU, or a corrupt one")
    _add(g, "--attn-second-look", "auto", type=second_look, metavar="auto|on|off",
         help="before the gate, measure the cases it would leave AMBIGUOUS or CLOCK again in a fresh process on the"
              " same GPU and gate each on both runs (auto, the default: on a GPU; on: on a CPU too)")
    _add(g, "--attn-report", None, type=Path, metavar="DIR",
         help="write summary.md, results.csv and plots (TFLOP/s vs length, roofline) into DIR")
    _add(g, "--attn-ab", None, type=ab_arms, metavar="ARM_A,ARM_B",
         help="paired A/B: measure every case in two worker processes taking turns on this GPU (with -n N: on each"
              " worker's own), block by block, and judge B against A (no stored baseline). An arm: same (this"
              " environment), a folder (put first on PYTHONPATH: a checkout or a pip --target prefix) or a python"
              " executable (a virtualenv's); +slowdown=PCT or +backend=NAME modify it. E.g. /tmp/main-site,. or"
              " same,same+slowdown=2%%")
    _add(g, "--attn-ab-threshold", AB_THRESHOLD, type=ab_threshold, metavar="PCT",
         help="with --attn-ab: a change must exceed this (and the pairs' noise) to be SLOWER/FASTER"
              " (default 2%%)")
    _add(g, "--attn-ab-arm-timeout", FLOOR_S, type=positive_float("--attn-ab-arm-timeout"), metavar="SECONDS",
         help="with --attn-ab: the least time an arm is waited for (a block: 10x what it should take; starting an"
              " arm, or a case's first set-up in it: 6x this, at least 300); past it the arm is killed, the case"
              " fails naming it, and a new process replaces it (default 300)")


def given(config: pytest.Config) -> list[str]:
    """The ``--attn-*`` options this run set to something other than their default."""
    return [flag for dest, (flag, default) in DEFAULTS.items() if config.getoption(dest, default) != default]


# Per-case sampling time cap by profile (seconds); --attn-max-time overrides it.
DEFAULT_MAX_TIME_S = {"smoke": 2.0, "default": 3.0, "full": 5.0, "cpu": 0.5, "sustained": 2.0, "models-2026": 3.0}


@dataclass(frozen=True)
class AttnOptions:
    """Every ``--attn-*`` option but the gate's (:class:`~.session.GateOptions`), converted once at configure;
    code reads them here (``options_of(config)``), never with ``config.getoption``."""

    profile: str = "auto"
    backends: tuple[str, ...] = ("default",)
    dtypes: tuple[str, ...] | None = None
    directions: tuple[str, ...] | None = None
    peak_tflops: float | None = None
    timer: str = "auto"
    precision: float = 0.01
    max_time_s: float | None = None
    min_samples: int = 10
    verify: bool = True
    drop_throttled: bool = False
    verify_timing: bool = False
    adhoc: tuple[Variant, ...] = ()  # --attn-case's problems, then --attn-workload's
    workloads: tuple[Replay, ...] = ()
    trace_dir: Path | None = None
    speedup_vs: str = "sdpa-math"
    hbm: re.Pattern[str] | None = None
    inject_slowdown: float | None = None
    compile_only: bool = False
    sustained_s: float | None = None
    lock_clocks: LockRequest = NO_LOCK
    shard: tuple[int, int] | None = None
    ab: tuple[ArmSpec, ArmSpec] | None = None
    ab_threshold: float = AB_THRESHOLD
    ab_arm_timeout_s: float = FLOOR_S
    fuzz: bool = False
    fuzz_examples: int | None = None
    fuzz_head_dims: tuple[int, ...] | None = None

    @classmethod
    def of(cls, config: pytest.Config) -> AttnOptions:
        get = config.getoption
        return cls(
            profile=get("attn_profile"), backends=get("attn_backends"), dtypes=get("attn_dtypes"),
            directions=get("attn_directions"), peak_tflops=get("attn_peak_tflops"), timer=get("attn_timer"),
            precision=get("attn_precision"), max_time_s=get("attn_max_time"), min_samples=get("attn_min_samples"),
            verify=not get("attn_no_verify"), drop_throttled=get("attn_drop_throttled"),
            verify_timing=get("attn_verify_timing"), trace_dir=get("attn_trace_dir"),
            workloads=tuple(get("attn_workload")),
            adhoc=(*get("attn_case"), *(v for w in get("attn_workload") for _, v in w.variants)),
            speedup_vs=get("attn_speedup_vs"), hbm=get("attn_hbm"), inject_slowdown=get("attn_inject_slowdown"),
            compile_only=get("attn_compile_only"), sustained_s=get("attn_sustained"),
            lock_clocks=get("attn_lock_clocks"), shard=get("attn_shard"), ab=get("attn_ab"),
            ab_threshold=get("attn_ab_threshold"), ab_arm_timeout_s=get("attn_ab_arm_timeout"), fuzz=get("attn_fuzz"),
            fuzz_examples=get("attn_fuzz_examples"), fuzz_head_dims=get("attn_fuzz_head_dims"))

    def resolve_backends(self, known: list[str], defaults: list[str]) -> tuple[str, ...]:
        """Expand 'default'/'all' and check every name; ValueError lists the valid names."""
        out: list[str] = []
        for name in self.backends:
            expanded = defaults if name == "default" else known if name == "all" else [name]
            for n in expanded:
                if n not in known:
                    raise ValueError(
                        f"--attn-backends: unknown back end {n!r}; valid: {', '.join(known)} (or 'default', 'all')"
                    )
                if n not in out:
                    out.append(n)
        return tuple(out)

    def max_time_for(self, profile: str) -> float:
        return self.max_time_s if self.max_time_s is not None else DEFAULT_MAX_TIME_S[profile]
