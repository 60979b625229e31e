"""Fixtures for every tier; a tier's own live in its ``conftest.py``, helpers in ``tests/support/``."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.installs import Install, clone_checkout
from tests.support.portal import PortalSim
from tests.support.processes import GatewayProcess, Peer


@pytest.fixture
def short_dir():
    """A private directory with a short path: ipc socket paths must fit in 107 bytes,
    and pytest's own tmp_path can be longer than that."""
    path = Path(tempfile.mkdtemp(prefix="hm-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def endpoint(short_dir):
    """An ipc address and its lock file."""
    return f"ipc://{short_dir}/svc.ctl", short_dir / "svc.lock"


@pytest.fixture
def root(request: pytest.FixtureRequest, short_dir: Path):
    """An install's root home, made, under a short path. The test's ``root`` mark may ask for
    ``profiles`` (their homes are made too) and a ``run_dir`` (the private one sockets live in).
    A worker a test started on it (a login starts them detached) is stopped at the end."""
    from hermes_cli.commands.mesh import ON_DEMAND_WORKERS
    from shared import homes
    from shared.spawn import stop_service

    path = short_dir / "home"
    path.mkdir()
    mark = request.node.get_closest_marker("root")
    wanted = mark.kwargs if mark else {}
    for profile in wanted.get("profiles", ()):
        (path / "profiles" / profile).mkdir(parents=True)
    if wanted.get("run_dir"):
        homes.ensure_run_dir(path)
    yield path
    for worker in ON_DEMAND_WORKERS:
        stop_service(path, worker)


@pytest.fixture
def isolated_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config (credential helpers, pull/merge defaults) leaks into a test."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


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
