"""Stored baselines (pytest_attn.verdicts.baseline): atomic saves, the refusal to replace another GPU's
baseline, and corrupt files named and never overwritten."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import pytest

from pytest_attn.core.device import DeviceInfo
from pytest_attn.verdicts.baseline import BaselineError, load_baseline, save_baseline, stored_fingerprint
from pytest_attn.verdicts.fingerprint import Fingerprint, fingerprint_of

RECORDED = Path(__file__).parent / "data" / "h200_smoke_subset.json"
H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="2.11.0+cu130", sm_count=132,
                  total_memory_bytes=140 << 30, driver="580.159.04", cuda_version="13.0", power_limit_w=700.0)


@pytest.fixture
def run():
    return json.loads(RECORDED.read_text())


def test_save_is_atomic_and_refuses_another_gpu(tmp_path, run, monkeypatch):
    path = tmp_path / "nvidia-h200" / "baseline.json"
    fp = fingerprint_of(H200)
    assert "saved 4 results as the baseline for NVIDIA H200" in save_baseline(path, run, fp)
    assert stored_fingerprint(load_baseline(path)) == fp
    h100 = Fingerprint("NVIDIA H100 80GB HBM3", 132, 80)
    before = path.read_text()
    with pytest.raises(BaselineError, match=r"was recorded on another device \(gpu: NVIDIA H200 \(baseline\) ->"
                                            r" NVIDIA H100 80GB HBM3 \(this run\).*not replaced\. Pass --attn-force"):
        save_baseline(path, run, h100)
    assert path.read_text() == before
    assert "replacing the previous one" in save_baseline(path, run, h100, force=True)
    assert stored_fingerprint(load_baseline(path)) == h100

    def broken_replace(src, dst):  # a crash between writing and renaming leaves the old file whole
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(BaselineError, match=r"cannot write .*baseline.json \(No space left on device\); the baseline"
                                            " there is as it was. Free space"):
        save_baseline(path, run, h100)
    assert stored_fingerprint(load_baseline(path)) == h100
    left = sorted(p.name for p in path.parent.iterdir() if p.suffix != ".lock")
    assert left == ["baseline.json"]  # no temporary file left


@pytest.mark.parametrize(("content", "message"), [
    ('{"benchmarks": [', r"is not valid JSON \(line 1, column 17"),
    ("", "is empty: the run that was to write it did not reach its end .* pytest-attn recover"),
    ('{"machine_info": {}}', "has no 'benchmarks' list"),
    ('{"benchmarks": [{"name": "x", "stats": {"median": 0}}]}', "'x' has stats.median 0, not a finite positive"),
    ('{"benchmarks": [{"name": "x", "stats": {"median": true}}]}', "'x' has stats.median True, not a finite"),
    ('{"benchmarks": [{"name": "x", "stats": {"median": Infinity}}]}', "holds Infinity, which is not a JSON number"),
    ('{"benchmarks": [{"name": "x", "stats": {"median": NaN}}]}', "holds NaN, which is not a JSON number"),
    ('{"benchmarks": [{"name": "x", "stats": {"median": "1e-3"}}]}', "'x' has stats.median '1e-3'"),
    ('{"benchmarks": [{"stats": {"median": 1}}]}', "benchmark #0 has no name"),
    ('{"benchmarks": []}', "holds no benchmarks"),
    ('{"benchmarks": [{"name": "x", "stats": {"median": 1}}], "machine_info": {"attn_fingerprint": {"gpu": ""}}}',
     r"its fingerprint is unusable \(a fingerprint needs a non-empty 'gpu' entry"),
    ('{"benchmarks": [{"name": "x", "stats": {"median": 1}, "extra_info": {"schema": "pytest-attn.record",'
     ' "version": 99}}]}', "'x' has an unreadable result record \\(record version 99 is newer"),
])
def test_corrupt_baselines_are_named_and_never_overwritten(tmp_path, run, content, message):
    path = tmp_path / "baseline.json"
    path.write_text(content)
    with pytest.raises(BaselineError, match=message) as info:
        load_baseline(path)
    assert str(path) in str(info.value)
    with pytest.raises(BaselineError, match="Not overwritten; pass --attn-force"):
        save_baseline(path, run, fingerprint_of(H200))
    assert path.read_text() == content
    with pytest.raises(BaselineError, match="cannot be read"):
        load_baseline(tmp_path / "missing.json")


def test_a_run_with_a_bad_number_is_not_saved(tmp_path, run):
    run["benchmarks"][0]["stats"]["median"] = float("inf")
    with pytest.raises(BaselineError, match="not a finite positive number"):
        save_baseline(tmp_path / "baseline.json", run, fingerprint_of(H200))
    assert not (tmp_path / "baseline.json").exists()
    with pytest.raises(BaselineError, match="needs a non-empty 'gpu' entry"):
        save_baseline(tmp_path / "baseline.json", json.loads(RECORDED.read_text()), Fingerprint(""))


def _save_as(path: str, gpu: str, start, results) -> None:
    start.wait()
    try:
        save_baseline(Path(path), json.loads(RECORDED.read_text()), Fingerprint(gpu, 132, 140))
        results.put(("saved", gpu))
    except BaselineError as exc:
        results.put(("refused", str(exc)))


def test_two_processes_saving_at_once_cannot_both_pass_the_overwrite_rule(tmp_path):
    """Without the lock both read "no baseline yet" and the last writer won (40 of 40 trials)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for trial in range(8):
        path = tmp_path / f"t{trial}" / "baseline.json"
        start, results = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_save_as, args=(str(path), gpu, start, results))
                 for gpu in ("NVIDIA H200", "NVIDIA B200")]
        for p in procs:
            p.start()
        for p in procs:
            p.join(600)  # a guard against a hung process, not a bound
        outcomes = sorted(results.get(timeout=600) for _ in procs)
        assert [o[0] for o in outcomes] == ["refused", "saved"], outcomes
        assert "was recorded on another device" in outcomes[0][1]
        winner = outcomes[1][1]
        assert stored_fingerprint(load_baseline(path)).gpu == winner


def _record_run(scale: float = 1.0, clock: int | None = 1980) -> dict:
    from factories import record

    from pytest_attn.plugin.benchjson import benchmark_entry

    records = [record(b, m * scale, test=f"suites/test_prefill.py::test_prefill[{b}]",
                      clocks=(clock,) if clock else ())
               for b, m in (("flash-attn", 1e-3), ("sdpa-cudnn", 2e-3))]
    return {"machine_info": {}, "benchmarks": [benchmark_entry(r) for r in records]}


def test_add_repeat_keeps_each_runs_median_and_gates_on_their_median(tmp_path):
    from pytest_attn.verdicts.runs import benches

    path = tmp_path / "baseline.json"
    save_baseline(path, _record_run(), fingerprint_of(H200))
    assert save_baseline(path, _record_run(1.1), fingerprint_of(H200), add=True).endswith("(a repeat added to 2 cases)")
    assert save_baseline(path, _record_run(1.1), fingerprint_of(H200), add=True).endswith("(a repeat added to 2 cases)")
    stored = benches(load_baseline(path))
    first = {"flash-attn": 1e-3, "sdpa-cudnn": 2e-3}
    for bench in stored.values():
        m = first[bench.backend]
        assert bench.repeats_s == pytest.approx((m, m * 1.1, m * 1.1))
        assert bench.median_s == pytest.approx(m * 1.1)
    with pytest.raises(BaselineError, match=r"no baseline at .* to add a repeat to"):
        save_baseline(tmp_path / "none.json", _record_run(), fingerprint_of(H200), add=True)
    with pytest.raises(BaselineError, match="recorded on another device"):
        save_baseline(path, _record_run(), Fingerprint("NVIDIA B200", 148, 180), add=True)


def test_each_repeat_keeps_its_clock_and_cycles_pair_each_repeats_time_with_its_own(tmp_path):
    """Three repeats, 1.0 ms at 1980 MHz and twice 1.1 ms at 1800 MHz (the same cycles): the baseline's
    clock is the repeats' median and its cycles 1.98e6 -- not the median time x the last clock."""
    from pytest_attn.verdicts.runs import benches

    path = tmp_path / "baseline.json"
    save_baseline(path, _record_run(1.0, 1980), fingerprint_of(H200))
    save_baseline(path, _record_run(1.1, 1800), fingerprint_of(H200), add=True)
    save_baseline(path, _record_run(1.1, 1800), fingerprint_of(H200), add=True)
    fa = benches(load_baseline(path))["suites/test_prefill.py::test_prefill[flash-attn]"]
    assert fa.record is not None and fa.record.clocks.repeats_sm_clock_mhz == (1980, 1800, 1800)
    assert fa.sm_clock_mhz == 1800 and fa.cycles == pytest.approx(1.98e6)
    save_baseline(path, _record_run(1.0, None), fingerprint_of(H200), add=True)  # a repeat without a clock
    fa = benches(load_baseline(path))["suites/test_prefill.py::test_prefill[flash-attn]"]
    assert fa.repeats_clock_mhz == () and len(fa.repeats_s) == 4  # the clocks of the repeats unknown
    assert fa.cycles is None  # the last repeat has no clock: no cycles rather than a wrong pairing


@pytest.mark.parametrize("bad", [True, "nan", "inf", -1, None, 0])
@pytest.mark.parametrize("section, key", [("timing", "repeats_s"), ("clocks", "repeats_sm_clock_mhz")])
def test_a_stored_repeat_that_is_not_a_finite_positive_number_is_refused_naming_case_and_field(
        tmp_path, bad, section, key):
    # `true` in one repeat turned every case AMBIGUOUS, and a 300 % slowdown passed the gate
    path = tmp_path / "baseline.json"
    save_baseline(path, _record_run(), fingerprint_of(H200))
    save_baseline(path, _record_run(1.1), fingerprint_of(H200), add=True)
    data = json.loads(path.read_text())
    bench = data["benchmarks"][0]
    values = list(bench["extra_info"][section].get(key) or (1e-3, 1.1e-3))
    values[1] = bad
    bench["extra_info"][section][key] = values
    path.write_text(json.dumps(data))
    name = bench.get("fullname") or bench["name"]
    expected = f"benchmark {name!r} has {section}.{key}[1] = {bad!r}, not a finite"
    with pytest.raises(BaselineError, match=re.escape(expected)):
        load_baseline(path)


def test_the_baseline_file_is_readable_by_others_on_the_host(tmp_path):
    path = tmp_path / "baseline.json"
    old = os.umask(0o022)
    try:
        save_baseline(path, _record_run(), fingerprint_of(H200))
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644  # mkstemp alone leaves 0600


def test_a_repeat_taken_by_another_timer_is_refused():
    """A repeat must be the same quantity: a case the new run timed by events is not added to repeats taken by
    kernel-sum (named in the refusal), the others are."""
    from pytest_attn.verdicts.baseline import add_repeat

    old, new = _record_run(), _record_run()
    info = new["benchmarks"][0]["extra_info"]
    info["timing"]["timer"], info["timing"]["calls_per_sample"] = "cuda-event", 1
    _, added, refused = add_repeat(old, new)
    assert added == 1 and len(refused) == 1
    assert refused[0].endswith("timed by cuda-event x1 here, by kernel-sum x5 in the stored repeats (a repeat must"
                               " be the same quantity)")


def test_restart_retimed_starts_a_retimed_case_over_from_the_new_runs(tmp_path):
    """After an upgrade that times a case otherwise (events with the host's gaps -> its kernels), the stored repeats
    cannot take the new runs: ``--restart-retimed`` drops them and the case starts over from the first new run, the
    next adds to it; the other cases gain repeats as usual, and the saving line names what restarted."""
    from pytest_attn.verdicts.baseline import add_runs
    from pytest_attn.verdicts.cli import main
    from pytest_attn.verdicts.runs import benches

    def fingerprinted(run: dict) -> dict:
        return {**run, "machine_info": {"attn_fingerprint": fingerprint_of(H200).as_dict()}}

    path = tmp_path / "baseline.json"
    old = _record_run()
    for bench in old["benchmarks"]:
        bench["extra_info"]["timing"]["timer"], bench["extra_info"]["timing"]["calls_per_sample"] = "cuda-event", 1
    save_baseline(path, old, fingerprint_of(H200))
    said = add_runs(path, [("a.json", fingerprinted(_record_run()))])[0]
    assert "refused for 2 case(s)" in said and "--restart-retimed" in said  # without it: kept as stored
    (tmp_path / "a.json").write_text(json.dumps(fingerprinted(_record_run())))
    (tmp_path / "b.json").write_text(json.dumps(fingerprinted(_record_run(1.01))))
    code = main(["baseline", "add", str(path), str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--restart-retimed"])
    assert code == 0
    stored = benches(json.loads(path.read_text()))
    assert all(b.pin.timer == "kernel-sum" and len(b.repeats_s) == 2 for b in stored.values())


@pytest.mark.parametrize("content, says", [
    (b"\x1f\x8b\x08\x00junk", "is gzip-compressed"),
    ('{"benchmarks": []}'.encode("utf-16"), "is UTF-16 text"),
    (b'{"benchmarks": [{"name": "x", "stats": {"median": 1.0}}], "machine_info": {"attn_fingerprint": [1]}}',
     "machine_info.attn_fingerprint is [1], not an object"),
    (b'{"benchmarks": [{"name": "x", "stats": {"median": 1.0}, "extra_info": {"schema": "pytest-attn.record",'
     b' "version": 1, "timing": "fast"}}]}', "benchmark 'x' has an unreadable result record"),
    (b'{"benchmarks": [{"name": "x", "stats": {"median": 1.0}}, {"name": "x", "stats": {"median": 9.0}}]}',
     "benchmark 'x' is stored twice (#0 and #1)"),
])
def test_a_baseline_of_any_wrong_shape_is_refused_by_name(tmp_path, content, says):
    """A gzip or UTF-16 file, or a timing or machine_info of the wrong shape, ended the run with exit status 3
    and a traceback; a case stored twice was taken, its later copy silently winning."""
    path = tmp_path / "baseline.json"
    path.write_bytes(content)
    with pytest.raises(BaselineError, match=re.escape(says)) as info:
        load_baseline(path)
    assert str(path) in str(info.value)


def test_a_repeat_of_another_build_is_refused_before_anything_is_written(tmp_path):
    """A run of another flash-attn (or torch) joined a baseline as a repeat unchecked: the case's run-to-run spread
    then held the upgrade, and the gate allowed it as noise. A library only the run has installed is no difference,
    and stays out of the baseline's fingerprint (its repeats measured without it)."""
    from pytest_attn.verdicts.baseline import add_runs
    from pytest_attn.verdicts.cli import main

    def run_of(scale: float = 1.0, **libraries: str) -> dict:
        fp = fingerprint_of(H200, libraries={"flash-attn": "2.8.3", **libraries})
        return {**_record_run(scale), "machine_info": {"attn_fingerprint": fp.as_dict()}}

    path = tmp_path / "baseline.json"
    add_runs(path, [("first.json", run_of())])
    before = path.read_text()
    with pytest.raises(BaselineError, match=re.escape(
            "b.json: this run measured other software than the baseline's repeats (flash-attn: 2.8.3 (baseline) ->"
            " 2.8.4 (this run)): a repeat of another build would count the change as run-to-run noise")):
        add_runs(path, [("a.json", run_of(1.01)), ("b.json", run_of(1.02, **{"flash-attn": "2.8.4"}))])
    assert path.read_text() == before  # a.json was not added either
    stored_torch = stored_fingerprint(load_baseline(path)).torch
    newer_torch = {**run_of(), "machine_info": {"attn_fingerprint": {**fingerprint_of(H200).as_dict(), "torch": "9.9"}}}
    with pytest.raises(BaselineError, match=re.escape(f"torch: {stored_torch} (baseline) -> 9.9 (this run)")):
        save_baseline(path, newer_torch, Fingerprint.from_dict(newer_torch["machine_info"]["attn_fingerprint"]),
                      add=True)
    (tmp_path / "c.json").write_text(json.dumps(run_of(1.01, **{"flashinfer-python": "0.7.2.post1"})))
    assert main(["baseline", "add", str(path), str(tmp_path / "c.json")]) == 0
    assert stored_fingerprint(load_baseline(path)).libraries == {"flash-attn": "2.8.3"}
