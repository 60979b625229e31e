"""``session.wait``: its arguments, why a wait ends, and the caps on how many may wait at once.

Pure: the app holds the clock and the events. A timeout is a result the caller gives once no
reason holds by the deadline; ``wait_reason`` never decides it.

``updated_at`` values are RFC 3339 UTC timestamps of one fixed width, with nanoseconds and a
``Z`` (``2026-08-03T12:00:00.000000001Z``), so comparing the strings compares the instants.
An ``after_updated_at`` in any other spelling is refused rather than compared wrongly.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from shared.operator import protocol as daemon_protocol
from shared.operator import u64
from shared.operator.protocol import WAIT_MAX_MS
from shared.protocol import Code, RemoteError

PER_SESSION_WAITERS = 8
TOTAL_WAITERS = 128

STATES = frozenset(daemon_protocol.STATES)
ACTIVITIES = frozenset(daemon_protocol.ACTIVITIES)
REASONS = (
    "runtime_changed",
    "state_matched",
    "activity_matched",
    "output_advanced",
    "terminal_changed",
    "session_updated",
    "timeout",
)
WAITER_LIMIT = daemon_protocol.Code.WAITER_LIMIT

_UPDATED_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{9}Z")


@dataclass(frozen=True)
class Snapshot:
    """What a wait compares against: one session as it is now."""

    runtime: tuple[str | None, int]  # (worker_instance_id, runtime_generation)
    state: str
    activity: str | None
    output_end: int
    watermark: int
    updated_at: str


@dataclass(frozen=True)
class WaitParams:
    runtime: tuple[str, int] | None
    states: frozenset[str] | None
    activities: frozenset[str] | None
    after_output_offset: int | None
    after_terminal_watermark: int | None
    after_updated_at: str | None
    timeout_ms: int


def wait_params(args: dict[str, Any], now: Snapshot) -> WaitParams:
    """The checked predicates of one wait (types already checked by the op's spec).

    With no predicate at all the wait ends on any change to the session: ``after_updated_at``
    defaults to the session's ``updated_at`` now.
    """
    timeout_ms = args.get("timeout_ms")
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 1 <= timeout_ms <= WAIT_MAX_MS:
        raise _invalid("timeout_ms", f"field 'timeout_ms' must be an int from 1 to {WAIT_MAX_MS}")
    params = WaitParams(
        runtime=_runtime(args),
        states=_words(args, "states", STATES),
        activities=_words(args, "activities", ACTIVITIES),
        after_output_offset=_offset(args, "after_output_offset"),
        after_terminal_watermark=_offset(args, "after_terminal_watermark"),
        after_updated_at=_updated_at(args),
        timeout_ms=timeout_ms,
    )
    cursors = (params.after_output_offset, params.after_terminal_watermark)
    if params.runtime is None and any(c is not None for c in cursors):
        # A cursor counts within one runtime: without it an old offset waits out the new one.
        raise _invalid("worker_instance_id", "an output or terminal cursor needs the runtime it was returned with")
    predicates = (
        params.runtime,
        params.states,
        params.activities,
        params.after_output_offset,
        params.after_terminal_watermark,
        params.after_updated_at,
    )
    if all(p is None for p in predicates):
        return replace(params, after_updated_at=now.updated_at)
    return params


def wait_reason(params: WaitParams, now: Snapshot) -> str | None:
    """The first reason, in ``REASONS`` order, that holds now; None while none does."""
    if params.runtime is not None and params.runtime != now.runtime:
        return "runtime_changed"
    if params.states is not None and now.state in params.states:
        return "state_matched"
    if params.activities is not None and now.activity in params.activities:
        return "activity_matched"
    if params.after_output_offset is not None and now.output_end > params.after_output_offset:
        return "output_advanced"
    if params.after_terminal_watermark is not None and now.watermark > params.after_terminal_watermark:
        return "terminal_changed"
    if params.after_updated_at is not None and now.updated_at > params.after_updated_at:
        return "session_updated"
    return None


class Waiters:
    """How many waits are open, per session and in all; the app enters and leaves in try/finally."""

    def __init__(self, per_session: int = PER_SESSION_WAITERS, total: int = TOTAL_WAITERS) -> None:
        self._per_session = per_session
        self._total = total
        self._open: Counter[str] = Counter()

    def enter(self, session_id: str) -> None:
        if self._open[session_id] >= self._per_session:
            raise _limit(self._per_session, "session")
        if self._open.total() >= self._total:
            raise _limit(self._total, "daemon")
        self._open[session_id] += 1

    def leave(self, session_id: str) -> None:
        if self._open[session_id] <= 0:
            raise ValueError(f"no open wait on session {session_id!r}")
        self._open[session_id] -= 1
        if not self._open[session_id]:
            del self._open[session_id]

    def count(self, session_id: str | None = None) -> int:
        return self._open.total() if session_id is None else self._open[session_id]


def _runtime(args: dict[str, Any]) -> tuple[str, int] | None:
    instance, generation = args.get("worker_instance_id"), args.get("runtime_generation")
    if instance is None and generation is None:
        return None
    if instance is None or generation is None:
        missing = "worker_instance_id" if instance is None else "runtime_generation"
        raise _invalid(missing, "fields 'worker_instance_id' and 'runtime_generation' come as a pair")
    if not isinstance(instance, str) or not instance:
        raise _invalid("worker_instance_id", "field 'worker_instance_id' must be a non-empty string")
    return (instance, u64.parse(generation, "runtime_generation"))


def _words(args: dict[str, Any], field: str, known: frozenset[str]) -> frozenset[str] | None:
    value = args.get(field)
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise _invalid(field, f"field {field!r} must be a non-empty list")
    if any(not isinstance(word, str) or word not in known for word in value):
        raise _invalid(field, f"field {field!r} may hold only {', '.join(sorted(known))}")
    if len(set(value)) != len(value):
        raise _invalid(field, f"field {field!r} names a value twice")
    return frozenset(value)


def _offset(args: dict[str, Any], field: str) -> int | None:
    value = args.get(field)
    return None if value is None else u64.parse(value, field)


def _updated_at(args: dict[str, Any]) -> str | None:
    value = args.get("after_updated_at")
    if value is None:
        return None
    if not isinstance(value, str) or not _UPDATED_AT.fullmatch(value):
        raise _invalid("after_updated_at", "field 'after_updated_at' must be an RFC 3339 UTC time with nanoseconds")
    return value


def _invalid(field: str, message: str) -> RemoteError:
    return RemoteError(Code.INVALID_FIELD, message, detail={"field": field})


def _limit(limit: int, scope: str) -> RemoteError:
    return RemoteError(
        WAITER_LIMIT, f"too many waits are open ({limit} per {scope})", detail={"limit": limit, "scope": scope}
    )
