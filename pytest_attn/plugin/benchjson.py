"""Result records as pytest-benchmark's JSON: what a stored baseline holds (and, with several
processes, what the controller writes). The statistics come from pytest-benchmark's own ``Stats``, and
the machine and commit info from its own hooks, so the file reads like one pytest-benchmark wrote."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import pytest

from ..core.record import Record


def benchmark_entry(record: Record) -> dict[str, Any]:
    """One benchmark of pytest-benchmark's JSON, its rounds the record's samples (one call each)."""
    from pytest_benchmark.stats import Stats  # here: 10 ms to import, in every pytest session otherwise

    stats = Stats()
    for sample in record.timing.samples_s:
        stats.update(sample)
    name = record.test.split("::")[-1] if record.test else record.case.id
    return {
        "group": record.case.group, "name": name, "fullname": record.name, "params": {"case": record.case.id},
        "param": record.case.id, "extra_info": record.to_json(),
        "options": {"timer": "replay_clock", "disable_gc": False, "warmup": False},
        "stats": {**stats.as_dict(), "iterations": 1},
    }


def benchmark_metadata(record: Record) -> Any:
    """One result as pytest-benchmark holds it in its session (``pytest_benchmark.stats.Metadata``), for
    a controller whose workers measured: its JSON, saves and comparisons then include it."""
    from types import SimpleNamespace

    from pytest_benchmark.stats import Metadata

    entry = benchmark_entry(record)
    fixture = SimpleNamespace(name=entry["name"], fullname=entry["fullname"], group=entry["group"],
                              param=entry["param"], params=entry["params"], extra_info=entry["extra_info"],
                              cprofile_stats=None, has_error=False)
    metadata = Metadata(fixture, iterations=1, options=dict(entry["options"]))
    for sample in record.timing.samples_s:
        metadata.update(sample)
    return metadata


def run_json(records: Sequence[Record], config: pytest.Config) -> dict[str, Any]:
    """A whole run, as ``--benchmark-json`` writes one."""
    machine_info = config.hook.pytest_benchmark_generate_machine_info(config=config)
    config.hook.pytest_benchmark_update_machine_info(config=config, machine_info=machine_info)
    return {
        "machine_info": machine_info,
        "commit_info": config.hook.pytest_benchmark_generate_commit_info(config=config),
        "benchmarks": [benchmark_entry(r) for r in records],
        "datetime": datetime.now(timezone.utc).isoformat(),
        "version": _pytest_benchmark_version(),
    }


def _pytest_benchmark_version() -> str:
    import pytest_benchmark

    return str(pytest_benchmark.__version__)
