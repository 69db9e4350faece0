"""``--attn-hbm=PATTERN``: DRAM traffic of chosen cases, measured by Nsight Compute.

Each chosen case is re-run in a subprocess under ``ncu`` (metrics ``dram__bytes_read.sum`` and
``dram__bytes_write.sum``, ``--clock-control none`` so the clocks stay as they are, profiling only
one warm call between ``cudaProfilerStart``/``Stop``). Measured bytes over the FLOP/byte model's
minimal bytes is the *IO amplification*: 1.0 means every tensor crossed HBM once; more means
re-reads that L2 did not absorb, or mask traffic. Where ``ncu`` is missing or may not read the
counters, the case says so and nothing is measured.

``python -m pytest_attn.engine.hbm '<case json>' [--backends-from FILE ...]`` is the subprocess side. It builds
its registry as every process does (:func:`pytest_attn.backends.assemble_registry`): a back end registered from a
conftest is found through that file, which the session names.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from collections.abc import Sequence

from ..backends import assemble_registry
from ..core.codec import case_from_json
from ..core.record import Hbm
from .inputs import make_inputs, make_step

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
         "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30}
PERMISSION_HINT = (
    "ncu cannot read the GPU's performance counters here (ERR_NVGPUCTRPERM): run as root, or set the driver"
    " option NVreg_RestrictProfilingToAdminUsers=0"
)


def ncu_command(ncu: str, case_json: str, backends_from: Sequence[str] = ()) -> list[str]:
    """ncu over this module's subprocess side; ``backends_from``: the files that register the case's back end."""
    files = [arg for path in backends_from for arg in ("--backends-from", path)]
    return [ncu, "--metrics", ",".join(METRICS), "--clock-control", "none", "--profile-from-start", "off",
            "--csv", "--target-processes", "all", sys.executable, "-m", "pytest_attn.engine.hbm", case_json, *files]


def subprocess_args(argv: Sequence[str]) -> tuple[str, list[str]]:
    """The subprocess side's arguments: the case JSON, and the files named by ``--backends-from``."""
    case_json, rest = argv[0], list(argv[1:])
    files = [rest[i + 1] for i in range(0, len(rest) - 1, 2) if rest[i] == "--backends-from"]
    return case_json, files


def parse_ncu_csv(text: str) -> tuple[float, float, int]:
    """(bytes read, bytes written, kernels) summed over the kernels in ``ncu --csv`` output."""
    start = text.find('"ID"')
    if start < 0:
        raise ValueError("no CSV table in ncu's output")
    totals = dict.fromkeys(METRICS, 0.0)
    kernels: set[str] = set()
    for row in csv.DictReader(io.StringIO(text[start:])):
        name = row.get("Metric Name")
        if name not in totals:
            continue
        unit = (row.get("Metric Unit") or "byte").strip().lower()
        if unit not in UNITS:
            raise ValueError(f"unknown unit {unit!r} for {name}")
        value = float((row.get("Metric Value") or "0").replace(",", ""))
        totals[name] += value * UNITS[unit]
        kernels.add(row.get("ID", ""))
    return totals[METRICS[0]], totals[METRICS[1]], len(kernels)


def measure(case_json: str, min_bytes: int, timeout_s: float = 600, backends_from: Sequence[str] = ()) -> Hbm | str:
    """Run the case under ncu; the traffic, or why it could not be measured."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return "ncu (Nsight Compute) is not on PATH: install it to measure HBM traffic"
    try:
        done = subprocess.run(ncu_command(ncu, case_json, backends_from), capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"ncu did not finish within {timeout_s:.0f} s"
    output = done.stdout + done.stderr
    if "ERR_NVGPUCTRPERM" in output:
        return PERMISSION_HINT
    try:
        read, write, kernels = parse_ncu_csv(done.stdout)
    except ValueError as exc:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        return f"ncu gave no counters ({exc}; exit {done.returncode}: {tail[0][:200]})"
    if kernels == 0:
        return "ncu profiled no kernel (the call launched none between cudaProfilerStart and Stop)"
    return Hbm(read, write, kernels, min_bytes)


def main(argv: list[str] | None = None) -> int:
    """Subprocess side: warm the case up, then run one call between cudaProfilerStart and Stop."""
    import torch

    case_json, files = subprocess_args(sys.argv[1:] if argv is None else argv)
    case, seed = case_from_json(case_json)
    backend = assemble_registry(files=files).get(case.backend)
    dev = torch.device("cuda")
    inputs = make_inputs(case, backend.layout, dev, requires_grad=case.direction == "fwd+bwd", seed=seed)
    step = make_step(case, backend.prepare(case, inputs), inputs)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
