"""The transport over real zmq sockets, services and clients in this process."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import msgpack
import pytest
import trio
import zmq

from shared import protocol
from shared.locks import LockHeld
from shared.protocol import Code, OpSpec, Remote, RemoteError
from shared.transport.call_rules import NO_RETRY, RetryPolicy
from shared.transport.service import HELLO
from shared.transport.sync_client import SyncClient
from shared.transport.zmq_trio import open_socket
from tests.support.async_client import open_client
from tests.support.peers.echo_service import BIG, ECHO, ECHO_ASYNC, FAIL, SLOW, STREAM, build_service


@pytest.fixture
async def served(nursery, endpoint):
    address, lock = endpoint
    service = build_service(address, lock)
    await nursery.start(service.serve)
    yield service, address
    service.stop(grace=0)


async def test_round_trip_and_hello(served):
    service, address = served
    async with open_client(address) as client:
        assert await client.call(ECHO, {"text": "hi"}) == "hi"
        hello = await client.call(HELLO)
    assert hello["service"] == "echo"
    assert hello["pid"] == os.getpid()
    assert hello["protocol"] == {"min": protocol.PROTOCOL_MIN, "max": protocol.PROTOCOL_VERSION}


async def test_concurrent_calls_share_one_connection(served):
    _, address = served
    results = {}
    async with open_client(address) as client:

        async def one(i: int) -> None:
            results[i] = await client.call(ECHO, {"text": f"n{i}"})

        async with trio.open_nursery() as nursery:
            for i in range(25):
                nursery.start_soon(one, i)
    assert results == {i: f"n{i}" for i in range(25)}


async def test_streaming_events_arrive_in_order_before_the_result(served):
    _, address = served
    seen = []
    async with open_client(address) as client:
        result = await client.call(STREAM, {"to": 50}, on_event=seen.append)
    assert result == 50
    assert seen == [{"n": i} for i in range(50)]


async def test_deadline_is_enforced_by_the_service(served):
    _, address = served
    async with open_client(address) as client:
        with trio.fail_after(5):
            with pytest.raises(RemoteError) as info:
                await client.call(SLOW, {"seconds": 30}, timeout=0.2)
        assert info.value.code == Code.DEADLINE_EXCEEDED
        assert await client.call(ECHO, {"text": "still serving"}) == "still serving"


async def test_waiting_for_idle_ends_when_the_last_call_in_flight_is_answered(served):
    service, address = served
    with trio.fail_after(10):
        await service.wait_idle()  # nothing in flight: at once
        async with open_client(address) as client, trio.open_nursery() as nursery:
            nursery.start_soon(client.call, SLOW, {"seconds": 0.3})
            while not service.in_flight:
                await trio.sleep(0.01)
            await service.wait_idle()
            assert service.in_flight == 0


async def test_errors_from_handlers_are_typed_and_the_service_survives(served):
    _, address = served
    async with open_client(address) as client:
        with pytest.raises(RemoteError) as info:
            await client.call(FAIL, {"typed": True})
        assert (info.value.code, info.value.detail) == ("refused_on_purpose", {"why": "test"})
        with pytest.raises(RemoteError) as info:
            await client.call(FAIL, {"typed": False})
        assert info.value.code == Code.INTERNAL_ERROR
        assert "bug" not in info.value.message  # internals stay in the service's log
        with pytest.raises(RemoteError) as info:
            await client.call(BIG, {"size": protocol.MAX_FRAME_BYTES + 10})
        assert info.value.code == Code.FRAME_TOO_LARGE
        with pytest.raises(RemoteError) as info:
            await client.call(OpSpec("no_such_op", remote=Remote.ALLOWED))
        assert info.value.code == Code.UNKNOWN_OP
        assert "echo" in info.value.detail["known"]
        assert await client.call(ECHO, {"text": "ok"}) == "ok"


async def test_concurrency_limit_answers_busy(nursery, endpoint):
    address, lock = endpoint
    service = build_service(address, lock, concurrency=2, backlog=0)
    await nursery.start(service.serve)
    async with open_client(address) as client:
        async with trio.open_nursery() as calls:
            for _ in range(2):
                calls.start_soon(client.call, SLOW, {"seconds": 0.5})
            with trio.fail_after(5):
                while service.in_flight < 2:
                    await trio.sleep(0.01)
            with pytest.raises(RemoteError) as info:
                await client.call(ECHO_ASYNC, {"text": "x"}, retry=NO_RETRY)
            assert (info.value.code, info.value.detail) == (Code.BUSY, {"limit": 2, "backlog": 0})
            # an inline handler takes no slot: it is answered while the slots are full
            assert await client.call(ECHO, {"text": "inline"}, retry=NO_RETRY) == "inline"
        # the slow calls finished; an idempotent call retried through ``busy`` succeeds
        assert await client.call(ECHO_ASYNC, {"text": "after"}) == "after"
    service.stop(0)


async def test_backlog_absorbs_a_burst_within_the_deadline(nursery, endpoint):
    address, lock = endpoint
    service = build_service(address, lock, concurrency=1, backlog=8)
    await nursery.start(service.serve)
    async with open_client(address) as client:
        results = []

        async def one() -> None:
            results.append(await client.call(SLOW, {"seconds": 0.05}))

        started = trio.current_time()
        async with trio.open_nursery() as calls:
            for _ in range(5):
                calls.start_soon(one)
        assert results == [0.05] * 5
        assert trio.current_time() - started >= 0.25  # one at a time: the limit held
        async with trio.open_nursery() as calls:
            calls.start_soon(client.call, SLOW, {"seconds": 0.5})
            with trio.fail_after(5):
                while service.in_flight < 1:
                    await trio.sleep(0.01)
            with pytest.raises(RemoteError) as info:  # an instant op, but its wait for the slot is too long
                await client.call(SLOW, {"seconds": 0}, timeout=0.1)
            assert info.value.code == Code.DEADLINE_EXCEEDED
    service.stop(0)


async def test_request_over_the_cap_fails_locally(served):
    _, address = served
    async with open_client(address) as client:
        with pytest.raises(RemoteError) as info:
            await client.call(ECHO, {"text": "x" * protocol.MAX_FRAME_BYTES})
    assert info.value.code == Code.FRAME_TOO_LARGE


async def test_unavailable_at_once_when_nothing_listens(short_dir):
    address = f"ipc://{short_dir}/nobody.ctl"
    async with open_client(address) as client:
        with trio.fail_after(2):
            with pytest.raises(RemoteError) as info:
                await client.call(SLOW, {"seconds": 0})
    assert info.value.code == Code.UNAVAILABLE


async def test_idempotent_call_is_retried_until_the_service_appears(nursery, endpoint):
    address, lock = endpoint
    service = build_service(address, lock)

    async def start_later() -> None:
        await trio.sleep(0.3)
        await nursery.start(service.serve)

    nursery.start_soon(start_later)
    async with open_client(address) as client:
        patient = RetryPolicy(retries=20, backoff=0.05, backoff_cap=0.1)
        with trio.fail_after(10):
            assert await client.call(ECHO, {"text": "late"}, retry=patient) == "late"
        with pytest.raises(RemoteError):
            await client.call(OpSpec("unknown_non_idempotent", remote=Remote.ALLOWED), retry=patient)
    service.stop(0)


async def test_second_service_on_a_held_endpoint_is_refused(served, endpoint):
    _, address = served
    address, lock = endpoint
    intruder = build_service(address, lock)
    with pytest.raises(LockHeld) as info:
        await intruder.serve()
    assert info.value.holder is not None and info.value.holder.pid == os.getpid()
    async with open_client(address) as client:
        assert await client.call(ECHO, {"text": "mine"}) == "mine"


async def test_shutdown_answers_calls_in_flight_and_frees_the_endpoint(nursery, endpoint):
    address, lock = endpoint
    service = build_service(address, lock)
    await nursery.start(service.serve)
    async with open_client(address, retry=NO_RETRY) as client:
        async with trio.open_nursery() as calls:
            outcome = {}

            async def slow_call() -> None:
                try:
                    await client.call(SLOW, {"seconds": 30})
                except RemoteError as exc:
                    outcome["code"] = exc.code

            calls.start_soon(slow_call)
            with trio.fail_after(5):
                while service.in_flight < 1:
                    await trio.sleep(0.01)
            service.stop(grace=0.1)
            with pytest.raises(RemoteError) as info:  # stopping: a new call is turned away at once
                await client.call(ECHO, {"text": "late"})
            assert info.value.code == Code.SHUTTING_DOWN
        assert outcome == {"code": Code.SHUTTING_DOWN}
    with trio.fail_after(5):
        await service.wait_stopped()
    again = build_service(address, lock)  # the lock was released with the socket
    await nursery.start(again.serve)
    async with open_client(address) as client:
        assert await client.call(ECHO, {"text": "reborn"}) == "reborn"
    again.stop(0)


async def test_a_reply_that_arrived_survives_the_service_disconnecting(short_dir):
    # A service that answers and exits at once (a drain, a shutdown) disconnects right after
    # its last reply. A client busy elsewhere must still find the reply that had arrived.
    address = f"ipc://{short_dir}/gone.ctl"
    server = zmq.Context.instance().socket(zmq.ROUTER)
    server.bind(address)
    try:
        async with open_socket(zmq.DEALER, connect=[address]) as client:
            await client.send([b"request"])
            with trio.fail_after(5):
                while not server.poll(0):
                    await trio.sleep(0.01)
            peer, _ = server.recv_multipart()
            server.send_multipart([peer, b"reply"])
            server.close(linger=1000)
            time.sleep(0.3)  # blocks the loop on purpose: the client's pump cannot read before the peer is gone
            with trio.fail_after(2):
                assert await client.receive() == [b"reply"]
    finally:
        server.close(linger=0)


async def test_wait_input_consumed_returns_once_a_receiver_took_everything_that_arrived(short_dir):
    address = f"ipc://{short_dir}/inbox.ctl"
    server = zmq.Context.instance().socket(zmq.ROUTER)
    server.bind(address)
    taken: list[list[bytes]] = []
    try:
        async with open_socket(zmq.DEALER, connect=[address]) as client, trio.open_nursery() as nursery:
            await client.send([b"hello"])
            with trio.fail_after(5):
                while not server.poll(0):
                    await trio.sleep(0.01)
            peer, _ = server.recv_multipart()
            for n in range(5):
                server.send_multipart([peer, b"%d" % n])
            time.sleep(0.3)  # blocks the loop on purpose: all five wait in zmq, none read yet

            async def receiver() -> None:
                async for message in client:
                    taken.append(message)

            nursery.start_soon(receiver)
            with trio.fail_after(5):
                await client.wait_input_consumed()
            assert taken == [[b"%d" % n] for n in range(5)]
            nursery.cancel_scope.cancel()
    finally:
        server.close(linger=0)


async def test_a_service_leaving_fails_what_it_did_not_answer_and_delivers_what_it_did(short_dir):
    # Two calls in flight; the service answers one and exits. The answer arrives, and the other
    # call fails as reset at once instead of waiting out its 50 s deadline.
    address = f"ipc://{short_dir}/leaving.ctl"
    server = zmq.Context.instance().socket(zmq.ROUTER)
    server.bind(address)
    outcome = {}
    try:
        async with open_client(address, retry=NO_RETRY) as client:

            async def call(tag: str) -> None:
                try:
                    outcome[tag] = await client.call(SLOW, {"seconds": 50}, timeout=50)
                except RemoteError as exc:
                    outcome[tag] = exc.code

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call, "a")
                    nursery.start_soon(call, "b")
                    requests = []
                    while len(requests) < 2:
                        if server.poll(0):
                            requests.append(server.recv_multipart())
                        else:
                            await trio.sleep(0.01)
                    peer, raw = requests[0]
                    answered = protocol.decode_request(raw, {SLOW.name: SLOW}).id
                    server.send_multipart([peer, protocol.encode_reply(answered, "result", 1.5)])
                    server.close(linger=1000)
                    time.sleep(0.3)  # blocks the loop: the reply and the disconnect both wait to be read
    finally:
        server.close(linger=0)
    assert sorted(outcome.values(), key=str) == [1.5, Code.CONNECTION_RESET]


async def test_multipart_request_is_malformed(served):
    _, address = served
    request = protocol.encode_request("a", "echo", {"text": "x"})
    async with open_socket(zmq.DEALER, connect=[address]) as raw:
        for junk in ([request, b"extra"], [request, request, request]):
            await raw.send(junk)
            with trio.fail_after(5):
                reply = protocol.decode_reply((await raw.receive())[0])
            assert (reply.kind, reply.payload["code"]) == ("error", Code.MALFORMED_FRAME)  # not run as a call
        await raw.send([request])
        with trio.fail_after(5):
            assert protocol.decode_reply((await raw.receive())[0]).payload == "x"


@contextmanager
def junk_before_each_answer(address: str, requests: int = 1) -> Iterator[None]:
    """A bare ROUTER that answers each ``echo`` twice: first a two-part message whose first
    part is a well-formed reply with the wrong result, then the real one-frame reply."""
    server = zmq.Context.instance().socket(zmq.ROUTER)
    server.bind(address)

    def answer() -> None:
        for _ in range(requests):
            if not server.poll(10_000):
                return
            peer, raw = server.recv_multipart()
            request = protocol.decode_request(raw, {ECHO.name: ECHO})
            server.send_multipart([peer, protocol.encode_reply(request.id, "result", "junk"), b"extra"])
            server.send_multipart([peer, protocol.encode_reply(request.id, "result", request.args["text"])])

    worker = threading.Thread(target=answer)
    worker.start()
    try:
        yield
    finally:
        worker.join(15)
        server.close(linger=0)


def dropped(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("dropping a 2-part message")]


async def test_async_client_drops_a_multipart_reply_and_logs_it(short_dir, caplog):
    address = f"ipc://{short_dir}/junk-async.ctl"
    with junk_before_each_answer(address):
        async with open_client(address, retry=NO_RETRY) as client:
            with trio.fail_after(10):
                assert await client.call(ECHO, {"text": "real"}, timeout=5) == "real"
    assert len(dropped(caplog)) == 1


def test_sync_client_drops_a_multipart_reply_and_logs_it(short_dir, caplog):
    address = f"ipc://{short_dir}/junk-sync.ctl"
    with junk_before_each_answer(address), SyncClient(address, retry=NO_RETRY) as client:
        assert client.call(ECHO, {"text": "real"}, timeout=5) == "real"
    assert len(dropped(caplog)) == 1


def test_call_all_drops_a_multipart_reply_and_logs_it(short_dir, caplog):
    from shared.transport.sync_client import call_all

    address = f"ipc://{short_dir}/junk-all.ctl"
    with junk_before_each_answer(address):
        assert call_all([address], ECHO, {"text": "real"}, timeout=5) == {address: "real"}
    assert len(dropped(caplog)) == 1


async def test_frames_over_the_cap_get_a_typed_answer_or_a_disconnect(served):
    _, address = served
    over_cap = msgpack.packb({"v": 1, "id": "big", "op": "echo", "args": {"text": "x" * protocol.MAX_FRAME_BYTES}})
    async with open_socket(zmq.DEALER, connect=[address]) as raw:
        await raw.send([over_cap])
        with trio.fail_after(5):
            reply = protocol.decode_reply((await raw.receive())[0])
    assert reply.payload["code"] == Code.FRAME_TOO_LARGE
    # Over the transport cap libzmq drops the connection before the service sees a byte.
    huge = b"\x00" * (protocol.MAX_FRAME_BYTES * protocol.TRANSPORT_SIZE_FACTOR + 1)
    async with open_socket(zmq.DEALER, connect=[address]) as raw:
        await raw.send([huge])
        with trio.move_on_after(0.5):
            await raw.receive()
            pytest.fail("a frame over the transport cap was answered")
    async with open_client(address) as client:
        assert await client.call(ECHO, {"text": "fine"}) == "fine"


async def test_close_while_a_task_waits_raises_closed(endpoint):
    address, _ = endpoint
    errors = []
    async with trio.open_nursery() as nursery:
        async with open_socket(zmq.ROUTER, bind=[address]) as sock:

            async def waiter() -> None:
                try:
                    await sock.receive()
                except trio.ClosedResourceError:
                    errors.append("closed")

            nursery.start_soon(waiter)
            await trio.sleep(0.05)
    assert errors == ["closed"]
    with pytest.raises(trio.ClosedResourceError):
        await sock.send([b"peer", b"x"])


async def test_router_drops_replies_for_a_peer_that_vanished(served):
    service, address = served
    with zmq.Context.instance().socket(zmq.DEALER) as gone:
        gone.connect(address)
        gone.send(protocol.encode_request("v1", "slow", {"seconds": 0.2}))
        with trio.fail_after(5):
            while service.in_flight < 1:
                await trio.sleep(0.01)
        gone.close(linger=0)
    await trio.sleep(0.4)  # the reply finds no peer: ROUTER_MANDATORY makes that an error, which is counted
    async with open_client(address) as client:
        assert await client.call(ECHO, {"text": "unharmed"}) == "unharmed"


async def test_a_cancelled_receive_leaves_the_socket_usable(endpoint):
    address, _ = endpoint
    async with open_socket(zmq.ROUTER, bind=[address]) as router, open_socket(zmq.DEALER, connect=[address]) as dealer:
        with trio.move_on_after(0.05):
            async for _ in router:
                pytest.fail("nothing was sent yet")
        await dealer.send([b"hello"])
        with trio.fail_after(5):
            async for peer_and_payload in router:
                assert peer_and_payload[1] == b"hello"
                break


async def test_peers_outside_each_others_protocol_window_fail_closed(served):
    _, address = served
    too_new = msgpack.packb({"v": protocol.PROTOCOL_VERSION + 5, "id": "n1", "op": "echo", "args": {"text": "x"}})
    async with open_socket(zmq.DEALER, connect=[address]) as raw:
        await raw.send([too_new])
        with trio.fail_after(5):
            reply = protocol.decode_reply((await raw.receive())[0])
    assert (reply.id, reply.payload["code"]) == ("n1", Code.PROTOCOL_INCOMPATIBLE)
    assert reply.payload["detail"]["max"] == protocol.PROTOCOL_VERSION
    # A newer client that still speaks this version is answered in it.
    current = protocol.PROTOCOL_VERSION
    async with open_client(address, window=(current, current)) as client:
        assert await client.call(ECHO, {"text": "x"}) == "x"
    # A client that only speaks newer versions is refused, typed.
    async with open_client(address, window=(current + 1, current + 2)) as client:
        with trio.fail_after(5):
            with pytest.raises(RemoteError) as info:
                await client.call(ECHO, {"text": "x"}, retry=NO_RETRY)
    assert info.value.code == Code.PROTOCOL_INCOMPATIBLE
    assert info.value.detail["got"] == current  # the service's answer, in a version it cannot read
