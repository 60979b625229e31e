"""The update id: one run's name in its receipt's file name, its lock record, its snapshots'
names and its staging directory, so it is held to a file-name-safe alphabet (no separators,
no dot-names)."""

from __future__ import annotations

import re
import secrets

from services.updater.errors import UpdateError

# Also the id part of a receipt's file name (``receipt_store``).
PATTERN = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
_UPDATE_ID = re.compile(PATTERN)


class InvalidUpdateId(UpdateError, ValueError):
    """Not an update id: it could not name a file."""

    code = "invalid_update_id"


def new_update_id() -> str:
    return secrets.token_hex(6)


def validate_update_id(update_id: object) -> str:
    """``update_id`` if it is one, else ``InvalidUpdateId``."""
    if not isinstance(update_id, str) or not _UPDATE_ID.fullmatch(update_id):
        raise InvalidUpdateId(f"invalid update id {update_id!r}: use 1-64 of A-Z, a-z, 0-9, '_', '-'")
    return update_id
