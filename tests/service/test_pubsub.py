"""Events over real pub/sub sockets: in order per topic, a publisher that never waits, junk skipped."""

from __future__ import annotations

import os

import trio

from shared import homes, protocol
from shared.transport import Heard, Liveness, subscribe
from shared.transport.pubsub import open_publisher
from tests.support.subscriber import open_subscriber


async def test_subscriber_gets_events_in_order_for_its_topics(short_dir):
    address = f"ipc://{short_dir}/svc.pub"
    async with open_publisher(address) as pub, open_subscriber(address, ["state"]) as events:
        # PUB/SUB joins are asynchronous: publish until the subscription is in place.
        with trio.fail_after(5):
            while True:
                pub.publish("state", {"probe": True})
                with trio.move_on_after(0.05):
                    first = await events.receive()
                    break
        assert first.topic == "state"
        base = first.seq
        for i in range(20):
            pub.publish("progress", {"skip": i})  # filtered out by topic
            pub.publish("state", {"n": i})
        received = []
        with trio.fail_after(5):
            async for event in events:
                if event.event.get("probe"):
                    continue
                received.append(event)
                if len(received) == 20:
                    break
    assert [e.event for e in received] == [{"n": i} for i in range(20)]
    assert all(e.topic == "state" for e in received)
    seqs = [e.seq for e in received]
    assert seqs == sorted(seqs) and seqs[0] > base


async def test_publisher_never_waits_for_subscribers(short_dir):
    async with open_publisher(f"ipc://{short_dir}/svc.pub", queue=8) as pub:
        with trio.fail_after(2):
            outcomes = [pub.publish("state", {"n": i}) for i in range(1000)]
        assert outcomes[0] is True
        assert pub.dropped == outcomes.count(False) > 0


async def test_subscriber_skips_junk_from_the_wire_and_keeps_reading(short_dir):
    import zmq

    from shared.transport.zmq_trio import open_socket

    address = f"ipc://{short_dir}/raw.pub"
    hello = protocol.pack({"v": 1, "topic": "state", "seq": 1, "event": "hello"})
    after_junk = protocol.pack({"v": 1, "topic": "state", "seq": 2, "event": "after junk"})
    async with open_socket(zmq.PUB, bind=[address]) as raw, open_subscriber(address) as sub:
        with trio.fail_after(5):
            while True:  # PUB/SUB joins asynchronously: wait until events get through
                raw.send_nowait([b"state", hello])
                with trio.move_on_after(0.05):
                    await sub.receive()
                    break
            while True:  # drain the extra hellos
                with trio.move_on_after(0.1):
                    await sub.receive()
                    continue
                break
            raw.send_nowait([b"state", b"\xc1"])
            raw.send_nowait([b"state", after_junk])
            event = await sub.receive()
    assert event.event == "after junk"
    assert sub.skipped == 1


def _running(event: object) -> bool:
    return event == {"state": "running"}


async def test_a_blocking_subscriber_wakes_when_a_publisher_binds_and_when_it_says_what_is_wanted(short_dir):
    endpoint = homes.endpoint(short_dir / "home", "gateway")
    with subscribe(endpoint, topics=("state",)) as events:
        assert not events.wait(0, _running)  # nobody publishes yet
        async with open_publisher(endpoint.bind_events) as pub:
            with trio.fail_after(10):
                # what it said before the subscription reached it is lost: a new publisher wakes it
                assert await trio.to_thread.run_sync(events.wait, 10, _running)
                while not await trio.to_thread.run_sync(events.wait, 0.05, _running):
                    pub.publish("state", {"state": "running"})  # until the subscription is in place
                for _ in range(10):
                    pub.publish("state", {"state": "starting"})
                    pub.publish("progress", {"state": "running"})  # another topic
                    pub._sock.send_nowait([b"state", b"junk"])
                assert not await trio.to_thread.run_sync(events.wait, 0.2, _running)
                pub.publish("state", {"state": "running"})
                assert await trio.to_thread.run_sync(events.wait, 10, _running)


async def test_a_watcher_hears_connections_made_and_lost_and_events_in_order_and_stops_on_its_pipe(short_dir):
    endpoint = homes.endpoint(short_dir / "home", "gateway")
    stop_read, stop_write = os.pipe()
    heard: list[tuple[str, object]] = []

    def hear(timeout: float) -> list[tuple[str, object]]:
        got = events.heard(timeout, stop_fd=stop_read)
        assert got is not None
        return [(h.kind, h.value) for h in got]

    async def until(kind: str) -> None:
        with trio.fail_after(10):
            while not any(k == kind for k, _ in heard):
                heard.extend(await trio.to_thread.run_sync(hear, 0.05))

    try:
        with subscribe(
            endpoint, topics=("state",), liveness=Liveness(reconnect=50, heartbeat=200, timeout=600)
        ) as events:
            assert events.heard(0) == []  # nobody publishes yet: nothing heard
            async with open_publisher(endpoint.bind_events) as pub:
                await until(Heard.CONNECTED)
                while not any(k == Heard.EVENT for k, _ in heard):  # until the subscription is in place
                    pub.publish("state", {"n": -1})
                    heard.extend(await trio.to_thread.run_sync(hear, 0.05))
                heard.clear()
                for i in range(5):
                    pub.publish("state", {"n": i})
                    pub.publish("progress", {"n": i})  # another topic
                    pub._sock.send_nowait([b"state", b"junk"])  # nothing to trust
                while len(heard) < 5:
                    heard.extend(await trio.to_thread.run_sync(hear, 0.05))
                assert heard == [(Heard.EVENT, {"n": i}) for i in range(5)]
            await until(Heard.DISCONNECTED)  # the publisher went away
            os.write(stop_write, b".")
            assert await trio.to_thread.run_sync(lambda: events.heard(None, stop_fd=stop_read)) is None
    finally:
        os.close(stop_read)
        os.close(stop_write)
