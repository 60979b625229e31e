"""The fleet view's rows: what one gateway's answers and events say, as one row. No I/O.

A row is a plain dict (it goes out as a JSON line as it is). It moves only by what its
gateway said (a ``status`` answer, a ``state`` event, a probe turn judged) or by its going
away: ``down`` where this host's endpoint lock says no process holds it, ``offline`` where a
gateway on another host cannot be reached, ``refused`` where its handshake was refused. A
field an answer or event leaves out, or gives in a shape it may not have, keeps what the row
knew: a peer's bad frame never breaks the view.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet.health import UNKNOWN
from shared import mesh_hosts
from shared.gateways import ops
from shared.protocol import Code

CONNECTING, DOWN, OFFLINE, REFUSED, UNRESPONSIVE = "connecting", "down", "offline", "refused", "unresponsive"
# A local gateway's status call that ended so: its process is going, or gone.
_GOING = frozenset({Code.CONNECTION_RESET, Code.UNAVAILABLE})
CURRENT, STALE = "current", "stale"
LOCAL = mesh_hosts.LOCAL
HEADERS = ("PROFILE", "HOST", "PID", "STATE", "HEALTH", "CODE", "TURNS", "LAST TURN", "RESTARTS/1h", "OWED")


def blank(profile: str, host: str, *, own_install: bool = True) -> dict[str, Any]:
    """A gateway's row before anything was heard of it: of this install (on this host or on TCP
    elsewhere), or of another host's install (``shared.mesh_hosts``), whose code and debts are
    its own and not judged against this install's."""
    return {
        "profile": profile,
        "host": host,
        "own_install": own_install,
        "pid": None,
        "state": CONNECTING,
        "health": {"state": UNKNOWN, "why": "not asked yet"},
        "code_sha": None,
        "active_turns": None,
        "last_turn_seconds": None,
        "restarts_last_hour": None,
        "error": None,
    }


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return float(value)


def _state(value: object) -> str | None:
    return value if value in ops.STATES else None


def answered(row: Mapping[str, Any], answer: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` after its gateway's ``status`` answer: a process that answers is that process."""
    turns = answer.get("turns")
    restarts = answer.get("restarts")
    sha = answer.get("code_sha")
    pid = _count(answer.get("pid"))
    new = {
        **row,
        "pid": pid,
        "state": _state(answer.get("state")) or row["state"],
        "code_sha": sha if isinstance(sha, str) else None,
        "active_turns": _count(answer.get("active_turns")),
        "error": None,
    }
    if pid != row["pid"]:  # another process: what the last one said of itself is not its
        new["health"] = {"state": UNKNOWN, "why": "not asked yet"}
        new["last_turn_seconds"] = None
    if isinstance(turns, Mapping):
        new["last_turn_seconds"] = _seconds(turns.get("last_seconds"))
    if isinstance(restarts, Mapping):
        new["restarts_last_hour"] = _count(restarts.get("last_hour"))
    return new


def heard(row: Mapping[str, Any], event: object) -> dict[str, Any]:
    """``row`` after a ``state`` event of its gateway."""
    if not isinstance(event, Mapping):
        return dict(row)
    new = dict(row)
    state = _state(event.get("state"))
    if state is not None:
        new["state"] = state
    for field, key, rule in (
        ("active_turns", "active_turns", _count),
        ("last_turn_seconds", "last_turn_seconds", _seconds),
    ):
        if key in event and rule(event[key]) is not None:
            new[field] = rule(event[key])
    return new


def gone(row: Mapping[str, Any], state: str, error: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``row`` once its gateway is ``down``, ``offline`` or ``refused``: nothing it said holds."""
    why = {
        DOWN: "no process serves it",
        OFFLINE: "it could not be reached",
        REFUSED: "its handshake was refused",
        UNRESPONSIVE: "its process lives, and did not answer",
    }
    return {
        **blank(row["profile"], row["host"]),
        "state": state,
        "health": {"state": UNKNOWN, "why": why[state]},
        "restarts_last_hour": row["restarts_last_hour"],
        "error": dict(error) if error else None,
    }


def unanswered_here(row: Mapping[str, Any], code: str) -> dict[str, Any]:
    """``row`` once a gateway of this host, whose lock says its process lives, did not answer
    ``status``: one that is going away is ``down``; one that says nothing is ``unresponsive``."""
    if code in _GOING:
        return gone(row, DOWN)
    return {**gone(row, UNRESPONSIVE, {"code": code}), "pid": row["pid"]}


def judged(row: Mapping[str, Any], pid: int | None, health: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with the health of its process ``pid``: a verdict on a process gone since is dropped."""
    return {**row, "health": dict(health)} if pid == row["pid"] and pid is not None else dict(row)


def code(row: Mapping[str, Any], install_sha: str | None) -> str | None:
    """Whether the row's process runs the code now on this install's disk; None for another
    install's gateway, whose disk is not here."""
    if row["code_sha"] is None or install_sha is None or not row["own_install"]:
        return None
    return CURRENT if row["code_sha"] == install_sha else STALE


def _owed(row: Mapping[str, Any], owed: Mapping[str, Any]) -> Any:
    """What this install owes the row's gateway: nothing to another install's."""
    return owed.get(row["profile"]) if row["own_install"] else None


def for_json(row: Mapping[str, Any], install_sha: str | None, owed: Mapping[str, Any]) -> dict[str, Any]:
    return {**row, "code": code(row, install_sha), "owed": _owed(row, owed)}


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def cells(row: Mapping[str, Any], install_sha: str | None, owed: Mapping[str, Any]) -> tuple[str, ...]:
    """The row as the text table's cells, in ``HEADERS`` order."""
    state = row["state"] if row["error"] is None else f"{row['state']}: {row['error'].get('code')}"
    sha = row["code_sha"]
    verdict = code(row, install_sha)
    last = row["last_turn_seconds"]
    debt = _owed(row, owed)
    return (
        row["profile"],
        row["host"],
        _cell(row["pid"]),
        state,
        row["health"]["state"],
        f"{sha[:8]} {verdict}" if sha and verdict else _cell(sha and sha[:8]),
        _cell(row["active_turns"]),
        "-" if last is None else f"{last:.2f}s",
        _cell(row["restarts_last_hour"]),
        "-" if debt is None else f"restart ({debt.get('state', '?')})",
    )


def tally(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many rows are in each state, for the header line."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return counts
