"""pytest-attn is loaded into every pytest session of its environment (pytest11): it must break nothing and cost
(almost) nothing where no attention case runs. In a throw-away project with one plain test, checked: ``pytest
--help`` and ``pytest --version`` exit 0; the test passes; and the run imports none of the heavy libraries an
attention run needs (torch, numpy, NVML, Hypothesis' strategies through pytest-attn) -- what made an unrelated
run slow, said deterministically. Measured and printed, not asserted: how much longer the run takes than with
``-p no:pytest_attn.plugin`` (the fastest of several alternating runs of each). A wall-time limit failed this
script on the shared 2-core CI machine at +0.30 s where the same code read +0.19 to +0.38 s in consecutive runs:
a timed check there says more about the neighbours than about the plugin (docs/gpu-validation.md's CPU table has
the figure).

    python .ci/plugin_cost.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 11
#: Libraries an unrelated project's run must not import because pytest-attn is installed (their first import
#: costs 0.5-2 s: torch, numpy, NVML).
HEAVY = ("torch", "numpy", "pynvml", "triton", "flash_attn", "flashinfer")
#: Written into the project: lists the heavy modules imported by the end of the session.
LISTER = f'''
import sys


def pytest_sessionfinish(session):
    heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
    print("heavy modules imported:", ",".join(heavy) or "none")
'''


def run(args: list[str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"pytest {' '.join(args)} exited {done.returncode} in a project without attention tests:\n"
                 f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return took, done.stdout


def main() -> int:
    # An installed package carries its bytecode (pip compiles it); an editable checkout under
    # PYTHONDONTWRITEBYTECODE would recompile every module at each start and time the compiler instead.
    package = Path(__file__).resolve().parents[1] / "pytest_attn"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)
    with tempfile.TemporaryDirectory(prefix="pytest-attn-unrelated-") as tmp:
        project = Path(tmp)
        (project / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        run(["--help"], project)
        run(["--version"], project)
        (project / "conftest.py").write_text(LISTER)
        _, said = run(["-q", "-s", "-p", "no:cacheprovider"], project)
        marker = "heavy modules imported:"
        heavy = next((line[line.index(marker):] for line in said.splitlines() if marker in line), "")
        (project / "conftest.py").unlink()
        with_plugin, without = [], []
        for _ in range(RUNS):
            with_plugin.append(run(["-q", "-p", "no:cacheprovider"], project)[0])
            without.append(run(["-q", "-p", "no:cacheprovider", "-p", "no:pytest_attn.plugin"], project)[0])
    cost = min(with_plugin) - min(without)
    print(f"pytest --help and --version: exit 0; a one-test project: passed, {heavy or 'heavy modules not listed'};"
          f" {min(with_plugin):.2f} s with pytest-attn, {min(without):.2f} s without (fastest of {RUNS} each): the"
          f" plugin costs {cost:+.2f} s")
    if heavy != "heavy modules imported: none":
        print(f"pytest-attn made an unrelated project's run import what only an attention run needs ({heavy})")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
