"""Progress lines on long runs (pytest_attn.plugin.progress), on a fake clock."""

from __future__ import annotations

from pytest_attn.plugin.progress import Progress, fmt_duration


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_line_at_most_every_few_seconds_with_an_estimate():
    clock = Clock()
    p = Progress(total=10, every_s=10.0, clock=clock)
    assert p.start("a") == "0/10 cases done, 0s elapsed; now a"
    clock.now += 4
    p.finish()
    assert p.start("b") is None  # 4 s since the last line
    clock.now += 8
    p.finish()
    assert p.start("c") == "2/10 cases done, 12s elapsed, about 48s left; now c"  # 6 s a case so far
    clock.now += 600
    for _ in range(3):
        p.finish()
    assert p.start("d") == "5/10 cases done, 10m12s elapsed, about 10m12s left; now d"


def test_durations_read_like_a_person_writes_them():
    assert (fmt_duration(59.4), fmt_duration(61), fmt_duration(3725)) == ("59s", "1m01s", "1h02m")


def test_the_wall_line_accounts_for_the_whole_run():
    from pytest_attn.plugin.progress import WallTimes

    now = [100.0]
    wall = WallTimes(clock=lambda: now[0], before_load_s=1.5)  # the plugin loaded 1.5 s into the process
    assert wall.line(0.0) is None  # no test ran
    wall.test_ran(104.0, 110.0, attention=True)  # collection and a compile phase took 4 s
    wall.test_ran(110.5, 112.0, attention=False)  # a fuzz test, half a second after
    wall.test_ran(112.0, 122.0, attention=True)
    now[0] = 123.0
    line = wall.line(measured_s=13.0)
    assert line == ("wall time 24.5 s: start-up 5.5 s (Python, imports, collection, any compile phase); the attention"
                    " tests 16.0 s, 13.0 s of it in the phases above and 3.0 s around them (pytest, fixtures, inputs'"
                    " memory); other tests 1.5 s; between tests 0.5 s; the end so far 1.0 s (saving, the gate)")
    parts = [5.5, 16.0, 1.5, 0.5, 1.0]
    assert sum(parts) == 24.5  # every second of the wall time is somewhere


def test_process_age_is_read_from_proc(tmp_path):
    import os

    from pytest_attn.engine.probe import process_age_s

    ticks = os.sysconf("SC_CLK_TCK")
    (tmp_path / "stat").write_text("4242 (py thon) S " + " ".join(["0"] * 18) + f" {1000 * ticks} 0 0")
    (tmp_path / "uptime").write_text("1012.50 2000.00\n")
    assert process_age_s(tmp_path / "stat", tmp_path / "uptime") == 12.5
    assert process_age_s(tmp_path / "missing", tmp_path / "uptime") is None
    assert 0 <= process_age_s() < 3600  # this process, on Linux


def test_a_run_that_keeps_no_bytecode_for_torch_says_so_and_how_to_fix_it(tmp_path):
    import importlib.util

    from pytest_attn.engine.probe import uncompiled_bytecode

    origin = str(tmp_path / "torch" / "__init__.py")
    kept = {importlib.util.cache_from_source(origin)}
    note = uncompiled_bytecode(True, origin, exists=lambda path: False)
    assert note is not None and note.startswith("start-up: Python writes no bytecode here (PYTHONDONTWRITEBYTECODE")
    assert "unset PYTHONDONTWRITEBYTECODE" in note and "PYTHONPYCACHEPREFIX" in note
    assert uncompiled_bytecode(True, origin, exists=kept.__contains__) is None  # torch's bytecode is there
    assert uncompiled_bytecode(False, origin, exists=lambda path: False) is None  # Python writes it as it goes
    assert uncompiled_bytecode(True, None) is None  # no torch
