"""Read a zmq socket monitor's messages without ``zmq.utils.monitor`` (it imports asyncio),
and what a client makes of them: which events it watches, and the typed error of a failed
handshake.

A monitor message is two frames: 6 bytes (event number, uint16; value, uint32; native byte
order, as libzmq writes them) and the endpoint. Anything else is a ``BadMonitorFrame``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import zmq

from shared.errors import TransportError
from shared.protocol import Code, RemoteError

_HEAD = struct.Struct("=HI")


class BadMonitorFrame(TransportError):
    code = "bad_monitor_frame"


def parse(parts: Sequence[bytes]) -> tuple[int, int, str]:
    """(event, value, endpoint) of one monitor message."""
    if len(parts) != 2 or not isinstance(parts[0], bytes) or len(parts[0]) != _HEAD.size:
        raise BadMonitorFrame(f"a monitor message is 2 frames, the first {_HEAD.size} bytes")
    event, value = _HEAD.unpack(parts[0])
    return event, value, bytes(parts[1]).decode("utf-8", "replace")


# Monitor events that end a connection attempt for good: retrying cannot change the keys.
HANDSHAKE_EVENTS = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
)


def watched_events(options: Iterable[tuple[int, int | bytes]]) -> int:
    """The monitor events a client with socket ``options`` watches: the service's disconnects
    and, on a CURVE connection only, failed handshakes. On a plain one, a handshake cut short
    is a service that went away mid-connect (exiting, say), never a key problem."""
    curve = any(option == zmq.CURVE_SERVERKEY for option, _ in options)
    return zmq.EVENT_DISCONNECTED | (HANDSHAKE_EVENTS if curve else 0)


def handshake_failure(event: int, address: str) -> RemoteError | None:
    """The typed error a failed handshake event means, or None for any other event.

    libzmq reports a server key we do not match only as "no detail" (and would retry it for
    ever); a refusal by the service's ZAP handler is "auth"."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return RemoteError(Code.AUTH_FAILED, f"the service at {address} refused this client's CURVE key")
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        return RemoteError(
            Code.SERVER_KEY_MISMATCH, f"the service at {address} does not hold the server key this client trusts"
        )
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return RemoteError(Code.HANDSHAKE_FAILED, f"the handshake with {address} failed (is it a CURVE service?)")
    return None
