"""Verify: every profile's gateway against the code the update installed.

The matrix has a row per profile (a profile whose gateway is not running is ``down``): the
supervisor, the pid, the state, the commit the gateway runs and the commit expected, and a
verdict. After the commit point a ``stale`` or ``down`` row is a follow-up, never a failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.gateway.fleet import discover
from shared import homes

CURRENT, STALE, UNKNOWN, DOWN = "current", "stale", "unknown", "down"


def verdict(running: str | None, expected: str | None, *, alive: bool) -> str:
    if not alive:
        return DOWN
    if not running or not expected:
        return UNKNOWN
    return CURRENT if running == expected else STALE


def fleet_matrix(root: Path, expected_sha: str | None, *, profiles: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per profile of the install (or per profile in ``profiles``)."""
    found = {}
    for record in discover(root):
        found.setdefault(record.profile, record)  # the best-informed record comes first
    rows = []
    for profile in profiles if profiles is not None else homes.list_profiles(root):
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
    """The owed fleet restarts: a gateway that should run the new code and does not."""
    owed = []
    for row in matrix:
        if row["verdict"] == STALE or (row["verdict"] == DOWN and row["profile"] in expected_profiles):
            owed.append({"step": "fleet-restart", "reason": f"gateway {row['profile']} is {row['verdict']}"})
    return owed
