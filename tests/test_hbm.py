"""HBM traffic through ncu (pytest_attn.engine.hbm): the command, the CSV parser, and every way it can
fail (a fake ncu)."""

from __future__ import annotations

import stat
import sys

import pytest

from pytest_attn.core.record import Hbm
from pytest_attn.engine import hbm

HEADER = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value")


def _row(kid, kernel, metric, unit, value):
    cells = (kid, "4242", "python3", "127.0.0.1", kernel, "1", "7", "(128, 1, 1)", "(874, 24, 1)", "0", "9.0",
             "Command line profiler metrics", metric, unit, value)
    return ",".join(f'"{c}"' for c in cells)


FLASH = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(Flash_fwd_params)"
# the shape of `ncu --csv --metrics ...` output: progress lines, then one row per kernel and metric
CSV = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3)",
    '==PROF== Profiling "flash_fwd_kernel": 0%....50%....100% - 1 pass',
    ",".join(f'"{h}"' for h in HEADER),
    _row("0", FLASH, "dram__bytes_read.sum", "Gbyte", "1.92"),
    _row("0", FLASH, "dram__bytes_write.sum", "Mbyte", "687.24"),
    _row("1", "void combine(Params)", "dram__bytes_read.sum", "Kbyte", "1,024.00"),
    _row("1", "void combine(Params)", "dram__bytes_write.sum", "byte", "512"),
]) + "\n"


def test_parse_sums_kernels_and_units():
    read, write, kernels = hbm.parse_ncu_csv(CSV)
    assert (read, write, kernels) == (pytest.approx(1.92e9 + 1.024e6), pytest.approx(687.24e6 + 512), 2)
    with pytest.raises(ValueError, match="no CSV table"):
        hbm.parse_ncu_csv("==ERROR== something")


def test_command_keeps_clocks_and_profiles_one_call():
    cmd = hbm.ncu_command("/usr/bin/ncu", "{}")
    assert cmd[:9] == ["/usr/bin/ncu", "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum", "--clock-control",
                       "none", "--profile-from-start", "off", "--csv", "--target-processes"]
    assert cmd[-3:] == ["-m", "pytest_attn.engine.hbm", "{}"]


def _fake_ncu(tmp_path, monkeypatch, output: str, code: int = 0):
    script = tmp_path / "ncu"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({output!r})\nsys.exit({code})\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}")


def test_measure_with_a_fake_ncu(tmp_path, monkeypatch):
    _fake_ncu(tmp_path, monkeypatch, CSV)
    traffic = hbm.measure("{}", min_bytes=2_000_000_000)
    assert isinstance(traffic, Hbm)
    assert traffic.amplification == pytest.approx((1.92e9 + 1.024e6 + 687.24e6 + 512) / 2e9)
    assert traffic.describe().startswith("HBM read 1.921 GB, written 0.687 GB over 2 kernels; minimal 2.000 GB")
    assert traffic.kernels == 2


def test_measure_says_why_not(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert hbm.measure("{}", 1) == "ncu (Nsight Compute) is not on PATH: install it to measure HBM traffic"
    _fake_ncu(tmp_path, monkeypatch, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n", 1)
    assert hbm.measure("{}", 1) == hbm.PERMISSION_HINT
    _fake_ncu(tmp_path, monkeypatch, "==ERROR== the application crashed\n", 3)
    assert hbm.measure("{}", 1).startswith("ncu gave no counters (no CSV table in ncu's output; exit 3:")
    header = CSV.splitlines()[2]
    _fake_ncu(tmp_path, monkeypatch, header + "\n")
    assert hbm.measure("{}", 1).startswith("ncu profiled no kernel")


def test_a_conftest_back_end_reaches_the_ncu_side_through_its_file(tmp_path):
    """--attn-hbm's subprocess built its registry from the built-in back ends alone: a back end registered by a
    conftest was unknown there. The session now names the file that registered it, and the subprocess builds its
    registry as every process does (pytest_attn.backends.assemble_registry)."""
    from pytest_attn.backends import assemble_registry

    cmd = hbm.ncu_command("/usr/bin/ncu", "{}", ["/p/conftest.py"])
    assert cmd[-5:] == ["-m", "pytest_attn.engine.hbm", "{}", "--backends-from", "/p/conftest.py"]
    case_json, files = hbm.subprocess_args(cmd[cmd.index("pytest_attn.engine.hbm") + 1:])
    assert (case_json, files) == ("{}", ["/p/conftest.py"])
    conftest = tmp_path / "conftest.py"
    conftest.write_text(
        "from pytest_attn.backends import SdpaBackend\n\n"
        "class Mine(SdpaBackend):\n    name = 'mine-hbm'\n\n"
        "def pytest_attn_register_backends(registry, config):\n    registry.register(Mine('math'))\n")
    registry = assemble_registry(files=[str(conftest)])
    assert registry.get("mine-hbm").name == "mine-hbm" and registry.origin("mine-hbm") == str(conftest)
    assert "sdpa-math" in registry.names()  # and the built-in ones
