"""Fixtures of the container tier: one private podman for the whole session
(``tests/support/podman_sandbox.py``) and the image of this commit, built in it once."""

from __future__ import annotations

import pytest

from tests.support import podman_sandbox
from tests.support.processes import ROOT

IMAGE = "localhost/hermes-mesh:test"


@pytest.fixture(scope="session")
def sandbox():
    """The private podman; the whole tier skips, with one reason, where it cannot run. On the
    way out it removes everything and fails the run if the host is not as it was."""
    why = podman_sandbox.unavailable()
    if why is not None:
        pytest.skip(f"container tier: {why}")
    with podman_sandbox.PodmanSandbox() as box:
        yield box


@pytest.fixture(scope="session")
def image(sandbox) -> str:
    sandbox.build_image(ROOT, IMAGE)
    return IMAGE
