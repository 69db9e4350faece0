"""The controller's side of an A/B arm: the worker process (:mod:`.worker`) started in the arm's environment,
asked one typed request at a time (:mod:`.messages`, a JSON line each), stopped at the end.

The worker imports pytest-attn as its environment has it (an arm whose folder is a pytest-attn checkout
runs that checkout's back-end adapters); where the environment has none, this pytest-attn's folder is
appended to its ``sys.path`` -- after its site-packages, so its own libraries still come first. Its
stderr (library messages, compiler output) goes to a log file, whose last lines an error quotes.

Every wait on a worker has a bound (:mod:`.waits`); a worker past it is killed, one that died is noticed, and
either way the case fails naming the replica (A or B, which one, its pid and GPU) and what it was doing, and a
new process replaces it for the next case.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest_attn

from .messages import (
    BYE,
    NO_ROOM,
    PRELOAD_ENV,
    PROTOCOL,
    THREADS_ENV,
    A,
    Asking,
    Hello,
    HelloAnswer,
    Prepare,
    PrepareAnswer,
    Request,
    WorkerError,
    answer_of,
    to_line,
)
from .spec import ArmSpec
from .waits import DEFAULT_WAITS, ArmWaits, doing

#: ``python -c BOOT PYTEST_ATTN_PARENT``: no current folder first on sys.path (``-c`` would put it there,
#: ahead of the arm's PYTHONPATH), this pytest-attn as the last resort. A pytest-attn from before the A/B had a
#: package of its own keeps its worker at ``engine.arm``: started there, it names its protocol at hello.
BOOT = ("import sys; del sys.path[0]; sys.path.append(sys.argv[1])\n"
        "try:\n    from pytest_attn.engine.ab.worker import main\n"
        "except ModuleNotFoundError:\n    from pytest_attn.engine.arm import main\n"
        "raise SystemExit(main())")
LOG_LINES = 15
#: The requests about the case a replica's process set up: never sent to a process started since.
ABOUT_THE_CASE = ("block", "hand_over", "finish")
#: How long a process killed (or one whose output ended) is waited for.
KILL_WAIT_S = 30.0


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


def cpu_threads_env(torch: Any) -> dict[str, str]:
    """The controller's torch CPU thread count for its arms (:data:`.messages.THREADS_ENV`) in a run without a GPU;
    {} with one (an arm there keeps torch's own count) or where the controller has not imported torch."""
    if torch is None or torch.cuda.is_available():
        return {}
    return {THREADS_ENV: str(torch.get_num_threads())}


def arm_environment(spec: ArmSpec, base: dict[str, str]) -> dict[str, str]:
    """The worker's environment: ``base`` with the arm's folder first on PYTHONPATH. Pure."""
    env = dict(base)
    if spec.path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [spec.path, base.get("PYTHONPATH", "")]))
    return env


class ArmProcess:
    """One arm's replica: its worker process, started at once (:meth:`spawn`), said hello to at its first
    request, and replaced when it dies or stops answering. Every wait on it has a bound (``within_s``, else
    :mod:`.waits`'s floor); past it the process is killed. Either way the request fails with an
    :class:`ArmError` naming the replica, its pid and GPU and what it was doing, and -- where it held a case --
    a new process is started at once for the next case: one started since a case was set up is never asked
    about that case (it would not know it)."""

    def __init__(self, label: str, spec: ArmSpec, hello: Hello, waits: ArmWaits = DEFAULT_WAITS,
                 preload: Sequence[str] = ()) -> None:
        self.label = label
        self.spec = spec
        self.waits = waits
        self._hello = hello
        self._preload = list(preload)  # the back ends whose libraries a new process imports as it starts
        self.about: HelloAnswer | None = None  # the worker's answer to hello: interpreter, versions, device
        self.log = Path(tempfile.gettempdir()) / f"pytest-attn-arm-{label}-{os.getpid()}.log"
        self._proc: subprocess.Popen[str] | None = None
        self._pid = 0  # the last process's, for the messages
        self._visible: str | None = None  # the CUDA_VISIBLE_DEVICES it was started with
        self.holds = False  # its process holds a case (set up, not yet released)

    def spawn(self, preload: Sequence[str] | None = None) -> None:
        """Start the worker's process where none runs, without a word to it: it imports torch and the
        libraries of the back ends ``preload`` names (those named last, for a replacement) while the other
        arms' processes start too (an H100's A/A spent ~30 s of its first case starting four workers one after
        another). What touches the GPU waits for hello, which goes to each replica in the order of its first
        request."""
        if preload is not None:
            self._preload = list(preload)
        if self.alive:
            return
        parent = str(Path(pytest_attn.__file__).resolve().parents[1])
        python = self.spec.python or sys.executable
        env = arm_environment(self.spec, dict(os.environ))
        env[PRELOAD_ENV] = ",".join(self._preload)
        env.update(cpu_threads_env(sys.modules.get("torch")))
        log = self.log.open("a")
        try:
            self._proc = subprocess.Popen([python, "-c", BOOT, parent], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=log, text=True, env=env)
        except OSError as exc:
            raise ArmError(f"arm {self.label} ({self.spec.text}): cannot start {python}: {exc}") from None
        finally:
            log.close()
        self.about, self.holds = None, False
        self._pid, self._visible = self._proc.pid, env.get("CUDA_VISIBLE_DEVICES")

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def who(self) -> str:
        """The replica in words: which arm, which of its processes, on which GPU."""
        gpu = (f"GPU {self.about.uuid}" if self.about is not None and self.about.uuid
               else f"CUDA_VISIBLE_DEVICES={self._visible}" if self._visible is not None else "no GPU pinned")
        return (f"arm {self.label} ({self.label[:1]}'s replica {self.label[1:] or '?'}, {self.spec.text}; pid"
                f" {self._pid or '-'}, {gpu})")

    def _start(self) -> None:
        if not self.alive:
            self.spawn()
        try:
            about = self._exchange(self._hello, self.waits.start_s())
        except ArmError:
            self.close()  # a worker that could not say hello is no worker: the next case starts another
            raise
        problem = self._refusal(about)
        if problem:
            self.close()
            raise ArmError(f"{self.who()} {problem}")
        self.about = about

    def _refusal(self, about: HelloAnswer) -> str:
        """Why a worker that said hello cannot be an arm of this run, or ""."""
        if about.protocol != PROTOCOL:
            return (f"runs the pytest-attn in {about.pytest_attn or '?'}, which speaks A/B protocol {about.protocol}"
                    f" where this one speaks {PROTOCOL}: install the same pytest-attn in both arms' environments, or"
                    " leave it out of the arm's")
        if about.visible is not None and about.visible != self._visible:
            return (f"was started with CUDA_VISIBLE_DEVICES={self._visible} but sees {about.visible}: an arm"
                    " measures on its controller's GPU only (does the arm's environment set CUDA_VISIBLE_DEVICES, in"
                    " a sitecustomize or its activation?)")
        return ""

    def ask(self, request: Asking[A], within_s: float | None = None) -> A:
        """The worker's answer to ``request`` within ``within_s`` (else the floor of :mod:`.waits`); started,
        and said hello to, first where that is not done -- unless the request is about the case its process
        set up (a block, a hand-over, the record, a new place), which a new process would not know."""
        op = request.op
        if op in ABOUT_THE_CASE or (isinstance(request, Prepare) and request.replace):
            if not (self.alive and self.holds):
                raise self._lost(request)  # type: ignore[arg-type]
        elif not self.alive or self.about is None:
            self._start()
        try:
            answer = self._exchange(request, within_s)  # type: ignore[arg-type]  # every Asking is a Request
        except ArmError:
            if self._proc is None:  # it died or was killed: a new process for the next case, importing now
                with contextlib.suppress(ArmError):
                    self.spawn()
            raise
        if isinstance(answer, PrepareAnswer):
            kept = isinstance(request, Prepare) and request.replace and answer.skip.startswith(NO_ROOM)
            self.holds = answer.ok or kept
        elif op in ("hand_over", "finish", "release"):
            self.holds = False
        return answer  # type: ignore[no-any-return]

    def _exchange(self, request: Request, within_s: float | None) -> Any:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        bound = self.waits.floor_s if within_s is None else within_s
        try:
            proc.stdin.write(to_line(request) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(request) from None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(bound):
                who, stuck = self.who(), self._kill()
                raise ArmError(f"{who} did not answer {request.op} ({doing(request)}) within {bound:.4g} s and was"
                               f" killed{stuck}; the case fails, and a new process replaces it for the next case"
                               f" (the bound: --attn-ab-arm-timeout){self._tail()}")
        line = proc.stdout.readline()
        if not line:
            raise self._died(request)
        try:
            return answer_of(request, line)
        except WorkerError as exc:
            raise ArmError(f"{self.who()}: {request.op} failed: {exc}{self._tail()}") from None

    def _kill(self) -> str:
        """Kill the process (it ignores SIGTERM; a stopped one dies too); "" or what did not go as it should."""
        proc, self._proc, self.holds = self._proc, None, False
        if proc is None:
            return ""
        proc.kill()
        try:
            proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            return f" (it had not exited {KILL_WAIT_S:.0f} s after SIGKILL: stuck in the driver?)"
        finally:
            _close_pipes(proc)
        return ""

    def _died(self, request: Request) -> ArmError:
        proc, self._proc, self.holds = self._proc, None, False
        code: int | None = None
        if proc is not None:
            try:
                code = proc.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
            _close_pipes(proc)
        return ArmError(f"{self.who()} {_ended(code)} during {request.op} ({doing(request)}); the case fails, and a"
                        f" new process replaces it for the next case{self._tail()}")

    def _lost(self, request: Request) -> ArmError:
        """A request about the case, to a replica whose process is gone (or a new one, which never set it up)."""
        proc = self._proc
        code = proc.poll() if proc is not None else None
        gone = "does not hold the case" if self.alive else \
            f"{_ended(code)} while it held the case" if proc is not None else "was stopped while it held the case"
        error = ArmError(f"{self.who()} {gone}, before {request.op} ({doing(request)}); the case fails, and a new"
                         f" process replaces it for the next case{self._tail()}")
        if proc is not None and not self.alive:
            self._proc = None
            _close_pipes(proc)
        self.holds = False
        with contextlib.suppress(ArmError):
            self.spawn()  # the next case's process, importing now
        return error

    def _tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-LOG_LINES:]
        except OSError:
            return ""
        return f"\nthe end of its log ({self.log}):\n" + "\n".join(f"  {x}" for x in lines) if lines else ""

    def close(self) -> None:
        """Ask the worker to stop; kill it if it does not within 10 s (and leave it, should it outlive SIGKILL by
        :data:`KILL_WAIT_S`: stuck in the driver). Safe to call twice."""
        proc, self._proc, self.holds = self._proc, None, False
        if proc is None:
            return
        try:
            if proc.poll() is None and proc.stdin is not None:
                proc.stdin.write(BYE + "\n")
                proc.stdin.close()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_WAIT_S)
        finally:
            _close_pipes(proc)


def _ended(code: int | None) -> str:
    """How a process ended, from its exit status. Pure."""
    if code is None:
        return "died"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited (status {code})"


def _close_pipes(proc: subprocess.Popen[str]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        with contextlib.suppress(OSError):
            if pipe is not None:
                pipe.close()
