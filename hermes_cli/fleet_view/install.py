"""What the fleet view's header says of the install: the commit on its disk, what the update
still owes (a gateway's restart, a confirm), and how long its sign-in lasts. Each is a small
file read; the view reads them again every few seconds, never a socket or a process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from nous import store
from services.updater import owed_confirm, read_fleet
from shared.errors import HermesError
from shared.version import code_sha

T = TypeVar("T")


class InstallFacts:
    def __init__(self, root: Path):
        self.root = root
        self.sha: str | None = None
        self.owed: dict[str, Any] = {}  # profile -> its owed restart
        self.confirm: dict[str, Any] | None = None
        self.expires_at: float | None = None  # the sign-in's token; None: not signed in
        self.errors: list[str] = []  # why a file could not be read

    def refresh(self) -> bool:
        """Read it all again; True when anything the header shows moved."""
        before = (self.sha, self.owed, self.confirm, self.expires_at, self.errors)
        self.errors = []
        self.sha = code_sha()
        self.owed = self._read(lambda: read_fleet(self.root), {})
        self.confirm = self._read(lambda: owed_confirm(self.root), None)
        view: dict[str, Any] = self._read(lambda: store.public_view(store.read_account(self.root)), {})
        expires = view.get("expires_at")
        self.expires_at = float(expires) if view.get("signed_in") and isinstance(expires, (int, float)) else None
        return before != (self.sha, self.owed, self.confirm, self.expires_at, self.errors)

    def _read(self, read: Callable[[], T], empty: T) -> T:
        try:
            return read()
        except HermesError as exc:
            self.errors.append(exc.message)
        except OSError as exc:
            self.errors.append(f"cannot read {exc.filename}: {exc.strerror}")
        return empty

    def to_dict(self, now: float) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "code_sha": self.sha,
            "owed": self.owed,
            "confirm": self.confirm,
            "sign_in_expires_in": None if self.expires_at is None else round(self.expires_at - now),
            "errors": self.errors,
        }
