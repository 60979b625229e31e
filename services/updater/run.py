"""One update run as a process (the OLD code): the updater's service, its event stream, and
the body of ``python -m services.updater``.

The run's stages (``pipeline``) block on files and subprocesses, so they run on a worker
thread while the trio thread serves the control socket: ``follow`` streams every progress
event from the first to any follower, then the outcome; ``status`` says where the run is.
The run goes on whether anyone follows or not. The socket answers first: the pipeline's
modules (most of the updater's start-up) are imported on the worker thread once it does, and
all of them before anything moves the tree, so this interpreter never imports the new code.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from services.updater import ops
from services.updater.lock import UpdateLock
from services.updater.stages import DONE, STARTING
from shared import exit_codes, faults, homes
from shared.errors import HermesError
from shared.transport import Call, Service, curve

if TYPE_CHECKING:
    from services.updater.pipeline import Pipeline

MAX_EVENTS = 2000
FOLLOWER_GRACE = 2.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


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
        self.root = root
        self.update_id = update_id
        self._arguments = (root, install_root, update_id, options, lock, stop)
        self.pipeline: Pipeline | None = None  # made on the worker thread, once the socket answers
        self._events: list[dict[str, Any]] = []
        self._new_event = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None

    async def main(self) -> int:
        self._token = trio.lowlevel.current_trio_token()
        endpoint = homes.endpoint(self.root, ops.SERVICE)
        service = Service(
            ops.SERVICE,
            endpoint.bind_control,
            lock_path=endpoint.lock_path,
            options=curve.server_options(endpoint),
        )
        service.add(ops.FOLLOW, self._follow)
        service.add(ops.STATUS, self._status)
        async with trio.open_nursery() as nursery:
            await nursery.start(service.serve)
            code = await trio.to_thread.run_sync(self._run_pipeline)
            self._publish({"stage": DONE.name, "status": self._outcome(), "detail": {"exit_code": code}})
            with trio.move_on_after(FOLLOWER_GRACE):  # let followers read the end
                await service.wait_idle()
            service.stop(grace=0.5)
            await service.wait_stopped()
            nursery.cancel_scope.cancel()
        return code

    def _run_pipeline(self) -> int:
        """The whole run, on the worker thread."""
        # Imported here, not at the top: the control socket answers before the pipeline's
        # modules load, and they load before the run's first stage (see the module's doc).
        from services.updater.pipeline import Pipeline

        self.pipeline = Pipeline(*self._arguments, self._from_worker)
        return self.pipeline.run()

    def _outcome(self) -> str | None:
        return None if self.pipeline is None else self.pipeline.outcome

    async def _follow(self, call: Call) -> dict[str, Any]:
        index = call.args.get("from", 0)
        while True:
            while index < len(self._events):
                await call.emit(self._events[index])
                index += 1
            if self.pipeline is not None and self.pipeline.exit_code is not None:
                return self._terminal(self.pipeline)
            await self._new_event.wait()

    async def _status(self, call: Call) -> dict[str, Any]:
        stage = STARTING if self.pipeline is None else self.pipeline.stage
        return {"update_id": self.update_id, "pid": os.getpid(), "stage": stage.name, "outcome": self._outcome()}

    def _terminal(self, run: Pipeline) -> dict[str, Any]:
        return {
            "update_id": self.update_id,
            "outcome": run.outcome,
            "exit_code": run.exit_code,
            "receipt": str(run.receipt_path) if run.receipt_path else None,
        }

    def _publish(self, event: dict[str, Any]) -> None:
        """In the trio thread: record an event and wake the followers."""
        event = {"seq": len(self._events), "at": _now(), **event}
        if len(self._events) < MAX_EVENTS:
            self._events.append(event)
        self._new_event.set()
        self._new_event = trio.Event()

    def _from_worker(self, event: dict[str, Any]) -> None:
        """An event of the pipeline's worker thread, handed to the trio thread."""
        trio.from_thread.run_sync(self._publish, event, trio_token=self._token)


def run_update(root: Path, install_root: Path, update_id: str, options: dict[str, Any]) -> int:
    """The updater process's body; its exit code is the update's.

    A stop signal is caught from the first moment, before the lock and the receipt exist, so
    it can never cut a run between its first receipt and its last: the run ends
    ``interrupted`` at its next stage boundary (or stops the completion it waits for).
    """
    stop = threading.Event()
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: stop.set())
    try:
        curve.server_options(homes.endpoint(root, ops.SERVICE))  # a TCP endpoint without its keys never starts
    except HermesError as exc:
        print(f"updater: {exc.message}", file=sys.stderr)
        return exit_codes.REFUSED
    lock = UpdateLock(root)
    try:
        lock.acquire(update_id)
    except HermesError as exc:  # another update holds it
        print(f"updater: {exc.message}", file=sys.stderr)
        return exit_codes.REFUSED
    try:
        return trio.run(UpdateRun(root, install_root, update_id, options, lock, stop).main)
    finally:
        faults.pause_at("updater:release")  # its last word said, the lock still held
        lock.release()
