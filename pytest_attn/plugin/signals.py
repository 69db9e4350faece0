"""SIGTERM and SIGHUP end an attention run the way Ctrl-C does; and no signal, Ctrl-C included, cuts its end short.

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

**The session's end is not cut into pieces.** Once the cases have run (however the loop over them ended), the end
of the session -- the gate, reports, the baseline and pytest-benchmark's saving, the summary -- finishes before a
signal takes effect: a Ctrl-C, SIGTERM or SIGHUP that arrives then is noted (a line on stderr once the session
ended; a Ctrl-C also gets one at once) and the end runs on; its work is seconds, and cut anywhere it left a
traceback, no summary, an unsaved baseline, a 0-byte saved run, or -- a second Ctrl-C during pytest's own handling of
the first -- a cut-short run saved unmarked. The run then exits as interrupted (status 2); what it saved is marked
partial only where cases were cut (:func:`loop_cut`). Ctrl-C is never turned into an immediate end (a double
press is the common way to ask once); a second SIGTERM or SIGHUP (outside the repeat window) still ends the process
at once, and so does Ctrl-\\ (SIGQUIT).
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
    """Turns :data:`AS_INTERRUPT` into :class:`KeyboardInterrupt` while installed, and Ctrl-C (SIGINT) into what
    Python makes of it; records which came; and, once :attr:`ending`, notes every one instead (see the module)."""

    def __init__(self) -> None:
        self.installed: dict[int, Any] = {}  # signal -> the handler it had
        self.received: str | None = None  # SIGTERM or SIGHUP, the first one
        self.received_at = 0.0
        self.ctrl_c = False  # a Ctrl-C stopped the cases
        self.ending = False  # the session's end has begun: a signal waits for it
        self.during_end: list[str] = []  # the signals that came while it ran, in order
        self.session: pytest.Session | None = None  # whose exit status says "interrupted" once the end is done

    def install(self) -> None:
        for signum in AS_INTERRUPT:
            if signal.getsignal(signum) != signal.SIG_DFL:  # ignored (nohup) or handled by someone else
                continue
            try:
                self.installed[signum] = signal.signal(signum, self.on_signal)
            except ValueError:  # not the main thread: nothing to do there
                return
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # (not ignored, nor someone else's)
            with contextlib.suppress(ValueError):
                self.installed[signal.SIGINT] = signal.signal(signal.SIGINT, self.on_ctrl_c)

    def uninstall(self) -> None:
        while self.installed:
            signum, previous = self.installed.popitem()
            with contextlib.suppress(ValueError, TypeError):
                if signal.getsignal(signum) in (self.on_signal, self.on_ctrl_c):
                    signal.signal(signum, previous)

    def on_ctrl_c(self, signum: int, frame: Any) -> None:
        """Ctrl-C: while the cases run, Python's own KeyboardInterrupt; during the end, noted (said at once)."""
        if not self.ending:
            self.ctrl_c = True
            raise KeyboardInterrupt
        if "Ctrl-C" not in self.during_end:
            with contextlib.suppress(Exception):
                sys.stderr.write("\npytest-attn: Ctrl-C: the end of the session (gate, saving, summary) finishes first,"
                                 " in seconds, and the run then stops; Ctrl-\\ (SIGQUIT) ends it at once, unsaved\n")
                sys.stderr.flush()
        self.during_end.append("Ctrl-C")

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
            self.during_end.append(name)
            return
        raise KeyboardInterrupt(f"{name}: the run stops as after Ctrl-C (what was measured is kept, marked"
                                " partial); send it again to end the process at once")

    def interrupted_by(self) -> str:
        """The signal that stopped the cases, for "interrupted (...)"."""
        return self.received or ("Ctrl-C" if self.ctrl_c else "Ctrl-C or a signal")


SIGNAL_GUARD = pytest.StashKey[SignalsAsInterrupt]()  # while the cases run
LOOP_CUT = pytest.StashKey[str]()  # how the loop over the cases was cut short, where it was (see loop_cut)


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


def _cut(session: pytest.Session, exc: BaseException, guard: SignalsAsInterrupt | None) -> str:
    """Why the loop over the cases ended with ``exc``: "interrupted (SIGTERM)", "stopped early (...)"."""
    if isinstance(exc, (session.Interrupted, session.Failed)):  # -x, --maxfail (pytest-xdist's too), a worker's stop
        return f"stopped early ({exc})"
    if isinstance(exc, KeyboardInterrupt):
        return f"interrupted ({guard.interrupted_by() if guard is not None else 'Ctrl-C or a signal'})"
    if isinstance(exc, pytest.exit.Exception):
        return f"stopped early (pytest.exit: {exc})"
    return f"stopped early ({type(exc).__name__}: {exc})"


def loop_cut(config: pytest.Config) -> str | None:
    """How the loop over the cases was cut short (a signal, ``-x``, an error), or None where it ran to its end."""
    return config.stash.get(LOOP_CUT, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    """From the first case on (collection is cheap to lose), until the session is unconfigured; once the
    loop is over, however it ended, the end of the session is not interrupted."""
    if _attention_run(session):
        guard_signals(session.config)
    guard = session.config.stash.get(SIGNAL_GUARD, None)
    if guard is not None:
        guard.session = session
    try:
        return (yield)
    except BaseException as exc:
        session.config.stash[LOOP_CUT] = _cut(session, exc, guard)
        raise
    finally:
        if guard is not None:
            guard.ending = True


def pytest_unconfigure(config: pytest.Config) -> None:
    """The end is done: the guard off, and a signal that came during it said, the run then ending as interrupted."""
    guard = config.stash.get(SIGNAL_GUARD, None)
    if guard is not None:
        guard.uninstall()
        if guard.during_end:
            came = ", ".join(dict.fromkeys(guard.during_end))
            sys.stderr.write(f"pytest-attn: {came} arrived during the end of the session; the end (gate, saving,"
                             " summary) was finished first, and the run stops now, as interrupted (exit status 2)\n")
            if guard.session is not None:
                guard.session.exitstatus = pytest.ExitCode.INTERRUPTED
