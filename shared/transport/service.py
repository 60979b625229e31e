"""A mesh service: a ROUTER control socket, a handler registry, and the rules around them.

Every frame is decoded by ``shared.protocol`` before a handler sees it; a bad frame is
answered with a typed error and the service keeps serving. A handler that raises answers
``internal_error`` without taking the service down.

Two kinds of handler. A plain ``def`` cannot block, so it runs inline, in whichever task
took the request off the socket, and answers before that task reads the next one: no task,
no cancel scope, no slot. An ``async def`` gets a task of its own under the call's deadline;
the number of those in flight is capped (over the cap: a typed ``busy``). Its events and its
answer wait for room while the caller's pipe is full, within the call's deadline; an inline
answer cannot wait, and a caller whose pipe is full when it is made does not get it.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import trio
import zmq

from shared import protocol
from shared.errors import HermesError
from shared.identity import current_identity
from shared.locks import FileLock
from shared.protocol import HELLO, Code, OpSpec, ProtocolError, RemoteError
from shared.transport import authorized, principals
from shared.transport.curve import authorized_keys, refuse_unsafe_tcp
from shared.transport.server_key import ServerKey, follow
from shared.transport.zmq_trio import Message, open_conduit

log = logging.getLogger(__name__)

# How many ``async def`` handlers a service runs at once unless it says otherwise.
CONCURRENCY = 32
# ``async def`` handlers, or plain ones that run inline and must not block.
Handler = Callable[["Call"], Awaitable[Any]] | Callable[["Call"], Any]


@dataclass
class Call:
    """What a handler is given: the validated arguments and a way to stream events."""

    request_id: str
    op: OpSpec
    args: dict[str, Any]
    deadline: float  # trio clock
    _emit: Callable[[Any], Awaitable[None]] = field(repr=False)
    version: int = protocol.PROTOCOL_VERSION  # the protocol version the caller speaks, to shape the answer

    async def emit(self, event: Any) -> None:
        """Send one event frame to the caller (streaming ops only)."""
        if not self.op.streaming:
            raise RuntimeError(f"op {self.op.name!r} is not a streaming op")
        await self._emit(event)


class _Outlet(Protocol):
    """Where a service's answers go: its socket (a ``Conduit``), or an ``_Outbox``."""

    dropped: int

    def send_nowait(self, parts: Message) -> bool: ...

    async def send(self, parts: Message) -> None: ...


class _Outbox:
    """The answers to one request taken in process (``Service.answer``), in the order sent."""

    def __init__(self) -> None:
        self.dropped = 0
        self.sent: list[Message] = []

    def send_nowait(self, parts: Message) -> bool:
        self.sent.append(parts)
        return True

    async def send(self, parts: Message) -> None:
        self.sent.append(parts)


# The routing id an in-process caller has, as a ROUTER names each peer.
_IN_PROCESS_PEER = b"in-process"


async def _no_events(event: Any) -> None:
    raise AssertionError("only streaming ops emit, and their handlers are async")  # Call.emit checks first


class Service:
    """Serve ops on one ROUTER endpoint.

    At most ``concurrency`` async handlers run at once; up to ``backlog`` more calls wait
    for a slot (within their deadline), and past that a call is answered ``busy`` at once.
    Plain handlers complete as they are called and take no slot.

    ``options`` are extra ``(zmq option, value)`` pairs set on the socket before the bind
    (CURVE keys, for one). With a ZAP domain among them, every request is served only while
    the key its connection was let in with is still authorized (``shared.transport.authorized``);
    the others are answered ``auth_revoked``. A request is run only for a caller its op lets
    call it (``shared.transport.principals``): an ipc caller, or this install's own key, may
    call every op; others are answered ``op_not_granted``.

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
        concurrency: int = CONCURRENCY,
        backlog: int = 256,
        window: tuple[int, int] = protocol.PROTOCOL_WINDOW,
        max_frame: int = protocol.MAX_FRAME_BYTES,
        info: Callable[[], dict[str, Any]] | None = None,
        options: Iterable[tuple[int, int | bytes]] = (),
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
        self._options = tuple(options)
        refuse_unsafe_tcp([address], self._options)  # a tcp:// endpoint is CURVE or nothing
        self._authorized = authorized_keys(self._options)
        self._server_key = ServerKey.of(self._options)
        self._handlers: dict[str, tuple[OpSpec, Handler, bool]] = {}  # op -> spec, handler, inline
        self._specs: dict[str, OpSpec] = {}
        self._calls: set[trio.CancelScope] = set()
        self._idle = trio.Event()
        self._idle.set()
        self._stopping = False
        self._stop_requested = trio.Event()
        self._stopped = trio.Event()
        self._grace = 0.0
        self._conduit: _Outlet | None = None
        self._nursery: trio.Nursery | None = None
        self.add(HELLO, self._hello)

    def add(self, spec: OpSpec, handler: Handler) -> None:
        """Serve ``spec`` with ``handler``: an ``async def``, or a plain ``def`` that runs
        inline and must not block (a streaming op needs an async one, to emit)."""
        if spec.name in self._handlers:
            raise ValueError(f"op {spec.name!r} is already registered")
        inline = not inspect.iscoroutinefunction(handler)
        if inline and spec.streaming:
            raise ValueError(f"op {spec.name!r} streams: its handler must be an async def")
        self._handlers[spec.name] = (spec, handler, inline)
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
    def max_frame(self) -> int:
        return self._max_frame

    @property
    def dropped(self) -> int:
        """Replies and events lost to peers that were gone or not reading."""
        return self._conduit.dropped if self._conduit is not None else 0

    @property
    def in_flight(self) -> int:
        """Calls accepted and not yet answered: running, or waiting for a free slot."""
        return len(self._calls)

    def stop(self, grace: float = 5.0) -> None:
        """Stop taking calls; give the ones in flight ``grace`` seconds, then cancel them.

        Returns at once; ``wait_stopped`` waits until the endpoint is free again.
        """
        self._grace = grace
        self._stopping = True  # from now on, not only once the serving task next runs
        self._stop_requested.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def wait_idle(self) -> None:
        """Until no call is in flight: at once when none is."""
        await self._idle.wait()

    def _hello(self, call: Call) -> dict[str, Any]:
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
            async with trio.open_nursery() as nursery:
                self._nursery = nursery  # before the socket: a request may be dispatched at once
                identified = self._authorized is not None
                async with open_conduit(
                    zmq.ROUTER,
                    self._on_identified if identified else self._on_message,
                    bind=[self.address],
                    options=self._options,
                    max_frame=self._max_frame,
                    close_linger_ms=1000,
                    identified=identified,
                ) as conduit:
                    self._conduit = conduit
                    if self._server_key is not None:  # a rotation of its key takes effect with no restart
                        nursery.start_soon(follow, self._server_key, functools.partial(conduit.rebind, self.address))
                    task_status.started()
                    await self._stop_requested.wait()
                    await self._shutdown()
                nursery.cancel_scope.cancel()
        finally:
            self._conduit = None
            if self._lock is not None:
                self._lock.release()
            self._stopped.set()

    async def answer(self, request: bytes) -> list[Message]:
        """Every message this service sends back for one ``request`` frame, in order (each
        as the caller's DEALER receives it), with no socket: the request is decoded, checked,
        handled and answered by the same code and under the same deadline as one off the
        socket. For an in-process transport (``shared.transport.in_process``)."""
        if self._conduit is not None:
            raise RuntimeError(f"{self.name} is serving its socket")
        outbox = _Outbox()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery, self._conduit = nursery, outbox
                self._on_message([_IN_PROCESS_PEER, request])
        finally:
            self._nursery = self._conduit = None
        return [body for _peer, *body in outbox.sent]  # a ROUTER's routing id never reaches the peer

    async def _shutdown(self) -> None:
        with trio.move_on_after(self._grace):
            await self._idle.wait()
        for scope in list(self._calls):
            scope.cancel()  # each cancelled call answers shutting_down itself
        with trio.move_on_after(1.0):
            await self._idle.wait()
        # The last replies were handed to zmq as they were made; the socket's linger lets them leave.

    def _on_message(self, parts: Message, caller: principals.Principal = principals.OWNER) -> None:
        """One request off the socket, from ``caller``, in whichever task drained it: answered
        here, or handed to a task of its own. Nothing raised here may reach the socket's drain."""
        peer, *body = parts  # ROUTER always puts the peer's routing id first
        try:
            request = self._decode(body)
        except ProtocolError as exc:
            self._reply_error(peer, exc.request_id, exc)
            return
        refusal = principals.judge(caller, self.name, request.op)
        if refusal is not None:
            log.debug("%s: REFUSED %r to client key %r: not granted", self.name, request.op.name, caller.name)
            self._reply_error(peer, request.id, refusal, request.version)
            return
        if self._stopping:
            self._reply_error(
                peer, request.id, RemoteError(Code.SHUTTING_DOWN, f"{self.name} is shutting down"), request.version
            )
            return
        spec, handler, inline = self._handlers[request.op.name]
        budget = request.op.timeout
        if request.deadline_ms is not None:
            budget = min(budget, request.deadline_ms / 1000)
        if inline:
            self._run_inline(peer, request, spec, handler, trio.current_time() + budget)
            return
        if len(self._calls) >= self._concurrency + self._backlog:
            self._reply_error(
                peer,
                request.id,
                RemoteError(
                    Code.BUSY,
                    f"{self.name} is running {self._concurrency} calls with {self._backlog} waiting; try again",
                    detail={"limit": self._concurrency, "backlog": self._backlog},
                ),
                request.version,
            )
            return
        scope = trio.CancelScope(deadline=trio.current_time() + budget)
        if not self._calls:
            self._idle = trio.Event()
        self._calls.add(scope)
        assert self._nursery is not None  # messages arrive only while serving
        self._nursery.start_soon(self._run_call, peer, request, spec, handler, scope, budget)

    def _on_identified(self, parts: Message) -> None:
        """One request off a CURVE socket, whose first part is the routing id's ``zmq.Frame``:
        served as any other while its connection's key is authorized, for the principal the
        key is, else refused."""
        first, body = cast(zmq.Frame, parts[0]), parts[1:]
        peer = first.bytes
        try:
            user = str(first.get("User-Id"))  # a property named by text is text
        except zmq.ZMQError:  # no ZAP answer named this connection
            user = ""
        assert self._authorized is not None  # identified only with a ZAP domain
        refusal = authorized.judge(user, self._authorized.current())
        if refusal is not None:  # a key let in after the set was read is in the directory: look now
            refusal = authorized.judge(user, self._authorized.current(fresh=True))
        if refusal is None:
            self._on_message([peer, *body], self._authorized.principal(user))
            return
        log.debug("%s: REFUSED a request from client key %r: no longer authorized", self.name, authorized.name_of(user))
        self._refuse(peer, body, refusal)

    def _refuse(self, peer: bytes, body: list[bytes], error: HermesError) -> None:
        """Answer ``error`` to a request that is not served, under its id and in its version
        where they can be read: a client matches an answer to its call by id."""
        try:
            request = self._decode(body)
        except ProtocolError as exc:
            self._reply_error(peer, exc.request_id, error)
            return
        self._reply_error(peer, request.id, error, request.version)

    def _decode(self, body: list[bytes]) -> protocol.Request:
        """The request ``body`` holds; ``ProtocolError`` naming what is wrong with it."""
        raw = protocol.one_frame(body, kind="request")
        return protocol.decode_request(raw, self._specs, window=self._window, max_bytes=self._max_frame)

    def _run_inline(
        self, peer: bytes, request: protocol.Request, spec: OpSpec, handler: Handler, deadline: float
    ) -> None:
        call = Call(request.id, spec, request.args, deadline, _no_events, request.version)
        try:
            reply = self._result_reply(request, spec, handler(call))
        except Exception as exc:
            reply = self._error_reply(request, spec, exc)
        self._send(peer, reply)

    async def _run_call(
        self,
        peer: bytes,
        request: protocol.Request,
        spec: OpSpec,
        handler: Handler,
        scope: trio.CancelScope,
        budget: float,
    ) -> None:
        version = request.version  # answer in the version the caller speaks
        conduit = self._conduit
        assert conduit is not None  # calls run only while serving

        async def emit(event: Any) -> None:
            await self._send_paced(conduit, peer, protocol.encode_reply(request.id, "event", event, version=version))

        call = Call(request.id, spec, request.args, scope.deadline, emit, version)
        try:
            with scope:
                try:
                    await self._slots.acquire()  # waiting for a slot counts against the deadline
                    try:
                        result = await handler(call)
                    finally:
                        self._slots.release()
                    reply = self._result_reply(request, spec, result)
                except Exception as exc:
                    reply = self._error_reply(request, spec, exc)
                # Paced like the events: a stream's last events may have just filled the pipe.
                await self._send_paced(conduit, peer, reply)
            if scope.cancelled_caught:  # nothing was sent: the answer is this error, or nothing
                if self._stopping:
                    error = RemoteError(Code.SHUTTING_DOWN, f"{self.name} is shutting down")
                else:
                    error = RemoteError(
                        Code.DEADLINE_EXCEEDED, f"op {spec.name!r} ran past its deadline", detail={"seconds": budget}
                    )
                self._send(peer, protocol.encode_error(request.id, error, version=version))
        finally:
            self._calls.discard(scope)
            if not self._calls:
                self._idle.set()

    def _result_reply(self, request: protocol.Request, spec: OpSpec, result: Any) -> bytes:
        reply = protocol.encode_reply(request.id, "result", result, version=request.version)
        if len(reply) > self._max_frame:
            raise RemoteError(Code.FRAME_TOO_LARGE, f"the result of {spec.name!r} is over the frame limit")
        return reply

    def _error_reply(self, request: protocol.Request, spec: OpSpec, exc: Exception) -> bytes:
        if not isinstance(exc, HermesError):
            log.error("%s: op %r failed", self.name, spec.name, exc_info=exc)
            exc = RemoteError(Code.INTERNAL_ERROR, f"{self.name} failed to run {spec.name!r}")
        return protocol.encode_error(request.id, exc, version=request.version)

    def _reply_error(self, peer: bytes, request_id: str | None, error: HermesError, version: int | None = None) -> None:
        """An error answered before a handler ran: in the caller's version when it was read, else
        in the newest this service speaks (a refused version gets the window it missed)."""
        self._send(
            peer, protocol.encode_error(request_id, error, version=self._window[1] if version is None else version)
        )

    async def _send_paced(self, conduit: _Outlet, peer: bytes, payload: bytes) -> None:
        """Send to ``peer`` from a call's task, waiting while its pipe is full: a caller
        that reads late slows the call down (within its deadline) instead of losing frames."""
        try:
            await conduit.send([peer, payload])
        except trio.ClosedResourceError:
            log.debug("%s: socket closed before a frame to a peer could be sent", self.name)

    def _send(self, peer: bytes, payload: bytes) -> None:
        """Send to ``peer`` without waiting: let go if its pipe is full (an inline answer runs
        in the task draining the socket, and a deadline's answer has no time left to wait)."""
        if self._conduit is None:
            return
        try:
            self._conduit.send_nowait([peer, payload])
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
