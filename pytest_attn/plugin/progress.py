"""Progress a person can follow on a long run: cases done of the total, time elapsed, an estimate of
what is left, and the case now running -- a line at most every ``every_s`` seconds (pytest's own dots
say nothing while one case compiles or samples for a minute); and where the whole wall time went
(:class:`WallTimes`). Pure: the clock is an argument."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


def fmt_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


@dataclass
class Progress:
    total: int
    every_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    done: int = 0
    started: float = field(default=-1.0)
    last_line: float = field(default=-1.0)

    def start(self, name: str) -> str | None:
        """A case starts: a progress line if the last one is ``every_s`` old (or this is the first)."""
        now = self.clock()
        if self.started < 0:
            self.started = now
        if self.last_line >= 0 and now - self.last_line < self.every_s:
            return None
        self.last_line = now
        elapsed = now - self.started
        left = ""
        if self.done:
            left = f", about {fmt_duration(elapsed / self.done * (self.total - self.done))} left"
        return f"{self.done}/{self.total} cases done, {fmt_duration(elapsed)} elapsed{left}; now {name}"

    def finish(self) -> None:
        self.done += 1


@dataclass
class WallTimes:
    """Where a run's wall time went, from the process's start: start-up (the interpreter, imports,
    collection, a compile phase), the attention cases' tests (of which ``measured_s`` in the phases each
    record times), other tests (the fuzz suite), and the end (saving, the gate) up to the summary."""

    clock: Callable[[], float] = time.monotonic
    loaded: float = field(default=-1.0)  # the clock when the plugin's session was made
    before_load_s: float = 0.0  # the process's age then
    first_test: float = -1.0
    last_test_end: float = -1.0
    cases_s: float = 0.0
    others_s: float = 0.0

    def __post_init__(self) -> None:
        if self.loaded < 0:
            self.loaded = self.clock()

    def test_ran(self, start: float, end: float, attention: bool) -> None:
        if self.first_test < 0:
            self.first_test = start
        self.last_test_end = end
        if attention:
            self.cases_s += end - start
        else:
            self.others_s += end - start

    def line(self, measured_s: float) -> str | None:
        """The wall-time line, ``measured_s`` being the cases' own phases (setup, checks, warm-up, sampling)."""
        if self.first_test < 0:
            return None
        now = self.clock()
        startup = self.before_load_s + self.first_test - self.loaded
        total = self.before_load_s + now - self.loaded
        between = self.first_test + self.cases_s + self.others_s
        return (f"wall time {total:.1f} s: start-up {startup:.1f} s (Python, imports, collection, any compile phase);"
                f" the attention tests {self.cases_s:.1f} s, {measured_s:.1f} s of it in the phases above and"
                f" {max(0.0, self.cases_s - measured_s):.1f} s around them (pytest, fixtures, inputs' memory);"
                + (f" other tests {self.others_s:.1f} s;" if self.others_s >= 0.05 else "")
                + f" between tests {max(0.0, self.last_test_end - between):.1f} s;"
                f" the end so far {now - self.last_test_end:.1f} s (saving, the gate)")
