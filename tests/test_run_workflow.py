"""scripts/run_workflow.py and scripts/gha.py: GitHub's expression language by hand-computed examples; the real
.github/workflows/gpu-benchmarks.yml parsed and planned -- its shards, their GPUs, env and commands, who may run it
(a fork's pull request only once labelled gpu-ok), its least-privilege settings -- without running it; the
executor on a small workflow of shell steps; and (slow) the real workflow run end to end on the CPU profile."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("yaml")

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
WORKFLOW = SCRIPTS.parent / ".github" / "workflows" / "gpu-benchmarks.yml"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


rw = _load("run_workflow")
gha = sys.modules["gha"]


@pytest.mark.parametrize("expression, value", [
    ("github.event_name == 'PUSH'", True),  # strings compare ignoring case
    ("matrix.shard == '1'", True),  # a number and a numeric string are equal
    ("github.event_name != 'push' || 'fallback'", "fallback"),  # || gives the first truthy operand
    ("github.event_name == 'push' && matrix.shard", 1),
    ("!github.event.missing", True),
    ("contains(github.event.pull_request.labels.*.name, 'gpu-ok')", True),
    ("contains(github.event.pull_request.labels.*.name, 'other')", False),
    ("format('{0}-{1}', 'shard', matrix.shard)", "shard-1"),
    ("startsWith(github.ref, 'refs/heads/')", True),
    ("(1 < 2) && (2 >= 2)", True),
])
def test_expressions_evaluate_as_github_does(expression, value):
    ctx = {"github": {"event_name": "push", "ref": "refs/heads/main",
                      "event": {"pull_request": {"labels": [{"name": "GPU-ok"}, {"name": "docs"}]}}},
           "matrix": {"shard": 1}}
    assert gha.evaluate(expression, ctx) == value


def test_conditions_and_substitution():
    ctx = {"github": {"event_name": "push"}, "steps": {}}
    failed = {"success": False, "failure": True, "always": True, "cancelled": False}.__getitem__
    assert not gha.condition("github.event_name == 'push'", ctx, failed)  # no status function: success() too
    assert gha.condition("always() && github.event_name == 'push'", ctx, failed)
    assert gha.condition(None, ctx, lambda s: s == "success")
    assert gha.substitute("a ${{ github.event_name }} b ${{ steps.x.outputs.k }}", ctx, ("steps",)) == \
        "a push b ${{ steps.x.outputs.k }}"
    assert gha.split(["0", "1", "2", "3", "4"], 2) == [["0", "1", "2"], ["3", "4"]]
    assert gha.matrix({"strategy": {"matrix": {"a": [1, 2], "b": ["x"], "include": [{"a": 1, "c": 9}]}}}, {}) == [
        {"a": 1, "b": "x", "c": 9}, {"a": 2, "b": "x"}]


def test_output_files_are_read_with_their_heredocs(tmp_path):
    out = tmp_path / "out"
    out.write_text("key=value=with=equals\nblock<<EOF\nline 1\nline 2\nEOF\nlast=1\n")
    assert rw.read_pairs(out) == {"key": "value=with=equals", "block": "line 1\nline 2", "last": "1"}


def _plan(tmp_path, **kw):
    opts = rw.Options(WORKFLOW, tmp_path, kw.pop("gpus", ["0", "1", "2", "3"]), **kw)
    return [job for stage in rw.plan(gha.load(WORKFLOW), opts) for job in stage], opts


def test_the_real_workflow_plans_one_shard_per_gpu_share_and_a_merge(tmp_path):
    workflow = gha.load(WORKFLOW)
    jobs, opts = _plan(tmp_path)
    by_name = {j.name: j for j in jobs}
    assert [j.name for j in jobs if j.planned] == ["shard (1)", "shard (2)", "gate"]  # ab: pull requests only
    assert (by_name["shard (1)"].gpus, by_name["shard (2)"].gpus, by_name["gate"].gpus) == (["0", "1"], ["2", "3"],
                                                                                            None)
    shards = workflow["jobs"]["shard"]["strategy"]["matrix"]["shard"]
    assert int(workflow["env"]["SHARDS"]) == len(shards)  # SHARDS is the matrix's length, as its comment asks
    ctx = rw.contexts(by_name["shard (2)"], rw.github_context(opts), workflow["env"], {}, {})
    steps = {rw.step_name(s): s for s in workflow["jobs"]["shard"]["steps"]}
    bench = gha.substitute(steps["Benchmarks, this shard, one worker per GPU"]["run"], ctx)
    # pinned to the baseline's timers: a shard run with --attn-baseline=off measured 11 cases by another timer
    assert "pytest $SELECTION -n auto --attn-shard=2/$SHARDS \\\n" in bench and "--attn-baseline" not in bench
    assert "--benchmark-json=results/shard-2.json" in bench
    upload = gha.substitute(steps["Upload the shard's JSON"]["with"]["name"], ctx)
    gate = {rw.step_name(s): s for s in workflow["jobs"]["gate"]["steps"]}
    assert upload == "shard-2" and gate["Run actions/download-artifact@v4"]["with"]["pattern"] == "shard-*"
    assert "pytest-attn merge shards/shard-*.json" in gate["Merge the shards, report, gate against the committed"
                                                           " baseline"]["run"]
    assert "--attn-profile=default" in workflow["env"]["SELECTION"]


@pytest.mark.parametrize("event, runs", [
    ({"event": "push"}, ["shard (1)", "shard (2)", "gate"]),
    ({"event": "pull_request"}, ["shard (1)", "shard (2)", "ab", "gate"]),  # a branch of this repository
    ({"event": "pull_request", "label": "docs"}, []),  # another label: no run of the GPU jobs again
    ({"event": "pull_request", "fork": True}, []),  # a fork's code never runs on the GPU runners unasked
    ({"event": "pull_request", "fork": True, "label": "gpu-ok"}, ["shard (1)", "shard (2)", "ab", "gate"]),
])
def test_a_forks_pull_request_runs_on_the_gpu_runners_only_once_labelled(tmp_path, event, runs):
    jobs, _ = _plan(tmp_path, **event)
    assert [j.name for j in jobs if j.planned] == runs


def test_the_workflow_grants_least_and_names_its_install_steps():
    text = WORKFLOW.read_text()
    workflow = gha.load(WORKFLOW)
    assert workflow["permissions"] == {"contents": "read"} and "secrets." not in text
    assert "pull_request_target" not in text  # would run a fork's code with the base's rights
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout"):
                assert step["with"]["persist-credentials"] is False
            if "pip install" in str(step.get("run", "")):
                assert rw.is_install(step), rw.step_name(step)  # --skip-install skips it


WORKFLOW_OF_SHELL = """
name: t
on: push
env:
  GREETING: hello
jobs:
  make:
    runs-on: [self-hosted, linux, gpu]
    strategy:
      matrix:
        part: [1, 2]
    steps:
      - uses: actions/checkout@v4
      - id: first
        run: echo "value=part${{ matrix.part }}" >> "$GITHUB_OUTPUT"
      - run: |
          mkdir -p out
          line="$GREETING ${{ steps.first.outputs.value }} on [$CUDA_VISIBLE_DEVICES] $RUNNER_OS"
          echo "$line" > out/p${{ matrix.part }}.txt
          echo "did ${{ matrix.part }}" >> "$GITHUB_STEP_SUMMARY"
      - uses: actions/upload-artifact@v4
        with:
          name: p-${{ matrix.part }}
          path: out/
  join:
    needs: make
    if: always()
    runs-on: ubuntu-latest
    steps:
      - uses: actions/download-artifact@v4
        with:
          pattern: p-*
          path: all
          merge-multiple: true
      - run: cat all/p1.txt all/p2.txt > both.txt; echo "why it failed" >&2; exit 3
      - if: always()
        run: echo "after a failure" > after.txt
"""


def test_the_executor_runs_steps_with_the_runners_variables_and_artifacts(tmp_path, capsys):
    path = tmp_path / "wf.yml"
    path.write_text(WORKFLOW_OF_SHELL)
    opts = rw.Options(path, tmp_path / "run", ["g0", "g1", "g2"], expect={"join": "failure"})
    lines: list[str] = []
    jobs = rw.run_all(rw.plan(gha.load(path), opts), opts, lines.append)
    make1, make2, join = jobs
    assert (make1.conclusion, make2.conclusion, join.conclusion) == ("success", "success", "failure")
    both = (join.folder / "both.txt").read_text().splitlines()
    assert both == ["hello part1 on [g0,g1] Linux", "hello part2 on [g2] Linux"]
    assert (join.folder / "after.txt").exists()  # if: always() ran after the failed step
    assert [s.exit_status for s in join.steps] == [None, 3, 0]
    assert make1.summary == "did 1\n"
    assert join.steps[1].tail == ["why it failed"] and not join.steps[2].tail  # a failed step's last lines, only
    assert rw.report(jobs, opts) == 0  # join was expected to fail
    assert "            | why it failed\n" in capsys.readouterr().out  # under the step that failed
    opts.expect.clear()
    assert rw.report(jobs, opts) == 1


@pytest.mark.slow
def test_the_real_workflow_runs_end_to_end_on_the_cpu_profile_with_fake_gpus(tmp_path, monkeypatch, capsys):
    """The shards (one worker each), the merge and the gate, as the workflow writes them; only the selection
    (a CPU one) and the step that asks the GPU for its capability are replaced."""
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "1")
    selection = ("suites/test_prefill.py --attn-profile=cpu --attn-backends=sdpa-math --attn-dtypes=fp32"
                 " --attn-max-time=0.05 -k tiny-mha")
    status = rw.main(["--skip-install", "--gpus", "fake0,fake1", "--out", str(tmp_path), "--set",
                      f"SELECTION={selection}", "--replace-step",
                      "JIT cache key (library versions and GPU)=echo key=cpu >> $GITHUB_OUTPUT"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "every job ended as expected" in out and "not the workflow as written: --set SELECTION" in out
    merged = json.loads((tmp_path / "artifacts" / "gpu-benchmarks" / "run.json").read_text())
    assert len(merged["benchmarks"]) == 2 and len(merged["attn_shards"]) == 2
    assert "### pytest-attn: " in out and "(2 NEW)" in out  # the merge's step summary (no CPU baseline: all NEW)
    assert "== the gate (gate, 'Merge the shards, report, gate against the committed baseline'): exit 0" in out


def test_where_pytest_attn_is_not_installed_the_plugin_and_its_command_stand_in(tmp_path, monkeypatch):
    # on a GPU host with the packages but not pytest-attn, the shards' pytest ran without the plugin ("unrecognized
    # arguments: --attn-profile=default") and the gate's `pytest-attn merge` was not found
    import subprocess
    import types

    monkeypatch.setattr(rw, "plugin_installed", lambda: False)
    monkeypatch.setenv("PYTEST_ADDOPTS", "-rs")
    job = types.SimpleNamespace(folder=tmp_path / "gate", id="gate", gpus=[])
    rw.stand_ins(job.folder / ".venv" / "bin")
    files = {k: tmp_path / k for k in ("temp", "output", "env", "path", "summary")}
    opts = rw.Options(WORKFLOW, tmp_path, [], skip_install=True)
    env = rw.runner_env(job, {}, opts, files)
    assert env["PYTEST_ADDOPTS"] == "-p pytest_attn.plugin -rs"
    assert env["PATH"].split(":")[0] == str(job.folder / ".venv" / "bin")
    env["PYTHONPATH"] = str(SCRIPTS.parent)
    done = subprocess.run(["pytest-attn", "merge", "--help"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "merge" in done.stdout, done.stderr
    monkeypatch.setattr(rw, "plugin_installed", lambda: True)  # installed: nothing stands in
    assert "-p pytest_attn.plugin" not in rw.runner_env(job, {}, opts, files)["PYTEST_ADDOPTS"]
