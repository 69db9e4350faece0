"""The paired A/B under pytest-xdist (``--attn-ab`` with ``-n N``): each worker runs its own arms on its own GPU,
the cases spread over the workers, and the controller writes one A/B report and one exit status of them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from factories import attention_suite

#: The controller hands each worker a GPU "UUID", as it does on a GPU host (this CPU has none): the worker pins
#: itself to it (CUDA_VISIBLE_DEVICES) before CUDA starts, and its arms must inherit exactly that one.
FAKE_GPUS = '''
import pytest

from pytest_attn.plugin.handover import GPUS


@pytest.hookimpl(trylast=True)
def pytest_configure_node(node):
    node.workerinput[GPUS] = ["GPU-fake-0", "GPU-fake-1"]
'''


@pytest.mark.slow  # it starts pytest, two workers and each worker's four arm processes
@pytest.mark.parametrize("arms", ["same,same", "same,same+slowdown=50%"], ids=["a-a", "slowdown"])
def test_each_worker_runs_its_cases_on_its_own_gpu_and_the_controller_reports_them_all(tmp_path, arms):
    """Two CPU cases (two problems) under ``-n 2``: the report holds each case once, judged by the one-GPU rule;
    each case's four arm processes saw the GPU of the worker that ran it, and both workers ran one; the exit status
    follows the verdicts; the summary names each worker's GPU."""
    pytest.importorskip("torch")
    (tmp_path / "test_ab_suite.py").write_text(attention_suite("prefill"))
    (tmp_path / "conftest.py").write_text(FAKE_GPUS)
    report = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "--attn-profile=cpu",
         "--attn-backends=sdpa-math", "--attn-max-time=0.2", "-k", "cross and fwd and not fwdbwd",
         f"--attn-ab={arms}", f"--attn-report={report}", "test_ab_suite.py"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    results = json.loads((report / "ab.json").read_text())["results"]
    assert sorted(r["case_id"] for r in results) == ["sdpa-math-tiny-cross-causal-bf16-causal-fwd",
                                                     "sdpa-math-tiny-cross-causal-fp32-causal-fwd"], out
    assert all(r["paired"]["verdict"] in ("SAME", "AMBIGUOUS", "SLOWER", "FASTER") for r in results)
    assert all(len(r["blocks"][0]) == r["paired"]["pairs"] + r["paired"]["dropped"] >= 4 for r in results)
    for r in results:
        gpu = f"GPU-fake-{r['worker'].removeprefix('gw')}"
        assert r["gpu"] == gpu and r["arm_gpus"] == dict.fromkeys(("A1", "A2", "B1", "B2"), gpu), r
    assert sorted(r["worker"] for r in results) == ["gw0", "gw1"]  # one case a GPU
    assert "2 case(s) over 2 workers, longest first, each case's pairs on one worker" in " ".join(out.split()), out
    slowed = "+slowdown" in arms
    assert all(bool(r["plans"][1]) == slowed and not r["plans"][0] for r in results)
    slower = any(r["paired"]["verdict"] == "SLOWER" for r in results)
    assert done.returncode == (1 if slower else 0), out
    summary = (report / "summary.md").read_text()
    for worker in ("gw0", "gw1"):
        line = f"{worker}: its arms' processes on GPU-fake-{worker[2:]}"
        assert line in summary and line in " ".join(out.split()), out
