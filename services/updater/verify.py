"""Verify: every profile's gateway against the code the update installed.

The matrix has a row per profile with a gateway (one that ran before the update and is gone
now is ``down``): the supervisor, the pid, the state, the commit the gateway runs and the
commit expected, a verdict, and its health (a probe turn on the expected commit:
``fleet.health``). After the commit point a ``stale`` or ``down`` row is a follow-up, never a
failure.

A row stays a ``MatrixRow`` from the verify that makes it until it is written into the
receipt, an event or the completion's result file (``to_dict``); a row read back from a
result file is taken only whole (``from_dict``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.discovery import GatewayRecord, discover
from fleet.health import HEALTH_STATES, MIN_HEALTHY_SECONDS
from fleet.health_probe import probe_health
from services.updater.errors import UpdateError
from shared import homes

CURRENT, STALE, UNKNOWN, DOWN = "current", "stale", "unknown", "down"


class MalformedRow(UpdateError):
    """A fleet row read back (a completion's result) that lacks a field or holds one of the wrong kind."""

    code = "fleet_row_malformed"


@dataclass(frozen=True)
class MatrixRow:
    """One profile's gateway as a verify saw it, against the commit expected of it."""

    profile: str
    supervisor: str | None  # None: no gateway runs
    pid: int | None
    state: str | None  # "down" when no gateway runs; None only in a row read back without one
    running: str | None  # the commit the gateway runs
    expected: str | None  # the commit it should run
    verdict: str
    source: str | None  # how discovery found it
    # {"state", "why"} (``fleet.health``); None for a profile with no gateway, or in a row read
    # back from a completion that predates health.
    health: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "supervisor": self.supervisor,
            "pid": self.pid,
            "state": self.state,
            "running": self.running,
            "expected": self.expected,
            "verdict": self.verdict,
            "source": self.source,
            "health": self.health,
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> MatrixRow:
        """The row ``data`` holds (``where`` names it in the error: ``result fleet[0]``). The
        profile, the verdict and both commits must be there; what only describes the gateway
        may be left out by another release's completion, never of the wrong kind."""
        if not isinstance(data, dict):
            raise MalformedRow(f"{where} must be an object", detail={"field": where})

        def field(name: str, check: Callable[[Any], bool], *, required: bool = False) -> Any:
            value = data.get(name)
            if (required and name not in data) or not check(value):
                said = "is missing or malformed" if required else "is malformed"
                raise MalformedRow(f"{where}.{name} {said}: {value!r}", detail={"field": name})
            return value

        return cls(
            profile=field("profile", _text, required=True),
            supervisor=field("supervisor", _str_or_none),
            pid=field("pid", _int_or_none),
            state=field("state", _str_or_none),
            running=field("running", _str_or_none, required=True),
            expected=field("expected", _str_or_none, required=True),
            verdict=field("verdict", _text, required=True),
            source=field("source", _str_or_none),
            health=field("health", _health_or_none),
        )


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _str_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _int_or_none(value: Any) -> bool:
    return value is None or type(value) is int


def _health_or_none(value: Any) -> bool:
    return value is None or (
        isinstance(value, dict)
        and set(value) == {"state", "why"}
        and value["state"] in HEALTH_STATES
        and _str_or_none(value["why"])
    )


def verdict(running: str | None, expected: str | None, *, alive: bool) -> str:
    if not alive:
        return DOWN
    if not running or not expected:
        return UNKNOWN
    return CURRENT if running == expected else STALE


def fleet_matrix(
    root: Path,
    expected_sha: str | None,
    *,
    expected_profiles: Iterable[str] = (),
    min_healthy: float = MIN_HEALTHY_SECONDS,
) -> list[MatrixRow]:
    """A row per profile that runs a gateway now or should (``expected_profiles``: those
    that ran one before the update); a profile that never had one is not listed. Each gateway
    that answered is asked for a probe turn, judged against ``expected_sha``."""
    found: dict[str, GatewayRecord] = {}
    for seen in discover(root):
        found.setdefault(seen.profile, seen)  # the best-informed record comes first
    health = probe_health(found.values(), expected_sha=expected_sha, min_healthy=min_healthy)
    wanted = set(found) | set(expected_profiles)
    rows = []
    for profile in [p for p in homes.list_profiles(root) if p in wanted]:
        record = found.get(profile)
        rows.append(
            MatrixRow(
                profile=profile,
                supervisor=record.supervisor if record else None,
                pid=record.pid if record else None,
                state=record.state if record else DOWN,
                running=record.code_sha if record else None,
                expected=expected_sha,
                verdict=verdict(record.code_sha if record else None, expected_sha, alive=record is not None),
                source=record.source if record else None,
                health=health[(profile, record.pid)].to_dict() if record else None,
            )
        )
    return rows


def owes_restart(row: MatrixRow, expected_profiles: Collection[str]) -> bool:
    """Whether a matrix row's gateway is owed a restart onto the new code: it should run the new
    code and is not seen to. A live gateway whose code nobody could read (one caught mid-start,
    say) is owed too: only a gateway seen on the expected commit is done; a down one is owed
    only if it should run (``expected_profiles``: those that ran one before the update)."""
    unread = row.verdict == UNKNOWN and row.expected is not None
    return row.verdict == STALE or unread or (row.verdict == DOWN and row.profile in expected_profiles)


def followups_for(
    matrix: Iterable[MatrixRow],
    *,
    expected_profiles: Collection[str],
    why: Mapping[str, str] | None = None,
) -> list[dict[str, str]]:
    """The owed fleet restarts, as the follow-ups of a receipt or a completion's result; ``why``
    (profile -> reason) says what went wrong with a profile's restart, when it is known."""
    why = why or {}
    return [
        {"step": "fleet-restart", "reason": _owed_reason(row, why.get(row.profile))}
        for row in matrix
        if owes_restart(row, expected_profiles)
    ]


def _owed_reason(row: MatrixRow, why: str | None) -> str:
    said = f"gateway {row.profile} is {row.verdict}"
    return f"{said}: {why}" if why else said
