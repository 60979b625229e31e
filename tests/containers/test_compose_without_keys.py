"""``compose up`` with the keys step skipped: every service says, in its log, that it has no
CURVE keys and exits 78 (a configuration error); then ``down -v`` leaves nothing of the project
behind: no container, volume, network or pod."""

from __future__ import annotations

import json

import pytest

from tests.containers.test_mesh import FILES, SERVICES, UP_TIMEOUT, free_port_pairs
from tests.support.podman_sandbox import refuse_bridges
from tests.support.processes import wait_for

pytestmark = pytest.mark.containers

PROJECT = "hmnokeys"
CONFIG_EXIT = 78
MISSING = "no CURVE keys"  # curve_key_missing's message, as each service prints it


def test_up_without_keys_says_so_and_down_leaves_nothing(sandbox, image):
    ports = free_port_pairs(len(SERVICES) + 1)
    env = {
        "HERMES_IMAGE": image,
        "HERMES_CI_MESH_TCP": ",".join(f"{n}=tcp://127.0.0.1:{p}" for n, p in zip(SERVICES, ports, strict=False)),
        "HERMES_CI_PORTAL_PORT": str(ports[-1]),
    }
    refuse_bridges(FILES, env)

    def compose(*args: str):
        return sandbox.compose(PROJECT, FILES, *args, env=env, check=False)

    def logs(service: str) -> str:
        done = sandbox.podman("logs", f"{PROJECT}_{service}_1", check=False)
        return done.stdout + done.stderr

    try:
        compose("up", "-d")
        for service in SERVICES.values():
            wait_for(lambda s=service: MISSING in logs(s), timeout=UP_TIMEOUT, what=f"{service} saying why")
            exits = sandbox.podman("inspect", f"{PROJECT}_{service}_1", "--format", "{{.State.ExitCode}}").stdout
            assert int(exits.strip() or 0) in (0, CONFIG_EXIT), (service, exits)
            assert "Traceback" not in logs(service), service
    finally:
        down = compose("--profile", "setup", "down", "-v", "-t", "5")
    assert down.returncode == 0, down.stderr
    label = f"label=io.podman.compose.project={PROJECT}"
    for what in (("ps", "-a"), ("volume", "ls"), ("network", "ls"), ("pod", "ps")):
        found = sandbox.podman(*what, "--filter", label, "--format", "json").stdout
        assert json.loads(found or "[]") in ([], None), what
