"""Identical calls folded into one record: a count, the order of first appearance, the call sites."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..core.workload import Call, Workload, WorkloadRecord


@dataclass
class _Entry:
    order: int
    count: int = 0
    sites: dict[str, None] = field(default_factory=dict)


class Recorder:
    def __init__(self) -> None:
        self._entries: dict[Call, _Entry] = {}
        self._lock = threading.Lock()

    def add(self, call: Call, site: str) -> None:
        with self._lock:
            entry = self._entries.get(call)
            if entry is None:
                entry = self._entries[call] = _Entry(len(self._entries))
            entry.count += 1
            entry.sites.setdefault(site)

    @property
    def calls(self) -> int:
        return sum(e.count for e in self._entries.values())

    def workload(self, name: str, source: str = "") -> Workload:
        records = tuple(WorkloadRecord(call, e.count, e.order, tuple(e.sites)) for call, e in self._entries.items())
        return Workload(name, tuple(sorted(records, key=lambda r: r.order)), source)
