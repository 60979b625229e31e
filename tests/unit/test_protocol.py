"""The wire protocol's rules, without sockets."""

from __future__ import annotations

import math
import re
import struct

import msgpack
import pytest

from shared import protocol
from shared.errors import HermesError
from shared.protocol import Code, Field, OpSpec, ProtocolError, Remote
from shared.transport import pubsub
from tests.support.processes import PACKAGES, ROOT

PING = OpSpec("ping", idempotent=True, remote=Remote.ALLOWED)
SET = OpSpec(
    "set",
    {
        "name": Field(str, max_len=8),
        "count": Field(int, min=0, max=10),
        "ratio": Field(float, required=False, min=0.0, max=1.0),
        "mode": Field(str, required=False, choices=frozenset({"a", "b"})),
        "blob": Field(bytes, required=False, max_len=4),
        "items": Field(list, required=False, max_len=2),
    },
    remote=Remote.ALLOWED,
)
OPS = {spec.name: spec for spec in (PING, SET)}


def frame(**fields):
    base = {"v": protocol.PROTOCOL_VERSION, "id": "r1", "op": "ping", "args": {}}
    base.update(fields)
    return msgpack.packb({k: v for k, v in base.items() if v is not _DROP}, use_bin_type=True)


_DROP = object()


def code_of(raw: bytes, **kwargs) -> tuple[str, str | None]:
    with pytest.raises(ProtocolError) as info:
        protocol.decode_request(raw, OPS, **kwargs)
    return info.value.code, info.value.request_id


def test_valid_request_round_trips():
    raw = protocol.encode_request("abc-1", "set", {"name": "x", "count": 3, "ratio": 1}, deadline_ms=250)
    request = protocol.decode_request(raw, OPS)
    assert (request.id, request.op, request.deadline_ms) == ("abc-1", SET, 250)
    assert request.args == {"name": "x", "count": 3, "ratio": 1}


@pytest.mark.parametrize(
    "raw, code",
    [
        (b"\xc1", Code.MALFORMED_FRAME),  # a byte msgpack never uses
        (b"", Code.MALFORMED_FRAME),
        (msgpack.packb({"v": 1}) + b"\x00", Code.MALFORMED_FRAME),  # trailing bytes
        (msgpack.packb(msgpack.ExtType(5, b"x")), Code.MALFORMED_FRAME),
        (msgpack.packb([1, 2]), Code.NOT_A_MAP),
        (msgpack.packb("ping"), Code.NOT_A_MAP),
        (msgpack.packb(None), Code.NOT_A_MAP),
    ],
)
def test_undecodable_frames_are_typed(raw, code):
    assert code_of(raw) == (code, None)


def ext(code: int, data: bytes) -> bytes:
    """A msgpack extension, written by hand: ``msgpack.ExtType`` refuses the negative codes."""
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
    if len(data) in fixed:
        head = bytes([fixed[len(data)]])
    elif len(data) < 1 << 8:
        head = b"\xc7" + struct.pack(">B", len(data))
    elif len(data) < 1 << 16:
        head = b"\xc8" + struct.pack(">H", len(data))
    else:
        head = b"\xc9" + struct.pack(">I", len(data))
    return head + struct.pack(">b", code) + data


def deep_in_args(value: bytes) -> bytes:
    """A valid ``set`` request with ``value`` (encoded bytes) three containers deep in a free-form list."""
    mark = b"\x00mark\x00"
    raw = frame(op="set", args={"name": "x", "count": 1, "items": [{"a": {"b": [mark]}}]})
    assert raw.count(b"\xc4\x06" + mark) == 1
    return raw.replace(b"\xc4\x06" + mark, value)


# The timestamp extension (type -1) in each of its widths, as msgpack itself writes it.
TIMESTAMPS = {
    "32-bit": (msgpack.Timestamp(1_700_000_000, 0), b"\xd6\xff"),
    "64-bit": (msgpack.Timestamp(1_700_000_000, 5), b"\xd7\xff"),
    "96-bit": (msgpack.Timestamp(-1, 0), b"\xc7\x0c\xff"),
}


def test_a_frame_with_nothing_foreign_in_it_is_accepted_where_the_extensions_go():
    request = protocol.decode_request(deep_in_args(msgpack.packb("fine")), OPS)
    assert request.args["items"] == [{"a": {"b": ["fine"]}}]


@pytest.mark.parametrize("width", sorted(TIMESTAMPS))
def test_a_timestamp_of_any_width_deep_in_a_map_is_a_malformed_frame(width):
    timestamp, head = TIMESTAMPS[width]
    encoded = msgpack.packb(timestamp)
    assert encoded.startswith(head)  # the width the case is named for
    assert code_of(deep_in_args(encoded)) == (Code.MALFORMED_FRAME, None)


@pytest.mark.parametrize("size", [0, 1, 2, 4, 8, 12, 16, 255, 256, 1 << 16])
def test_every_extension_type_of_every_size_is_a_malformed_frame(size):
    for code in range(-128, 128):
        with pytest.raises(ProtocolError) as info:
            protocol.unpack(deep_in_args(ext(code, b"\x01" * size)))
        assert info.value.code == Code.MALFORMED_FRAME, f"extension type {code} of {size} bytes"


@pytest.mark.parametrize("width", sorted(TIMESTAMPS))
def test_replies_and_events_refuse_a_timestamp(width):
    timestamp, _ = TIMESTAMPS[width]
    reply = protocol.encode_reply("r1", "result", {"report": {"at": [timestamp]}})
    with pytest.raises(ProtocolError) as info:
        protocol.decode_reply(reply)
    assert info.value.code == Code.MALFORMED_REPLY
    event = msgpack.packb({"v": 1, "topic": "state", "seq": 1, "event": {"at": timestamp}})
    with pytest.raises(ProtocolError) as info:
        pubsub.decode_event([b"state", event])
    assert info.value.code == Code.MALFORMED_FRAME


def test_frames_are_decoded_by_protocol_unpack_alone():
    decoders = re.compile(r"\bunpackb\b|\bUnpacker\b|msgpack\.unpack\b|msgpack\.loads?\b")
    sources = [p for top in (*PACKAGES, "runtime-packages") for p in (ROOT / top).rglob("*.py")]
    assert len(sources) > 100
    found = sorted(str(p.relative_to(ROOT)) for p in sources if decoders.search(p.read_text()))
    assert found == ["shared/protocol.py"]


def test_frame_over_the_cap_is_refused_before_decoding():
    raw = frame(args={"name": "x" * 100})
    code, _ = code_of(raw, max_bytes=len(raw) - 1)
    assert code == Code.FRAME_TOO_LARGE
    assert protocol.decode_request(
        raw, {"ping": OpSpec("ping", {"name": Field(str)}, remote=Remote.ALLOWED)}, max_bytes=len(raw)
    )


@pytest.mark.parametrize(
    "fields, code",
    [
        ({"id": _DROP}, Code.MISSING_FIELD),
        ({"id": 7}, Code.INVALID_FIELD),
        ({"id": ""}, Code.INVALID_FIELD),
        ({"id": "x" * 65}, Code.INVALID_FIELD),
    ],
)
def test_request_id_is_checked_first_and_left_out_when_bad(fields, code):
    assert code_of(frame(**fields)) == (code, None)


@pytest.mark.parametrize(
    "fields, code",
    [
        ({"v": _DROP}, Code.MISSING_FIELD),
        ({"v": "1"}, Code.INVALID_FIELD),
        ({"v": True}, Code.INVALID_FIELD),
        ({"v": 0}, Code.PROTOCOL_INCOMPATIBLE),
        ({"v": protocol.PROTOCOL_VERSION + 1}, Code.PROTOCOL_INCOMPATIBLE),
        ({"op": _DROP}, Code.MISSING_FIELD),
        ({"op": 3}, Code.INVALID_FIELD),
        ({"op": "nope"}, Code.UNKNOWN_OP),
        ({"args": [1]}, Code.INVALID_FIELD),
        ({"deadline_ms": 0}, Code.INVALID_FIELD),
        ({"deadline_ms": 1.5}, Code.INVALID_FIELD),
        ({"deadline_ms": protocol.MAX_DEADLINE_MS + 1}, Code.INVALID_FIELD),
        ({"extra": 1}, Code.UNKNOWN_FIELD),
    ],
)
def test_envelope_errors_keep_the_request_id(fields, code):
    assert code_of(frame(**fields)) == (code, "r1")


def test_protocol_window_is_inclusive_and_reports_itself():
    raw = frame(v=3)
    assert protocol.decode_request(raw, OPS, window=(2, 3)).version == 3
    with pytest.raises(ProtocolError) as info:
        protocol.decode_request(raw, OPS, window=(1, 2))
    assert info.value.code == Code.PROTOCOL_INCOMPATIBLE
    assert info.value.detail == {"got": 3, "min": 1, "max": 2}


@pytest.mark.parametrize(
    "args, code, field",
    [
        ({"count": 1}, Code.MISSING_FIELD, "name"),
        ({"name": "x"}, Code.MISSING_FIELD, "count"),
        ({"name": 1, "count": 1}, Code.INVALID_FIELD, "name"),
        ({"name": "x" * 9, "count": 1}, Code.INVALID_FIELD, "name"),
        ({"name": "x", "count": True}, Code.INVALID_FIELD, "count"),  # a bool is not an int
        ({"name": "x", "count": 1.0}, Code.INVALID_FIELD, "count"),
        ({"name": "x", "count": 11}, Code.INVALID_FIELD, "count"),
        ({"name": "x", "count": -1}, Code.INVALID_FIELD, "count"),
        ({"name": "x", "count": 1, "ratio": math.nan}, Code.INVALID_FIELD, "ratio"),
        ({"name": "x", "count": 1, "ratio": 1.5}, Code.INVALID_FIELD, "ratio"),
        ({"name": "x", "count": 1, "mode": "c"}, Code.INVALID_FIELD, "mode"),
        ({"name": "x", "count": 1, "blob": "text"}, Code.INVALID_FIELD, "blob"),
        ({"name": "x", "count": 1, "blob": b"12345"}, Code.INVALID_FIELD, "blob"),
        ({"name": "x", "count": 1, "items": [1, 2, 3]}, Code.INVALID_FIELD, "items"),
        ({"name": "x", "count": 1, "other": 1}, Code.UNKNOWN_FIELD, "other"),
        ({"name": "x", "count": 1, b"bytes-key": 1}, Code.UNKNOWN_FIELD, b"bytes-key"),
    ],
)
def test_arguments_are_validated_against_the_op(args, code, field):
    with pytest.raises(ProtocolError) as info:
        protocol.decode_request(frame(op="set", args=args), OPS)
    assert (info.value.code, info.value.request_id, info.value.detail["field"]) == (code, "r1", field)


def test_float_field_accepts_an_int():
    request = protocol.decode_request(frame(op="set", args={"name": "x", "count": 0, "ratio": 1}), OPS)
    assert request.args["ratio"] == 1


def test_replies_round_trip_and_errors_raise_typed():
    assert protocol.decode_reply(protocol.encode_reply("r1", "result", {"ok": 1})).payload == {"ok": 1}
    event = protocol.decode_reply(protocol.encode_reply("r1", "event", 5))
    assert (event.kind, event.terminal) == ("event", False)

    class Nope(HermesError):
        code = "nope"

    reply = protocol.decode_reply(protocol.encode_error("r1", Nope("no", detail={"k": 1})))
    with pytest.raises(protocol.RemoteError) as info:
        reply.raise_for_error()
    assert (info.value.code, info.value.message, info.value.detail) == ("nope", "no", {"k": 1})


@pytest.mark.parametrize(
    "reply",
    [
        {"v": 1, "id": "r1"},  # no kind
        {"v": 1, "id": "r1", "result": 1, "event": 2},  # two kinds
        {"v": 1, "id": "r1", "result": 1, "junk": 0},
        {"v": 1, "id": "r1", "error": "bad"},
        {"v": 1, "id": "r1", "error": {"code": 1, "message": "m"}},
        {"v": 1, "id": "r1", "error": {"code": "c", "message": "m", "detail": []}},
        {"v": 1, "id": None, "result": 1},  # only an error may lack an id
        [1, 2],
    ],
)
def test_untrustworthy_replies_are_refused(reply):
    with pytest.raises(ProtocolError) as info:
        protocol.decode_reply(msgpack.packb(reply))
    assert info.value.code == Code.MALFORMED_REPLY


def test_reply_from_a_newer_peer_is_incompatible():
    with pytest.raises(ProtocolError) as info:
        protocol.decode_reply(protocol.encode_reply("r1", "result", 1, version=protocol.PROTOCOL_VERSION + 1))
    assert info.value.code == Code.PROTOCOL_INCOMPATIBLE


def test_error_about_an_unreadable_frame_has_no_id():
    reply = protocol.decode_reply(protocol.encode_reply(None, "error", protocol.error_payload("not_a_map", "m")))
    assert (reply.id, reply.kind) == ("", "error")


@pytest.mark.parametrize("count", [0, 2, 3])
def test_a_message_of_other_than_one_part_is_a_malformed_frame(count):
    with pytest.raises(ProtocolError) as info:
        protocol.one_frame([b"x"] * count, kind="request")
    assert info.value.code == Code.MALFORMED_FRAME
    assert protocol.one_frame([b"x"], kind="reply") == b"x"
