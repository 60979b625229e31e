"""TCP+CURVE endpoints with real processes: ``hermes mesh keys``, a real gateway on TCP asked by
``hermes gateway status`` and a SyncClient, and a start refused without keys."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import zmq

from shared import homes
from shared.gateways import ops
from shared.mesh_heartbeat import HEARTBEAT_ENV
from shared.mesh_tcp import TCP_ENV
from shared.protocol import Code, RemoteError
from shared.transport import curve, curve_keys
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import SyncClient, connect
from tests.support.cli import DASHED_PUBLIC_KEY, HERMES, hermes, hermes_json
from tests.support.processes import GatewayProcess, python_env
from tests.support.tcp import free_port_pair, keyed_install, tcp_env

# Far longer than a handshake takes: failing "fast" means well within it.
CALL_TIMEOUT = 30.0
# Far longer than a service takes to see a revoke (under a second): a loose bound, not a timing.
REVOKE_BOUND = 20.0


def _secrets(root) -> list[str]:
    top = curve_keys.store(root)
    return [p.read_text().strip() for p in [top / "client.key_secret", *(top / "server").iterdir()]]


def test_mesh_keys_commands_never_print_a_secret(root):
    outputs = []

    def run(*args: str, code: int = 0) -> dict:
        done = hermes("mesh", "keys", *args, "--json", home=root)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == code, done.stderr
        return json.loads(done.stdout)

    assert "client" in run("init")["created"]
    assert run("init")["created"] == []  # idempotent, and never overwrites
    shown = run("show")
    assert shown["authorized"] == {"local": shown["client"]}
    assert shown["servers"]["updater"] == shown["services"]["updater"]
    stranger = DASHED_PUBLIC_KEY  # a key that starts with "-" is a key, not an option
    assert run("authorize", "laptop", stranger) == {"added": "laptop", "in": "authorized", "grants": []}
    granted = run("authorize", "laptop", stranger, "--grant", "gateway.drain", "--grant", "gateway.turn")
    assert granted["grants"] == ["gateway.drain", "gateway.turn"]
    assert run("show")["grants"] == {"laptop": ["gateway.drain", "gateway.turn"]}
    invalid = run("authorize", "laptop", stranger, "--grant", "gateway.nope", code=2)["error"]
    assert (invalid["code"], invalid["detail"]["field"]) == ("grant_invalid", "grant")
    assert run("show")["grants"] == {"laptop": ["gateway.drain", "gateway.turn"]}  # nothing written
    assert run("authorize", "gateway@far", stranger, "--server") == {"added": "gateway@far", "in": "servers"}
    assert run("authorize", "laptop", "too-short", code=2)["error"]["code"] == "curve_key_invalid"
    assert run("revoke", "nobody", code=2)["error"]["code"] == "curve_key_unknown"
    assert run("revoke", "laptop") == {"removed": "laptop", "from": "authorized"}
    assert run("show")["grants"] == {}  # gone with the key
    rotated = run("rotate", "--client", "--service", "updater", "--grace", "0")["rotated"]
    shown = run("show")
    assert shown["client"] == rotated["client"] == shown["authorized"]["local"]
    assert shown["servers"]["updater"] == rotated["updater"] == shown["services"]["updater"]
    assert set(shown["servers"]) >= {"gateway@far", "updater", "gateway"}
    text = hermes("mesh", "keys", "show", home=root)
    outputs.append(text.stdout + text.stderr)
    for secret in _secrets(root):
        assert not any(secret in out for out in outputs)
    assert all(len(secret) == 40 for secret in _secrets(root))


def test_init_keys_the_gateways_of_profiles_this_home_does_not_have(short_dir):
    home = short_dir / "keys-only"  # an empty home, as a keys-only container's
    code, done = hermes_json("mesh", "keys", "init", "--profile", "coder", "-p", "default", home=home)
    assert code == 0, done
    server = curve_keys.store(home) / "server"
    assert (server / "gateway@coder.key_secret").is_file() and (server / "gateway.key_secret").is_file()
    assert not (home / "profiles").exists()
    code, shown = hermes_json("mesh", "keys", "show", home=home)
    assert set(shown["services"]) == {*homes.SERVICES, "gateway@coder"}
    assert shown["services"]["gateway@coder"] == shown["servers"]["gateway@coder"]
    assert hermes_json("mesh", "keys", "init", "--profile", "Bad", home=home)[1]["error"]["code"] == (
        "invalid_profile_name"
    )


def test_show_client_prints_only_the_client_key(root):
    assert hermes("mesh", "keys", "init", home=root).returncode == 0
    client = curve_keys.public_of(curve_keys.client_secret(root)).decode()
    done = hermes("mesh", "keys", "show", "--client", home=root)
    assert (done.returncode, done.stdout) == (0, client + "\n")
    assert hermes_json("mesh", "keys", "show", "--client", home=root) == (0, {"client": client})


def _servers(root) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (curve_keys.store(root) / "servers").iterdir()}


def test_authorize_server_from_another_installs_document_trusts_all_its_services(short_dir):
    there, here = short_dir / "there", short_dir / "here"
    assert hermes("mesh", "keys", "init", "--profile", "coder", home=there).returncode == 0
    assert hermes("mesh", "keys", "init", home=here).returncode == 0
    document = short_dir / "there.json"
    document.write_text(hermes("mesh", "keys", "show", "--json", home=there).stdout)
    code, done = hermes_json("mesh", "keys", "authorize", "--server", "--from", str(document), home=here)
    assert code == 0, done
    theirs = json.loads(document.read_text())["services"]
    assert done == {"added": list(theirs), "in": "servers"}
    assert {name: key.decode() for name, key in curve_keys.public_keys(here, "servers").items()} == theirs


@pytest.mark.parametrize(
    "content",
    [
        b"not json at all",
        b"[1, 2, 3]",
        json.dumps({"services": {"updater": "too-short"}}).encode(),
        json.dumps({"services": {"Bad Name": DASHED_PUBLIC_KEY}}).encode(),
        json.dumps({"services": {"updater": DASHED_PUBLIC_KEY}, "pad": "x" * (65 * 1024)}).encode(),
    ],
    ids=["not-json", "a-list", "a-bad-key", "a-bad-name", "65-KiB"],
)
def test_a_malformed_document_is_refused_and_nothing_is_written(root, short_dir, content):
    assert hermes("mesh", "keys", "init", home=root).returncode == 0
    before = _servers(root)
    document = short_dir / "doc.json"
    document.write_bytes(content)
    code, refused = hermes_json("mesh", "keys", "authorize", "--server", "--from", str(document), home=root)
    assert (code, refused["error"]["code"]) == (2, "curve_key_invalid")
    assert "Bad Name" not in refused["error"]["message"] and "too-short" not in refused["error"]["message"]
    assert _servers(root) == before


@pytest.mark.parametrize(
    "args",
    [
        ("--from", "-"),  # --from needs --server
        ("--server", "--from", "-", "updater", DASHED_PUBLIC_KEY),  # a document or one key, not both
        ("--server", "updater"),  # NAME without KEY
    ],
)
def test_authorize_usage_errors(root, args):
    assert hermes("mesh", "keys", "init", home=root).returncode == 0
    before = _servers(root)
    code, refused = hermes_json("mesh", "keys", "authorize", *args, home=root)
    assert (code, refused["error"]["code"]) == (2, "keys_usage")
    assert _servers(root) == before


@pytest.fixture
def tcp_gateway(root, gateways):
    assert hermes("mesh", "keys", "init", home=root).returncode == 0
    env = tcp_env("gateway", free_port_pair())
    gateway = gateways(root, env=python_env(**env))
    return gateway, env, homes.endpoint(root, "gateway", env=env)


def test_a_gateway_on_tcp_answers_over_curve(root, tcp_gateway):
    gateway, env, ep = tcp_gateway
    assert not (root / "run" / "gateway.ctl").exists()  # nothing on ipc
    code, listed = hermes_json("gateway", "status", home=root, env_extra=env)
    assert code == 0
    assert [(g["pid"], g["source"]) for g in listed["gateways"]] == [(gateway.pid, "socket")]
    with connect(ep) as client:
        assert client.call(ops.PING) == {"pong": True, "pid": gateway.pid}


def test_a_gateway_on_tcp_refuses_a_stranger_fast(root, tcp_gateway):
    gateway, env, ep = tcp_gateway
    public, secret = zmq.curve_keypair()
    options = [
        (zmq.CURVE_SERVERKEY, curve_keys.trusted_server(root, "gateway")),
        (zmq.CURVE_PUBLICKEY, public),
        (zmq.CURVE_SECRETKEY, secret),
    ]
    started = time.monotonic()
    with SyncClient(ep.control, options=options) as client, pytest.raises(RemoteError) as caught:
        client.call(ops.PING, timeout=CALL_TIMEOUT)
    assert caught.value.code == Code.AUTH_FAILED
    assert time.monotonic() - started < CALL_TIMEOUT / 2
    # A revoked key is refused on its next connection; the gateway lives on.
    assert hermes("mesh", "keys", "revoke", "local", home=root).returncode == 0
    with connect(ep) as client, pytest.raises(RemoteError) as caught:
        client.call(ops.PING, timeout=CALL_TIMEOUT)
    assert caught.value.code == Code.AUTH_FAILED
    assert gateway.proc.poll() is None


def _client_of(root, ep, name: str, public: bytes | None = None, secret: bytes | None = None) -> SyncClient:
    """A client with a keypair of its own (made here unless given), authorized in ``root`` as ``name``."""
    if public is None or secret is None:
        public, secret = zmq.curve_keypair()
    assert hermes("mesh", "keys", "authorize", name, public.decode(), home=root).returncode == 0
    server = curve_keys.trusted_server(root, "gateway")
    options = [(zmq.CURVE_SERVERKEY, server), (zmq.CURVE_PUBLICKEY, public), (zmq.CURVE_SECRETKEY, secret)]
    return SyncClient(ep.control, options=options, retry=NO_RETRY)


def test_a_remote_key_may_drain_only_once_granted_and_this_installs_own_key_always(root, tcp_gateway):
    gateway, env, ep = tcp_gateway
    public, secret = zmq.curve_keypair()
    drain = {"deadline": 1.0, "stay": True}
    with _client_of(root, ep, "laptop", public, secret) as laptop:
        assert laptop.call(ops.PING, timeout=CALL_TIMEOUT) == {"pong": True, "pid": gateway.pid}
        assert laptop.call(ops.STATUS, timeout=CALL_TIMEOUT)["state"] == "running"
        with pytest.raises(RemoteError) as refused:
            laptop.call(ops.DRAIN, drain, timeout=CALL_TIMEOUT)
        assert refused.value.code == Code.OP_NOT_GRANTED
        assert refused.value.detail == {"op": "drain", "service": "gateway", "key_name": "laptop"}
        assert public.decode() not in refused.value.message
        granted = hermes("mesh", "keys", "authorize", "laptop", public.decode(), "--grant", "gateway.drain", home=root)
        assert granted.returncode == 0, granted.stderr
        since = time.monotonic()
        while True:  # the same connection: the service reads the grant, no handshake does
            try:
                answer = laptop.call(ops.DRAIN, drain, timeout=CALL_TIMEOUT)
                break
            except RemoteError as exc:
                assert exc.code == Code.OP_NOT_GRANTED and time.monotonic() - since < REVOKE_BOUND
                time.sleep(0.05)
        assert answer["exit_code"] is None  # drained and stays
        print(f"the grant was seen {time.monotonic() - since:.3f} s after it was given")
        with pytest.raises(RemoteError) as turn:  # granted the drain, not the turn
            laptop.call(ops.TURN, {"text": "hi"}, timeout=CALL_TIMEOUT)
        assert turn.value.code == Code.OP_NOT_GRANTED
    with connect(ep, retry=NO_RETRY) as own:  # this install's own key: the owner, granted nothing
        assert own.call(ops.DRAIN, drain, timeout=CALL_TIMEOUT)["exit_code"] is None
    assert gateway.proc.poll() is None


def test_a_revoked_key_is_refused_on_its_live_connection_and_the_others_are_served(root, tcp_gateway):
    gateway, env, ep = tcp_gateway
    pong = {"pong": True, "pid": gateway.pid}
    with _client_of(root, ep, "first") as first, _client_of(root, ep, "second") as second:
        assert first.call(ops.PING, timeout=CALL_TIMEOUT) == pong  # both connections are up
        assert second.call(ops.PING, timeout=CALL_TIMEOUT) == pong
        assert hermes("mesh", "keys", "revoke", "first", home=root).returncode == 0
        revoked = time.monotonic()
        refused = None
        while refused is None:  # the same connection: a new one would fail its handshake (auth_failed)
            assert time.monotonic() - revoked < REVOKE_BOUND, "the revoked key was still served"
            try:
                assert first.call(ops.PING, timeout=CALL_TIMEOUT) == pong
            except RemoteError as exc:
                refused = exc
            assert second.call(ops.PING, timeout=CALL_TIMEOUT) == pong
        took = time.monotonic() - revoked
        assert refused.code == Code.AUTH_REVOKED, refused
        print(f"the revoked key was refused {took:.3f} s after the revoke")
        # Authorizing the name again with another key does not let the old key back in.
        assert hermes("mesh", "keys", "authorize", "first", zmq.curve_keypair()[0].decode(), home=root).returncode == 0
        time.sleep(1.0)  # past the service's next look at authorized/
        with pytest.raises(RemoteError) as caught:
            first.call(ops.PING, timeout=CALL_TIMEOUT)
        assert caught.value.code == Code.AUTH_REVOKED
        for _ in range(5):
            assert second.call(ops.PING, timeout=CALL_TIMEOUT) == pong
    assert gateway.proc.poll() is None
    code, listed = hermes_json("gateway", "status", home=root, env_extra=env)
    assert code == 0 and [g["pid"] for g in listed["gateways"]] == [gateway.pid]


def test_a_gateway_on_tcp_without_keys_refuses_to_start(root):
    port = free_port_pair()
    gateway = GatewayProcess(root, "default", env=python_env(**tcp_env("gateway", port)))
    code = gateway.wait_exit()
    stderr = gateway.proc.stderr.read().decode()
    assert code == 78, stderr
    assert "hermes mesh keys init" in stderr and "Traceback" not in stderr
    with socket.socket() as probe:  # nothing was bound, in plaintext or otherwise
        probe.bind(("127.0.0.1", port))
    ep = homes.endpoint(root, "gateway", env=tcp_env("gateway", port))
    with pytest.raises(curve_keys.CurveKeyMissing):
        curve.client_options(ep)


def test_a_bad_heartbeat_setting_keeps_a_tcp_gateway_down_and_the_cli_says_why(root):
    keyed_install(root)
    port = free_port_pair()
    env = python_env(HERMES_HOME=str(root), **tcp_env("gateway", port), **{HEARTBEAT_ENV: "interval=2,ttl=1"})
    gateway = subprocess.run(
        [sys.executable, "-m", "services.gateway"], env=env, capture_output=True, text=True, timeout=60
    )
    assert gateway.returncode == 78 and "Traceback" not in gateway.stderr
    named = [line for line in gateway.stderr.splitlines() if HEARTBEAT_ENV in line]
    assert len(named) == 1 and "ttl" in named[0], gateway.stderr
    with socket.socket() as probe:  # nothing was bound
        probe.bind(("127.0.0.1", port))
    code, said = hermes_json("gateway", "status", env=env)
    assert code == 1 and said["error"]["code"] == "mesh_heartbeat_invalid" and "ttl" in said["error"]["message"]


def test_rotating_the_client_key_during_a_stream_of_calls_loses_none(root, tcp_gateway):
    gateway, env, ep = tcp_gateway
    answers = []
    rotations = 0
    while rotations < 3 or len(answers) < 30:
        with connect(ep) as client:
            answers.append(client.call(ops.PING, timeout=CALL_TIMEOUT))
        if len(answers) % 10 == 0 and rotations < 3:
            rotator = subprocess.Popen(
                [*HERMES, "mesh", "keys", "rotate", "--grace", "2"], env=python_env(HERMES_HOME=str(root))
            )
            while rotator.poll() is None:  # calls go on while the CLI swaps the keys
                with connect(ep) as client:
                    answers.append(client.call(ops.PING, timeout=CALL_TIMEOUT))
            assert rotator.wait(timeout=60) == 0
            rotations += 1
    assert all(answer == {"pong": True, "pid": gateway.pid} for answer in answers)
    assert set(curve_keys.public_keys(root, "authorized")) == {"local"}


def test_a_rotated_service_key_ends_the_old_connections_after_the_grace_with_no_restart(root, tcp_gateway):
    gateway, env, ep = tcp_gateway
    pong = {"pong": True, "pid": gateway.pid}
    old_trust = curve_keys.trusted_server(root, "gateway")
    with connect(ep, retry=NO_RETRY) as kept:
        assert kept.call(ops.PING, timeout=CALL_TIMEOUT) == pong
        rotator = subprocess.Popen(
            [*HERMES, "mesh", "keys", "rotate", "--service", "gateway", "--grace", "3", "--json"],
            env=python_env(HERMES_HOME=str(root)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started = time.monotonic()
        served_in_grace = 0
        refused = None
        while rotator.poll() is None and refused is None:  # the grace: the old key serves on
            try:
                assert kept.call(ops.PING, timeout=CALL_TIMEOUT) == pong
                served_in_grace += 1
                time.sleep(0.1)
            except RemoteError as exc:  # the service took the new key before the command exited
                assert time.monotonic() - started >= 3, f"the old key was dropped within the grace: {exc}"
                refused = exc
        out, err = rotator.communicate(timeout=30)
        assert rotator.returncode == 0 and served_in_grace > 0, err
        assert "serve for 3s more" in err
        new_public = json.loads(out)["rotated"]["gateway"]
        assert curve_keys.trusted_server(root, "gateway").decode() == new_public != old_trust.decode()
        ended = time.monotonic()
        while refused is None:  # the same client, which trusts the old key
            assert time.monotonic() - ended < REVOKE_BOUND, "the old key still served after the grace"
            try:
                assert kept.call(ops.PING, timeout=CALL_TIMEOUT) == pong
                time.sleep(0.1)
            except RemoteError as exc:
                refused = exc
        assert refused.code in (Code.CONNECTION_LOST, Code.SERVER_KEY_MISMATCH), refused
        with pytest.raises(RemoteError) as again:  # its next connection meets the new key
            kept.call(ops.PING, timeout=CALL_TIMEOUT)
        assert again.value.code == Code.SERVER_KEY_MISMATCH
    with connect(ep, retry=NO_RETRY) as fresh:  # a client that trusts the new key is served
        assert fresh.call(ops.PING, timeout=CALL_TIMEOUT) == pong
    assert gateway.proc.poll() is None  # the same process: no restart


def _port_pairs(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port_pair()
        if all(abs(port - taken) > 1 for taken in ports):
            ports.append(port)
    return ports


def test_gateway_status_and_list_give_a_refused_handshake_its_own_typed_row(root, short_dir, gateways):
    """Four gateways on TCP: one answers; one, out of sight, refuses this install's client key;
    one in this home holds another server key than the one this install trusts for it; one is
    stopped, so its call still waits when the refusals come in."""
    for name in ("coder", "critic", "writer"):
        (root / "profiles" / name).mkdir(parents=True)
    assert hermes("mesh", "keys", "init", "--profile", "critic", "--profile", "writer", home=root).returncode == 0
    elsewhere = short_dir / "elsewhere"  # coder's gateway runs on a home of its own, with its own keys
    assert hermes("mesh", "keys", "init", "--profile", "coder", home=elsewhere).returncode == 0
    theirs = hermes_json("mesh", "keys", "show", home=elsewhere)[1]["services"]["gateway@coder"]
    assert hermes("mesh", "keys", "authorize", "--server", "gateway@coder", theirs, home=root).returncode == 0
    ports = dict(zip(("gateway", "gateway@coder", "gateway@critic", "gateway@writer"), _port_pairs(4), strict=True))
    env = {TCP_ENV: ",".join(f"{name}=tcp://127.0.0.1:{port}" for name, port in ports.items())}
    default = gateways(root, "default", env=python_env(**env))
    gateways(elsewhere, "coder", env=python_env(**env))
    critic = gateways(root, "critic", env=python_env(**env))
    writer = gateways(root, "writer", env=python_env(**env))
    stranger = zmq.curve_keypair()[0].decode()
    assert hermes("mesh", "keys", "authorize", "--server", "gateway@critic", stranger, home=root).returncode == 0
    os.kill(writer.pid, signal.SIGSTOP)
    try:
        code, status = hermes_json("gateway", "status", home=root, env_extra=env)
        assert code == 0, status
        assert [
            (g["profile"], g["pid"], g["state"], g["source"], g["error"] and g["error"]["code"])
            for g in status["gateways"]
        ] == [
            ("default", default.pid, "running", "socket", None),
            ("coder", None, "refused", "socket", Code.AUTH_FAILED),
            ("critic", critic.pid, "running", "state_file", Code.SERVER_KEY_MISMATCH),
            ("writer", writer.pid, "running", "state_file", None),
        ]
        assert stranger not in json.dumps(status)
        text = hermes("gateway", "status", home=root, env_extra=env)
        assert text.returncode == 0, text.stderr
        table = text.stdout.split("\n\n")[0]  # a blank line ends the table: the health notes follow
        rows = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
        assert rows["coder"][1:5] == ["local", "-", "refused:", "auth_failed"]
        assert rows["critic"][1:6] == ["local", str(critic.pid), "running", "(refused:", "server_key_mismatch)"]
        assert rows["default"][1:4] == ["local", str(default.pid), "running"]
        code, listed = hermes_json("gateway", "list", home=root, env_extra=env)
        assert code == 0, listed
        assert {p["profile"]: (p["gateway"]["pid"], p["gateway"]["error"]) for p in listed["profiles"]} == {
            "default": (default.pid, None),
            "coder": (None, {"code": Code.AUTH_FAILED, "message": status["gateways"][1]["error"]["message"]}),
            "critic": (critic.pid, status["gateways"][2]["error"]),
            "writer": (writer.pid, None),
        }
        text = hermes("gateway", "list", home=root, env_extra=env)
        assert text.returncode == 0, text.stderr
        assert "- refused: auth_failed" in text.stdout and "Traceback" not in text.stderr
    finally:
        os.kill(writer.pid, signal.SIGCONT)


# A real process whose libzmq reports a version below the floor; everything else is the real code.
OLD_LIBZMQ = "import zmq; zmq.zmq_version_info = lambda: (4, 3, 2); zmq.zmq_version = lambda: '4.3.2'; "


def test_a_libzmq_below_the_floor_serves_no_tcp_and_doctor_names_it(root):
    keyed_install(root)
    port = free_port_pair()
    env = python_env(HERMES_HOME=str(root), **tcp_env("gateway", port))
    gateway = subprocess.run(
        [sys.executable, "-c", OLD_LIBZMQ + "import runpy; runpy.run_module('services.gateway', run_name='__main__')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert gateway.returncode == 78 and "Traceback" not in gateway.stderr  # a broken setting: stays down
    assert "refusing TCP on tcp://127.0.0.1" in gateway.stderr and "libzmq 4.3.2 is older than 4.3.3" in gateway.stderr
    with socket.socket() as probe:  # nothing was bound
        probe.bind(("127.0.0.1", port))

    doctor = subprocess.run(
        [
            sys.executable,
            "-c",
            OLD_LIBZMQ + "import sys; from hermes_cli.main import main; sys.exit(main())",
            "doctor",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    checks = {check["name"]: check for check in json.loads(doctor.stdout)["checks"]}
    zmq_check = checks["dependency zmq"]
    assert zmq_check["status"] == "warn" and "libzmq 4.3.2" in zmq_check["message"]
    # Its gateway cannot be asked from here either: not "stopped", but unknown, and why.
    gateway_check = checks["profile default: gateway"]
    assert (gateway_check["status"], gateway_check["detail"]["state"]) == ("warn", "unknown")
    assert gateway_check["detail"]["error"]["code"] == "libzmq_too_old"
