"""One update run, in the updater process (the OLD code).

Holds the lock, keeps the receipt on disk from the first moment, plans, snapshots and
applies; after the commit point it hands the rest to a completion process started from the
new tree and accepts only that request's correlated result. Progress goes to every follower
of the ``follow`` op; the run goes on whether anyone follows or not.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from services.updater import obligations, ops
from services.updater.apply_archive import (
    ArchiveIsOlder,
    DirtyTree,
    SwapFailed,
    SwapRecoveryNeeded,
    apply_archive,
    recover_interrupted_swap,
    should_fall_back,
)
from services.updater.apply_git import ApplyResult, GitFailed, NotFastForward, WrongBranch, apply
from services.updater.archive import ArchiveFailed, DownloadStopped
from services.updater.completion_contract import (
    ENTRY_MODULE,
    UNKNOWN_SPEC,
    BadResult,
    Request,
    dependency_digest,
    read_result,
)
from services.updater.lock import UpdateLock
from services.updater.plan import DEFAULT_BRANCH, plan_update, refusal
from services.updater.receipt import Receipt, exit_code_for
from services.updater.receipt_store import ReceiptStore
from services.updater.restart import restart_fleet
from services.updater.settings import UpdateSettings, load_settings
from services.updater.snapshot import BackupFailed, SnapshotFailed, full_backup, snapshot_all
from services.updater.verify import DOWN, STALE, fleet_matrix, followups_for
from shared import homes
from shared.errors import HermesError
from shared.identity import current_identity
from shared.redaction import redact
from shared.service import Call, Service
from shared.version import code_sha, current_branch, read_version

log = logging.getLogger(__name__)

COMPLETION_TIMEOUT = 1800.0
# How long a completion told to stop (SIGTERM) has before it is killed.
COMPLETION_STOP_GRACE = 10.0
POLL_INTERVAL = 0.1
MAX_EVENTS = 2000
FOLLOWER_GRACE = 2.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(Exception):
    """A stop signal arrived; the run ends ``interrupted`` at the next stage boundary."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class UpdateRun:
    def __init__(
        self,
        root: Path,
        install_root: Path,
        update_id: str,
        options: dict[str, Any],
        lock: UpdateLock,
        stop: threading.Event,
    ):
        self.root, self.install_root = root, install_root
        self.lock = lock
        self.update_id = update_id
        self.options = options
        self.store = ReceiptStore(root)
        self.receipt: Receipt | None = None
        self.receipt_path: Path | None = None
        self.stage = "starting"
        self.outcome: str | None = None
        self.exit_code: int | None = None
        self.committed = False
        # What was owed before this run armed its obligations ahead of the move (apply's
        # "moving"), so that a move that does not happen after all owes exactly that again.
        self._armed_ahead: tuple[dict[str, Any] | None, dict[str, dict[str, Any]]] | None = None
        self._stop = stop  # set by a stop signal, from the first moment of the process
        # What is owed (read after the plan, then as this run arms and settles it), and the
        # profiles whose gateway must run the new code: live now, or owed a restart.
        self.pending: dict[str, Any] | None = None
        self.fleet_owed: dict[str, dict[str, Any]] = {}
        self.expected: list[str] = []
        # The dependency spec's digest as the plan found it, before anything moved.
        self.dependency_spec: str | None = UNKNOWN_SPEC
        self._events: list[dict[str, Any]] = []
        self._new_event = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None

    # --- the process around the pipeline -------------------------------------------------

    async def main(self) -> int:
        self._token = trio.lowlevel.current_trio_token()
        endpoint = homes.endpoint(self.root, ops.SERVICE)
        service = Service(ops.SERVICE, endpoint.control, lock_path=endpoint.lock_path)
        service.add(ops.FOLLOW, self._follow)
        service.add(ops.STATUS, self._status)
        async with trio.open_nursery() as nursery:
            await nursery.start(service.serve)
            code = await trio.to_thread.run_sync(self.pipeline)
            self._publish({"stage": "done", "status": self.outcome, "detail": {"exit_code": code}})
            with trio.move_on_after(FOLLOWER_GRACE):  # let followers read the end
                while service.in_flight:
                    await trio.sleep(0.05)
            service.stop(grace=0.5)
            await service.wait_stopped()
            nursery.cancel_scope.cancel()
        return code

    async def _follow(self, call: Call) -> dict[str, Any]:
        index = call.args.get("from", 0)
        while True:
            while index < len(self._events):
                await call.emit(self._events[index])
                index += 1
            if self.exit_code is not None:
                return self._terminal()
            await self._new_event.wait()

    async def _status(self, call: Call) -> dict[str, Any]:
        return {"update_id": self.update_id, "pid": os.getpid(), "stage": self.stage, "outcome": self.outcome}

    def _terminal(self) -> dict[str, Any]:
        return {
            "update_id": self.update_id,
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "receipt": str(self.receipt_path) if self.receipt_path else None,
        }

    def _publish(self, event: dict[str, Any]) -> None:
        """In the trio thread: record an event and wake the followers."""
        event = {"seq": len(self._events), "at": _now(), **event}
        if len(self._events) < MAX_EVENTS:
            self._events.append(event)
        self._new_event.set()
        self._new_event = trio.Event()

    def emit(self, stage: str, status: str, detail: Any = None) -> None:
        """From the pipeline's worker thread."""
        self.stage = stage
        event = {"stage": stage, "status": status}
        if detail is not None:
            event["detail"] = detail
        trio.from_thread.run_sync(self._publish, event, trio_token=self._token)

    # --- the pipeline (a worker thread: every stage blocks on files and subprocesses) -----

    def pipeline(self) -> int:
        """The whole run; the caller holds the update lock for all of it."""
        found = self.store.mark_interrupted(by=self.update_id)
        self.receipt = Receipt.begin(self.update_id, list(sys.orig_argv), current_identity(), self._code())
        self._write()
        try:
            self._found_interrupted(found)
            self._stages()
            outcome = self.outcome or "success"
        except Interrupted:
            outcome = "interrupted"
            self.receipt.step(
                "interrupted",
                False,
                "stopped by a signal"
                + (
                    " after the commit point: what is owed stays armed for the next update"
                    if self.committed
                    else " before the commit point: nothing was changed"
                ),
            )
            ran = self.receipt["completion"] is not None or any(
                f["step"] == "completion" for f in self.receipt["followups"]
            )
            if self.committed and not ran:
                self._owe_unfinished("stopped before the completion ran: the next update runs it")
        except _Finish as finish:
            outcome = finish.outcome
        except Exception as exc:  # the receipt must still say what happened
            log.exception("update %s failed", self.update_id)
            self.receipt.step(self.stage, False, f"{type(exc).__name__}: {exc}")
            outcome = "success" if self.committed else "failed"
            if self.committed:
                self.receipt.followup(self.stage, f"{type(exc).__name__}: {exc}")
        code = exit_code_for(outcome, committed=self.committed)
        self.receipt.set("after", self._after())
        self.receipt.finish(outcome, code)
        self._write()
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
        assert self.receipt is not None
        ids = [r.update_id for r in found]
        self.receipt.step("found-interrupted", True, {"updates": ids, "lock": recovered})
        for receipt in found:
            gone = f"update {receipt.update_id} (pid {receipt.identity.pid}) was interrupted"
            self.emit("recover", "interrupted", f"{gone}: its receipt now says so; what it owes is retried")
        if recovered is not None and recovered["update_id"] not in ids:
            gone = f"update {recovered['update_id']} (pid {recovered['pid']}) died holding the lock"
            self.emit("recover", "interrupted", f"{gone}; what it owes is retried")

    def _code(self) -> dict[str, Any]:
        """The code this interpreter runs: the tree's, before anything moves it."""
        from shared.version import __version__

        return {"code_sha": code_sha(self.install_root), "code_version": __version__}

    def _after(self) -> dict[str, Any]:
        """The code the tree holds at the end: as the completion reported what it imported, else
        read from the tree's files. Never this interpreter's ``__version__``, which is the old
        code's, and never by importing the new tree here."""
        assert self.receipt is not None
        reported = self.receipt["completion"] or {}
        sha, version = reported.get("code_sha"), reported.get("code_version")
        return {
            "code_sha": sha if isinstance(sha, str) else code_sha(self.install_root),
            "code_version": version if isinstance(version, str) else read_version(self.install_root),
        }

    def _write(self) -> None:
        assert self.receipt is not None
        self.receipt_path = self.store.write(self.receipt)

    def _boundary(self, stage: str) -> None:
        """Between stages: the receipt is rewritten and a stop request is honoured."""
        self._write()
        if self._stop.is_set():
            raise Interrupted
        self.emit(stage, "start")

    def _stages(self) -> None:
        receipt = self.receipt
        assert receipt is not None
        self._boundary("plan")
        try:
            settings = load_settings(self.root)
        except HermesError as exc:  # a broken config.yaml: refuse before touching anything
            receipt.step("plan", False, exc.to_dict())
            self.emit("plan", "fail", exc.message)
            raise _Finish("failed") from None
        plan = plan_update(self.root, self.install_root, self.options, settings)
        plan_data = plan.to_dict()
        receipt.set("plan", plan_data)
        self.dependency_spec = self._spec_digest()
        receipt.step("plan", True)
        self.emit("plan", "done", _plan_summary(plan_data))
        install = plan_data["install"]
        if not install["in_place"]:
            receipt.skip("apply", refusal(install))
            self.emit("plan", "refused", install)
            raise _Finish("refused")
        git_failed = plan_data["git"] is None
        if (git_failed and not settings.archive_url) or (not git_failed and plan_data["git"].get("remote_sha") is None):
            why = (plan_data.get("git_error") or {}).get("message") or "origin has no such branch"
            receipt.step("plan", False, f"cannot read the update target: {why}")
            self.emit("plan", "fail", why)
            raise _Finish("failed")
        self._read_owed([g["profile"] for g in plan_data.get("gateways", [])])

        self._boundary("snapshot")
        if self.options.get("no_backup"):
            receipt.skip("snapshot", "--no-backup: no snapshot and no backup were taken")
            self.emit("snapshot", "skip")
        else:
            try:
                snapshots = snapshot_all(self.root, self.update_id)
                receipt.set("snapshots", snapshots)  # kept even if the full backup fails
                if self.options.get("backup"):
                    receipt.set("backup", full_backup(self.root, self.update_id))
            except (SnapshotFailed, BackupFailed) as exc:
                receipt.step("snapshot", False, exc.message)
                self.emit("snapshot", "fail", exc.message)
                raise _Finish("failed") from None
            receipt.step("snapshot", True, {"profiles": len(snapshots)})
            self.emit("snapshot", "done", {"profiles": len(snapshots)})

        self._boundary("apply")
        branch = (plan_data["git"] or {}).get("branch") or self.options.get("branch") or settings.branch
        branch = branch or current_branch(self.install_root) or DEFAULT_BRANCH
        before = plan_data["code"]["code_sha"]
        try:
            result = self._apply(branch, settings)
        except (
            NotFastForward,
            WrongBranch,
            GitFailed,
            ValueError,
            ArchiveFailed,
            DirtyTree,
            SwapFailed,
            ArchiveIsOlder,
        ) as exc:
            detail = exc.to_dict() if isinstance(exc, HermesError) else str(exc)
            receipt.step("apply", False, detail)
            self.emit("apply", "fail", getattr(exc, "message", str(exc)))
            if not self.committed:
                raise _Finish("failed") from None
            # The tree moved before the failure (a stash restore that broke): the rest of the
            # update still runs, and what broke is owed.
            receipt.followup("apply", getattr(exc, "message", str(exc)))
            self._boundary("completion")
            self._completion_done(self._complete(self._owed_before(before), self._code()["code_sha"]))
            return
        receipt.set("apply", result.to_dict())
        applied = {"before": result.before, "after": result.after, "moved": result.moved, "via": result.via}
        receipt.step("apply", True, applied)
        self.emit("apply", "done", applied)
        if result.user_action:
            receipt.user_action(result.user_action)

        if not result.moved:
            self._retry_owed(result.after)
            return

        self._boundary("completion")
        completion = self._complete(self._owed_before(result.before), result.after)
        if result.stash == "parked":
            self.outcome = "partial"  # committed, but only the user can re-apply their changes
        self._completion_done(completion)

    def _spec_digest(self) -> str | None:
        """The dependency spec's digest, taken at plan time: before every way the tree can move
        (git, the archive fallback), which a "moving" hook is not (a move not announced ahead
        is armed only once it happened), and outside apply's hooks, which must not raise."""
        try:
            return dependency_digest(self.install_root)
        except OSError as exc:
            assert self.receipt is not None
            self.receipt.skip("dependency-spec", f"could not read it ({exc}): the completion compares commits instead")
            return UNKNOWN_SPEC

    def _completion_done(self, completion: dict[str, Any] | None) -> None:
        if completion is None:
            self.emit("completion", "fail", "owed: see the receipt's follow-ups")
            return
        restarted = completion.get("restart", [])
        self.emit(
            "completion",
            "done",
            {
                "restarted": sum(r["ok"] for r in restarted),
                "gateways": len(restarted),
                "current": sum(row["verdict"] == "current" for row in completion.get("fleet", [])),
                "followups": len(completion.get("followups", [])),
            },
        )

    def _apply(self, branch: str, settings: UpdateSettings) -> ApplyResult:
        """Fast-forward with git; when git itself fails before the commit point and an archive
        URL is configured, install the branch's source archive instead."""
        self._recover_swap()
        try:
            return apply(self.install_root, branch, on_step=self._applied)
        except BaseException as exc:
            self._withdraw()
            if (
                not isinstance(exc, GitFailed)
                or self.committed
                or not settings.archive_url
                or not should_fall_back(exc)
            ):
                raise
            assert self.receipt is not None
            self.receipt.step("apply", False, exc.to_dict())
            self.emit("apply", "fallback", f"{exc.message}; installing the release archive instead")
            self._write()
        try:
            return apply_archive(
                self.install_root,
                branch,
                url_template=settings.archive_url,
                work_id=self.update_id,
                preserved=settings.preserved_nested,
                on_step=self._applied,
                should_stop=self._stop.is_set,
            )
        except DownloadStopped:  # before the commit point: nothing changed
            self._withdraw()
            raise Interrupted from None
        except BaseException:
            self._withdraw()
            raise

    def _recover_swap(self) -> None:
        """Whichever way this run applies, an archive swap a crash cut short is undone first:
        git would otherwise fast-forward (and stash) a half-swapped tree. One that cannot be
        undone safely fails the run before anything is changed, telling the operator what to do."""
        receipt = self.receipt
        assert receipt is not None
        try:
            done = recover_interrupted_swap(self.install_root)
        except SwapRecoveryNeeded as exc:
            receipt.step("recover", False, exc.to_dict())
            receipt.user_action(exc.message)
            self.emit("apply", "fail", exc.message)
            raise _Finish("failed") from None
        if done:
            receipt.step("recover", True, {"done": done})
            self.emit("recover", "done", "; ".join(done))
            self._write()

    def _applied(self, name: str, detail: Any) -> None:
        if name == "moving":
            # Armed AHEAD of the move: a run killed between the tree moving and its obligations
            # being written would otherwise leave a moved tree that owes nothing.
            if self._armed_ahead is None:
                self._armed_ahead = (self.pending, self.fleet_owed)
            self._arm(detail["before"], detail["after"])
        if name == "moved":
            self.committed = True  # the commit point: from here on nothing fails the update
            assert self.receipt is not None
            self.receipt.step("moved", True, detail)
            if self._armed_ahead is None:  # a move not announced ahead is armed now
                self._arm(detail["before"], detail["after"])
            self._armed_ahead = None
            self._write()
        self.emit("apply", name, detail)

    # --- obligations: armed at the commit point, settled by results and verifies ---------

    def _read_owed(self, live: list[str]) -> None:
        """What earlier runs left owed; a corrupt obligation is reported and rebuilt, never trusted."""
        assert self.receipt is not None
        fleet: dict[str, Any] = {}
        try:
            self.pending = obligations.read_completion(self.root)
        except HermesError as exc:  # owed, of unknown code: the retry syncs dependencies regardless
            self.receipt.step("obligations", False, exc.to_dict())
            self.pending = {"update_id": "unknown", "before": None, "after": None, "attempt": None}
        try:
            fleet = obligations.read_fleet(self.root)
        except HermesError as exc:  # rebuilt from the next verify
            self.receipt.step("obligations", False, exc.to_dict())
        self.fleet_owed = fleet
        self.expected = sorted(set(live) | set(fleet))
        if self.pending is None and not fleet:
            return
        completion = self.pending and self.pending["update_id"]
        self.receipt.step("owed", True, {"completion": completion, "fleet-restart": sorted(fleet)})
        owed = [f"the completion of update {completion}"] if completion else []
        if fleet:
            owed.append(f"a restart of {', '.join(fleet)}")
        self.emit("plan", "owed", "; ".join(owed))

    def _withdraw(self) -> None:
        """Apply failed after arming ahead of a move that did not happen: owe again exactly
        what was owed before (a run killed in that window leaves it armed: an extra completion
        is the safe side)."""
        prior, self._armed_ahead = self._armed_ahead, None
        if prior is None or self.committed:
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
            obligations.settle_fleet(self.root, fleet)
        except (OSError, HermesError) as exc:
            assert self.receipt is not None
            self.receipt.step("obligations", False, f"could not withdraw what was armed ahead of the move: {exc}")
        self.pending, self.fleet_owed = pending, fleet

    def _owed_before(self, before: str | None) -> str | None:
        """The code the owed completion starts from: a completion still owed covers its
        update's whole move (its dependency spec may have changed there), not only this one."""
        return self.pending["before"] if self.pending is not None else before

    def _owed_spec(self) -> str | None:
        """The dependency spec's digest from before the move the owed completion covers: the
        owed update's (a retry runs after nothing moved), else this run's from its plan."""
        return self.pending.get("dependency_spec", UNKNOWN_SPEC) if self.pending is not None else self.dependency_spec

    def _arm(self, before: str | None, after: str) -> None:
        """The commit point (armed just ahead of it): a completion is owed, and every gateway that
        should run the new code is owed a restart onto it. Both stay armed until done (apply's
        hook must not raise)."""
        assert self.receipt is not None
        before, spec = self._owed_before(before), self._owed_spec()
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
            why = f"the code moved to {after[:12]}; not restarted yet"
            parts = {
                p: obligations.owed_part(after, obligations.NOT_RESTARTED, why, self.update_id) for p in self.expected
            }
            obligations.settle_fleet(self.root, parts)
            self.fleet_owed = parts
        except (OSError, HermesError) as exc:
            self.receipt.step("obligations", False, f"could not arm: {exc}")

    def _settle(self, matrix: list[dict[str, Any]]) -> None:
        """A verify saw the whole fleet: owe exactly the gateways it found wanting."""
        assert self.receipt is not None
        owed = [row for row in matrix if followups_for([row], expected_profiles=set(self.expected))]
        states = {STALE: obligations.STALE, DOWN: obligations.DOWN}  # else alive, its code unread
        parts = {
            row["profile"]: obligations.owed_part(
                row["expected"],
                states.get(row["verdict"], obligations.NOT_RESTARTED),
                f"runs {str(row['running'])[:12]}"
                if row["verdict"] == STALE
                else "down"
                if row["verdict"] == DOWN
                else "alive, but what it runs could not be read",
                self.update_id,
            )
            for row in owed
        }
        obligations.settle_fleet(self.root, parts)
        self.fleet_owed = parts
        if owed:
            reasons = [f"gateway {row['profile']} is {row['verdict']}" for row in owed]
            self.receipt.followup("fleet-restart", "; ".join(reasons))

    def _owe_unfinished(self, why: str) -> None:
        """No completion delivered: it is owed, and so is every gateway restart it was to do."""
        assert self.receipt is not None
        self.receipt.followup("completion", why)
        if self.fleet_owed:
            expected = {str(part["expected"])[:12] for part in self.fleet_owed.values()}
            names = ", ".join(self.fleet_owed)
            self.receipt.followup(
                "fleet-restart", f"gateways {names} are not restarted onto {', '.join(sorted(expected))}"
            )

    def _retry_owed(self, code: str) -> None:
        """Already up to date: retry what earlier runs left owed, then verify the fleet."""
        receipt = self.receipt
        assert receipt is not None
        pending = self.pending
        if pending is not None:
            self._boundary("completion")
            self._adopt(pending)
            if self.pending is not None:  # nothing to adopt, or what was adopted still owes the tail
                receipt.step("retry", True, {"owed": "completion", "update_id": pending["update_id"], "how": "re-run"})
                self.emit("completion", "retry", f"the completion of update {pending['update_id']} is owed: running it")
                self._completion_done(self._complete(pending["before"], code))
                return  # the completion restarted and verified the fleet, or is owed again
        else:
            receipt.skip("completion", "already up to date: the code did not change")
        self._boundary("verify")
        matrix = fleet_matrix(self.root, code, expected_profiles=self.expected)
        # Stale gateways, and owed ones that are down: a unit module starts those it supervises.
        wanting = {row["profile"] for row in matrix if row["verdict"] == STALE}
        wanting |= {row["profile"] for row in matrix if row["verdict"] == DOWN and row["profile"] in self.fleet_owed}
        if wanting:
            receipt.step("retry", True, {"owed": "fleet-restart", "gateways": sorted(wanting)})
            self._boundary("restart")
            outcomes = self._restart(wanting, code)
            receipt.set("restart", outcomes)
            receipt.step("restart", all(o["ok"] for o in outcomes), {"gateways": len(outcomes)})
            self.emit("restart", "done", {"restarted": sum(o["ok"] for o in outcomes), "gateways": len(outcomes)})
            self._boundary("verify")
            matrix = fleet_matrix(self.root, code, expected_profiles=self.expected)
        receipt.set("fleet", matrix)
        self._settle(matrix)
        self.emit("verify", "done", {"fleet": matrix})

    def _restart(self, profiles: set[str], code: str) -> list[dict[str, Any]]:
        """Restart the gateways of ``profiles`` onto ``code``, each through its own kind."""
        return [o.to_dict() for o in restart_fleet(self.root, code, only=profiles)]

    # --- the completion ------------------------------------------------------------------

    def _complete(self, before: str | None, after: str | None) -> dict[str, Any] | None:
        receipt = self.receipt
        assert receipt is not None and self.receipt_path is not None
        base = self.receipt_path.with_suffix("")
        request = Request.new(
            update_id=self.update_id,
            root=str(self.root),
            install_root=str(self.install_root),
            before=before,
            after=after,
            result_path=str(base) + ".result.json",
            live_profiles=self.expected,
            options={k: v for k, v in self.options.items() if isinstance(v, (str, bool, int, type(None)))},
            plan=redact(receipt["plan"]) if receipt["plan"] is not None else None,
            dependency_spec=self._owed_spec(),
        )
        request_path = Path(str(base) + ".request.json")
        try:
            request.write(request_path)
            self._note_attempt(request_path, Path(request.result_path))
            # A fresh interpreter started from the new tree: nothing of it is imported here.
            # Its own session: a stop or a timeout signals its whole process group, so a pip
            # it runs does not outlive it (nothing signals the updater's group: the updater
            # is in a session of its own, away from the CLI's terminal).
            child = subprocess.Popen(
                [sys.executable, "-m", ENTRY_MODULE, str(request_path)],
                cwd=self.install_root,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(self.install_root)},
                pass_fds=(self.lock.fileno(),),  # the completion shares the update lock
                start_new_session=True,
            )
        except OSError as exc:
            self._owe_unfinished(f"the completion could not be started: {exc}")
            return None
        self.emit("completion", "started", {"pid": child.pid})
        stopped = self._wait(child)
        try:
            result = read_result(Path(request.result_path), request)
        except BadResult as exc:  # taken as no result: owed, never half-accepted
            result = None
            self._owe_unfinished(f"the completion (pid {child.pid}) answered, but not usably: {exc.message}")
        else:
            if result is None:
                self._owe_unfinished(f"the completion (pid {child.pid}) exited {child.returncode} without a result")
            else:
                self._accept(result)
        if stopped:
            raise Interrupted
        return result

    def _note_attempt(self, request: Path, result: Path) -> None:
        """Name this completion in the owed one, so its result counts even if this run dies."""
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
            assert self.receipt is not None
            self.receipt.step("obligations", False, f"could not note the completion started: {exc}")

    def _wait(self, child: subprocess.Popen) -> bool:
        """Wait for the completion; True if a stop request ended it first (SIGTERM, then SIGKILL,
        each to its whole process group: a pip it runs goes with it)."""
        deadline = time.monotonic() + COMPLETION_TIMEOUT
        while child.poll() is None:
            if self._stop.is_set():
                _signal_group(child, signal.SIGTERM)
                try:
                    child.wait(timeout=COMPLETION_STOP_GRACE)
                except subprocess.TimeoutExpired:
                    pass
                _signal_group(child, signal.SIGKILL)  # and whatever of its group is left
                child.wait()
                return True
            if time.monotonic() > deadline:
                _signal_group(child, signal.SIGKILL)
                child.wait()
                return False
            time.sleep(POLL_INTERVAL)
        return False

    def _adopt(self, pending: dict[str, Any]) -> None:
        """Take the result a completion delivered after its updater died: correlated, so it counts
        (its fleet matrix is old by now: the fleet is verified again after it)."""
        attempt = pending["attempt"]
        if attempt is None:
            return
        try:
            request = Request.read(Path(attempt["request"]))
        except (OSError, HermesError):
            return
        try:
            result = read_result(Path(attempt["result"]), request)
        except BadResult:  # as if it had not answered: the owed completion is run again
            return
        if result is None:
            return
        assert self.receipt is not None
        self.receipt.step(
            "retry",
            True,
            {"owed": "completion", "update_id": pending["update_id"], "how": "adopted", "result": attempt["result"]},
        )
        self.emit(
            "completion", "adopted", f"the completion of update {attempt['update_id']} finished after its updater died"
        )
        self._accept(result, verified=False)

    def _accept(self, result: dict[str, Any], *, verified: bool = True) -> None:
        """A correlated result: into the receipt, and the obligations settled by it. The
        completion stays owed while its tail is (a dependency sync or migration that failed);
        the fleet is settled from its verify (``verified``: the result is this moment's)."""
        receipt = self.receipt
        assert receipt is not None
        receipt.set("completion", result["completion"])
        receipt.set("restart", result.get("restart", []))
        receipt.set("fleet", result.get("fleet", []))
        for step in result.get("steps", []):  # at the completion's own times, not this moment's
            receipt.step(step["name"], step["ok"], step.get("detail"), at=_moment(step.get("at")))
        for skip in result.get("skips", []):
            receipt.skip(skip["name"], skip["reason"], at=_moment(skip.get("at")))
        owed: dict[str, list[str]] = {}
        for entry in result.get("followups", []):
            owed.setdefault(entry["step"], []).append(entry["reason"])
        for step, reasons in owed.items():
            receipt.followup(step, "; ".join(reasons))
        if not set(owed) - {"fleet-restart"}:
            obligations.clear_completion(self.root)
            self.pending = None
        if verified and any(step["name"] == "verify" for step in result.get("steps", [])):
            self._settle(result.get("fleet", []))


class _Finish(Exception):
    def __init__(self, outcome: str):
        super().__init__(outcome)
        self.outcome = outcome


def _moment(at: str | None) -> datetime | None:
    """A result's timestamp (``read_result`` checked it is ISO with a timezone); None: now."""
    return datetime.fromisoformat(at) if at is not None else None


def _signal_group(child: subprocess.Popen, signum: int) -> None:
    """``signum`` to the completion's process group (it leads its own session)."""
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):  # the group is gone already
        pass


def _plan_summary(plan: dict[str, Any]) -> dict[str, Any]:
    return {
        "install": plan["install"]["kind"],
        "profiles": len(plan.get("profiles", [])),
        "gateways": len(plan.get("gateways", [])),
        "target": (plan.get("git") or {}).get("remote_sha"),
    }


def run_update(root: Path, install_root: Path, update_id: str, options: dict[str, Any]) -> int:
    """The updater process's body; its exit code is the update's.

    A stop signal is caught from the first moment, before the lock and the receipt exist, so
    it can never cut a run between its first receipt and its last: the run ends
    ``interrupted`` at its next stage boundary (or stops the completion it waits for).
    """
    stop = threading.Event()
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: stop.set())
    lock = UpdateLock(root)
    try:
        lock.acquire(update_id)
    except HermesError as exc:  # another update holds it
        print(f"updater: {exc.message}", file=sys.stderr)
        return 2
    try:
        return trio.run(UpdateRun(root, install_root, update_id, options, lock, stop).main)
    finally:
        lock.release()
