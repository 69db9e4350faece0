"""A/B arms that die or stop answering: every wait on an arm has a bound from the case (engine.ab.waits); past
it the arm is killed, the case fails naming the replica and what it was doing, and a new process replaces it
for the next case, which sets the case up afresh (never a block to a process that set nothing up)."""

from __future__ import annotations

import json
import os
import signal
import textwrap

import pytest
from factories import attention_suite

from pytest_attn.engine.ab.messages import (
    Block,
    BlockAnswer,
    Finish,
    Finished,
    Handed,
    HandOver,
    Hello,
    Prepare,
    PrepareAnswer,
    Released,
)
from pytest_attn.engine.ab.pairing import PairRule, run_pair
from pytest_attn.engine.ab.processes import ArmError, ArmProcess
from pytest_attn.engine.ab.spec import ArmSpec
from pytest_attn.engine.ab.waits import ArmWaits, CaseWaits, doing


def test_each_wait_is_bounded_by_what_the_case_took_so_far():
    waits = ArmWaits(floor_s=10.0)
    assert waits.start_s() == 300.0  # 6 x 10 s is under the default floor: starting may import and compile
    assert ArmWaits().start_s() == 1800.0  # 6 x 300 s
    case = CaseWaits(waits)
    assert case.setup(first=True) == 300.0 and case.setup(first=False) == 10.0  # nothing taken yet: the floor
    case.took(7.0)
    case.took(3.0)  # the longest counts
    assert case.longest_setup_s == 7.0
    assert case.setup(first=False) == 28.0  # 4 x 7 s
    assert case.block(expected_s=0.03) == 10.0  # the floor
    assert case.block(expected_s=0.5) == 10.0  # 10 x 0.5 s = 5 s, under the floor
    assert case.block(expected_s=2.0) == 20.0  # 10 x 2 s
    assert CaseWaits(ArmWaits(1.0), longest_setup_s=7.0).block(0.03) == 7.0  # at least the longest set-up
    assert case.after() == 28.0
    with pytest.raises(ValueError, match=r"floor_s=0\.0: an arm must be given a positive time"):
        ArmWaits(0.0)


def test_what_an_arm_was_doing_is_said_in_words():
    assert doing(Prepare({}, "t")) == \
        "setting the case up (inputs, the check against the reference, warm-up, the timer)"
    assert doing(Prepare({}, "t", check=False)) == "setting the case up (inputs, warm-up, the timer)"
    assert doing(Prepare({}, "t", replace=True)) == "setting the case up again at a new place"
    assert doing(Block(12)) == "taking a block of 12 sample(s)"
    assert doing(Hello()) == "starting (imports, the GPU, the clock probe)"
    assert doing(Finish()) == "building its record"


class TimedArm:
    """A fake replica on a fake clock whose set-up takes ``setup_s``; it records the bound of each request."""

    def __init__(self, label, clock, bounds, setup_s):
        self.label, self.clock, self.bounds, self.setup_s = label, clock, bounds, setup_s

    def ask(self, request, within_s=None):
        self.bounds.append((self.label, request.op, within_s))
        if isinstance(request, Prepare):
            self.clock[0] += self.setup_s
            return PrepareAnswer(ok=True, timer="kernel-sum", calls_per_sample=1, estimate_s=0.5)
        if isinstance(request, Block):
            self.clock[0] += 0.5 * request.samples
            return BlockAnswer([0.5] * request.samples, [1980] * request.samples, 0.5 * request.samples)
        if isinstance(request, HandOver):
            return Handed()
        return Finished({}) if isinstance(request, Finish) else Released()


def test_the_pairs_give_each_request_its_bound():
    """A1 and B1 set the case up first (they may compile: the start bound); B2 and A2 within 4 x the longest
    set-up so far (A1's 20 s, B1's 30 s); a block of one 0.5 s sample within 10 x that, at least the longest set-up
    (30 s); the records within 4 x it."""
    clock, bounds = [0.0], []
    a = [TimedArm("A1", clock, bounds, 20.0), TimedArm("A2", clock, bounds, 5.0)]
    b = [TimedArm("B1", clock, bounds, 30.0), TimedArm("B2", clock, bounds, 5.0)]
    run_pair(({}, {}), "t", a, b, PairRule(min_pairs=4, max_pairs=4), clock=lambda: clock[0],
             waits=ArmWaits(floor_s=1.0))
    prepares = [(label, s) for label, op, s in bounds if op == "prepare"]
    assert prepares == [("A1", 300.0), ("B1", 300.0), ("B2", 120.0), ("A2", 120.0)]
    assert {s for _, op, s in bounds if op == "block"} == {30.0}  # max(1 s, 10 x 1 sample x 0.5 s, 30 s)
    assert [(label, op, s) for label, op, s in bounds if op in ("hand_over", "finish")] == \
        [("A2", "hand_over", 120.0), ("A1", "finish", 120.0), ("B2", "hand_over", 120.0), ("B1", "finish", 120.0)]


# ---- a real process: a stand-in worker that speaks the protocol without torch ---------------------------
STUB_WORKER = '''
import json, os, sys, time


def main():
    prepared = False
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        if op == "bye":
            return 0
        if op == "hello":
            answer = {"protocol": 3, "pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
        elif op == "prepare":
            prepared, answer = True, {"ok": True, "timer": "stub"}
        elif op == "block":
            if not prepared:
                answer = {"error": "AssertionError: prepare first", "op": op}
            else:
                try:  # the first process to take a block freezes in it
                    os.close(os.open(os.environ["STUB_FREEZE"], os.O_CREAT | os.O_EXCL))
                    while True:
                        time.sleep(60)
                except (KeyError, FileExistsError):
                    pass
                answer = {"times": [0.001] * request["samples"], "wall_s": 0.001}
        else:
            prepared, answer = False, {"ok": True}
        print(json.dumps(answer), flush=True)
    return 0
'''


@pytest.fixture
def stub_arm(tmp_path, monkeypatch):
    """An arm B1 whose worker is :data:`STUB_WORKER` (its folder first on PYTHONPATH, as an arm's folder is)."""
    package = tmp_path / "stub" / "pytest_attn" / "engine" / "ab"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "worker.py").write_text(textwrap.dedent(STUB_WORKER))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # its log
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-stub-3")
    arm = ArmProcess("B1", ArmSpec("stub", path=str(tmp_path / "stub")), Hello(), ArmWaits(floor_s=60.0))
    yield arm
    arm.close()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_an_arm_frozen_in_a_block_is_killed_past_its_bound_and_replaced(stub_arm, tmp_path, monkeypatch):
    monkeypatch.setenv("STUB_FREEZE", str(tmp_path / "froze"))
    assert stub_arm.ask(Prepare({}, "t")).ok
    frozen = stub_arm.about.pid
    with pytest.raises(ArmError) as failed:
        stub_arm.ask(Block(3), within_s=0.5)
    assert str(failed.value).startswith(
        f"arm B1 (B's replica 1, stub; pid {frozen}, CUDA_VISIBLE_DEVICES=GPU-stub-3) did not answer block (taking a"
        " block of 3 sample(s)) within 0.5 s and was killed; the case fails, and a new process replaces it for the"
        " next case (the bound: --attn-ab-arm-timeout)")
    assert _gone(frozen) and stub_arm.alive and not stub_arm.holds  # the replacement, started at once
    with pytest.raises(ArmError, match=r"does not hold the case, before block"):
        stub_arm.ask(Block(3))  # the new process set nothing up: never asked about the case
    assert stub_arm.ask(Prepare({}, "t")).ok and stub_arm.about.pid not in (0, frozen)
    assert stub_arm.ask(Block(2)).times == [0.001, 0.001]  # the next case runs


def test_an_arm_killed_holding_a_case_fails_it_by_name_and_the_next_case_sets_up_afresh(stub_arm):
    """Before: the dead replica was started again and asked for a block it had never set up, and the case failed
    with the worker's internal ``AssertionError: prepare first``."""
    assert stub_arm.ask(Prepare({}, "t")).ok
    killed = stub_arm.about.pid
    os.kill(killed, signal.SIGKILL)
    with pytest.raises(ArmError) as failed:
        stub_arm.ask(Block(3))
    said = str(failed.value)
    assert said.startswith(f"arm B1 (B's replica 1, stub; pid {killed}, CUDA_VISIBLE_DEVICES=GPU-stub-3) was killed"
                           " by SIGKILL "), said
    assert "block (taking a block of 3 sample(s)); the case fails, and a new process replaces it" in said
    assert "prepare first" not in said
    assert stub_arm.ask(Prepare({}, "t")).ok and stub_arm.about.pid != killed
    assert stub_arm.ask(Block(1)).times == [0.001]


def test_an_arm_that_sees_another_gpu_than_its_controller_is_refused(stub_arm, tmp_path, monkeypatch):
    (tmp_path / "stub" / "sitecustomize.py").write_text("import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\n")
    with pytest.raises(ArmError, match=r"arm B1 \(B's replica 1, stub; pid \d+, CUDA_VISIBLE_DEVICES=GPU-stub-3\) was"
                                       r" started with CUDA_VISIBLE_DEVICES=GPU-stub-3 but sees 0: an arm measures on"
                                       r" its controller's GPU only"):
        stub_arm.ask(Prepare({}, "t"))


# ---- the plugin, with real arms: one frozen in its set-up, one frozen in a block, one killed --------------
FAULTY = '''
"""sdpa-math, whose arm freezes or dies where ARM_FAULT says (case id part=mode;...)."""
import fcntl
import os
import signal
import time
from pathlib import Path

from pytest_attn.backends.torch_sdpa import SdpaBackend

FAULTS = dict(part.split("=", 1) for part in os.environ.get("ARM_FAULT", "").split(";") if part)
SEEN = set()


def _fault(mode, match):
    """The 4th arm process to call the case -- A2, as the replicas set it up in the order A1 B1 B2 A2 -- sleeps
    forever in its call (freeze), or stops (SIGSTOP: frozen in its next block) or kills (SIGKILL) the first, A1,
    which holds the case. The pids go to a file, for the test."""
    if match in SEEN:
        return
    SEEN.add(match)
    with open(Path(os.environ["ARM_FAULT_DIR"]) / f"{match}.pids", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(f"{os.getpid()}\\n")
        fh.flush()
        fh.seek(0)
        pids = [int(line) for line in fh.read().split()]
    if len(pids) != 4:
        return
    if mode == "freeze":
        while True:
            time.sleep(60)
    os.kill(pids[0], signal.SIGKILL if mode == "kill" else signal.SIGSTOP)


class Faulty:
    name = "faulty"
    description = "sdpa-math, whose arm freezes or dies where ARM_FAULT says"
    layout = "bhsd"
    needs_cuda = False
    has_backward = True
    default_enabled = True
    empty_rows = "any"

    def __init__(self):
        self._inner = SdpaBackend("math")

    def available(self):
        return None

    def supports(self, case, device):
        return self._inner.supports(case, device)

    def workspace_bytes(self, case):
        return self._inner.workspace_bytes(case)

    def expression(self, case):
        return self._inner.expression(case)

    def prepare(self, case, inputs):
        forward = self._inner.prepare(case, inputs)
        fault = [(mode, match) for match, mode in FAULTS.items() if match in case.id]
        if not fault:
            return forward

        def faulty():
            _fault(*fault[0])
            return forward()

        return faulty


def pytest_attn_register_backends(registry, config):
    registry.register(Faulty())
'''


@pytest.mark.slow  # it starts pytest and the arms' processes
def test_arms_that_freeze_or_die_fail_their_case_by_name_and_later_cases_pass(tmp_path):
    """Six CPU cases in one A/A run, the arms waited for at least 5 s: the 1st case's A1 is killed (SIGKILL) while
    it holds the case, the 3rd case's A2 sleeps forever in its set-up, the 5th case's A1 is stopped (SIGSTOP) and
    so frozen in its block. Each of those cases fails naming the replica, its pid and what it was doing; the
    cases after each pass, judged as usual, and no frozen or killed process is left."""
    import subprocess
    import sys
    from xml.etree import ElementTree

    pytest.importorskip("torch")
    (tmp_path / "test_ab_suite.py").write_text(attention_suite("prefill"))
    (tmp_path / "conftest.py").write_text(FAULTY)
    faults = {"mha-fp32-full-fwd": "kill", "gqa-causal-fp32-causal-fwd": "freeze",
              "cross-causal-fp32-causal-fwd": "stop"}
    env = {**os.environ, "ARM_FAULT": ";".join(f"{k}={v}" for k, v in faults.items()), "ARM_FAULT_DIR": str(tmp_path),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--attn-profile=cpu",
         "--attn-backends=faulty", "--attn-max-time=0.2", "-k", "fwd and not fwdbwd", "--attn-ab=same,same",
         "--attn-ab-arm-timeout=5", f"--attn-report={tmp_path / 'report'}", f"--junitxml={tmp_path / 'junit.xml'}",
         "test_ab_suite.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    cases = {c.get("name").split("[faulty-tiny-")[1].rstrip("]"): c
             for c in ElementTree.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    assert list(cases) == ["mha-fp32-full-fwd", "mha-bf16-full-fwd", "gqa-causal-fp32-causal-fwd",
                           "gqa-causal-bf16-causal-fwd", "cross-causal-fp32-causal-fwd",
                           "cross-causal-bf16-causal-fwd"], out
    failed = {name: c.find("failure").get("message") for name, c in cases.items() if c.find("failure") is not None}
    assert sorted(failed) == sorted(faults), out
    pids = {name: [int(p) for p in (tmp_path / f"{name}.pids").read_text().split()] for name in faults}
    killed = failed["mha-fp32-full-fwd"]
    assert f"arm A1 (A's replica 1, same; pid {pids['mha-fp32-full-fwd'][0]}, no GPU pinned) was killed by SIGKILL" \
        in killed and "block (taking a block of" in killed and "prepare first" not in out, killed
    frozen = failed["gqa-causal-fp32-causal-fwd"]
    assert f"arm A2 (A's replica 2, same; pid {pids['gqa-causal-fp32-causal-fwd'][3]}, no GPU pinned) did not answer" \
           " prepare (setting the case up (inputs, warm-up, the timer)) within " in frozen, frozen
    stopped = failed["cross-causal-fp32-causal-fwd"]
    assert f"arm A1 (A's replica 1, same; pid {pids['cross-causal-fp32-causal-fwd'][0]}, no GPU pinned) did not" \
           " answer block (taking a block of " in stopped and "and was killed; the case fails" in stopped, stopped
    results = json.loads((tmp_path / "report" / "ab.json").read_text())["results"]
    assert sorted(r["case_id"].removeprefix("faulty-tiny-") for r in results) == \
        ["cross-causal-bf16-causal-fwd", "gqa-causal-bf16-causal-fwd", "mha-bf16-full-fwd"]
    assert all(r["paired"]["verdict"] in ("SAME", "AMBIGUOUS", "SLOWER", "FASTER") for r in results)
    assert done.returncode == 1, out  # three failed cases
    assert all(_gone(pid) for held in pids.values() for pid in held)  # the run closed or killed every one


def test_the_floor_is_an_option(pytester):
    from pytest_attn.plugin.ab import ab_run

    config = pytester.parseconfigure("--attn-ab=same,same", "--attn-ab-arm-timeout=7.5")
    assert ab_run(config).waits == ArmWaits(floor_s=7.5)
    assert ab_run(pytester.parseconfigure("--attn-ab=same,same")).waits == ArmWaits(floor_s=300.0)
    result = pytester.runpytest_inprocess("--attn-ab=same,same", "--attn-ab-arm-timeout=0")
    assert "--attn-ab-arm-timeout must be positive, got '0'" in result.stderr.str()
