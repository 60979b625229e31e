"""Broadcast events: lossy by design, validated on arrival."""

from __future__ import annotations

import msgpack
import pytest
import trio

from shared import protocol
from shared.protocol import ProtocolError
from shared.pubsub import decode_event, open_publisher, open_subscriber


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


def test_topic_bounds():
    from shared.pubsub import Publisher

    class Sink:
        def send_nowait(self, parts):
            return True

    pub = Publisher(Sink())
    with pytest.raises(ValueError):
        pub.publish("", {})
    with pytest.raises(ValueError):
        pub.publish("x" * 200, {})


@pytest.mark.parametrize(
    "parts",
    [
        [b"state"],
        [b"state", b"\xc1"],
        [b"state", msgpack.packb([1])],
        [b"state", msgpack.packb({"v": 1, "topic": "other", "seq": 1, "event": 0})],
        [b"state", msgpack.packb({"v": 1, "topic": "state", "seq": 0, "event": 0})],
        [b"state", msgpack.packb({"v": 1, "topic": "state", "seq": True, "event": 0})],
        [b"state", msgpack.packb({"v": 99, "topic": "state", "seq": 1, "event": 0})],
        [b"state", msgpack.packb({"v": 1, "topic": "state", "seq": 1})],
    ],
)
def test_bad_events_are_rejected(parts):
    with pytest.raises(ProtocolError):
        decode_event(parts)


def test_good_event_decodes():
    raw = protocol.pack({"v": 1, "topic": "state", "seq": 3, "event": {"a": 1}})
    event = decode_event([b"state", raw])
    assert (event.topic, event.seq, event.event) == ("state", 3, {"a": 1})


async def test_subscriber_skips_junk_from_the_wire_and_keeps_reading(short_dir):
    import zmq

    from shared.zmq_trio import open_socket

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
