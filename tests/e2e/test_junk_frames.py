"""Property: whatever bytes a peer sends, a live service answers with a typed error and
keeps serving. The service is a real process; the junk goes over a real ipc socket."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import protocol
from shared.protocol import Code
from tests.support.processes import Peer

KNOWN_CODES = {
    Code.MALFORMED_FRAME,
    Code.NOT_A_MAP,
    Code.FRAME_TOO_LARGE,
    Code.MISSING_FIELD,
    Code.INVALID_FIELD,
    Code.UNKNOWN_FIELD,
    Code.UNKNOWN_OP,
    Code.PROTOCOL_INCOMPATIBLE,
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# Ops that answer at once: a junk frame that happens to be a valid ``slow`` call would
# only test the clock.
ops = st.sampled_from(["echo", "fail", "big", "hello", "nope", ""])
near_valid = st.fixed_dictionaries(
    {},
    optional={
        "v": st.one_of(st.integers(-2, 3), values),
        "id": st.one_of(st.text(min_size=1, max_size=70), values),
        "op": st.one_of(ops, values),
        "args": st.one_of(
            st.dictionaries(st.sampled_from(["text", "seconds", "to", "typed", "size", "x"]), values, max_size=3),
            values,
        ),
        "deadline_ms": st.one_of(st.integers(-5, 10**12), values),
        "junk": values,
    },
)
junk = st.one_of(
    st.binary(max_size=64),
    values.map(lambda v: msgpack.packb(v, use_bin_type=True)),
    near_valid.map(lambda v: msgpack.packb(v, use_bin_type=True)),
)


@pytest.fixture(scope="module")
def live_service():
    directory = Path(tempfile.mkdtemp(prefix="hm-junk-"))
    address = f"ipc://{directory}/svc.ctl"
    peer = Peer(["-m", "tests.support.peers.echo_service", address, str(directory / "svc.lock")])
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    yield peer, sock
    sock.close(linger=0)
    peer.kill()
    shutil.rmtree(directory, ignore_errors=True)


def ask(sock: zmq.Socket, raw: bytes) -> protocol.Reply:
    sock.send(raw)
    assert sock.poll(5000, zmq.POLLIN), "the service did not answer within 5 s"
    return protocol.decode_reply(sock.recv())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=junk)
def test_every_junk_frame_gets_a_typed_answer(live_service, raw):
    peer, sock = live_service
    reply = ask(sock, raw)
    if reply.kind == "error":
        assert reply.payload["code"] in KNOWN_CODES | {"deadline_exceeded", "refused_on_purpose", "internal_error"}
    else:
        # Junk that happens to be a valid request must have been a real call, answered as one.
        request = msgpack.unpackb(raw, raw=False)
        assert reply.kind == "result"
        assert isinstance(request, dict) and request.get("op") in {"echo", "hello"}
    assert peer.proc.poll() is None, "the service died"
    valid = ask(sock, protocol.encode_request("check", "echo", {"text": "still here"}))
    assert (valid.id, valid.payload) == ("check", "still here")
