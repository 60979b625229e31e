"""Fixtures of the systemd tier: one real systemd 252 manager for the whole session
(``tests/support/systemd_sandbox.py``), and installs whose ``hermes`` runs inside it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.support import systemd_sandbox
from tests.support.systemd_fleet import SandboxInstall


@pytest.fixture(scope="session")
def sandbox():
    """The private manager; the whole tier skips, with one reason, where it cannot run."""
    why = systemd_sandbox.unavailable()
    if why is not None:
        pytest.skip(f"systemd tier: {why}")
    with systemd_sandbox.Sandbox() as box:
        yield box


@pytest.fixture
def installs(sandbox, request):
    """Make installs in the sandbox's work dir (``installs(name)``); each one's units are removed
    and its gateways stopped at the end, so the next test starts from an empty manager."""
    made: list[SandboxInstall] = []

    def make(name: str) -> SandboxInstall:
        made.append(SandboxInstall(sandbox, Path(tempfile.mkdtemp(prefix=f"{name}-", dir=sandbox.work))))
        return made[-1]

    yield make
    for install in made:
        install.remove_units()
