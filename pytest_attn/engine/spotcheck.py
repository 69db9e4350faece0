"""What keeps a figure the back end's own work, checked outside the timed region: a kernel written or tuned
against a benchmark's number must not win by a trick.

* **Its inputs are its inputs** (:func:`input_digests`): q, k, v (and dO) are read bit for bit before and after a
  checked call; a back end that writes them fails, named as such -- not as a wrong mask.
* **Its output is its own** (:func:`shared_input`): an output that shares memory with q, k or v fails.
* **Spot checks at random points during sampling** (:class:`SpotCheck`), each before a sample, untimed: the
  inputs' contents are drawn afresh in place (same tensors, same addresses), then one call must

  - return what the reference gives for the new contents: a stored answer -- kept from the first call, or by
    input address -- is now wrong, and where it equals the last answer it is named as a stored result;
  - have finished when it returns: its output, copied the moment the call returns, must equal the output once
    the device and every thread are done -- work left on a thread or a side stream is caught here;
  - leave its inputs as they were;

  and, with its output overwritten with NaN, a second call must return a finite output (a back end that hands
  back the tensor it stored, unwritten, returns the NaN). A back end that copies its inputs when it is prepared
  (a KV cache: its call exposes ``cache``) keeps its inputs; its spot checks are the NaN one and the rest.
* **Clocks are the interpreter's and torch's own** (:func:`clock_tampering`): ``time.perf_counter`` and its kin
  must be the built-ins they were when pytest-attn was imported, and ``torch.cuda.Event``'s ``record``,
  ``synchronize`` and ``elapsed_time`` functions of torch's own files. (The CPU timer reads the clock it bound
  at import, so a patched clock would not move its figure; the case fails anyway: a back end that patches
  clocks is not measured.)

torch is imported inside the functions only.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import Inputs, torch_dtype
from ..oracle.checks import check_rows
from .settings import CaseFailed

#: The clocks a timer may read, as they were when pytest-attn was imported (before any back end's module).
GENUINE_TIME: dict[str, Any] = {name: getattr(time, name) for name in
                                ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time")}
#: Spot checks per case: before this many of its samples, drawn at random among the first ``min_samples``...
SPOT_CHECKS = 2
#: ... as many as cost (two calls each) at most this share of the case's sampling cap: an honest call of 200 ms
#: gets none, while a back end that games its time is fast, and so is checked.
SPOT_SHARE = 0.03


def spot_count(call_s: float, max_time_s: float) -> int:
    """How many spot checks a case whose call takes ``call_s`` gets, within :data:`SPOT_SHARE` of its cap."""
    return max(0, min(SPOT_CHECKS, int(SPOT_SHARE * max_time_s / (2 * max(call_s, 1e-9)))))
#: Rows per sequence a spot check compares with the reference (the check before timing takes 8) ...
SPOT_ROWS = 2
#: ... in this many sequences of the batch at most, drawn afresh at each check: the reference's cost grows with the
#: sequences (docs/gpu-validation.md#checks-before-and-during-timing), a stored answer is wrong in all of them.
SPOT_SEQUENCES = 4
#: Elements digested at a time: bounds the temporary an input's digest may make (16 Mi elements, 128 MiB as int64).
DIGEST_CHUNK = 1 << 24


def clock_tampering() -> str | None:
    """What replaced a clock the timers read, or None: ``time``'s clocks must be the built-ins they were when
    pytest-attn was imported, and torch's CUDA event functions (where torch is imported) defined in torch."""
    problems = [f"time.{name} was replaced by {getattr(time, name)!r}" for name, genuine in GENUINE_TIME.items()
                if getattr(time, name) is not genuine or not isinstance(genuine, types.BuiltinFunctionType)]
    torch = _imported("torch")
    if torch is not None:
        home = os.path.dirname(torch.__file__)
        event = torch.cuda.Event
        for name in ("record", "synchronize", "elapsed_time"):
            fn = getattr(event, name, None)
            where = getattr(getattr(fn, "__code__", None), "co_filename", "")
            if fn is not None and not where.startswith(home):
                problems.append(f"torch.cuda.Event.{name} was replaced by {fn!r} (from {where or 'outside torch'})")
    return "; ".join(problems) or None


def check_clocks(case: AttnCase) -> None:
    """:class:`CaseFailed` where a clock the timers read was replaced while ``case`` ran (:func:`clock_tampering`)."""
    tampered = clock_tampering()
    if tampered:
        raise CaseFailed(f"{case.id}: a clock the timers read was patched while it was measured: {tampered}. A back"
                         " end that patches clocks is not measured")


def _imported(name: str) -> Any:
    import sys

    return sys.modules.get(name)


# ---- inputs, outputs -------------------------------------------------------------------------------
def _digest(t: Any) -> tuple[int, int]:
    """The sum of a tensor's bit patterns, and of each chunk's sum times its place: exact (integers), the same
    on every read of unchanged memory, and changed by any zeroing, scaling or shuffle of chunks."""
    import torch

    flat = t.detach().reshape(-1)
    if flat.dtype.is_floating_point:  # (fp8 included)
        flat = flat.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()])
    total = placed = 0
    for i, start in enumerate(range(0, flat.numel(), DIGEST_CHUNK)):
        part = int(flat[start:start + DIGEST_CHUNK].sum(dtype=torch.int64))
        total += part
        placed += (i + 1) * part
    return total, placed


def _tensors(inputs: Inputs) -> dict[str, Any]:
    named = {"q": inputs.q, "k": inputs.k, "v": inputs.v, "dO": inputs.grad_out}
    return {name: t for name, t in named.items() if t is not None}


def input_digests(inputs: Inputs) -> dict[str, tuple[int, int]]:
    return {name: _digest(t) for name, t in _tensors(inputs).items()}


def written_inputs(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return [name for name in before if before[name] != after.get(name)]


def inputs_written_message(case: AttnCase, names: list[str], when: str) -> str:
    return (f"{case.id} writes its inputs: {', '.join(names)} changed during a call {when}. An attention call must"
            " leave q, k and v as they were: a back end that overwrites them (to make the next call's work lighter"
            " or the check pass) is not measured")


def shared_input(out: Any, inputs: Inputs) -> str | None:
    """The input (q, k, v) whose memory the output shares, or None."""
    if not hasattr(out, "untyped_storage"):
        return None
    mine = out.untyped_storage().data_ptr()
    return next((name for name, t in _tensors(inputs).items() if t.untyped_storage().data_ptr() == mine), None)


def shared_input_message(case: AttnCase, name: str) -> str:
    return (f"{case.id} returns an output that shares memory with its input {name}: a result must be a tensor of its"
            " own, not a view of what it was given")


def redraw(inputs: Inputs, case: AttnCase, seed: int) -> None:
    """New contents for q, k, v in place (same tensors, same addresses): a stored answer is wrong after it. A latent
    (MLA) case's values are its keys' first columns again: drawn apart, sdpa-loop read 0.722 off on an H200."""
    import torch

    gen = torch.Generator(device=inputs.q.device)
    gen.manual_seed(seed)
    with torch.no_grad():
        for t in (inputs.q, inputs.k, inputs.v):
            fresh = torch.randn(t.shape, generator=gen, device=t.device, dtype=torch.float32)
            t.copy_(fresh.to(torch_dtype(case.dtype)))
        if case.latent_kv:  # the values stay the key's first head_dim_v columns, as drawn (engine.inputs)
            inputs.v.copy_(inputs.k[..., : case.head_dim_v])


def _sync(device: DeviceInfo) -> None:
    if device.is_cuda:
        import torch

        torch.cuda.synchronize()


def _settle(started: set[threading.Thread], wait_s: float = 0.2) -> list[str]:
    """Wait for the threads started during the call, ``wait_s`` at most in all (a library's first call may start
    a pool of workers that never end: torch.compile's); their names."""
    deadline = time.monotonic() + wait_s
    for thread in started:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    return sorted(t.name for t in started)


def watched_call(forward: Callable[[], Any], inputs: Inputs, device: DeviceInfo, case: AttnCase,
                 when: str) -> tuple[Any, tuple[int, int]]:
    """``forward()``, watched: its output's digest the moment it returns, the device and the threads it started
    then waited for, and :class:`CaseFailed` where it wrote its inputs, returned a view of one, or its output
    changed after it returned. Returns the output and that digest."""
    before = input_digests(inputs)
    threads = set(threading.enumerate())
    out = forward()
    returned = _digest(out)  # as the call left it when it returned (on the current stream)
    late = _settle(set(threading.enumerate()) - threads)
    _sync(device)
    alias = shared_input(out, inputs)
    if alias:
        raise CaseFailed(shared_input_message(case, alias))
    written = written_inputs(before, input_digests(inputs))
    if written:
        raise CaseFailed(inputs_written_message(case, written, when))
    if returned != _digest(out):
        threads_said = f" (threads it started: {', '.join(late)})" if late else ""
        raise CaseFailed(f"{case.id}: its output changed after the call returned{threads_said}, {when}: work left"
                         " running (on a thread, a side stream, or deferred) that the timer did not wait for. The timed"
                         " call must have finished its work when it returns")
    return out, returned


# ---- the spot check ----------------------------------------------------------------------------------
@dataclass
class SpotCheck:
    """Spot checks of one case's call during sampling: :meth:`plan` the samples they come before, then call
    :meth:`before_sample` with each sample's index (outside the timed region)."""

    case: AttnCase
    forward: Callable[[], Any]  # the back end's call over ``inputs`` (the one the timed step makes)
    inputs: Inputs
    device: DeviceInfo
    layout: str
    last: tuple[int, int] | None = None  # the digest of the last output checked (the check before timing's first)
    at: frozenset[int] = frozenset()  # the sample indices a spot check comes before
    done: int = 0
    seconds: float = 0.0

    @property
    def keeps_inputs(self) -> bool:
        """The call reads a copy made when it was prepared (a KV cache): new contents do not reach it."""
        return getattr(self.forward, "cache", None) is not None

    def plan(self, min_samples: int, count: int = SPOT_CHECKS, rng: random.Random | None = None) -> SpotCheck:
        """``count`` distinct sample indices among the first ``min_samples`` (never the first: it follows the
        warm-up), drawn at random so that no call can know it is checked (see :func:`spot_count`)."""
        pick = rng or random.SystemRandom()
        choices = range(1, max(2, min_samples))
        return dataclasses.replace(self, at=frozenset(pick.sample(choices, min(count, len(choices)))))

    def before_sample(self, index: int) -> None:
        if index in self.at:
            t0 = time.perf_counter()
            self.check(seed=1000 + index)
            self.seconds += time.perf_counter() - t0
            self.done += 1

    def check(self, seed: int) -> None:
        """One spot check (see the module's docstring); raises :class:`CaseFailed` naming the trick."""
        import torch

        case = self.case
        check_clocks(case)
        if not self.keeps_inputs:
            redraw(self.inputs, case, seed)
        with torch.no_grad():
            out, returned = watched_call(self.forward, self.inputs, self.device, case, "at a spot check while sampled")
        self._check_result(out.detach(), returned)
        with torch.no_grad():
            out.detach().fill_(math.nan)
            again = self.forward()
        _sync(self.device)
        if bool(again.detach().isnan().all()):
            raise CaseFailed(f"{case.id}: after its output was overwritten with NaN, the next call returned that NaN:"
                             " it hands back a stored output instead of computing one")
        self.last = returned

    def _check_result(self, out: Any, digest: tuple[int, int]) -> None:
        case = self.case
        picked = sorted(random.SystemRandom().sample(range(case.batch), min(SPOT_SEQUENCES, case.batch)))
        rows = check_rows(case, self.inputs, out, self.layout, rows_per_sequence=SPOT_ROWS, seed=self.done + 1,
                          sequences=picked)
        if rows.ok:
            return
        if not self.keeps_inputs and (digest == self.last or self._hands_back(out)):
            raise CaseFailed(f"{case.id} returns a stored result: at a spot check during sampling its inputs were"
                             " given new contents and it returned the same output as before (the same values, or the"
                             " tensor it returned before, held by the check). Each call must compute"
                             " its output from its inputs")
        given = "its KV cache as prepared" if self.keeps_inputs else "its inputs given new contents in place"
        raise CaseFailed(f"{case.id} gives a wrong output at a spot check during sampling ({given}): max |out - ref| ="
                         f" {rows.max_error:.3g} at {rows.worst}, allowed {rows.allowed:.3g}. It passed the check"
                         " before timing: an output that depends on more than its inputs (a result kept from an"
                         " earlier call, work deferred to a later one) is not measured")

    def _hands_back(self, out: Any) -> bool:
        """Whether the next call returns ``out``'s very memory while ``out`` is still held (an honest call's
        allocator cannot): a stored output handed back, whatever was written into it since."""
        import torch

        try:
            with torch.no_grad():
                again = self.forward()
            _sync(self.device)
        except Exception:  # the wrong output is the failure to report, whatever a further call does
            return False
        return hasattr(again, "untyped_storage") and \
            again.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
