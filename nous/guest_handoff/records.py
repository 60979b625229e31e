"""The handoff records on disk: ``guest_handoff.json`` beside the shared Nous store.

One record per guest identity, keyed by a hash of its credential, so profiles sharing one
free-tier identity share one record and one claim. Mode 0600; every change is one locked
read-modify-write applying a function of ``rules``. Blocking: async code uses a thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nous.guest_handoff import rules
from shared import files
from shared.layout import GUEST_HANDOFF_FILE

VERSION = 1


def records_path(root: Path) -> Path:
    return Path(root) / GUEST_HANDOFF_FILE


def read_records(root: Path) -> dict[str, dict[str, Any]]:
    records = files.read_json(records_path(root), default={}).get("records")
    return records if isinstance(records, dict) else {}


def change_records(
    root: Path, change: Callable[[dict[str, dict[str, Any]]], dict[str, dict[str, Any]]], *, timeout: float = 10.0
) -> dict[str, dict[str, Any]]:
    """Under the records' lock: ``records = change(records)``, written atomically unless
    ``change`` gave back the very records it got (nothing changed); the new records."""
    path = records_path(root)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with files.locked(path, timeout=timeout):
        current = files.read_json(path, default={}).get("records")
        current = dict(current) if isinstance(current, dict) else {}
        new = change(current)
        if new is not current:
            files.write_json_atomic(path, {"version": VERSION, "records": new}, secret=True)
    return new


def note_replacement(root: Path, *, anon: str, profile: str, destination: str, email: str) -> None:
    """An account (``destination``) was saved over the guest identity ``anon``: make sure a
    pending record says so. Runs at the account store's write seams, under their locks; it
    writes the record and nothing else (the claim is the drain's)."""
    key = rules.record_key(anon)
    now = time.time()
    change_records(
        root,
        lambda records: rules.note_replacement(
            records, key=key, profile=profile, destination=destination, email=email, now=now
        ),
    )


def rename_profile(root: Path, old: str, new: str) -> int:
    """Every handoff owed to profile ``old`` now owed to ``new`` (a rename); how many were.
    Without records there is nothing to move and nothing written."""
    if not records_path(root).exists():
        return 0
    moved = sum(r.get("profile") == old for r in read_records(root).values())
    if moved:
        change_records(root, lambda records: rules.rename_profile(records, old=old, new=new))
    return moved


def wake_parked(root: Path, sub: str | None) -> None:
    """An account write left ``sub`` the install's usable account (None: none is): the records
    parked for it are due again. Without records there is nothing to wake and nothing written.

    Call it once the account is on disk: an attempt decides to park under the records' lock,
    reading the account there, so it either sees this account or is parked before this runs."""
    if not records_path(root).exists():
        return
    now = time.time()
    change_records(root, lambda records: rules.wake(records, sub=sub, now=now))


def public_records(root: Path) -> list[dict[str, Any]]:
    """Every record as status may show it (re-armed where an earlier run left it stuck), newest first."""
    now = time.time()
    views = [rules.public_view(rules.rearm(record, now=now)) for record in read_records(root).values()]
    return sorted(views, key=lambda view: view["updated_at"], reverse=True)
