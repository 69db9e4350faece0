"""Real signals to a real child pytest process: Ctrl-C stops the case being measured in the middle of its
sampling, and a slow CPU case cannot hold it (its calls are short or it is refused before it starts). What the
child did is read from the files it leaves (which cases started, which calls began after the signal), never from
how long it took: a loaded machine stretches every wait."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import attention_suite

pytest.importorskip("torch")

CONFTEST = '''
import pathlib
import time

import torch


class Slow:
    """A back end whose calls take 50 ms of interruptible Python each."""

    name = "slow"
    description = "sleeps"
    layout = "bhsd"
    needs_cuda = False
    has_backward = False
    default_enabled = True

    def available(self):
        return None

    def supports(self, case, device):
        return None

    def workspace_bytes(self, case):
        return 0

    def prepare(self, case, inputs):
        import torch.nn.functional as F

        calls = [0]
        with open("cases.txt", "a") as fh:
            fh.write(case.id + "\\n")

        def forward():
            calls[0] += 1
            if calls[0] == 20:  # past the check, torch's first-use imports and most of the warm-up
                pathlib.Path("measuring").touch()
            pathlib.Path("started").touch()
            if pathlib.Path("signalled").exists():  # the parent is about to signal: wait for it inside this call
                with open("after.txt", "a") as fh:
                    fh.write("call\\n")
                time.sleep(600)
            time.sleep(0.05)
            return F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, is_causal=case.mask.kind == "causal",
                                                  enable_gqa=True)

        return forward


def pytest_attn_register_backends(registry, config):
    registry.register(Slow())
'''

SUITE = attention_suite()


FAKE_NVML = '''

from pytest_attn.engine import clocks


class FileControl:
    """A fake NVML device that writes each call to calls.txt (the parent test reads it)."""

    name = "fake GPU"

    def _log(self, text):
        with open("calls.txt", "a") as fh:
            fh.write(text + "\\n")

    def set_locked_clocks(self, min_mhz, max_mhz):
        self._log(f"lock {min_mhz}")

    def reset_locked_clocks(self):
        self._log("reset")

    def base_clock_mhz(self):
        return 1755

    def max_sm_clock_mhz(self):
        return 1980

    def sm_clock_mhz(self):
        return 1980


clocks.CONTROL_FACTORY = lambda: [FileControl()]
'''


def _child() -> None:
    """The run's process as a terminal would start it: no core dump, and the signals these tests send at
    their default action (a test run under nohup, or as a background job, inherits them ignored)."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)  # exec keeps an ignored signal ignored, a default one default


def _start(tmp_path: Path, *args: str, conftest: str = CONFTEST) -> subprocess.Popen[str]:
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--attn-backends=slow",
                             "--attn-profile=cpu", "--attn-max-time=30", "--attn-precision=0.0001", *args],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_child)


#: How long a child may take to get somewhere before the test gives up on it: a guard against a hung child on a
#: loaded machine, never a bound on what the test asserts.
HANG_S = 600


def _wait_until(found, proc: subprocess.Popen[str], what: str) -> None:
    """Wait for ``found()`` while the child runs: it exiting first fails the test with its output."""
    deadline = time.monotonic() + HANG_S
    while not found():
        assert proc.poll() is None, f"the run ended before {what}:\n{proc.communicate()[0]}"
        assert time.monotonic() < deadline, f"the run never got to {what} in {HANG_S} s"
        time.sleep(0.05)


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    _wait_until(path.exists, proc, f"writing {path.name}")


@pytest.mark.e2e
def test_ctrl_c_stops_a_case_mid_sampling(tmp_path):
    """Ctrl-C in the middle of a case's sampling (30 s cap, a precision it cannot reach) interrupts the call in
    progress: it was the last call begun and the case the last one started, and the run ends interrupted. A run
    that held the signal would finish the call (a 600 s sleep) or the case (its 30 s cap) and start the next one.
    The signal comes well inside the first case: not 0.3 s after its first call, where torch's own first-use
    imports (sympy) held the interrupt 0.8-1 s before pytest-attn saw it."""
    proc = _start(tmp_path)
    _wait_for(tmp_path / "measuring", proc)
    (tmp_path / "signalled").touch()  # from here on, each call waits for the signal inside it
    _wait_for(tmp_path / "after.txt", proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=HANG_S)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt" in out
    assert (tmp_path / "after.txt").read_text() == "call\n", out  # the call the signal came in: no other began
    assert len((tmp_path / "cases.txt").read_text().splitlines()) == 1, out  # the first case was never finished


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGQUIT], ids=lambda s: signal.Signals(s).name)
def test_locked_clocks_are_restored_whatever_signal_ends_the_run(tmp_path, signum):
    """SIGTERM and SIGHUP: test_sigterm_and_sighup_keep_what_was_measured (one child session for both)."""
    proc = _start(tmp_path, "--attn-lock-clocks=max:require", conftest=CONFTEST + FAKE_NVML)
    _wait_for(tmp_path / "started", proc)
    assert (tmp_path / "calls.txt").read_text() == "lock 1980\n"  # locked while measuring
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=HANG_S)
    assert (tmp_path / "calls.txt").read_text() == "lock 1980\nreset\n", out
    if signum == signal.SIGQUIT:  # the signal's own end, after the restore: a parent sees what it sent
        assert proc.returncode == -signum, out
    else:
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, out


QUICK = CONFTEST.replace('pathlib.Path("started").touch()', 'pathlib.Path(f"calls-{case.id}").touch()').replace(
    "time.sleep(0.05)", "time.sleep(0.002)")


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
def test_sigterm_and_sighup_keep_what_was_measured(tmp_path, signum):
    """A cancelled CI job (SIGTERM), a closed terminal (SIGHUP): the run stops as after Ctrl-C -- summary,
    autosave and --benchmark-json with the cases measured, marked partial, no baseline, exit status 2 --
    and locked clocks are restored (their guard hands the signal on to this one)."""
    proc = _start(tmp_path, "--attn-max-time=0.3", "--benchmark-autosave", "--benchmark-json=out.json",
                  "--attn-save-baseline", "--attn-baselines-dir=b", "--attn-lock-clocks=max:require",
                  conftest=QUICK + FAKE_NVML)
    _wait_until(lambda: len(list(tmp_path.glob("calls-*"))) >= 3, proc, "its third case")  # two were measured
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=HANG_S)
    name = signal.Signals(signum).name
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert (tmp_path / "calls.txt").read_text() == "lock 1980\nreset\n", out
    assert "pytest-attn summary" in out and "tiny-mha" in out, out
    assert f"KeyboardInterrupt: {name}: the run stops as after Ctrl-C" in out
    assert f"this run is partial (interrupted ({name}), " in out
    assert "--attn-save-baseline: nothing saved: the run was interrupted" in out
    assert not (tmp_path / "b").exists() or not list((tmp_path / "b").rglob("baseline.json"))
    saved = [json.loads(p.read_text()) for p in [tmp_path / "out.json", *(tmp_path / ".benchmarks").rglob("*.json")]]
    assert len(saved) == 2, out
    for run in saved:
        assert run["attn_partial"]["reason"] == f"interrupted ({name})"
        assert run["attn_partial"]["cases_measured"] == len(run["benchmarks"]) >= 2


def test_a_lock_left_at_interpreter_exit_is_restored_by_atexit(tmp_path):
    script = FAKE_NVML + '''
from pytest_attn.engine.clocks import ClockLocker, LockRequest

locker = ClockLocker(clocks.CONTROL_FACTORY(), LockRequest("max", "require"), warn=print)
print(locker.acquire())
# no release(): the interpreter exits with the clocks locked
'''
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0 and done.stdout.strip() == "locked at 1980 MHz", done.stderr
    assert (tmp_path / "calls.txt").read_text() == "lock 1980\nreset\n"


def test_sighup_ignored_before_the_run_stays_ignored(tmp_path):
    """Under nohup SIGHUP is ignored: guarding the clocks must not turn it into the end of the run."""
    script = FAKE_NVML + '''
import os
import signal

from pytest_attn.engine.clocks import ClockLocker, LockRequest

signal.signal(signal.SIGHUP, signal.SIG_IGN)
locker = ClockLocker(clocks.CONTROL_FACTORY(), LockRequest("max", "require"), warn=print)
locker.acquire()
os.kill(os.getpid(), signal.SIGHUP)
print("still running")
locker.release()
'''
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0 and "still running" in done.stdout, done.stderr
    assert (tmp_path / "calls.txt").read_text() == "lock 1980\nreset\n"


def test_a_signal_repeated_at_once_is_one_request(monkeypatch):
    """GNU timeout signals the command and then its process group: the command gets SIGTERM twice at once.
    The repeat is the same request (the run still stops as after Ctrl-C); one a second later ends it."""
    from pytest_attn.plugin import signals

    now = [100.0]
    monkeypatch.setattr(signals.time, "monotonic", lambda: now[0])
    raised = []
    monkeypatch.setattr(signals.signal, "raise_signal", raised.append)
    monkeypatch.setattr(signals.signal, "signal", lambda signum, handler: None)
    guard = signals.SignalsAsInterrupt()
    with pytest.raises(KeyboardInterrupt):
        guard.on_signal(signal.SIGTERM, None)
    now[0] += 0.01
    guard.on_signal(signal.SIGTERM, None)  # timeout's second delivery: nothing more happens
    assert raised == []
    now[0] += signals.REPEAT_WINDOW_S
    guard.on_signal(signal.SIGTERM, None)
    assert raised == [signal.SIGTERM]


IN_THE_END = QUICK + '''

import os
import signal

import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    os.kill(os.getpid(), signal.SIGTERM)  # a CI job cancelled in the last second: during the end of the session
'''


@pytest.mark.e2e
def test_a_sigterm_during_the_end_of_the_session_waits_for_it(tmp_path):
    """3 of 3 such SIGTERMs gave a raw KeyboardInterrupt traceback, exit status 130, no summary, no gate, the
    asked-for baseline silently not saved. Once the cases have run, the end finishes first: the baseline is
    saved, the summary printed, the saved JSON whole, and the signal is said; the run then ends as interrupted."""
    proc = _start(tmp_path, "--attn-max-time=0.2", "--benchmark-json=out.json", "--attn-save-baseline",
                  "--attn-baselines-dir=b", "-k", "tiny-mha", conftest=IN_THE_END)
    out, _ = proc.communicate(timeout=HANG_S)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert "pytest-attn summary" in out and "saved " in out and list((tmp_path / "b").rglob("baseline.json"))
    saved = json.loads((tmp_path / "out.json").read_text())
    assert saved["benchmarks"] and "attn_partial" not in saved  # every case had run: nothing was cut
    assert "pytest-attn: SIGTERM arrived during the end of the session; the end (gate, saving, summary) was" \
           " finished first, and the run stops now, as interrupted (exit status 2)" in out
