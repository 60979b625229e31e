"""Idempotency keys of mutating ops: one effect per ``(op, key)``, a replayed answer for a retry.

A bounded LRU table of ``(op, key) -> (args digest, result)``. A key is reserved (in flight)
from ``begin`` until ``finish`` stores the result or ``abandon`` frees it after a failure, so a
retry that overtakes the first call is refused rather than run twice. A stored result lives
``ttl`` seconds after it finished; time is the caller's ``now`` (a monotonic clock).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import msgpack

from shared.operator.protocol import Code as DaemonCode
from shared.protocol import Code, RemoteError

KEY_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
KEY_FIELD = "idempotency_key"
CONFLICT = DaemonCode.IDEMPOTENCY_CONFLICT
IN_FLIGHT = DaemonCode.IDEMPOTENCY_IN_FLIGHT
TABLE_FULL = DaemonCode.IDEMPOTENCY_TABLE_FULL

_KEY = re.compile(KEY_PATTERN)


@dataclass
class _Entry:
    digest: str
    result: Any = None
    expires: float | None = None  # None while in flight


class Idempotency:
    def __init__(self, max_keys: int = 1024, ttl: float = 600.0) -> None:
        self._max_keys = max_keys
        self._ttl = ttl
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._entries)

    def begin(self, op: str, key: str, digest: str, now: float) -> Any | None:
        """The stored result of a finished call with these arguments (the caller marks it
        ``replayed``), or None after reserving the key for a new call."""
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise RemoteError(
                Code.INVALID_FIELD, f"field {KEY_FIELD!r} must match {KEY_PATTERN}", detail={"field": KEY_FIELD}
            )
        entry = self._entries.get((op, key))
        if entry is not None and _expired(entry, now):
            del self._entries[(op, key)]
            entry = None
        if entry is not None:
            if entry.digest != digest:
                raise RemoteError(
                    CONFLICT, "this idempotency key was used with other arguments", detail={KEY_FIELD: key}
                )
            if entry.expires is None:
                raise RemoteError(
                    IN_FLIGHT, "the first call with this idempotency key is still running", detail={KEY_FIELD: key}
                )
            self._entries.move_to_end((op, key))
            return entry.result
        self._make_room(now)
        self._entries[(op, key)] = _Entry(digest)
        return None

    def finish(self, op: str, key: str, result: Any, now: float) -> None:
        """Store the result of the call that ``begin`` reserved the key for."""
        if result is None:
            raise ValueError("a stored result must not be None: begin returns None for a new call")
        entry = self._in_flight(op, key)
        entry.result, entry.expires = result, now + self._ttl
        self._entries.move_to_end((op, key))

    def abandon(self, op: str, key: str) -> None:
        """The reserved call failed with no effect kept: the key may be used again."""
        self._in_flight(op, key)
        del self._entries[(op, key)]

    def _in_flight(self, op: str, key: str) -> _Entry:
        entry = self._entries.get((op, key))
        if entry is None or entry.expires is not None:
            raise ValueError(f"no call in flight for {op} with key {key!r}")
        return entry

    def _make_room(self, now: float) -> None:
        if len(self._entries) < self._max_keys:
            return
        for name in [name for name, entry in self._entries.items() if _expired(entry, now)]:
            del self._entries[name]
        if len(self._entries) < self._max_keys:
            return
        oldest = next((name for name, entry in self._entries.items() if entry.expires is not None), None)
        if oldest is None:
            raise RemoteError(
                TABLE_FULL, "too many calls with an idempotency key are in flight", detail={"limit": self._max_keys}
            )
        del self._entries[oldest]


def args_digest(args: dict[str, Any]) -> str:
    """The sha256 of the arguments minus the key, in a canonical msgpack form (map keys sorted),
    so the same call spelled in another key order is the same call."""
    body = {name: value for name, value in args.items() if name != KEY_FIELD}
    return hashlib.sha256(msgpack.packb(_canonical(body), use_bin_type=True)).hexdigest()


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        items = sorted(((_pack(k), k, _canonical(v)) for k, v in value.items()), key=lambda item: item[0])
        return {k: v for _, k, v in items}
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in value]
    return value


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _expired(entry: _Entry, now: float) -> bool:
    return entry.expires is not None and entry.expires <= now
