"""A mesh service: a ROUTER control socket, a handler registry, and the rules around them.

Every frame is decoded by ``shared.protocol`` before a handler sees it; a bad frame is
answered with a typed error and the service keeps serving. Each call runs under its own
deadline, the number of calls in flight is capped (over the cap: a typed ``busy``), and a
handler that raises answers ``internal_error`` without taking the service down.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import zmq

from shared import protocol
from shared.errors import HermesError
from shared.identity import current_identity
from shared.locks import FileLock
from shared.protocol import Code, OpSpec, ProtocolError, RemoteError
from shared.zmq_trio import Socket, drain_output, open_socket

log = logging.getLogger(__name__)

HELLO = OpSpec("hello", idempotent=True, timeout=5.0)

Handler = Callable[["Call"], Awaitable[Any]]


@dataclass
class Call:
    """What a handler is given: the validated arguments and a way to stream events."""

    request_id: str
    op: OpSpec
    args: dict[str, Any]
    deadline: float  # trio clock
    _emit: Callable[[Any], Awaitable[None]] = field(repr=False)

    async def emit(self, event: Any) -> None:
        """Send one event frame to the caller (streaming ops only)."""
        if not self.op.streaming:
            raise RuntimeError(f"op {self.op.name!r} is not a streaming op")
        await self._emit(event)


class Service:
    """Serve ops on one ROUTER endpoint.

    At most ``concurrency`` handlers run at once; up to ``backlog`` more calls wait for a
    slot (within their deadline), and past that a call is answered ``busy`` at once.

    ``ipc://`` endpoints need their lock: binding an ipc path that another live service
    holds would silently steal it, so the lock is taken before the bind and a held lock
    refuses the start with ``endpoint_busy``. Pass ``lock_path`` to have ``serve`` take and
    release it, or ``lock``, a ``FileLock`` the caller already holds (a process that must
    own its endpoint before it touches any of its files) and releases itself.
    """

    def __init__(
        self,
        name: str,
        address: str,
        *,
        lock_path: Path | None = None,
        lock: FileLock | None = None,
        concurrency: int = 32,
        backlog: int = 256,
        window: tuple[int, int] = protocol.PROTOCOL_WINDOW,
        max_frame: int = protocol.MAX_FRAME_BYTES,
        info: Callable[[], dict[str, Any]] | None = None,
        options: Iterable[tuple[int, Any]] = (),
    ):
        if address.startswith("ipc://") and lock_path is None and lock is None:
            raise ValueError("an ipc:// endpoint needs a lock file")
        if lock is not None and not lock.held:
            raise ValueError("a lock passed in must already be held")
        self.name = name
        self.address = address
        self._lock = FileLock(lock_path) if (lock is None and lock_path is not None) else None
        self._concurrency = concurrency
        self._backlog = backlog
        self._slots = _Slots(concurrency)
        self._window = window
        self._max_frame = max_frame
        self._info = info
        self._options = list(options)  # set before the bind: CURVE on tcp:// endpoints
        self._handlers: dict[str, tuple[OpSpec, Handler]] = {}
        self._specs: dict[str, OpSpec] = {}
        self._calls: set[trio.CancelScope] = set()
        self._idle = trio.Event()
        self._idle.set()
        self._stopping = False
        self._stop_requested = trio.Event()
        self._stopped = trio.Event()
        self._grace = 0.0
        self.add(HELLO, self._hello)

    def add(self, spec: OpSpec, handler: Handler) -> None:
        if spec.name in self._handlers:
            raise ValueError(f"op {spec.name!r} is already registered")
        self._handlers[spec.name] = (spec, handler)
        self._specs[spec.name] = spec

    def handles(self, spec: OpSpec) -> Callable[[Handler], Handler]:
        """Decorator form of ``add``."""

        def register(handler: Handler) -> Handler:
            self.add(spec, handler)
            return handler

        return register

    @property
    def window(self) -> tuple[int, int]:
        return self._window

    @property
    def in_flight(self) -> int:
        """Calls accepted and not yet answered: running, or waiting for a free slot."""
        return len(self._calls)

    def stop(self, grace: float = 5.0) -> None:
        """Stop taking calls; give the ones in flight ``grace`` seconds, then cancel them.

        Returns at once; ``wait_stopped`` waits until the endpoint is free again.
        """
        self._grace = grace
        self._stop_requested.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def _hello(self, call: Call) -> dict[str, Any]:
        me = current_identity()
        info = {
            "service": self.name,
            "protocol": {"min": self._window[0], "max": self._window[1]},
            "pid": me.pid,
            "start_time": me.start_time,
        }
        if self._info is not None:
            info.update(self._info())
        return info

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until ``stop()`` is called or the surrounding scope is cancelled.

        ``task_status.started()`` fires once the endpoint is bound, so ``nursery.start``
        returns only when clients can connect.
        """
        if self._lock is not None:
            self._lock.acquire()
        try:
            async with open_socket(
                zmq.ROUTER,
                bind=[self.address],
                max_frame=self._max_frame,
                close_linger_ms=1000,
                options=self._options,
            ) as sock:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._receive_loop, sock, nursery)
                    task_status.started()
                    await self._stop_requested.wait()
                    await self._shutdown(sock, nursery)
        finally:
            if self._lock is not None:
                self._lock.release()
            self._stopped.set()

    async def _shutdown(self, sock: Socket, nursery: trio.Nursery) -> None:
        self._stopping = True
        with trio.move_on_after(self._grace):
            await self._idle.wait()
        for scope in list(self._calls):
            scope.cancel()  # each cancelled call answers shutting_down itself
        with trio.move_on_after(1.0):
            await self._idle.wait()
        await drain_output(sock, timeout=1.0)
        nursery.cancel_scope.cancel()

    async def _receive_loop(self, sock: Socket, nursery: trio.Nursery) -> None:
        async for parts in sock:
            peer, *body = parts  # ROUTER always puts the peer's routing id first
            try:
                raw = protocol.one_frame(body, kind="request")
                request = protocol.decode_request(raw, self._specs, window=self._window, max_bytes=self._max_frame)
            except ProtocolError as exc:
                await self._reply_error(sock, peer, exc.request_id, exc)
                continue
            if self._stopping:
                await self._reply_error(
                    sock, peer, request.id, RemoteError(Code.SHUTTING_DOWN, f"{self.name} is shutting down")
                )
                continue
            if len(self._calls) >= self._concurrency + self._backlog:
                await self._reply_error(
                    sock,
                    peer,
                    request.id,
                    RemoteError(
                        Code.BUSY,
                        f"{self.name} is running {self._concurrency} calls with {self._backlog} waiting; try again",
                        detail={"limit": self._concurrency, "backlog": self._backlog},
                    ),
                )
                continue
            budget = request.op.timeout
            if request.deadline_ms is not None:
                budget = min(budget, request.deadline_ms / 1000)
            scope = trio.CancelScope(deadline=trio.current_time() + budget)
            self._calls.add(scope)
            self._idle = trio.Event()
            nursery.start_soon(self._run_call, sock, peer, request, scope, budget)

    async def _run_call(
        self, sock: Socket, peer: bytes, request: protocol.Request, scope: trio.CancelScope, budget: float
    ) -> None:
        spec, handler = self._handlers[request.op.name]
        version = request.version  # answer in the version the caller speaks

        async def emit(event: Any) -> None:
            await self._send(sock, peer, protocol.encode_reply(request.id, "event", event, version=version))

        call = Call(request.id, spec, request.args, scope.deadline, emit)
        reply: bytes | None = None
        try:
            with scope:
                try:
                    await self._slots.acquire()  # waiting for a slot counts against the deadline
                    try:
                        result = await handler(call)
                    finally:
                        self._slots.release()
                    reply = protocol.encode_reply(request.id, "result", result, version=version)
                    if len(reply) > self._max_frame:
                        raise RemoteError(Code.FRAME_TOO_LARGE, f"the result of {spec.name!r} is over the frame limit")
                except HermesError as exc:
                    reply = protocol.encode_error(request.id, exc, version=version)
                except Exception:
                    log.exception("%s: op %r failed", self.name, spec.name)
                    reply = protocol.encode_error(
                        request.id,
                        RemoteError(Code.INTERNAL_ERROR, f"{self.name} failed to run {spec.name!r}"),
                        version=version,
                    )
            if scope.cancelled_caught:
                if self._stopping:
                    error = RemoteError(Code.SHUTTING_DOWN, f"{self.name} is shutting down")
                else:
                    error = RemoteError(
                        Code.DEADLINE_EXCEEDED, f"op {spec.name!r} ran past its deadline", detail={"seconds": budget}
                    )
                reply = protocol.encode_error(request.id, error, version=version)
            if reply is not None:
                await self._send(sock, peer, reply)
        finally:
            self._calls.discard(scope)
            if not self._calls:
                self._idle.set()

    async def _reply_error(self, sock: Socket, peer: bytes, request_id: str | None, error: HermesError) -> None:
        await self._send(sock, peer, protocol.encode_error(request_id, error))

    async def _send(self, sock: Socket, peer: bytes, payload: bytes) -> None:
        try:
            await sock.send([peer, payload])
        except trio.ClosedResourceError:
            log.debug("%s: socket closed before a reply to a peer could be sent", self.name)


class _Slots:
    """A counting semaphore that costs almost nothing while slots are free (trio's
    ``CapacityLimiter`` tracks borrowers and costs more than a whole echo call)."""

    def __init__(self, total: int):
        self._free = total
        self._waiting = trio.lowlevel.ParkingLot()

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        await self._waiting.park()  # woken holding the slot its releaser handed over

    def release(self) -> None:
        if self._waiting:
            self._waiting.unpark()
        else:
            self._free += 1
