"""Why a run selected no attention case, naming what removed them: the profile holds none of the kind these tests
take (and which profile does), ``--attn-dtypes`` or ``--attn-directions`` filtered every one out (an
``--attn-case`` included), no selected back end takes part, or ``-k`` / ``-m`` deselected them -- with ``-k``,
which profiles hold a case it matches (``-k llama`` on a CPU: the cpu profile has no Llama case; the default one
does, on a GPU)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import pytest

from ..core.case import AttnCase
from ..core.catalog import PROFILES, Variant, profile_variants
from .session import AttnSession

#: How many shape names a line lists before it counts the rest.
SHOWN = 4


def why_none_selected(config: pytest.Config, attn: AttnSession) -> str | None:
    """What removed every attention case of this run, or None where it cannot tell (no test asked for cases
    through ``attn_cases``, or a filter of another plugin)."""
    kinds = attn.kinds_asked
    if not kinds:
        return None
    options, profile = attn.options, attn.profile
    only_adhoc = bool(options.adhoc) and options.profile == "auto"
    catalog = [] if only_adhoc else [v for k in kinds for v in profile_variants(profile, k)]
    adhoc = [v for v in options.adhoc if v.shape.kind in kinds or "all" in kinds]
    pool = catalog + adhoc
    if not pool:
        return _elsewhere(config, [v for v in options.adhoc if v not in adhoc], kinds) or (
            f"{_profile(attn)} holds no {_kinds(kinds)} problem; --attn-profile=NAME picks another"
            f" ({', '.join(PROFILES)})")
    for flag, wanted, field in (("--attn-dtypes", options.dtypes, "dtype"),
                                ("--attn-directions", options.directions, "direction")):
        if not wanted:
            continue
        kept = [v for v in pool if getattr(v, field) in wanted]
        if not kept:
            have = ", ".join(sorted({getattr(v, field) for v in pool}))
            removed = "the one problem" if len(pool) == 1 else f"all {len(pool)} problems"
            return (f"{flag}={','.join(wanted)} removed {removed} of these tests: {_names(pool)}"
                    f" {'is' if len(pool) == 1 else 'are'} {have}{_adhoc_fix(field, wanted) if adhoc else ''}")
        pool = kept
    backends = sorted({b for k in kinds for b in attn.backends_for(k)})
    if not backends:
        return f"none of the selected back ends ({', '.join(attn.backends)}) takes part in {_kinds(kinds)} tests"
    cases = [v.case(b) for v in pool for b in backends]
    keyword, marks = config.option.keyword, config.option.markexpr
    if keyword:
        return _keyword(attn, keyword, cases, kinds, backends)
    if marks:
        return f"-m {marks!r} deselected all {len(cases)} case(s) of these tests"
    return None


def _keyword(attn: AttnSession, keyword: str, cases: list[AttnCase], kinds: list[str], backends: list[str]) -> str:
    """``-k`` matched none of this profile's cases: which profiles hold one it matches, and how to run them."""
    line = (f"-k {keyword!r} matched none of these tests' {len(cases)} case(s) in {_profile(attn)}:"
            f" {_names_of({c.shape for c in cases})}")
    found = []
    for other in PROFILES:
        if other == attn.profile:
            continue
        variants = [v for k in kinds for v in profile_variants(other, k)
                    if (not attn.options.dtypes or v.dtype in attn.options.dtypes)
                    and (not attn.options.directions or v.direction in attn.options.directions)]
        if any(keyword_matches(keyword, attn.test_names(v.case(b).id)) for v in variants for b in backends):
            found.append(other)
    if not found:
        return f"{line}; no profile holds a case it matches"
    pick = "default" if "default" in found else found[0]
    where = " on a GPU" if pick != "cpu" and not attn.has_gpu else ""
    return f"{line}; cases it matches are in the {_and(found)} profile{'s' if len(found) > 1 else ''}:" \
           f" --attn-profile={pick}{where}"


def _elsewhere(config: pytest.Config, adhoc: list[Variant], kinds: list[str]) -> str:
    """``--attn-case`` problems of a kind these tests do not take: where they run (a test file of this folder's
    that takes them, where there is one)."""
    said = []
    for v in adhoc:
        kind = v.shape.kind
        suite = config.rootpath / "suites" / f"test_{kind}.py"
        here = f", e.g. {os.path.relpath(suite, config.invocation_params.dir)}" if suite.is_file() else ""
        said.append(f"--attn-case {v.shape.source.removeprefix('--attn-case ')!r} is a {kind} problem, and these"
                    f" tests take {_kinds(kinds)} problems: it runs in a test whose cases come from"
                    f" attn_cases(config, {kind!r}){here}")
    return "; ".join(said)


def _adhoc_fix(field: str, wanted: Sequence[str]) -> str:
    """How an --attn-case gets past the filter that removed it."""
    if field == "dtype":
        return f" (an --attn-case is bf16 unless it says dtype=: add dtype={wanted[0]} to it)"
    return " (an --attn-case is fwd unless it says fwd+bwd: add fwd+bwd to it)" if "fwd+bwd" in wanted else ""


def _profile(attn: AttnSession) -> str:
    auto = attn.options.profile == "auto"
    return f"the {attn.profile} profile" + (" (the one without a GPU: tiny shapes)" if auto and attn.profile == "cpu"
                                            else "")


def _and(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _kinds(kinds: Sequence[str]) -> str:
    return " or ".join(kinds)


def _names(variants: Sequence[Variant]) -> str:
    adhoc = [v for v in variants if v.shape.source.startswith("--attn-case")]
    if adhoc and len(adhoc) == len(variants):
        return ", ".join(f"--attn-case {v.shape.source.removeprefix('--attn-case ')!r}" for v in adhoc)
    return _names_of({v.shape.name for v in variants})


def _names_of(names: set[str]) -> str:
    shown = sorted(names)[:SHOWN]
    return ", ".join(shown) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


# ---- pytest's -k, read the way pytest reads it ---------------------------------------------------------------
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def keyword_matches(expression: str, names: Sequence[str]) -> bool | None:
    """Whether ``-k expression`` selects a test whose names (its own, its parents') are ``names``: ``and``, ``or``,
    ``not`` and parentheses over words, each true where it is a case-insensitive part of one of the names
    (pytest's rule). None where the expression is not one this reads."""
    tokens = _TOKEN.findall(expression)
    lowered = [n.lower() for n in names]
    at = 0

    def peek() -> str | None:
        return tokens[at] if at < len(tokens) else None

    def take() -> str:
        nonlocal at
        at += 1
        return tokens[at - 1]

    def either() -> bool:
        value = both()
        while peek() == "or":
            take()
            value = both() or value
        return value

    def both() -> bool:
        value = negated()
        while peek() == "and":
            take()
            value = negated() and value
        return value

    def negated() -> bool:
        word = peek()
        if word is None or word in ("and", "or", ")"):
            raise ValueError(f"unexpected {word!r}")
        take()
        if word == "not":
            return not negated()
        if word == "(":
            value = either()
            if peek() != ")":
                raise ValueError("unclosed (")
            take()
            return value
        return any(word.lower() in n for n in lowered)

    try:
        value = either()
    except (ValueError, IndexError):
        return None
    return value if at == len(tokens) else None
