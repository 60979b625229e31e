"""What a committed update owes after each thing a run learns: pure decisions, no files.

The updater keeps two debts (``obligations``): a completion, and the gateways owed a restart
onto the new code. This module decides them from what the run saw, the way h11 decides a
connection's next state from an event: the move of the code, a verify's fleet matrix, a
completion's correlated result, a completion that never delivered one. ``debts`` writes the
decisions down and reports them in the receipt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.updater import obligations
from services.updater.stages import BYTECODE
from services.updater.verify import DOWN, STALE, MatrixRow, followups_for, owes_restart

COMPLETION = "completion"
FLEET_RESTART = "fleet-restart"

Part = dict[str, Any]  # one gateway's debt: ``obligations.owed_part``


@dataclass(frozen=True)
class FleetDebt:
    """Exactly what is owed of the fleet now, and the receipt's follow-up for it (None: nothing)."""

    parts: dict[str, Part] = field(default_factory=dict)
    followup: str | None = None


@dataclass(frozen=True)
class ResultDebt:
    """What a completion's result leaves owed."""

    followups: list[tuple[str, str]]  # (step, reasons): one per step it owes, in its order
    completion_owed: bool  # its tail (dependencies, migrations, ...) is still owed
    verified: bool  # it verified the fleet, so its matrix says which gateways are owed


def owed_at_move(profiles: Iterable[str], after: str, update_id: str) -> dict[str, Part]:
    """The code moved to ``after``: every gateway that should run it is owed a restart onto it."""
    why = f"the code moved to {after[:12]}; not restarted yet"
    return {profile: obligations.owed_part(after, obligations.NOT_RESTARTED, why, update_id) for profile in profiles}


def owed_after_verify(
    matrix: Sequence[MatrixRow],
    expected: Iterable[str],
    update_id: str,
    why: Mapping[str, str] | None = None,
) -> FleetDebt:
    """A verify saw the whole fleet: exactly the gateways it found wanting are owed (of
    ``expected``, the profiles whose gateway should run: a down one is owed only if expected).
    ``why`` (``failed_restarts``) says what went wrong with a profile's restart, when known."""
    wanted = set(expected)
    owed = [row for row in matrix if owes_restart(row, wanted)]
    parts = {row.profile: _part(row, update_id) for row in owed}
    reasons = [entry["reason"] for entry in followups_for(owed, expected_profiles=wanted, why=why)]
    return FleetDebt(parts, "; ".join(reasons) or None)


def _part(row: MatrixRow, update_id: str) -> Part:
    if row.verdict == STALE:
        return obligations.owed_part(row.expected, obligations.STALE, f"runs {str(row.running)[:12]}", update_id)
    if row.verdict == DOWN:
        return obligations.owed_part(row.expected, obligations.DOWN, "down", update_id)
    why = "alive, but what it runs could not be read"
    return obligations.owed_part(row.expected, obligations.NOT_RESTARTED, why, update_id)


def owed_after_result(result: Mapping[str, Any]) -> ResultDebt:
    """What a correlated completion result (``completion_contract.check_result``'s shape) owes.
    The completion stays owed while anything but the fleet restart or the bytecode is (a
    dependency sync or a migration that failed): the next update runs it again. Bytecode not
    written costs start-up time, never correctness: it is reported, not owed again."""
    owed: dict[str, list[str]] = {}
    for entry in result.get("followups", []):
        owed.setdefault(entry["step"], []).append(entry["reason"])
    return ResultDebt(
        followups=[(step, "; ".join(reasons)) for step, reasons in owed.items()],
        completion_owed=bool(set(owed) - {FLEET_RESTART, BYTECODE.name}),
        verified=any(step["name"] == "verify" for step in result.get("steps", [])),
    )


def failed_restarts(result: Mapping[str, Any]) -> dict[str, str]:
    """profile -> why its restart failed, of a completion result's restart outcomes."""
    return {r["profile"]: r["reason"] for r in result.get("restart", []) if not r.get("ok") and r.get("reason")}


def owed_unfinished(why: str, fleet: Mapping[str, Part]) -> list[tuple[str, str]]:
    """No completion delivered (``why``): it is owed, and so is every gateway restart it was to do."""
    followups = [(COMPLETION, why)]
    if fleet:
        expected = ", ".join(sorted({str(part["expected"])[:12] for part in fleet.values()}))
        followups.append((FLEET_RESTART, f"gateways {', '.join(fleet)} are not restarted onto {expected}"))
    return followups


def wanting_restart(matrix: Sequence[MatrixRow], fleet: Mapping[str, Part]) -> set[str]:
    """The gateways an already-up-to-date update restarts: the stale ones, and those owed a
    restart that are down, so each kind reports them (none starts a down gateway: it stays owed
    until an operator starts it)."""
    return {row.profile for row in matrix if row.verdict == STALE or (row.verdict == DOWN and row.profile in fleet)}
