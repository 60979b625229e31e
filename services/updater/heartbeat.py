"""The completion's progress on disk: the step it is in, since when, within what bound, and when
it last said so (``completion_contract.StepProgress``), rewritten every ``EVERY`` seconds by a
thread of its own. The updater waiting on the completion reads it to show the step live and to
stop a step that passed its bound even when the completion cannot stop it itself."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from services.updater.completion_contract import StepProgress
from shared.files import write_json_atomic

EVERY = 2.0
# How long the heartbeat's thread has to finish its last write when the completion ends.
JOIN = 5.0


class Heartbeat:
    """A context manager: beats from ``enter``'s first step until the block ends."""

    def __init__(self, path: Path, update_id: str) -> None:
        self.path, self.update_id = path, update_id
        self._step: tuple[str, float, datetime] | None = None
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
        self._write()

    def _beat(self) -> None:
        while not self._stopped.wait(EVERY):
            self._write()

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
