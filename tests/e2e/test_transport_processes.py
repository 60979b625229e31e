"""The transport across real processes: a client or a service killed mid-request, a reply
that comes too late, the sync client, and calls to many services at once."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import trio
import zmq

from shared import protocol
from shared.protocol import Code, RemoteError
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import SyncClient
from tests.support.async_client import open_client
from tests.support.peers.echo_service import ECHO, ECHO_ASYNC, SLOW, STREAM

# --- faults with real processes -----------------------------------------------------------


async def test_client_killed_mid_request_leaves_the_service_serving(spawn, endpoint):
    address, lock = endpoint
    service = await trio.to_thread.run_sync(lambda: spawn("-m", "tests.support.peers.echo_service", address, str(lock)))
    program = (
        "import sys; from shared.transport.sync_client import SyncClient; from tests.support.peers.echo_service import SLOW;"
        "print('ready', flush=True); SyncClient(sys.argv[1]).call(SLOW, {'seconds': 3})"
    )
    doomed = await trio.to_thread.run_sync(lambda: spawn("-c", program, address))
    await trio.sleep(0.2)
    os.kill(doomed.pid, signal.SIGKILL)
    async with open_client(address) as client:
        with trio.fail_after(10):
            assert await client.call(ECHO, {"text": "alive"}) == "alive"
    assert service.proc.poll() is None


async def test_service_killed_mid_request_then_restarted(spawn, endpoint):
    address, lock = endpoint
    first = await trio.to_thread.run_sync(lambda: spawn("-m", "tests.support.peers.echo_service", address, str(lock)))
    async with open_client(address) as client:
        outcome = {}

        async def slow_call() -> None:
            try:
                await client.call(SLOW, {"seconds": 50}, timeout=50)
            except RemoteError as exc:
                outcome["code"] = exc.code

        with trio.fail_after(10):  # not the call's deadline: the disconnect ends it
            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow_call)
                await trio.sleep(0.3)
                os.kill(first.pid, signal.SIGKILL)
        assert outcome["code"] == Code.CONNECTION_RESET
        # kill -9 left a stale socket file and lock file; a new service takes both over
        await trio.to_thread.run_sync(lambda: spawn("-m", "tests.support.peers.echo_service", address, str(lock)))
        with trio.fail_after(10):
            assert await client.call(ECHO, {"text": "second life"}) == "second life"


async def test_timed_out_request_is_never_answered_late(spawn, endpoint):
    address, lock = endpoint
    peer = await trio.to_thread.run_sync(lambda: spawn("-m", "tests.support.peers.echo_service", address, str(lock)))
    async with open_client(address) as client:
        assert await client.call(ECHO, {"text": "warm"}) == "warm"
        os.kill(peer.pid, signal.SIGSTOP)
        try:
            with pytest.raises(RemoteError) as info:
                await client.call(ECHO, {"text": "first"}, timeout=0.3, retry=NO_RETRY)
            assert info.value.code == Code.TIMEOUT
        finally:
            os.kill(peer.pid, signal.SIGCONT)
        with trio.fail_after(10):
            assert await client.call(ECHO, {"text": "second"}) == "second"


def test_sync_client_round_trip_stream_and_timeout(spawn, endpoint):
    address, lock = endpoint
    peer = spawn("-m", "tests.support.peers.echo_service", address, str(lock))
    with SyncClient(address) as client:
        assert client.call(ECHO, {"text": "sync"}) == "sync"
        events = []
        assert client.call(STREAM, {"to": 3}, on_event=events.append) == 3
        assert events == [{"n": 0}, {"n": 1}, {"n": 2}]
        with pytest.raises(RemoteError) as info:
            client.call(ECHO, {"text": 5})
        assert info.value.code == Code.INVALID_FIELD
        os.kill(peer.pid, signal.SIGSTOP)
        try:
            with pytest.raises(RemoteError) as info:
                client.call(ECHO, {"text": "stopped"}, timeout=0.3, retry=NO_RETRY)
            assert info.value.code == Code.TIMEOUT
        finally:
            os.kill(peer.pid, signal.SIGCONT)
        assert client.call(ECHO, {"text": "resumed"}) == "resumed"
    peer.kill()
    with SyncClient(address) as client:
        with pytest.raises(RemoteError) as info:
            client.call(SLOW, {"seconds": 0}, timeout=0.5)
        assert info.value.code == Code.UNAVAILABLE


def test_sync_client_sees_a_service_leave_and_keeps_what_it_sent(spawn, endpoint, short_dir):
    address, lock = endpoint
    peer = spawn("-m", "tests.support.peers.echo_service", address, str(lock))
    with SyncClient(address, retry=NO_RETRY) as client:
        assert client.call(ECHO, {"text": "warm"}) == "warm"
        threading.Timer(0.3, os.kill, (peer.pid, signal.SIGKILL)).start()
        with pytest.raises(RemoteError) as info:
            client.call(SLOW, {"seconds": 50}, timeout=50)  # the kill, not the deadline, ends it
        assert info.value.code == Code.CONNECTION_RESET
    # A stream whose service answers and leaves at once: every event and the result arrive.
    gone = f"ipc://{short_dir}/gone-sync.ctl"
    server = zmq.Context.instance().socket(zmq.ROUTER)
    server.bind(gone)

    def answer_and_leave() -> None:
        peer_id, raw = server.recv_multipart()
        request = protocol.decode_request(raw, {STREAM.name: STREAM})
        for n in range(3):
            server.send_multipart([peer_id, protocol.encode_reply(request.id, "event", {"n": n})])
        server.send_multipart([peer_id, protocol.encode_reply(request.id, "result", 3)])
        server.close(linger=1000)

    worker = threading.Thread(target=answer_and_leave)
    worker.start()
    try:
        events = []

        def slow_consumer(event) -> None:
            events.append(event)
            time.sleep(0.3 if len(events) == 1 else 0)  # the rest and the disconnect arrive meanwhile

        with SyncClient(gone, retry=NO_RETRY) as client:
            assert client.call(STREAM, {"to": 3}, on_event=slow_consumer, timeout=20) == 3
        assert events == [{"n": 0}, {"n": 1}, {"n": 2}]
    finally:
        worker.join(10)
        server.close(linger=0)


def test_call_all_asks_many_services_at_once(spawn, short_dir):
    from shared.transport.sync_client import call_all

    addresses = [f"ipc://{short_dir}/s{i}.ctl" for i in range(3)]
    peers = [
        spawn("-m", "tests.support.peers.echo_service", a, str(short_dir / f"s{i}.lock"))
        for i, a in enumerate(addresses[:2])
    ]
    os.kill(peers[1].pid, signal.SIGSTOP)
    try:
        outcomes = call_all(addresses, ECHO, {"text": "all"}, timeout=0.5)
    finally:
        os.kill(peers[1].pid, signal.SIGCONT)
    assert outcomes[addresses[0]] == "all"
    assert isinstance(outcomes[addresses[1]], RemoteError) and outcomes[addresses[1]].code == Code.TIMEOUT
    assert isinstance(outcomes[addresses[2]], RemoteError) and outcomes[addresses[2]].code == Code.UNAVAILABLE
    bad = call_all(addresses[:1], ECHO, {"text": 1}, timeout=2)
    assert bad[addresses[0]].code == Code.INVALID_FIELD


# --- load across processes ------------------------------------------------------------------


async def test_load_across_processes_then_kill_9_mid_load(spawn, endpoint):
    # Many callers and streams against a real service process: every answer arrives. Then the
    # service is killed mid-load: every call still waiting ends typed, none waits out its deadline.
    address, lock = endpoint
    peer = await trio.to_thread.run_sync(lambda: spawn("-m", "tests.support.peers.echo_service", address, str(lock)))
    answers: dict[tuple[int, int], str] = {}
    streamed: list[list[int]] = []
    async with open_client(address, retry=NO_RETRY) as client:

        async def caller(t: int) -> None:
            for i in range(30):
                spec = ECHO if i % 2 else ECHO_ASYNC
                answers[t, i] = await client.call(spec, {"text": f"{t}-{i}"})

        async def streamer() -> None:
            seen: list[int] = []
            assert await client.call(STREAM, {"to": 300}, on_event=lambda e: seen.append(e["n"])) == 300
            streamed.append(seen)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for t in range(40):
                    nursery.start_soon(caller, t)
                for _ in range(4):
                    nursery.start_soon(streamer)
        assert answers == {(t, i): f"{t}-{i}" for t in range(40) for i in range(30)}
        assert streamed == [list(range(300))] * 4

        codes: list[str] = []

        async def doomed() -> None:
            try:
                await client.call(STREAM, {"to": 10_000, "pause": 0.01}, on_event=lambda e: None, timeout=50)
            except RemoteError as exc:
                codes.append(exc.code)

        with trio.fail_after(20):  # not the calls' deadlines: the disconnect ends them
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(doomed)
                await trio.sleep(0.3)
                os.kill(peer.pid, signal.SIGKILL)
    assert codes == [Code.CONNECTION_RESET] * 10
