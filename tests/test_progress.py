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
