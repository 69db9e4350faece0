"""scripts/on_gpus.py, the runner of validation commands one per GPU: on fake GPU names, with shell commands that
stand in for pytest runs -- each runs in its own copy with its GPU named, a run past its limit is stopped, a run
beyond the GPUs waits for one, and each one's verdict lines are printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "on_gpus.py"


def test_runs_one_command_per_gpu_in_copies_and_stops_one_past_its_limit(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), "--gpus", "g0,g1", "--timeout", "2",
         "--scratch", str(tmp_path / "copies"),
         "first: echo \"against baseline: 3 SAME\"; echo $CUDA_VISIBLE_DEVICES; pwd",
         "slow: sleep 30",
         "third: echo 'paired A/B at a 2.0% threshold: 2 SLOWER'; exit 1"],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "== first (GPU g0): exit 0" in out.stdout and "   against baseline: 3 SAME" in out.stdout
    assert "== third (GPU g0): exit 1" in out.stdout  # waited for a free GPU
    assert "   paired A/B at a 2.0% threshold: 2 SLOWER" in out.stdout
    assert "== slow (GPU g1): exit -15" in out.stdout  # SIGTERM at its limit
    log = (tmp_path / "out" / "first" / "log.txt").read_text().splitlines()
    assert log[1] == "g0" and log[2] == str(tmp_path / "copies" / "first")
    assert (tmp_path / "copies" / "first" / "pytest_attn" / "plugin").is_dir()
    assert not (tmp_path / "copies" / "first" / ".git").exists()


def test_a_command_without_a_name_is_refused():
    out = subprocess.run([sys.executable, str(SCRIPT), "--out", "x", "--gpus", "0", "pytest suites/"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode != 0 and "is not NAME: COMMAND" in out.stderr
