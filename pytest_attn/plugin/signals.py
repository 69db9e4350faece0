"""SIGTERM and SIGHUP end an attention run the way Ctrl-C does.

A CI job cancelled (SIGTERM) or a closed terminal (SIGHUP) would otherwise end the process at once: no
summary, no autosave, no ``--benchmark-json``, every case already measured lost. In an attention run the
two signals raise :class:`KeyboardInterrupt` instead, from the measuring loop on: pytest then finishes
as after Ctrl-C -- the summary is printed, what pytest-benchmark saves is marked partial
(:mod:`.history`), no baseline is saved (:mod:`.gate`), clocks are restored, exit status 2. A second
signal of either kind ends the process by the signal's default action (a parent that insists gets its
way) -- unless it comes within :data:`REPEAT_WINDOW_S` of the first: GNU ``timeout`` sends its SIGTERM to
the command and then to the command's process group, so the command receives it twice at once (on an H200
an A/B run under ``timeout`` died with no summary). A signal that was ignored when the run started
(``nohup``) or has a handler of someone else's is left alone, and so is every session where no attention case runs.

**The session's end is not cut into pieces.** Once the cases have run, the end of the session -- the gate,
reports, the baseline and pytest-benchmark's saving, the summary -- finishes before a signal takes effect: a
SIGTERM or SIGHUP that arrives then is noted (a line on stderr once the session ended) and the end runs on;
its work is seconds, and cut anywhere it left a traceback, exit status 130, no summary, an unsaved baseline
or a 0-byte saved run. A second one (outside the repeat window) still ends the process at once.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from typing import Any

import pytest

from .session import ATTN_SESSION, case_of_item

#: A second signal this soon after the first is the same request delivered twice (see the module).
REPEAT_WINDOW_S = 1.0
AS_INTERRUPT = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class SignalsAsInterrupt:
    """Turns :data:`AS_INTERRUPT` into :class:`KeyboardInterrupt` while installed; records which came."""

    def __init__(self) -> None:
        self.installed: dict[int, Any] = {}  # signal -> the handler it had
        self.received: str | None = None
        self.received_at = 0.0
        self.ending = False  # the session's end has begun: a signal waits for it
        self.during_end: str | None = None  # a signal that came while it ran

    def install(self) -> None:
        for signum in AS_INTERRUPT:
            if signal.getsignal(signum) != signal.SIG_DFL:  # ignored (nohup) or handled by someone else
                continue
            try:
                self.installed[signum] = signal.signal(signum, self.on_signal)
            except ValueError:  # not the main thread: nothing to do there
                return

    def uninstall(self) -> None:
        while self.installed:
            signum, previous = self.installed.popitem()
            with contextlib.suppress(ValueError, TypeError):
                if signal.getsignal(signum) == self.on_signal:
                    signal.signal(signum, previous)

    def on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:  # the second one: end as the signal ends a process
            if time.monotonic() - self.received_at < REPEAT_WINDOW_S:
                return  # the first one delivered again (to the process, then to its group)
            self.uninstall()
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        self.received, self.received_at = name, time.monotonic()
        if self.ending:
            self.during_end = name
            return
        raise KeyboardInterrupt(f"{name}: the run stops as after Ctrl-C (what was measured is kept, marked"
                                " partial); send it again to end the process at once")


SIGNAL_GUARD = pytest.StashKey[SignalsAsInterrupt]()  # while the cases run


def _attention_run(session: pytest.Session) -> bool:
    attn = session.config.stash.get(ATTN_SESSION, None)
    if attn is None:
        return False
    return attn.active or any(case_of_item(item) is not None for item in session.items)


def guard_signals(config: pytest.Config) -> None:
    """Install the guard once per session (before clocks are locked: their guard hands over to this one)."""
    if config.stash.get(SIGNAL_GUARD, None) is None:
        guard = config.stash[SIGNAL_GUARD] = SignalsAsInterrupt()
        guard.install()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    """From the first case on (collection is cheap to lose), until the session is unconfigured; once the
    loop is over, however it ended, the end of the session is not interrupted."""
    if _attention_run(session):
        guard_signals(session.config)
    yield
    guard = session.config.stash.get(SIGNAL_GUARD, None)
    if guard is not None:
        guard.ending = True


def pytest_unconfigure(config: pytest.Config) -> None:
    guard = config.stash.get(SIGNAL_GUARD, None)
    if guard is not None:
        guard.uninstall()
        if guard.during_end:
            sys.stderr.write(f"pytest-attn: {guard.during_end} arrived during the end of the session; the end (gate,"
                             " saving, summary) was finished first, and the run stops now\n")
