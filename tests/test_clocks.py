"""Clock locking (pytest_attn.engine.clocks) against a fake NVML only, never a real GPU's clocks."""

from __future__ import annotations

import signal

import pytest

from pytest_attn.engine import clocks
from pytest_attn.engine.clocks import ClockLocker, ClockLockError, LockRequest, NoPermission, parse_lock


class FakeControl:
    """A device whose clocks can be locked (or not), recording every call."""

    def __init__(self, name="GPU 0", permission=True, base=1755, maximum=1980, readback=None):
        self.name, self.permission, self.base, self.maximum = name, permission, base, maximum
        self.readback = readback
        self.locked_at: int | None = None
        self.calls: list[str] = []

    def set_locked_clocks(self, min_mhz, max_mhz):
        self.calls.append(f"lock {min_mhz}")
        if not self.permission:
            raise NoPermission()
        self.locked_at = min_mhz

    def reset_locked_clocks(self):
        self.calls.append("reset")
        self.locked_at = None

    def base_clock_mhz(self):
        return self.base

    def max_sm_clock_mhz(self):
        return self.maximum

    def sm_clock_mhz(self):
        return self.readback if self.readback is not None else (self.locked_at or 1410)


def test_parse():
    assert parse_lock("off") == LockRequest("off", "try")
    assert parse_lock("max:require") == LockRequest("max", "require")
    assert parse_lock("1755") == LockRequest(1755, "try")
    with pytest.raises(ValueError, match="give off, base, max or a clock in MHz"):
        parse_lock("fast")
    with pytest.raises(ValueError, match="mode 'always' is not one of try, require"):
        parse_lock("max:always")


@pytest.mark.parametrize(("target", "expected"), [("max", 1980), ("base", 1755), (1500, 1500)])
def test_lock_read_back_and_restore_once(target, expected, monkeypatch):
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    dev = FakeControl()
    locker = ClockLocker([dev], LockRequest(target, "require"), warn=pytest.fail)
    assert locker.acquire() == f"locked at {expected} MHz" and dev.locked_at == expected
    locker.release()
    locker.release()  # idempotent
    assert dev.calls == [f"lock {expected}", "reset"] and dev.locked_at is None


def test_no_permission_require_stops_and_try_warns_once():
    with pytest.raises(ClockLockError, match=r"no permission to lock clocks\. locking GPU clocks needs root"):
        ClockLocker([FakeControl(permission=False)], LockRequest("max", "require"), warn=pytest.fail).acquire()
    warned: list[str] = []
    dev = FakeControl(permission=False)
    locker = ClockLocker([dev], LockRequest("max", "try"), warn=warned.append)
    assert locker.acquire().startswith("not locked (GPU 0: no permission")
    assert len(warned) == 1 and "needs root" in warned[0] and dev.calls == ["lock 1980"]


def test_a_lock_that_does_not_read_back_is_undone():
    dev = FakeControl(readback=1410)
    with pytest.raises(ClockLockError, match="asked for 1980 MHz, NVML reads 1410 MHz back"):
        ClockLocker([dev], LockRequest("max", "require"), warn=pytest.fail).acquire()
    assert dev.calls == ["lock 1980", "reset"]


def test_every_device_is_restored_when_a_later_one_fails(monkeypatch):
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    first, second = FakeControl("GPU 0"), FakeControl("GPU 1", permission=False)
    warned: list[str] = []
    assert ClockLocker([first, second], LockRequest("max"), warned.append).acquire().startswith("not locked")
    assert first.calls == ["lock 1980", "reset"]


def test_no_gpu():
    with pytest.raises(ClockLockError, match="no GPU is visible through NVML"):
        ClockLocker([], LockRequest("max", "require"), warn=pytest.fail).acquire()


def test_sigterm_restores_then_hands_over(monkeypatch):
    installed = {}
    monkeypatch.setattr(signal, "signal", lambda sig, handler: installed.setdefault(sig, handler) and None)
    monkeypatch.setattr(clocks.atexit, "register", lambda fn: None)
    dev = FakeControl()
    locker = ClockLocker([dev], LockRequest("max"), warn=pytest.fail)
    locker.acquire()
    handed: list[int] = []
    locker._previous[signal.SIGTERM] = lambda signum, frame: handed.append(signum)
    installed[signal.SIGTERM](signal.SIGTERM, None)
    assert dev.calls == ["lock 1980", "reset"] and handed == [signal.SIGTERM]


def test_restore_failure_is_warned_with_the_manual_fix(monkeypatch):
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    dev = FakeControl()

    def broken():
        raise RuntimeError("NVML gone")

    warned: list[str] = []
    locker = ClockLocker([dev], LockRequest("max"), warned.append)
    locker.acquire()
    dev.reset_locked_clocks = broken
    locker.release()
    assert "could not restore the clocks of GPU 0: NVML gone" in warned[0] and "--reset-gpu-clocks" in warned[0]


SUITE = '''
import pytest
from pytest_attn.core.case import AttnCase


def test_measured(attn_bench):
    r = attn_bench(AttnCase.dense(backend="sdpa-math", shape="t", batch=1, seqlen_q=8, heads_q=2, head_dim=8,
                                  dtype="fp32"))
    assert r.clocks.lock == "locked at 1980 MHz"


def test_fails():
    raise RuntimeError("a failure mid-run")
'''


def test_plugin_restores_after_failures_and_records_the_state(pytester, monkeypatch):
    dev = FakeControl()
    monkeypatch.setattr(clocks, "CONTROL_FACTORY", lambda: [dev])
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    monkeypatch.setattr(clocks.atexit, "register", lambda fn: None)
    pytester.makepyfile(test_locked=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-lock-clocks=max:require", "--attn-max-time=0.05",
                                "--attn-min-samples=5")
    result.assert_outcomes(passed=1, failed=1)
    assert dev.calls == ["lock 1980", "reset"]


def test_plugin_require_without_permission_stops_at_start_up(pytester, monkeypatch):
    monkeypatch.setattr(clocks, "CONTROL_FACTORY", lambda: [FakeControl(permission=False)])
    pytester.makepyfile(test_locked=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-lock-clocks=max:require")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no permission to lock clocks. locking GPU clocks needs root*"])
