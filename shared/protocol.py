"""The mesh's wire protocol: one definition for every service and the CLI.

No I/O here. Bytes go in, validated frames or typed errors come out, so every rule is
unit-tested without sockets.

A request is one msgpack map::

    {"v": 1, "id": "c1f3-7", "op": "status", "args": {...}, "deadline_ms": 5000}

and every reply carries the request's ``id`` and exactly one of::

    {"event": ...}                                 # zero or more, streaming ops only
    {"result": ...}                                # terminal
    {"error": {"code": ..., "message": ..., "detail": {...}}}   # terminal

Nothing in a frame is trusted: size, encoding, shape, version, op and every argument
are checked before a handler sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from types import MappingProxyType
from typing import Any, NamedTuple

import msgpack

from shared.errors import HermesError, TransportError

PROTOCOL_VERSION = 1
PROTOCOL_MIN = 1
PROTOCOL_WINDOW = (PROTOCOL_MIN, PROTOCOL_VERSION)

# The application cap. The transport cap (ZMQ MAXMSGSIZE) is set higher, to
# ``TRANSPORT_SIZE_FACTOR`` times this, so a frame a little over the cap still reaches the
# service and gets a typed ``frame_too_large`` answer; a frame over the transport cap makes
# libzmq drop the connection without the service buffering it.
MAX_FRAME_BYTES = 1 << 20
TRANSPORT_SIZE_FACTOR = 2

MAX_ID_LENGTH = 64
MAX_OP_LENGTH = 64
MAX_DEADLINE_MS = 24 * 3600 * 1000

_ENVELOPE_KEYS = frozenset({"v", "id", "op", "args", "deadline_ms"})
_REPLY_KINDS = ("event", "result", "error")


class Code:
    """Stable error codes. Scripts match on these; never rename one."""

    MALFORMED_FRAME = "malformed_frame"
    NOT_A_MAP = "not_a_map"
    FRAME_TOO_LARGE = "frame_too_large"
    MISSING_FIELD = "missing_field"
    INVALID_FIELD = "invalid_field"
    UNKNOWN_FIELD = "unknown_field"
    UNKNOWN_OP = "unknown_op"
    PROTOCOL_INCOMPATIBLE = "protocol_incompatible"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    BUSY = "busy"
    SHUTTING_DOWN = "shutting_down"
    AUTH_REVOKED = "auth_revoked"  # a CURVE service: the key this connection was let in with is revoked since
    OP_NOT_GRANTED = "op_not_granted"  # a CURVE service: this connection's key may not call this op
    INTERNAL_ERROR = HermesError.code
    # Raised on the client side only.
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    CONNECTION_RESET = "connection_reset"  # an ipc service went away with the call in flight
    CONNECTION_LOST = "connection_lost"  # a TCP connection dropped with the call in flight
    MALFORMED_REPLY = "malformed_reply"
    AUTH_FAILED = "auth_failed"  # the service's ZAP handler refused our CURVE key
    SERVER_KEY_MISMATCH = "server_key_mismatch"  # the service does not hold the key we trust
    HANDSHAKE_FAILED = "handshake_failed"  # the peer broke the ZMTP/CURVE handshake


# A service that cannot take a call at all (as opposed to one that refuses it): the client's own codes.
UNANSWERED = frozenset({Code.TIMEOUT, Code.UNAVAILABLE, Code.CONNECTION_RESET, Code.CONNECTION_LOST})


class ProtocolError(TransportError):
    """A frame broke a rule of the protocol. ``request_id`` is set when it could be read."""

    def __init__(self, code: str, message: str, *, detail: dict | None = None, request_id: str | None = None):
        super().__init__(message, detail=detail)
        self.code = code
        self.request_id = request_id


class RemoteError(TransportError):
    """A typed error answered by a service (or raised by the client for its own faults)."""

    def __init__(self, code: str, message: str, *, detail: dict | None = None):
        super().__init__(message, detail=detail)
        self.code = code


# --- argument schemas ------------------------------------------------------------------


class Field(NamedTuple):
    """One argument of an op: its type and bounds.

    ``kind`` is one of str, int, float, bool, bytes, list, dict (a tuple allows several).
    ``int`` never accepts a bool; ``float`` accepts an int. ``max_len`` bounds the length of
    str/bytes/list/dict values; ``min``/``max`` bound numbers; ``choices`` closes the set.
    """

    kind: type | tuple[type, ...]
    required: bool = True
    max_len: int | None = None
    min: float | None = None
    max: float | None = None
    choices: frozenset | None = None

    def check(self, name: str, value: Any) -> Any:
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        if not any(_is_kind(value, k) for k in kinds):
            expected = " or ".join(k.__name__ for k in kinds)
            raise _invalid(name, f"must be {expected}, got {_type_name(value)}")
        if self.max_len is not None and isinstance(value, (str, bytes, list, dict)) and len(value) > self.max_len:
            raise _invalid(name, f"is longer than {self.max_len}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value != value:  # NaN compares false with every bound
                raise _invalid(name, "is not a number")
            if self.min is not None and value < self.min:
                raise _invalid(name, f"must be >= {self.min}")
            if self.max is not None and value > self.max:
                raise _invalid(name, f"must be <= {self.max}")
        if self.choices is not None and value not in self.choices:
            raise _invalid(name, f"must be one of {sorted(self.choices)}")
        return value


def _is_kind(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def _type_name(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


def _invalid(name: str, why: str) -> ProtocolError:
    return ProtocolError(Code.INVALID_FIELD, f"field {name!r} {why}", detail={"field": name})


# Shared by every op without arguments: read-only.
_NO_FIELDS: Mapping[str, Field] = MappingProxyType({})


class Remote(Enum):
    """Whether a remote operator's key (any authorized CURVE key but this install's own) may
    call an op. The home's owner (an ipc caller, or this install's own key) may call every op;
    the rule is ``shared.transport.principals``."""

    ALLOWED = "allowed"  # read-only: any authorized key
    WITH_GRANT = "with_grant"  # a key granted this op by name (``hermes mesh keys authorize --grant``)
    NEVER = "never"  # the owner only, whatever is granted


class _OpSpecFields(NamedTuple):
    name: str
    fields: Mapping[str, Field] = _NO_FIELDS
    idempotent: bool = False
    streaming: bool = False
    timeout: float = 30.0
    remote: Remote | None = None  # never left so: ``OpSpec`` refuses it


class OpSpec(_OpSpecFields):
    """What an op accepts, who may call it and how clients may treat it.

    ``remote`` says whether a remote key may call it, and has no default: every op declares
    it. ``idempotent`` ops are retried by clients after a timeout; nothing else ever is.
    ``streaming`` ops may send event frames before their terminal frame. ``timeout`` is
    the longest a service lets one call run, whatever deadline the client asks for. A named
    tuple, not a dataclass: the CLI's status path reads op specs and must not import
    ``dataclasses`` (and ``inspect`` with it).
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> OpSpec:
        spec = super().__new__(cls, *args, **kwargs)
        if not isinstance(spec.remote, Remote):
            # Not a HermesError: a declaration missing in the code, found as the module imports.
            raise TypeError(f"op {spec.name!r} must declare who may call it: remote=Remote.<...>, not {spec.remote!r}")
        return spec

    def check_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        for key in args:
            if key not in self.fields:
                raise ProtocolError(
                    Code.UNKNOWN_FIELD, f"op {self.name!r} takes no argument {key!r}", detail={"field": key}
                )
        checked: dict[str, Any] = {}
        for name, spec in self.fields.items():
            if name in args:
                checked[name] = spec.check(name, args[name])
            elif spec.required:
                raise ProtocolError(
                    Code.MISSING_FIELD, f"op {self.name!r} needs argument {name!r}", detail={"field": name}
                )
        return checked


# Served by every service (``shared.transport.service``): who it is and which protocol versions it
# speaks. Defined here so a client can ask any service without importing the service side.
HELLO = OpSpec("hello", idempotent=True, timeout=5.0, remote=Remote.ALLOWED)


# --- frames ----------------------------------------------------------------------------


class Request(NamedTuple):
    id: str
    op: OpSpec
    args: dict[str, Any]
    version: int
    deadline_ms: int | None = None


class Reply(NamedTuple):
    id: str
    kind: str  # "event" | "result" | "error"
    payload: Any
    version: int

    @property
    def terminal(self) -> bool:
        return self.kind != "event"

    def raise_for_error(self) -> Any:
        if self.kind == "error":
            raise RemoteError(self.payload["code"], self.payload["message"], detail=self.payload.get("detail"))
        return self.payload


def pack(obj: Any) -> bytes:
    """Encode one frame. Raises ``TypeError``/``ValueError`` for values msgpack cannot carry."""
    return msgpack.packb(obj, use_bin_type=True)


def _reject_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not part of the protocol")


def unpack(raw: bytes, *, max_bytes: int = MAX_FRAME_BYTES) -> Any:
    """Decode one frame: one msgpack object, no extension type at any depth, no trailing bytes.

    Every frame from outside (a request, a reply, a broadcast event, a hook report) is decoded
    here, so this is the one place the rule is kept."""
    if len(raw) > max_bytes:
        raise ProtocolError(
            Code.FRAME_TOO_LARGE,
            f"frame of {len(raw)} bytes is over the {max_bytes}-byte limit",
            detail={"size": len(raw), "limit": max_bytes},
        )
    try:
        # msgpack decodes the timestamp extension (type -1) itself, never calling ext_hook for
        # it; an extension longer than max_ext_len is refused before that. With 0, every
        # extension that carries data is refused; an empty one is refused by ext_hook (or, as
        # a timestamp, by msgpack as invalid).
        return msgpack.unpackb(raw, raw=False, strict_map_key=True, ext_hook=_reject_ext, max_ext_len=0)
    except Exception:  # msgpack raises several unrelated types for bad input; the peer reads words
        raise ProtocolError(Code.MALFORMED_FRAME, "frame is not valid msgpack") from None


def one_frame(parts: Sequence[bytes], *, kind: str) -> bytes:
    """The frame a ZeroMQ message carries: a ``kind`` of message ("request", "reply",
    "report") is exactly one part (a service asks after taking off the routing id its ROUTER
    puts first).

    Any other count raises ``ProtocolError`` (``malformed_frame``), and each role has one
    answer to it: a service, which can address the peer by its routing id, answers the typed
    error and keeps serving; a client, which has nobody to answer, drops the message and logs
    it (``shared.transport.call_rules.reply_frame``); the hook reporter's intake, which never answers
    and must not log a flood, drops it and counts it as ``malformed``.
    """
    if len(parts) != 1:
        raise ProtocolError(Code.MALFORMED_FRAME, f"a {kind} is exactly one frame")
    return parts[0]


def _check_version(value: Any, window: tuple[int, int], request_id: str | None) -> int:
    low, high = window
    if not _is_kind(value, int):
        raise ProtocolError(
            Code.MISSING_FIELD if value is None else Code.INVALID_FIELD,
            "frame needs an integer protocol version 'v'",
            detail={"field": "v"},
            request_id=request_id,
        )
    if not low <= value <= high:
        raise ProtocolError(
            Code.PROTOCOL_INCOMPATIBLE,
            f"protocol version {value} is outside the supported window {low}..={high}",
            detail={"got": value, "min": low, "max": high},
            request_id=request_id,
        )
    return value


def _read_id(frame: dict) -> str | None:
    value = frame.get("id")
    if isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH:
        return value
    return None


def decode_request(
    raw: bytes,
    ops: Mapping[str, OpSpec],
    *,
    window: tuple[int, int] = PROTOCOL_WINDOW,
    max_bytes: int = MAX_FRAME_BYTES,
) -> Request:
    frame = unpack(raw, max_bytes=max_bytes)
    if not isinstance(frame, dict):
        raise ProtocolError(Code.NOT_A_MAP, f"frame must be a map, got {_type_name(frame)}")
    request_id = _read_id(frame)
    if request_id is None:
        code = Code.MISSING_FIELD if "id" not in frame else Code.INVALID_FIELD
        raise ProtocolError(code, f"frame needs a string 'id' of 1..{MAX_ID_LENGTH} characters", detail={"field": "id"})
    for key in frame:
        if key not in _ENVELOPE_KEYS:
            raise ProtocolError(
                Code.UNKNOWN_FIELD, f"unknown frame field {key!r}", detail={"field": key}, request_id=request_id
            )
    version = _check_version(frame.get("v"), window, request_id)
    op_name = frame.get("op")
    if not isinstance(op_name, str) or not 0 < len(op_name) <= MAX_OP_LENGTH:
        raise ProtocolError(
            Code.MISSING_FIELD if op_name is None else Code.INVALID_FIELD,
            "frame needs a string 'op'",
            detail={"field": "op"},
            request_id=request_id,
        )
    spec = ops.get(op_name)
    if spec is None:
        raise ProtocolError(
            Code.UNKNOWN_OP,
            f"unknown op {op_name!r}",
            detail={"op": op_name, "known": sorted(ops)},
            request_id=request_id,
        )
    args = frame.get("args", {})
    if not isinstance(args, dict):
        raise _with_id(_invalid("args", f"must be a map, got {_type_name(args)}"), request_id)
    deadline_ms = frame.get("deadline_ms")
    if deadline_ms is not None and not (_is_kind(deadline_ms, int) and 0 < deadline_ms <= MAX_DEADLINE_MS):
        raise _with_id(_invalid("deadline_ms", f"must be an integer in 1..{MAX_DEADLINE_MS}"), request_id)
    try:
        checked = spec.check_args(args)
    except ProtocolError as exc:
        raise _with_id(exc, request_id) from None
    return Request(id=request_id, op=spec, args=checked, version=version, deadline_ms=deadline_ms)


def _with_id(exc: ProtocolError, request_id: str) -> ProtocolError:
    exc.request_id = request_id
    return exc


def encode_request(
    request_id: str,
    op: str,
    args: Mapping[str, Any],
    *,
    deadline_ms: int | None = None,
    version: int = PROTOCOL_VERSION,
) -> bytes:
    frame: dict[str, Any] = {"v": version, "id": request_id, "op": op, "args": dict(args)}
    if deadline_ms is not None:
        frame["deadline_ms"] = deadline_ms
    return pack(frame)


def encode_reply(request_id: str | None, kind: str, payload: Any, *, version: int = PROTOCOL_VERSION) -> bytes:
    if kind not in _REPLY_KINDS:
        raise ValueError(f"unknown reply kind {kind!r}")
    return pack({"v": version, "id": request_id, kind: payload})


def error_payload(code: str, message: str, detail: Mapping[str, Any] | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"code": code, "message": message}
    if detail:
        payload["detail"] = dict(detail)
    return payload


def encode_error(request_id: str | None, error: HermesError, *, version: int = PROTOCOL_VERSION) -> bytes:
    return encode_reply(request_id, "error", error_payload(error.code, error.message, error.detail), version=version)


def decode_reply(raw: bytes, *, window: tuple[int, int] = PROTOCOL_WINDOW, max_bytes: int = MAX_FRAME_BYTES) -> Reply:
    """Validate a service's answer. Raises ``ProtocolError`` (code ``malformed_reply`` or
    ``protocol_incompatible``) when it cannot be trusted."""
    try:
        frame = unpack(raw, max_bytes=max_bytes)
    except ProtocolError as exc:
        raise ProtocolError(Code.MALFORMED_REPLY, exc.message, detail=exc.detail) from None
    if not isinstance(frame, dict):
        raise ProtocolError(Code.MALFORMED_REPLY, f"reply must be a map, got {_type_name(frame)}")
    request_id = _read_id(frame)
    version = _check_version(frame.get("v"), window, request_id)
    kinds = [k for k in _REPLY_KINDS if k in frame]
    extra = set(frame) - {"v", "id", *_REPLY_KINDS}
    if len(kinds) != 1 or extra:
        raise ProtocolError(
            Code.MALFORMED_REPLY, "reply must carry exactly one of event, result, error", request_id=request_id
        )
    kind = kinds[0]
    payload = frame[kind]
    if kind == "error":
        payload = _check_error_payload(payload, request_id)
    if request_id is None:
        # An error about a frame whose id could not be read has no id; anything else must.
        if kind != "error" or frame.get("id") is not None:
            raise ProtocolError(Code.MALFORMED_REPLY, "reply has no valid 'id'")
        return Reply(id="", kind=kind, payload=payload, version=version)
    return Reply(id=request_id, kind=kind, payload=payload, version=version)


def _check_error_payload(payload: Any, request_id: str | None) -> dict[str, Any]:
    if (
        isinstance(payload, dict)
        and isinstance(payload.get("code"), str)
        and isinstance(payload.get("message"), str)
        and isinstance(payload.get("detail", {}), dict)
        and set(payload) <= {"code", "message", "detail"}
    ):
        return payload
    raise ProtocolError(Code.MALFORMED_REPLY, "error reply must be {code, message, detail?}", request_id=request_id)
