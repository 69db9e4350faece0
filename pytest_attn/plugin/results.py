"""The session's results: each case's record (and the pytest-benchmark ``extra_info`` it is written to), the
cases skipped, and the session-level notes for the summary -- kept and changed only through these methods, by
the fixture (:mod:`.bench`), the worker hand-over (:mod:`.handover`) and the gate (:mod:`.gate`)."""

from __future__ import annotations

from typing import Any

from ..core.record import Record


class Results:
    """What one pytest session measured, skipped and has to say."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.skips: list[str] = []
        self.failures: list[str] = []  # the back end of each case that failed (a wrong result, a failing call)
        self.notes: list[str] = []  # session-level lines for the summary
        self._extra_infos: dict[str, dict[str, Any]] = {}  # by record name: the benchmark's extra_info

    def add(self, record: Record, extra_info: dict[str, Any]) -> None:
        """Keep a result, and the benchmark's ``extra_info`` it is written to (see :meth:`update`)."""
        self.records.append(record)
        self._extra_infos[record.name] = extra_info
        extra_info.clear()
        extra_info.update(record.to_json())

    def take(self, record: Record) -> None:
        """Keep a result measured elsewhere (a pytest-xdist worker's, on the controller; or a worker's own, whose
        pytest-benchmark is off): once per name."""
        if record.name not in {r.name for r in self.records}:
            self.records.append(record)

    def skipped(self, reason: str) -> None:
        """A case skipped, for the summary: the first line of its reason."""
        self.skips.append(reason.splitlines()[0] if reason else reason)

    def failed(self, backend: str) -> None:
        """A case of ``backend`` failed, for the summary's line of the back ends that ran."""
        self.failures.append(backend)

    def note(self, line: str) -> None:
        """A line for the summary's notes."""
        self.notes.append(line)

    def update(self, record: Record) -> None:
        """Replace a kept result (e.g. with its peers, known at the end) and rewrite its ``extra_info``."""
        self.records = [record if r.name == record.name else r for r in self.records]
        info = self._extra_infos.get(record.name)
        if info is not None:
            kept = {k: info[k] for k in ("attn_ab",) if k in info}  # an A/B outcome (plugin.ab) stays
            info.clear()
            info.update(record.to_json(), **kept)
