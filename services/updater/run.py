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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import trio

from services.updater import ops
from services.updater.apply_archive import DirtyTree, SwapFailed, apply_archive, should_fall_back
from services.updater.apply_git import ApplyResult, GitFailed, NotFastForward, WrongBranch, apply
from services.updater.archive import ArchiveFailed
from services.updater.handoff import ENTRY_MODULE, Request, read_result
from services.updater.lock import UpdateLock
from services.updater.plan import DEFAULT_BRANCH, make_plan
from services.updater.receipt import Receipt, ReceiptStore, exit_code_for
from services.updater.settings import UpdateSettings, load_settings
from services.updater.snapshot import BackupFailed, SnapshotFailed, full_backup, snapshot_all
from services.updater.verify import fleet_matrix, followups_for
from shared import homes
from shared.errors import HermesError
from shared.identity import current_identity
from shared.service import Call, Service
from shared.version import current_branch

log = logging.getLogger(__name__)

COMPLETION_TIMEOUT = 1800.0
MAX_EVENTS = 2000
FOLLOWER_GRACE = 2.0


class Interrupted(Exception):
    """A stop signal arrived; the run ends ``interrupted`` at the next stage boundary."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class UpdateRun:
    def __init__(self, root: Path, install_root: Path, update_id: str, options: dict[str, Any], lock: UpdateLock):
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
        self._stop_requested = False
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
            nursery.start_soon(self._watch_signals)
            code = await trio.to_thread.run_sync(self.pipeline)
            self._publish({"stage": "done", "status": self.outcome, "detail": {"exit_code": code}})
            with trio.move_on_after(FOLLOWER_GRACE):  # let followers read the end
                while service.in_flight:
                    await trio.sleep(0.05)
            service.stop(grace=0.5)
            await service.wait_stopped()
            nursery.cancel_scope.cancel()
        return code

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for _ in signals:
                self._stop_requested = True

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
        self.store.mark_interrupted()
        self.receipt = Receipt.begin(self.update_id, list(sys.orig_argv), current_identity(), self._code())
        self._write()
        try:
            self._stages()
            outcome = self.outcome or "success"
        except Interrupted:
            outcome = "interrupted"
            self.receipt.step("interrupted", False, "stopped by a signal" + (" after the commit point" if self.committed else ""))
        except _Finish as finish:
            outcome = finish.outcome
        except Exception as exc:  # the receipt must still say what happened
            log.exception("update %s failed", self.update_id)
            self.receipt.step(self.stage, False, f"{type(exc).__name__}: {exc}")
            outcome = "success" if self.committed else "failed"
            if self.committed:
                self.receipt.followup(self.stage, f"{type(exc).__name__}: {exc}")
        code = exit_code_for(outcome, committed=self.committed)
        self.receipt.set("after", self._code())
        self.receipt.finish(outcome, code)
        self._write()
        # Only now: followers are answered as soon as exit_code is set, and must find the
        # final receipt on disk when they read it.
        self.outcome, self.exit_code = outcome, code
        return code

    def _code(self) -> dict[str, Any]:
        from shared.version import __version__, code_sha

        return {"code_sha": code_sha(self.install_root), "code_version": __version__}

    def _write(self) -> None:
        assert self.receipt is not None
        self.receipt_path = self.store.write(self.receipt)

    def _boundary(self, stage: str) -> None:
        """Between stages: the receipt is rewritten and a stop request is honoured."""
        self._write()
        if self._stop_requested:
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
        backup = "none" if self.options.get("no_backup") else "full" if self.options.get("backup") else "quick"
        branch = self.options.get("branch") or settings.branch
        plan = make_plan(self.root, self.install_root, branch=branch, backup=backup, archive_url=settings.archive_url)
        plan_data = plan.to_dict()
        receipt.set("plan", plan_data)
        receipt.step("plan", True)
        self.emit("plan", "done", _plan_summary(plan_data))
        install = plan_data["install"]
        if not install["in_place"]:
            receipt.skip("apply", f"{install['kind']} installs are not updated in place: run `{install['external_command']}`")
            self.emit("plan", "refused", install)
            raise _Finish("refused")
        git_failed = plan_data["git"] is None
        if (git_failed and not settings.archive_url) or (not git_failed and plan_data["git"].get("remote_sha") is None):
            why = (plan_data.get("git_error") or {}).get("message") or "origin has no such branch"
            receipt.step("plan", False, f"cannot read the update target: {why}")
            self.emit("plan", "fail", why)
            raise _Finish("failed")
        live_profiles = [g["profile"] for g in plan_data.get("gateways", [])]

        self._boundary("snapshot")
        if self.options.get("no_backup"):
            receipt.skip("snapshot", "--no-backup: no snapshot and no backup were taken")
            self.emit("snapshot", "skip")
        else:
            try:
                snapshots = snapshot_all(self.root, self.update_id)
                if self.options.get("backup"):
                    receipt.set("backup", full_backup(self.root, self.update_id))
            except (SnapshotFailed, BackupFailed) as exc:
                receipt.step("snapshot", False, exc.message)
                self.emit("snapshot", "fail", exc.message)
                raise _Finish("failed") from None
            receipt.set("snapshots", snapshots)
            receipt.step("snapshot", True, {"profiles": len(snapshots)})
            self.emit("snapshot", "done", {"profiles": len(snapshots)})

        self._boundary("apply")
        branch = plan_data["git"]["branch"] if plan_data["git"] else branch or current_branch(self.install_root) or DEFAULT_BRANCH
        before = plan_data["code"]["code_sha"]
        try:
            result = self._apply(branch, settings)
        except (NotFastForward, WrongBranch, GitFailed, ValueError, ArchiveFailed, DirtyTree, SwapFailed) as exc:
            detail = exc.to_dict() if isinstance(exc, HermesError) else str(exc)
            receipt.step("apply", False, detail)
            self.emit("apply", "fail", getattr(exc, "message", str(exc)))
            if not self.committed:
                raise _Finish("failed") from None
            # The tree moved before the failure (a stash restore that broke): the rest of the
            # update still runs, and what broke is owed.
            receipt.followup("apply", getattr(exc, "message", str(exc)))
            self._boundary("completion")
            self._complete(before, self._code()["code_sha"], live_profiles)
            return
        receipt.set("apply", result.to_dict())
        applied = {"before": result.before, "after": result.after, "moved": result.moved, "via": result.via}
        receipt.step("apply", True, applied)
        self.emit("apply", "done", applied)
        if result.user_action:
            receipt.user_action(result.user_action)

        if not result.moved:
            receipt.skip("completion", "already up to date: the code did not change")
            self._boundary("verify")
            matrix = fleet_matrix(self.root, result.after, expected_profiles=live_profiles)
            receipt.set("fleet", matrix)
            for owed in followups_for(matrix, expected_profiles=set(live_profiles)):
                receipt.followup(owed["step"], owed["reason"])
            self.emit("verify", "done", {"fleet": matrix})
            return

        self._boundary("completion")
        completion = self._complete(result.before, result.after, live_profiles)
        if result.stash == "parked":
            self.outcome = "partial"  # committed, but only the user can re-apply their changes
        if completion is None:
            self.emit("completion", "fail", "owed: see the receipt's follow-ups")
        else:
            restarted = completion.get("restart", [])
            self.emit("completion", "done", {
                "restarted": sum(r["ok"] for r in restarted),
                "gateways": len(restarted),
                "current": sum(row["verdict"] == "current" for row in completion.get("fleet", [])),
                "followups": len(completion.get("followups", [])),
            })  # fmt: skip

    def _apply(self, branch: str, settings: UpdateSettings) -> ApplyResult:
        """Fast-forward with git; when git itself fails before the commit point and an archive
        URL is configured, install the branch's source archive instead."""
        try:
            return apply(self.install_root, branch, on_step=self._applied)
        except GitFailed as exc:
            if self.committed or not settings.archive_url or not should_fall_back(exc):
                raise
            assert self.receipt is not None
            self.receipt.step("apply", False, exc.to_dict())
            self.emit("apply", "fallback", f"{exc.message}; installing the release archive instead")
            self._write()
        return apply_archive(
            self.install_root,
            branch,
            url_template=settings.archive_url,
            work_id=self.update_id,
            preserved=settings.preserved_nested,
            on_step=self._applied,
        )

    def _applied(self, name: str, detail: Any) -> None:
        if name == "moved":
            self.committed = True  # the commit point: from here on nothing fails the update
            assert self.receipt is not None
            self.receipt.step("moved", True, detail)
            self._write()
        self.emit("apply", name, detail)

    def _complete(self, before: str, after: str, live_profiles: list[str]) -> dict[str, Any] | None:
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
            live_profiles=live_profiles,
            options={k: v for k, v in self.options.items() if isinstance(v, (str, bool, int, type(None)))},
        )
        try:
            request_path = Path(str(base) + ".request.json")
            request.write(request_path)
            # A fresh interpreter started from the new tree: nothing of it is imported here.
            child = subprocess.Popen(
                [sys.executable, "-m", ENTRY_MODULE, str(request_path)],
                cwd=self.install_root,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(self.install_root)},
                pass_fds=(self.lock.fileno(),),  # the completion shares the update lock
            )
        except OSError as exc:
            receipt.followup("completion", f"the completion could not be started: {exc}")
            return None
        self.emit("completion", "started", {"pid": child.pid})
        try:
            child.wait(timeout=COMPLETION_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        result = read_result(Path(request.result_path), request)
        if result is None:
            receipt.followup("completion", f"the completion (pid {child.pid}) exited {child.returncode} without a result")
            return None
        receipt.set("completion", result["completion"])
        receipt.set("restart", result.get("restart", []))
        receipt.set("fleet", result.get("fleet", []))
        for step in result.get("steps", []):
            receipt.step(step["name"], bool(step["ok"]), step.get("detail"))
        for skip in result.get("skips", []):
            receipt.skip(skip["name"], skip["reason"])
        for owed in result.get("followups", []):
            receipt.followup(owed["step"], owed["reason"])
        return result


class _Finish(Exception):
    def __init__(self, outcome: str):
        super().__init__(outcome)
        self.outcome = outcome


def _plan_summary(plan: dict[str, Any]) -> dict[str, Any]:
    return {
        "install": plan["install"]["kind"],
        "profiles": len(plan.get("profiles", [])),
        "gateways": len(plan.get("gateways", [])),
        "target": (plan.get("git") or {}).get("remote_sha"),
    }


def run_update(root: Path, install_root: Path, update_id: str, options: dict[str, Any]) -> int:
    """The updater process's body; its exit code is the update's."""
    lock = UpdateLock(root)
    try:
        lock.acquire(update_id)
    except HermesError as exc:  # another update holds it
        print(f"updater: {exc.message}", file=sys.stderr)
        return 2
    try:
        return trio.run(UpdateRun(root, install_root, update_id, options, lock).main)
    finally:
        lock.release()
