"""A commit the health gates rolled back, held back from later updates.

When a wave fails its gate the updater records the commit it reverts (``hold``) before the
tree moves back. A later update whose target is that very commit does not move the code: it
finishes what is owed (the tail of a revert whose updater was killed) and is refused, naming
the update that rolled the commit back, until origin moves on or ``--take-held`` takes it
anyway. Any later move of the tree forward releases the hold. One JSON file in the root home;
one that cannot be read holds nothing back (it can only ever hold, never move, the code).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.errors import HermesError
from shared.files import read_json, write_json_atomic

FILE = "update-held.json"


def hold(root: Path, *, sha: str, update_id: str, why: str) -> None:
    at = datetime.now(UTC).isoformat(timespec="seconds")
    write_json_atomic(Path(root) / FILE, {"sha": sha, "update_id": update_id, "why": why, "at": at})


def read_held(root: Path) -> dict[str, Any] | None:
    """The held commit's record, or None."""
    try:
        held = read_json(Path(root) / FILE, default=None)
    except (OSError, HermesError):
        return None
    if not isinstance(held, dict) or not all(isinstance(held.get(k), str) for k in ("sha", "update_id", "why")):
        return None
    return held


def unhold(root: Path) -> None:
    (Path(root) / FILE).unlink(missing_ok=True)


def holds(held: dict[str, Any] | None, target: dict[str, Any] | None) -> bool:
    """Whether ``held`` holds back the move to git's ``target`` (``git_target``'s)."""
    return held is not None and target is not None and not target["up_to_date"] and target["remote_sha"] == held["sha"]


def held_back(held: dict[str, Any]) -> str:
    """Why the update does not move the code, in words."""
    return (
        f"origin's {held['sha'][:12]} was rolled back by update {held['update_id']} ({held['why']}): "
        "not taken again until origin moves on, or with --take-held"
    )
