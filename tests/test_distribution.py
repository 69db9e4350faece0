"""A back end names the distribution it measures (``Backend.distribution``); the registry's distributions,
with their installed versions, are the libraries of a run's fingerprint and of an A/B arm's hello.

The fake back ends name ``pluggy``: installed wherever pytest is, so its version is known here and on a GPU
machine alike (``six``, the first choice, is not installed in every environment the tests run in)."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import pytest
from factories import CPU, H200, attention_suite, record

from pytest_attn.backends import Registry, RegistryError, builtin_registry, installed_versions
from pytest_attn.backends.base import canonical_distribution, distribution_of
from pytest_attn.core.device import DeviceInfo
from pytest_attn.engine.ab import worker as arm_module
from pytest_attn.engine.ab.messages import Hello
from pytest_attn.engine.nvml import NoNvml
from pytest_attn.verdicts.decision import refusal
from pytest_attn.verdicts.fingerprint import Fingerprint, differences, fingerprint_of

PLUGGY = metadata.version("pluggy")
H200_BASELINE = Path(__file__).parents[1] / "baselines" / "nvidia-h200" / "baseline.json"

BACKEND = '''
class Mine:
    name = "mine"
    description = "my attention kernel (SDPA math underneath)"
    layout = "bhsd"
    needs_cuda = False
    has_backward = False
    default_enabled = False
    distribution = "{distribution}"

    def available(self):
        return None

    def supports(self, case, device):
        return None

    def workspace_bytes(self, case):
        return 0

    def prepare(self, case, inputs):
        import torch.nn.functional as F

        q, k, v = inputs.q, inputs.k, inputs.v
        return lambda: F.scaled_dot_product_attention(q, k, v, scale=case.scale)


def pytest_attn_register_backends(registry, config):
    registry.register(Mine())
'''


def conftest(distribution: str = "pluggy") -> str:
    return BACKEND.format(distribution=distribution)


class Named:
    """The least a registry takes, naming ``distribution`` (or nothing, where it is left out)."""

    description = "a back end"
    layout = "thd"
    needs_cuda = False
    has_backward = False
    default_enabled = False

    def __init__(self, name: str, *distribution: object) -> None:
        self.name = name
        if distribution:
            self.distribution = distribution[0]

    def available(self):
        return None

    def supports(self, case, device):
        return None

    def prepare(self, case, inputs):
        raise NotImplementedError

    def workspace_bytes(self, case):
        return 0


def test_every_built_in_back_end_names_the_distribution_it_measures():
    registry = builtin_registry()
    by_name = {b.name: distribution_of(b) for b in registry}
    assert {by_name[n] for n in ("flash-attn", "flash-attn-varlen", "flash-attn-kvcache", "flash-attn-paged")} \
        == {"flash-attn"}
    assert (by_name["fa3"], by_name["fa4"], by_name["fa4-paged"]) == ("flash-attn-3", "flash-attn-4", "flash-attn-4")
    assert {d for n, d in by_name.items() if n.startswith("flashinfer-")} == {"flashinfer-python"}
    assert {d for n, d in by_name.items() if n.startswith("sdpa-") or n in ("flex", "varlen", "reference")} == {None}
    assert registry.distributions() == ["flash-attn", "flash-attn-3", "flash-attn-4", "flashinfer-python"]


def test_a_distribution_is_optional_canonical_and_checked_at_registration():
    registry = Registry([Named("plain"), Named("torchy", None), Named("a", "Flash_Attn"), Named("b", "flash-attn"),
                         Named("c", "pluggy")])
    assert distribution_of(Named("plain")) is None  # the README's recipe names none
    assert registry.distributions() == ["flash-attn", "pluggy"]
    assert canonical_distribution("My.Kernels__x") == "my-kernels-x"
    assert installed_versions(["pluggy", "surely-not-installed-here"]) == {"pluggy": PLUGGY}
    for bad in ("my kernels", "", 3):
        with pytest.raises(RegistryError, match=r"back end 'bad': distribution=.* is not a distribution's name"):
            Registry([Named("bad", bad)])


def test_a_hook_registered_back_end_s_version_lands_in_the_baseline_fingerprint(pytester):
    pytester.makeconftest(conftest("Pluggy"))  # spelled otherwise than pip's name: the same distribution
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--attn-backends=mine", "--attn-case=seqlen=16,heads=2,head_dim=16,dtype=fp32",
        "--attn-max-time=0.05", "--attn-min-samples=5", "--attn-save-baseline", "--attn-baselines-dir=bl")
    result.assert_outcomes(passed=1)
    (saved,) = (pytester.path / "bl").glob("*/baseline.json")
    libraries = json.loads(saved.read_text())["machine_info"]["attn_fingerprint"]["libraries"]
    assert libraries["pluggy"] == PLUGGY
    assert set(libraries) <= {"pluggy", *builtin_registry().distributions()}  # the registry's, nothing else


def _h200_like_the_baseline(driver: str = "580.159.04") -> DeviceInfo:
    return DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="2.11.0+cu130", sm_count=132,
                      total_memory_bytes=140 << 30, driver=driver, cuda_version="13.0", power_limit_w=700.0,
                      ecc="on", mig="off")


def test_a_baseline_with_the_old_flat_library_fields_compares_without_a_spurious_note():
    base = json.loads(H200_BASELINE.read_text())
    stored = Fingerprint.from_dict(base["machine_info"]["attn_fingerprint"])
    assert stored.libraries == {"flash-attn": "2.8.3.post2", "flash-attn-4": "4.0.0b36"}  # flashinfer: null
    assert {"flash_attn", "flash_attn_4", "flashinfer"}.isdisjoint(stored.as_dict())
    assert Fingerprint.from_dict(stored.as_dict()) == stored
    same = fingerprint_of(_h200_like_the_baseline(), libraries={"flash-attn": "2.8.3.post2", "flash-attn-4": "4.0.0b36",
                                                                "flashinfer-python": "0.6.1"})
    assert differences(stored, same) == ([], [])
    assert refusal(base, "baselines/nvidia-h200/baseline.json", same) == (None, [])  # the gate's notes: none
    newer = fingerprint_of(_h200_like_the_baseline(), libraries={"flash-attn": "2.8.4", "flash-attn-4": "4.0.0b36"})
    assert refusal(base, "b", newer) == (None, ["differs from the baseline: flash-attn: 2.8.3.post2 (baseline) -> 2.8.4"
                                                " (this run)"])


def test_a_fingerprint_s_libraries_must_map_names_to_versions():
    with pytest.raises(ValueError, match="'libraries' maps distribution names to versions, not"):
        Fingerprint.from_dict({"gpu": "NVIDIA H200", "libraries": {"flash-attn": 2}})
    with pytest.raises(ValueError, match="'libraries' maps distribution names to versions, not"):
        Fingerprint.from_dict({"gpu": "NVIDIA H200", "libraries": ["flash-attn"]})


def _run_file(path: Path, pluggy: str) -> str:
    rec = record("fa4", 1e-3, test="t")
    run = {"benchmarks": [{"name": "t", "fullname": "t", "stats": {"median": 1e-3}, "extra_info": rec.to_json()}],
           "machine_info": {"attn_fingerprint": fingerprint_of(H200, libraries={"pluggy": pluggy}).as_dict()}}
    path.write_text(json.dumps(run))
    return str(path)


def test_a_merge_compares_the_libraries_its_shards_measured(tmp_path, capsys):
    """Not those of the process that merges (which here has pluggy of another version, and no flash-attn)."""
    from pytest_attn.verdicts.cli import main

    target = tmp_path / "nvidia-h200" / "baseline.json"
    assert main(["baseline", "add", str(target), _run_file(tmp_path / "base.json", "0.9")]) == 0
    capsys.readouterr()
    assert main(["merge", _run_file(tmp_path / "shard.json", "1.0"), "--baseline", str(target)]) == 0
    assert "differs from the baseline: pluggy: 0.9 (baseline) -> 1.0 (this run)" in capsys.readouterr().out


def test_an_a_b_arm_lists_the_distribution_of_a_registered_back_end(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # --backends-from puts the conftest's folder first
    (tmp_path / "conftest.py").write_text(conftest())
    arm = arm_module.Arm(lambda: (CPU, NoNvml("a test")))
    about = arm.hello(Hello({"timer": "auto"}, [str(tmp_path / "conftest.py")]))
    assert about.versions["pluggy"] == PLUGGY and about.places["pluggy"]
    assert about.versions["torch"] == metadata.version("torch")
    assert "pluggy" not in arm_module.libraries(builtin_registry())  # not registered there: not listed
