"""The completion as the old updater runs it: a child process of the NEW tree, started with a
request file, waited for, and only its correlated result taken into the receipt.

The child is a fresh interpreter started from the new tree (``completion_contract.ENTRY_MODULE``);
nothing of that tree is imported here. It leads a session of its own, so a stop or a timeout
signals its whole process group and a pip it runs does not outlive it (nothing signals the
updater's own group: the updater is in a session of its own, away from the CLI's terminal). It
is handed the update lock, so a completion orphaned by a killed updater still keeps a second
update out until it has finished; the next update then adopts the result it left.

While it waits, the updater reads the completion's progress (``completion_contract``): each new
step, and every ``PROGRESS_EVERY`` seconds the step's age, go to the followers and into the
receipt (``completion.progress``). A step past its bound by ``STEP_SLACK`` (one that did not
yield to the completion's own stop) ends the completion: owed, with a follow-up naming the step.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from services.updater.completion_contract import (
    ENTRY_MODULE,
    STEP_SLACK,
    BadResult,
    Request,
    StepProgress,
    progress_path,
    read_progress,
    read_result,
)
from services.updater.debts import Debts
from services.updater.lock import UpdateLock
from services.updater.receipt import Receipt
from services.updater.stages import COMPLETION, Stage
from shared.errors import HermesError

# The whole completion's bound while it says nothing of its steps (one of an older release).
TIMEOUT = 1800.0
# How often the step's age goes to the followers and into the receipt.
PROGRESS_EVERY = 4.0
# How long a completion told to stop (SIGTERM) has before it is killed.
STOP_GRACE = 10.0
# How soon a stop request is seen while the completion runs (its exit is seen at once).
STOP_CHECK = 0.5

Emit = Callable[[Stage, str, Any], None]
Save = Callable[[], None]


class CompletionChild:
    def __init__(
        self,
        install_root: Path,
        receipt: Receipt,
        debts: Debts,
        emit: Emit,
        lock: UpdateLock,
        stop: threading.Event,
        save: Save,
    ) -> None:
        self.install_root, self.receipt, self.debts, self.emit = install_root, receipt, debts, emit
        self.lock, self.stop, self.save = lock, stop, save

    def run(self, request: Request, request_path: Path) -> tuple[dict[str, Any] | None, bool]:
        """Start the completion of ``request`` and wait for it. Its result, or None when it
        delivered none usable (then it is owed); and whether a stop request ended it first."""
        try:
            request.write(request_path)
            with contextlib.suppress(FileNotFoundError):  # only this attempt's progress counts
                progress_path(request.result_path).unlink()
            self.debts.note_attempt(request_path, Path(request.result_path))
            child = subprocess.Popen(
                [sys.executable, "-m", ENTRY_MODULE, str(request_path)],
                cwd=self.install_root,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(self.install_root)},
                pass_fds=(self.lock.fileno(),),  # the completion shares the update lock
                start_new_session=True,
            )
        except OSError as exc:
            self.debts.unfinished(f"the completion could not be started: {exc}")
            return None, False
        self.emit(COMPLETION, "started", {"pid": child.pid})
        watch = _Watch(self, child.pid, request)
        stopped = self._wait(child, watch)
        # Killed by this wait, or by its own heartbeat (SIGKILL past its step's bound).
        overran = watch.overran or (watch.past_its_step() if child.returncode == -signal.SIGKILL else None)
        if overran is not None and not stopped:
            self._overran(child.pid, overran)
            return None, stopped
        try:
            result = read_result(Path(request.result_path), request)
        except BadResult as exc:  # taken as no result: owed, never half-accepted
            self.debts.unfinished(f"the completion (pid {child.pid}) answered, but not usably: {exc.message}")
            return None, stopped
        if result is None:
            self.debts.unfinished(f"the completion (pid {child.pid}) exited {child.returncode} without a result")
        else:
            self.accept(result)
        return result, stopped

    def _wait(self, child: subprocess.Popen[bytes], watch: _Watch) -> bool:
        """Wait for the completion; True if a stop request ended it first (SIGTERM, then SIGKILL,
        each to its whole process group: a pip it runs goes with it). Its exit wakes the wait at
        once; a stop request and its progress are seen within ``STOP_CHECK``."""
        exited = threading.Event()
        waiter = threading.Thread(target=_reap, args=(child, exited), name="completion-wait", daemon=True)
        waiter.start()
        while not exited.wait(STOP_CHECK):
            if self.stop.is_set():
                _signal_group(child, signal.SIGTERM)
                exited.wait(STOP_GRACE)
                _signal_group(child, signal.SIGKILL)  # and whatever of its group is left
                exited.wait()
                return True
            if watch.past_bound():
                _signal_group(child, signal.SIGKILL)
                exited.wait()
                return False
        return False

    def _overran(self, pid: int, progress: StepProgress | None) -> None:
        """The completion was killed past its bound: owed, and the step it hung in named."""
        if progress is None:
            self.debts.unfinished(f"the completion (pid {pid}) said nothing of its steps for {TIMEOUT:g} s: killed")
            return
        why = f"passed its bound of {progress.bound:g} s (update.step_timeout) by {STEP_SLACK:g} s: the completion was killed"
        self.receipt.step(progress.step, False, why)
        self.receipt.followup(progress.step, why)
        self.debts.unfinished(f"the completion (pid {pid}) was killed in its {progress.step} step")
        self.emit(COMPLETION, "fail", f"{progress.step} {why}")

    def adopt(self, pending: Mapping[str, Any]) -> None:
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
        self.receipt.step(
            "retry",
            True,
            {"owed": "completion", "update_id": pending["update_id"], "how": "adopted", "result": attempt["result"]},
        )
        self.emit(
            COMPLETION, "adopted", f"the completion of update {attempt['update_id']} finished after its updater died"
        )
        self.accept(result, verified=False)

    def accept(self, result: Mapping[str, Any], *, verified: bool = True) -> None:
        """A correlated result: into the receipt, and what it owes into the obligations (its
        verify replaces the fleet's debt only when ``verified``: the result is this moment's)."""
        receipt = self.receipt
        receipt.set("completion", result["completion"])
        # As the completion wrote them: the new release's rows, which its own commands read.
        receipt.set("restart", result.get("restart", []))
        receipt.set("fleet", result.get("fleet", []))
        for step in result.get("steps", []):  # at the completion's own times, not this moment's
            receipt.step(step["name"], step["ok"], step.get("detail"), at=_moment(step.get("at")))
        for skip in result.get("skips", []):
            receipt.skip(skip["name"], skip["reason"], at=_moment(skip.get("at")))
        self.debts.after_result(result, verified=verified)


class _Watch:
    """The completion's progress as the updater sees it, and the bound it is held to."""

    def __init__(self, child: CompletionChild, pid: int, request: Request) -> None:
        self.child, self.pid, self.request = child, pid, request
        self.path = progress_path(request.result_path)
        self.started = time.monotonic()
        self.progress: StepProgress | None = None
        self.step_seen = self.started  # when this updater first saw the current step
        self.told = self.started  # when the followers and the receipt were last told
        self.overran: StepProgress | None = None  # set once the completion is past its bound

    def past_bound(self) -> bool:
        """Read the progress, pass it on, and say whether the completion must be killed."""
        now = time.monotonic()
        progress, known = read_progress(self.path, self.request), self.progress
        if progress is not None:
            if known is None or (progress.step, progress.started_at) != (known.step, known.started_at):
                self.progress, self.step_seen = progress, now
                self._tell(now)
            else:
                self.progress = progress
        if self.progress is not None and now - self.told >= PROGRESS_EVERY:
            self._tell(now)
        if self.progress is None:
            deadline = self.started + TIMEOUT
        else:
            deadline = self.step_seen + self.progress.bound + STEP_SLACK
        if now <= deadline:
            return False
        self.overran = self.progress
        return True

    def past_its_step(self) -> StepProgress | None:
        """The step the completion was in, when it had passed its bound by the time it ended."""
        progress = self.progress
        if progress is None or time.monotonic() < self.step_seen + progress.bound:
            return None
        return progress

    def _tell(self, now: float) -> None:
        """The step and its age, to the followers and into the receipt."""
        progress = self.progress
        if progress is None:
            return
        self.told = now
        self.child.emit(COMPLETION, progress.step, f"{now - self.step_seen:.0f} s of {progress.bound:g} s")
        record = progress.to_dict(self.request.update_id)
        try:
            self.child.receipt.set("completion", {"pid": self.pid, "code_sha": None, "progress": record})
            self.child.save()
        except (OSError, HermesError):  # the receipt on disk is the run's to write; a miss here is caught up
            pass


def _moment(at: str | None) -> datetime | None:
    """A result's timestamp (``read_result`` checked it is ISO with a timezone); None: now."""
    return datetime.fromisoformat(at) if at is not None else None


def _reap(child: subprocess.Popen[bytes], exited: threading.Event) -> None:
    """On a thread of its own: block until the completion has exited and is reaped, then say so."""
    child.wait()
    exited.set()


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    """``signum`` to the completion's process group (it leads its own session)."""
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):  # the group is gone already
        pass
