"""The minimal ZMTP client (``call_all_ipc``) against real peers in this process: the real
service, a bare pyzmq ROUTER, and hostile AF_UNIX servers that break the wire each way."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import protocol
from shared.identity import current_identity, peer_is
from shared.protocol import Code, RemoteError
from shared.transport.zmtp import (
    GREETING,
    MAX_PARTS,
    MECHANISM,
    Session,
    ZmtpViolation,
    call_all_ipc,
    encode_frames,
    ready_command,
)
from tests.support.peers.echo_service import BIG, ECHO, FAIL, STREAM, build_service

CAP = protocol.MAX_FRAME_BYTES * protocol.TRANSPORT_SIZE_FACTOR


@pytest.fixture
async def served(nursery, endpoint):
    address, lock = endpoint
    service = build_service(address, lock)
    await nursery.start(service.serve)
    yield address
    service.stop(grace=0)


async def test_real_services_answer_each_call_as_pyzmq_gets_it(served, short_dir):
    missing = f"ipc://{short_dir}/nobody.ctl"
    echoed = await trio.to_thread.run_sync(lambda: call_all_ipc([served, missing], ECHO, {"text": "hi"}, timeout=5))
    assert echoed[served] == "hi"
    assert isinstance(echoed[missing], RemoteError) and echoed[missing].code == Code.UNAVAILABLE
    # A stream's events are passed over; the result is the answer.
    counted = await trio.to_thread.run_sync(lambda: call_all_ipc([served], STREAM, {"to": 5}, timeout=5))
    assert counted == {served: 5}
    failed = await trio.to_thread.run_sync(lambda: call_all_ipc([served], FAIL, {"typed": True}, timeout=5))
    assert isinstance(failed[served], RemoteError) and failed[served].code == "refused_on_purpose"
    # An answer over the application cap is refused as pyzmq's client refuses it; one over the
    # transport cap (twice that) breaks the wire, where libzmq would drop the connection.
    big = await trio.to_thread.run_sync(lambda: call_all_ipc([served], BIG, {"size": 1500}, timeout=5, max_frame=1000))
    assert isinstance(big[served], RemoteError) and big[served].code == Code.MALFORMED_REPLY
    huge = await trio.to_thread.run_sync(lambda: call_all_ipc([served], BIG, {"size": 2500}, timeout=5, max_frame=1000))
    assert isinstance(huge[served], ZmtpViolation) and huge[served].fault == "frame_too_large"


# --- a bare pyzmq ROUTER -----------------------------------------------------------------------


@pytest.fixture
def router(short_dir) -> Iterator[tuple[zmq.Socket, str]]:
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    path = str(short_dir / "router.ctl")
    sock.bind(f"ipc://{path}")
    yield sock, path
    sock.close(linger=0)


def _connected(path: str, request: bytes) -> tuple[socket.socket, Session]:
    """A raw connection whose handshake with the ROUTER is done and whose ``request`` is sent."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    session = Session(CAP, request)
    sock.sendall(session.outgoing)
    session.outgoing.clear()
    while not session.outgoing:  # the request is due once the ROUTER's READY came
        assert session.feed(sock.recv(1 << 16)) == []
    sock.sendall(session.outgoing)
    return sock, session


def _next_message(sock: socket.socket, session: Session) -> list[bytes]:
    while not (messages := session.feed(sock.recv(1 << 16))):
        pass
    [message] = messages
    return message


messages = st.lists(st.binary(max_size=700), min_size=1, max_size=5)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sent=messages, answered=messages)
def test_frames_round_trip_through_libzmq_both_ways(router, sent, answered):
    zsock, path = router
    sock, session = _connected(path, encode_frames(sent))
    try:
        assert zsock.poll(10_000)
        peer, *parts = zsock.recv_multipart()
        assert parts == sent
        zsock.send_multipart([peer, *answered])
        assert _next_message(sock, session) == answered
    finally:
        sock.close()


def test_a_router_answering_as_the_service_does_is_understood(router):
    zsock, path = router
    address = f"ipc://{path}"

    def serve() -> None:
        assert zsock.poll(10_000)
        peer, raw = zsock.recv_multipart()
        request = protocol.decode_request(raw, {ECHO.name: ECHO})
        zsock.send_multipart([peer, b"junk", b"parts"])  # dropped, as pyzmq's client drops it
        zsock.send_multipart([peer, protocol.encode_reply("another-call", "result", "stray")])
        zsock.send_multipart([peer, protocol.encode_reply(request.id, "result", request.args["text"] * 300)])

    server = threading.Thread(target=serve)
    server.start()
    try:
        assert call_all_ipc([address], ECHO, {"text": "ab"}, timeout=10) == {address: "ab" * 300}
    finally:
        server.join(10)


# --- hostile peers ---------------------------------------------------------------------------

SIGNATURE = b"\xff" + bytes(8) + b"\x7f"
ROUTER_GREETING = SIGNATURE + bytes([3, 1]) + MECHANISM + bytes(32)
READY = ready_command({"Socket-Type": b"ROUTER", "Identity": b""})
HANDSHAKE = ROUTER_GREETING + READY
PING = encode_frames([b"\x04PING\x00\x00"], command=True)
ERROR = encode_frames([b"\x05ERROR\x0cnot for you."], command=True)

# (what the peer sends, whether it then closes, the fault the client names)
HOSTILE = {
    "a short signature, then a close": (b"\xff\x00\x00", True, "signature"),
    "another protocol altogether": (b"HTTP/1.1 400 Bad Request\r\n\r\n", False, "signature"),
    "a signature without its last byte": (b"\xff" + bytes(9), False, "signature"),
    "ZMTP 2": (SIGNATURE + bytes([1, 0]), False, "version"),
    "a CURVE mechanism": (SIGNATURE + bytes([3, 0]) + b"CURVE".ljust(20, b"\0") + bytes(32), False, "mechanism"),
    "a greeting cut short by a close": (ROUTER_GREETING[:40], True, "signature"),
    "a READY without a socket type": (ROUTER_GREETING + ready_command({"Identity": b"x"}), False, "socket_type"),
    "a READY from a PUB": (ROUTER_GREETING + ready_command({"Socket-Type": b"PUB"}), False, "socket_type"),
    "a READY with a cut property": (
        ROUTER_GREETING + encode_frames([b"\x05READY\x0bSocket-Type\x00"], command=True),
        False,
        "handshake",
    ),
    "an ERROR for a READY": (ROUTER_GREETING + ERROR, False, "handshake"),
    "a message for a READY": (ROUTER_GREETING + encode_frames([b"hello"]), False, "handshake"),
    "a frame over the cap": (HANDSHAKE + b"\x02" + (CAP + 1).to_bytes(8, "big"), False, "frame_too_large"),
    "a message over the cap": (
        HANDSHAKE + b"\x03" + CAP.to_bytes(8, "big") + bytes(CAP) + b"\x00\x01x",
        False,
        "frame_too_large",
    ),
    "a command where a message was due": (HANDSHAKE + PING, False, "command"),
    "a frame with unknown flags": (HANDSHAKE + b"\x80\x00", False, "frame"),
    "a message of too many frames": (HANDSHAKE + encode_frames([b""] * (MAX_PARTS + 2)), False, "frame"),
    "a close after the handshake": (HANDSHAKE, True, "closed"),
    "a close in the middle of a frame": (HANDSHAKE + b"\x00\x05ab", True, "closed"),
}


@contextmanager
def hostile_peer(path: str, said: bytes, close: bool) -> Iterator[None]:
    """An AF_UNIX server that sends ``said`` to its first client, then closes or stays silent
    until the client has gone."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    listener.settimeout(10)

    def serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(10)
        with conn:
            try:
                conn.sendall(said)
                while not close and conn.recv(1 << 16):  # until the client closes its end
                    pass
            except ConnectionError:  # the client gave up on a long answer mid-way
                pass

    server = threading.Thread(target=serve)
    server.start()
    try:
        yield
    finally:
        server.join(15)
        listener.close()


@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_broken_peer_is_a_typed_error_naming_its_fault(short_dir, case):
    said, close, fault = HOSTILE[case]
    path = str(short_dir / "hostile.ctl")
    with hostile_peer(path, said, close):
        # A deadline far off: the error comes from what the peer said, not from waiting it out.
        outcome = call_all_ipc([f"ipc://{path}"], ECHO, {"text": "x"}, timeout=60)[f"ipc://{path}"]
    assert isinstance(outcome, ZmtpViolation), outcome
    assert (outcome.code, outcome.fault, outcome.detail) == ("zmtp_violation", fault, {"fault": fault})


@pytest.mark.parametrize(
    "said", [b"", HANDSHAKE, HANDSHAKE + b"\x00\x05ab"], ids=["nothing", "a handshake", "half a frame"]
)
def test_a_peer_that_never_answers_is_a_timeout(short_dir, said):
    path = str(short_dir / "silent.ctl")
    with hostile_peer(path, said, close=False):
        outcome = call_all_ipc([f"ipc://{path}"], ECHO, {"text": "x"}, timeout=0.2)[f"ipc://{path}"]
    assert isinstance(outcome, RemoteError) and outcome.code == Code.TIMEOUT


def test_what_the_client_sends_first_is_a_zmtp_3_greeting_and_a_dealer_ready():
    opening = bytes(Session(CAP, b"").outgoing)
    assert opening[:64] == GREETING and len(GREETING) == 64
    assert (opening[0], opening[9], opening[10], opening[12:32], opening[32]) == (0xFF, 0x7F, 3, MECHANISM, 0)
    assert opening[64:] == b"\x04\x1c\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER"


async def test_the_kernel_names_the_process_that_answers(served):
    peers: dict[str, int] = {}
    outcome = await trio.to_thread.run_sync(
        lambda: call_all_ipc([served], ECHO, {"text": "x"}, timeout=10, peers=peers)
    )
    me = current_identity()
    assert not isinstance(outcome[served], Exception) and peers == {served: me.pid}
    assert peer_is(peers[served], me.pid, me.start_time)
