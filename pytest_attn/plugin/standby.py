"""A second look's process started ahead (:mod:`.second_look` decides when): a child on one GPU that does its start-up
-- Python, torch, pytest, the plugins, the collection -- while the run still measures, then waits on a pipe for the
path of its request. About 5 s of a fresh child's 7.7 s were that start-up, which ``-n N`` cannot divide (each GPU's
child starts at once); started ahead, it was done 3.3-4.2 s after its request (docs/gpu-validation.md, the sixteenth
and seventeenth sessions).

The pipe is the child's only tie to the run: the run writes the request's path and closes it; a run that ends without
needing the child closes it empty (or dies, and the system closes it), and the child exits without measuring. Before
its request it runs nothing on the GPU: its collection, like any, leaves CUDA alone, though a back end's library may
start CUDA as it is imported (FlashInfer reads each GPU's compute capability).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

FD_PREFIX = "fd:"  # the child's request variable: "fd:N", its request's path arrives on file descriptor N


@dataclass
class Standby:
    """A child started ahead, on ``gpu``: its folder (its log, and later its request and records), the process and
    the write end of its pipe (None once handed or closed)."""

    gpu: str
    folder: Path
    process: Any
    log: Any
    pipe: int | None


STANDBYS = pytest.StashKey["dict[str, Standby]"]()  # the run's children started ahead, by GPU


def _popen(command: list[str], env: dict[str, str], cwd: Path, log: Any, fd: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=(fd,))


#: How a child is started ahead (tests replace it): (command, environment, folder, log, the pipe's read end) -> an
#: object with ``wait(timeout)``, ``poll()``, ``kill()`` and ``pid``.
START = _popen


def start(config: pytest.Config, gpu: str, command: list[str], env: dict[str, str], variable: str) -> Standby:
    """A child on ``gpu`` started now with ``env``, told through ``variable`` which descriptor its request comes on."""
    folder = Path(tempfile.mkdtemp(prefix="pytest-attn-second-look-"))
    read, write = os.pipe()
    log = open(folder / "log.txt", "wb")  # noqa: SIM115 (closed by close() or by the second look's wait)
    held = config.stash.setdefault(STANDBYS, {})
    try:
        held[gpu] = Standby(gpu, folder, START(command, {**env, variable: f"{FD_PREFIX}{read}"},
                                                config.invocation_params.dir, log, read), log, write)
    except BaseException:
        os.close(write)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        os.close(read)
    return held[gpu]


def started(config: pytest.Config) -> dict[str, Standby]:
    return config.stash.get(STANDBYS, {})


def take(config: pytest.Config, gpu: str) -> Standby | None:
    """The child started ahead on ``gpu``, if one is and it is still running (else it is closed: its cases go to a
    fresh one)."""
    standby = config.stash.get(STANDBYS, {}).pop(gpu, None)
    if standby is not None and standby.process.poll() is not None:
        close(standby)
        return None
    return standby


def hand(standby: Standby, request: Path) -> None:
    """The request's path to the child, and the pipe closed: it goes on from its collection. A child that has just
    died reads nothing; its exit status and log say why (the second look's wait)."""
    pipe, standby.pipe = standby.pipe, None
    if pipe is None:
        return
    try:
        os.write(pipe, os.fsencode(str(request)))
    except OSError:  # BrokenPipeError: it ended before reading
        pass
    finally:
        os.close(pipe)


def close(standby: Standby) -> None:
    """A child the run does not need: its pipe closed, its process group killed (it may be starting still), its folder
    removed."""
    if standby.pipe is not None:
        os.close(standby.pipe)
        standby.pipe = None
    if standby.process.poll() is None:
        stop(standby.process)
    standby.process.wait()
    standby.log.close()
    shutil.rmtree(standby.folder, ignore_errors=True)


def stop(process: Any) -> None:
    """A second look's child and whatever it started (a kernel library's compiler): its own process group."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (AttributeError, OSError):
        process.kill()


def close_all(config: pytest.Config) -> None:
    """Every child still waiting: none is left behind, whatever ended the run."""
    for standby in config.stash.get(STANDBYS, {}).values():
        close(standby)
    config.stash[STANDBYS] = {}
