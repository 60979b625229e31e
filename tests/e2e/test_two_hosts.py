"""Two hosts (network namespaces joined by a veth pair): a gateway on host A, its client on
host B, talking over TCP+CURVE; a wrong key from B fails fast with its typed error; a cut
cable fails the calls in flight with ``connection_lost`` (heartbeats find it), and
``hermes gateway status`` shows the gateway ``offline`` until the cable is back."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shared.mesh_heartbeat import HEARTBEAT_ENV
from shared.mesh_tcp import TCP_ENV
from shared.transport import curve_keys
from tests.support import netns
from tests.support.cli import HERMES, hermes
from tests.support.processes import ROOT, python_env, read_state, wait_for
from tests.support.tcp import tcp_env
from tests.support.terminal import TMUX, Terminal, row_of

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

# Heartbeats for the cut-cable test: a dead link is found in about 2 s.
FAST_HEARTBEAT = "interval=0.5,timeout=2,ttl=2"
# Far longer than heartbeats take to find a cut cable: a call still waiting is not failed by them.
HELD_TIMEOUT = 60.0
# Loose bounds, each far below HELD_TIMEOUT.
CUT_NOTICED = 20.0
STATUS_RETURNS = 15.0

# What host B runs to hold a call across a cut cable: it connects (one ping), says "ready", waits
# for a line on stdin (the cable is cut, or about to be), makes one call of argv[1] ("turn": a
# turn of HELD_TIMEOUT / 2 seconds, not idempotent; "ping": idempotent) and prints how it ended.
# Each failed attempt is printed with whether it is retried, as it is decided, so the test can
# plug the cable back in.
HELD = """
import json, sys, time
from shared import homes
from shared.gateways import ops
from shared.protocol import RemoteError
from shared.transport import RetryPolicy
from shared.transport.sync_client import connect

class Told(RetryPolicy):
    def should_retry(self, spec, code, attempt):
        again = super().should_retry(spec, code, attempt)
        print(json.dumps({"retry": code, "again": again}), flush=True)
        return again

op, timeout = sys.argv[1], float(sys.argv[2])
with connect(homes.endpoint(homes.root_home(), "gateway", create=False), retry=Told()) as client:
    client.call(ops.PING, timeout=timeout)
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    started = time.monotonic()
    try:
        if op == "turn":
            out = {"answer": client.call(ops.TURN, {"text": "held", "seconds": timeout / 2}, timeout=timeout)}
        else:
            out = {"answer": client.call(ops.PING, timeout=timeout)}
    except RemoteError as exc:
        out = {"code": exc.code, "message": exc.message}
    out["seconds"] = time.monotonic() - started
print(json.dumps(out), flush=True)
"""
# What host B runs for a test of live connections: two clients, each keeping its connection,
# the first with the install's client key, the second with a keypair made here (its public key
# printed first); then for each line "first" or "second" on stdin, one ping by that client.
SESSION = """
import json, sys, zmq
from shared import homes
from shared.gateways import ops
from shared.protocol import RemoteError
from shared.transport import curve_keys
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import SyncClient, connect
endpoint = homes.endpoint(homes.root_home(), "gateway", create=False)
public, secret = zmq.curve_keypair()
server = curve_keys.trusted_server(homes.root_home(), "gateway")
options = [(zmq.CURVE_SERVERKEY, server), (zmq.CURVE_PUBLICKEY, public), (zmq.CURVE_SECRETKEY, secret)]
clients = {"first": connect(endpoint, retry=NO_RETRY), "second": SyncClient(endpoint.control, options=options, retry=NO_RETRY)}
print(json.dumps({"public": public.decode()}), flush=True)
for line in sys.stdin:
    try:
        out = {"answer": clients[line.strip()].call(ops.PING, timeout=float(sys.argv[1]))}
    except RemoteError as exc:
        out = {"code": exc.code}
    print(json.dumps(out), flush=True)
"""
# Far longer than a service takes to see a revoke (under a second): a loose bound, not a timing.
REVOKE_BOUND = 20.0
# What host B runs to hold one connection with its install's client key: for each line
# ("ping", "status" or "drain") on stdin, that call on it, and how it ended.
CALLS = """
import json, sys
from shared import homes
from shared.gateways import ops
from shared.protocol import RemoteError
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import connect
calls = {"ping": (ops.PING, {}), "status": (ops.STATUS, {}), "drain": (ops.DRAIN, {"deadline": 1.0, "stay": True})}
with connect(homes.endpoint(homes.root_home(), "gateway", create=False), retry=NO_RETRY) as client:
    for line in sys.stdin:
        spec, args = calls[line.strip()]
        try:
            out = {"answer": client.call(spec, args, timeout=float(sys.argv[1]))}
        except RemoteError as exc:
            out = {"code": exc.code, "detail": exc.detail}
        print(json.dumps(out), flush=True)
"""
# Far longer than a service takes to see a grant (a quarter of a second): a loose bound.
GRANT_BOUND = 20.0


@pytest.fixture
def hosts():
    with netns.opened(netns.TwoHosts()) as made:
        yield made


def _public(root: Path, *path: str) -> str:
    return (curve_keys.store(root).joinpath(*path)).read_text().strip()


def _keyed(hosts, short_dir: Path, **extra: str) -> tuple[Path, Path, dict[str, str], dict[str, str], str]:
    """Host A's and host B's homes, keyed so B's client and A's gateway trust each other, the
    environment of each (``extra`` on top), and B's client public key."""
    host_a, host_b = short_dir / "a", short_dir / "b"
    tcp = tcp_env("gateway", PORT, host=hosts.address_a)
    env_a = python_env(HERMES_HOME=str(host_a), **tcp, **extra)
    env_b = python_env(HERMES_HOME=str(host_b), **tcp, **extra)
    for home in (host_a, host_b):
        assert hermes("mesh", "keys", "init", home=home).returncode == 0
    client_b = curve_keys.public_of(curve_keys.client_secret(host_b)).decode()
    gateway_a = _public(host_a, "servers", "gateway.key")
    assert hermes("mesh", "keys", "authorize", "host-b", client_b, home=host_a).returncode == 0
    assert hermes("mesh", "keys", "authorize", "gateway", gateway_a, "--server", home=host_b).returncode == 0
    return host_a, host_b, env_a, env_b, client_b


def _gateway_on_a(hosts, host_a: Path, env_a: dict[str, str]) -> subprocess.Popen:
    """A gateway running on host A; the caller kills it."""
    return hosts.start_gateway(hosts.a, host_a, env_a)


@pytest.fixture
def on_b(hosts):
    """Start a script on host B (its argv[1] the call timeout): its process, and a function that
    sends it one line and reads back the JSON line it answers. Every one is ended after the test."""
    started: list[subprocess.Popen] = []

    def start(env_b: dict[str, str], script: str) -> tuple[subprocess.Popen, Callable[[str], dict]]:
        session = subprocess.Popen(
            [*hosts.exec(hosts.b), sys.executable, "-c", script, str(CALL_TIMEOUT)],
            cwd=ROOT,
            env=env_b,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(session)
        assert session.stdin is not None and session.stdout is not None

        def ask(line: str) -> dict:
            session.stdin.write(line + "\n")
            session.stdin.flush()
            return json.loads(session.stdout.readline())

        return session, ask

    yield start
    for session in started:
        session.kill()
        session.wait(timeout=10)


def test_client_on_another_host_talks_curve_and_a_wrong_key_fails_fast(hosts, short_dir):
    host_a, host_b, env_a, env_b, client_b = _keyed(hosts, short_dir)
    gateway = _gateway_on_a(hosts, host_a, env_a)
    try:

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
        listed, _ = _status_from_b(hosts, env_b)
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


class _Held:
    """The ``HELD`` client on host B, its lines read as they come (bounded waits)."""

    def __init__(self, hosts, env: dict[str, str], op: str):
        self.proc = subprocess.Popen(
            [*hosts.exec(hosts.b), sys.executable, "-c", HELD, op, str(HELD_TIMEOUT)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)

    def line(self, timeout: float) -> dict:
        try:
            return json.loads(self._lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"the client on host B said nothing more within {timeout:g} s") from None

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def _status_from_b(hosts, env_b: dict[str, str]) -> tuple[list[dict], float]:
    started = time.monotonic()
    done = subprocess.run(
        [*hosts.exec(hosts.b), *HERMES, "gateway", "status", "--json"],
        cwd=ROOT,
        env=env_b,
        capture_output=True,
        text=True,
        timeout=HELD_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["gateways"], time.monotonic() - started


def test_a_cut_cable_fails_calls_in_flight_at_once_and_shows_the_gateway_offline(hosts, short_dir):
    host_a, host_b, env_a, env_b, client_b = _keyed(hosts, short_dir, **{HEARTBEAT_ENV: FAST_HEARTBEAT})
    # Host B's key may read A's gateway; its turn needs a grant.
    assert (
        hermes("mesh", "keys", "authorize", "host-b", client_b, "--grant", "gateway.turn", home=host_a).returncode == 0
    )
    gateway = _gateway_on_a(hosts, host_a, env_a)
    clients: list[_Held] = []
    try:
        # A turn in flight (not idempotent) when the cable is cut fails with connection_lost,
        # not at its deadline: no retry.
        turn = _Held(hosts, env_b, "turn")
        clients.append(turn)
        assert turn.line(CALL_TIMEOUT) == {"ready": True}
        turn.go()
        wait_for(lambda: (read_state(host_a) or {}).get("active_turns") == 1, timeout=30, what="the turn on host A")
        hosts.set_link(hosts.a, up=False)
        assert turn.line(CUT_NOTICED) == {"retry": "connection_lost", "again": False}
        lost = turn.line(CALL_TIMEOUT)
        assert lost["code"] == "connection_lost", lost
        assert hosts.address_a in lost["message"] and "'turn'" in lost["message"]
        assert lost["seconds"] < CUT_NOTICED
        hosts.set_link(hosts.a, up=True)

        # An idempotent call sent into a cut cable fails the same way, and is tried again: once
        # the cable is back, the retry is answered.
        ping = _Held(hosts, env_b, "ping")
        clients.append(ping)
        assert ping.line(CALL_TIMEOUT) == {"ready": True}
        hosts.set_link(hosts.a, up=False)
        ping.go()
        assert ping.line(CUT_NOTICED) == {"retry": "connection_lost", "again": True}
        hosts.set_link(hosts.a, up=True)
        answered = ping.line(CUT_NOTICED + HELD_TIMEOUT)
        assert answered["answer"] == {"pong": True, "pid": gateway.pid}, answered

        # With the cable cut, host B's status lists the gateway offline, promptly; back again
        # once it is plugged in.
        hosts.set_link(hosts.a, up=False)
        listed, seconds = _status_from_b(hosts, env_b)
        assert [(g["profile"], g["state"], g["pid"], g["source"]) for g in listed] == [
            ("default", "offline", None, "socket")
        ]
        assert listed[0]["error"]["code"] in ("timeout", "connection_lost")
        assert listed[0]["health"]["state"] == "unknown"
        assert seconds < STATUS_RETURNS
        text = subprocess.run(
            [*hosts.exec(hosts.b), *HERMES, "gateway", "list"],
            cwd=ROOT,
            env=env_b,
            capture_output=True,
            text=True,
            timeout=HELD_TIMEOUT,
        )
        assert text.returncode == 0 and "- offline" in text.stdout, text.stdout + text.stderr
        hosts.set_link(hosts.a, up=True)
        wait_for(
            lambda: [(g["state"], g["pid"]) for g in _status_from_b(hosts, env_b)[0]] == [("running", gateway.pid)],
            timeout=CALL_TIMEOUT,
            what="the gateway listed again once the cable is back",
        )
        assert gateway.poll() is None
    finally:
        for client in clients:
            client.kill()
        gateway.kill()
        gateway.wait(timeout=10)


def test_a_key_revoked_on_host_a_is_refused_on_its_live_connection_from_host_b(hosts, on_b, short_dir):
    host_a, host_b, env_a, env_b, client_b = _keyed(hosts, short_dir)
    gateway = _gateway_on_a(hosts, host_a, env_a)
    try:
        session, ping = on_b(env_b, SESSION)
        second = json.loads(session.stdout.readline())["public"]
        assert hermes("mesh", "keys", "authorize", "host-b-second", second, home=host_a).returncode == 0
        pong = {"answer": {"pong": True, "pid": gateway.pid}}
        assert ping("first") == pong and ping("second") == pong  # both connections are up
        assert hermes("mesh", "keys", "revoke", "host-b", home=host_a).returncode == 0
        revoked = time.monotonic()
        while (answer := ping("first")) == pong:  # the same connection: a new one would be auth_failed
            assert time.monotonic() - revoked < REVOKE_BOUND, "the revoked key was still served"
            assert ping("second") == pong
        assert answer == {"code": "auth_revoked"}
        print(f"the revoked key was refused {time.monotonic() - revoked:.3f} s after the revoke")
        assert [ping("second") for _ in range(3)] == [pong] * 3
        assert gateway.poll() is None
    finally:
        gateway.kill()
        gateway.wait(timeout=10)


def test_a_remote_key_drains_host_as_gateway_only_once_granted_on_its_live_connection(hosts, on_b, short_dir):
    host_a, host_b, env_a, env_b, client_b = _keyed(hosts, short_dir)
    gateway = _gateway_on_a(hosts, host_a, env_a)
    try:
        _, call = on_b(env_b, CALLS)
        assert call("ping") == {"answer": {"pong": True, "pid": gateway.pid}}
        refused = call("drain")
        assert refused == {
            "code": "op_not_granted",
            "detail": {"op": "drain", "service": "gateway", "key_name": "host-b"},
        }, refused
        assert call("status")["answer"]["state"] == "running"  # a refusal of one op, not of the key
        assert call("ping") == {"answer": {"pong": True, "pid": gateway.pid}}
        granted = hermes("mesh", "keys", "authorize", "host-b", client_b, "--grant", "gateway.drain", home=host_a)
        assert granted.returncode == 0, granted.stderr
        since = time.monotonic()
        while (answer := call("drain")).get("code") == "op_not_granted":  # the same connection
            assert time.monotonic() - since < GRANT_BOUND, "the grant was never seen"
            time.sleep(0.05)
        assert answer["answer"]["exit_code"] is None, answer  # drained, and stays (``stay``)
        print(f"the grant was seen {time.monotonic() - since:.3f} s after it was given")
        assert gateway.poll() is None
    finally:
        gateway.kill()
        gateway.wait(timeout=10)


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
def test_the_fleet_view_on_host_b_shows_host_as_gateways_beside_its_own_and_offline_once_the_cable_is_cut(
    hosts, short_dir
):
    """Host B's view: its own gateway, and host A's two on TCP; once A's cable is cut, A's rows
    are ``offline`` (the view's own heartbeats find it) while B's own runs on."""
    host_a, host_b = short_dir / "a", short_dir / "b"
    tcp = {TCP_ENV: f"gateway@coder=tcp://{hosts.address_a}:{PORT},gateway@critic=tcp://{hosts.address_a}:{PORT + 2}"}
    env_a, env_b = python_env(HERMES_HOME=str(host_a), **tcp), python_env(HERMES_HOME=str(host_b), **tcp)
    assert hermes("mesh", "keys", "init", "--profile", "coder", "--profile", "critic", home=host_a).returncode == 0
    assert hermes("mesh", "keys", "init", home=host_b).returncode == 0
    client_b = curve_keys.public_of(curve_keys.client_secret(host_b)).decode()
    assert (
        hermes("mesh", "keys", "authorize", "host-b", client_b, "--grant", "gateway.turn", home=host_a).returncode == 0
    )
    for name in ("coder", "critic"):
        key = _public(host_a, "servers", f"gateway@{name}.key")
        assert hermes("mesh", "keys", "authorize", f"gateway@{name}", key, "--server", home=host_b).returncode == 0
    started: list[subprocess.Popen] = []

    def gateway(host: str, home: Path, env: dict[str, str]) -> subprocess.Popen:
        proc = hosts.start_gateway(host, home, env)
        started.append(proc)
        return proc

    terminal = None
    try:
        coder = gateway(hosts.a, host_a / "profiles" / "coder", env_a)
        critic = gateway(hosts.a, host_a / "profiles" / "critic", env_a)
        own = gateway(hosts.b, host_b, env_b)
        terminal = Terminal(
            [*HERMES, "mesh", "top"], env=env_b, cwd=ROOT, record=short_dir / "top", prefix=hosts.exec(hosts.b)
        )

        def shown() -> dict[str, list[str]]:
            screen = terminal.screen()
            return {name: row for name in ("default", "coder", "critic") if (row := row_of(screen, name))}

        wait_for(
            lambda: (
                {name: row[1:4] for name, row in shown().items()}
                == {
                    "default": ["local", str(own.pid), "running"],
                    "coder": [hosts.address_a, str(coder.pid), "running"],
                    "critic": [hosts.address_a, str(critic.pid), "running"],
                }
            ),
            timeout=CALL_TIMEOUT,
            what="host B's own gateway and host A's two, running",
        )
        hosts.set_link(hosts.a, up=False)
        cut = time.monotonic()
        wait_for(
            lambda: [shown()[name][3] for name in ("coder", "critic")] == ["offline:", "offline:"],
            timeout=CUT_NOTICED,
            what="host A's gateways offline",
        )
        print(f"offline shown {time.monotonic() - cut:.2f} s after the cut")
        assert shown()["default"][1:4] == ["local", str(own.pid), "running"]
        hosts.set_link(hosts.a, up=True)
        wait_for(
            lambda: (
                [shown()[name][2:4] for name in ("coder", "critic")]
                == [[str(coder.pid), "running"], [str(critic.pid), "running"]]
            ),
            timeout=CALL_TIMEOUT,
            what="host A's gateways back once the cable is",
        )
        terminal.send("q")
        wait_for(lambda: terminal.exit_code() is not None, timeout=CALL_TIMEOUT, what="the view to end")
        assert terminal.exit_code() == 0 and "Traceback" not in terminal.stderr(), terminal.stderr()
    finally:
        if terminal is not None:
            terminal.close()
        for proc in started:
            proc.kill()
            proc.wait(timeout=10)
