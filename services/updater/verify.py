"""Verify: every profile's gateway against the code the update installed.

The matrix has a row per profile with a gateway (one that ran before the update and is gone
now is ``down``): the supervisor, the pid, the state, the commit the gateway runs and the
commit expected, and a verdict. After the commit point a ``stale`` or ``down`` row is a
follow-up, never a failure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from fleet.discovery import GatewayRecord, discover
from shared import homes

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
    found: dict[str, GatewayRecord] = {}
    for seen in discover(root):
        found.setdefault(seen.profile, seen)  # the best-informed record comes first
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


def owes_restart(row: Mapping[str, Any], expected_profiles: Collection[str]) -> bool:
    """Whether a matrix row's gateway is owed a restart onto the new code: it should run the new
    code and is not seen to. A live gateway whose code nobody could read (one caught mid-start,
    say) is owed too: only a gateway seen on the expected commit is done; a down one is owed
    only if it should run (``expected_profiles``: those that ran one before the update)."""
    unread = row["verdict"] == UNKNOWN and row["expected"] is not None
    return row["verdict"] == STALE or unread or (row["verdict"] == DOWN and row["profile"] in expected_profiles)


def followups_for(
    matrix: Iterable[Mapping[str, Any]],
    *,
    expected_profiles: Collection[str],
    why: Mapping[str, str] | None = None,
) -> list[dict[str, str]]:
    """The owed fleet restarts, as the follow-ups of a receipt or a completion's result; ``why``
    (profile -> reason) says what went wrong with a profile's restart, when it is known."""
    why = why or {}
    return [
        {"step": "fleet-restart", "reason": _owed_reason(row, why.get(row["profile"]))}
        for row in matrix
        if owes_restart(row, expected_profiles)
    ]


def _owed_reason(row: Mapping[str, Any], why: str | None) -> str:
    said = f"gateway {row['profile']} is {row['verdict']}"
    return f"{said}: {why}" if why else said
