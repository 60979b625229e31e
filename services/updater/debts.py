"""One run's bookkeeping of what the update owes: read at the plan, armed at the commit point,
replaced by every verify and correlated result, each change written to the obligations and
reported in the receipt.

What is owed after each event is ``ledger``'s to decide; this module keeps the run's view of
it (``pending``: the completion owed, ``fleet``: the gateways owed a restart, ``expected``:
the profiles whose gateway must run the new code, ``stash``: the operator's change stashed
and not yet put back) in step with the files. A failure to write
an obligation is a failed ``obligations`` step in the receipt, never a failed update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from services.updater import ledger, obligations
from services.updater.completion_contract import result_matrix
from services.updater.obligations import UNKNOWN_SPEC
from services.updater.receipt import Receipt
from services.updater.stages import PLAN, Stage
from services.updater.verify import MatrixRow
from shared.errors import HermesError

Emit = Callable[[Stage, str, Any], None]
# What an obligation that cannot be read stands for: owed, of unknown code (the retry then
# syncs the dependencies regardless).
UNREADABLE_COMPLETION = {"update_id": "unknown", "before": None, "after": None, "attempt": None}


class Debts:
    def __init__(self, root: Path, update_id: str, receipt: Receipt, emit: Emit) -> None:
        self.root, self.update_id, self.receipt, self.emit = root, update_id, receipt, emit
        self.pending: dict[str, Any] | None = None
        self.fleet: dict[str, dict[str, Any]] = {}
        self.expected: list[str] = []
        self.stash: dict[str, Any] | None = None
        # The dependency spec's digest as the plan found it, before anything moved.
        self.dependency_spec: str | None = UNKNOWN_SPEC
        # What was owed before this run armed its obligations ahead of a move, so that a move
        # that does not happen after all owes exactly that again.
        self._before_moving: tuple[dict[str, Any] | None, dict[str, dict[str, Any]]] | None = None

    # --- what earlier runs left -----------------------------------------------------------------

    def read(self, live: Sequence[str]) -> None:
        """What earlier runs left owed, with ``live`` the profiles that run a gateway now; a
        corrupt obligation is reported and rebuilt, never trusted."""
        try:
            self.pending = obligations.read_completion(self.root)
        except HermesError as exc:
            self.receipt.step("obligations", False, exc.to_dict())
            self.pending = dict(UNREADABLE_COMPLETION)
        try:
            self.fleet = obligations.read_fleet(self.root)
        except HermesError as exc:  # rebuilt from the next verify
            self.receipt.step("obligations", False, exc.to_dict())
            self.fleet = {}
        self.expected = sorted(set(live) | set(self.fleet))
        self._read_stash()
        if self.pending is None and not self.fleet and self.stash is None:
            return
        completion = self.pending and self.pending["update_id"]
        stash = self.stash and self.stash["sha"]
        self.receipt.step("owed", True, {"completion": completion, "fleet-restart": sorted(self.fleet), "stash": stash})
        owed = [f"the completion of update {completion}"] if completion else []
        if self.fleet:
            owed.append(f"a restart of {', '.join(self.fleet)}")
        if stash:
            owed.append(f"the local changes in stash {stash[:12]}")
        self.emit(PLAN, "owed", "; ".join(owed))

    def _read_stash(self) -> None:
        try:
            self.stash = obligations.read_stash(self.root)
        except HermesError as exc:  # no sha to act on: said once, then removed
            self.receipt.step("obligations", False, exc.to_dict())
            self.receipt.followup(
                "stash",
                "the record of a local change an update stashed is unreadable: "
                "look for `hermes-update` entries in `git stash list`",
            )
            self.unstashed()

    def owed_before(self, before: str | None) -> str | None:
        """The code the owed completion starts from: a completion still owed covers its
        update's whole move (its dependency spec may have changed there), not only this one."""
        return self.pending["before"] if self.pending is not None else before

    def owed_spec(self) -> str | None:
        """The dependency spec's digest from before the move the owed completion covers: the
        owed update's (a retry runs after nothing moved), else this run's from its plan."""
        if self.pending is not None:
            return self.pending.get("dependency_spec", UNKNOWN_SPEC)
        return self.dependency_spec

    # --- the operator's local change ------------------------------------------------------------

    def stashed(self, sha: str, before: str, paths: list[str]) -> None:
        """The change is in stash commit ``sha`` and the tree is about to be cleaned: owed back
        from now on. Never raises: apply's hooks must not."""
        try:
            obligations.arm_stash(self.root, update_id=self.update_id, sha=sha, before=before, paths=paths)
            self.stash = {"update_id": self.update_id, "sha": sha, "before": before, "paths": list(paths)}
        except (OSError, ValueError, HermesError) as exc:
            self.receipt.step("obligations", False, f"could not record stash {sha}: {exc}")

    def unstashed(self) -> None:
        """The change is back in the tree, or the receipt on disk hands it to the operator."""
        try:
            obligations.clear_stash(self.root)
            self.stash = None
        except (OSError, HermesError) as exc:
            self.receipt.step("obligations", False, f"could not clear the stash record: {exc}")

    # --- the commit point -----------------------------------------------------------------------

    def moving(self, before: str | None, after: str) -> None:
        """The tree is about to move: armed AHEAD of the move, since a run killed between the
        tree moving and its obligations being written would otherwise leave a moved tree
        that owes nothing."""
        if self._before_moving is None:
            self._before_moving = (self.pending, self.fleet)
        self.arm(before, after)

    def moved(self, before: str | None, after: str) -> None:
        """The commit point: what was armed ahead stays armed (a move not announced ahead is
        armed now)."""
        if self._before_moving is None:
            self.arm(before, after)
        self._before_moving = None

    def withdraw(self) -> None:
        """The move armed ahead did not happen: owe again exactly what was owed before (a run
        killed in that window leaves it armed: an extra completion is the safe side)."""
        prior, self._before_moving = self._before_moving, None
        if prior is None:
            return
        pending, fleet = prior
        try:
            if pending is None:
                obligations.clear_completion(self.root)
            else:
                obligations.arm_completion(
                    self.root,
                    update_id=pending["update_id"],
                    before=pending["before"],
                    after=pending["after"],
                    attempt=pending.get("attempt"),
                    dependency_spec=pending.get("dependency_spec", UNKNOWN_SPEC),
                )
            obligations.replace_fleet(self.root, fleet)
        except (OSError, HermesError) as exc:
            self.receipt.step("obligations", False, f"could not withdraw what was armed ahead of the move: {exc}")
        self.pending, self.fleet = pending, fleet

    def arm(self, before: str | None, after: str) -> None:
        """A completion is owed, and every gateway that should run the new code is owed a
        restart onto it; both stay armed until done. Never raises: apply's hooks must not."""
        before, spec = self.owed_before(before), self.owed_spec()
        try:
            obligations.arm_completion(
                self.root, update_id=self.update_id, before=before, after=after, dependency_spec=spec
            )
            self.pending = {
                "update_id": self.update_id,
                "before": before,
                "after": after,
                "dependency_spec": spec,
                "attempt": None,
            }
            parts = ledger.owed_at_move(self.expected, after, self.update_id)
            obligations.replace_fleet(self.root, parts)
            self.fleet = parts
        except (OSError, HermesError) as exc:
            self.receipt.step("obligations", False, f"could not arm: {exc}")

    # --- what the completion and the verify found -----------------------------------------------

    def note_attempt(self, request: Path, result: Path) -> None:
        """Name the completion just started in the one owed, so its result counts even if this run dies."""
        pending = self.pending
        if pending is None:  # arming failed at the commit point, and the receipt says so
            return
        attempt = {"update_id": self.update_id, "request": str(request), "result": str(result)}
        try:
            obligations.arm_completion(
                self.root,
                update_id=pending["update_id"],
                before=pending["before"],
                after=pending["after"],
                attempt=attempt,
                dependency_spec=pending.get("dependency_spec", UNKNOWN_SPEC),
            )
        except (OSError, HermesError) as exc:  # only the adoption of a late result is lost
            self.receipt.step("obligations", False, f"could not note the completion started: {exc}")

    def after_result(self, result: Mapping[str, Any], *, verified: bool = True) -> None:
        """A correlated result was taken: owe what it owes. Its verify replaces the fleet's debt
        only when the result is this moment's (``verified``), not one adopted late."""
        owed = ledger.owed_after_result(result)
        for step, reasons in owed.followups:
            self.receipt.followup(step, reasons)
        if not owed.completion_owed:
            obligations.clear_completion(self.root)
            self.pending = None
        if verified and owed.verified:
            self.after_verify(result_matrix(result), why=ledger.failed_restarts(result))

    def after_verify(self, matrix: Sequence[MatrixRow], why: Mapping[str, str] | None = None) -> None:
        """A verify saw the whole fleet: owe exactly the gateways it found wanting (``why``: what
        went wrong with a profile's restart, for the follow-up)."""
        owed = ledger.owed_after_verify(matrix, self.expected, self.update_id, why)
        obligations.replace_fleet(self.root, owed.parts)
        self.fleet = owed.parts
        if owed.followup is not None:
            self.receipt.followup(ledger.FLEET_RESTART, owed.followup)

    def unfinished(self, why: str) -> None:
        """No completion delivered (``why``): it is owed, and every gateway restart it was to do."""
        for step, reason in ledger.owed_unfinished(why, self.fleet):
            self.receipt.followup(step, reason)
