"""Client-side rules shared by the async and the synchronous client.

When a call may be tried again (only ops marked idempotent: a timeout does not tell whether
the service ran the call), how long to wait first, how request ids are made, and what a
client does with a message that is not one frame.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from shared import protocol
from shared.protocol import Code, OpSpec, ProtocolError, RemoteError

# Codes after which a second attempt of an idempotent op can succeed.
RETRYABLE = frozenset(
    {Code.TIMEOUT, Code.UNAVAILABLE, Code.CONNECTION_RESET, Code.CONNECTION_LOST, Code.BUSY, Code.SHUTTING_DOWN}
)

# How long a client waits past the deadline it sent, for the service's own
# ``deadline_exceeded`` answer to arrive.
REPLY_GRACE = 0.5


class RetryPolicy(NamedTuple):
    retries: int = 2
    backoff: float = 0.05
    backoff_cap: float = 1.0

    def attempts(self, spec: OpSpec) -> int:
        return 1 + (self.retries if spec.idempotent else 0)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt number ``attempt + 1`` (``attempt`` counts from 0)."""
        return min(self.backoff_cap, self.backoff * (2**attempt))

    def should_retry(self, spec: OpSpec, code: str, attempt: int) -> bool:
        return spec.idempotent and code in RETRYABLE and attempt + 1 < self.attempts(spec)


DEFAULT_RETRY = RetryPolicy()
NO_RETRY = RetryPolicy(retries=0)


def request_ids() -> Callable[[], str]:
    """Ids unique across processes talking to one service: a random prefix and a counter."""
    prefix = os.urandom(4).hex()  # as secrets makes it, without its imports: a CLI call starts fast
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter)}"


def reply_frame(parts: Sequence[bytes], address: str) -> bytes | None:
    """The reply frame of a message from ``address``; None for a message that is not exactly
    one frame (``protocol.one_frame``), which a client drops and logs: nobody is there to answer."""
    try:
        return protocol.one_frame(parts, kind="reply")
    except ProtocolError as exc:
        import logging  # a broken peer is rare; a CLI call does not load logging for it

        logging.getLogger(__name__).warning("dropping a %d-part message from %s: %s", len(parts), address, exc.message)
        return None


def ipc_unreachable(address: str) -> bool:
    """True when ``address`` is an ipc endpoint that nothing listens on: no socket file, or
    one left by a dead service (a connect is refused). A client says so at once instead of
    waiting out its timeout. The probe is a non-blocking connect that never waits."""
    if not address.startswith("ipc://"):
        return False
    path = address[len("ipc://") :]
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.setblocking(False)
        return probe.connect_ex(path) in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK)
    except OSError:  # e.g. a path over the sun_path limit: let zmq report it
        return False
    finally:
        probe.close()


def dropped(address: str, op: str) -> RemoteError:
    """What a call in flight ends with when its connection drops (the socket monitor's
    ``EVENT_DISCONNECTED``), once every answer that came before is read.

    Over ipc the service is a process on this host, whose socket the kernel closes when it
    exits: the service went away (``connection_reset``). Over TCP the client cannot tell a
    service that exited from a host or link that went away, which heartbeats find
    (``shared.transport.curve``): the connection was lost (``connection_lost``). Both are
    ``RETRYABLE`` and in ``protocol.UNANSWERED``, so a caller that treats a vanished service
    one way treats both alike."""
    if address.startswith("tcp://"):
        return RemoteError(
            Code.CONNECTION_LOST,
            f"the connection to {address} was lost before {op!r} was answered",
            detail={"op": op},
        )
    return RemoteError(
        Code.CONNECTION_RESET, f"the service at {address} went away before answering {op!r}", detail={"op": op}
    )


# The codes of a refused handshake, or of a connection whose key was revoked since: a service
# is there, but will not (or cannot) be asked.
HANDSHAKE_REFUSALS = frozenset({Code.AUTH_FAILED, Code.AUTH_REVOKED, Code.SERVER_KEY_MISMATCH, Code.HANDSHAKE_FAILED})


# What ``answer_to`` makes of an event, a stray answer to another request, or a dropped
# message: the caller keeps waiting.
NO_ANSWER = object()


def answer_to(parts: Sequence[bytes], address: str, request_id: str, window: tuple[int, int], max_frame: int) -> Any:
    """What one message from ``address`` says of the call ``request_id``, asked once: its result,
    the ``RemoteError`` it ended with, or ``NO_ANSWER``."""
    raw = reply_frame(parts, address)
    if raw is None:
        return NO_ANSWER
    try:
        reply = protocol.decode_reply(raw, window=window, max_bytes=max_frame)
    except ProtocolError as exc:
        return RemoteError(exc.code, exc.message, detail=exc.detail)
    if reply.id != request_id or reply.kind == "event":
        return NO_ANSWER
    try:
        return reply.raise_for_error()
    except RemoteError as exc:
        return exc


def encode_call(
    request_id: str, spec: OpSpec, args: dict, budget: float, max_frame: int, window: tuple[int, int]
) -> bytes:
    """The request frame, in the newest version the client speaks and carrying its deadline;
    an oversize request is refused here, before anything is sent."""
    raw = protocol.encode_request(
        request_id, spec.name, args, deadline_ms=max(1, int(budget * 1000)), version=window[1]
    )
    if len(raw) > max_frame:
        raise RemoteError(
            Code.FRAME_TOO_LARGE,
            f"request of {len(raw)} bytes is over the {max_frame}-byte limit",
            detail={"size": len(raw), "limit": max_frame},
        )
    return raw
