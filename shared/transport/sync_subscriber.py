"""A blocking subscriber: a thread that waits for a publisher to say "look again", no trio.

Like every subscriber it is lossy (``shared.transport.pubsub``): an event wakes a wait, and
the waiter then fetches the state over the control socket. It wakes on the events it is
asked for and on every (re)connection to a publisher, since what a publisher said before
the subscription reached it is lost: a fresh process that bound the address may have said
it already. The socket reconnects quickly, so a publisher that restarts is found at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import zmq

from shared.protocol import ProtocolError
from shared.transport import zmq_monitor
from shared.transport.curve import client_options, refuse_unsafe_tcp
from shared.transport.pubsub import decode_event

if TYPE_CHECKING:
    from shared.homes import Endpoint

# A publisher that went away is looked for again this often (libzmq's default is 100 ms).
RECONNECT_MS = 10
QUEUE = 64


class SyncSubscriber:
    def __init__(self, sock: zmq.Socket[Any], monitor: zmq.Socket[Any]):
        self._sock = sock
        self._monitor = monitor
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        self._poller.register(monitor, zmq.POLLIN)

    def wait(self, timeout: float, wanted: Callable[[Any], bool]) -> bool:
        """Block until an event whose payload is ``wanted``, or a new connection, arrives (True),
        or ``timeout`` seconds pass (False). Every event queued by then is read: one wake-up
        for them all."""
        deadline = time.monotonic() + timeout
        while True:
            woken = self._read(wanted)
            left = deadline - time.monotonic()
            if woken or left <= 0:
                return woken
            self._poller.poll(max(1, round(left * 1000)))

    def _read(self, wanted: Callable[[Any], bool]) -> bool:
        woken = False
        while self._monitor.poll(0):
            try:
                event, _, _ = zmq_monitor.parse(self._monitor.recv_multipart())
            except zmq_monitor.BadMonitorFrame:
                continue
            woken |= event == zmq.EVENT_HANDSHAKE_SUCCEEDED
        while self._sock.poll(0):
            try:
                woken |= wanted(decode_event(self._sock.recv_multipart()).event)
            except ProtocolError:  # not an event to trust: it wakes nothing
                continue
        return woken

    def close(self) -> None:
        self._sock.disable_monitor()
        self._monitor.close(linger=0)
        self._sock.close(linger=0)


@contextmanager
def subscribe(endpoint: Endpoint, topics: Iterable[str] = ("",)) -> Iterator[SyncSubscriber]:
    """Subscribe to ``topics`` (prefixes; "" is everything) of ``endpoint``'s publisher, whether
    or not it is there yet. Raises a ``curve_key_*`` error when a TCP endpoint has no keys."""
    options = client_options(endpoint)
    refuse_unsafe_tcp([endpoint.events], options)
    sock: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.SUB)
    try:
        for option, value in (
            (zmq.LINGER, 0),
            (zmq.RCVHWM, QUEUE),
            (zmq.RECONNECT_IVL, RECONNECT_MS),
            *options,
            *((zmq.SUBSCRIBE, topic.encode()) for topic in topics),
        ):
            sock.setsockopt(option, value)
        monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    except BaseException:
        sock.close(linger=0)
        raise
    subscriber = SyncSubscriber(sock, monitor)
    try:
        sock.connect(endpoint.events)
        yield subscriber
    finally:
        subscriber.close()
