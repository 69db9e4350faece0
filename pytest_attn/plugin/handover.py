"""The hand-over between pytest-xdist's workers and their controller: both ends of the channel, and every key
on it, in one place.

**Controller -> worker** (``workerinput``, when the worker starts): :data:`GPUS`, the run's GPUs in order.

**Worker -> controller, in each test report** (``user_properties``, JSON text: it crosses processes as it is),
by :func:`send`: :data:`RECORD` (a result record), :data:`SKIP` (why a case was skipped), :data:`FAILED`
(the back end of a case that failed), :data:`AB_RESULT` (a
paired A/B case's outcome) and :data:`AB_ARMS` (what each of its arms runs).

**Worker -> controller, at its end** (``workeroutput``), by :func:`send_at_end`: :data:`SESSION_LINES` (its
session lines: where it ran, ceilings, compile phase, notes, its shard) and :data:`FUZZ_REACH` (its fuzz reach).

On the controller, :class:`Collector` (registered where workers are started) takes each report's items into the
session, and :func:`pytest_testnodedown` a finished worker's output.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ..core.record import Record
from ..verdicts.ab.paired import AbResult
from .session import AB_HANDED, AB_WORKER_LINES, ATTN_SESSION, FUZZ_REACH, SHARD

GPUS = "pytest_attn_gpus"
RECORD = "pytest_attn_record"
SKIP = "pytest_attn_skip"
FAILED = "pytest_attn_failed"
AB_RESULT = "pytest_attn_ab"
AB_ARMS = "pytest_attn_ab_arms"
SESSION_LINES = "pytest_attn"
FUZZ_REACH_OUTPUT = "pytest_attn_fuzz_reach"  # [back end, direction, Reach JSON] each


def send(request: pytest.FixtureRequest, key: str, value: Any) -> None:
    """A worker: ``value`` to the controller in this test's report (``key`` one of the per-report keys)."""
    request.node.user_properties.append((key, value if isinstance(value, str) else json.dumps(value)))


def send_at_end(config: pytest.Config, key: str, value: Any) -> None:
    """A worker: ``value`` to the controller when the worker finishes."""
    config.workeroutput[key] = value  # type: ignore[attr-defined]


class Collector:
    """On the controller: each worker report's items into this session (records, skips, A/B outcomes)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        attn = self.config.stash.get(ATTN_SESSION, None)
        for key, value in report.user_properties:
            if not isinstance(value, str):
                continue
            if key == RECORD and report.when == "call" and attn is not None:
                attn.results.take(Record.from_json(json.loads(value)))
            elif key == SKIP and report.skipped and attn is not None:
                attn.results.skipped(value)
            elif key == FAILED and report.failed and attn is not None:
                attn.results.failed(value)
            elif key == AB_RESULT and report.when == "call":
                self.config.stash.setdefault(AB_HANDED, []).append(AbResult.from_json(json.loads(value)))
            elif key == AB_ARMS and report.when == "call":  # every worker's (the same arms, on its own GPU)
                held = self.config.stash.setdefault(AB_WORKER_LINES, [])
                held.extend(line for line in json.loads(value) if line not in held)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the controller, a worker that finished: its session lines (and shard) and its fuzz reach."""
    output = getattr(node, "workeroutput", {})
    config = node.config
    attn = config.stash.get(ATTN_SESSION, None)
    lines = output.get(SESSION_LINES)
    if attn is not None and lines:
        attn.results.notes.extend(f"{lines['where']}: {line}" for line in lines["lines"] + lines["notes"])
        if lines.get("shard"):  # the workers collected (and sharded); the controller writes the JSON
            config.stash[SHARD] = lines["shard"]
    reach = output.get(FUZZ_REACH_OUTPUT)
    if reach:
        from ..fuzz.fuzzer import Reach  # (Hypothesis: only where a fuzz suite ran)

        held = config.stash.setdefault(FUZZ_REACH, {})
        for name, direction, data in reach:
            held[(name, direction)] = Reach.from_json(data)
