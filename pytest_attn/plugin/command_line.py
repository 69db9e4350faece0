"""The command line: the hook spec for bringing one's own back end, the ``--attn-*`` options declared
(:mod:`.options` converts them), and a misspelled ``--attn-*`` flag refused at start-up with the flags it
may have meant."""

from __future__ import annotations

from typing import Any

import pytest

from . import hookspecs
from .options import add_options, misspelled


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> Any:
    """A misspelled ``--attn-*`` flag stops the run with the flags it may have meant (once the initial
    conftests, which may add options, are loaded), not with pytest's bare "unrecognized arguments"."""
    result = yield
    message = misspelled(args, lambda words: parser.parse_known_and_unknown_args(words)[1])
    if message:
        raise pytest.UsageError(message)
    return result
