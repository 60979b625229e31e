"""What the lean transport makes risky, over real zmq sockets in this process: edges missed
under full-duplex load, peers that stop reading, callers cancelled while they wait, and
handlers that run inline."""

from __future__ import annotations

import pytest
import trio
import trio.testing
import zmq

from shared import protocol
from shared.protocol import Code, OpSpec, Remote, RemoteError
from shared.transport.call_rules import NO_RETRY
from shared.transport.service import Call, Service
from tests.support.async_client import open_client
from tests.support.peers.echo_service import BIG, ECHO, ECHO_ASYNC, FAIL_NOW, SLOW, STREAM, build_service


@pytest.fixture
async def served(nursery, endpoint):
    address, lock = endpoint
    service = build_service(address, lock, concurrency=64, backlog=512)
    await nursery.start(service.serve)
    yield service, address
    service.stop(grace=0)


async def test_nothing_is_lost_or_hung_under_full_duplex_load(served):
    # Requests and replies cross in both directions at once on every socket: inline and async
    # calls from many tasks on two clients, and streams, so sends drain what arrived mid-flight.
    # An edge missed by the task parked on a socket's FD shows as a hang, which fail_after ends.
    service, address = served
    answers: dict[tuple[int, int, int], str] = {}
    streams: dict[tuple[int, int], list[int]] = {}
    async with open_client(address) as first, open_client(address) as second:

        async def caller(c: int, client, t: int) -> None:
            for i in range(40):
                spec = ECHO if (t + i) % 2 else ECHO_ASYNC
                answers[c, t, i] = await client.call(spec, {"text": f"{c}-{t}-{i}"}, retry=NO_RETRY)

        async def streamer(c: int, client, t: int) -> None:
            seen: list[int] = []
            total = await client.call(STREAM, {"to": 400}, on_event=lambda e: seen.append(e["n"]), retry=NO_RETRY)
            assert total == 400
            streams[c, t] = seen

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for c, client in enumerate((first, second)):
                    for t in range(25):
                        nursery.start_soon(caller, c, client, t)
                    for t in range(3):
                        nursery.start_soon(streamer, c, client, t)
    assert answers == {(c, t, i): f"{c}-{t}-{i}" for c in range(2) for t in range(25) for i in range(40)}
    assert streams == {(c, t): list(range(400)) for c in range(2) for t in range(3)}
    assert service.dropped == 0
    assert service.in_flight == 0


async def test_a_peer_that_stops_reading_does_not_stall_the_others(nursery, endpoint):
    # A low send high-water mark, so the stuck peer's pipe fills after a few replies.
    address, lock = endpoint
    service = build_service(address, lock, options=[(zmq.SNDHWM, 20)])
    await nursery.start(service.serve)
    stuck = zmq.Context.instance().socket(zmq.DEALER)
    stuck.setsockopt(zmq.LINGER, 0)
    stuck.setsockopt(zmq.RCVHWM, 1)
    stuck.setsockopt(zmq.RCVBUF, 4096)
    stuck.connect(address)
    try:
        text = "y" * 60_000
        for n in range(300):  # 18 MB of answers it never reads
            stuck.send(protocol.encode_request(f"e{n}", "echo", {"text": text}))
        stuck.send(protocol.encode_request("s", "count", {"to": 10_000}, deadline_ms=1000))
        async with open_client(address) as client:
            with trio.fail_after(20):
                while service.dropped == 0:  # the stuck peer's pipe is full: answers to it are let go
                    await trio.sleep(0.01)
                seen: list[dict] = []
                assert await client.call(STREAM, {"to": 300}, on_event=seen.append) == 300
                assert seen == [{"n": i} for i in range(300)]
                assert await client.call(ECHO, {"text": text}) == text
                # The stuck peer's stream waited for room until its deadline, then ended:
                # it holds no task and no slot.
                while service.in_flight:
                    await trio.sleep(0.01)
        assert service.dropped < 300  # what zmq and the kernel buffered was not dropped
    finally:
        stuck.close(linger=0)
    service.stop(0)


async def test_an_async_answer_waits_for_room_in_a_full_pipe_instead_of_being_lost(nursery, endpoint):
    # A stream's last events can leave its caller's pipe full when the caller reads a little
    # late (a busy machine): the answer after them must wait for room, as the events did.
    address, lock = endpoint
    service = build_service(address, lock, options=[(zmq.SNDHWM, 20)])
    started, release = trio.Event(), trio.Event()

    async def held(call: Call) -> str:
        started.set()
        await release.wait()
        return "held"

    service.add(OpSpec("held", remote=Remote.ALLOWED), held)
    await nursery.start(service.serve)
    late = zmq.Context.instance().socket(zmq.DEALER)
    late.setsockopt(zmq.LINGER, 0)
    late.setsockopt(zmq.RCVHWM, 1)
    late.setsockopt(zmq.RCVBUF, 4096)
    late.connect(address)
    answers: dict[str, protocol.Reply] = {}
    try:
        text = "y" * 60_000
        for n in range(300):
            late.send(protocol.encode_request(f"e{n}", "echo", {"text": text}))
        late.send(protocol.encode_request("h", "held", {}, deadline_ms=20_000))
        with trio.fail_after(20):
            await started.wait()  # every echo before it was answered, or let go once the pipe was full
            assert service.dropped > 0  # the pipe is full, and stays full while nothing is read
            release.set()
            await trio.testing.wait_all_tasks_blocked()  # the handler returned and its answer met the full pipe
            while "h" not in answers:  # now the peer reads
                await trio.sleep(0.01)
                while late.poll(0):
                    reply = protocol.decode_reply(late.recv())
                    answers[reply.id] = reply
    finally:
        late.close(linger=0)
    assert (answers["h"].kind, answers["h"].payload) == ("result", "held")
    assert service.in_flight == 0
    service.stop(0)


async def test_a_stream_slows_to_its_reader_instead_of_losing_events(nursery, endpoint):
    # A stream far longer than what the pipe and the kernel's buffers hold, to a bare peer
    # that reads in bursts with pauses between: the handler waits for room, nothing is lost.
    address, lock = endpoint
    service = build_service(address, lock, options=[(zmq.SNDHWM, 5), (zmq.SNDBUF, 4096)])
    await nursery.start(service.serve)
    reader = zmq.Context.instance().socket(zmq.DEALER)
    reader.setsockopt(zmq.LINGER, 0)
    reader.setsockopt(zmq.RCVHWM, 5)
    reader.setsockopt(zmq.RCVBUF, 4096)
    reader.connect(address)
    replies: list[protocol.Reply] = []
    try:
        reader.send(protocol.encode_request("s", "count", {"to": 3000}, deadline_ms=30_000))
        with trio.fail_after(30):
            while not replies or replies[-1].kind == "event":
                await trio.sleep(0.05)  # the service's pipe to us fills meanwhile
                for _ in range(500):
                    if not reader.poll(0):
                        break
                    replies.append(protocol.decode_reply(reader.recv()))
    finally:
        reader.close(linger=0)
    assert [r.payload for r in replies[:-1]] == [{"n": i} for i in range(3000)]
    assert (replies[-1].kind, replies[-1].payload) == ("result", 3000)
    assert service.dropped == 0
    service.stop(0)


async def test_a_cancelled_caller_leaves_the_client_usable_and_gets_no_one_elses_reply(served):
    service, address = served
    async with open_client(address) as client:
        with trio.move_on_after(0.05) as scope:
            await client.call(SLOW, {"seconds": 0.3})  # parked waiting for its reply
        assert scope.cancelled_caught
        assert await client.call(ECHO, {"text": "next"}) == "next"
        with trio.fail_after(5):
            while service.in_flight:  # the abandoned call's reply comes back, to nobody
                await trio.sleep(0.01)
        for n in range(20):
            assert await client.call(ECHO, {"text": f"after-{n}"}) == f"after-{n}"
        # Many callers cancelled at once, some mid-stream, while others carry on.
        outcomes: dict[int, str] = {}

        async def doomed(n: int) -> None:
            with trio.move_on_after(0.02 * (n % 5)):
                if n % 2:
                    await client.call(STREAM, {"to": 50, "pause": 0.01}, on_event=lambda e: None)
                else:
                    await client.call(SLOW, {"seconds": 0.2})

        async def survivor(n: int) -> None:
            outcomes[n] = await client.call(ECHO_ASYNC, {"text": f"s{n}"})

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for n in range(30):
                    nursery.start_soon(doomed, n)
                    nursery.start_soon(survivor, n)
        assert outcomes == {n: f"s{n}" for n in range(30)}
        assert await client.call(STREAM, {"to": 5}) == 5


async def test_when_the_call_watching_the_socket_is_cancelled_a_parked_one_takes_over(served):
    # The first call to wait watches the socket; the others park. Cancelling the watcher must
    # hand the watch on, or the parked calls would wait out their 30 s deadlines.
    _, address = served
    async with open_client(address, retry=NO_RETRY) as client:
        for _ in range(3):
            done: list[float] = []
            watcher = trio.CancelScope()

            async def first(scope: trio.CancelScope) -> None:
                with scope:
                    await client.call(SLOW, {"seconds": 20})

            async def parked(into: list[float]) -> None:
                into.append(await client.call(SLOW, {"seconds": 0.2}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(first, watcher)
                await trio.sleep(0.05)  # the first call is waiting, so it is the watcher
                with trio.fail_after(5):
                    async with trio.open_nursery() as others:
                        for _ in range(3):
                            others.start_soon(parked, done)
                        await trio.sleep(0.05)
                        watcher.cancel()
            assert done == [0.2] * 3


async def test_inline_handlers_that_raise_answer_typed_and_the_service_keeps_serving(served):
    _, address = served
    async with open_client(address) as client:
        for _ in range(3):
            with pytest.raises(RemoteError) as info:
                await client.call(FAIL_NOW, {"typed": True})
            assert (info.value.code, info.value.detail) == ("refused_on_purpose", {"why": "test"})
            with pytest.raises(RemoteError) as info:
                await client.call(FAIL_NOW, {"typed": False})
            assert info.value.code == Code.INTERNAL_ERROR
            assert "bug" not in info.value.message
            with pytest.raises(RemoteError) as info:
                await client.call(BIG, {"size": protocol.MAX_FRAME_BYTES + 1})
            assert info.value.code == Code.FRAME_TOO_LARGE
            assert await client.call(BIG, {"size": 10}) == b"x" * 10
            assert await client.call(ECHO, {"text": "alive"}) == "alive"


async def test_an_inline_result_msgpack_cannot_carry_is_an_internal_error(nursery, endpoint):
    address, lock = endpoint
    odd = OpSpec("odd", remote=Remote.ALLOWED)
    service = Service("odd", address, lock_path=lock)
    service.add(odd, lambda call: object())
    await nursery.start(service.serve)
    async with open_client(address) as client:
        with pytest.raises(RemoteError) as info:
            await client.call(odd)
        assert info.value.code == Code.INTERNAL_ERROR
        assert (await client.call(OpSpec("hello", idempotent=True, remote=Remote.ALLOWED)))["service"] == "odd"
    service.stop(0)


def test_a_streaming_op_needs_an_async_handler(endpoint):
    address, lock = endpoint
    service = Service("s", address, lock_path=lock)

    def plain(call: Call) -> int:
        return 0

    with pytest.raises(ValueError, match="async"):
        service.add(OpSpec("stream", streaming=True, remote=Remote.ALLOWED), plain)

    async def fine(call: Call) -> int:
        return 0

    service.add(OpSpec("stream", streaming=True, remote=Remote.ALLOWED), fine)
