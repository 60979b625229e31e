"""The respawn-storm breaker: a gateway that keeps dying and being restarted backs off.

Each start is recorded in the profile's home and waits what ``shared.restart_storm`` says it
owes before it serves, so the supervisor's restart loop does not spin the machine.

A restart that was asked for (a drain for an update, a re-exec) is not a storm: the gateway
marks its record ``planned`` as it leaves, and the start that follows is not counted.
"""

from __future__ import annotations

from pathlib import Path

from shared.files import update_json
from shared.restart_storm import WINDOW, delay_for


def record_start(path: Path, now: float) -> float:
    """Add this start to the record at ``path`` and return the delay it owes. The start right
    after a planned restart is not added and owes nothing."""
    delay = [0.0]

    def add(record: dict) -> dict:
        kept = _recent(record, now)
        if record.get("planned") is not True:
            kept.append(now)
            delay[0] = delay_for(kept, now)
        return {"starts": kept}  # the mark is spent either way

    update_json(path, add, default={"starts": []})
    return delay[0]


def record_planned_exit(path: Path, now: float) -> None:
    """Mark the record at ``path``: this process is leaving for a restart that was asked for."""
    update_json(path, lambda record: {"starts": _recent(record, now), "planned": True}, default={"starts": []})


def _recent(record: dict, now: float) -> list[float]:
    starts = record.get("starts")
    if not isinstance(starts, list):  # a hand-edited record: its starts are forgotten
        return []
    return [t for t in starts if isinstance(t, (int, float)) and now - WINDOW < t <= now]
