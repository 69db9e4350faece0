"""The controller's side of an A/B arm: the worker process (:mod:`.worker`) started in the arm's environment,
asked one typed request at a time (:mod:`.messages`, a JSON line each), stopped at the end.

The worker imports pytest-attn as its environment has it (an arm whose folder is a pytest-attn checkout
runs that checkout's back-end adapters); where the environment has none, this pytest-attn's folder is
appended to its ``sys.path`` -- after its site-packages, so its own libraries still come first. Its
stderr (library messages, compiler output) goes to a log file, whose last lines an error quotes.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest_attn

from .messages import (
    BYE,
    PRELOAD_ENV,
    PROTOCOL,
    A,
    Asking,
    Hello,
    HelloAnswer,
    Request,
    WorkerError,
    answer_of,
    to_line,
)
from .spec import ArmSpec

#: ``python -c BOOT PYTEST_ATTN_PARENT``: no current folder first on sys.path (``-c`` would put it there,
#: ahead of the arm's PYTHONPATH), this pytest-attn as the last resort. A pytest-attn from before the A/B had a
#: package of its own keeps its worker at ``engine.arm``: started there, it names its protocol at hello.
BOOT = ("import sys; del sys.path[0]; sys.path.append(sys.argv[1])\n"
        "try:\n    from pytest_attn.engine.ab.worker import main\n"
        "except ModuleNotFoundError:\n    from pytest_attn.engine.arm import main\n"
        "raise SystemExit(main())")
TIMEOUTS_S = {"hello": 300.0, "prepare": 1800.0, "block": 600.0, "finish": 600.0, "release": 120.0}
LOG_LINES = 15


class ArmError(Exception):
    """An arm died, hung, or answered with an error; the message names the arm and quotes its log."""


#: What :func:`probe_environment` runs in an arm's environment: the libraries an arm cannot work without.
PROBE = ("import sys; del sys.path[0]; sys.path.append(sys.argv[1]); import json, torch, pytest_attn; "
         "print(json.dumps({'python': sys.executable, 'torch': torch.__version__}))")


def probe_environment(spec: ArmSpec, timeout_s: float = 120.0) -> str:
    """Why an arm's environment cannot run an arm (not a Python, no torch, pytest-attn not importable), or "".
    At start-up, in a few seconds: otherwise every case fails in turn, its worker started again each time."""
    if not spec.python and not spec.path:
        return ""  # this environment: it runs the controller already
    python = spec.python or sys.executable
    parent = str(Path(pytest_attn.__file__).resolve().parents[1])
    try:
        done = subprocess.run([python, "-c", PROBE, parent], capture_output=True, text=True, timeout=timeout_s,
                              env=arm_environment(spec, dict(os.environ)))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} cannot be run as Python ({type(exc).__name__}: {exc})"
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["(no output)"])[-1]
        return f"{python} cannot run an arm: {tail[:300]}"
    if not done.stdout.strip().startswith("{"):
        return (f"{python} ran, but printed {done.stdout.strip()[:80]!r} where a Python with torch and pytest-attn"
                " prints their versions: is it a Python?")
    return ""


def arm_environment(spec: ArmSpec, base: dict[str, str]) -> dict[str, str]:
    """The worker's environment: ``base`` with the arm's folder first on PYTHONPATH. Pure."""
    env = dict(base)
    if spec.path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [spec.path, base.get("PYTHONPATH", "")]))
    return env


class ArmProcess:
    """One arm's worker, started on first use and again after it died."""

    def __init__(self, label: str, spec: ArmSpec, hello: Hello) -> None:
        self.label = label
        self.spec = spec
        self._hello = hello
        self.about: HelloAnswer | None = None  # the worker's answer to hello: interpreter, versions, device
        self.log = Path(tempfile.gettempdir()) / f"pytest-attn-arm-{label}-{os.getpid()}.log"
        self._proc: subprocess.Popen[str] | None = None

    def spawn(self, preload: Sequence[str] = ()) -> None:
        """Start the worker's process where none runs, without a word to it: it imports torch and the
        libraries of the back ends named in ``preload`` while the other arms' processes start too (an H100's
        A/A spent ~30 s of its first case starting four workers one after another). What touches the GPU
        waits for hello, which goes to each replica in the order of its first request."""
        if self._proc is not None and self._proc.poll() is None:
            return
        parent = str(Path(pytest_attn.__file__).resolve().parents[1])
        python = self.spec.python or sys.executable
        env = arm_environment(self.spec, dict(os.environ))
        env[PRELOAD_ENV] = ",".join(preload)
        log = self.log.open("a")
        try:
            self._proc = subprocess.Popen([python, "-c", BOOT, parent], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=log, text=True, env=env)
        except OSError as exc:
            raise ArmError(f"arm {self.label} ({self.spec.text}): cannot start {python}: {exc}") from None
        finally:
            log.close()
        self.about = None

    def _start(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self.spawn()
        try:
            about = self._exchange(self._hello)
        except ArmError:
            self.close()  # a worker that could not say hello is no worker: the next case starts another
            raise
        if about.protocol != PROTOCOL:
            self.close()
            raise ArmError(f"arm {self.label} ({self.spec.text}) runs the pytest-attn in {about.pytest_attn or '?'},"
                           f" which speaks A/B protocol {about.protocol} where this one speaks {PROTOCOL}: install"
                           " the same pytest-attn in both arms' environments, or leave it out of the arm's")
        self.about = about

    def ask(self, request: Asking[A]) -> A:
        """The worker's answer to ``request`` (started, and said hello to, first where that is not done)."""
        if self._proc is None or self._proc.poll() is not None or self.about is None:
            self._start()
        return self._exchange(request)  # type: ignore[arg-type]  # every Asking is a Request

    def _exchange(self, request: Request) -> Any:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        op = request.op
        try:
            proc.stdin.write(to_line(request) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(op) from None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(TIMEOUTS_S.get(op, 600.0)):
                self.close()
                raise ArmError(f"arm {self.label} ({self.spec.text}) did not answer {op} within"
                               f" {TIMEOUTS_S.get(op, 600.0):.0f} s and was stopped{self._tail()}")
        line = proc.stdout.readline()
        if not line:
            raise self._died(op)
        try:
            return answer_of(request, line)
        except WorkerError as exc:
            raise ArmError(f"arm {self.label} ({self.spec.text}): {op} failed: {exc}{self._tail()}") from None

    def _died(self, op: str) -> ArmError:
        proc = self._proc
        code = proc.wait(timeout=30) if proc is not None else None
        self._proc = None
        return ArmError(f"arm {self.label} ({self.spec.text}) exited (status {code}) during {op}; it is started"
                        f" again for the next case{self._tail()}")

    def _tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-LOG_LINES:]
        except OSError:
            return ""
        return f"\nthe end of its log ({self.log}):\n" + "\n".join(f"  {x}" for x in lines) if lines else ""

    def close(self) -> None:
        """Ask the worker to stop; kill it if it does not within 10 s. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None and proc.stdin is not None:
                proc.stdin.write(BYE + "\n")
                proc.stdin.close()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
