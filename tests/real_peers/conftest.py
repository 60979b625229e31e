"""The real-peer tier: the real Hermes Agent from the package registry, installed once per
checkout into a throwaway environment. It skips, saying why, only when the registry cannot be
reached or this machine cannot keep a command off the network."""

from __future__ import annotations

import pytest

from tests.support import real_hermes


@pytest.fixture(scope="session")
def real_hermes_agent() -> real_hermes.RealHermes:
    why = real_hermes.offline_unavailable()
    if why is not None:
        pytest.skip(why)
    found = real_hermes.installed()
    if isinstance(found, str):
        pytest.skip(found)
    return found
