"""Commit-confirm: an update that moved the code rolls itself back unless confirmed in time.

``hermes update --confirm-within DURATION`` arms, just ahead of the commit point, the
obligation ``<root>/obligations/confirm-pending.json``: the update, the commits before and
after, and a wall-clock deadline (the move's time plus DURATION; wall-clock, so that it
outlives a reboot). ``hermes update --confirm`` before the deadline removes it. Once the
deadline has passed a timer (``confirm_timer``) starts a rollback of that update; the rollback
clears the obligation at its own commit point, or, refused before it, marks it ``failed``
with why, so that no timer starts it again and every command tells the operator.

The file is the only truth. The timers keep no state, so any of them can be killed, restarted
or started twice: the update lock lets one rollback run at a time, and a confirm (only before
the deadline) and a rollback (only after it) can never both take the same obligation. Any other
move of the tree voids it; while one is armed, an update that would move the code forward is
refused.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.updater.errors import UpdateError
from services.updater.obligations import SCHEMA, confirm_path, load, locked_change, now_text, put
from services.updater.update_id import InvalidUpdateId, validate_update_id
from shared.files import StateFileCorrupt
from shared.version import is_commit_sha

ARMED, FAILED = "armed", "failed"
UNREADABLE = "unreadable"  # a file of another shape: never a record on disk


class NothingToConfirm(UpdateError):
    """``--confirm`` with no update waiting for one."""

    code = "confirm_nothing_pending"


class ConfirmTooLate(UpdateError):
    """``--confirm`` after the deadline: the rollback is due or under way."""

    code = "confirm_too_late"


def read_confirm(root: Path) -> dict[str, Any] | None:
    """``{schema, update_id, armed_at, deadline, within, before, after, state, reason}`` while a
    confirm is owed, else None; a file of another shape raises ``StateFileCorrupt``."""
    path = confirm_path(root)
    data = load(path)
    if data is None:
        return None
    deadline, within = data.get("deadline"), data.get("within")
    shaped = (
        _is_update_id(data.get("update_id"))
        and is_commit_sha(data.get("before"))
        and is_commit_sha(data.get("after"))
        and isinstance(deadline, (int, float))
        and math.isfinite(deadline)
        and isinstance(within, (int, float))
        and data.get("state") in (ARMED, FAILED)
        and (data.get("reason") is None or isinstance(data.get("reason"), str))
    )
    if not shaped:
        raise StateFileCorrupt(path, "not a pending confirm (update_id, before, after, deadline, state)")
    return data


def _is_update_id(value: object) -> bool:
    """An id as updates are named: it reaches a timer's command line, so never an option."""
    try:
        validate_update_id(value)
    except InvalidUpdateId:
        return False
    return True


def arm(root: Path, *, update_id: str, before: str, after: str, within: float, now: float | None = None) -> None:
    """Update ``update_id`` moves the tree ``before`` -> ``after`` now: it is rolled back unless
    confirmed within ``within`` seconds."""
    moment = time.time() if now is None else now
    record = {
        "schema": SCHEMA,
        "update_id": update_id,
        "armed_at": now_text(),
        "deadline": moment + within,
        "within": within,
        "before": before,
        "after": after,
        "state": ARMED,
        "reason": None,
    }
    path = confirm_path(root)
    locked_change(path, lambda: put(path, record))


def _change(root: Path, change: Callable[[dict[str, Any] | None], Any]) -> Any:
    """``change(record)`` under the file's lock, with the record read there; what it returns."""
    path = confirm_path(root)
    answer: list[Any] = []
    locked_change(path, lambda: answer.append(change(read_confirm(root))))
    return answer[0]


def withdraw(root: Path, update_id: str) -> None:
    """Update ``update_id`` did not move the tree after all: what it armed goes."""
    _change(root, lambda record: put(confirm_path(root), None) if record and record["update_id"] == update_id else None)


def clear(root: Path) -> dict[str, Any] | None:
    """The tree moved away from the armed commit (a rollback, a revert): nothing is owed; the
    record that was, if any (``unreadable``, below, for a file of another shape: it goes too)."""
    path = confirm_path(root)
    answer: list[dict[str, Any] | None] = []

    def change() -> None:
        answer.append(owed_confirm(root))
        put(path, None)

    locked_change(path, change)
    return answer[0]


def unreadable(exc: StateFileCorrupt) -> dict[str, Any]:
    """What stands for a confirm file of another shape: no update, no deadline; ``state``
    ``unreadable`` and why. Nothing fires for it: only the operator settles it."""
    return {
        "update_id": None,
        "deadline": None,
        "before": None,
        "after": None,
        "state": UNREADABLE,
        "reason": exc.message,
    }


def owed_confirm(root: Path) -> dict[str, Any] | None:
    """The confirm owed as reports show it: its record, ``unreadable``'s for a file of another
    shape, or None."""
    try:
        return read_confirm(root)
    except StateFileCorrupt as exc:
        return unreadable(exc)


def unreadable_hint(reason: str) -> str:
    """What every command and a refused update say of an unreadable confirm file."""
    return (
        f"{reason}: `hermes update --confirm` removes it and keeps the code as it is, "
        "`hermes update --rollback` goes back"
    )


def confirm_update(root: Path, now: float | None = None) -> dict[str, Any]:
    """``hermes update --confirm``: the armed update stays; its record. Refused when nothing is
    armed, or when its deadline has passed (its rollback is due, or under way). An unreadable
    file is removed (the code stays as it is, which is what a confirm asks); its ``unreadable``
    record is returned."""
    moment = time.time() if now is None else now
    path = confirm_path(root)
    answer: list[dict[str, Any]] = []

    def take() -> None:
        try:
            record = read_confirm(root)
        except StateFileCorrupt as exc:
            put(path, None)
            answer.append(unreadable(exc))
            return
        answer.append(change(record))

    def change(record: dict[str, Any] | None) -> dict[str, Any]:
        if record is None:
            raise NothingToConfirm("no update is waiting for a confirm", detail={"root": str(root)})
        if due(record, moment):
            raise ConfirmTooLate(
                f"too late: update {record['update_id']}'s deadline passed {moment - record['deadline']:.0f}s ago, "
                f"so it rolls back to {record['before'][:12]}",
                detail=_public(record),
            )
        put(path, None)
        return record

    locked_change(path, take)
    return answer[0]


def claim(root: Path, update_id: str, now: float | None = None) -> dict[str, Any] | None:
    """A rollback started for ``update_id``'s deadline: the record it acts on, or None when that
    update is no longer owed one (confirmed, voided, not yet due, or failed before)."""
    moment = time.time() if now is None else now
    record = read_confirm(root)
    if record is None or record["update_id"] != update_id or not due(record, moment):
        return None
    return record


def mark_failed(root: Path, update_id: str, reason: str) -> None:
    """The deadline's rollback of ``update_id`` was refused or failed before its commit point:
    no timer starts it again; every command says why until the operator acts."""

    def change(record: dict[str, Any] | None) -> None:
        if record is not None and record["update_id"] == update_id:
            put(confirm_path(root), {**record, "state": FAILED, "reason": reason})

    _change(root, change)


def settled(record: dict[str, Any], head: str | None) -> bool:
    """Whether the tree at ``head`` owes ``record`` nothing: it is where a rollback would take it
    (the armed update died before its move, or a rollback died after its own). Asked under the
    update lock only, so the update that armed it is not moving the tree meanwhile."""
    return head == record["before"] != record["after"]


def due(record: dict[str, Any], now: float) -> bool:
    """Whether ``record``'s rollback should run now: armed, and its deadline passed."""
    return record["state"] == ARMED and now >= record["deadline"]


def _public(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in ("update_id", "deadline", "before", "after", "state", "reason")}


def deadline_text(record: dict[str, Any]) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(record["deadline"]))


def pending_line(record: dict[str, Any], now: float) -> str:
    """What every command says while ``record`` is owed and not yet due, or failed."""
    who = f"update {record['update_id']}"
    if record["state"] == FAILED:
        return (
            f"⚠ {who} was not confirmed and its rollback failed ({record['reason']}): "
            "`hermes update --rollback` to go back, or `hermes update --confirm` to keep it"
        )
    left = max(0.0, record["deadline"] - now)
    return (
        f"⏲ {who} is not confirmed: it rolls back to {record['before'][:12]} at {deadline_text(record)} "
        f"(in {left:.0f}s) unless `hermes update --confirm`"
    )
