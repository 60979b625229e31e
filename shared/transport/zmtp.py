"""One call to many services over ``ipc://``, without pyzmq: a minimal blocking ZMTP client.

``hermes gateway status`` asks every profile's gateway one STATUS call, and importing pyzmq
costs more than the whole exchange. So for that one case (a DEALER asking ROUTER services over
``ipc://``, mechanism NULL, no CURVE, one call per connection) this module speaks ZMTP 3.0
(rfc.zeromq.org spec 23) itself, over non-blocking AF_UNIX sockets and one selector: every
request goes out at once, and the answers are taken within one deadline. Everything else
(TCP, CURVE, connections kept between calls) uses pyzmq.

The wire: a 64-byte greeting each way (signature, version, mechanism), then a READY command
each way naming its socket type, then messages of frames. A frame is a flags byte (MORE,
LONG, COMMAND), a size (1 byte, or 8 with LONG) and the body. Every way a peer can break it
is a ``ZmtpViolation`` naming what was wrong; a peer that says nothing is bounded by the
deadline.
"""

from __future__ import annotations

import errno
import selectors
import socket
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from shared import protocol
from shared.errors import TransportError
from shared.protocol import Code, OpSpec, RemoteError
from shared.transport.call_rules import NO_ANSWER, REPLY_GRACE, answer_to, encode_call, request_ids

MORE, LONG, COMMAND = 0x01, 0x02, 0x04
GREETING_SIZE = 64
MECHANISM = b"NULL".ljust(20, b"\0")
# Signature, version 3.0 (libzmq, at 3.1, takes a 3.0 peer), mechanism, as-server 0, filler.
GREETING = b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + MECHANISM + b"\0" + bytes(31)
# The most frames one message may have: a reply is one; more is a peer we do not understand.
MAX_PARTS = 64
_READ_SIZE = 1 << 16


class ZmtpViolation(TransportError):
    """A peer broke ZMTP (or closed before answering). ``detail["fault"]`` says what it broke:
    ``signature``, ``version``, ``mechanism``, ``handshake``, ``socket_type``, ``frame``,
    ``frame_too_large``, ``command`` or ``closed``."""

    code = "zmtp_violation"

    def __init__(self, fault: str, message: str):
        super().__init__(message, detail={"fault": fault})
        self.fault = fault


# --- the wire, with no I/O -------------------------------------------------------------------


def encode_frames(parts: Sequence[bytes], *, command: bool = False) -> bytes:
    """The frames of one message (or, with ``command``, one command: a single frame)."""
    out = bytearray()
    for index, part in enumerate(parts):
        flags = (COMMAND if command else 0) | (MORE if index < len(parts) - 1 else 0)
        if len(part) > 255:
            out += bytes([flags | LONG]) + len(part).to_bytes(8, "big")
        else:
            out += bytes([flags, len(part)])
        out += part
    return bytes(out)


def ready_command(properties: Mapping[str, bytes]) -> bytes:
    """A READY command frame carrying ``properties`` (name -> value)."""
    body = bytearray(b"\x05READY")
    for name, value in properties.items():
        raw = name.encode("ascii")
        body += bytes([len(raw)]) + raw + len(value).to_bytes(4, "big") + value
    return encode_frames([bytes(body)], command=True)


def _check_greeting(head: bytes) -> None:
    """Check as much of the peer's greeting as has arrived: a wrong byte fails at once."""
    if head[:1] and head[0] != 0xFF or len(head) > 9 and head[9] != 0x7F:
        raise ZmtpViolation("signature", f"the peer's greeting does not start with the ZMTP signature: {head[:10]!r}")
    if len(head) > 10 and head[10] < 3:
        raise ZmtpViolation("version", f"the peer speaks ZMTP {head[10]}, not 3 or later")
    if len(head) >= 32 and head[12:32] != MECHANISM:
        mechanism = head[12:32].rstrip(b"\0").decode("ascii", "replace")
        raise ZmtpViolation("mechanism", f"the peer's security mechanism is {mechanism!r}, not NULL")


def _command(body: bytes) -> tuple[bytes, bytes]:
    """(name, data) of a command frame's body."""
    if not body or len(body) < 1 + body[0]:
        raise ZmtpViolation("handshake", "the peer sent a command with no whole name")
    return body[1 : 1 + body[0]], body[1 + body[0] :]


def _properties(data: bytes) -> dict[str, bytes]:
    """The metadata of a READY command: name (1-byte size) and value (4-byte size) pairs."""
    found: dict[str, bytes] = {}
    at = 0
    while at < len(data):
        end = at + 1 + data[at]
        if end + 4 > len(data):
            raise ZmtpViolation("handshake", "the peer's READY has a property cut short")
        size = int.from_bytes(data[end : end + 4], "big")
        if end + 4 + size > len(data):
            raise ZmtpViolation("handshake", "the peer's READY has a property value cut short")
        found[data[at + 1 : end].decode("ascii", "replace").lower()] = data[end + 4 : end + 4 + size]
        at = end + 4 + size
    return found


def _check_ready(body: bytes, expected_type: bytes) -> None:
    name, data = _command(body)
    if name == b"ERROR":
        reason = data[1 : 1 + data[0]].decode("utf-8", "replace") if data else ""
        raise ZmtpViolation("handshake", f"the peer refused the handshake: {reason!r}")
    if name != b"READY":
        raise ZmtpViolation("handshake", f"the peer sent {name!r} where READY was due")
    said = _properties(data).get("socket-type")
    if said is None:
        raise ZmtpViolation("socket_type", "the peer's READY names no Socket-Type")
    if said != expected_type:
        raise ZmtpViolation("socket_type", f"the peer is a {said!r} socket, not a {expected_type!r}")


class Session:
    """One DEALER connection to a ROUTER, as bytes: ``outgoing`` is what is due to be sent,
    and ``feed`` takes the peer's bytes as they come and returns the whole messages they
    complete. The ``request`` (a message's frames) is due once the peer's READY came: libzmq
    takes a message that arrives with the READY, before its own READY is out, for a second
    handshake command. ``max_frame`` caps each frame and each message, as libzmq's MAXMSGSIZE
    does."""

    __slots__ = ("max_frame", "request", "outgoing", "_buffer", "_stage", "_parts", "_size")

    def __init__(self, max_frame: int, request: bytes):
        self.max_frame = max_frame
        self.request = request
        self.outgoing = bytearray(GREETING + ready_command({"Socket-Type": b"DEALER"}))
        self._buffer = bytearray()
        self._stage = "greeting"  # then "ready", then "messages"
        self._parts: list[bytes] = []
        self._size = 0  # of the message read so far

    def feed(self, data: bytes) -> list[list[bytes]]:
        self._buffer += data
        if self._stage == "greeting":
            _check_greeting(bytes(self._buffer[:GREETING_SIZE]))
            if len(self._buffer) < GREETING_SIZE:
                return []
            del self._buffer[:GREETING_SIZE]
            self._stage = "ready"
        messages = []
        for flags, body in self._frames():
            if self._stage == "ready":
                if not flags & COMMAND:
                    raise ZmtpViolation("handshake", "the peer sent a message where READY was due")
                _check_ready(body, b"ROUTER")
                self._stage = "messages"
                self.outgoing += self.request
            elif flags & COMMAND:
                raise ZmtpViolation(
                    "command", f"the peer sent the command {_command(body)[0]!r} where a message was due"
                )
            else:
                messages += self._take_part(flags, body)
        return messages

    def closed(self) -> ZmtpViolation:
        """The error of a peer that closed the connection now."""
        if self._stage == "greeting":
            return ZmtpViolation("signature", f"the peer closed after {len(self._buffer)} bytes of its greeting")
        return ZmtpViolation("closed", "the peer closed the connection before answering")

    def _take_part(self, flags: int, body: bytes) -> list[list[bytes]]:
        self._parts.append(body)
        self._size += len(body)
        if self._size > self.max_frame:
            raise ZmtpViolation("frame_too_large", f"the peer's message is over the {self.max_frame}-byte limit")
        if len(self._parts) > MAX_PARTS:
            raise ZmtpViolation("frame", f"the peer's message has more than {MAX_PARTS} frames")
        if flags & MORE:
            return []
        message, self._parts, self._size = self._parts, [], 0
        return [message]

    def _frames(self) -> Iterable[tuple[int, bytes]]:
        """(flags, body) of each whole frame in the buffer, taken out of it."""
        while self._buffer:
            flags = self._buffer[0]
            if flags & ~(MORE | LONG | COMMAND) or flags & COMMAND and flags & MORE:
                raise ZmtpViolation("frame", f"the peer sent a frame with flags {flags:#04x}")
            header = 9 if flags & LONG else 2
            if len(self._buffer) < header:
                return
            size = int.from_bytes(self._buffer[1:header], "big")
            if size > self.max_frame:
                raise ZmtpViolation(
                    "frame_too_large", f"the peer's frame of {size} bytes is over the {self.max_frame}-byte limit"
                )
            if len(self._buffer) < header + size:
                return
            body = bytes(self._buffer[header : header + size])
            del self._buffer[: header + size]
            yield flags, body


# --- many calls at once ----------------------------------------------------------------------


class _Call(NamedTuple):
    address: str
    request_id: str
    sock: socket.socket
    session: Session


def call_all_ipc(
    addresses: list[str],
    spec: OpSpec,
    args: Mapping[str, Any] | None = None,
    *,
    timeout: float,
    window: tuple[int, int] = protocol.PROTOCOL_WINDOW,
    max_frame: int = protocol.MAX_FRAME_BYTES,
    peers: dict[str, int] | None = None,
) -> dict[str, Any]:
    """``shared.transport.sync_client.call_all`` for ``ipc://`` addresses, with no socket
    options and no pool: each address maps to its result, to the ``RemoteError`` it ended
    with, or to the ``ZmtpViolation`` its peer committed. No retries.

    ``peers`` is given each connected address's peer pid as the kernel tells it here
    (``SO_PEERCRED``: the process that listens there), where the kernel tells one."""
    next_id = request_ids()
    outcomes: dict[str, Any] = {}
    selector = selectors.DefaultSelector()
    # Closed once every call has its answer: a close wakes its gateway to tear the connection
    # down, and on a busy machine that work would delay the gateways still to answer.
    answered: list[socket.socket] = []
    try:
        for address in addresses:
            try:
                call = _open(address, next_id(), spec, args, timeout, window, max_frame)
            except RemoteError as exc:
                outcomes[address] = exc
                continue
            selector.register(call.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, call)
            if peers is not None and (pid := peer_pid(call.sock)) is not None:
                peers[address] = pid
        deadline = time.monotonic() + timeout + REPLY_GRACE
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for key, events in selector.select(remaining):
                call = key.data
                try:
                    answer = _step(call, events, selector, window, max_frame)
                except ZmtpViolation as exc:
                    answer = exc
                if answer is not NO_ANSWER:
                    outcomes[call.address] = answer
                    selector.unregister(call.sock)
                    answered.append(call.sock)
        for key in list(selector.get_map().values()):
            address = key.data.address
            outcomes[address] = RemoteError(Code.TIMEOUT, f"no answer to {spec.name!r} from {address} in time")
    finally:
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        for sock in answered:
            sock.close()
        selector.close()
    return outcomes


_PEERCRED = getattr(socket, "SO_PEERCRED", None)  # Linux
_UCRED = struct.Struct("3i")  # pid, uid, gid


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end of a connected AF_UNIX socket, as this pid
    namespace sees it (0: not seen from here); None where the kernel does not say."""
    if _PEERCRED is None:
        return None
    try:
        pid, _, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, _PEERCRED, _UCRED.size))
    except OSError:
        return None
    return pid


def _open(
    address: str,
    request_id: str,
    spec: OpSpec,
    args: Mapping[str, Any] | None,
    timeout: float,
    window: tuple[int, int],
    max_frame: int,
) -> _Call:
    """A connection to ``address`` with the call queued on it; a ``RemoteError`` when nobody
    can be asked there."""
    raw = encode_call(request_id, spec, dict(args or {}), timeout, max_frame, window)
    if not address.startswith("ipc://"):
        raise RemoteError(Code.UNAVAILABLE, f"{address} is not an ipc:// address")
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:  # out of file descriptors, say
        raise RemoteError(Code.UNAVAILABLE, f"no socket to ask {address} with: {exc.strerror}") from None
    sock.setblocking(False)
    try:
        failed = sock.connect_ex(address[len("ipc://") :])
    except OSError as exc:  # e.g. a path over the sun_path limit
        failed = exc.errno or errno.EINVAL
    # A listening AF_UNIX socket takes a connection at once or not at all (EAGAIN: its backlog
    # is full: a service that is not accepting).
    if failed:
        sock.close()
        raise RemoteError(
            Code.UNAVAILABLE, f"no service is listening at {address} ({errno.errorcode.get(failed, failed)})"
        )
    return _Call(address, request_id, sock, Session(max_frame * protocol.TRANSPORT_SIZE_FACTOR, encode_frames([raw])))


def _last_words(call: _Call, window: tuple[int, int], max_frame: int) -> Any:
    """The answer among what a peer that closed had sent before it did (a send can fail on the
    close before the bytes waiting to be read are read); else the error its close makes."""
    while True:
        try:
            data = call.sock.recv(_READ_SIZE)
        except OSError:  # nothing more waiting, or the reset itself
            break
        if not data:
            break
        for message in call.session.feed(data):
            answer = answer_to(message, call.address, call.request_id, window, max_frame)
            if answer is not NO_ANSWER:
                return answer
    raise call.session.closed()


def _step(call: _Call, events: int, selector: selectors.BaseSelector, window: tuple[int, int], max_frame: int) -> Any:
    """Send what is due and read what came: the call's answer, or ``NO_ANSWER`` yet."""
    outgoing = call.session.outgoing
    try:
        if events & selectors.EVENT_WRITE and outgoing:
            del outgoing[: call.sock.send(outgoing)]
        data = call.sock.recv(_READ_SIZE) if events & selectors.EVENT_READ else None
    except (BlockingIOError, InterruptedError):
        data = None
    except OSError:  # reset, or a broken pipe: the peer closed its end
        return _last_words(call, window, max_frame)
    if data == b"":
        raise call.session.closed()
    answer = NO_ANSWER
    for message in call.session.feed(data or b""):
        answer = answer_to(message, call.address, call.request_id, window, max_frame)
        if answer is not NO_ANSWER:
            break
    wanted = selectors.EVENT_READ | (selectors.EVENT_WRITE if outgoing else 0)
    if answer is NO_ANSWER and wanted != selector.get_key(call.sock).events:
        selector.modify(call.sock, wanted, call)
    return answer
