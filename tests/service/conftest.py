"""The service tier: real sockets, servers in this process. A test here that starts a process fails."""

from __future__ import annotations

import httpx
import pytest

from tests.support.portal import PortalSim
from tests.support.portal_api import DEFAULTS
from tests.support.tiers import forbidden


@pytest.fixture(autouse=True)
def _no_process(monkeypatch: pytest.MonkeyPatch):
    with forbidden(monkeypatch, "service", sockets=False):
        yield


@pytest.fixture(scope="package")
def portal(tmp_path_factory: pytest.TempPathFactory):
    """The portal simulator's server in this process, shared by the tier's tests."""
    with PortalSim(tmp_path_factory.mktemp("portal"), in_process=True) as sim:
        yield sim


@pytest.fixture
def sim(portal: PortalSim) -> PortalSim:
    """The simulator, reset: no accounts, codes, guests, faults or requests."""
    portal.reset()
    portal.configure(**DEFAULTS)  # interval 0: tests poll as fast as they like unless they say otherwise
    return portal


@pytest.fixture
def web(sim: PortalSim):
    """An HTTP client of the simulator."""
    with httpx.Client(base_url=sim.url, timeout=10) as client:
        yield client
