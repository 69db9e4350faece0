"""pytest-attn is loaded into every pytest session of its environment (pytest11): it must break nothing
and cost (almost) nothing where no attention case runs. In a throw-away project with one plain test:
``pytest --help`` and ``pytest --version`` exit 0, and a run takes at most 0.3 s longer than the same run
with ``-p no:pytest_attn.plugin`` (the fastest of several alternating runs of each, so a busy machine does not decide).

    python .ci/plugin_cost.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIMIT_S = 0.3
RUNS = 11  # the fastest of 11: on the shared 2-core CI machine 7 left it +-0.05 s from run to run


def run(args: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"pytest {' '.join(args)} exited {done.returncode} in a project without attention tests:\n"
                 f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return took


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
        with_plugin, without = [], []
        for _ in range(RUNS):
            with_plugin.append(run(["-q", "-p", "no:cacheprovider"], project))
            without.append(run(["-q", "-p", "no:cacheprovider", "-p", "no:pytest_attn.plugin"], project))
    cost = min(with_plugin) - min(without)
    print(f"pytest --help and --version: exit 0; a one-test project: {min(with_plugin):.2f} s with pytest-attn,"
          f" {min(without):.2f} s without (fastest of {RUNS} each): the plugin costs {cost:+.2f} s (limit {LIMIT_S} s)")
    return 0 if cost <= LIMIT_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
