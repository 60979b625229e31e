"""Fixtures of the end-to-end tier, which start processes: peers, gateways, clones of this
checkout, the portal simulator as a child process, whole installs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.installs import Install, clone_checkout
from tests.support.portal import PortalSim
from tests.support.processes import GatewayProcess, Peer


@pytest.fixture
def spawn():
    """Start real peers (``python ARGV`` that print a ready line); every one is killed at the end."""
    peers: list[Peer] = []

    def start(*argv: str, env: dict[str, str] | None = None) -> Peer:
        peer = Peer(list(argv), env=env)
        peers.append(peer)
        return peer

    yield start
    for peer in peers:
        peer.kill()


@pytest.fixture
def gateways():
    """Start real gateways; every one still alive at the end of the test is killed."""
    started: list[GatewayProcess] = []

    def start(root: Path, profile: str = "default", **kwargs) -> GatewayProcess:
        gateway = GatewayProcess(root, profile, **kwargs)
        started.append(gateway)
        gateway.wait_running()
        return gateway

    yield start
    for gateway in started:
        gateway.kill()


@pytest.fixture
def code(short_dir) -> Path:
    """A clone of this checkout for the gateways to run: its commits are the releases."""
    return clone_checkout(short_dir / "code")


@pytest.fixture
def sim(tmp_path):
    """A running portal simulator that lets clients poll as fast as they like."""
    with PortalSim(tmp_path / "portal") as sim:
        sim.configure(interval=0)
        yield sim


@pytest.fixture
def install(short_dir):
    """An install, its origin and its home; every gateway it started is killed and its mesh stopped."""
    built = Install(short_dir)
    yield built
    built.stop()
