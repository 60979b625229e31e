"""``compose up`` with the keys step skipped fails at once, naming the store that was never
made, and starts nothing (so nothing exits and is started again); ``down -v`` then leaves
nothing of the project behind: no container, volume, network or pod."""

from __future__ import annotations

import json

import pytest

from tests.containers.test_mesh import FILES, SERVICES, free_port_pairs
from tests.support.podman_sandbox import refuse_bridges

pytestmark = pytest.mark.containers

PROJECT = "hmnokeys"


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

    label = f"label=io.podman.compose.project={PROJECT}"

    def found(*what: str) -> list:
        return json.loads(sandbox.podman(*what, "--filter", label, "--format", "json").stdout or "[]") or []

    try:
        up = compose("up", "-d")
        print("up without keys:", up.returncode, (up.stdout + up.stderr).strip().splitlines()[-1:])
        assert up.returncode != 0
        said = up.stdout + up.stderr
        assert f"{PROJECT}_keys-" in said and "does not exist" in said, said[-2000:]
        assert [c for c in found("ps", "-a") if c["State"] == "running" or c.get("Restarts")] == []
    finally:
        down = compose("--profile", "setup", "down", "-v", "-t", "5")
    assert down.returncode == 0, down.stderr
    for what in (("ps", "-a"), ("volume", "ls"), ("network", "ls"), ("pod", "ps")):
        assert found(*what) == [], what
