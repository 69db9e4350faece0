"""The :class:`Fuzzer` the suite's property drives: what each back end is fuzzed with, one Hypothesis run
per relation of lengths, the reach of each; one example end to end is :mod:`.example`.

It knows nothing of pytest: a back end that cannot be fuzzed here makes :meth:`Fuzzer.check` return a
:class:`Refused`, which the plugin turns into a skip.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import note, reject
from hypothesis import strategies as st

from ..backends.base import Registry, Unsupported, case_refusal
from ..core.device import DeviceInfo
from .example import FuzzFailure, failure_message, replay_command, run_example
from .ledger import known_failure
from .space import probe_space
from .strategies import Space, attn_cases


@dataclass(frozen=True)
class Refused:
    """Why a back end cannot be fuzzed here (no GPU, not installed, no backward, no small case)."""

    reason: str


#: Examples per relation a target must have run before a relation with none fails the run (below it,
#: a relation missing from a handful of examples is chance, not a lost capability).
JUDGE_PER_RELATION = 5


@dataclass
class Reach:
    """What one back end and direction was fuzzed with: examples run and refused per relation, their
    time, and -- for a back end that compiles kernels on first use and can count them
    (``compiled_kernels()``) -- how many kernels the examples compiled and how long the examples that
    compiled one took."""

    relations: tuple[str, ...]  # the relations its probe found it takes
    ran: Counter[str] = field(default_factory=Counter)
    #: relations whose own property (:meth:`Fuzzer.run`) ran its full share of examples: one of these
    #: that no example ran is missing whatever the total
    judged: set[str] = field(default_factory=set)
    failed: bool = False  # a property found a wrong result: the reach of its strategy is not the news
    refused: Counter[str] = field(default_factory=Counter)  # drawn, then refused by the back end
    seconds: float = 0.0  # every example's call(s) and check
    compiled: int | None = None  # kernels compiled (None: the back end cannot say)
    compiling_s: float = 0.0  # of ``seconds``, the examples that compiled a kernel

    def timed(self, seconds: float, compiled: int | None) -> None:
        """Count one example's time, and the kernels it compiled (None: unknown)."""
        self.seconds += seconds
        if compiled is not None:
            self.compiled = (self.compiled or 0) + compiled
            if compiled:
                self.compiling_s += seconds

    @property
    def total(self) -> int:
        return sum(self.ran.values())

    def missing(self) -> tuple[str, ...]:
        """Relations the back end takes that no example ran -- judged once enough examples ran for a
        missing one to mean something (:data:`JUDGE_PER_RELATION` per relation, or the relation's own
        property run to the end), else none; none either once a property failed (the failure is the news,
        and the examples it cut short say nothing of the strategy)."""
        if self.failed:
            return ()
        if self.judged:
            return tuple(r for r in self.relations if r in self.judged and not self.ran[r])
        if self.total < JUDGE_PER_RELATION * len(self.relations):
            return ()
        return tuple(r for r in self.relations if not self.ran[r])

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (a pytest-xdist worker hands its reach to the controller this way)."""
        return {"relations": list(self.relations), "ran": dict(self.ran), "judged": sorted(self.judged),
                "failed": self.failed, "refused": dict(self.refused), "seconds": self.seconds,
                "compiled": self.compiled, "compiling_s": self.compiling_s}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reach:
        return cls(tuple(data["relations"]), Counter(data["ran"]), set(data["judged"]), bool(data["failed"]),
                   Counter(data["refused"]), float(data["seconds"]), data["compiled"], float(data["compiling_s"]))

    def describe(self) -> str:
        parts = [f"{r} {self.ran[r]}" + (f" ({self.refused[r]} refused)" if self.refused[r] else "")
                 for r in self.relations]
        text = f"{self.total} ran: " + ", ".join(parts)
        if self.compiled:
            text += (f"; {self.compiled} kernel(s) compiled or loaded from a disk cache, the examples that"
                     f" needed one took {self.compiling_s:.1f} s of {self.seconds:.1f} s")
        elif self.total:
            text += f"; {self.seconds:.1f} s"
        return text


class Fuzzer:
    """Runs the fuzz property for one back end and direction (used by the ``attn_fuzzer`` fixture)."""

    def __init__(self, registry: Registry, device: DeviceInfo, *, dtypes: tuple[str, ...] | None = None,
                 head_dims: tuple[int, ...] | None = None) -> None:
        self.registry, self.device = registry, device
        self.dtypes, self.head_dims = dtypes, head_dims
        self._spaces: dict[tuple[str, str], Space | str] = {}
        self.reach: dict[tuple[str, str], Reach] = {}  # per (back end, direction) that could be fuzzed

    def space(self, name: str, direction: str) -> Space | str:
        key = (name, direction)
        if key not in self._spaces:
            space = probe_space(self.registry.get(name), self.device, direction, dtypes=self.dtypes,
                                head_dims=self.head_dims)
            self._spaces[key] = space
            if not isinstance(space, str):
                self.reach[key] = Reach(tuple(space.relation_kinds()))
        return self._spaces[key]

    def run(self, name: str, direction: str, parent: Any = None) -> Refused | None:
        """The fuzz property for one back end and direction: one Hypothesis run per relation of lengths it
        takes, each with its share of the profile's examples (``parent``: the settings to start from,
        by default the loaded profile's), so every relation is fuzzed whatever Hypothesis' draws favour --
        one property drawing the relation first left chunked prefill out of 67 FA4 examples on an H200.
        Raises AssertionError with the report on a wrong result; a relation whose every drawn case the
        back end refuses ends its run quietly, and the reach check names it."""
        from hypothesis import given, settings
        from hypothesis.errors import Unsatisfiable

        space = self.space(name, direction)
        if isinstance(space, str):
            return Refused(space)
        reach = self.reach[(name, direction)]
        base = parent if parent is not None else settings.default
        assert base is not None  # a profile is always loaded
        share = max(1, -(-base.max_examples // len(reach.relations)))
        for relation in reach.relations:
            test = settings(base, max_examples=share)(given(data=st.data())(self._property(name, direction, relation)))
            # one example database entry per back end, direction and relation (Hypothesis' pytest plugin
            # does the same for parametrized tests)
            test.hypothesis.inner_test._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
                f"pytest-attn fuzz {name} {direction} {relation}".encode())
            with contextlib.suppress(Unsatisfiable):  # every drawn case refused: reach.missing() says so
                test()
            if share >= JUDGE_PER_RELATION:
                reach.judged.add(relation)
        return None

    def _property(self, name: str, direction: str, relation: str) -> Any:
        def prop(data: Any) -> None:
            self.check(name, direction, data, relation=relation)

        return prop

    def check(self, name: str, direction: str, data: Any, relation: str | None = None) -> Refused | None:
        """One example: draw a case (of ``relation``, else of a relation drawn first), run it, raise
        AssertionError with the report when it is wrong. Cases the back end refuses, or that the
        known-failure ledger covers, are rejected (and counted per relation); a back end that cannot be
        fuzzed here at all gives a :class:`Refused`."""
        space = self.space(name, direction)
        if isinstance(space, str):
            return Refused(space)
        backend = self.registry.get(name)
        reach = self.reach[(name, direction)]
        if relation is None:
            relation = data.draw(st.sampled_from(reach.relations), label="relation")
        case = data.draw(attn_cases(backend=name, space=space, direction=direction, relations=(relation,)),
                         label="case")
        seed = data.draw(st.integers(0, 2**16 - 1), label="seed")
        note(f"replay: {replay_command(case, seed, self.registry.origin(name))}")
        if known_failure(case) is not None:
            reject()
        if case_refusal(backend, case, self.device) is not None:
            reach.refused[relation] += 1
            reject()
        counter = getattr(backend, "compiled_kernels", None)
        before = counter() if counter is not None else None
        start = time.perf_counter()
        try:
            check = run_example(case, backend, self.device, seed)
        except Unsupported:
            reach.refused[relation] += 1
            reject()
        after = counter() if counter is not None else None
        reach.ran[relation] += 1
        reach.timed(time.perf_counter() - start, after - before if before is not None and after is not None else None)
        if not check.ok:
            reach.failed = True
            raise FuzzFailure(failure_message(case, seed, check, self.registry.origin(name)))
        return None
