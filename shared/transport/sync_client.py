"""A blocking client for the CLI: same protocol and retry rules, no trio import.

The CLI makes one or two calls per run and must start fast, so it talks to services with
plain pyzmq and a poller instead of starting an event loop. Like the async client, it fails a
call at once when its connection drops before it is answered (the socket's monitor reports
the disconnect: the service went away, or, over TCP, heartbeats found the peer or link gone),
after reading every answer the service did send (``call_rules.dropped`` names the code).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import zmq

from shared import protocol
from shared.errors import HermesError
from shared.protocol import UNANSWERED, Code, OpSpec, ProtocolError, RemoteError
from shared.transport import zmq_monitor
from shared.transport.call_rules import (
    DEFAULT_RETRY,
    HANDSHAKE_REFUSALS,
    NO_ANSWER,
    NO_RETRY,
    REPLY_GRACE,
    RetryPolicy,
    answer_to,
    dropped,
    encode_call,
    ipc_unreachable,
    reply_frame,
    request_ids,
)
from shared.transport.curve import client_options, refuse_unsafe_tcp
from shared.transport.zmq_monitor import handshake_failure, watched_events

if TYPE_CHECKING:
    from shared.homes import Endpoint


class Transport(Protocol):
    """How a ``SyncClient``'s frames reach a service and its answers come back: a real
    DEALER socket (``DealerTransport``), or a service's own handlers in this process
    (``shared.transport.in_process.InProcessTransport``). The client encodes, decodes, retries and
    times out the same over either."""

    def send(self, raw: bytes, deadline: float) -> None:
        """Hand over one request frame by ``deadline`` (``time.monotonic``); a ``RemoteError``
        (``unavailable``, or a refused handshake) when nobody takes it."""

    def receive(self, deadline: float) -> list[bytes]:
        """The next message from the service. ``TimeoutError`` when none came by ``deadline``;
        ``ConnectionResetError`` once the service left and all it sent before was read."""

    def close(self) -> None:
        """Let go of the connection: a request still queued never arrives late."""


@dataclass(frozen=True)
class _Connection:
    sock: zmq.Socket[Any]
    monitor: zmq.Socket[Any]  # reports the service's disconnects and failed handshakes


def _peer_left(monitor: zmq.Socket[Any], address: str) -> bool:
    """Whether the monitor reported a disconnect (reading what it reported); a failed
    handshake raises its typed error at once, since libzmq would retry it for ever."""
    left = False
    while monitor.poll(0):
        try:
            event, _, _ = zmq_monitor.parse(monitor.recv_multipart())
        except zmq_monitor.BadMonitorFrame:
            continue
        failure = handshake_failure(event, address)
        if failure is not None:
            raise failure
        left |= event == zmq.EVENT_DISCONNECTED
    return left


class DealerTransport:
    """The real one: a zmq DEALER connected to ``address``, with a monitor that tells when
    the service goes away before answering."""

    def __init__(
        self, address: str, *, max_frame: int = protocol.MAX_FRAME_BYTES, options: Iterable[tuple[int, Any]] = ()
    ):
        """``options`` are ``(zmq option, value)`` pairs set before the connect: the CURVE
        options a tcp:// address must have (``shared.transport.curve.client_options``)."""
        self._options = list(options)
        refuse_unsafe_tcp([address], self._options)
        self.address = address
        self._max_frame = max_frame
        self._conn: _Connection | None = None
        self._gone = False  # the service left: only the answers it sent before are still to read

    def close(self) -> None:
        if self._conn is not None:
            self._conn.sock.disable_monitor()
            self._conn.monitor.close(linger=0)
            self._conn.sock.close(linger=0)
            self._conn = None

    def _connection(self) -> _Connection:
        if self._conn is None:
            sock: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, self._max_frame * protocol.TRANSPORT_SIZE_FACTOR)
            for option, value in self._options:
                sock.setsockopt(option, value)
            monitor = sock.get_monitor_socket(watched_events(self._options))
            sock.connect(self.address)
            self._conn = _Connection(sock, monitor)
        return self._conn

    def _peer_left(self, conn: _Connection) -> bool:
        try:
            return _peer_left(conn.monitor, self.address)
        except RemoteError:
            self.close()  # never let libzmq go on retrying a handshake that cannot succeed
            raise

    def send(self, raw: bytes, deadline: float) -> None:
        if self._conn is None and ipc_unreachable(self.address):  # probed once per connection
            raise RemoteError(Code.UNAVAILABLE, f"no service is listening at {self.address}")
        conn = self._connection()
        self._peer_left(conn)  # a disconnect before this request is not this request's
        self._gone = False
        try:
            if not _wait(conn.sock, zmq.POLLOUT, deadline):
                raise zmq.Again
            conn.sock.send(raw, zmq.NOBLOCK)
        except zmq.Again:  # the pipe to the service is full: it is not reading
            self.close()
            raise RemoteError(Code.UNAVAILABLE, f"no service accepted the request at {self.address}") from None

    def receive(self, deadline: float) -> list[bytes]:
        conn = self._connection()
        poller = zmq.Poller()
        poller.register(conn.sock, zmq.POLLIN)
        poller.register(conn.monitor, zmq.POLLIN)
        while True:
            if self._gone:
                if not conn.sock.poll(0):
                    self.close()
                    raise ConnectionResetError
            else:
                ready = _wait_any(poller, deadline)
                if not ready:
                    self.close()  # the request may still be queued: never let it arrive late
                    raise TimeoutError
                if conn.sock not in ready:
                    self._gone = self._peer_left(conn)
                    continue
            return conn.sock.recv_multipart(zmq.NOBLOCK)


def connect(endpoint: Endpoint, **options: Any) -> SyncClient:
    """A client of ``endpoint``'s control socket, with the CURVE options a TCP endpoint needs."""
    return SyncClient(endpoint.control, options=client_options(endpoint), **options)


def answers(endpoint: Endpoint, timeout: float = 1.0) -> bool:
    """Whether a service answers a HELLO at ``endpoint`` within ``timeout``, asked once: for a
    service whose lock cannot be seen from here, since over TCP nobody refuses a connection
    for a service that is not there. A refused handshake is raised: a service is there."""
    return says_hello(connect(endpoint, retry=NO_RETRY), timeout)


def says_hello(client: SyncClient, timeout: float = 1.0) -> bool:
    """``answers``, asked through ``client`` (which it closes)."""
    try:
        with client:
            client.call(protocol.HELLO, timeout=timeout)
    except RemoteError as exc:
        if exc.code in HANDSHAKE_REFUSALS:
            raise
        return exc.code not in UNANSWERED
    return True


class SyncClient:
    def __init__(
        self,
        address: str,
        *,
        window: tuple[int, int] = protocol.PROTOCOL_WINDOW,
        max_frame: int = protocol.MAX_FRAME_BYTES,
        retry: RetryPolicy = DEFAULT_RETRY,
        options: Iterable[tuple[int, Any]] = (),
        transport: Transport | None = None,
    ):
        """``options`` are the ``DealerTransport``'s, used when no ``transport`` is given."""
        self._transport = transport or DealerTransport(address, max_frame=max_frame, options=options)
        self.address = address
        self._window = window
        self._max_frame = max_frame
        self._retry = retry
        self._next_id = request_ids()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._transport.close()

    def call(
        self,
        spec: OpSpec,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_event: Callable[[Any], None] | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Like ``tests.support.async_client.Client.call``, blocking."""
        policy = retry or self._retry
        budget = spec.timeout if timeout is None else timeout
        attempt = 0
        while True:
            try:
                return self._attempt(spec, dict(args or {}), budget, on_event)
            except RemoteError as exc:
                if not policy.should_retry(spec, exc.code, attempt):
                    raise
                time.sleep(policy.delay(attempt))
                attempt += 1

    def _attempt(
        self, spec: OpSpec, args: dict[str, Any], budget: float, on_event: Callable[[Any], None] | None
    ) -> Any:
        request_id = self._next_id()
        raw = encode_call(request_id, spec, args, budget, self._max_frame, self._window)
        deadline = time.monotonic() + budget + REPLY_GRACE
        self._transport.send(raw, deadline)
        while True:
            try:
                message = self._transport.receive(deadline)
            except TimeoutError:
                raise RemoteError(
                    Code.TIMEOUT,
                    f"no answer to {spec.name!r} from {self.address} within {budget:g}s",
                    detail={"op": spec.name},
                ) from None
            except ConnectionResetError:
                raise dropped(self.address, spec.name) from None
            frame = reply_frame(message, self.address)
            if frame is None:
                continue
            try:
                reply = protocol.decode_reply(frame, window=self._window, max_bytes=self._max_frame)
            except ProtocolError as exc:
                if exc.request_id == request_id:
                    raise RemoteError(exc.code, exc.message, detail=exc.detail) from None
                continue
            if reply.id != request_id:
                continue  # a late answer to an earlier attempt
            if reply.kind == "event":
                if on_event is not None:
                    on_event(reply.payload)
                continue
            return reply.raise_for_error()


def _wait(sock: zmq.Socket, event: int, deadline: float) -> bool:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    return bool(sock.poll(timeout=int(remaining * 1000) + 1, flags=event))


def _wait_any(poller: zmq.Poller, deadline: float) -> dict:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return {}
    return dict(poller.poll(timeout=int(remaining * 1000) + 1))


def call_all(
    addresses: list[str],
    spec: OpSpec,
    args: Mapping[str, Any] | None = None,
    *,
    timeout: float,
    window: tuple[int, int] = protocol.PROTOCOL_WINDOW,
    max_frame: int = protocol.MAX_FRAME_BYTES,
    options: Mapping[str, Iterable[tuple[int, Any]]] | None = None,
    probe: bool = True,
    sockets: dict[str, zmq.Socket] | None = None,
) -> dict[str, Any]:
    """The same call to many services at once, from one thread: every request goes out
    first, then the answers are taken as they arrive, all within one deadline. Each
    address maps to its result or to the ``RemoteError`` it ended with. No retries.

    ``options`` maps an address to its socket options (CURVE, for tcp:// addresses).
    ``probe=False`` skips the ipc probe, for a caller that already knows someone listens.
    ``sockets``, kept by the caller between calls, holds the connected sockets: a second call
    to the same services does not reconnect. A socket that timed out or failed its handshake
    is closed and dropped from it, and so is one whose connection dropped (a tcp:// one ends
    with ``connection_lost`` at once); the caller closes the rest."""
    context: zmq.Context[zmq.Socket[Any]] = zmq.Context.instance()
    next_id = request_ids()
    outcomes: dict[str, Any] = {}
    pool: dict[str, zmq.Socket] = {} if sockets is None else sockets
    waiting: dict[zmq.Socket, tuple[str, str]] = {}
    monitors: dict[zmq.Socket, zmq.Socket] = {}  # a monitor -> the socket whose handshakes it watches
    poller = zmq.Poller()
    try:
        for address in addresses:
            socket_options = list((options or {}).get(address, ()))
            try:
                refuse_unsafe_tcp([address], socket_options)
            except HermesError as exc:
                outcomes[address] = RemoteError(exc.code, exc.message)
                continue
            if address not in pool and probe and ipc_unreachable(address):
                outcomes[address] = RemoteError(Code.UNAVAILABLE, f"no service is listening at {address}")
                continue
            request_id = next_id()
            try:
                raw = encode_call(request_id, spec, dict(args or {}), timeout, max_frame, window)
            except RemoteError as exc:
                outcomes[address] = exc
                continue
            sock = pool.get(address)
            if sock is None:
                sock = pool[address] = context.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.MAXMSGSIZE, max_frame * protocol.TRANSPORT_SIZE_FACTOR)
                for option, value in socket_options:
                    sock.setsockopt(option, value)
                if socket_options:  # a new CURVE connection: watch its handshake, and its loss
                    monitor = sock.get_monitor_socket(watched_events(socket_options))
                    monitors[monitor] = sock
                    poller.register(monitor, zmq.POLLIN)
                sock.connect(address)
            sock.send(raw, zmq.NOBLOCK)  # the request waits in the pipe for the connection
            waiting[sock] = (address, request_id)
            poller.register(sock, zmq.POLLIN)
        deadline = time.monotonic() + timeout + REPLY_GRACE
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for ready, _ in poller.poll(int(remaining * 1000) + 1):
                if ready.closed:  # its call ended earlier in this round
                    continue
                sock = monitors.get(ready, ready)
                if sock not in waiting:
                    poller.unregister(ready)
                    continue
                address, request_id = waiting[sock]
                if ready is not sock:
                    try:
                        if not _peer_left(ready, address):
                            continue
                        outcomes[address] = _last_word(sock, address, request_id, window, max_frame, spec.name)
                    except RemoteError as exc:
                        outcomes[address] = exc
                    poller.unregister(sock)
                    poller.unregister(ready)  # a closed socket left in the poller fails every poll
                    del waiting[sock]
                    # A failed handshake is retried for ever; a dropped connection's request may
                    # still be queued for the next one: never reuse either.
                    pool.pop(address, None)
                    _close(sock, monitors)
                    continue
                answer = answer_to(sock.recv_multipart(zmq.NOBLOCK), address, request_id, window, max_frame)
                if answer is NO_ANSWER:
                    continue
                outcomes[address] = answer
                poller.unregister(sock)
                del waiting[sock]
        for sock, (address, _) in waiting.items():
            outcomes[address] = RemoteError(Code.TIMEOUT, f"no answer to {spec.name!r} from {address} in time")
            pool.pop(address, None)  # its request may still be queued: never reuse it
            _close(sock, monitors)
    finally:
        for monitor, sock in list(monitors.items()):
            sock.disable_monitor()
            monitor.close(linger=0)
        if sockets is None:
            for sock in pool.values():
                sock.close(linger=0)
    return outcomes


def _last_word(
    sock: zmq.Socket, address: str, request_id: str, window: tuple[int, int], max_frame: int, op: str
) -> Any:
    """What a call whose connection dropped ends with: the answer the service sent before, else
    the code of a dropped connection."""
    while sock.poll(0):
        answer = answer_to(sock.recv_multipart(zmq.NOBLOCK), address, request_id, window, max_frame)
        if answer is not NO_ANSWER:
            return answer
    return dropped(address, op)


def _close(sock: zmq.Socket, monitors: dict[zmq.Socket, zmq.Socket]) -> None:
    for monitor, watched in list(monitors.items()):
        if watched is sock:
            sock.disable_monitor()
            monitor.close(linger=0)
            del monitors[monitor]
    sock.close(linger=0)
