"""A subscriber to a service's events (``shared.transport.pubsub``): tests and benches watch a
publisher with it; no product process subscribes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio
import zmq

from shared.protocol import ProtocolError
from shared.transport.pubsub import Event, decode_event
from shared.transport.zmq_trio import Socket, open_socket

log = logging.getLogger(__name__)


class Subscriber:
    """Valid events from a publisher, in order; bad ones are logged and skipped."""

    def __init__(self, sock: Socket):
        self._sock = sock
        self.skipped = 0

    async def receive(self) -> Event:
        while True:
            parts = await self._sock.receive()
            try:
                return decode_event(parts)
            except ProtocolError as exc:
                self.skipped += 1
                log.warning("skipping a bad event: %s", exc.message)
                await trio.lowlevel.checkpoint()

    def __aiter__(self) -> Subscriber:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.receive()
        except trio.ClosedResourceError:
            raise StopAsyncIteration from None


@asynccontextmanager
async def open_subscriber(
    address: str, topics: Iterable[str] = ("",), *, queue: int = 256, options: Iterable[tuple[int, Any]] = ()
) -> AsyncIterator[Subscriber]:
    """Connect to a publisher and subscribe to ``topics`` (prefixes; "" is everything)."""
    options = [*options, *((zmq.SUBSCRIBE, topic.encode()) for topic in topics)]
    async with open_socket(zmq.SUB, connect=[address], inbound=queue, outbound=1, options=options) as sock:
        yield Subscriber(sock)
