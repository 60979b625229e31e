"""Verify: every profile's gateway against the code the update installed.

The matrix has a row per profile with a gateway (one that ran before the update and is gone
now is ``down``): the
supervisor, the pid, the state, the commit the gateway runs and the commit expected, and a
verdict. After the commit point a ``stale`` or ``down`` row is a follow-up, never a failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shared import homes
from shared.gateways.discovery import discover

CURRENT, STALE, UNKNOWN, DOWN = "current", "stale", "unknown", "down"


def verdict(running: str | None, expected: str | None, *, alive: bool) -> str:
    if not alive:
        return DOWN
    if not running or not expected:
        return UNKNOWN
    return CURRENT if running == expected else STALE


def fleet_matrix(
    root: Path, expected_sha: str | None, *, expected_profiles: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """A row per profile that runs a gateway now or should (``expected_profiles``: those
    that ran one before the update); a profile that never had one is not listed."""
    found = {}
    for record in discover(root):
        found.setdefault(record.profile, record)  # the best-informed record comes first
    wanted = set(found) | set(expected_profiles)
    rows = []
    for profile in [p for p in homes.list_profiles(root) if p in wanted]:
        record = found.get(profile)
        rows.append(
            {
                "profile": profile,
                "supervisor": record.supervisor if record else None,
                "pid": record.pid if record else None,
                "state": record.state if record else "down",
                "running": record.code_sha if record else None,
                "expected": expected_sha,
                "verdict": verdict(record.code_sha if record else None, expected_sha, alive=record is not None),
                "source": record.source if record else None,
            }
        )
    return rows


def followups_for(matrix: list[dict[str, Any]], *, expected_profiles: set[str]) -> list[dict[str, str]]:
    """The owed fleet restarts: a gateway that should run the new code and is not seen to. A
    live gateway whose code nobody could read (one caught mid-start, say) is owed too: only a
    gateway seen on the expected commit is done."""
    owed = []
    for row in matrix:
        unread = row["verdict"] == UNKNOWN and row["expected"] is not None
        if row["verdict"] == STALE or unread or (row["verdict"] == DOWN and row["profile"] in expected_profiles):
            owed.append({"step": "fleet-restart", "reason": f"gateway {row['profile']} is {row['verdict']}"})
    return owed
