"""pyzmq for trio: one owner task per socket, fed by memory channels.

pyzmq has no trio integration. Its ``FD`` is edge-triggered: it becomes readable when the
socket's state *may* have changed, and only ``EVENTS`` tells what can be done now. Reading
``EVENTS``, sending and receiving all consume that edge, so ``EVENTS`` is re-checked after
every send and receive, and the task sleeps on the FD only when the last check showed
nothing to do.

Exactly one task, the pump, touches the socket. Other tasks hand it messages through a
bounded memory channel and take received messages from another. Trio allows one waiter per
FD (a second raises ``BusyResourceError``), and waking a task out of an FD wait means
cancelling it, which costs more than a whole message; so the pump parks, and a second task,
the watcher, is the FD's only waiter. The watcher never touches the socket: it wakes the
pump when the FD turns readable, and a task that queues a message wakes the pump directly.
No thread hop per message: everything runs in the trio thread with non-blocking calls.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, cast

import trio
import zmq

from shared.curve import refuse_plaintext
from shared.protocol import MAX_FRAME_BYTES, TRANSPORT_SIZE_FACTOR

log = logging.getLogger(__name__)

Message = list[bytes]

# How many rounds of sends and receives the pump does before yielding to other tasks.
_BATCH = 16
# How often ``wait_input_consumed`` looks whether the pump and the receiver have caught up.
INPUT_POLL = 0.001

# Plain ints: pyzmq's flag enums cost an object per ``&`` on the hot path.
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

    def pending_output(self) -> int:
        """Messages queued but not yet handed to zmq."""
        return self._queued + (self._head is not None)

    async def wait_input_consumed(self) -> None:
        """Return once every message zmq holds for this socket now has been taken by a
        receiver. The pump is woken to re-read ``EVENTS``, which is where zmq takes in what
        its I/O thread delivered; it parks again only when nothing is left to read."""
        self._wake()
        while not (self._pump_parked and self._held is None and not self._in_recv.statistics().current_buffer_used):
            await trio.sleep(INPUT_POLL)

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


def _configure(
    zsock: zmq.Socket[Any], sock_type: int, max_frame: int, options: Iterable[tuple[int, int | bytes]]
) -> None:
    zsock.setsockopt(zmq.LINGER, 0)
    zsock.setsockopt(zmq.MAXMSGSIZE, max_frame * TRANSPORT_SIZE_FACTOR)
    if sock_type == zmq.ROUTER:
        zsock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    # No IMMEDIATE on a DEALER: with it, zmq drops the replies already received but not yet
    # read when the peer disconnects (a service answering, then exiting). Clients probe
    # whether anything listens before they connect instead (call_rules.ipc_unreachable).
    for option, value in options:
        zsock.setsockopt(option, value)


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
    first connect so none is missed. Parse them with ``shared.zmq_monitor``.

    ``options`` are ``(option, value)`` pairs set before any bind or connect (a SUB's
    ``SUBSCRIBE`` goes here: once the pump runs, no other task touches the socket).

    ``close_linger_ms`` lets a service that is shutting down give its last replies time to
    leave; sockets are created with ``LINGER`` 0 so an abandoned socket never blocks exit.
    """
    bind, connect, options = list(bind), list(connect), list(options)
    refuse_plaintext([*bind, *connect], options)  # a tcp:// socket is CURVE or nothing
    zsock: zmq.Socket[Any] = zmq.Context.instance().socket(sock_type)
    sock: Socket | None = None
    events: Socket | None = None
    try:
        _configure(zsock, sock_type, max_frame, options)
        if monitor:
            events = Socket(zsock.get_monitor_socket(monitor), inbound=64, outbound=1)
        for address in bind:
            zsock.bind(address)
        for address in connect:
            zsock.connect(address)
        sock = Socket(zsock, inbound=inbound, outbound=outbound)
        sock.events = events
        async with trio.open_nursery() as nursery:
            for pumped in (sock, events):
                if pumped is not None:
                    nursery.start_soon(pumped._pump)
                    nursery.start_soon(pumped._watch_fd)
            try:
                yield sock
            finally:
                nursery.cancel_scope.cancel()
    finally:
        if events is not None:
            zsock.disable_monitor()
            events._close(0)
        if sock is not None:
            sock._close(close_linger_ms)
        else:
            zsock.close(linger=0)


async def drain_output(sock: Socket, timeout: float) -> bool:
    """Wait until everything queued on ``sock`` was handed to zmq; ``False`` on timeout."""
    with trio.move_on_after(timeout):
        while sock.pending_output():
            await trio.sleep(0.005)
        return True
    return False
