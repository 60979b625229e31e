"""Who may call what, on a CURVE service over real loopback sockets: a remote key is refused an
op it is not granted, under the request's id, and served it once granted, on the same live
connection; the service, its other clients and this install's own key are untouched."""

from __future__ import annotations

import time

import pytest
import trio
import zmq

from shared import homes
from shared.protocol import Code, OpSpec, Remote, RemoteError
from shared.transport import curve, curve_keys
from shared.transport.service import HELLO
from tests.support.async_client import open_client
from tests.support.peers.echo_service import ECHO, build_service
from tests.support.tcp import free_port_pair, keyed_install, tcp_env

CALL_TIMEOUT = 30.0
# Far longer than a service takes to see a grant (a quarter of a second): a loose bound.
GRANT_BOUND = 20.0
POKE = OpSpec("poke", remote=Remote.WITH_GRANT)
SECRET = OpSpec("secret", remote=Remote.NEVER)


@pytest.fixture
async def served(nursery, tmp_path):
    root = keyed_install(tmp_path / "root")
    ep = homes.endpoint(root, "updater", env=tcp_env("updater", free_port_pair()))
    service = build_service(ep.bind_control, ep.lock_path, options=curve.server_options(ep))
    service.add(POKE, lambda call: "poked")
    service.add(SECRET, lambda call: "told")
    await nursery.start(service.serve)
    yield root, ep
    service.stop(grace=0)


def _remote_options(root, name: str) -> list:
    public, secret = zmq.curve_keypair()
    curve_keys.add_public(root, "authorized", name, public)
    return [
        (zmq.CURVE_SERVERKEY, curve_keys.trusted_server(root, "updater")),
        (zmq.CURVE_PUBLICKEY, public),
        (zmq.CURVE_SECRETKEY, secret),
    ]


async def _code(client, spec: OpSpec) -> str:
    with pytest.raises(RemoteError) as refused:
        await client.call(spec, timeout=CALL_TIMEOUT)
    return refused.value.code


async def test_a_remote_key_is_refused_an_op_until_it_is_granted_on_its_live_connection(served):
    root, ep = served
    async with (
        open_client(ep.control, options=_remote_options(root, "host-b")) as remote,
        open_client(ep.control, options=curve.client_options(ep)) as own,
    ):
        assert await remote.call(ECHO, {"text": "read"}, timeout=CALL_TIMEOUT) == "read"
        assert (await remote.call(HELLO, timeout=CALL_TIMEOUT))["service"] == "echo"
        with pytest.raises(RemoteError) as refused:
            await remote.call(POKE, timeout=CALL_TIMEOUT)
        assert refused.value.code == Code.OP_NOT_GRANTED
        assert refused.value.detail == {"op": "poke", "service": "echo", "key_name": "host-b"}
        assert await _code(remote, SECRET) == Code.OP_NOT_GRANTED
        assert await _code(remote, OpSpec("nothing", remote=Remote.WITH_GRANT)) == Code.UNKNOWN_OP
        assert await own.call(POKE, timeout=CALL_TIMEOUT) == "poked"  # this install's own key: the owner
        assert await own.call(SECRET, timeout=CALL_TIMEOUT) == "told"

        curve_keys.set_grants(root, "host-b", ["echo.poke", "echo.secret"])
        granted = time.monotonic()
        while True:  # the same connection: the grant is read by the service, not at a handshake
            try:
                assert await remote.call(POKE, timeout=CALL_TIMEOUT) == "poked"
                break
            except RemoteError as exc:
                assert exc.code == Code.OP_NOT_GRANTED
                assert time.monotonic() - granted < GRANT_BOUND, "the grant was never seen"
                await trio.sleep(0.05)
        assert await _code(remote, SECRET) == Code.OP_NOT_GRANTED  # never, whatever is granted

        curve_keys.set_grants(root, "host-b", [])
        ungranted = time.monotonic()
        while True:
            try:
                assert await remote.call(POKE, timeout=CALL_TIMEOUT) == "poked"
            except RemoteError as exc:
                assert exc.code == Code.OP_NOT_GRANTED
                break
            assert time.monotonic() - ungranted < GRANT_BOUND, "the grant was never taken back"
            await trio.sleep(0.05)
        assert await remote.call(ECHO, {"text": "still"}, timeout=CALL_TIMEOUT) == "still"
