"""A blocking subscriber: a thread that waits for a publisher to say "look again", no trio.

Like every subscriber it is lossy (``shared.transport.pubsub``): an event wakes a wait, and
the waiter then fetches the state over the control socket. It wakes on the events it is
asked for and on every (re)connection to a publisher, since what a publisher said before
the subscription reached it is lost: a fresh process that bound the address may have said
it already. The socket reconnects quickly, so a publisher that restarts is found at once.

``heard`` gives a watcher everything in order instead: each connection made, lost or refused
(from the socket's monitor) and each event, so it can tell a publisher that went away from
one that merely said nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

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
_MONITORED = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | zmq_monitor.HANDSHAKE_EVENTS


class Heard:
    """What ``heard`` reports: a connection made, lost or refused, or an event."""

    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    REFUSED = "refused"
    EVENT = "event"
    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: Any = None):
        self.kind = kind  # one of the four above
        self.value = value  # an event's payload; a refusal's typed error

    def __repr__(self) -> str:
        return f"Heard({self.kind!r}, {self.value!r})"


class Liveness(NamedTuple):
    """A subscriber's own pace of reconnecting and of proving its publisher is there (ms),
    for a watcher that must tell a lost peer sooner than the mesh's heartbeats would."""

    reconnect: int
    heartbeat: int
    timeout: int

    def options(self) -> list[tuple[int, int]]:
        return [
            (zmq.RECONNECT_IVL, self.reconnect),
            (zmq.HEARTBEAT_IVL, self.heartbeat),
            (zmq.HEARTBEAT_TIMEOUT, self.timeout),
            (zmq.CONNECT_TIMEOUT, self.timeout),
        ]


class SyncSubscriber:
    def __init__(self, sock: zmq.Socket[Any], monitor: zmq.Socket[Any], address: str):
        self._sock = sock
        self._monitor = monitor
        self._address = address
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

    def heard(self, timeout: float | None, *, stop_fd: int | None = None) -> list[Heard] | None:
        """Everything heard since the last call, in order, waiting up to ``timeout`` seconds
        (None: for ever) for something; an empty list when nothing came, and None once
        ``stop_fd`` is readable (a watcher's stop)."""
        poller = self._poller
        if stop_fd is not None:
            poller = zmq.Poller()
            for item in (self._sock, self._monitor, stop_fd):
                poller.register(item, zmq.POLLIN)
        ready = dict(poller.poll(None if timeout is None else max(0, round(timeout * 1000))))
        if stop_fd is not None and stop_fd in ready:
            return None
        return self._monitored() + self._events()

    def _monitored(self) -> list[Heard]:
        heard: list[Heard] = []
        while self._monitor.poll(0):
            try:
                event, _, _ = zmq_monitor.parse(self._monitor.recv_multipart())
            except zmq_monitor.BadMonitorFrame:
                continue
            refused = zmq_monitor.handshake_failure(event, self._address)
            if refused is not None:
                heard.append(Heard(Heard.REFUSED, refused))
            elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                heard.append(Heard(Heard.CONNECTED))
            elif event == zmq.EVENT_DISCONNECTED:
                heard.append(Heard(Heard.DISCONNECTED))
        return heard

    def _events(self) -> list[Heard]:
        heard: list[Heard] = []
        while self._sock.poll(0):
            try:
                heard.append(Heard(Heard.EVENT, decode_event(self._sock.recv_multipart()).event))
            except ProtocolError:  # not an event to trust: nothing was heard
                continue
        return heard

    def close(self) -> None:
        self._sock.disable_monitor()
        self._monitor.close(linger=0)
        self._sock.close(linger=0)


@contextmanager
def subscribe(
    endpoint: Endpoint, topics: Iterable[str] = ("",), *, liveness: Liveness | None = None
) -> Iterator[SyncSubscriber]:
    """Subscribe to ``topics`` (prefixes; "" is everything) of ``endpoint``'s publisher, whether
    or not it is there yet, at its own ``liveness`` if given. Raises a ``curve_key_*`` error when
    a TCP endpoint has no keys."""
    options = client_options(endpoint) + (liveness.options() if liveness else [])
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
        monitor = sock.get_monitor_socket(_MONITORED)
    except BaseException:
        sock.close(linger=0)
        raise
    subscriber = SyncSubscriber(sock, monitor, endpoint.events)
    try:
        sock.connect(endpoint.events)
        yield subscriber
    finally:
        subscriber.close()
