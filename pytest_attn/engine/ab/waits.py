"""How long the controller waits for an arm's answer before it stops the arm. Pure.

An arm that freezes (a kernel that never returns, a deadlocked library, a process stopped) would hold the run
until something outside killed it; one that is waited for too briefly is killed while working. So every wait
has a bound from what the case has shown so far, never under a floor (``--attn-ab-arm-timeout``, 300 s by
default):

* starting an arm (hello: imports, the GPU, the clock probe) and a case's first set-up in each arm's first
  replica (A1, B1: inputs, the check, warm-up -- and compiling, JIT or autotuning, with nothing of the case
  known yet): :data:`START_TIMES` x the floor (30 min by default, the bound a set-up had before), and never
  under the default floor whatever the floor given;
* any other set-up (a second replica, whose kernels its arm's first replica compiled; a new place):
  :data:`SETUP_TIMES` x the case's longest set-up so far;
* a block: :data:`BLOCK_TIMES` x what it should take (its samples x the time per sample the last block took,
  the first from the warm-up's estimate), and at least the case's longest set-up so far (a first traced block
  starts the profiler);
* handing samples over, the record (a few profiled calls), releasing the case: :data:`SETUP_TIMES` x the
  longest set-up so far.

Past its bound the arm is killed and the case fails naming it (:mod:`.processes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .messages import Prepare, Request

#: ``--attn-ab-arm-timeout``'s default: the least time any wait on an arm is given (seconds).
FLOOR_S = 300.0
#: hello, and a case's first set-up in A1 and B1 (they may compile): this many floors.
START_TIMES = 6
#: any later set-up, hand-over, record or release: this many times the case's longest set-up so far.
SETUP_TIMES = 4
#: a block: this many times what it should take.
BLOCK_TIMES = 10


@dataclass(frozen=True)
class ArmWaits:
    """The bounds of the waits on an arm; ``floor_s`` is ``--attn-ab-arm-timeout``."""

    floor_s: float = FLOOR_S

    def __post_init__(self) -> None:
        if not self.floor_s > 0:
            raise ValueError(f"floor_s={self.floor_s!r}: an arm must be given a positive time to answer")

    def start_s(self) -> float:
        """hello, and a case's first set-up in an arm's first replica: never under the default floor, whatever
        this one (a short floor catches a frozen block sooner; a cold start still imports and compiles)."""
        return max(START_TIMES * self.floor_s, FLOOR_S)

    def setup_s(self, longest_setup_s: float) -> float:
        """A set-up after the first of its arm's (a second replica's, a new place's)."""
        return max(self.floor_s, SETUP_TIMES * longest_setup_s)

    def block_s(self, expected_s: float, longest_setup_s: float) -> float:
        """A block that should take ``expected_s``."""
        return max(self.floor_s, BLOCK_TIMES * expected_s, longest_setup_s)

    def after_s(self, longest_setup_s: float) -> float:
        """Handing samples over, building the record, releasing the case."""
        return max(self.floor_s, SETUP_TIMES * longest_setup_s)


#: the bounds at the default floor
DEFAULT_WAITS = ArmWaits()


@dataclass
class CaseWaits:
    """One case's waits: the bounds, from the longest set-up the case has taken so far (:meth:`took`)."""

    waits: ArmWaits
    longest_setup_s: float = 0.0

    def took(self, setup_s: float) -> None:
        self.longest_setup_s = max(self.longest_setup_s, setup_s)

    def setup(self, first: bool) -> float:
        """A set-up: ``first`` is the first of its arm for this case (A1's, B1's)."""
        return self.waits.start_s() if first else self.waits.setup_s(self.longest_setup_s)

    def block(self, expected_s: float) -> float:
        return self.waits.block_s(expected_s, self.longest_setup_s)

    def after(self) -> float:
        return self.waits.after_s(self.longest_setup_s)


def doing(request: Request) -> str:
    """What an arm is doing while it answers ``request``, in words (for the error that names a frozen arm)."""
    if isinstance(request, Prepare):
        if request.replace:
            return "setting the case up again at a new place"
        return "setting the case up (inputs, " + ("the check against the reference, " if request.check else "") \
            + "warm-up, the timer)"
    return {"hello": "starting (imports, the GPU, the clock probe)",
            "block": f"taking a block of {getattr(request, 'samples', '?')} sample(s)",
            "hand_over": "handing its samples over", "finish": "building its record",
            "release": "releasing the case"}.get(request.op, request.op)
