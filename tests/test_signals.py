"""Real signals to a real child pytest process: Ctrl-C stops a run within a second or two, and a slow
CPU case cannot hold it (its calls are short or it is refused before it starts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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

        def forward():
            pathlib.Path("started").touch()
            time.sleep(0.05)
            return F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, is_causal=case.mask.kind == "causal",
                                                  enable_gqa=True)

        return forward


def pytest_attn_register_backends(registry, config):
    registry.register(Slow())
'''

SUITE = '''
from pytest_attn.plugin import attn_cases


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = attn_cases(metafunc.config, "all")
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_attn(attn_bench, case):
    attn_bench(case)
'''


def _start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--attn-backends=slow",
                             "--attn-profile=cpu", "--attn-max-time=30", "--attn-precision=0.0001", *args],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the run never started measuring"
        time.sleep(0.05)


def test_ctrl_c_stops_a_case_mid_sampling_within_two_seconds(tmp_path):
    proc = _start(tmp_path)
    _wait_for(tmp_path / "started", proc)
    time.sleep(0.3)  # well inside the sampling of the first case (30 s cap, a precision it cannot reach)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert took < 3.0, f"took {took:.1f} s to stop:\n{out}"  # a second or two, with room for a busy machine
    assert proc.returncode == pytest.ExitCode.INTERRUPTED
    assert "KeyboardInterrupt" in out
