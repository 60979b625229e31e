"""Offsets, watermarks and generations on the wire: canonical unsigned 64-bit decimal strings.

A string, because msgpack and JSON peers disagree about integers above 2**53; canonical
(no sign, no leading zero), so one value has exactly one spelling and cursors compare as sent.
"""

from __future__ import annotations

import re

from shared.protocol import Code, RemoteError

MAX = 2**64 - 1
_CANONICAL = re.compile(r"(0|[1-9][0-9]{0,19})")


def parse(value: object, field: str) -> int:
    """The int a wire value stands for; ``invalid_field`` naming ``field`` for anything else."""
    if isinstance(value, str) and _CANONICAL.fullmatch(value) and int(value) <= MAX:
        return int(value)
    raise RemoteError(
        Code.INVALID_FIELD,
        f"field {field!r} must be a canonical unsigned decimal string",
        detail={"field": field},
    )


def to_wire(value: int) -> str:
    """The canonical string of an in-range int; out of range is a bug in the caller, not input."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX:
        raise ValueError(f"not an unsigned 64-bit value: {value!r}")
    return str(value)
