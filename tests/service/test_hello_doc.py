"""The ``hello`` every service answers is the one docs/protocol.md describes to other clients."""

from __future__ import annotations

import re

import msgpack
import trio
import zmq

from shared.transport.service import HELLO
from tests.support.async_client import open_client
from tests.support.peers.echo_service import build_service
from tests.support.processes import ROOT


def _hello_fields() -> set[str]:
    """The fields the doc's first table under "## hello" names."""
    doc = (ROOT / "docs" / "protocol.md").read_text()
    section = doc[doc.index("\n## hello\n") :]
    table = section[section.index("| field |") :].split("\n\n", 1)[0]
    rows = table.splitlines()[2:]
    return {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}


async def test_hello_answers_the_documented_fields_and_every_reply_carries_v(nursery, endpoint):
    address, lock = endpoint
    service = build_service(address, lock)
    await nursery.start(service.serve)
    async with open_client(address) as client:
        hello = await client.call(HELLO)
    assert set(hello) == _hello_fields() == {"service", "protocol", "pid", "start_time"}
    assert hello["protocol"].keys() == {"min", "max"}

    def versions() -> list[int]:
        """What a raw peer reads: a junk frame, a frame that is not a map, and a hello."""
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        try:
            found = []
            for frame in (b"\xc1", msgpack.packb([1]), msgpack.packb({"v": 1, "id": "h", "op": "hello"})):
                sock.send(frame)
                assert sock.poll(5000, zmq.POLLIN), "no answer within 5 s"
                found.append(msgpack.unpackb(sock.recv())["v"])
            return found
        finally:
            sock.close(linger=0)

    assert await trio.to_thread.run_sync(versions) == [1, 1, 1]
    service.stop(grace=0)
