"""Two hosts (network namespaces joined by a veth pair): a gateway on host A, its client on
host B, talking over TCP+CURVE; a wrong key from B fails fast with its typed error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shared.transport import curve_keys
from tests.support import netns
from tests.support.cli import HERMES, hermes
from tests.support.processes import ROOT, python_env, read_state, wait_for
from tests.support.tcp import tcp_env

# Run with the host tiers, one at a time (tests/support/parallel.py): `ip netns add` mounts on the host.
PORT = 7420
# Far longer than a handshake takes: failing "fast" means well within it.
CALL_TIMEOUT = 30.0

# What host B runs: one ping of the gateway named in its own install's settings.
CLIENT = """
import json, sys, time
from shared import homes
from shared.gateways import ops
from shared.protocol import RemoteError
from shared.transport.sync_client import connect
started = time.monotonic()
try:
    with connect(homes.endpoint(homes.root_home(), "gateway", create=False)) as client:
        out = {"answer": client.call(ops.PING, timeout=float(sys.argv[1]))}
except RemoteError as exc:
    out = {"code": exc.code}
out["seconds"] = time.monotonic() - started
print(json.dumps(out))
"""


@pytest.fixture
def hosts():
    why = netns.unavailable()
    if why:
        pytest.skip(why)
    pair = netns.TwoHosts()
    try:
        why = pair.open()
        if why:
            pytest.skip(f"cannot make network namespaces here: {why}")
        yield pair
    finally:
        pair.close()
        assert not netns.existing() & {pair.a, pair.b}, "network namespaces were left behind"


def _public(root: Path, *path: str) -> str:
    return (curve_keys.store(root).joinpath(*path)).read_text().strip()


def test_client_on_another_host_talks_curve_and_a_wrong_key_fails_fast(hosts, short_dir):
    host_a, host_b = short_dir / "a", short_dir / "b"
    env_a = python_env(HERMES_HOME=str(host_a), **tcp_env("gateway", PORT, host=hosts.address_a))
    env_b = python_env(HERMES_HOME=str(host_b), **tcp_env("gateway", PORT, host=hosts.address_a))
    for home in (host_a, host_b):
        assert hermes("mesh", "keys", "init", home=home).returncode == 0
    client_b = curve_keys.public_of(curve_keys.client_secret(host_b)).decode()
    gateway_a = _public(host_a, "servers", "gateway.key")
    assert hermes("mesh", "keys", "authorize", "host-b", client_b, home=host_a).returncode == 0
    assert hermes("mesh", "keys", "authorize", "gateway", gateway_a, "--server", home=host_b).returncode == 0

    gateway = subprocess.Popen(
        [*hosts.exec(hosts.a), sys.executable, "-m", "services.gateway"],
        cwd=ROOT,
        env=env_a,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(
            lambda: gateway.poll() is None and (read_state(host_a) or {}).get("gateway_state") == "running",
            timeout=30,
            what="the gateway on host A",
        )

        def ping_from_b() -> dict:
            done = subprocess.run(
                [*hosts.exec(hosts.b), sys.executable, "-c", CLIENT, str(CALL_TIMEOUT)],
                cwd=ROOT,
                env=env_b,
                capture_output=True,
                text=True,
                timeout=CALL_TIMEOUT * 2,
            )
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        assert ping_from_b()["answer"] == {"pong": True, "pid": gateway.pid}
        # The CLI on host B lists host A's gateway from its own answer over CURVE.
        status = subprocess.run(
            [*hosts.exec(hosts.b), *HERMES, "gateway", "status", "--json"],
            cwd=ROOT,
            env=env_b,
            capture_output=True,
            text=True,
            timeout=CALL_TIMEOUT,
        )
        assert status.returncode == 0, status.stderr
        listed = json.loads(status.stdout)["gateways"]
        assert [(g["pid"], g["source"], g["profile"]) for g in listed] == [(gateway.pid, "socket", "default")]
        assert hermes("mesh", "keys", "revoke", "host-b", home=host_a).returncode == 0
        refused = ping_from_b()
        assert refused["code"] == "auth_failed" and refused["seconds"] < CALL_TIMEOUT / 2
        assert hermes("mesh", "keys", "authorize", "host-b", client_b, home=host_a).returncode == 0
        wrong = _public(host_b, "authorized", "local.key")  # any key but the gateway's
        assert hermes("mesh", "keys", "authorize", "gateway", wrong, "--server", home=host_b).returncode == 0
        mismatch = ping_from_b()
        assert mismatch["code"] == "server_key_mismatch" and mismatch["seconds"] < CALL_TIMEOUT / 2
        assert gateway.poll() is None
    finally:
        gateway.kill()
        gateway.wait(timeout=10)
