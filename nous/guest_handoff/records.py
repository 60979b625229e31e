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
    """Under the records' lock: ``records = change(records)``, written atomically; the new records."""

    def apply(doc: dict[str, Any]) -> dict[str, Any]:
        current = doc.get("records")
        return {"version": VERSION, "records": change(dict(current) if isinstance(current, dict) else {})}

    path = records_path(root)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return files.update_json(path, apply, default={}, secret=True, timeout=timeout)["records"]


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


def public_records(root: Path) -> list[dict[str, Any]]:
    """Every record as status may show it (re-armed where an earlier run left it stuck), newest first."""
    now = time.time()
    views = [rules.public_view(rules.rearm(record, now=now)) for record in read_records(root).values()]
    return sorted(views, key=lambda view: view["updated_at"], reverse=True)
