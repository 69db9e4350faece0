"""Run a GitHub workflow as written -- by default .github/workflows/gpu-benchmarks.yml -- on one host with several
GPUs: its shard jobs, each on its own share of the GPUs (``CUDA_VISIBLE_DEVICES``), then the merge job, with the
variables a runner sets, so that a change to the workflow is what gets tested, not a copy of it.

    python scripts/run_workflow.py --skip-install --out /tmp/wf          # every job the event runs, on every GPU
    python scripts/run_workflow.py --dry-run --gpus 0,1,2,3              # the plan: jobs, GPUs, steps, commands
    python scripts/run_workflow.py --dry-run --event pull_request --fork --label gpu-ok

What a runner does and this script does too: each job in its own folder (``GITHUB_WORKSPACE``), its ``run:``
steps through ``bash -e`` with ``GITHUB_OUTPUT``, ``GITHUB_ENV``, ``GITHUB_PATH``, ``GITHUB_STEP_SUMMARY``,
``RUNNER_TEMP``, ``GITHUB_EVENT_NAME`` and the rest set, ``${{ }}`` expressions evaluated (scripts/gha.py), ``if:``
and ``needs`` honoured, matrix jobs of one stage at once, ``timeout-minutes`` enforced. ``uses:`` steps are
emulated where they matter: ``actions/checkout`` copies this checkout (its FlashInfer and FA4 kernel caches linked
in, as a warm ``actions/cache`` would restore them; ``--cold`` leaves them out; ``ref:`` is read with ``git
archive``), ``upload-artifact``/``download-artifact`` copy between the job folders, ``setup-python`` uses the
host's Python, ``cache`` is skipped. ``--skip-install`` skips the steps named "Install...": the host's packages
serve (its Python's bin on ``PATH``, a ``.venv/bin/activate`` that activates nothing, and the job's checkout first
on ``PYTHONPATH``; where pytest-attn is not installed, ``-p pytest_attn.plugin`` and a ``pytest-attn`` command
stand in for what the install registers). What it cannot test: GitHub itself -- runner labels and scheduling, the
approval of a fork's run, secrets, the real actions' code, artifacts' retention.

It prints each job's steps with exit status and wall time, then the merge job's step summary and the gate's exit
status, and exits 0 when every job ended as expected (``success``; ``--expect gate=failure`` for a run meant to
fail the gate), 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gha

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "gpu-benchmarks.yml"
CACHES = (".ficache", ".fa4cache")
NOT_COPIED = {".git", ".benchmarks", "reports", ".pytest_cache", ".hypothesis", "__pycache__", ".venv", "runs",
              *CACHES}
TAIL_LINES = 12  # of a failed step's output, shown under it in the report
LATER = ("steps", "needs", "job")  # contexts known only while the jobs run


@dataclass
class StepResult:
    name: str
    outcome: str  # success, failure or skipped
    exit_status: int | None = None
    seconds: float = 0.0
    note: str = ""
    tail: list[str] = field(default_factory=list)  # a failed run: step's last lines of output, as GitHub shows them


@dataclass
class Job:
    """One job to run: a job of the workflow, or one combination of its matrix."""

    id: str
    name: str
    spec: dict[str, Any]
    matrix: dict[str, Any]
    gpus: list[str] | None  # None: no GPU job (CUDA_VISIBLE_DEVICES empty)
    folder: Path
    conclusion: str = ""
    planned: bool = True  # whether its if: holds for the event, its needs as planned (run: successful)
    seconds: float = 0.0
    steps: list[StepResult] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""


@dataclass
class Options:
    workflow: Path
    out: Path
    gpus: list[str]
    event: str = "push"
    fork: bool = False
    labels: tuple[str, ...] = ()
    label: str | None = None  # the label whose adding is the event (pull_request "labeled")
    jobs: tuple[str, ...] = ()
    skip_install: bool = False
    cold: bool = False
    overrides: dict[str, str] = field(default_factory=dict)  # --set NAME=VALUE: workflow env
    replaced: dict[str, str] = field(default_factory=dict)  # --replace-step NAME=COMMAND
    expect: dict[str, str] = field(default_factory=dict)


def github_context(opts: Options, repository: str = "owner/pytest-attn") -> dict[str, Any]:
    sha = _git("rev-parse", "HEAD") or "0" * 40
    event: dict[str, Any] = {"repository": {"full_name": repository}}
    ref = "refs/heads/main"
    if opts.event == "pull_request":
        head = "someone/pytest-attn" if opts.fork else repository
        labels = [{"name": n} for n in (*opts.labels, *([opts.label] if opts.label else []))]
        event.update(action="labeled" if opts.label else "synchronize", number=1,
                     pull_request={"head": {"repo": {"full_name": head}, "sha": sha}, "labels": labels,
                                   "base": {"sha": _git("rev-parse", "HEAD~1") or sha}})
        if opts.label:
            event["label"] = {"name": opts.label}
        ref = "refs/pull/1/merge"
    return {"event_name": opts.event, "event": event, "repository": repository, "sha": sha, "ref": ref,
            "run_id": str(os.getpid()), "run_number": "1", "actor": "run_workflow", "server_url": "https://github.com",
            "workflow": "", "action": "", "token": ""}


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True)
        return done.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def plan(workflow: dict[str, Any], opts: Options) -> list[list[Job]]:
    """The jobs stage by stage, each matrix combination its own job, GPU jobs of a stage sharing the GPUs."""
    github = github_context(opts)
    env = {k: gha.text_of(v) for k, v in (workflow.get("env") or {}).items()}
    env.update(opts.overrides)
    stages: list[list[Job]] = []
    for ids in gha.stages(workflow["jobs"]):
        jobs = []
        for job_id in ids:
            if opts.jobs and job_id not in opts.jobs:
                continue
            spec = workflow["jobs"][job_id]
            for combo in gha.matrix(spec, {"github": github, "env": env}):
                label = f"{job_id} ({', '.join(gha.text_of(v) for v in combo.values())})" if combo else job_id
                jobs.append(Job(job_id, label, spec, combo, None, opts.out / "jobs" / label.replace(" ", "")))
        before: dict[str, list[Job]] = {}
        for earlier in (j for stage in stages for j in stage):
            before.setdefault(earlier.id, []).append(earlier)
        for job in jobs:
            job.planned = will_run(job, github, env, {n: [dataclasses.replace(j, conclusion="success" if j.planned
                                                                            else "skipped") for j in before.get(n, [])]
                                                      for n in gha.needs_of(job.spec)})
        gpu_jobs = [j for j in jobs if gha.runs_on_gpu(j.spec) and j.planned]
        for job, share in zip(gpu_jobs, gha.split(opts.gpus, len(gpu_jobs)), strict=True):
            job.gpus = share
        if jobs:
            stages.append(jobs)
    return stages


def will_run(job: Job, github: dict[str, Any], env: dict[str, str], done: dict[str, list[Job]]) -> bool:
    """Whether the job's ``if:`` holds for this event, its needs ended as ``done`` says (the GPUs are shared among
    the GPU jobs that will run)."""
    needs = needs_of(job, done)
    ok = {"success": all(n["result"] == "success" for n in needs.values()),
          "failure": any(n["result"] == "failure" for n in needs.values()), "always": True, "cancelled": False}
    return gha.condition(job.spec.get("if"), contexts(job, github, env, needs, {}), ok.__getitem__)


def contexts(job: Job, github: dict[str, Any], env: dict[str, str], needs: dict[str, Any],
             steps: dict[str, Any]) -> dict[str, Any]:
    return {"github": {**github, "job": job.id, "workspace": str(job.folder)}, "env": env, "matrix": job.matrix,
            "strategy": {"job-total": 1, "fail-fast": False}, "needs": needs, "steps": steps, "vars": {},
            "secrets": {}, "inputs": {}, "job": {"status": "success"},
            "runner": {"os": "Linux", "arch": "X64", "name": "run_workflow", "temp": str(job.folder / "_temp")}}


# ---- uses: steps -------------------------------------------------------------------------------------------
def checkout(job: Job, where: dict[str, Any], opts: Options) -> str:
    dest = job.folder / str(where.get("path") or ".")
    dest.mkdir(parents=True, exist_ok=True)
    ref = where.get("ref")
    if ref:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", str(ref)], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        return f"this checkout's {ref} (git archive) into {dest}"

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n in NOT_COPIED or Path(folder, n) == opts.out}

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True, dirs_exist_ok=True)
    linked = [c for c in CACHES if (ROOT / c).is_dir() and not opts.cold]
    for cache in linked:
        (dest / cache).symlink_to(ROOT / cache)
    return f"a copy of {ROOT}" + (f", kernel caches {', '.join(linked)} linked" if linked else "")


def upload(job: Job, where: dict[str, Any], opts: Options) -> str:
    target = opts.out / "artifacts" / str(where["name"])
    found = 0
    for entry in str(where.get("path", "")).split():
        source = job.folder / entry
        if source.is_dir():
            found += sum(1 for p in source.rglob("*") if p.is_file())
            shutil.copytree(source, target, dirs_exist_ok=True)
        elif source.is_file():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / source.name)
            found += 1
    if not found and where.get("if-no-files-found", "warn") == "error":
        raise RuntimeError(f"no files found at {where.get('path')} (if-no-files-found: error)")
    return f"{found} file(s) to artifact {where['name']}"


def download(job: Job, where: dict[str, Any], opts: Options) -> str:
    import fnmatch

    dest = job.folder / str(where.get("path") or ".")
    folder = opts.out / "artifacts"
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    wanted = [n for n in names if fnmatch.fnmatch(n, str(where.get("pattern") or where.get("name") or "*"))]
    for name in wanted:
        merge = where.get("merge-multiple") or where.get("name")
        shutil.copytree(folder / name, dest if merge else dest / name, dirs_exist_ok=True)
    return f"artifact(s) {', '.join(wanted) or 'none'} into {dest}"


def emulate(job: Job, step: dict[str, Any], ctx: dict[str, Any], opts: Options) -> tuple[str, str]:
    """(outcome, note) of a ``uses:`` step."""
    action = str(step["uses"]).split("@")[0]
    where = {k: gha.substitute(str(v), ctx) if isinstance(v, str) else v for k, v in (step.get("with") or {}).items()}
    actions = {"actions/checkout": checkout, "actions/upload-artifact": upload,
               "actions/download-artifact": download}
    if action in actions:
        return "success", actions[action](job, where, opts)
    if action == "actions/cache":
        return "skipped", "skipped: the host's own caches serve (see --cold)"
    if action == "actions/setup-python":
        return "success", f"the host's Python serves ({sys.executable})"
    return "skipped", f"skipped: {action} is not emulated"


# ---- run: steps ---------------------------------------------------------------------------------------------
def runner_env(job: Job, env: dict[str, str], opts: Options, files: dict[str, Path]) -> dict[str, str]:
    out = dict(os.environ)
    out.update(env)
    out.update(GITHUB_ACTIONS="true", CI="true", GITHUB_WORKSPACE=str(job.folder), RUNNER_TEMP=str(files["temp"]),
               RUNNER_OS="Linux", RUNNER_ARCH="X64", GITHUB_JOB=job.id, GITHUB_OUTPUT=str(files["output"]),
               GITHUB_ENV=str(files["env"]), GITHUB_PATH=str(files["path"]),
               GITHUB_STEP_SUMMARY=str(files["summary"]), CUDA_VISIBLE_DEVICES=",".join(job.gpus or []))
    out["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), out.get("PATH", "")])
    if opts.skip_install:  # the job's checkout is what pytest imports, as the skipped "pip install -e ." made it
        out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(job.folder), os.environ.get("PYTHONPATH", "")]))
        if not plugin_installed():  # nor did the install register the pytest plugin and the command: stand in
            out["PATH"] = os.pathsep.join([str(job.folder / ".venv" / "bin"), out["PATH"]])
            out["PYTEST_ADDOPTS"] = " ".join(filter(None, ["-p pytest_attn.plugin", out.get("PYTEST_ADDOPTS", "")]))
    return out


def plugin_installed() -> bool:
    """Whether this Python has pytest-attn installed (its pytest11 entry point and its ``pytest-attn`` command):
    without it, a skipped install left the steps' ``pytest`` without the plugin and ``pytest-attn`` not found."""
    try:
        metadata.distribution("pytest-attn")
    except metadata.PackageNotFoundError:
        return False
    return True


def stand_ins(bin_dir: Path) -> None:
    """What the skipped install steps would have left in the job's virtual environment: an ``activate`` (the host's
    Python serves) and a ``pytest-attn`` command running this checkout's."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "activate").write_text("# run_workflow.py --skip-install: the host's Python\n")
    command = bin_dir / "pytest-attn"
    command.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pytest_attn.verdicts "$@"\n')
    command.chmod(0o755)


def run_script(job: Job, script: str, env: dict[str, str], cwd: Path, deadline: float, log: Any) -> int:
    """``bash -e`` on the step's script (GitHub's default shell on Linux); SIGTERM then SIGKILL past the job's
    timeout-minutes."""
    path = Path(env["RUNNER_TEMP"]) / f"step-{len(job.steps)}.sh"
    path.write_text(script)
    process = subprocess.Popen(["bash", "-e", str(path)], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    while process.poll() is None:
        if time.monotonic() > deadline:
            for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 5)):
                try:
                    os.killpg(process.pid, sig)
                    process.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
                except ProcessLookupError:
                    break
        time.sleep(0.2)
    return process.returncode


def output_tail(path: Path, start: int, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` non-blank lines a step wrote to the job's log from byte ``start``: why it failed, without
    opening the log (a shard that stopped at start-up said which back end it could not load)."""
    with path.open("rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines() if line.strip()][-lines:]


def read_pairs(path: Path) -> dict[str, str]:
    """``GITHUB_OUTPUT``/``GITHUB_ENV`` lines: ``name=value`` and ``name<<DELIMITER`` blocks."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end
        elif "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


def step_name(step: dict[str, Any]) -> str:
    if step.get("name"):
        return str(step["name"])
    return f"Run {step['uses']}" if "uses" in step else f"Run {str(step.get('run', '')).strip().splitlines()[0]}"


def is_install(step: dict[str, Any]) -> bool:
    """A step ``--skip-install`` skips: its name starts with "Install" (the workflow's convention)."""
    return "run" in step and step_name(step).lower().startswith("install")


def execute(job: Job, github: dict[str, Any], base_env: dict[str, str], needs: dict[str, Any], opts: Options,
            say: Any) -> None:
    """Run one job's steps in order, as a runner does."""
    started = time.monotonic()
    job.folder.mkdir(parents=True, exist_ok=True)
    temp = job.folder / "_temp"
    temp.mkdir(exist_ok=True)
    if opts.skip_install:
        stand_ins(job.folder / ".venv" / "bin")
    deadline = started + 60 * float(job.spec.get("timeout-minutes", 360))
    steps: dict[str, Any] = {}
    env = dict(base_env)
    failed = False
    with (job.folder.parent / f"{job.folder.name}.log").open("w") as log:
        for i, step in enumerate(job.spec.get("steps") or []):
            ctx = contexts(job, github, env, needs, steps)
            status = {"success": not failed, "failure": failed, "always": True, "cancelled": False}.__getitem__
            name = step_name(step)
            step_env = {k: gha.substitute(gha.text_of(v), ctx) for k, v in (step.get("env") or {}).items()}
            result = StepResult(name, "skipped")
            t0 = time.monotonic()
            if not gha.condition(step.get("if"), ctx, status):
                result.note = "skipped: its if: is false"
            elif opts.skip_install and is_install(step):
                result.note = "skipped: --skip-install (the host has the packages)"
            elif "uses" in step:
                try:
                    result.outcome, result.note = emulate(job, step, ctx, opts)
                except Exception as exc:
                    result.outcome, result.note = "failure", f"{type(exc).__name__}: {exc}"
            else:
                files = {"temp": temp, **{k: temp / f"{k}-{i}" for k in ("output", "env", "path", "summary")}}
                script = opts.replaced.get(name, str(step["run"]))
                if name in opts.replaced:
                    result.note = "REPLACED by --replace-step"
                script = gha.substitute(script, ctx)
                run_env = runner_env(job, {**env, **step_env}, opts, files)
                log.write(f"\n===== {name}\n")
                log.flush()
                start = os.lseek(log.fileno(), 0, os.SEEK_CUR)  # the steps write to the log's descriptor
                result.exit_status = run_script(job, script, run_env, job.folder / str(step.get("working-directory")
                                                                                       or "."), deadline, log)
                result.outcome = "success" if result.exit_status == 0 else "failure"
                if result.exit_status != 0:
                    result.tail = output_tail(Path(log.name), start)
                outputs = read_pairs(files["output"])
                env.update(read_pairs(files["env"]))
                if files["summary"].exists():
                    job.summary += files["summary"].read_text()
                if step.get("id"):
                    steps[str(step["id"])] = {"outputs": outputs, "outcome": result.outcome,
                                              "conclusion": result.outcome}
            result.seconds = time.monotonic() - t0
            if result.outcome == "failure" and not step.get("continue-on-error"):
                failed = True
            job.steps.append(result)
            say(f"[{job.name}] {result.outcome:8} {name}" + (f": exit {result.exit_status}" if result.exit_status
                                                            is not None else "") + f", {result.seconds:.1f} s"
                + (f" ({result.note})" if result.note else ""))
    ctx = contexts(job, github, env, needs, steps)
    job.outputs = {k: gha.substitute(str(v), ctx) for k, v in (job.spec.get("outputs") or {}).items()}
    job.conclusion = "failure" if failed else "success"
    job.seconds = time.monotonic() - started


def needs_of(job: Job, done: dict[str, list[Job]]) -> dict[str, Any]:
    wanted = job.spec.get("needs") or []
    out = {}
    for name in [wanted] if isinstance(wanted, str) else wanted:
        runs = done.get(name, [])
        results = {j.conclusion for j in runs}
        result = "failure" if "failure" in results else ("success" if "success" in results else "skipped")
        out[name] = {"result": result, "outputs": {k: v for j in runs for k, v in j.outputs.items()}}
    return out


def run_all(stages: list[list[Job]], opts: Options, say: Any = print) -> list[Job]:
    github = github_context(opts)
    env = {k: gha.substitute(gha.text_of(v), {"github": github}) for k, v in
           (gha.load(opts.workflow).get("env") or {}).items()}
    env.update(opts.overrides)
    done: dict[str, list[Job]] = {}
    for stage in stages:
        threads = []
        for job in stage:
            needs = needs_of(job, done)
            ctx = contexts(job, github, env, needs, {})
            if not will_run(job, github, env, done):
                job.conclusion = "skipped"
                say(f"[{job.name}] skipped: its if: is false for this event")
                continue
            own = job.spec.get("env") or {}
            job_env = {**env, **{k: gha.substitute(gha.text_of(v), ctx) for k, v in own.items()}}
            gpus = f" on GPUs {','.join(job.gpus)}" if job.gpus else (" (no GPU)" if job.gpus is None else "")
            say(f"[{job.name}] starts{gpus} in {job.folder}")
            thread = threading.Thread(target=execute, args=(job, github, job_env, needs, opts, say))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        for job in stage:
            done.setdefault(job.id, []).append(job)
    return [j for stage in stages for j in stage]


def report(jobs: list[Job], opts: Options) -> int:
    """Each job's steps, the merge's summary and the gate's status; 0 when every job ended as expected."""
    print("\n== jobs")
    wrong = []
    for job in jobs:
        expected = opts.expect.get(job.id, "success")
        mark = "" if job.conclusion in (expected, "skipped") and not (job.conclusion == "skipped" and job.id in
                                                                       opts.expect) else "   <-- expected " + expected
        if mark:
            wrong.append(job.name)
        print(f"{job.name}: {job.conclusion} in {job.seconds:.0f} s{mark}")
        for step in job.steps:
            status = f"exit {step.exit_status}" if step.exit_status is not None else step.outcome
            print(f"   {status:8} {step.seconds:7.1f} s  {step.name}" + (f" ({step.note})" if step.note else ""))
            for line in step.tail:
                print(f"            | {line}")
    for job in jobs:
        if job.summary:
            print(f"\n== {job.name}: step summary\n{job.summary.rstrip()}")
    merge = [(j, s) for j in jobs for s in j.steps if "merge" in s.name.lower() and s.exit_status is not None]
    for job, step in merge:
        print(f"\n== the gate ({job.name}, {step.name!r}): exit {step.exit_status}; log {job.folder}.log")
    if opts.overrides or opts.replaced:
        print("\nnote: not the workflow as written: " + "; ".join(
            [f"--set {k}" for k in opts.overrides] + [f"--replace-step {k!r}" for k in opts.replaced]))
    print(f"\n{'every job ended as expected' if not wrong else 'NOT as expected: ' + ', '.join(wrong)}")
    return 1 if wrong else 0


def dry_run(stages: list[list[Job]], opts: Options) -> None:
    """The plan, nothing run: each job's GPUs, whether its if: holds (its needs taken as successful), each step."""
    github = github_context(opts)
    env = {k: gha.substitute(gha.text_of(v), {"github": github}) for k, v in
           (gha.load(opts.workflow).get("env") or {}).items()}
    env.update(opts.overrides)
    for stage in stages:
        for job in stage:
            ctx = contexts(job, github, env, {n: {"result": "success", "outputs": {}} for n in gha.needs_of(job.spec)},
                           {})
            gpus = ",".join(job.gpus) if job.gpus is not None else "none"
            print(f"job {job.name}: {'runs' if job.planned else 'skipped (its if: is false)'};"
                  f" CUDA_VISIBLE_DEVICES={gpus}")
            if not job.planned:
                continue
            for step in job.spec.get("steps") or []:
                name = step_name(step)
                if opts.skip_install and is_install(step):
                    print(f"  skip   {name} (--skip-install)")
                elif "uses" in step:
                    print(f"  uses   {step['uses']}")
                else:
                    command = gha.substitute(opts.replaced.get(name, str(step["run"])), ctx, LATER)
                    print(f"  run    {name}")
                    print("\n".join(f"           {line}" for line in command.rstrip().splitlines()))


def visible_gpus() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name:
            raise SystemExit(f"run_workflow.py: {flag} {value!r} is not NAME=VALUE")
        out[name] = rest
    return out


def options(argv: list[str] | None) -> tuple[Options, bool]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workflow", type=Path, default=WORKFLOW)
    parser.add_argument("--out", type=Path, default=Path("workflow-run"), help="job folders, artifacts, logs")
    parser.add_argument("--gpus", default="", help="GPU indices or UUIDs to share among the GPU jobs (default:"
                                                   " every one nvidia-smi lists)")
    parser.add_argument("--event", default="push", choices=("push", "pull_request", "workflow_dispatch"))
    parser.add_argument("--fork", action="store_true", help="pull_request: from a fork (another repository)")
    parser.add_argument("--label", help="pull_request: the event is this label being added")
    parser.add_argument("--jobs", default="", help="only these job ids, comma-separated")
    parser.add_argument("--skip-install", action="store_true", help="skip the steps named Install...: the host"
                                                                    " has the packages")
    parser.add_argument("--cold", action="store_true", help="no kernel caches linked into the checkouts")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override the workflow's"
                        " env (then it is not the workflow as written: said at the end)")
    parser.add_argument("--replace-step", action="append", default=[], metavar="NAME=COMMAND")
    parser.add_argument("--expect", action="append", default=[], metavar="JOB=CONCLUSION",
                        help="e.g. gate=failure for a run meant to fail the gate (default: every job success)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = parser.parse_args(argv)
    gpus = [g for g in args.gpus.split(",") if g] or visible_gpus()
    opts = Options(args.workflow, args.out.resolve(), gpus, args.event, args.fork, (), args.label,
                   tuple(j for j in args.jobs.split(",") if j), args.skip_install, args.cold,
                   _pairs(args.set, "--set"), _pairs(args.replace_step, "--replace-step"),
                   _pairs(args.expect, "--expect"))
    return opts, args.dry_run


def main(argv: list[str] | None = None) -> int:
    opts, dry = options(argv)
    workflow = gha.load(opts.workflow)
    stages = plan(workflow, opts)
    if dry:
        dry_run(stages, opts)
        return 0
    if not opts.gpus and any(gha.runs_on_gpu(j.spec) for stage in stages for j in stage):
        print("run_workflow.py: no GPU (nvidia-smi listed none, --gpus named none): the GPU jobs see none")
    shutil.rmtree(opts.out / "jobs", ignore_errors=True)
    shutil.rmtree(opts.out / "artifacts", ignore_errors=True)
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            print(line, flush=True)

    return report(run_all(stages, opts, say), opts)


if __name__ == "__main__":
    sys.exit(main())
