"""Run several validation commands at once on a machine with several GPUs, one command per GPU, each in its own
copy of this checkout (its own ``.benchmarks/`` history and reports; the FA4 and FlashInfer kernel caches are
copied in from the checkout, so a warm cache serves every copy), each under a time limit, and print each one's
exit status, wall time and verdict lines.

    python scripts/on_gpus.py --out runs/ --timeout 560 \\
        "clean1: pytest suites/test_prefill.py suites/test_decode.py suites/test_varlen.py $SEL" \\
        "clean2: pytest suites/test_prefill.py suites/test_decode.py suites/test_varlen.py $SEL" \\
        "aa-prefill: pytest suites/test_prefill.py $SEL --attn-ab=same,same" \\
        "aa-dv: pytest suites/test_decode.py suites/test_varlen.py $SEL --attn-ab=same,same"

Each argument is ``NAME: COMMAND`` (run by the shell; ``$OUTDIR`` is that command's folder under ``--out``, where
its log goes). Commands beyond the GPUs wait for one to come free. This is how the measured false-alarm rates of
docs/gate.md and docs/ab.md are taken in one sitting: a fresh GPU per run, all of them at once. A process ended by
its limit gets SIGTERM first, so the plugin keeps what it measured (marked partial).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHES = (".fa4cache", ".ficache")
SKIP = {".git", ".benchmarks", "reports", ".whl", ".pytest_cache", ".hypothesis", "__pycache__", ".venv", "runs"}
VERDICTS = re.compile(r"^(against |paired A/B |== |\d+ case\(s\) |=+ .*(passed|failed|error))")


@dataclass
class Job:
    name: str
    command: str
    folder: Path
    gpu: str = ""
    started: float = 0.0
    process: subprocess.Popen[bytes] | None = None
    status: int | None = None
    seconds: float = 0.0
    lines: list[str] = field(default_factory=list)


def parse(spec: str, out: Path) -> Job:
    name, sep, command = spec.partition(":")
    name = name.strip()
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not command.strip():
        raise SystemExit(f"on_gpus.py: {spec!r} is not NAME: COMMAND (a name of letters, digits, '.', '_' or '-')")
    return Job(name, command.strip(), out / name)


def copy_checkout(dest: Path) -> None:
    """The checkout without its history and outputs, and the kernel caches as they are now."""
    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n in SKIP and n not in CACHES}

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)


def start(job: Job, gpu: str, work: Path) -> None:
    job.folder.mkdir(parents=True, exist_ok=True)
    copy_checkout(work)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu, OUTDIR=str(job.folder), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work), env.get("PYTHONPATH", "")]))
    log = (job.folder / "log.txt").open("wb")
    job.gpu, job.started = gpu, time.monotonic()
    job.process = subprocess.Popen(job.command, shell=True, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)


def finish(job: Job) -> None:
    assert job.process is not None
    job.status = job.process.returncode
    job.seconds = time.monotonic() - job.started
    text = (job.folder / "log.txt").read_text(errors="replace")
    job.lines = [line for line in text.splitlines() if VERDICTS.search(line)][-6:]


def stop(job: Job) -> None:
    """SIGTERM (the plugin keeps what it measured), then SIGKILL 30 s later."""
    assert job.process is not None
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 5)):
        try:
            os.killpg(job.process.pid, sig)
            job.process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def run(jobs: list[Job], gpus: list[str], timeout_s: float, scratch: Path) -> list[Job]:
    waiting, running, free = list(jobs), [], list(gpus)
    while waiting or running:
        while waiting and free:
            job = waiting.pop(0)
            start(job, free.pop(0), scratch / job.name)
            running.append(job)
        time.sleep(0.5)
        for job in list(running):
            assert job.process is not None
            if job.process.poll() is None and time.monotonic() - job.started > timeout_s:
                stop(job)
            if job.process.poll() is not None:
                finish(job)
                running.remove(job)
                free.append(job.gpu)
                print(f"== {job.name} (GPU {job.gpu}): exit {job.status}, {job.seconds:.0f} s", flush=True)
                for line in job.lines:
                    print(f"   {line}", flush=True)
    return jobs


def visible_gpus() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commands", nargs="+", help="NAME: COMMAND, one per run")
    parser.add_argument("--out", type=Path, required=True, help="a folder: one sub-folder (and log.txt) per run")
    parser.add_argument("--timeout", type=float, default=560.0, help="seconds each run may take (default 560)")
    parser.add_argument("--gpus", default="", help="GPU indices to use, e.g. 0,1 (default: every one nvidia-smi"
                                                   " lists)")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/on_gpus"), help="where the copies go")
    args = parser.parse_args(argv)
    gpus = [g for g in args.gpus.split(",") if g] or visible_gpus()
    if not gpus:
        raise SystemExit("on_gpus.py: no GPU: nvidia-smi listed none and --gpus named none")
    jobs = [parse(spec, args.out.resolve()) for spec in args.commands]
    if len({j.name for j in jobs}) != len(jobs):
        raise SystemExit("on_gpus.py: two runs share a name; each needs its own folder")
    shutil.rmtree(args.scratch, ignore_errors=True)
    done = run(jobs, gpus, args.timeout, args.scratch)
    return max((j.status or 0 for j in done), default=0) and 1


if __name__ == "__main__":
    sys.exit(main())
