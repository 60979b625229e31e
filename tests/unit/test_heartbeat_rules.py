"""The pure rules of heartbeats and lost connections: the settings and their typed errors, the
options every TCP socket carries (and no ipc one), the code of a dropped connection and how
callers treat it, and the ``offline`` row of a gateway that could not be reached."""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq

from fleet import discovery
from hermes_cli.commands import auth, gateway_status
from shared import homes
from shared.gateways import ops
from shared.mesh_heartbeat import HEARTBEAT_ENV, Heartbeat, HeartbeatConfigInvalid, heartbeat
from shared.protocol import UNANSWERED, Code, RemoteError
from shared.transport import DEFAULT_RETRY, curve, zap
from shared.transport.call_rules import RETRYABLE, dropped
from tests.support.tcp import keyed_install, tcp_env

HEARTBEAT_OPTIONS = (zmq.HEARTBEAT_IVL, zmq.HEARTBEAT_TIMEOUT, zmq.HEARTBEAT_TTL)


def _config(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text(text)
    return root


def test_defaults_config_and_the_environment_field_by_field(tmp_path):
    assert heartbeat(tmp_path, {}) == Heartbeat(2.0, 6.0, 6.0)
    _config(tmp_path, "mesh:\n  heartbeat:\n    interval: 1\n    ttl: 4.5\n")
    assert heartbeat(tmp_path, {}) == Heartbeat(1.0, 6.0, 4.5)
    assert heartbeat(tmp_path, {HEARTBEAT_ENV: "timeout=3, ttl=9"}) == Heartbeat(1.0, 3.0, 9.0)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("interval: 0", "interval"),
        ("timeout: -1", "timeout"),
        ("ttl: 3601", "ttl"),
        ("interval: true", "interval"),
        ("timeout: .nan", "timeout"),
        ("timeout: six", "timeout"),
        ("ttl: [1]", "ttl"),
        ("period: 2", "period"),
        ("interval: 3\n    ttl: 3", "ttl"),  # the peer would cut an idle, healthy connection
    ],
)
def test_a_bad_config_value_is_a_typed_error_naming_the_field(tmp_path, text, field):
    _config(tmp_path, f"mesh:\n  heartbeat:\n    {text}\n")
    with pytest.raises(HeartbeatConfigInvalid) as bad:
        heartbeat(tmp_path, {})
    assert bad.value.code == "mesh_heartbeat_invalid" and bad.value.detail["field"] == field
    assert field in bad.value.message and "config.yaml" in bad.value.message


@pytest.mark.parametrize(
    ("raw", "field"),
    [("interval=abc", "interval"), ("ttl=inf", "ttl"), ("timeout", "timeout"), ("rate=1", "rate"), ("ttl=1", "ttl")],
)
def test_a_bad_environment_value_is_a_typed_error_naming_the_field(tmp_path, raw, field):
    with pytest.raises(HeartbeatConfigInvalid) as bad:
        heartbeat(tmp_path, {HEARTBEAT_ENV: raw})
    assert bad.value.detail["field"] == field and HEARTBEAT_ENV in bad.value.message


def test_a_config_without_heartbeat_is_not_parsed(tmp_path):
    _config(tmp_path, "mesh: [this is: not: valid yaml\n")  # would fail to parse
    assert heartbeat(tmp_path, {}) == Heartbeat()
    _config(tmp_path, "mesh:\n  heartbeat: 2\n")
    with pytest.raises(HeartbeatConfigInvalid):
        heartbeat(tmp_path, {})


@pytest.fixture
def no_zap_handler(monkeypatch):
    monkeypatch.setattr(zap, "register", lambda domain, root: None)  # it opens a socket: not in this tier


def test_every_tcp_socket_carries_heartbeats_and_no_ipc_socket_does(tmp_path, monkeypatch, no_zap_handler):
    root = keyed_install(tmp_path / "root")
    monkeypatch.setenv(HEARTBEAT_ENV, "interval=0.5,timeout=2,ttl=2.5")
    tcp = homes.endpoint(root, "updater", create=False, env=tcp_env("updater", 7410))
    server, client = dict(curve.server_options(tcp)), dict(curve.client_options(tcp))
    for options in (server, client):
        assert [options[o] for o in HEARTBEAT_OPTIONS] == [500, 2000, 2500]
    # Only a connecting socket makes connects that a dead link can swallow.
    assert client[zmq.CONNECT_TIMEOUT] == 2000 and zmq.CONNECT_TIMEOUT not in server
    ipc = homes.endpoint(root, "updater", create=False, env={})
    assert curve.server_options(ipc) == [] and curve.client_options(ipc) == []


def test_a_bad_setting_stops_a_tcp_socket_from_being_made(tmp_path, monkeypatch, no_zap_handler):
    root = keyed_install(tmp_path / "root")
    monkeypatch.setenv(HEARTBEAT_ENV, "interval=-1")
    tcp = homes.endpoint(root, "updater", create=False, env=tcp_env("updater", 7410))
    for build in (curve.server_options, curve.client_options):
        with pytest.raises(HeartbeatConfigInvalid):
            build(tcp)
    assert curve.client_options(homes.endpoint(root, "updater", create=False, env={})) == []


def test_a_dropped_connection_is_lost_over_tcp_and_reset_over_ipc():
    lost = dropped("tcp://10.0.0.2:7420", "turn")
    assert lost.code == Code.CONNECTION_LOST and lost.detail == {"op": "turn"}
    assert "tcp://10.0.0.2:7420" in lost.message and "'turn'" in lost.message
    assert dropped("ipc:///home/x/run/gateway.ctl", "turn").code == Code.CONNECTION_RESET


def test_a_lost_connection_is_retried_as_the_op_allows_and_counts_as_unanswered():
    assert Code.CONNECTION_LOST in RETRYABLE and Code.CONNECTION_LOST in UNANSWERED
    assert DEFAULT_RETRY.should_retry(ops.PING, Code.CONNECTION_LOST, 0)
    assert not DEFAULT_RETRY.should_retry(ops.TURN, Code.CONNECTION_LOST, 0)
    assert UNANSWERED <= auth.WORKER_GONE  # a sign-in whose worker vanished, however it vanished


def _survey(tmp_path: Path, *errors: RemoteError, records=()) -> discovery.Survey:
    return discovery.Survey(list(records), [discovery.Unreached("default", tmp_path, error) for error in errors])


@pytest.mark.parametrize("code", [Code.TIMEOUT, Code.CONNECTION_LOST, Code.UNAVAILABLE])
def test_a_tcp_gateway_that_could_not_be_reached_is_an_offline_row(tmp_path, code):
    [row] = gateway_status._rows(_survey(tmp_path, RemoteError(code, "gone")))
    assert (row["state"], row["pid"], row["error"]["code"]) == ("offline", None, code)
    assert gateway_status._state(row) == "offline"
    [refused] = gateway_status._rows(_survey(tmp_path, RemoteError(Code.AUTH_FAILED, "no")))
    assert gateway_status._state(refused) == "refused: auth_failed"


def test_a_gateway_known_here_that_was_slow_to_answer_is_not_offline(tmp_path):
    record = discovery.GatewayRecord(
        "default", 4100, 1, "running", None, None, 0, "none", "state_file", tmp_path, served_profiles=("default",)
    )
    [row] = gateway_status._rows(_survey(tmp_path, RemoteError(Code.TIMEOUT, "slow"), records=[record]))
    assert (row["state"], row["pid"], row["error"]) == ("running", 4100, None)
