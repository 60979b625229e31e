"""How often a profile's gateway was started again: the record its state file carries from one
process to the next, and the count of the last hour. No I/O: ``state`` reads and writes it.

A start with a predecessor (a state file of the profile was there) is a restart, whatever ended
the one before: a crash, a planned exit, a re-exec. The record keeps a total and the times of
the newest ``KEPT`` restarts, so ``last_hour`` says at most ``KEPT``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

KEPT = 64
HOUR = 3600.0


class Restarts(NamedTuple):
    total: int = 0
    times: tuple[float, ...] = ()  # the newest KEPT restarts (unix seconds), oldest first

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "times": list(self.times)}

    def summary(self, now: float) -> dict[str, int]:
        return {"total": self.total, "last_hour": last_hour(self.times, now)}


# Not a HermesError: no user sees it; the gateway starts counting afresh and logs why.
class Unreadable(ValueError):
    """Not a restart record."""


def from_record(value: object) -> Restarts:
    """The record as a state file holds it (``to_dict``); ``Unreadable`` for any other shape."""
    if not isinstance(value, dict):
        raise Unreadable("not an object")
    total, times = value.get("total"), value.get("times")
    if type(total) is not int or total < 0:
        raise Unreadable(f"total {total!r} is not a count")
    if not isinstance(times, list) or not all(_time(t) for t in times):
        raise Unreadable("times is not a list of times")
    return Restarts(total, tuple(float(t) for t in times[-KEPT:]))


def after_start(previous: Restarts | None, now: float) -> Restarts:
    """The record of a start at ``now``: ``previous`` is its predecessor's (an empty one when that
    was unreadable), None when it had none (the profile's first start)."""
    if previous is None:
        return Restarts()
    return Restarts(previous.total + 1, (*previous.times, now)[-KEPT:])


def last_hour(times: tuple[float, ...] | list[float], now: float) -> int:
    """How many of ``times`` fall in the hour up to ``now`` (a time ahead of the clock, set back
    since, is not counted)."""
    return sum(1 for t in times if now - HOUR < t <= now)


def _time(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
