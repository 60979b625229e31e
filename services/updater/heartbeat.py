"""The completion's progress on disk: the step it is in, since when, within what bound, and when
it last said so (``completion_contract.StepProgress``), rewritten every ``EVERY`` seconds by a
thread of its own. The updater waiting on the completion reads it to show the step live and to
stop a step that passed its bound even when the completion cannot stop it itself.

The same thread is the completion's last resort where no updater is left to do that (it was
killed): a step past its bound by ``STEP_SLACK`` kills the completion's process group, so an
orphaned completion never holds the update lock for ever."""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from services.updater.completion_contract import STEP_SLACK, StepProgress
from shared.files import write_json_atomic

EVERY = 2.0
# How long the heartbeat's thread has to finish its last write when the completion ends.
JOIN = 5.0


class Heartbeat:
    """A context manager: beats from ``enter``'s first step until the block ends."""

    def __init__(self, path: Path, update_id: str) -> None:
        self.path, self.update_id = path, update_id
        self._step: tuple[str, float, datetime] | None = None
        self._deadline = float("inf")  # monotonic: past it, the step did not yield to its stop
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="completion-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stopped.set()
        self._thread.join(JOIN)

    def enter(self, step: str, bound: float) -> None:
        """The completion begins ``step``, which may take ``bound`` seconds: said at once."""
        with self._lock:
            self._step = (step, bound, datetime.now(UTC))
            self._deadline = time.monotonic() + bound + STEP_SLACK
        self._write()

    def _beat(self) -> None:
        while not self._stopped.wait(EVERY):
            self._write()
            if time.monotonic() > self._deadline:
                _kill_this_completion()

    def _write(self) -> None:
        with self._lock:
            if self._step is None:
                return
            step, bound, started_at = self._step
            progress = StepProgress(os.getpid(), step, bound, started_at, datetime.now(UTC))
            try:  # best effort: the updater's bound holds without it
                write_json_atomic(self.path, progress.to_dict(self.update_id))
            except OSError:
                pass


def _kill_this_completion() -> None:
    """SIGKILL to the completion's process group (a pip it runs goes too) when it leads one, as
    the updater starts it; else to this process alone."""
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
