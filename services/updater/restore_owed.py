"""One run's part in the owed restore of the root home (a rollback with a ``--backup`` archive).

Armed just ahead of the tree's move back, done right after it, before the completion of the
code returned to migrates and restarts anything; cleared once done. A run that finds one owed
(a rollback killed mid-restore) restores again first, if the tree is on the rollback's
commit; if it is not (the move itself never happened), the home is left as it is and the
receipt says so. An archive gone or corrupt by then cannot be repaired by any run: it is
reported as what the user must do. Nothing here raises: after the commit point a restore
that fails is a follow-up, never a failed update.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.updater import obligations
from services.updater.home_restore import restore_home
from services.updater.receipt import Receipt
from services.updater.rollback import ArchiveUnusable
from services.updater.stages import RESTORE, Stage
from shared.errors import HermesError, failure_reason
from shared.version import code_sha

Emit = Callable[[Stage, str, Any], None]


class RestoreOwed:
    def __init__(self, root: Path, install_root: Path, update_id: str, receipt: Receipt, emit: Emit) -> None:
        self.root, self.install_root, self.update_id, self.receipt, self.emit = (
            root,
            install_root,
            update_id,
            receipt,
            emit,
        )
        self.planned: tuple[str, dict[str, Any]] | None = None  # (target, backup) of this rollback
        self.armed = False

    def plan(self, target: str, backup: dict[str, Any]) -> None:
        self.planned = (target, backup)

    def arm(self) -> None:
        """Ahead of the move (apply's hook: never raises)."""
        if self.planned is None:
            return
        target, backup = self.planned
        try:
            obligations.arm_restore(self.root, update_id=self.update_id, target=target, backup=backup)
            self.armed = True
        except (OSError, HermesError) as exc:
            self.receipt.step("obligations", False, f"could not arm the home's restore: {exc}")

    def withdraw(self) -> None:
        """The move did not happen: nothing is owed."""
        if self.armed:
            self._clear()
            self.armed = False

    def run(self) -> None:
        """After the move: restore the root home from this rollback's archive."""
        if self.planned is not None:
            self._restore(self.planned[1], "restore")

    def repair(self) -> None:
        """A restore an earlier run left owed: done again from the start, or reported."""
        try:
            owed = obligations.read_restore(self.root)
        except HermesError as exc:
            self.receipt.step("obligations", False, exc.to_dict())
            self.receipt.user_action(f"{exc.message}: the root home may be partly restored; remove it once checked")
            return
        if owed is None:
            return
        of = owed["update_id"]
        if code_sha(self.install_root) != owed["target"]:
            why = f"rollback {of} never moved the tree to {owed['target'][:12]}: the home was not restored"
            self.receipt.step("retry", True, {"owed": "home-restore", "update_id": of, "how": "dropped", "why": why})
            self.emit(RESTORE, "skip", why)
            self._clear()
            return
        self.receipt.step("retry", True, {"owed": "home-restore", "update_id": of, "how": "re-run"})
        self.emit(RESTORE, "retry", f"the restore of the root home by rollback {of} was cut short: restoring again")
        self._restore(owed["backup"], "restore")

    def _restore(self, backup: dict[str, Any], step: str) -> None:
        try:
            done = restore_home(self.root, backup, self.update_id)
        except ArchiveUnusable as exc:  # no run can do it now: the user is told, nothing stays owed
            self.receipt.step(step, False, exc.to_dict())
            self.receipt.user_action(f"the root home was not restored: {exc.message}")
            self.emit(RESTORE, "fail", exc.message)
            self._clear()
            return
        except OSError as exc:  # a disk problem: owed, the next update restores again
            reason = failure_reason(exc)
            self.receipt.step(step, False, reason)
            self.receipt.followup("restore", f"the root home is not fully restored ({reason}); the next update retries")
            self.emit(RESTORE, "fail", reason)
            return
        self.receipt.step(step, True, done)
        self.emit(RESTORE, "done", {"restored": done["restored"]})
        self._clear()

    def _clear(self) -> None:
        try:
            obligations.clear_restore(self.root)
        except (OSError, HermesError) as exc:
            self.receipt.step("obligations", False, f"could not clear the home's restore: {exc}")
