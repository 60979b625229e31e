"""A TCP connection that drops with a call in flight, over real loopback sockets in this process:
each client fails the call at once with ``connection_lost``, not at its deadline."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import zmq

from shared import homes
from shared.protocol import Code, RemoteError
from shared.transport import NO_RETRY, curve
from shared.transport.sync_client import SyncClient, call_all
from tests.support.peers.echo_service import ECHO
from tests.support.tcp import free_port_pair, keyed_install, tcp_env

# Far longer than the test takes: a call failed by it would be a ``timeout``.
CALL_TIMEOUT = 30.0


def _by_sync_client(ep: homes.Endpoint) -> Any:
    try:
        with SyncClient(ep.control, options=curve.client_options(ep), retry=NO_RETRY) as client:
            return client.call(ECHO, {"text": "hi"}, timeout=CALL_TIMEOUT)
    except RemoteError as exc:
        return exc


def _by_call_all(ep: homes.Endpoint) -> Any:
    options = {ep.control: curve.client_options(ep)}
    return call_all([ep.control], ECHO, {"text": "hi"}, timeout=CALL_TIMEOUT, options=options)[ep.control]


@pytest.mark.parametrize("ask", [_by_sync_client, _by_call_all])
def test_a_tcp_service_that_drops_the_connection_mid_call_is_connection_lost(tmp_path, ask: Callable):
    root = keyed_install(tmp_path / "root")
    ep = homes.endpoint(root, "updater", env=tcp_env("updater", free_port_pair()))
    server: zmq.Socket = zmq.Context.instance().socket(zmq.ROUTER)
    for option, value in curve.server_options(ep):
        server.setsockopt(option, value)
    server.bind(ep.bind_control)
    took: list[bool] = []

    def take_and_drop() -> None:  # the request arrives, then the connection goes, unanswered
        took.append(bool(server.poll(int(CALL_TIMEOUT * 1000))))
        server.close(linger=0)

    dropper = threading.Thread(target=take_and_drop)
    dropper.start()
    try:
        outcome = ask(ep)
    finally:
        dropper.join(timeout=CALL_TIMEOUT * 2)
        server.close(linger=0)
    assert took == [True]
    assert isinstance(outcome, RemoteError) and outcome.code == Code.CONNECTION_LOST, outcome
    assert ep.control in outcome.message and "'echo'" in outcome.message
