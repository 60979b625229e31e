"""pyzmq for trio: ``Conduit``, a socket driven by whoever touches it, and ``Socket``, a socket
fed through memory channels for consumers that want to pull messages.

pyzmq has no trio integration. Its ``FD`` is edge-triggered: it becomes readable when the
socket's state *may* have changed, and only ``EVENTS`` tells what can be done now. Reading
``EVENTS``, sending and receiving all consume that edge, so ``EVENTS`` is re-checked after
every send and receive, and a task sleeps on the FD only when the last check showed
nothing to do. Trio allows one waiter per FD (a second raises ``BusyResourceError``).

``Conduit`` is the lean one, used by a service and its clients: a single owner task waits
on the FD and hands each message straight to a callback, and any task sends directly.
Whoever touches the socket reads ``EVENTS`` afterwards and drains what arrived before it
yields, so the owner, parked on the FD, never misses an edge.

``Socket`` serves pub/sub and the other pullers: one task, the pump, touches the socket;
other tasks hand it messages through a bounded memory channel and take received ones from
another. Waking a task out of an FD wait means cancelling it, which costs more than a whole
message; so the pump parks, and a second task, the watcher, is the FD's only waiter.
No thread hop per message: everything runs in the trio thread with non-blocking calls.
"""

from __future__ import annotations

import collections
import errno
import functools
import logging
import types
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, cast

import trio
import zmq

from shared.protocol import MAX_FRAME_BYTES, TRANSPORT_SIZE_FACTOR
from shared.transport.curve import refuse_unsafe_tcp

log = logging.getLogger(__name__)

Message = list[bytes]

# How many rounds of sends and receives the pump does before yielding to other tasks.
_BATCH = 16
# How many messages one drain of a ``Conduit`` dispatches before it lets other tasks run.
_DRAIN_BATCH = 64
# How often a sender waiting for a ROUTER peer over its high-water mark tries again.
FULL_PEER_POLL = 0.005
# Connections a bound socket lets wait to be accepted (the kernel caps it at somaxconn).
LISTEN_BACKLOG = 4096
# The open files a process serving on TCP asks for, within its hard limit.
NOFILE_WANTED = 65536
# How long a re-bind waits for libzmq to let go of the port it unbound, and how often it tries.
REBIND_SECONDS, REBIND_RETRY = 2.0, 0.005
# How often ``wait_input_consumed`` looks whether the pump and the receiver have caught up.
INPUT_POLL = 0.001

# Plain ints: pyzmq's flag enums cost an object per ``&`` on the hot path. Option names stay
# enum members: ``get`` turns a plain int back into one by a slow lookup.
_EVENTS_OPTION = zmq.EVENTS
_RCVMORE_OPTION = zmq.RCVMORE
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)


class Socket:
    """A zmq socket owned by one pump task. Create it with ``open_socket``."""

    def __init__(self, zsock: zmq.Socket[Any], *, inbound: int, outbound: int):
        self._zsock = zsock
        # Every option read here (FD, EVENTS, RCVMORE) is an int; pyzmq types them all int | bytes.
        self._int_option = cast(Callable[[int], int], zsock.getsockopt)
        self._fd = self._int_option(zmq.FD)
        self._drop_unroutable = zsock.type in (zmq.ROUTER, zmq.PUB)
        self._in_send, self._in_recv = trio.open_memory_channel[Message](inbound)
        self._out_send, self._out_recv = trio.open_memory_channel[Message](outbound)
        self._head: Message | None = None  # taken from the outbound channel, not yet sent
        self._held: Message | None = None  # received, waiting for room in the inbound channel
        self._queued = 0  # messages in the outbound channel: checked without a WouldBlock
        self._pump_task: trio.lowlevel.Task | None = None
        self._pump_parked = False
        self._watcher_task: trio.lowlevel.Task | None = None
        self._watcher_parked = False
        self._closed = False
        self.dropped = 0  # messages a lossy sender or an unreachable peer did not get
        self.events: Socket | None = None  # the monitor's socket, when ``open_socket`` was asked for one

    # --- the public face, used by any task ---------------------------------------------

    async def send(self, parts: Message) -> None:
        """Queue a multipart message. Waits only while the outbound queue is full.

        With room in the queue this does not yield: callers send and then wait for
        something else (a reply, the next request), which is their checkpoint.
        """
        if self._send_directly(parts):
            return
        try:
            try:
                self._out_send.send_nowait(parts)
            except trio.WouldBlock:
                await self._out_send.send(parts)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise trio.ClosedResourceError("socket is closed") from None
        self._queued += 1
        self._wake()

    def send_nowait(self, parts: Message) -> bool:
        """Queue a message if there is room; ``False`` if it was dropped (lossy senders)."""
        if self._send_directly(parts):
            return True
        try:
            self._out_send.send_nowait(parts)
        except trio.WouldBlock:
            self.dropped += 1
            return False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise trio.ClosedResourceError("socket is closed") from None
        self._queued += 1
        self._wake()
        return True

    async def receive(self) -> Message:
        """The next received multipart message; ``ClosedResourceError`` once closed.

        Takes a message that is already there without yielding; a consumer that loops
        over a busy socket must checkpoint itself now and then.
        """
        try:
            try:
                message = self._in_recv.receive_nowait()
            except trio.WouldBlock:
                message = await self._in_recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("socket is closed") from None
        if self._held is not None:
            self._wake()  # there is room again for what the pump holds
        return message

    # A plain iterator, not an async generator: a cancelled ``async for`` step must leave
    # the socket usable, and a cancelled async generator is finished for good.
    def __aiter__(self) -> Socket:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except trio.ClosedResourceError:
            raise StopAsyncIteration from None

    def _send_directly(self, parts: Message) -> bool:
        """Hand ``parts`` to zmq now, in the caller's task, if the pump is parked with nothing
        queued: order is kept, and no one else is using the socket (trio runs one task at a
        time). Saves two task switches per message. The send may consume the FD's edge, so
        EVENTS is read after it and the pump woken if there is something to receive. When
        zmq cannot take it yet, it becomes the pump's head message, as if queued."""
        if not self._pump_parked or self._queued or self._head is not None or self._closed:
            return False
        self._head = parts
        if not self._send_head():
            self._wake()  # a DEALER with no ready peer: the pump holds it and waits for POLLOUT
            return True
        if self._int_option(_EVENTS) & _POLLIN:
            self._wake()
        return True

    async def wait_input_consumed(self) -> None:
        """Return once every message zmq holds for this socket now has been taken by a
        receiver. The pump is woken to re-read ``EVENTS``, which is where zmq takes in what
        its I/O thread delivered; it parks again only when nothing is left to read."""
        self._wake()
        while not (self._pump_parked and self._held is None and not self._in_recv.statistics().current_buffer_used):
            await trio.sleep(INPUT_POLL)

    async def rebind(self, address: str, options: Iterable[tuple[int, int | bytes]]) -> None:
        """Serve ``address`` with ``options`` from now on (``rebind``). Between two
        checkpoints the pump is not touching the socket, so this task may."""
        await rebind(self._zsock, address, options)

    def _wake(self) -> None:
        if self._pump_parked:
            self._pump_parked = False
            assert self._pump_task is not None  # only a running pump parks
            trio.lowlevel.reschedule(self._pump_task)

    # --- the pump: the only code that touches the zmq socket --------------------------

    async def _pump(self) -> None:
        zsock = self._zsock
        get = self._int_option
        self._pump_task = trio.lowlevel.current_task()
        rounds = 0
        events = get(_EVENTS)
        while True:
            # ``events`` is always read after the last operation on the socket.
            progressed = False
            if self._held is not None:
                try:
                    self._in_send.send_nowait(self._held)
                    self._held = None
                except trio.WouldBlock:
                    pass
            while self._held is None and events & _POLLIN:
                try:
                    message = [zsock.recv(_NOBLOCK)]
                except zmq.Again:
                    events = get(_EVENTS)
                    break
                while get(_RCVMORE):  # the rest of a multipart message is already here
                    message.append(zsock.recv(_NOBLOCK))
                progressed = True
                try:
                    self._in_send.send_nowait(message)
                except trio.WouldBlock:
                    self._held = message  # stop reading until a receiver makes room
                events = get(_EVENTS)

            while events & _POLLOUT and (self._head is not None or self._queued):
                if self._head is None:
                    try:
                        self._head = self._out_recv.receive_nowait()
                    except trio.WouldBlock:  # the count ran ahead of the channel; it never should
                        self._queued = 0
                        break
                    self._queued -= 1
                sent = self._send_head()
                events = get(_EVENTS)
                if not sent:
                    break
                progressed = True

            if progressed:
                rounds += 1
                if rounds % _BATCH == 0:
                    await trio.lowlevel.checkpoint()
                    events = get(_EVENTS)
                continue

            # Nothing to do until zmq's state changes or a task queues work. From the EVENTS
            # read above until the park below no other task runs, so nothing is missed: a
            # task that queues a message reschedules the pump, and the watcher, re-armed
            # here, sees the FD become readable on any zmq state change after that read.
            if self._watcher_parked:
                self._watcher_parked = False
                assert self._watcher_task is not None  # only a running watcher parks
                trio.lowlevel.reschedule(self._watcher_task)
            self._pump_parked = True
            await trio.lowlevel.wait_task_rescheduled(self._abort_pump_park)
            events = get(_EVENTS)

    def _abort_pump_park(self, raise_cancel) -> trio.lowlevel.Abort:
        self._pump_parked = False
        return trio.lowlevel.Abort.SUCCEEDED

    def _abort_watcher_park(self, raise_cancel) -> trio.lowlevel.Abort:
        self._watcher_parked = False
        return trio.lowlevel.Abort.SUCCEEDED

    async def _watch_fd(self) -> None:
        """The one task that waits on the FD. It never touches the socket: it tells the
        pump, then stays parked until the pump has re-read EVENTS and parks itself, since
        the FD stays readable until then."""
        self._watcher_task = trio.lowlevel.current_task()
        while True:
            await trio.lowlevel.wait_readable(self._fd)
            self._watcher_parked = True
            self._wake()
            await trio.lowlevel.wait_task_rescheduled(self._abort_watcher_park)

    def _send_head(self) -> bool:
        head, send = self._head, self._zsock.send
        assert head is not None  # called only with a head message to send
        try:
            for part in head[:-1]:  # zmq queues a multipart message whole, or not at all
                send(part, _NOBLOCK | _SNDMORE)
            send(head[-1], _NOBLOCK)
        except zmq.Again:
            if not self._drop_unroutable:
                return False  # a DEALER with no ready peer: keep the message, wait for POLLOUT
            # A ROUTER peer over its high-water mark is not reading; holding the message
            # would stall every other peer behind it.
            log.warning("dropping a message for a peer that is not reading")
            self.dropped += 1
        except zmq.ZMQError as exc:
            if exc.errno != errno.EHOSTUNREACH:
                raise
            self.dropped += 1  # the peer is gone (ROUTER_MANDATORY says so instead of dropping silently)
        self._head = None
        return True

    def _close(self, linger_ms: int) -> None:
        if self._closed:
            return
        self._closed = True
        self._in_send.close()
        self._out_recv.close()
        trio.lowlevel.notify_closing(self._fd)
        self._zsock.close(linger=linger_ms)


_SENT, _FULL, _GONE = 0, 1, 2


class Conduit:
    """A zmq socket that hands each message it receives straight to ``on_message``.
    Create it with ``open_conduit``.

    One task at a time watches the FD (``watch``): a permanent owner task, or, without one,
    whichever task is waiting for something to arrive. Any task may send, directly, without
    yielding. After each send the sender reads ``EVENTS`` and drains what arrived,
    dispatching it itself: whatever consumed the FD's edge also takes what the edge
    announced. So ``on_message`` runs in whichever task drained; it must neither block nor
    raise, and when it gives the watcher what it waits for, it calls ``wake_watcher``.

    A ROUTER never holds a message back: a peer over its high-water mark is not reading,
    and holding its message would stall every other peer behind it. A DEALER keeps up to
    ``outbound`` messages zmq cannot take yet (no peer, or one over its high-water mark).

    ``identified``: the first part of each message (a ROUTER's routing id) is a ``zmq.Frame``,
    whose ``get("User-Id")`` is the ZAP User-Id its connection was let in with. Only a CURVE
    socket pays for the frame; the other parts are bytes as always.
    """

    def __init__(
        self,
        zsock: zmq.Socket[Any],
        on_message: Callable[[Message], None],
        *,
        outbound: int,
        identified: bool = False,
    ):
        self._zsock = zsock
        self._get = cast(Callable[[int], int], zsock.get)  # FD, EVENTS, RCVMORE: ints
        self._fd = self._get(zmq.FD)
        # Bytes, or a frame for its metadata: chosen once, so an ipc socket's drain is as it was.
        self._recv_first: Callable[[int], Any] = functools.partial(zsock.recv, copy=False) if identified else zsock.recv
        # pyzmq's Python ``send`` wrapper costs four times the send itself; its backend's does not.
        self._send = cast(Callable[[bytes, int], None], types.MethodType(zmq.backend.Socket.send, zsock))
        self._on_message = on_message
        self._routes = zsock.type == zmq.ROUTER
        self._queue: collections.deque[Message] = collections.deque()
        self._limit = outbound
        self._room = trio.lowlevel.ParkingLot()  # senders waiting for room in the queue
        self._draining = False
        self._watcher: trio.lowlevel.Task | None = None
        self._watcher_wait: trio.CancelScope | None = None
        self._closed = False
        self.dropped = 0  # messages a ROUTER could not deliver, or a full DEALER queue refused
        self.events: Conduit | None = None  # the monitor's conduit, when ``open_conduit`` was asked for one

    def send_nowait(self, parts: Message) -> bool:
        """Hand ``parts`` to zmq now; ``False`` if it was dropped (a ROUTER's peer that is
        gone or not reading, a DEALER's queue full). Never yields."""
        if self._closed:
            raise trio.ClosedResourceError("socket is closed")
        if self._queue:
            if len(self._queue) >= self._limit:
                self.dropped += 1
                return False
            self._queue.append(parts)  # behind the others: order is kept
            sent = True
        else:
            outcome = self._put(parts)
            if outcome == _FULL and not self._routes:
                self._queue.append(parts)
            sent = outcome == _SENT or not self._routes
            if not sent:
                self.dropped += 1
                log.warning("dropping a message for a peer that is %s", "not reading" if outcome == _FULL else "gone")
        self._after_io()
        return sent

    async def send(self, parts: Message) -> None:
        """Hand ``parts`` to zmq, waiting (within the caller's deadline) while a DEALER's
        queue is full or a ROUTER's peer is over its high-water mark: a stream's events
        slow down to the pace of their reader instead of being lost. A ROUTER peer that is
        gone gets nothing. Does not yield when zmq takes the message at once."""
        while True:
            if self._closed:
                raise trio.ClosedResourceError("socket is closed")
            if not self._routes:
                if len(self._queue) < self._limit:
                    self.send_nowait(parts)
                    return
                await self._room.park()
                continue
            outcome = self._put(parts)
            self._after_io()
            if outcome == _GONE:
                self.dropped += 1
                return
            if outcome == _SENT:
                return
            await trio.sleep(FULL_PEER_POLL)  # zmq has no per-peer POLLOUT to wait on

    async def rebind(self, address: str, options: Iterable[tuple[int, int | bytes]]) -> None:
        """Serve ``address`` with ``options`` from now on (``rebind``)."""
        await rebind(self._zsock, address, options)

    def pending_output(self) -> int:
        """Messages queued but not yet handed to zmq."""
        return len(self._queue)

    def take_input(self) -> None:
        """Dispatch every message zmq holds for this socket now (reading ``EVENTS`` is
        where zmq takes in what its I/O thread delivered)."""
        if not self._draining and not self._closed:
            while self._drain(_DRAIN_BATCH):
                pass

    def _put(self, parts: Message) -> int:
        send = self._send
        try:
            for part in parts[:-1]:  # zmq queues a multipart message whole, or not at all
                send(part, _NOBLOCK | _SNDMORE)
            send(parts[-1], _NOBLOCK)
        except zmq.Again:
            return _FULL
        except zmq.ZMQError as exc:
            if exc.errno != errno.EHOSTUNREACH:
                raise
            return _GONE  # ROUTER_MANDATORY: the peer is gone
        return _SENT

    def _after_io(self) -> None:
        if self._draining:
            return  # the drain under way re-reads EVENTS after this
        if self._drain(_DRAIN_BATCH):
            self.wake_watcher()  # more is waiting: the watcher takes it from here

    def _drain(self, limit: int) -> bool:
        """Send what is queued and dispatch what arrived until ``EVENTS`` shows nothing to
        do; ``True`` if messages were still waiting after ``limit`` of them."""
        get, recv, recv_first, dispatch = self._get, self._zsock.recv, self._recv_first, self._on_message
        self._draining = True
        try:
            taken = 0
            events = get(_EVENTS_OPTION)
            while True:
                flushed = False
                if self._queue and events & _POLLOUT:
                    flushed = self._flush()
                    events = get(_EVENTS_OPTION)
                if events & _POLLIN:
                    if taken >= limit:
                        return True
                    try:
                        message = [recv_first(_NOBLOCK)]
                    except zmq.Again:
                        events = get(_EVENTS_OPTION)
                        continue
                    while get(_RCVMORE_OPTION):  # the rest of a multipart message is already here
                        message.append(recv(_NOBLOCK))
                    taken += 1
                    dispatch(message)
                    events = get(_EVENTS_OPTION)
                elif not flushed:
                    return False
        finally:
            self._draining = False

    def _flush(self) -> bool:
        queue, sent = self._queue, False
        while queue and self._put(queue[0]) == _SENT:
            queue.popleft()
            sent = True
        if sent and self._room:
            self._room.unpark_all()
        return sent

    @property
    def watched(self) -> bool:
        """Whether a task is watching the FD now."""
        return self._watcher is not None

    async def watch(self, done: Callable[[], bool]) -> None:
        """Watch the FD, dispatching what arrives, until ``done()``. One watcher at a time.

        Another task wakes the watcher, when it drained what the watcher waits for or left
        messages behind, by cancelling its wait; that is rare, so one cancel scope serves
        many waits."""
        if self._watcher is not None:
            raise trio.BusyResourceError("another task is watching this socket")
        self._watcher = trio.lowlevel.current_task()
        try:
            while True:
                with trio.CancelScope() as self._watcher_wait:
                    while not done():
                        if self._closed:
                            raise trio.ClosedResourceError("socket is closed")
                        if self._drain(_DRAIN_BATCH):
                            await trio.lowlevel.checkpoint()
                        elif not done():
                            await trio.lowlevel.wait_readable(self._fd)
                    return
        finally:
            self._watcher = self._watcher_wait = None

    def wake_watcher(self) -> None:
        """Make the watcher look again (it does by itself when it is the one draining)."""
        if self._watcher_wait is not None and self._watcher is not trio.lowlevel.current_task():
            self._watcher_wait.cancel()

    async def _own(self) -> None:
        await self.watch(lambda: False)

    def _close(self, linger_ms: int) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.clear()
        self._room.unpark_all()
        trio.lowlevel.notify_closing(self._fd)
        self._zsock.close(linger=linger_ms)


async def rebind(zsock: zmq.Socket[Any], address: str, options: Iterable[tuple[int, int | bytes]]) -> None:
    """Serve ``address`` with ``options`` from now on (a new CURVE secret key): the endpoint is
    unbound, which closes every connection made through it, and bound again with them. libzmq
    lets go of the port a moment after the unbind, so the bind is tried again for up to
    ``REBIND_SECONDS``."""
    zsock.unbind(address)
    for option, value in options:
        zsock.setsockopt(option, value)
    deadline = trio.current_time() + REBIND_SECONDS
    while True:
        try:
            zsock.bind(address)
            return
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE or trio.current_time() >= deadline:
                raise
        await trio.sleep(REBIND_RETRY)


def _configure(
    zsock: zmq.Socket[Any], sock_type: int, max_frame: int, options: Iterable[tuple[int, int | bytes]]
) -> None:
    zsock.setsockopt(zmq.LINGER, 0)
    zsock.setsockopt(zmq.MAXMSGSIZE, max_frame * TRANSPORT_SIZE_FACTOR)
    if sock_type == zmq.ROUTER:
        zsock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        zsock.setsockopt(zmq.BACKLOG, 4096)
    # No IMMEDIATE on a DEALER: with it, zmq drops the replies already received but not yet
    # read when the peer disconnects (a service answering, then exiting). Clients probe
    # whether anything listens before they connect instead (call_rules.ipc_unreachable).
    for option, value in options:
        zsock.setsockopt(option, value)


def _make(
    sock_type: int,
    bind: Iterable[str],
    connect: Iterable[str],
    options: Iterable[tuple[int, int | bytes]],
    max_frame: int,
    monitor: int,
) -> tuple[zmq.Socket[Any], zmq.Socket[Any] | None]:
    """A configured, bound and connected socket, and its monitor's socket if ``monitor``."""
    bind, connect, options = list(bind), list(connect), list(options)
    refuse_unsafe_tcp([*bind, *connect], options)  # a tcp:// socket is CURVE or nothing
    zsock: zmq.Socket[Any] = zmq.Context.instance().socket(sock_type)
    watch: zmq.Socket[Any] | None = None
    try:
        _configure(zsock, sock_type, max_frame, options)
        if monitor:
            watch = zsock.get_monitor_socket(monitor)  # before the first connect: no event is missed
        if bind:
            # A flood of connections must not fill the accept queue: past it the kernel drops
            # new SYNs, and a legitimate client's connection waits out a 1 s retransmit.
            zsock.setsockopt(zmq.BACKLOG, LISTEN_BACKLOG)
        if any(address.startswith("tcp://") for address in bind):
            _room_for_connections()
        for address in bind:
            zsock.bind(address)
        for address in connect:
            zsock.connect(address)
    except BaseException:
        if watch is not None:
            zsock.disable_monitor()
            watch.close(linger=0)
        zsock.close(linger=0)
        raise
    return zsock, watch


def _room_for_connections() -> None:
    """Raise this process's soft limit on open files to its hard one (at most
    ``NOFILE_WANTED``): a socket on a network holds a descriptor per connection, a storm's
    included, and the usual soft limit of 1024 would let a thousand of them starve the process
    of files (its state writes, its logs) long before memory runs short."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = NOFILE_WANTED if hard == resource.RLIM_INFINITY else min(hard, NOFILE_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as exc:  # a sandbox that forbids it: serve within the limit
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, wanted, exc)


@asynccontextmanager
async def open_conduit(
    sock_type: int,
    on_message: Callable[[Message], None],
    *,
    bind: Iterable[str] = (),
    connect: Iterable[str] = (),
    options: Iterable[tuple[int, int | bytes]] = (),
    max_frame: int = MAX_FRAME_BYTES,
    outbound: int = 256,
    close_linger_ms: int = 0,
    monitor: int = 0,
    on_monitor: Callable[[Message], None] | None = None,
    owned: bool = True,
    identified: bool = False,
) -> AsyncIterator[Conduit]:
    """A configured ``Conduit``, with an owner task watching it unless not ``owned`` (then
    the tasks that wait for messages ``watch`` it themselves); closed on exit. ``identified``
    as for ``Conduit``.

    ``options`` are ``(option, value)`` pairs set before any bind or connect (CURVE keys go
    here). With a ``monitor`` mask of zmq socket events, each event's message goes to
    ``on_monitor`` (parse it with ``shared.transport.zmq_monitor``); ``close_linger_ms`` as for
    ``open_socket``.
    """
    if monitor and on_monitor is None:
        raise ValueError("a monitor needs on_monitor")
    zsock, watch = _make(sock_type, bind, connect, options, max_frame, monitor)
    conduit = Conduit(zsock, on_message, outbound=outbound, identified=identified)
    if watch is not None:
        assert on_monitor is not None  # checked above
        conduit.events = Conduit(watch, on_monitor, outbound=1)
    try:
        async with trio.open_nursery() as nursery:
            if owned:
                nursery.start_soon(conduit._own)
            if conduit.events is not None:
                nursery.start_soon(conduit.events._own)
            try:
                yield conduit
            finally:
                nursery.cancel_scope.cancel()
    finally:
        if conduit.events is not None:
            zsock.disable_monitor()
            conduit.events._close(0)
        conduit._close(close_linger_ms)


@asynccontextmanager
async def open_socket(
    sock_type: int,
    *,
    bind: Iterable[str] = (),
    connect: Iterable[str] = (),
    options: Iterable[tuple[int, int | bytes]] = (),
    max_frame: int = MAX_FRAME_BYTES,
    inbound: int = 256,
    outbound: int = 256,
    close_linger_ms: int = 0,
    monitor: int = 0,
) -> AsyncIterator[Socket]:
    """A configured socket with its pump running; closed on exit.

    ``monitor`` is a mask of zmq socket events (``zmq.EVENT_DISCONNECTED`` ...); with it the
    socket's ``events`` is a second ``Socket`` that receives them, watched from before the
    first connect so none is missed. Parse them with ``shared.transport.zmq_monitor``.

    ``options`` are ``(option, value)`` pairs set before any bind or connect (a SUB's
    ``SUBSCRIBE`` goes here: once the pump runs, no other task touches the socket).

    ``close_linger_ms`` lets a service that is shutting down give its last replies time to
    leave; sockets are created with ``LINGER`` 0 so an abandoned socket never blocks exit.
    """
    zsock, watch = _make(sock_type, bind, connect, options, max_frame, monitor)
    sock = Socket(zsock, inbound=inbound, outbound=outbound)
    if watch is not None:
        sock.events = Socket(watch, inbound=64, outbound=1)
    try:
        async with trio.open_nursery() as nursery:
            for pumped in (sock, sock.events):
                if pumped is not None:
                    nursery.start_soon(pumped._pump)
                    nursery.start_soon(pumped._watch_fd)
            try:
                yield sock
            finally:
                nursery.cancel_scope.cancel()
    finally:
        if sock.events is not None:
            zsock.disable_monitor()
            sock.events._close(0)
        sock._close(close_linger_ms)
