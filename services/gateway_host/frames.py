"""The pipe between the gateway host and its fork server: one JSON object a line, each at most
``MAX_FRAME`` bytes, checked on arrival. Pure: bytes in, frames or typed errors out.

The host asks ``{"op": "fork", "profile": NAME}``; the fork server says ``{"event": "ready",
"pid", "code_sha"}`` once it has imported the gateway's code, ``{"event": "forked", "profile",
"pid"}`` or ``{"event": "refused", "code", "message", "field"}`` to each ask, and ``{"event":
"exited", "profile", "pid", "code"}`` as each of its gateways is reaped (``code``: the exit
status, or minus the signal that killed it). A line too long is refused and skipped up to its
end, so one bad frame never shifts the ones after it.
"""

from __future__ import annotations

import json
from typing import Any

from fleet.supervisors.errors import SupervisorError
from shared import homes

MAX_FRAME = 1024
FORK = "fork"
READY, FORKED, REFUSED, EXITED = "ready", "forked", "refused", "exited"
# Each event's fields and their types (beside "event").
_EVENTS: dict[str, dict[str, type | tuple[type, ...]]] = {
    READY: {"pid": int, "code_sha": (str, type(None))},
    FORKED: {"profile": str, "pid": int, "start_time": int},
    REFUSED: {"code": str, "message": str, "field": (str, type(None))},
    EXITED: {"profile": str, "pid": int, "code": int},
}


class FrameInvalid(SupervisorError):
    """A frame on the fork server's pipe that is not what the other side may send."""

    code = "fork_frame_invalid"


def _invalid(field: str, why: str) -> FrameInvalid:
    return FrameInvalid(f"fork server frame: {field} {why}", detail={"field": field})


class Lines:
    """Splits a byte stream into frames (lines without their newline); a line longer than
    ``MAX_FRAME`` comes out as one FrameInvalid, its bytes dropped up to its newline."""

    def __init__(self) -> None:
        self._held = b""
        self._skipping = False

    def feed(self, data: bytes) -> list[bytes | FrameInvalid]:
        out: list[bytes | FrameInvalid] = []
        self._held += data
        while True:
            end = self._held.find(b"\n")
            if end < 0:
                if len(self._held) >= MAX_FRAME:
                    if not self._skipping:
                        out.append(_invalid("frame", f"is longer than {MAX_FRAME} bytes"))
                    self._skipping, self._held = True, b""
                return out
            line, self._held = self._held[:end], self._held[end + 1 :]
            if self._skipping:
                self._skipping = False
            elif len(line) >= MAX_FRAME:
                out.append(_invalid("frame", f"is longer than {MAX_FRAME} bytes"))
            else:
                out.append(line)


def encode(frame: dict[str, Any]) -> bytes:
    data = json.dumps(frame, separators=(",", ":")).encode("utf-8") + b"\n"
    if len(data) > MAX_FRAME:
        raise ValueError(f"a frame of {len(data)} bytes is over {MAX_FRAME}")
    return data


def _object(line: bytes) -> dict[str, Any]:
    try:
        frame = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _invalid("frame", "is not a JSON object in UTF-8") from None
    if not isinstance(frame, dict):
        raise _invalid("frame", "is not a JSON object")
    return frame


def parse_request(line: bytes) -> str:
    """The profile a fork request names; FrameInvalid naming the field that is wrong."""
    frame = _object(line)
    extra = sorted(set(frame) - {"op", "profile"})
    if extra:
        raise _invalid(str(extra[0]), "is not a field of a request")
    if frame.get("op") != FORK:
        raise _invalid("op", f"must be {FORK!r}")
    try:
        return homes.validate_profile_name(frame.get("profile"))
    except homes.InvalidProfileName as exc:
        raise _invalid("profile", exc.message) from None


def parse_event(line: bytes) -> dict[str, Any]:
    """An event of the fork server, each field of its type; FrameInvalid otherwise."""
    frame = _object(line)
    kind = frame.get("event")
    fields = _EVENTS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise _invalid("event", f"must be one of {sorted(_EVENTS)}")
    for name, kind in fields.items():
        value = frame.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _invalid(name, "is missing or of the wrong type")
    return frame
