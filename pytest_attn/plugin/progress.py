"""Progress a person can follow on a long run: cases done of the total, time elapsed, an estimate of
what is left, and the case now running -- a line at most every ``every_s`` seconds (pytest's own dots
say nothing while one case compiles or samples for a minute). Pure: the clock is an argument."""

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
