"""Names of the GPU kernels a call ran (the engine reads them from the PyTorch profiler, outside the
timed samples), and the pure matching behind ``@pytest.mark.attn_kernels(must=..., must_not=...)``.

Names come from CUPTI demangled, e.g. ``void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<
128, 64, 128, 4, ...>, ...>(Flash_fwd_params)``. :func:`short_name` keeps the qualified function name
(``flash::flash_fwd_splitkv_kernel``); patterns are regular expressions matched in full against it
or against its last ``::`` component, so ``flash_fwd_kernel`` does not match
``flash_fwd_splitkv_kernel``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_ANON = "(anonymous namespace)"


def short_name(full: str) -> str:
    """The qualified function name of a demangled kernel name, without return type, template
    arguments and parameters."""
    name = full.strip().replace(_ANON, "anon")
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch in "<(":
            if depth == 0:
                cut = i
                break
            depth += 1
        elif ch in ">)":
            depth -= 1
    return name[:cut].strip()


@dataclass(frozen=True)
class KernelCall:
    name: str  # short
    full: str
    count: int


def summarize(full_names: Iterable[str]) -> list[KernelCall]:
    """Kernel launches in first-seen order, one entry per full name with its count."""
    counts: dict[str, int] = {}
    for n in full_names:
        counts[n] = counts.get(n, 0) + 1
    return [KernelCall(short_name(n), n, c) for n, c in counts.items()]


def _matches(pattern: str, name: str) -> bool:
    return bool(re.fullmatch(pattern, name) or re.fullmatch(pattern, name.rsplit("::", 1)[-1]))


def check_kernels(names: Sequence[str], must: Iterable[str] = (), must_not: Iterable[str] = ()) -> str | None:
    """None when every ``must`` pattern matches some kernel and no ``must_not`` pattern matches any;
    otherwise what is wrong, with the kernels that ran."""
    problems = [f"expected a kernel matching {p!r}" for p in must if not any(_matches(p, n) for n in names)]
    problems += [f"kernel {n!r} matches the forbidden {p!r}" for p in must_not for n in names if _matches(p, n)]
    if not problems:
        return None
    ran = ", ".join(dict.fromkeys(names)) or "none"
    return "; ".join(problems) + f" (kernels that ran: {ran})"


#: The driver's own copy kernels: a copy may run on the SMs as one of these rather than on a copy engine (a FA2
#: decode call's graph replayed ``memcpy32_post`` beside its two kernels: docs/gpu-validation.md#the-paired-ab).
_DRIVER_COPY = re.compile(r"memcpy\d+(_\w+)?( kernel)?")


def is_kernel(name: str) -> bool:
    """Device activity that is a kernel launch, not a copy or memset (the driver's copy kernels are copies)."""
    return not (name.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset", "[memory]"))
                or _DRIVER_COPY.fullmatch(name.strip()))


def launch_mismatch(eager: Sequence[str], replay: Sequence[str], calls: int) -> str | None:
    """None when one graph replay of ``calls`` captured calls launched exactly ``calls`` times the
    kernels one eager call launches (names and counts; memsets and copies aside); else both lists.
    A kernel left out of the capture (seen with CuTe-DSL kernels) makes replays look fast and leaves
    their output stale."""
    want = {k.full: k.count * calls for k in summarize(n for n in eager if is_kernel(n))}
    got = {k.full: k.count for k in summarize(n for n in replay if is_kernel(n))}
    if want == got:
        return None

    def listing(counts: dict[str, int], per: int) -> str:
        return ", ".join(f"{short_name(n)} x{c // per if c % per == 0 else f'{c}/{per}'}" for n, c in counts.items()) \
            or "no kernels"

    return (f"the CUDA graph does not replay what the eager call runs: per call, eager {listing(want, calls)};"
            f" replayed {listing(got, calls)}")
