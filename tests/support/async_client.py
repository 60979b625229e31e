"""The async client of a mesh service: one DEALER, many concurrent calls.

A caller hands its request to the socket itself. Replies are matched to calls by request
id: whichever task takes a reply off the socket puts it in its call's mailbox, and the
call wakes. One watcher task enforces every call's deadline (a cancel scope per call costs more than the
rest of a round trip). A call that times out closes the socket and opens a fresh one: the
request may still sit in the old socket's queue, and closing it with ``LINGER`` 0 makes
sure it is never delivered late. Calls that were in flight on the old socket fail with
``connection_reset``; like timeouts, that is retried only for idempotent ops.

A service that goes away (it exited, or was killed) will never answer what it had not
answered yet, so a peer's disconnect fails the calls in flight at once, after every answer
it did send has been delivered, rather than leaving them to wait out their deadlines.
"""

from __future__ import annotations

import collections
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio
import zmq

from shared import protocol
from shared.protocol import Code, OpSpec, ProtocolError, RemoteError, Reply
from shared.transport import zmq_monitor
from shared.transport.call_rules import (
    DEFAULT_RETRY,
    REPLY_GRACE,
    RetryPolicy,
    dropped,
    encode_call,
    ipc_unreachable,
    reply_frame,
    request_ids,
)
from shared.transport.zmq_monitor import handshake_failure, watched_events
from shared.transport.zmq_trio import Conduit, Message, open_conduit

log = logging.getLogger(__name__)

EventCallback = Callable[[Any], Any]

# How late a deadline may be noticed; call timeouts are whole seconds or tenths.
DEADLINE_RESOLUTION = 0.02
# What the socket's monitor reports to ``Client._on_monitor``.
# Events a streaming call may have waiting before its consumer is judged stuck.
MAX_PENDING_EVENTS = 1024


class _Mailbox:
    """Replies for one call, put in by whichever task drained the socket, taken out by the call."""

    __slots__ = ("op", "deadline", "answered", "_conn", "_replies", "_waiter", "_watching", "_failure")

    def __init__(self, op: OpSpec, deadline: float, conn: _Connection):
        self.op = op
        self.deadline = deadline
        self.answered = False  # a terminal reply is in
        self._conn = conn
        self._replies: collections.deque[Reply] = collections.deque()
        self._waiter: trio.lowlevel.Task | None = None  # the call, parked until a reply comes
        self._watching = False  # the call is watching the socket itself
        self._failure: RemoteError | None = None

    def put(self, reply: Reply) -> None:
        if self._failure is not None:
            return
        if reply.kind == "event" and not self.op.streaming:
            reply = _local_error(
                reply.id, Code.MALFORMED_REPLY, f"an event for {self.op.name!r}, which does not stream"
            )
        elif len(self._replies) >= MAX_PENDING_EVENTS:
            self.fail(RemoteError(Code.CONNECTION_RESET, f"{self.op.name!r} fell {MAX_PENDING_EVENTS} events behind"))
            return
        self._replies.append(reply)
        if reply.kind != "event":
            self.answered = True
        self._wake()

    def fail(self, error: RemoteError) -> None:
        if self._failure is None:
            self._failure = error
            self._wake()

    @property
    def parked(self) -> bool:
        return self._waiter is not None

    def _ready(self) -> bool:
        return bool(self._replies) or self._failure is not None

    def _wake(self) -> None:
        if self._waiter is not None:
            trio.lowlevel.reschedule(self._waiter)
            self._waiter = None
        elif self._watching:
            conduit = self._conn.conduit
            assert conduit is not None  # only an open socket is watched
            conduit.wake_watcher()

    async def get(self) -> Reply:
        """The next reply. Waiting, the call watches the socket itself when no other task
        does (a lone caller then costs one task switch per reply), and parks otherwise."""
        conduit = self._conn.conduit
        assert conduit is not None  # a connection is handed out open
        if self._ready():
            await trio.lowlevel.checkpoint()
        while not self._ready():
            if conduit.watched:
                self._waiter = trio.lowlevel.current_task()

                def abort(_: Any) -> trio.lowlevel.Abort:
                    self._waiter = None
                    return trio.lowlevel.Abort.SUCCEEDED

                await trio.lowlevel.wait_task_rescheduled(abort)
                continue
            self._watching = True
            try:
                await conduit.watch(self._ready)
            except trio.ClosedResourceError:
                self.fail(RemoteError(Code.CONNECTION_RESET, "the connection was reset"))
            finally:
                self._watching = False
                if not conduit.watched:
                    self._conn.hand_over()
        if not conduit.watched:
            self._conn.hand_over()  # woken to take the watch, but a reply came first: pass it on
        if self._replies:
            return self._replies.popleft()
        assert self._failure is not None  # ready with no reply only by a failure
        raise self._failure


def _local_error(request_id: str, code: str, message: str, detail: dict | None = None) -> Reply:
    return Reply(request_id, "error", protocol.error_payload(code, message, detail), protocol.PROTOCOL_VERSION)


@dataclass
class _Connection:
    scope: trio.CancelScope
    conduit: Conduit | None = None  # set once the socket is open
    pending: dict[str, _Mailbox] = field(default_factory=dict)
    busy: trio.Event = field(default_factory=trio.Event)  # set while calls are pending
    failed: RemoteError | None = None  # a handshake failure seen while no call was pending

    def hand_over(self) -> None:
        """Wake one parked call to watch the socket: the one watching stopped."""
        for mailbox in self.pending.values():
            if mailbox.parked:
                mailbox._wake()
                return


class Client:
    """Use through ``open_client``."""

    def __init__(
        self,
        address: str,
        nursery: trio.Nursery,
        *,
        window: tuple[int, int],
        max_frame: int,
        retry: RetryPolicy,
        options: Iterable[tuple[int, int | bytes]] = (),
    ):
        self.address = address
        self._options = tuple(options)
        self._nursery = nursery
        self._window = window
        self._max_frame = max_frame
        self._retry = retry
        self._next_id = request_ids()
        self._conn: _Connection | None = None

    async def call(
        self,
        spec: OpSpec,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_event: EventCallback | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Run ``spec`` on the service and return its result.

        ``timeout`` bounds each attempt (default: the op's own limit). Event frames of a
        streaming op go to ``on_event`` (a function or coroutine function). A typed error
        answer raises ``RemoteError``; so do local faults (``timeout``, ``unavailable``,
        ``connection_reset``, ``malformed_reply``, ``frame_too_large``).
        """
        policy = retry or self._retry
        budget = spec.timeout if timeout is None else timeout
        attempt = 0
        while True:
            try:
                return await self._attempt(spec, dict(args or {}), budget, on_event)
            except RemoteError as exc:
                if not policy.should_retry(spec, exc.code, attempt):
                    raise
                await trio.sleep(policy.delay(attempt))
                attempt += 1

    async def _attempt(self, spec: OpSpec, args: dict[str, Any], budget: float, on_event: EventCallback | None) -> Any:
        request_id = self._next_id()
        raw = encode_call(request_id, spec, args, budget, self._max_frame, self._window)
        conn = await self._connection()
        if conn.failed is not None:
            self._reset(conn)
            raise conn.failed
        mailbox = _Mailbox(spec, trio.current_time() + budget + REPLY_GRACE, conn)
        conn.pending[request_id] = mailbox
        if not conn.busy.is_set():
            conn.busy.set()
        try:
            assert conn.conduit is not None  # a connection is handed out open
            try:
                await conn.conduit.send([raw])
            except trio.ClosedResourceError:
                raise RemoteError(Code.CONNECTION_RESET, f"the connection to {self.address} was reset") from None
            while True:
                reply = await mailbox.get()
                if reply.kind != "event":
                    return reply.raise_for_error()
                await _deliver(on_event, reply.payload)
        finally:
            conn.pending.pop(request_id, None)

    async def _connection(self) -> _Connection:
        if self._conn is None:
            if ipc_unreachable(self.address):
                raise RemoteError(Code.UNAVAILABLE, f"no service is listening at {self.address}")
            self._conn = await self._nursery.start(self._run_connection)
        return self._conn

    def _reset(self, conn: _Connection) -> None:
        if self._conn is conn:
            self._conn = None
        conn.scope.cancel()
        why = f"the connection to {self.address} was reset"
        for mailbox in conn.pending.values():
            mailbox.fail(RemoteError(Code.CONNECTION_RESET, why, detail={"op": mailbox.op.name}))

    async def _run_connection(self, *, task_status: trio.TaskStatus[_Connection]) -> None:
        with trio.CancelScope() as scope:
            conn = _Connection(scope)
            async with open_conduit(
                zmq.DEALER,
                functools.partial(self._dispatch, conn),
                connect=[self.address],
                options=self._options,
                max_frame=self._max_frame,
                monitor=watched_events(self._options),
                on_monitor=functools.partial(self._on_monitor, conn),
                owned=False,  # the calls waiting for replies watch it
            ) as conduit:
                conn.conduit = conduit
                task_status.started(conn)
                await self._watch_deadlines(conn)

    async def _watch_deadlines(self, conn: _Connection) -> None:
        assert conn.conduit is not None
        while True:
            if not conn.pending:
                conn.busy = trio.Event()
                await conn.busy.wait()  # an idle client does not tick
            await trio.sleep(DEADLINE_RESOLUTION)
            now = trio.current_time()
            expired = [m for m in conn.pending.values() if m.deadline <= now]
            if not expired:
                continue
            # Nothing left the socket at all: no service took the request.
            unsent = conn.conduit.pending_output() > 0
            for mailbox in expired:
                if unsent:
                    mailbox.fail(RemoteError(Code.UNAVAILABLE, f"no service accepted the request at {self.address}"))
                else:
                    mailbox.fail(
                        RemoteError(
                            Code.TIMEOUT,
                            f"no answer to {mailbox.op.name!r} from {self.address} in time",
                            detail={"op": mailbox.op.name},
                        )
                    )
            self._reset(conn)
            return

    def _on_monitor(self, conn: _Connection, parts: Message) -> None:
        """What the socket's monitor reports, one event at a time."""
        try:
            event, _, _ = zmq_monitor.parse(parts)
        except zmq_monitor.BadMonitorFrame:
            return
        failure = handshake_failure(event, self.address)
        if failure is not None:  # libzmq would retry it for ever: fail every call now
            conn.failed = failure
            for mailbox in conn.pending.values():
                mailbox.fail(failure)
            if conn.pending:
                self._reset(conn)
            return
        if event == zmq.EVENT_DISCONNECTED:
            assert conn.conduit is not None
            conn.conduit.take_input()  # what the service answered before it left
            unanswered = [mailbox for mailbox in conn.pending.values() if not mailbox.answered]
            for mailbox in unanswered:
                mailbox.fail(dropped(self.address, mailbox.op.name))
            if unanswered:
                self._reset(conn)
            # else nothing was waiting: zmq reconnects by itself

    def _dispatch(self, conn: _Connection, parts: Message) -> None:
        raw = reply_frame(parts, self.address)
        if raw is None:
            return
        try:
            reply = protocol.decode_reply(raw, window=self._window, max_bytes=self._max_frame)
        except ProtocolError as exc:
            if exc.request_id is None or exc.request_id not in conn.pending:
                log.warning("dropping a reply from %s: %s", self.address, exc.message)
                return
            reply = _local_error(exc.request_id, exc.code, exc.message, exc.detail)
        mailbox = conn.pending.get(reply.id)
        if mailbox is not None:  # else: a late answer to a call that already gave up
            mailbox.put(reply)

    def close(self) -> None:
        if self._conn is not None:
            self._reset(self._conn)


async def _deliver(on_event: EventCallback | None, payload: Any) -> None:
    if on_event is None:
        return
    outcome = on_event(payload)
    if inspect.isawaitable(outcome):
        await outcome


@asynccontextmanager
async def open_client(
    address: str,
    *,
    window: tuple[int, int] = protocol.PROTOCOL_WINDOW,
    max_frame: int = protocol.MAX_FRAME_BYTES,
    retry: RetryPolicy = DEFAULT_RETRY,
    options: Iterable[tuple[int, int | bytes]] = (),
) -> AsyncIterator[Client]:
    """A client of the service at ``address``. ``options`` are extra ``(zmq option, value)``
    pairs set on each socket it opens, before the connect (CURVE keys, for one)."""
    async with trio.open_nursery() as nursery:
        client = Client(address, nursery, window=window, max_frame=max_frame, retry=retry, options=options)
        try:
            yield client
        finally:
            client.close()
            nursery.cancel_scope.cancel()
