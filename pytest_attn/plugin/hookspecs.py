"""Hooks pytest-attn adds to pytest, for bringing your own back end."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..backends.base import Registry


@pytest.hookspec
def pytest_attn_register_backends(registry: Registry, config: pytest.Config) -> None:
    """Register back ends with ``registry.register(obj)``: implement it in a ``conftest.py`` (or a
    plugin). ``obj`` needs the interface of :class:`pytest_attn.backends.base.Backend`; a missing
    attribute or a name registered twice stops the session at start-up with the reason.

    Installed packages can use the entry-point group ``pytest_attn.backends`` instead: each entry
    point names a back-end object, a class (instantiated without arguments) or a function returning
    a list of back ends.
    """
