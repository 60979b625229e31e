"""The respawn-storm breaker: a gateway that keeps dying and being restarted backs off.

More than ``MAX_STARTS`` starts within ``WINDOW`` seconds means something is wrong that a
restart will not fix; each further start waits longer (doubling, capped) before it serves,
so the supervisor's restart loop does not spin the machine.
"""

from __future__ import annotations

from pathlib import Path

from shared.files import update_json

WINDOW = 120.0
MAX_STARTS = 5
MAX_DELAY = 60.0


def delay_for(starts: list[float], now: float) -> float:
    """Seconds to wait before serving, given the start times in the window (this one included)."""
    recent = [t for t in starts if now - WINDOW < t <= now]
    excess = len(recent) - MAX_STARTS
    return 0.0 if excess <= 0 else min(MAX_DELAY, float(2 ** (excess - 1)))


def record_start(path: Path, now: float) -> float:
    """Add this start to the record at ``path`` and return the delay it owes."""
    starts: list[float] = []

    def add(record: dict) -> dict:
        kept = [t for t in record.get("starts", []) if isinstance(t, (int, float)) and now - WINDOW < t <= now]
        kept.append(now)
        starts[:] = kept
        return {"starts": kept}

    update_json(path, add, default={"starts": []})
    return delay_for(starts, now)
