"""One update run's stages, in the updater process (the OLD code): plan, snapshot, apply, then
the completion in the new tree, or, when the code did not move, a retry of what is owed.

The receipt is on disk from the first moment and rewritten at every stage boundary, where a
stop request is honoured too. After the commit point (the tree moved) nothing fails the
update: what goes wrong is a follow-up in the receipt and stays owed (``debts``). Every stage
blocks on files and subprocesses, so the whole run is one worker thread; its progress goes
out through ``publish``.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from services.updater import confirm, confirm_timer
from services.updater.apply_archive import ArchiveIsOlder, DirtyTree, apply_archive, should_fall_back
from services.updater.apply_git import (
    ApplyResult,
    GitFailed,
    InvalidTarget,
    NotFastForward,
    WrongBranch,
    apply,
    restore_owed,
    rewind,
)
from services.updater.archive import ArchiveFailed, DownloadStopped
from services.updater.canary import CanaryFailed, CanaryStopped, remove_abandoned, run_canary
from services.updater.completion_child import CompletionChild
from services.updater.completion_contract import UNKNOWN_SPEC, Request, dependency_digest, result_matrix
from services.updater.debts import Debts
from services.updater.git_target import DEFAULT_BRANCH
from services.updater.held import held_back, hold, unhold
from services.updater.install_kind import refusal
from services.updater.ledger import wanting_restart
from services.updater.lock import UpdateLock
from services.updater.plan import Plan, plan_update
from services.updater.receipt import Receipt, exit_code_for
from services.updater.receipt_store import ReceiptStore
from services.updater.restart import prepare_host, restart_fleet
from services.updater.restore_owed import RestoreOwed
from services.updater.rollback import RollbackRefused
from services.updater.settings import UpdateSettings, load_settings
from services.updater.snapshot import BackupFailed, SnapshotFailed, full_backup, snapshot_all
from services.updater.stages import (
    APPLY,
    CANARY,
    COMPLETION,
    FETCH,
    PLAN,
    RECOVER,
    RESTART,
    RESTORE,
    REVERT,
    SNAPSHOT,
    STARTING,
    VERIFY,
    Stage,
)
from services.updater.swap import SwapFailed, SwapRecoveryNeeded, recover_interrupted_swap
from services.updater.verify import CURRENT, fleet_matrix
from shared import faults
from shared.errors import HermesError, failure_reason
from shared.files import StateFileCorrupt
from shared.identity import current_identity
from shared.redaction import redact
from shared.version import __version__, code_sha, current_branch, read_version

log = logging.getLogger(__name__)

# What apply raises for a refusal or a failure it reports itself (anything else is unexpected).
APPLY_FAILURES = (
    NotFastForward,
    WrongBranch,
    GitFailed,
    InvalidTarget,
    ArchiveFailed,
    DirtyTree,
    SwapFailed,
    ArchiveIsOlder,
)


# Not a HermesError: control flow inside the pipeline, caught by its own run; never leaves it.
class Interrupted(Exception):
    """A stop signal arrived; the run ends ``interrupted`` at the next stage boundary."""


# Not a HermesError: control flow inside the pipeline, caught by its own run; never leaves it.
class _Finish(Exception):
    """The run ends here, with ``outcome``: what it did is in the receipt already."""

    def __init__(self, outcome: str):
        super().__init__(outcome)
        self.outcome = outcome


class Pipeline:
    def __init__(
        self,
        root: Path,
        install_root: Path,
        update_id: str,
        options: dict[str, Any],
        lock: UpdateLock,
        stop: threading.Event,
        publish: Callable[[dict[str, Any]], None],
    ) -> None:
        self.root, self.install_root, self.update_id, self.options = root, install_root, update_id, options
        self.lock = lock
        self.stop = stop  # set by a stop signal, from the first moment of the process
        self.publish = publish
        self.store = ReceiptStore(root)
        self.receipt = Receipt.begin(update_id, list(sys.orig_argv), current_identity(), self._code())
        self.receipt_path: Path | None = None
        self.debts = Debts(root, update_id, self.receipt, self.emit)
        self.completion = CompletionChild(install_root, self.receipt, self.debts, self.emit, lock, stop, self.write)
        self.restore = RestoreOwed(root, install_root, update_id, self.receipt, self.emit)
        self.stage = STARTING
        self.committed = False
        # The confirm this run armed ahead of its move, or the expired one its rollback acts on.
        self.confirm: dict[str, Any] | None = None
        self.outcome: str | None = None
        self.exit_code: int | None = None

    def emit(self, stage: Stage, status: str, detail: Any = None) -> None:
        """A progress event; its stage is the run's stage from now on."""
        self.stage = stage
        event: dict[str, Any] = {"stage": stage.name, "status": status}
        if detail is not None:
            event["detail"] = detail
        self.publish(event)

    # --- the run --------------------------------------------------------------------------

    def run(self) -> int:
        """The whole run and its exit code; the caller holds the update lock for all of it."""
        found = self.store.mark_interrupted(by=self.update_id)
        receipt = self.receipt
        self.write()
        try:
            self._found_interrupted(found)
            self._stages()
            outcome = self.outcome or "success"
        except Interrupted:
            outcome = "interrupted"
            receipt.step(
                "interrupted",
                False,
                "stopped by a signal"
                + (
                    " after the commit point: what is owed stays armed for the next update"
                    if self.committed
                    else " before the commit point: nothing was changed"
                ),
            )
            ran = receipt["completion"] is not None or any(f["step"] == "completion" for f in receipt["followups"])
            if self.committed and not ran:
                self.debts.unfinished("stopped before the completion ran: the next update runs it")
        except _Finish as finish:
            outcome = finish.outcome
        except Exception as exc:  # the receipt must still say what happened
            log.exception("update %s failed", self.update_id)
            receipt.step(self.stage.name, False, failure_reason(exc))
            outcome = "success" if self.committed else "failed"
            if self.committed:
                receipt.followup(self.stage.name, failure_reason(exc))
        if self.options.get("confirm_expired") and self.confirm is not None and not self.committed:
            self._expired_rollback_failed(outcome)
        code = exit_code_for(outcome, committed=self.committed)
        receipt.set("after", self._after())
        receipt.finish(outcome, code)
        self.write()
        # Only now: followers are answered as soon as exit_code is set, and must find the
        # final receipt on disk when they read it.
        self.outcome, self.exit_code = outcome, code
        return code

    def _found_interrupted(self, found: list[Receipt]) -> None:
        """Say so when an earlier run died mid-way: its receipt now reads ``interrupted``, and
        what it left owed is retried by this run."""
        recovered = self.lock.recovered
        if not found and recovered is None:
            return
        ids = [r.update_id for r in found]
        self.receipt.step("found-interrupted", True, {"updates": ids, "lock": recovered})
        for receipt in found:
            gone = f"update {receipt.update_id} (pid {receipt.identity.pid}) was interrupted"
            self.emit(RECOVER, "interrupted", f"{gone}: its receipt now says so; what it owes is retried")
        if recovered is not None and recovered["update_id"] not in ids:
            gone = f"update {recovered['update_id']} (pid {recovered['pid']}) died holding the lock"
            self.emit(RECOVER, "interrupted", f"{gone}; what it owes is retried")

    def _code(self) -> dict[str, Any]:
        """The code this interpreter runs: the tree's, before anything moves it."""
        return {"code_sha": code_sha(self.install_root), "code_version": __version__}

    def _after(self) -> dict[str, Any]:
        """The code the tree holds at the end: as the completion reported what it imported, else
        read from the tree's files. Never this interpreter's ``__version__``, which is the old
        code's, and never by importing the new tree here."""
        reported = self.receipt["completion"] or {}
        sha, version = reported.get("code_sha"), reported.get("code_version")
        return {
            "code_sha": sha if isinstance(sha, str) else code_sha(self.install_root),
            "code_version": version if isinstance(version, str) else read_version(self.install_root),
        }

    def write(self) -> None:
        self.receipt_path = self.store.write(self.receipt)

    def _boundary(self, stage: Stage) -> None:
        """Between stages: the receipt is rewritten and, where the table says so, a stop
        request is honoured."""
        self.write()
        if stage.stops and self.stop.is_set():
            raise Interrupted
        self.emit(stage, "start")

    # --- the stages -----------------------------------------------------------------------

    def _stages(self) -> None:
        self._boundary(PLAN)
        settings, plan = self._plan()
        self.restore.repair()
        self._remove_abandoned_canaries()
        self._boundary(SNAPSHOT)
        self._snapshot(plan)
        if plan.held is not None:
            self._hold_back(plan.held, plan.code_sha, settings.min_healthy)
            return
        self._boundary(APPLY if plan.rollback else FETCH)  # a rollback's commit is in the local .git
        branch = (plan.git or {}).get("branch") or self.options.get("branch") or settings.branch
        branch = branch or current_branch(self.install_root) or DEFAULT_BRANCH
        rollback = plan.rollback
        try:
            result = self._rewind(rollback) if rollback else self._apply(branch, settings, plan)
        except APPLY_FAILURES as exc:
            self.receipt.step("apply", False, exc.to_dict())
            self.emit(APPLY, "fail", exc.message)
            if not self.committed:
                raise _Finish("failed") from None
            # The tree moved before the failure (a stash restore that broke): the rest of the
            # update still runs, and what broke is owed.
            self.receipt.followup("apply", exc.message)
            self._boundary(COMPLETION)
            before = plan.code_sha
            self.report_completion(self.complete(self.debts.owed_before(before), self._code()["code_sha"]))
            return
        self.receipt.set("apply", result.to_dict())
        applied = {"before": result.before, "after": result.after, "moved": result.moved, "via": result.via}
        self.receipt.step("apply", True, applied)
        self.emit(APPLY, "done", applied)
        if result.user_action:
            self.receipt.user_action(result.user_action)
        if result.stash == "parked":
            self.write()  # the receipt on disk hands the change to the operator: no longer owed
            self.debts.unstashed()
        if not result.moved:
            self._retry_owed(result.after, settings.min_healthy)
            return
        if rollback and rollback["backup"]:
            self._boundary(RESTORE)
            self.restore.run()
        self._boundary(COMPLETION)
        # Gated only where a failed gate can be reverted: a move git made.
        waves = plan.max_parallel if result.via == "git" else None
        completion = self.complete(self.debts.owed_before(result.before), result.after, max_parallel=waves)
        if result.stash == "parked":
            self.outcome = "partial"  # committed, but only the user can re-apply their changes
        self.report_completion(completion)
        rollout = (completion or {}).get("rollout") or {}
        if rollout.get("failed"):
            self._revert(result.before, result.after, rollout)
        elif not rollback:
            unhold(self.root)  # the code moved forward: what was held back is history

    def _plan(self) -> tuple[UpdateSettings, Plan]:
        receipt = self.receipt
        try:
            settings = load_settings(self.root)
        except HermesError as exc:  # a broken config.yaml: refuse before touching anything
            receipt.step("plan", False, exc.to_dict())
            self.emit(PLAN, "fail", exc.message)
            raise _Finish("failed") from None
        try:
            plan = plan_update(self.root, self.install_root, self.options, settings)
        except RollbackRefused as exc:
            receipt.step("plan", False, exc.to_dict())
            receipt.skip("apply", exc.message)
            self.emit(PLAN, "refused", exc.message)
            raise _Finish("refused") from None
        receipt.set("plan", plan.to_dict())
        if plan.rollback:
            receipt.step("rollback", True, {"of": plan.rollback["of"], "target": plan.rollback["target"]})
        self.debts.dependency_spec = self.spec_digest()
        receipt.step("plan", True)
        self.emit(PLAN, "done", _plan_summary(plan))
        if plan.refused:
            receipt.skip("apply", refusal(plan.install))
            self.emit(PLAN, "refused", plan.install.to_dict())
            raise _Finish("refused")
        self._confirm_plan(plan)
        git_failed = plan.git is None
        if (git_failed and not settings.archive_url) or (plan.git is not None and plan.git.get("remote_sha") is None):
            why = (plan.git_error or {}).get("message") or "origin has no such branch"
            receipt.step("plan", False, f"cannot read the update target: {why}")
            self.emit(PLAN, "fail", why)
            raise _Finish("failed")
        self.debts.read([g.profile for g in plan.gateways])
        return settings, plan

    def _confirm_plan(self, plan: Plan) -> None:
        """Refuse what the confirm forbids: a rollback started for a deadline that no longer owes
        one (confirmed, voided), and a forward move while an update waits for its confirm."""
        try:
            pending = confirm.read_confirm(self.root)
        except StateFileCorrupt as exc:
            # Nothing fires for it: a rollback (which removes it as it moves) or a confirm
            # settles it, and a forward move waits for that as it would for a readable one.
            pending = confirm.unreadable(exc)
            if self.options.get("confirm_expired"):
                self._refuse(confirm.unreadable_hint(exc.message))
        if pending is not None and pending["state"] != confirm.UNREADABLE and confirm.settled(pending, plan.code_sha):
            confirm.clear(self.root)
            self.receipt.step("confirm", True, {"voided": pending["update_id"], "why": "the tree never left it"})
            pending = None
        if self.options.get("confirm_expired"):
            record = confirm.claim(self.root, str(self.options.get("rollback")))
            if record is None:
                self._refuse(f"update {self.options.get('rollback')} no longer waits for a rollback at its deadline")
            self.confirm = record
            detail = {"update_id": record["update_id"], "deadline": record["deadline"], "to": record["before"]}
            self.receipt.step("confirm-expired", True, detail)
            self.emit(PLAN, "confirm-expired", f"update {record['update_id']} was not confirmed in time")
            return
        if plan.rollback is not None:
            return
        moves = plan.git is not None and not plan.git.get("up_to_date") and plan.held is None
        if pending is not None and moves and pending["state"] == confirm.UNREADABLE:
            self._refuse(confirm.unreadable_hint(pending["reason"]))
        if pending is not None and moves:
            self._refuse(
                f"update {pending['update_id']} waits for its confirm (deadline {confirm.deadline_text(pending)}): "
                "`hermes update --confirm` or `hermes update --rollback` first"
            )
        if self.options.get("confirm_within") is not None and plan.install.kind != "git":
            self._refuse(f"a {plan.install.kind} install cannot be rolled back, so it cannot wait for a confirm")

    def _refuse(self, why: str) -> NoReturn:
        self.receipt.skip("apply", why)
        self.emit(PLAN, "refused", why)
        raise _Finish("refused")

    def _expired_rollback_failed(self, outcome: str) -> None:
        """The deadline's rollback ended before its commit point: refused or failed, no timer
        starts it again (the operator is told by every command); interrupted, it stays due."""
        if outcome == "interrupted" or self.confirm is None:
            return
        failed = [s for s in self.receipt["steps"] if not s["ok"]]
        skipped = [s for s in self.receipt["skips"] if s["name"] == "apply"]
        why = failure_reason(failed[-1]["detail"]) if failed else skipped[-1]["reason"] if skipped else outcome
        try:
            confirm.mark_failed(self.root, self.confirm["update_id"], f"update {self.update_id} {outcome}: {why}")
        except (OSError, HermesError) as exc:
            self.receipt.followup("confirm", f"could not record the failed rollback: {failure_reason(exc)}")

    def _snapshot(self, plan: Plan) -> None:
        receipt = self.receipt
        if not plan.snapshot:  # the plan's rule, so that --plan and the run agree
            why = "nothing will change: the code does not move and no completion is owed"
            receipt.skip("snapshot", why)
            self.emit(SNAPSHOT, "skip", why)
            return
        if self.options.get("no_backup"):
            receipt.skip("snapshot", "--no-backup: no snapshot and no backup were taken")
            self.emit(SNAPSHOT, "skip")
            return
        try:
            snapshots = snapshot_all(self.root, self.update_id)
            receipt.set("snapshots", snapshots)  # kept even if the full backup fails
            if self.options.get("backup"):
                receipt.set("backup", full_backup(self.root, self.update_id))
        except (SnapshotFailed, BackupFailed) as exc:
            receipt.step("snapshot", False, exc.message)
            self.emit(SNAPSHOT, "fail", exc.message)
            raise _Finish("failed") from None
        receipt.step("snapshot", True, {"profiles": len(snapshots)})
        self.emit(SNAPSHOT, "done", {"profiles": len(snapshots)})

    def spec_digest(self) -> str | None:
        """The dependency spec's digest, taken at plan time: before every way the tree can move
        (git, the archive fallback), which a "moving" hook is not (a move not announced ahead
        is armed only once it happened), and outside apply's hooks, which must not raise."""
        try:
            return dependency_digest(self.install_root)
        except OSError as exc:
            self.receipt.skip("dependency-spec", f"could not read it ({exc}): the completion compares commits instead")
            return UNKNOWN_SPEC

    # --- apply ----------------------------------------------------------------------------

    def _apply(self, branch: str, settings: UpdateSettings, plan: Plan) -> ApplyResult:
        """Fast-forward with git, once the fetched commit passed its canary; when git itself
        fails before the commit point and an archive URL is configured, install the branch's
        source archive instead."""
        self._recover_swap()
        self._restore_owed_stash()
        canary = plan.canary
        try:
            return apply(self.install_root, branch, on_step=self._applied, gate=lambda sha: self._gate(canary, sha))
        except BaseException as exc:
            self.debts.withdraw()
            self._withdraw_confirm()
            if (
                not isinstance(exc, GitFailed)
                or self.committed
                or not settings.archive_url
                or not should_fall_back(exc)
            ):
                raise
            self.receipt.step("apply", False, exc.to_dict())
            self.emit(APPLY, "fallback", f"{exc.message}; installing the release archive instead")
            if canary is not None and "skip" not in canary:
                self.receipt.skip("canary", "git could not fetch the commit to stage: the archive is not gated")
            self.write()
        try:
            return apply_archive(
                self.install_root,
                branch,
                url_template=settings.archive_url,
                work_id=self.update_id,
                preserved=settings.preserved_nested,
                on_step=self._applied,
                should_stop=self.stop.is_set,
            )
        except DownloadStopped:  # before the commit point: nothing changed
            self.debts.withdraw()
            raise Interrupted from None
        except BaseException:
            self.debts.withdraw()
            raise

    def _withdraw_confirm(self) -> None:
        if self.confirm is not None and not self.committed:
            confirm.withdraw(self.root, self.update_id)
            self.confirm = None

    def _gate(self, canary: dict[str, Any] | None, sha: str) -> None:
        """Between the fetch and the move of the tree: the fetched commit's canary
        (``services.updater.canary``) as the plan says, then the apply stage's boundary. A
        canary that fails ends the run ``failed`` with nothing changed."""
        if canary is not None:
            self._canary(canary, sha)
        self._boundary(APPLY)
        within = self.options.get("confirm_within")
        if within is not None:
            self._arm_confirm(sha, float(within))

    def _arm_confirm(self, sha: str, within: float) -> None:
        """Just ahead of the move: the tree rolls back by itself unless confirmed within
        ``within`` seconds, whatever dies meanwhile (``confirm``, ``confirm_timer``)."""
        before = code_sha(self.install_root) or ""
        confirm.arm(self.root, update_id=self.update_id, before=before, after=sha, within=within)
        self.confirm = confirm.read_confirm(self.root)
        faults.pause_at("updater:confirm-armed")  # armed; the tree not moved yet

    def _canary(self, canary: dict[str, Any], sha: str) -> None:
        if "skip" in canary:
            self.receipt.skip("canary", canary["skip"])
            self.emit(CANARY, "skip", canary["skip"])
            return
        self._boundary(CANARY)
        try:
            passed = run_canary(
                self.install_root,
                self.root,
                sha,
                canary["profile"],
                self.stop,
                spec_now=self.debts.dependency_spec,
            )
        except CanaryStopped:
            raise Interrupted from None
        except CanaryFailed as exc:
            self.receipt.step("canary", False, exc.to_dict())
            self.emit(CANARY, "fail", exc.message)
            raise _Finish("failed") from None
        if isinstance(passed, str):
            self.receipt.skip("canary", passed)
            self.emit(CANARY, "skip", passed)
        else:
            self.receipt.step("canary", True, passed.to_dict())
            self.emit(CANARY, "done", passed.to_dict())
        self.write()

    def _remove_abandoned_canaries(self) -> None:
        """A canary an updater killed mid-way left behind: its gateway stopped, its files gone."""
        removed = remove_abandoned(self.root)
        if removed:
            self.receipt.step("recover", True, {"canaries": removed})
            self.emit(RECOVER, "done", f"removed {len(removed)} canary left by a killed update")

    def _rewind(self, rollback: dict[str, Any]) -> ApplyResult:
        """A rollback's move back to ``rollback["target"]``, from the local ``.git`` alone; the
        home's restore is owed from just ahead of the move."""
        self._recover_swap()
        if rollback["backup"]:
            self.restore.plan(rollback["target"], rollback["backup"])
        try:
            return rewind(self.install_root, rollback["target"], on_step=self._applied)
        except BaseException:
            self.debts.withdraw()
            self.restore.withdraw()
            raise

    def _recover_swap(self) -> None:
        """Whichever way this run applies, an archive swap a crash cut short is undone first:
        git would otherwise fast-forward (and stash) a half-swapped tree. One that cannot be
        undone safely fails the run before anything is changed, telling the operator what to do."""
        try:
            done = recover_interrupted_swap(self.install_root)
        except SwapRecoveryNeeded as exc:
            self.receipt.step("recover", False, exc.to_dict())
            self.receipt.user_action(exc.message)
            self.emit(APPLY, "fail", exc.message)
            raise _Finish("failed") from None
        if done:
            self.receipt.step("recover", True, {"done": done})
            self.emit(RECOVER, "done", "; ".join(done))
            self.write()

    def _restore_owed_stash(self) -> None:
        """The operator's change an interrupted update stashed goes back onto the tree before
        this run applies (which stashes it again around its own move, if any). One that does
        not apply cleanly is handed to the operator: the run ends ``partial``."""
        owed = self.debts.stash
        if owed is None:
            return
        detail = {"owed": "stash", "update_id": owed["update_id"], "sha": owed["sha"]}
        try:
            back = restore_owed(self.install_root, owed["sha"], owed["before"])
        except GitFailed as exc:  # still owed: the next update tries again
            self.receipt.step("retry", False, {**detail, "how": "failed", "error": exc.to_dict()})
            self.emit(RECOVER, "fail", exc.message)
            return
        how = "gone" if back is None else back.state
        self.receipt.step("retry", True, {**detail, "how": how, "paths": owed["paths"]})
        self.emit(RECOVER, how, {"stash": owed["sha"]})
        if back is not None and back.user_action is not None:
            self.receipt.user_action(back.user_action)
            self.outcome = "partial"
        self.write()  # the receipt names the restore, or the action, before the record goes
        self.debts.unstashed()

    def _applied(self, name: str, detail: Any) -> None:
        """Apply's hook for each of its steps (it must not raise)."""
        if name == "stashed":
            self.debts.stashed(detail["sha"], detail["before"], detail["paths"])
        if name == "restored":
            self.debts.unstashed()
        if name == "moving":
            self.debts.moving(detail["before"], detail["after"])
            self.restore.arm()  # a rollback's restore of the home, if it has one
        if name == "moved":
            first = not self.committed
            self.committed = True  # the commit point: from here on nothing fails the update
            self.receipt.step("moved", True, detail)
            mine = self.confirm is not None and self.confirm["update_id"] == self.update_id
            self._confirm_moved(armed_here=first and mine)
            self.debts.moved(detail["before"], detail["after"])
            self.write()
            prepare_host(self.root)  # a gateway host imports the new code while the completion starts
        self.emit(FETCH if name in ("fetched", "adopted") else APPLY, name, detail)

    def _confirm_moved(self, *, armed_here: bool) -> None:
        """The tree moved: the confirm this move armed gets its timer; any other move (a
        rollback, a revert) voids the confirm that was owed. Apply's hook: it must not raise."""
        try:
            if armed_here:
                assert self.confirm is not None
                timer = confirm_timer.ensure_timer(self.root, self.confirm)
                deadline = {"deadline": self.confirm["deadline"], "deadline_at": confirm.deadline_text(self.confirm)}
                self.receipt.step("confirm", True, {**deadline, "timer": timer})
                return
            voided = confirm.clear(self.root)
            if voided is not None and voided["state"] == confirm.UNREADABLE:
                self.receipt.step("confirm", True, {"voided": None, "why": voided["reason"]})
            elif voided is not None:
                self.receipt.step("confirm", True, {"voided": voided["update_id"]})
        except (OSError, HermesError) as exc:
            self.receipt.step("confirm", False, failure_reason(exc))

    # --- after apply: the completion, or a retry of what is owed --------------------------

    def complete(
        self,
        before: str | None,
        after: str | None,
        *,
        max_parallel: int | None = None,
        restart_only: list[str] | None = None,
    ) -> dict[str, Any] | None:
        """Run the completion of ``before`` -> ``after`` in the new tree; its result, or None
        when it delivered none (it is owed then). With ``max_parallel`` it restarts the fleet
        in health-gated waves of that many (0: one wave); ``restart_only``: a revert's,
        restarting those profiles' gateways alone."""
        options: dict[str, Any] = {k: v for k, v in self.options.items() if isinstance(v, (str, bool, int, type(None)))}
        if max_parallel is not None:
            options.update(gates=True, max_parallel=max_parallel)
        if restart_only is not None:
            options["restart_only"] = restart_only
        base = self.store.path_for(self.receipt).with_suffix("")
        plan = self.receipt["plan"]
        request = Request.new(
            update_id=self.update_id,
            root=str(self.root),
            install_root=str(self.install_root),
            before=before,
            after=after,
            result_path=str(base) + ".result.json",
            live_profiles=self.debts.expected,
            options=options,
            plan=redact(plan) if plan is not None else None,
            dependency_spec=self.debts.owed_spec(),
        )
        result, stopped = self.completion.run(request, Path(str(base) + ".request.json"))
        if stopped:
            raise Interrupted
        return result

    def report_completion(self, completion: dict[str, Any] | None) -> None:
        if completion is None:
            self.emit(COMPLETION, "fail", "owed: see the receipt's follow-ups")
            return
        restarted = completion.get("restart", [])
        self.emit(
            COMPLETION,
            "done",
            {
                "restarted": sum(r["ok"] for r in restarted),
                "gateways": len(restarted),
                "current": sum(row.verdict == CURRENT for row in result_matrix(completion)),
                "followups": len(completion.get("followups", [])),
            },
        )

    def _hold_back(self, record: dict[str, Any], code: str | None, min_healthy: float) -> None:
        """The target is a commit a gate rolled back: the code does not move, what is owed is
        done on the code as it is, and the run is refused, saying why."""
        why = held_back(record)
        self.receipt.skip("apply", why)
        self.emit(APPLY, "refused", why)
        self._retry_owed(code or "", min_healthy)
        self.outcome = "refused"

    def _revert(self, before: str, after: str, rollout: dict[str, Any]) -> None:
        """A wave failed its gate (the completion's ``rollout``): the tree back to ``before``,
        then the old code's completion restarts the gateways the waves moved (the others never
        left it) and verifies the fleet. Armed as any move is, so a run killed on the way leaves
        the old code's completion owed."""
        failed = rollout["failed"]
        self.emit(REVERT, "reverting", failed.get("message"))
        try:  # before the tree moves back: a later update does not take this commit again
            hold(self.root, sha=after, update_id=self.update_id, why=str(failed.get("message")))
        except OSError as exc:
            self.receipt.step("obligations", False, f"could not hold {after[:12]} back: {exc}")
        self.write()
        # The spec the revert moves away from: the old code's completion syncs back if it differs.
        self.debts.dependency_spec = self.spec_digest()
        try:
            back = rewind(self.install_root, before, on_step=self._applied)
        except GitFailed as exc:
            why = f"could not move the tree back to {before[:12]}: {exc.message}"
            self.receipt.followup(REVERT.name, why)
            self.receipt.user_action(f"{failed.get('message')}; {why}: roll back with `hermes update --rollback`")
            self.emit(REVERT, "fail", why)
            self.outcome = "partial"
            return
        moved = [p for p in rollout.get("moved", []) if isinstance(p, str)]
        self.receipt.step(REVERT.name, True, {"to": back.after, "from": after, "moved": moved})
        self.emit(REVERT, "done", {"to": back.after, "gateways": len(moved)})
        faults.pause_at("updater:reverted")  # the tree is back; the old code's completion not started
        completion = self.complete(self.debts.owed_before(after), back.after, restart_only=moved)
        self.report_completion(completion)
        self.outcome = "rolled_back"

    def _retry_owed(self, code: str, min_healthy: float) -> None:
        """Already up to date: retry what earlier runs left owed, then verify the fleet."""
        receipt, debts = self.receipt, self.debts
        pending = debts.pending
        if pending is not None:
            self._boundary(COMPLETION)
            self.completion.adopt(pending)
            if debts.pending is not None:  # nothing to adopt, or what was adopted still owes the tail
                receipt.step("retry", True, {"owed": "completion", "update_id": pending["update_id"], "how": "re-run"})
                self.emit(COMPLETION, "retry", f"the completion of update {pending['update_id']} is owed: running it")
                self.report_completion(self.complete(pending["before"], code))
                return  # the completion restarted and verified the fleet, or is owed again
        else:
            receipt.skip("completion", "already up to date: the code did not change")
        self._boundary(VERIFY)
        matrix = fleet_matrix(self.root, code, expected_profiles=debts.expected, min_healthy=min_healthy)
        wanting = wanting_restart(matrix, debts.fleet)
        if wanting:
            receipt.step("retry", True, {"owed": "fleet-restart", "gateways": sorted(wanting)})
            self._boundary(RESTART)
            outcomes = restart_fleet(self.root, code, only=wanting)
            receipt.set("restart", [o.to_dict() for o in outcomes])
            receipt.step("restart", all(o.ok for o in outcomes), {"gateways": len(outcomes)})
            self.emit(RESTART, "done", {"restarted": sum(o.ok for o in outcomes), "gateways": len(outcomes)})
            self._boundary(VERIFY)
            matrix = fleet_matrix(self.root, code, expected_profiles=debts.expected, min_healthy=min_healthy)
        rows = [row.to_dict() for row in matrix]
        receipt.set("fleet", rows)
        debts.after_verify(matrix)
        self.emit(VERIFY, "done", {"fleet": rows})


def _plan_summary(plan: Plan) -> dict[str, Any]:
    """The plan's progress event: its detail, at the event boundary."""
    return {
        "install": plan.install.kind,
        "profiles": len(plan.profiles),
        "gateways": len(plan.gateways),
        "target": (plan.git or {}).get("remote_sha"),
    }
