"""The in-process transport (its event loop has a wake-up socket pair, so not the unit tier): a service's own handlers, called by a ``SyncClient`` with no
socket, fail and answer as they do over the wire (the same frames, checks, typed errors and
retry rules)."""

from __future__ import annotations

import pytest
import trio

from shared import protocol
from shared.errors import HermesError
from shared.protocol import Code, Field, OpSpec, Remote, RemoteError
from shared.transport.call_rules import NO_RETRY, RetryPolicy
from shared.transport.in_process import InProcessTransport
from shared.transport.service import Call, Service
from shared.transport.sync_client import SyncClient

ECHO = OpSpec("echo", {"text": Field(str, max_len=100_000)}, idempotent=True, remote=Remote.ALLOWED)
COUNT = OpSpec("count", {"to": Field(int, min=0, max=100)}, streaming=True, remote=Remote.ALLOWED)
REFUSE = OpSpec("refuse", remote=Remote.ALLOWED)
BREAK = OpSpec("break", remote=Remote.ALLOWED)
STALL = OpSpec("stall", remote=Remote.ALLOWED)
FLAKY = OpSpec("flaky", idempotent=True, remote=Remote.ALLOWED)
FLAKY_ONCE_ONLY = OpSpec("flaky_once_only", remote=Remote.ALLOWED)
BIG = OpSpec("big", {"size": Field(int, min=0, max=10_000)}, remote=Remote.ALLOWED)
NOT_SERVED = OpSpec("not_served", remote=Remote.ALLOWED)


class Refused(HermesError):
    code = "refused_here"


class Fixture:
    def __init__(self, max_frame: int = protocol.MAX_FRAME_BYTES, window: tuple[int, int] = protocol.PROTOCOL_WINDOW):
        self.flaky_calls = 0
        self.service = Service("fixture", "inproc://fixture", max_frame=max_frame, window=window)
        self.service.add(ECHO, lambda call: {"text": call.args["text"]})
        self.service.add(COUNT, self._count)
        self.service.add(REFUSE, self._refuse)
        self.service.add(BREAK, self._break)
        self.service.add(STALL, self._stall)
        self.service.add(FLAKY, self._flaky)
        self.service.add(FLAKY_ONCE_ONLY, self._flaky)
        self.service.add(BIG, lambda call: "x" * call.args["size"])

    async def _count(self, call: Call) -> int:
        for n in range(call.args["to"]):
            await call.emit(n)
        return call.args["to"]

    def _refuse(self, call: Call) -> None:
        raise Refused("not here", detail={"field": "nothing"})

    def _break(self, call: Call) -> None:
        raise ValueError("a bug")

    async def _stall(self, call: Call) -> None:
        await trio.sleep_forever()

    def _flaky(self, call: Call) -> str:
        self.flaky_calls += 1
        if self.flaky_calls < 3:
            raise RemoteError(Code.BUSY, "try again")
        return "done"


def client(fixture: Fixture, **options) -> SyncClient:
    max_frame = options.get("max_frame", protocol.MAX_FRAME_BYTES)
    transport = InProcessTransport(fixture.service, max_frame=max_frame)
    return SyncClient("inproc://fixture", transport=transport, **options)


def code_of(client: SyncClient, spec: OpSpec, args=None, **options) -> str:
    with pytest.raises(RemoteError) as failed:
        client.call(spec, args, **options)
    return failed.value.code


def test_a_result_comes_back_through_the_real_frames():
    with client(Fixture()) as c:
        assert c.call(ECHO, {"text": "héllo"}) == {"text": "héllo"}
        assert c.call(protocol.HELLO)["service"] == "fixture"


def test_events_stream_in_order_before_the_result():
    seen: list[int] = []
    with client(Fixture()) as c:
        assert c.call(COUNT, {"to": 5}, on_event=seen.append) == 5
    assert seen == [0, 1, 2, 3, 4]


def test_bad_arguments_and_an_unknown_op_are_the_services_typed_errors():
    with client(Fixture(), retry=NO_RETRY) as c:
        with pytest.raises(RemoteError) as failed:
            c.call(COUNT, {"to": "five"})
        assert (failed.value.code, failed.value.detail) == (Code.INVALID_FIELD, {"field": "to"})
        assert code_of(c, COUNT, {"to": 1, "extra": 1}) == Code.UNKNOWN_FIELD
        assert code_of(c, COUNT) == Code.MISSING_FIELD
        with pytest.raises(RemoteError) as failed:
            c.call(NOT_SERVED)
        assert failed.value.code == Code.UNKNOWN_OP
        assert "not_served" not in failed.value.detail["known"] and "echo" in failed.value.detail["known"]


def test_a_handlers_error_keeps_its_code_and_a_bug_is_an_internal_error():
    with client(Fixture()) as c:
        with pytest.raises(RemoteError) as failed:
            c.call(REFUSE)
        assert (failed.value.code, failed.value.message, failed.value.detail) == (
            "refused_here",
            "not here",
            {"field": "nothing"},
        )
        assert code_of(c, BREAK) == Code.INTERNAL_ERROR
        assert c.call(ECHO, {"text": "still serving"}) == {"text": "still serving"}


def test_a_call_past_its_deadline_is_answered_deadline_exceeded():
    with client(Fixture()) as c:
        assert code_of(c, STALL, timeout=0.01) == Code.DEADLINE_EXCEEDED


def test_a_request_over_the_clients_cap_is_refused_before_it_is_sent():
    fixture = Fixture()
    with client(fixture, max_frame=1000) as c:
        with pytest.raises(RemoteError) as failed:
            c.call(ECHO, {"text": "x" * 1000})
        assert failed.value.code == Code.FRAME_TOO_LARGE and failed.value.detail["limit"] == 1000


def test_a_request_over_the_services_cap_is_answered_and_one_over_the_transport_cap_is_lost():
    transport = InProcessTransport(Fixture(max_frame=1000).service)
    transport.send(protocol.encode_request("r-1", "echo", {"text": "x" * 1500}), deadline=0)
    reply = protocol.decode_reply(protocol.one_frame(transport.receive(deadline=0), kind="reply"))
    assert (reply.kind, reply.payload["code"]) == ("error", Code.FRAME_TOO_LARGE)  # the id was never read
    transport.send(protocol.encode_request("r-2", "echo", {"text": "x" * 2500}), deadline=0)
    with pytest.raises(TimeoutError):
        transport.receive(deadline=0)  # libzmq drops it before the service sees it: no answer at all
    with client(Fixture(max_frame=1000), retry=NO_RETRY) as c:
        assert code_of(c, ECHO, {"text": "x" * 1500}) == Code.TIMEOUT  # an answer without its id is not its
        assert c.call(ECHO, {"text": "fits"}) == {"text": "fits"}


def test_an_answer_over_the_clients_cap_is_dropped_and_one_over_its_transport_cap_resets():
    with client(Fixture(), max_frame=1000, retry=NO_RETRY) as c:
        assert len(c.call(BIG, {"size": 900})) == 900
        # Read and dropped (its id is never read), so the call waits for an answer in vain.
        assert code_of(c, BIG, {"size": 1500}) == Code.TIMEOUT
        assert code_of(c, BIG, {"size": 2500}) == Code.CONNECTION_RESET  # libzmq drops the connection
        assert len(c.call(BIG, {"size": 10})) == 10


def test_a_version_outside_the_services_window_is_protocol_incompatible():
    with client(Fixture(window=(2, 3)), retry=NO_RETRY) as c:
        with pytest.raises(RemoteError) as failed:
            c.call(ECHO, {"text": "hi"})
        assert failed.value.code == Code.PROTOCOL_INCOMPATIBLE
        # Refused in the newest version the service speaks, which this client cannot read.
        assert failed.value.detail == {"got": 3, "min": 1, "max": 1}


def test_a_malformed_frame_is_answered_as_on_the_wire():
    transport = InProcessTransport(Fixture().service)
    for raw, code in ((b"\xc1", Code.MALFORMED_FRAME), (protocol.pack([1, 2]), Code.NOT_A_MAP)):
        transport.send(raw, deadline=0)
        [message] = [transport.receive(deadline=0)]
        reply = protocol.decode_reply(protocol.one_frame(message, kind="reply"))
        assert (reply.id, reply.kind, reply.payload["code"]) == ("", "error", code)
        with pytest.raises(TimeoutError):
            transport.receive(deadline=0)  # one answer, and nothing after it


def test_idempotent_ops_are_retried_by_the_call_rules_and_others_never():
    fixture = Fixture()
    with client(fixture, retry=RetryPolicy(retries=2, backoff=0)) as c:
        assert c.call(FLAKY) == "done"
        assert fixture.flaky_calls == 3
    fixture = Fixture()
    with client(fixture, retry=RetryPolicy(retries=2, backoff=0)) as c:
        assert code_of(c, FLAKY_ONCE_ONLY) == Code.BUSY
        assert fixture.flaky_calls == 1
