"""The A/B's messages (pytest_attn.engine.ab.messages): every request and answer survives its JSON line, a
request's answer comes back as its own type, and what a worker cannot answer is an error, not a dict."""

from __future__ import annotations

import io
import json

import pytest

from pytest_attn.engine.ab import worker
from pytest_attn.engine.ab.messages import (
    ANSWERS,
    Block,
    BlockAnswer,
    Finish,
    Handed,
    HandOver,
    Hello,
    HelloAnswer,
    Prepare,
    PrepareAnswer,
    Release,
    Released,
    WorkerError,
    answer_of,
    request_of,
    to_line,
)

REQUESTS = [Hello({"timer": "auto"}, ["/p/conftest.py"], 0.02), Prepare({"backend": "x"}, "t", {"timer": "cpu"}, False),
            Block(7, warm=False), HandOver(), Finish("precision", False, [Handed([1.0], [None], [None], 1.0)]),
            Release()]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: r.op)
def test_every_request_survives_its_line(request_):
    line = to_line(request_)
    assert json.loads(line)["op"] == request_.op
    assert request_of(line) == request_


def test_an_answer_comes_back_as_its_request_s_type():
    sent = BlockAnswer([1e-4, 2e-4], [1980, None], 0.01, 1712.5)
    got = answer_of(Block(2), to_line(sent))
    assert got == sent and isinstance(got, BlockAnswer)
    assert answer_of(Prepare(), '{"ok": true, "timer": "kernel-sum", "a_newer_field": 1}') == \
        PrepareAnswer(ok=True, timer="kernel-sum")  # a newer peer's extra field is left out
    assert set(ANSWERS) == {type(r) for r in REQUESTS}
    with pytest.raises(WorkerError, match="ValueError: no case"):
        answer_of(Block(1), '{"error": "ValueError: no case", "op": "block"}')
    assert request_of('{"op": "bye"}') is None
    with pytest.raises(ValueError, match="no request 'dance'"):
        request_of('{"op": "dance"}')


def test_the_worker_answers_each_line_and_an_error_keeps_it_up():
    """A request the worker cannot answer (here: a block before any prepare) comes back as an error line naming
    the request; the next is answered; ``bye`` ends it."""
    from factories import CPU

    from pytest_attn.engine.nvml import NoNvml

    arm = worker.Arm(lambda: (CPU, NoNvml("a test")))
    out = io.StringIO()
    lines = [to_line(Hello()), to_line(Block(1)), to_line(Release()), '{"op": "bye"}', to_line(Release())]
    worker.serve(lines, out, arm)
    answers = out.getvalue().splitlines()
    assert len(answers) == 3  # nothing after bye
    hello = answer_of(Hello(), answers[0])
    assert isinstance(hello, HelloAnswer) and hello.clock == "no GPU" and hello.protocol == 3
    error = json.loads(answers[1])
    assert error["op"] == "block" and error["error"].startswith("AssertionError: prepare first")
    assert json.loads(answers[2]) == {"ok": True}


def test_an_arm_with_an_older_pytest_attn_is_told_by_its_protocol(tmp_path):
    """An arm's folder holds a pytest-attn from before the A/B had a package (its worker at ``engine.arm``,
    protocol 2): the worker still starts, and the hello names both protocols and the fix."""
    from pytest_attn.engine.ab.processes import ArmError, ArmProcess
    from pytest_attn.engine.ab.spec import ArmSpec

    old = tmp_path / "old" / "pytest_attn" / "engine"
    old.mkdir(parents=True)
    (old.parent / "__init__.py").write_text("")
    (old / "__init__.py").write_text("")
    (old / "arm.py").write_text(
        "import json, sys\n"
        "def main():\n"
        "    for line in sys.stdin:\n"
        "        if json.loads(line).get('op') == 'bye':\n"
        "            return 0\n"
        "        print(json.dumps({'protocol': 2, 'pytest_attn': 'the old one'}), flush=True)\n"
        "    return 0\n")
    arm = ArmProcess("A1", ArmSpec("old", path=str(tmp_path / "old")), Hello())
    try:
        with pytest.raises(ArmError, match=r"runs the pytest-attn in the old one, which speaks A/B protocol 2"
                                           r" where this one speaks 3: install the same pytest-attn"):
            arm.ask(Release())
    finally:
        arm.close()


@pytest.mark.e2e  # four real arm processes, each importing torch
def test_arms_start_together_and_touch_the_gpu_in_the_order_of_their_first_request(tmp_path, monkeypatch):
    """The four replicas' processes are started at once, each importing torch and the run's back ends as it
    comes up (an H100 A/A spent ~30 s of its first case starting them one after another); hello -- the GPU --
    waits for each one's first request. A worker is said hello to once, and again only once it was restarted."""
    from pytest_attn.engine.ab.processes import ArmProcess
    from pytest_attn.engine.ab.spec import ArmSpec

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    arms = [ArmProcess(f"{x}{k}", ArmSpec("same"), Hello()) for x in "AB" for k in (1, 2)]
    try:
        for arm in arms:
            arm.spawn(["sdpa-math", "not-a-back-end"])
        assert all(arm._proc is not None and arm.about is None for arm in arms)
        first = arms[0]._proc
        arms[0].spawn(["sdpa-math"])  # running already: no second process
        assert arms[0]._proc is first
        assert arms[0].ask(Release()) == Released() and arms[0].about is not None
        assert [arm.about is not None for arm in arms] == [True, False, False, False]
        about = arms[0].about
        arms[0].ask(Release())
        assert arms[0].about is about  # no second hello
    finally:
        for arm in arms:
            arm.close()


def test_a_worker_preloads_what_it_can_and_names_what_it_cannot():
    from pytest_attn.engine.ab.worker import preload

    assert preload("") == [] and preload("sdpa-math") == []
    assert preload("sdpa-math,not-a-back-end") == ["not-a-back-end"]


def test_a_worker_without_a_gpu_takes_its_controller_s_cpu_thread_count():
    """The arms ran with torch's default, a thread per core in each of four processes, where the controller had
    chosen half the cores (engine.threads): the controller hands its own count to its arms, which take it on a CPU."""
    import types

    import torch

    from pytest_attn.engine.ab.messages import THREADS_ENV
    from pytest_attn.engine.ab.processes import cpu_threads_env
    from pytest_attn.engine.ab.worker import take_cpu_threads

    def fake_torch(gpu: bool) -> types.SimpleNamespace:
        return types.SimpleNamespace(get_num_threads=lambda: 3, cuda=types.SimpleNamespace(is_available=lambda: gpu))

    assert cpu_threads_env(fake_torch(gpu=False)) == {THREADS_ENV: "3"}
    assert cpu_threads_env(fake_torch(gpu=True)) == {} == cpu_threads_env(None)  # a GPU arm keeps torch's own count
    before = torch.get_num_threads()
    try:
        assert take_cpu_threads("1") == 1 == torch.get_num_threads()
        assert take_cpu_threads("") is None and take_cpu_threads("zero") is None and take_cpu_threads("0") is None
    finally:
        torch.set_num_threads(before)
