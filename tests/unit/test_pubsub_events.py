"""Event frames: topic bounds, bad events refused, a good one decoded."""

from __future__ import annotations

import msgpack
import pytest

from shared import protocol
from shared.protocol import ProtocolError
from shared.transport.pubsub import decode_event


def test_topic_bounds():
    from shared.transport.pubsub import Publisher

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
