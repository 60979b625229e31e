"""The async client of a mesh service: one DEALER, many concurrent calls.

Replies are matched to calls by request id. A call that times out closes the socket and
opens a fresh one (the request may still sit in the old socket's queue; closing it with
``LINGER`` 0 makes sure it is never delivered late). Calls that were in flight on the old
socket fail with ``connection_reset`` and, like timeouts, are retried only for idempotent ops.
"""

from __future__ import annotations

import inspect
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Mapping

import trio
import zmq

from shared import protocol
from shared.protocol import Code, OpSpec, ProtocolError, RemoteError, Reply
from shared.call_rules import DEFAULT_RETRY, REPLY_GRACE, RetryPolicy, encode_call, ipc_missing, request_ids
from shared.zmq_trio import Socket, open_socket

log = logging.getLogger(__name__)

EventCallback = Callable[[Any], Any]


@dataclass
class _Connection:
    sock: Socket
    scope: trio.CancelScope
    pending: dict[str, trio.MemorySendChannel[Reply]] = field(default_factory=dict)


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
    ):
        self.address = address
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
        raw = encode_call(request_id, spec, args, budget, self._max_frame)
        conn = await self._connection()
        if spec.streaming:
            deliver, replies = trio.open_memory_channel[Reply](64)
        else:
            deliver = replies = _OneReply()
        conn.pending[request_id] = deliver
        try:
            with trio.move_on_after(budget + REPLY_GRACE):
                await conn.sock.send([raw])
                async for reply in replies:
                    if reply.kind == "event":
                        await _deliver(on_event, reply.payload)
                        continue
                    return reply.raise_for_error()
                raise RemoteError(Code.CONNECTION_RESET, f"the connection to {self.address} was reset")
            unsent = conn.sock.pending_output() > 0
            await self._reset(conn)
            if unsent:
                raise RemoteError(Code.UNAVAILABLE, f"no service accepted the request at {self.address}")
            raise RemoteError(
                Code.TIMEOUT, f"no answer to {spec.name!r} from {self.address} within {budget:g}s", detail={"op": spec.name}
            )
        finally:
            conn.pending.pop(request_id, None)
            deliver.close()

    async def _connection(self) -> _Connection:
        if self._conn is None:
            if ipc_missing(self.address):
                raise RemoteError(Code.UNAVAILABLE, f"no service is listening at {self.address}")
            self._conn = await self._nursery.start(self._run_connection)
        return self._conn

    async def _reset(self, conn: _Connection) -> None:
        if self._conn is conn:
            self._conn = None
        conn.scope.cancel()
        for channel in conn.pending.values():
            channel.close()  # those calls see the channel end: connection_reset

    async def _run_connection(self, *, task_status: trio.TaskStatus[_Connection]) -> None:
        with trio.CancelScope() as scope:
            async with open_socket(zmq.DEALER, connect=[self.address], max_frame=self._max_frame) as sock:
                conn = _Connection(sock, scope)
                task_status.started(conn)
                async for parts in sock:
                    await self._dispatch(conn, parts)

    async def _dispatch(self, conn: _Connection, parts: list[bytes]) -> None:
        if len(parts) != 1:
            log.warning("dropping a %d-part reply from %s", len(parts), self.address)
            return
        try:
            reply = protocol.decode_reply(parts[0], window=self._window, max_bytes=self._max_frame)
        except ProtocolError as exc:
            if exc.request_id is None or exc.request_id not in conn.pending:
                log.warning("dropping a reply from %s: %s", self.address, exc.message)
                return
            reply = Reply(exc.request_id, "error", protocol.error_payload(exc.code, exc.message, exc.detail), 0)
        channel = conn.pending.get(reply.id)
        if channel is None:
            return  # a late answer to a call that already gave up
        try:
            await channel.send(reply)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def close(self) -> None:
        if self._conn is not None:
            self._conn.scope.cancel()
            self._conn = None


class _OneReply:
    """The mailbox of a call that expects exactly one (terminal) reply: lighter than a
    memory channel, with the parts of its interface the client uses."""

    __slots__ = ("_reply", "_done")

    def __init__(self) -> None:
        self._reply: Reply | None = None
        self._done = trio.Event()

    async def send(self, reply: Reply) -> None:
        if self._done.is_set():
            raise trio.ClosedResourceError
        if reply.kind == "event":
            reply = Reply(reply.id, "error", protocol.error_payload(Code.MALFORMED_REPLY, "event for an op that does not stream"), reply.version)
        self._reply = reply
        self._done.set()

    def close(self) -> None:
        self._done.set()

    def __aiter__(self) -> _OneReply:
        return self

    async def __anext__(self) -> Reply:
        await self._done.wait()
        if self._reply is None:
            raise StopAsyncIteration
        reply, self._reply = self._reply, None
        return reply


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
) -> AsyncIterator[Client]:
    async with trio.open_nursery() as nursery:
        client = Client(address, nursery, window=window, max_frame=max_frame, retry=retry)
        try:
            yield client
        finally:
            client.close()
            nursery.cancel_scope.cancel()
