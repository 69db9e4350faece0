"""What the controller and an arm's worker say to each other: one typed record per request and per answer, the
only place their fields are spelled. On the wire each is one JSON line (:func:`to_line`, :func:`request_of`,
:func:`answer_of`); a request's ``op`` names it, and each request has its answer type (:data:`ANSWERS`).

* :class:`Hello` -> :class:`HelloAnswer`: the run's settings, the slowdown and the files that register back
  ends; the worker's interpreter, pytest-attn, library versions (and the folder each was found in), device,
  and the ``CUDA_VISIBLE_DEVICES`` it was started with;
* :class:`Prepare` -> :class:`PrepareAnswer`: a case (its JSON form), the timer to use (``pin``: A1's, so every
  replica times alike; None for A1), whether to check it against the reference (a second replica does not);
  the timer chosen, or why the case is skipped or failed;
* :class:`Block` -> :class:`BlockAnswer`: N samples (one thrown away first where ``warm``), each with NVML's
  SM clock, and the block's mean SM clock read on the GPU (None where the probe cannot run);
* :class:`HandOver` -> :class:`Handed`: a second replica's samples, the case released;
* :class:`Finish` -> :class:`Finished`: the arm's record (JSON) over its samples and those handed over;
* :class:`Release` -> :class:`Released`: the case dropped unmeasured. ``bye`` ends the worker.

An answer the worker could not give is ``{"error": ..., "op": ...}`` on the wire: :class:`WorkerError`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

#: Both ends must speak it: an arm whose environment holds another pytest-attn says so at hello.
PROTOCOL = 3

A = TypeVar("A", covariant=True)


class Asking(Generic[A]):
    """A request whose answer is an ``A``: what :meth:`Asks.ask` returns for it."""

    op: ClassVar[str]


@dataclass(frozen=True)
class Hello(Asking["HelloAnswer"]):
    op: ClassVar[str] = "hello"
    settings: dict[str, Any] = field(default_factory=dict)
    backends_from: list[str] = field(default_factory=list)
    slowdown: float | None = None


@dataclass(frozen=True)
class HelloAnswer:
    protocol: int = 0
    clock: str = ""  # how the blocks' SM clock is read ("no GPU", or what the probe says)
    python: str = ""
    pytest_attn: str = ""  # the folder of the pytest-attn it runs
    versions: dict[str, str] = field(default_factory=dict)
    places: dict[str, str] = field(default_factory=dict)  # the folder each library was found in
    device: str = ""
    uuid: str | None = None
    pid: int = 0
    visible: str | None = None  # CUDA_VISIBLE_DEVICES as the worker saw it (None: unset, or an older worker)


@dataclass(frozen=True)
class Prepare(Asking["PrepareAnswer"]):
    op: ClassVar[str] = "prepare"
    case: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    pin: dict[str, Any] | None = None  # timer, calls_per_sample, input_sets
    check: bool = True
    #: set the case up again at a new place: the old set-up is held until the new one is made, the samples kept
    replace: bool = False


#: How a replica's skip begins where a new set-up does not fit beside its old one (it keeps the old one)
NO_ROOM = "no room for a new place"


@dataclass(frozen=True)
class PrepareAnswer:
    ok: bool = False
    skip: str = ""
    fail: str = ""
    timer: str = ""
    input_sets: int = 1
    calls_per_sample: int = 1
    estimate_s: float = 0.0
    plan: str = ""
    check: str = ""

    def pin(self) -> dict[str, Any]:
        """What every other replica is to time the case with: this one's timer, calls and input sets."""
        return {"timer": self.timer, "calls_per_sample": self.calls_per_sample, "input_sets": self.input_sets}


@dataclass(frozen=True)
class Block(Asking["BlockAnswer"]):
    op: ClassVar[str] = "block"
    samples: int = 1
    warm: bool = True


@dataclass(frozen=True)
class BlockAnswer:
    times: list[float] = field(default_factory=list)
    clocks: list[int | None] = field(default_factory=list)  # NVML's SM clock at each sample
    wall_s: float = 0.0
    mean_mhz: float | None = None  # the block's mean SM clock, read on the GPU


@dataclass(frozen=True)
class HandOver(Asking["Handed"]):
    op: ClassVar[str] = "hand_over"


@dataclass(frozen=True)
class Handed:
    samples_s: list[float] = field(default_factory=list)
    clocks: list[int | None] = field(default_factory=list)
    reasons: list[int | None] = field(default_factory=list)
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class Finish(Asking["Finished"]):
    op: ClassVar[str] = "finish"
    stop: str = "pairs"
    diagnose: bool = True
    more: list[Handed] = field(default_factory=list)  # the arm's other replicas' samples


@dataclass(frozen=True)
class Finished:
    record: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Release(Asking["Released"]):
    op: ClassVar[str] = "release"


@dataclass(frozen=True)
class Released:
    ok: bool = True


Request = Hello | Prepare | Block | HandOver | Finish | Release
Answer = HelloAnswer | PrepareAnswer | BlockAnswer | Handed | Finished | Released


class Asks(Protocol):
    """An arm's replica: :class:`~.processes.ArmProcess`, or a test's fake on a fake clock."""

    label: str

    def ask(self, request: Asking[A], within_s: float | None = None) -> A:
        """The answer to ``request``; an arm's process is given ``within_s`` seconds (:mod:`.waits`)."""
        ...


ANSWERS: dict[type, type] = {Hello: HelloAnswer, Prepare: PrepareAnswer, Block: BlockAnswer, HandOver: Handed,
                             Finish: Finished, Release: Released}
REQUESTS: dict[str, type] = {kind.op: kind for kind in ANSWERS}  # type: ignore[attr-defined]
BYE = '{"op": "bye"}'
#: The environment variable that names, comma-separated, the back ends whose libraries a worker imports as it
#: starts, before its first request (:meth:`~pytest_attn.engine.ab.processes.ArmProcess.spawn`).
PRELOAD_ENV = "PYTEST_ATTN_ARM_PRELOAD"
#: The environment variable that gives a worker its controller's torch CPU thread count in a run without a GPU
#: (engine.threads says why a CPU run uses half the cores): the arms ran with torch's default, a thread per core in
#: each of four processes (docs/ab.md, "On a CPU it is not a gate").
THREADS_ENV = "PYTEST_ATTN_ARM_CPU_THREADS"


class WorkerError(Exception):
    """The worker answered a request with an error (it stays up; the case fails)."""


def to_line(message: Request | Answer) -> str:
    """One JSON line; a request carries its ``op``."""
    data = dataclasses.asdict(message)
    op = getattr(type(message), "op", None)
    return json.dumps({"op": op, **data} if op else data)


def request_of(line: str) -> Request | None:
    """The request a line holds; None for ``bye``. Raises ValueError for an unknown ``op``."""
    data = json.loads(line)
    op = data.pop("op", None)
    if op == "bye":
        return None
    kind = REQUESTS.get(op)
    if kind is None:
        raise ValueError(f"no request {op!r}: this worker knows {', '.join(REQUESTS)}")
    if kind is Finish:
        data["more"] = [Handed(**m) for m in data.get("more", [])]
    return _known(kind, data)  # type: ignore[no-any-return]


def answer_of(request: Request, line: str) -> Answer:
    """The answer to ``request`` a line holds. Raises :class:`WorkerError` where the worker answered an error."""
    data = json.loads(line)
    if "error" in data:
        raise WorkerError(str(data["error"]))
    return _known(ANSWERS[type(request)], data)  # type: ignore[no-any-return]


def _known(kind: type, data: dict[str, Any]) -> Any:
    """``kind`` from the fields it has (a newer peer's extra fields are left out)."""
    names = {f.name for f in dataclasses.fields(kind)}
    return kind(**{k: v for k, v in data.items() if k in names})
