"""The pure rules of TCP and CURVE: addresses and their settings, key text, monitor frames,
ZAP answers, and the no-plaintext rule."""

from __future__ import annotations

import struct
import threading

import pytest
import zmq
from zmq.utils import z85

from shared import homes
from shared.mesh_tcp import TCP_ENV, TcpConfigInvalid, parse_address, tcp_address
from shared.protocol import Code
from shared.transport import curve, curve_keys, zap, zmq_monitor
from shared.transport.call_rules import RETRYABLE
from shared.transport.curve import PlaintextRefused
from shared.transport.zmq_monitor import handshake_failure, watched_events


def test_addresses_bind_where_named_and_connect_locally_for_a_wildcard():
    wild = parse_address("tcp://0.0.0.0:7410", "here")
    assert (wild.bind_control, wild.bind_events, wild.control, wild.events) == (
        "tcp://0.0.0.0:7410",
        "tcp://0.0.0.0:7411",
        "tcp://127.0.0.1:7410",
        "tcp://127.0.0.1:7411",
    )
    assert parse_address("tcp://*:9", "here").control == "tcp://127.0.0.1:9"
    remote = parse_address("tcp://gateway.lan:7420", "here")
    assert (remote.bind_control, remote.control) == ("tcp://gateway.lan:7420", "tcp://gateway.lan:7420")


@pytest.mark.parametrize(
    "bad", ["tcp://host", "tcp://host:0", "tcp://host:65535", "ipc:///x", "tcp://:80", "tcp://a b:1", 7410, None]
)
def test_bad_addresses_are_typed_errors(bad):
    with pytest.raises(TcpConfigInvalid):
        parse_address(bad, "here")


def test_the_environment_wins_over_the_config_name_by_name(tmp_path):
    (tmp_path / "config.yaml").write_text("mesh:\n  tcp:\n    updater: tcp://0.0.0.0:7410\n    gateway: tcp://*:7420\n")
    env = {TCP_ENV: "gateway=tcp://10.0.0.2:7500"}
    assert tcp_address(tmp_path, "updater", env).port == 7410
    assert tcp_address(tmp_path, "gateway", env).control == "tcp://10.0.0.2:7500"
    assert tcp_address(tmp_path, "auth_worker", env) is None
    with pytest.raises(TcpConfigInvalid):
        tcp_address(tmp_path, "updater", {TCP_ENV: "updater"})


def test_a_config_without_tcp_is_not_parsed(tmp_path):
    (tmp_path / "config.yaml").write_text("mesh: [this is: not: valid yaml\n")  # would fail to parse
    assert tcp_address(tmp_path, "updater", {}) is None
    (tmp_path / "config.yaml").write_text("mesh:\n  tcp: tcp://x:1\n")
    with pytest.raises(TcpConfigInvalid):
        tcp_address(tmp_path, "updater", {})


def test_ipc_endpoints_are_as_before_and_carry_their_names(tmp_path):
    ep = homes.endpoint(tmp_path, "updater", create=False, env={})
    assert (ep.control, ep.bind_control, ep.tcp, ep.key_name) == (
        f"ipc://{tmp_path}/run/updater.ctl",
        f"ipc://{tmp_path}/run/updater.ctl",
        None,
        "updater",
    )
    assert curve.server_options(ep) == [] and curve.client_options(ep) == []


def test_keys_are_exactly_40_characters_of_z85():
    public, _ = zmq.curve_keypair()
    assert curve_keys.validate_key(public.decode() + "\n") == public
    for bad in ("", "x" * 39, "x" * 41, "x" * 39 + "~", b"\xff" * 40, 40):
        with pytest.raises(curve_keys.CurveKeyInvalid):
            curve_keys.validate_key(bad)
    for bad in ("", "Up", "a/b", "../x", "a@b@c", "x" * 65):
        with pytest.raises(curve_keys.CurveKeyInvalid):
            curve_keys.validate_name(bad)


@pytest.mark.parametrize("found", [(4, 3, 2), (4, 2, 5), (3, 9, 9)])
def test_tcp_on_a_libzmq_below_the_floor_is_refused_naming_the_version(monkeypatch, found):
    monkeypatch.setattr(zmq, "zmq_version_info", lambda: found)
    dotted = ".".join(map(str, found))
    curve.refuse_unsafe_tcp(["ipc:///tmp/x.ctl"], [])  # ipc is not exposed to the faults
    for options in ([(zmq.CURVE_SERVER, 1)], [(zmq.CURVE_SERVERKEY, b"k")], []):
        with pytest.raises(curve.LibzmqTooOld) as refused:
            curve.refuse_unsafe_tcp(["tcp://127.0.0.1:1"], options)
        assert refused.value.code == "libzmq_too_old" and refused.value.detail == {"libzmq": dotted}
        assert f"libzmq {dotted} is older than 4.3.3" in refused.value.message


@pytest.mark.parametrize("found", [(4, 3, 3), (4, 3, 5), (5, 0, 0)])
def test_a_libzmq_at_the_floor_or_above_serves_tcp(monkeypatch, found):
    monkeypatch.setattr(zmq, "zmq_version_info", lambda: found)
    assert curve.libzmq_problem(found) is None
    curve.refuse_unsafe_tcp(["tcp://127.0.0.1:1"], [(zmq.CURVE_SERVER, 1)])


def test_doctor_names_a_libzmq_below_the_floor(monkeypatch):
    from hermes_cli.commands import doctor

    monkeypatch.setattr(zmq, "zmq_version_info", lambda: (4, 3, 2))
    monkeypatch.setattr(zmq, "zmq_version", lambda: "4.3.2")
    check = next(c for c in doctor._dependencies() if c.name == "dependency zmq")
    assert check.status == doctor.WARN and "libzmq 4.3.2" in check.message and "TCP is refused" in check.message
    monkeypatch.setattr(zmq, "zmq_version_info", lambda: (4, 3, 5))
    monkeypatch.setattr(zmq, "zmq_version", lambda: "4.3.5")
    check = next(c for c in doctor._dependencies() if c.name == "dependency zmq")
    assert (check.status, check.message.endswith("(libzmq 4.3.5)")) == (doctor.OK, True)


def test_plaintext_tcp_is_refused_and_ipc_needs_nothing():
    curve.refuse_unsafe_tcp(["ipc:///tmp/x.ctl"], [])
    curve.refuse_unsafe_tcp(["tcp://127.0.0.1:1"], [(zmq.CURVE_SERVER, 1)])
    with pytest.raises(PlaintextRefused):
        curve.refuse_unsafe_tcp(["ipc:///x", "tcp://127.0.0.1:1"], [(zmq.SUBSCRIBE, b"")])


def test_monitor_frames_are_parsed_or_refused():
    frame = struct.pack("=HI", int(zmq.EVENT_HANDSHAKE_FAILED_AUTH), 400)
    assert zmq_monitor.parse([frame, b"tcp://127.0.0.1:1"]) == (
        int(zmq.EVENT_HANDSHAKE_FAILED_AUTH),
        400,
        "tcp://127.0.0.1:1",
    )
    for bad in ([], [frame], [b"short", b"x"], [frame, b"x", b"y"]):
        with pytest.raises(zmq_monitor.BadMonitorFrame):
            zmq_monitor.parse(bad)


def test_handshake_failures_map_to_codes_that_are_never_retried():
    codes = {
        handshake_failure(int(event), "tcp://h:1").code
        for event in (
            zmq.EVENT_HANDSHAKE_FAILED_AUTH,
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
        )
    }
    assert codes == {Code.AUTH_FAILED, Code.SERVER_KEY_MISMATCH, Code.HANDSHAKE_FAILED}
    assert not codes & RETRYABLE
    assert handshake_failure(int(zmq.EVENT_DISCONNECTED), "tcp://h:1") is None


def _request(domain: bytes, key: bytes, mechanism: bytes = b"CURVE") -> list[bytes]:
    return [b"1.0", b"7", domain, b"127.0.0.1", b"", mechanism, z85.decode(key)]


def test_zap_answers_200_for_an_authorized_key_and_400_otherwise(tmp_path):
    curve_keys.init(tmp_path, ["updater"])
    local = curve_keys.public_keys(tmp_path, "authorized")["local"]
    domains = {"unit-domain": tmp_path}
    assert zap.answer(_request(b"unit-domain", local), domains)[2:5] == [b"200", b"OK", local + b" local"]
    stranger = zmq.curve_keypair()[0]
    assert zap.answer(_request(b"unit-domain", stranger), domains)[2] == b"400"
    assert zap.answer(_request(b"other-domain", local), domains)[2] == b"400"
    assert zap.answer(_request(b"unit-domain", local, b"PLAIN"), domains)[2] == b"400"
    for junk in ([], [b"2.0", b"1", b"", b"", b"", b"CURVE", b""], [b"1.0", b"1", b"unit-domain"]):
        assert zap.answer(junk, domains)[2] == b"500"
    curve_keys.remove_public(tmp_path, "authorized", "local")
    assert zap.answer(_request(b"unit-domain", local), domains)[2] == b"400"  # revoked: read per handshake


def test_only_a_curve_client_watches_handshakes_a_plain_one_sees_a_cut_handshake_as_a_peer_gone():
    plain = watched_events([(zmq.SNDHWM, 10)])
    curve = watched_events([(zmq.CURVE_SERVERKEY, b"k" * 40)])
    assert plain == zmq.EVENT_DISCONNECTED
    assert curve & zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and curve & zmq.EVENT_DISCONNECTED


def test_two_rotations_at_once_each_finish_and_leave_one_authorized_client(tmp_path):
    curve_keys.init(tmp_path, [])
    errors: list[BaseException] = []

    def rotate() -> None:
        try:
            curve_keys.rotate_client(tmp_path, grace=0.2)
        except BaseException as exc:  # collected: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=rotate) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert curve_keys.public_keys(tmp_path, "authorized") == {
        "local": curve_keys.public_of(curve_keys.client_secret(tmp_path))
    }
