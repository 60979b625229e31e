"""Read a zmq socket monitor's messages without ``zmq.utils.monitor`` (it imports asyncio).

A monitor message is two frames: 6 bytes (event number, uint16; value, uint32; native byte
order, as libzmq writes them) and the endpoint. Anything else is a ``BadMonitorFrame``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from shared.errors import TransportError

_HEAD = struct.Struct("=HI")


class BadMonitorFrame(TransportError):
    code = "bad_monitor_frame"


def parse(parts: Sequence[bytes]) -> tuple[int, int, str]:
    """(event, value, endpoint) of one monitor message."""
    if len(parts) != 2 or not isinstance(parts[0], bytes) or len(parts[0]) != _HEAD.size:
        raise BadMonitorFrame(f"a monitor message is 2 frames, the first {_HEAD.size} bytes")
    event, value = _HEAD.unpack(parts[0])
    return event, value, bytes(parts[1]).decode("utf-8", "replace")
