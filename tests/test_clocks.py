"""Clock locking against a fake NVML only (never a real GPU's clocks), and throttle classification."""

from __future__ import annotations

import signal

import pytest

from pytest_attn import clocks
from pytest_attn.clocks import ClockLocker, ClockLockError, LockRequest, NoPermission, parse_lock
from pytest_attn.throttle import assess, is_throttled, reason_names


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
    locker._previous_sigterm = lambda signum, frame: handed.append(signum)
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
from pytest_attn.case import AttnCase


def test_measured(attn_bench):
    r = attn_bench(AttnCase.dense(backend="sdpa-math", shape="t", batch=1, seqlen_q=8, heads_q=2, head_dim=8,
                                  dtype="fp32"))
    assert r.extra_info()["clock_lock"] == "locked at 1980 MHz"


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


def test_throttle_classification():
    assert reason_names(0x4 | 0x40) == ["power cap", "thermal (hardware)"]
    assert is_throttled(0x4) and not is_throttled(0x1) and not is_throttled(None)
    keep, report = assess([0x4, 0x0, 0x4 | 0x20, 0x1, None], [1650, 1980, 1400, 1980, None], 1980, drop=True)
    assert keep == [0, 1, 3, 4]  # 1400 < 75 % of 1980
    assert (report.samples, report.throttled, report.dropped) == (5, 2, 1)
    assert report.reasons == {"power cap": 2, "thermal (software)": 1}
    assert report.describe() == ("2/5 samples throttled (power cap 2, thermal (software) 1); 1 dropped under 75% of"
                                 " the nominal clock")
    assert not report.mostly_throttled
    _, mostly = assess([0x4, 0x4, 0x0], [1650, 1650, 1980], 1980)
    assert mostly.mostly_throttled and mostly.dropped == 0
    _, unknown = assess([None, None], [None, None], None)
    assert not unknown.known and "not known" in unknown.describe()
    keep_all, _ = assess([0x4], [100], 1980, drop=True)
    assert keep_all == [0]  # never drop every sample


def test_timing_self_check():
    from pytest_attn.selfcheck import TimingCheck

    ok = TimingCheck(15.83e-6, 15.84e-6)
    assert ok.ok and ok.describe() == ("reported median 15.83 us agrees with the profiler's kernel time 15.84 us"
                                       " (ratio 0.999, tolerance 5%)")
    launch_bound = TimingCheck(100e-6, 14e-6)  # one event pair around a 14 us call
    assert not launch_bound.ok and "DIFFERS" in launch_bound.describe()
    assert TimingCheck(1e-3, 0.0).ratio == float("inf")  # a graph that captured no kernel
    assert launch_bound.as_extra_info()["verify_ok"] is False


def test_ceiling_fractions():
    from pytest_attn.ceilings import CeilingCache, Ceilings, fractions
    from pytest_attn.device import DeviceInfo

    c = Ceilings({"bf16": 750.0}, 4.0)
    assert fractions(600.0, 1.0, "bf16", c) == {"ceiling_matmul_tflops": 750.0, "fraction_of_matmul": 0.8,
                                                "ceiling_copy_tbps": 4.0, "fraction_of_copy": 0.25}
    assert fractions(600.0, 1.0, "fp16", c)["fraction_of_matmul"] is None  # not measured for fp16
    assert fractions(1.0, 1.0, "bf16", None)["fraction_of_copy"] is None
    assert c.describe() == "measured ceilings: bf16 matmul 750.0 TFLOP/s, copy 4.00 TB/s"
    cpu = DeviceInfo(kind="cpu", name="cpu", torch_version="x")
    assert CeilingCache().get(cpu, "bf16") is None  # nothing measured without a GPU
