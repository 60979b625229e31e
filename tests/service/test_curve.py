"""TCP endpoints under CURVE, over real loopback sockets, services and clients in this process."""

from __future__ import annotations

import os
import time

import pytest
import trio
import zmq

from shared import homes
from shared.protocol import Code, RemoteError
from shared.transport import curve, curve_keys, zap
from shared.transport.curve import PlaintextRefused
from shared.transport.pubsub import open_publisher
from shared.transport.service import HELLO, Service
from shared.transport.sync_client import SyncClient, call_all
from shared.transport.zmq_trio import open_socket
from tests.support.async_client import open_client
from tests.support.peers.echo_service import ECHO, build_service
from tests.support.subscriber import open_subscriber
from tests.support.tcp import free_port_pair, keyed_install, tcp_env

# Far longer than a handshake takes: failing "fast" means well within it.
CALL_TIMEOUT = 30.0


@pytest.fixture
def install(tmp_path):
    root = keyed_install(tmp_path / "root")
    env = tcp_env("updater", free_port_pair())
    return root, homes.endpoint(root, "updater", env=env)


@pytest.fixture
async def served(nursery, install):
    root, ep = install
    service = build_service(ep.bind_control, ep.lock_path, options=curve.server_options(ep))
    await nursery.start(service.serve)
    yield root, ep
    service.stop(grace=0)


def _echo_over_sync(ep: homes.Endpoint, options=None, timeout: float = CALL_TIMEOUT):
    with SyncClient(ep.control, options=curve.client_options(ep) if options is None else options) as client:
        return client.call(ECHO, {"text": "hi"}, timeout=timeout)


def test_endpoint_on_tcp_keeps_its_lock_and_names_its_keys(tmp_path):
    env = tcp_env("gateway@coder", 7420, host="0.0.0.0")
    home = homes.profile_home("coder", tmp_path)
    ep = homes.endpoint(home, "gateway", env=env)
    assert (ep.key_name, ep.root, ep.bind_control, ep.control) == (
        "gateway@coder",
        tmp_path,
        "tcp://0.0.0.0:7420",
        "tcp://127.0.0.1:7420",
    )
    assert (ep.bind_events, ep.events) == ("tcp://0.0.0.0:7421", "tcp://127.0.0.1:7421")
    assert ep.lock_path == home / "run" / "gateway.lock"
    plain = homes.endpoint(tmp_path, "gateway", env=env)  # the default profile's gateway stays on ipc
    assert plain.tcp is None and plain.control.startswith("ipc://") and curve.client_options(plain) == []


async def test_authorized_client_gets_answers_sync_and_async(served):
    root, ep = served
    assert await trio.to_thread.run_sync(_echo_over_sync, ep) == "hi"
    async with open_client(ep.control, options=curve.client_options(ep)) as client:
        assert await client.call(ECHO, {"text": "async"}) == "async"
        assert (await client.call(HELLO))["service"] == "echo"


async def test_unknown_client_key_fails_fast_with_auth_failed(served):
    root, ep = served
    stranger = curve_keys.public_of(zmq.curve_keypair()[1])
    public, secret = zmq.curve_keypair()
    options = [
        (zmq.CURVE_SERVERKEY, curve_keys.trusted_server(root, "updater")),
        (zmq.CURVE_PUBLICKEY, public),
        (zmq.CURVE_SECRETKEY, secret),
    ]
    assert stranger != public
    started = time.monotonic()
    with pytest.raises(RemoteError) as caught:
        await trio.to_thread.run_sync(_echo_over_sync, ep, options)
    assert caught.value.code == Code.AUTH_FAILED
    assert time.monotonic() - started < CALL_TIMEOUT / 2
    async with open_client(ep.control, options=options) as client:
        with pytest.raises(RemoteError) as caught:
            await client.call(ECHO, {"text": "x"}, timeout=CALL_TIMEOUT)
    assert caught.value.code == Code.AUTH_FAILED


async def test_wrong_server_key_fails_fast_with_server_key_mismatch(served):
    root, ep = served
    options = curve.client_options(ep)
    options[0] = (zmq.CURVE_SERVERKEY, zmq.curve_keypair()[0])
    with pytest.raises(RemoteError) as caught:
        await trio.to_thread.run_sync(_echo_over_sync, ep, options)
    assert caught.value.code == Code.SERVER_KEY_MISMATCH
    async with open_client(ep.control, options=options) as client:
        with pytest.raises(RemoteError) as caught:
            await client.call(ECHO, {"text": "x"}, timeout=CALL_TIMEOUT)
    assert caught.value.code == Code.SERVER_KEY_MISMATCH
    outcomes = await trio.to_thread.run_sync(
        lambda: call_all([ep.control], ECHO, {"text": "x"}, timeout=CALL_TIMEOUT, options={ep.control: options})
    )
    assert outcomes[ep.control].code == Code.SERVER_KEY_MISMATCH


async def test_call_all_answers_for_each_service_when_one_refuses_while_another_still_waits(served, nursery):
    root, ep = served
    other = homes.endpoint(root, "handoff_retry", env=tcp_env("handoff_retry", free_port_pair()))
    answering = build_service(other.bind_control, other.lock_path, options=curve.server_options(other))
    await nursery.start(answering.serve)
    silent_ep = homes.endpoint(root, "hook_reporter", env=tcp_env("hook_reporter", free_port_pair()))
    silent = zmq.Context.instance().socket(zmq.ROUTER)  # takes every request, answers none
    for option, value in curve.server_options(silent_ep):
        silent.setsockopt(option, value)
    silent.bind(silent_ep.bind_control)
    wrong_server = curve.client_options(ep)
    wrong_server[0] = (zmq.CURVE_SERVERKEY, zmq.curve_keypair()[0])
    options = {ep.control: wrong_server, other.control: curve.client_options(other)}
    options[silent_ep.control] = curve.client_options(silent_ep)
    try:
        # The refusal comes in while the silent service's call still waits for its answer.
        outcomes = await trio.to_thread.run_sync(
            lambda: call_all(list(options), ECHO, {"text": "x"}, timeout=2.0, options=options)
        )
    finally:
        silent.close(linger=0)
        answering.stop(grace=0)
    assert outcomes[other.control] == "x"
    assert outcomes[ep.control].code == Code.SERVER_KEY_MISMATCH
    assert outcomes[silent_ep.control].code == Code.TIMEOUT


async def test_revoked_key_is_refused_on_its_next_connection(served):
    root, ep = served
    assert await trio.to_thread.run_sync(_echo_over_sync, ep) == "hi"
    curve_keys.remove_public(root, "authorized", curve_keys.LOCAL_CLIENT)
    with pytest.raises(RemoteError) as caught:
        await trio.to_thread.run_sync(_echo_over_sync, ep)
    assert caught.value.code == Code.AUTH_FAILED


async def test_client_rotation_during_a_stream_of_calls_loses_none(served):
    root, ep = served
    answers: list[str] = []

    def stream() -> None:
        for n in range(60):
            answers.append(_echo_over_sync(ep))
            if n == 20:
                curve_keys.rotate_client(root, grace=0)
            if n == 40:
                curve_keys.rotate_client(root, grace=0)

    old = curve_keys.public_keys(root, "authorized")
    await trio.to_thread.run_sync(stream)
    assert answers == ["hi"] * 60
    new = curve_keys.public_keys(root, "authorized")
    assert set(new) == {curve_keys.LOCAL_CLIENT} and new != old


async def test_tcp_without_curve_is_refused_at_every_layer(install):
    root, ep = install
    with pytest.raises(PlaintextRefused):
        async with open_socket(zmq.ROUTER, bind=[ep.bind_control]):
            pass
    with pytest.raises(PlaintextRefused):
        SyncClient(ep.control)
    outcomes = call_all([ep.control], ECHO, timeout=1.0)
    assert outcomes[ep.control].code == "plaintext_refused"
    # Nothing was bound in plaintext: the port is still free.
    with zmq.Context.instance().socket(zmq.ROUTER) as probe:
        probe.bind(ep.bind_control)


async def test_service_without_keys_refuses_to_start(tmp_path):
    root = tmp_path / "nokeys"
    root.mkdir()
    ep = homes.endpoint(root, "updater", env=tcp_env("updater", free_port_pair()))
    with pytest.raises(curve_keys.CurveKeyMissing):
        curve.server_options(ep)
    with pytest.raises(PlaintextRefused):
        await Service("x", ep.bind_control, lock_path=ep.lock_path).serve()


def test_insecure_key_files_are_refused(tmp_path):
    root = keyed_install(tmp_path / "root")
    secret = curve_keys.store(root) / "server" / "updater.key_secret"
    os.chmod(secret, 0o644)
    with pytest.raises(curve_keys.CurveKeyUnsafe):
        curve_keys.server_secret(root, "updater")
    os.chmod(secret, 0o600)
    os.chmod(curve_keys.store(root) / "server", 0o755)
    with pytest.raises(curve_keys.CurveKeyUnsafe):
        curve_keys.server_secret(root, "updater")
    os.chmod(curve_keys.store(root) / "server", 0o700)
    client = curve_keys.store(root) / "client.key_secret"
    os.replace(client, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", client)
    with pytest.raises(curve_keys.CurveKeyUnsafe):
        curve_keys.client_secret(root)
    (curve_keys.store(root) / "servers" / "updater.key").write_text("not a key\n")
    with pytest.raises(curve_keys.CurveKeyInvalid):
        curve_keys.trusted_server(root, "updater")


async def test_malformed_zap_requests_do_not_kill_the_handler(served):
    root, ep = served
    req = zmq.Context.instance().socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.setsockopt(zmq.RCVTIMEO, 5000)
    req.connect(zap.ZAP_ENDPOINT)
    try:
        for junk in ([b"junk"], [b"1.0", b"1", b"nope", b"", b"", b"CURVE", b"short"], [b"1.0"] + [b"x" * 300] * 6):
            req.send_multipart(junk)
            reply = req.recv_multipart()
            assert reply[2] in (b"400", b"500")
    finally:
        req.close()
    assert await trio.to_thread.run_sync(_echo_over_sync, ep) == "hi"


async def test_events_flow_over_curve_to_an_authorized_subscriber(install):
    root, ep = install
    async with (
        open_publisher(ep.bind_events, options=curve.server_options(ep)) as publisher,
        open_subscriber(ep.events, options=curve.client_options(ep)) as subscriber,
    ):
        with trio.fail_after(CALL_TIMEOUT):
            while True:  # a subscriber that joins late misses what went before: publish until one lands
                publisher.publish("state", {"n": 1})
                with trio.move_on_after(0.05):
                    event = await subscriber.receive()
                    break
    assert (event.topic, event.event) == ("state", {"n": 1})


async def _first_event(publisher, subscriber) -> None:
    """Publish until ``subscriber`` hears one (a subscriber that joins late misses what went before)."""
    with trio.fail_after(CALL_TIMEOUT):
        while True:
            publisher.publish("state", {"n": 1})
            with trio.move_on_after(0.05):
                await subscriber.receive()
                return


async def test_a_rotated_key_ends_the_old_subscribers_of_a_publisher_that_serves_on(install):
    root, ep = install
    async with open_publisher(ep.bind_events, options=curve.server_options(ep)) as publisher:
        async with open_subscriber(ep.events, options=curve.client_options(ep)) as old:
            await _first_event(publisher, old)
            await trio.to_thread.run_sync(curve_keys.rotate_server, root, "updater")
            async with open_subscriber(ep.events, options=curve.client_options(ep)) as new:
                await _first_event(publisher, new)  # the publisher serves with the new key now
                while True:  # what the old one was sent before the switch
                    with trio.move_on_after(0.2) as idle:
                        await old.receive()
                    if idle.cancelled_caught:
                        break
                for n in range(20):
                    publisher.publish("state", {"n": n})
                    await trio.sleep(0.05)
                with trio.move_on_after(0.5) as quiet:
                    await old.receive()
                assert quiet.cancelled_caught, "a subscriber on the old key still hears the publisher"
                await new.receive()  # the new one heard them
