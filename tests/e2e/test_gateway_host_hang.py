"""Hang detection under ``hermes mesh up``: a gateway whose loop is blocked (the ``gateway:turn:a``
pause point, inside a caller's turn on the trio loop) fails the host's health checks, is killed
and forked again by its host, and serves; the other gateway is left alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shared import homes
from shared.gateways import ops
from shared.protocol import RemoteError
from shared.transport import NO_RETRY, connect
from tests.e2e.test_gateway_host import host_status, running
from tests.support import mesh_roots
from tests.support.cli import hermes
from tests.support.processes import wait_for

pytestmark = pytest.mark.slow

WAIT = 60.0
# Checked every second, killed after two failures: the test waits seconds, not the defaults' 15.
CONFIG = "gateway_host:\n  health_interval: 1\n  health_failures: 2\n"


@pytest.fixture
def mesh_root() -> Iterator[Path]:
    with mesh_roots.mesh_root("a") as root:
        (root / "config.yaml").write_text(CONFIG)
        yield root


def _blocking_turn(root: Path) -> str:
    """A caller's turn to ``a``: it blocks the gateway's loop, and ends when the gateway dies."""
    endpoint = homes.endpoint(homes.profile_home("a", root), ops.SERVICE, create=False)
    try:
        with connect(endpoint, retry=NO_RETRY) as client:
            client.call(ops.TURN, {"text": "hold the loop"}, timeout=WAIT)
    except RemoteError as exc:
        return exc.code
    return "answered"


def test_a_gateway_whose_loop_is_blocked_is_killed_and_forked_again(mesh_root):
    up = hermes(
        "mesh",
        "up",
        "--host",
        "--json",
        home=mesh_root,
        env_extra={"HERMES_FAULT_PAUSE_AT": "gateway:turn:a"},
        timeout=120,
    )
    assert up.returncode == 0, up.stderr
    first = {
        p: wait_for(lambda p=p: running(mesh_root, p), timeout=WAIT, what=f"{p} running") for p in ("default", "a")
    }
    healthy = hermes("-p", "a", "gateway", "health", home=mesh_root)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr

    with ThreadPoolExecutor(1) as pool:
        turn = pool.submit(_blocking_turn, mesh_root)
        again = wait_for(
            lambda: running(mesh_root, "a", not_pid=first["a"]["pid"]), timeout=WAIT, what="a forked again"
        )
        assert turn.result(timeout=WAIT) != "answered"  # its gateway died inside the turn

    status = host_status(mesh_root)["profiles"]
    assert status["a"]["crashes"] == 1 and status["a"]["starts"] == 2, status["a"]
    assert status["default"]["pid"] == first["default"]["pid"] and status["default"]["starts"] == 1
    wait_for(
        lambda: hermes("-p", "a", "gateway", "health", home=mesh_root).returncode == 0,
        timeout=WAIT,
        what="a healthy again",
    )
    checked = json.loads(hermes("-p", "a", "gateway", "health", "--json", home=mesh_root).stdout)
    assert checked["health"]["state"] == "healthy" and again["pid"] != first["a"]["pid"]
