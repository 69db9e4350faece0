"""The command line: the hook spec for bringing one's own back end, the ``--attn-*`` options declared
(:mod:`.options` converts them), and a misspelled ``--attn-*`` flag refused at start-up with the flags it
may have meant."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from . import hookspecs
from .options import DEFAULTS, add_options


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


def misspelled(args: Sequence[str], known: Callable[[Sequence[str]], list[str]]) -> str | None:
    """What to say of an ``--attn-*`` flag among ``args`` that is none of this plugin's: pytest's own message
    is "unrecognized arguments", with no hint; this one names the closest flags. ``known(args)`` gives the
    flags the whole parser does not know (a conftest may add ``--attn-*`` options of its own); it is asked
    only where a flag is not one of ours, so a correct command line costs a scan of its words."""
    import difflib  # only where a flag is wrong: 2 ms of every pytest session otherwise

    ours = [flag for flag, _ in DEFAULTS.values()]
    suspects = [a.split("=", 1)[0] for a in args if a.startswith("--attn-") and a.split("=", 1)[0] not in ours]
    if not suspects:
        return None
    unknown = {u.split("=", 1)[0] for u in known(args)}
    bad = [flag for flag in suspects if flag in unknown]
    if not bad:
        return None
    said = []
    for flag in bad:
        stems = {f.removeprefix("--attn-"): f for f in ours}
        close = [stems[m] for m in difflib.get_close_matches(flag.removeprefix("--attn-"), stems, n=2, cutoff=0.7)]
        said.append(f"{flag}: did you mean {' or '.join(close)}?" if close
                    else f"{flag}: no such option (pytest --help lists the --attn-* options)")
    return "unknown pytest-attn option " + "; ".join(said)
