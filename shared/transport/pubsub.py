"""Broadcast events on a PUB socket, and the rule a subscriber reads them by (``decode_event``).

Lossy by design: a publisher never waits for a slow subscriber, and a subscriber that
joins late misses what went before. Anything that must not be missed is state, and state
is always fetched over the control socket; events only say "look again".

A message is two frames: the topic (UTF-8, for zmq's prefix filter) and one msgpack map
``{"v", "topic", "seq", "event"}``. ``seq`` counts up per publisher, so a subscriber can
tell that it missed something.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import zmq

from shared import protocol
from shared.protocol import ProtocolError

if TYPE_CHECKING:
    from shared.transport.zmq_trio import Socket

MAX_TOPIC_LENGTH = 128


@dataclass(frozen=True)
class Event:
    topic: str
    seq: int
    event: Any


class Publisher:
    def __init__(self, sock: Socket):
        self._sock = sock
        self._seq = 0

    @property
    def dropped(self) -> int:
        return self._sock.dropped

    def publish(self, topic: str, event: Any) -> bool:
        """Queue one event; ``False`` when the queue was full and it was dropped."""
        if not topic or len(topic) > MAX_TOPIC_LENGTH:
            raise ValueError(f"a topic is 1..{MAX_TOPIC_LENGTH} characters")
        self._seq += 1
        payload = protocol.pack({"v": protocol.PROTOCOL_VERSION, "topic": topic, "seq": self._seq, "event": event})
        return self._sock.send_nowait([topic.encode(), payload])


@asynccontextmanager
async def open_publisher(
    address: str, *, queue: int = 1024, options: Iterable[tuple[int, Any]] = ()
) -> AsyncIterator[Publisher]:
    """Bind ``address``. For ipc endpoints the owning service's endpoint lock covers it.
    ``options`` (set before the bind) carry CURVE for tcp:// endpoints."""
    # Imported here, not at the top: a blocking subscriber reads events by ``decode_event``
    # in a process that never starts trio.
    import functools

    import trio

    from shared.transport.server_key import ServerKey, follow
    from shared.transport.zmq_trio import open_socket

    options = list(options)
    key = ServerKey.of(options)
    async with open_socket(zmq.PUB, bind=[address], outbound=queue, inbound=1, options=options) as sock:
        if key is None:
            yield Publisher(sock)
            return
        async with trio.open_nursery() as nursery:  # a rotation of its key takes effect with no restart
            nursery.start_soon(follow, key, functools.partial(sock.rebind, address))
            yield Publisher(sock)
            nursery.cancel_scope.cancel()


def decode_event(parts: list[bytes], *, window: tuple[int, int] = protocol.PROTOCOL_WINDOW) -> Event:
    """Validate one published message; ``ProtocolError`` if it cannot be trusted."""
    if len(parts) != 2:
        raise ProtocolError(protocol.Code.MALFORMED_FRAME, "an event is exactly two frames")
    frame = protocol.unpack(parts[1])
    if not isinstance(frame, dict) or set(frame) != {"v", "topic", "seq", "event"}:
        raise ProtocolError(protocol.Code.MALFORMED_FRAME, "an event is a map of v, topic, seq, event")
    version, topic, seq = frame["v"], frame["topic"], frame["seq"]
    if not (isinstance(version, int) and window[0] <= version <= window[1]):
        raise ProtocolError(protocol.Code.PROTOCOL_INCOMPATIBLE, f"event protocol version {version!r} is not supported")
    if not isinstance(topic, str) or topic.encode() != parts[0]:
        raise ProtocolError(protocol.Code.MALFORMED_FRAME, "event topic does not match its routing frame")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise ProtocolError(protocol.Code.MALFORMED_FRAME, "event seq must be a positive integer")
    return Event(topic, seq, frame["event"])
