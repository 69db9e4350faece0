"""pytest wiring of the fuzz suite: its options, the Hypothesis profile, the ``attn_fuzzer`` fixture,
the (back end, direction) targets, opt-in on a GPU, and the examples-run summary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from . import fuzz_settings
from . import options as opt

if TYPE_CHECKING:
    from .device import DeviceInfo
    from .fuzz import Fuzzer

FUZZ_HEAD_DIMS = pytest.StashKey["tuple[int, ...] | None"]()
FUZZER = pytest.StashKey["Fuzzer"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attn")
    group.addoption("--attn-fuzz", action="store_true", default=False,
                    help="run the fuzz suite on a GPU too (it is opt-in there: it compiles kernels for many shapes);"
                         " naming a test_fuzz file on the command line does the same")
    group.addoption("--attn-fuzz-head-dims", type=opt.head_dims, default=None, metavar="LIST",
                    help="fuzz only these head dims (default: every one a back end takes, e.g. 16 ... 256 on a GPU);"
                         " --attn-dtypes narrows the fuzzed dtypes too")
    group.addoption("--attn-fuzz-examples", type=opt.positive_int("--attn-fuzz-examples"), default=None,
                    metavar="N", help="examples per property, overriding the Hypothesis profile's max_examples"
                                      " (e.g. a short run of a back end that compiles per example, like flex)")


@pytest.hookimpl(trylast=True)  # after Hypothesis' plugin has loaded a --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    config.stash[FUZZ_HEAD_DIMS] = config.getoption("attn_fuzz_head_dims")
    from hypothesis import settings

    profile = config.getoption("hypothesis_profile", None)  # Hypothesis' own option wins
    if profile is None:
        import torch

        profile = fuzz_settings.default_profile(torch.cuda.is_available())
        settings.load_profile(profile)
    examples = config.getoption("attn_fuzz_examples", None)
    if examples is not None:
        settings.load_profile(fuzz_settings.with_examples(profile, examples))


def fuzz_targets(config: pytest.Config) -> list[tuple[str, str]]:
    """(back end, direction) pairs to fuzz: every selected back end but the reference itself, forward,
    and forward+backward where it has a backward (``--attn-directions`` narrows them)."""
    from .plugin import attn_session

    session = attn_session(config)
    wanted = session.options.directions or ("fwd", "fwd+bwd")
    targets = []
    for name in session.backends:
        backend = session.registry.get(name)
        if name == "reference":
            continue
        for direction in wanted:
            if direction == "fwd" or backend.has_backward:
                targets.append((name, direction))
    return targets


def fuzz_opted_in(config: pytest.Config) -> bool:
    """On a GPU the fuzz suite runs only when asked: ``--attn-fuzz`` or a test_fuzz file named."""
    return bool(config.getoption("attn_fuzz")) or any("test_fuzz" in str(a) for a in config.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a GPU, fuzz tests skip unless opted in, so `pytest suites/` stays a benchmark run."""
    fuzz_items = [i for i in items if "fuzz_target" in getattr(i, "fixturenames", ())]
    if not fuzz_items or fuzz_opted_in(config):
        return
    import torch

    if torch.cuda.is_available():
        skip = pytest.mark.skip(reason="fuzzing is opt-in on a GPU (it compiles kernels for many shapes):"
                                       " run pytest suites/test_fuzz_varlen.py, or add --attn-fuzz")
        for item in fuzz_items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def attn_fuzzer(request: pytest.FixtureRequest, attn_device: DeviceInfo) -> Fuzzer:
    """Runs one fuzz example: ``attn_fuzzer.check(backend, direction, data)`` inside a ``@given`` test
    (see suites/test_fuzz_varlen.py)."""
    from .fuzz import Fuzzer
    from .plugin import attn_session

    session = attn_session(request.config)
    fuzzer = Fuzzer(session.registry, attn_device, dtypes=session.options.dtypes,
                    head_dims=request.config.stash[FUZZ_HEAD_DIMS])
    request.config.stash[FUZZER] = fuzzer
    return fuzzer


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    fuzzer = config.stash.get(FUZZER, None)
    if fuzzer is None or not fuzzer.examples:
        return
    from hypothesis import settings

    terminalreporter.write_sep("=", "pytest-attn fuzz")
    terminalreporter.write_line(f"hypothesis profile: {settings._current_profile}; examples that ran"
                                " (not rejected) per back end and direction:")
    for (name, direction), n in sorted(fuzzer.examples.items()):
        terminalreporter.write_line(f"  {name} {direction}: {n}")
