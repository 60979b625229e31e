"""Whether an update restarts a systemd unit, and why a unit failed: pure rules over what
``systemctl show`` says of it. No I/O.

An update restarts what runs. A unit that is down stays down: an operator who stopped it
(``hermes gateway stop``) meant it, so it is left so and said to be; a unit that failed
(a gateway that refused its configuration and exited 78, say) is reported, with systemd's
``Result`` and ``ExecMainStatus`` and the gateway's own last words, and not started, by this
update and by every later one, until an operator starts it again. The decision is made from
the unit's shown state, never from whether ``list-units`` lists it: systemd unloads a stopped
unit nothing references, so that listing differs for the same operator action.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.redaction import redact_text

RESTART, DOWN, FAILED = "restart", "down", "failed"
PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "ExecMainStatus", "UnitFileState")
NOT_STARTED = "down; not started"
# The states in which the unit runs a gateway, or systemd is bringing one up by itself.
_UP = frozenset({"active", "activating", "reloading"})
# How much of the gateway's own words a receipt keeps.
SAID_LIMIT = 500


@dataclass(frozen=True)
class UnitState:
    verdict: str  # RESTART, DOWN (left down, and that is fine) or FAILED (left down, and reported)
    why: str | None = None


def judge_unit(shown: Mapping[str, str]) -> UnitState:
    """What an update does with the unit ``shown`` describes (``PROPERTIES``)."""
    load, active = shown.get("LoadState", ""), shown.get("ActiveState", "")
    if load == "masked":
        return UnitState(DOWN, f"{NOT_STARTED}: the unit is masked")
    if load != "loaded":
        return UnitState(FAILED, f"the unit is not loaded ({load or 'no LoadState'}); not started")
    if active in _UP:
        return UnitState(RESTART)
    if active == "failed":
        return UnitState(FAILED, "the unit failed; not started")
    # inactive (stopped, or never started since it was installed), or being stopped now
    return UnitState(
        DOWN, f"{NOT_STARTED} (ActiveState={active or '-'}, UnitFileState={shown.get('UnitFileState') or '-'})"
    )


def failure(shown: Mapping[str, str], said: str | None = None) -> dict[str, Any]:
    """The restart outcome's account of a failed unit: systemd's ``Result`` and the main
    process's exit status, and ``said``, the gateway's own last line (redacted, cut short)."""
    status = shown.get("ExecMainStatus", "")
    return {
        "result": shown.get("Result") or None,
        "exit_status": int(status) if status.isdigit() else None,
        "gateway": None if not said else redact_text(said.strip())[:SAID_LIMIT],
    }


def describe(account: Mapping[str, Any]) -> str:
    """``failure``'s account as one line: ``Result=exit-code, ExecMainStatus=78; the gateway said: ...``."""
    text = f"Result={account.get('result') or '-'}, ExecMainStatus={_dash(account.get('exit_status'))}"
    said = account.get("gateway")
    return f"{text}; the gateway said: {said}" if said else text


def _dash(value: object) -> object:
    return "-" if value is None else value
