"""The handoff retry worker: finishes the guest handoffs that any process left to retry.

Each tick drains every due record (``nous.guest_handoff.attempts.drain``: reserved, claimed,
the answer recorded), then sleeps until the next record falls due, at most ``TICK_MAX``. A
``drain`` call wakes it at once.
It follows new code on disk by itself (``shared.lifecycle``).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import trio

from nous.guest_handoff import attempts, records, rules
from services.handoff_retry import ops
from shared.homes import Endpoint
from shared.lifecycle import Lifecycle, serve_until_stopped
from shared.locks import FileLock
from shared.transport import Call
from shared.worker_main import install_service

log = logging.getLogger(__name__)

TICK_MAX = 30.0
TICK_MIN = 0.5
LONG_POLL_INTERVAL = 0.2


class HandoffWorker:
    def __init__(self, root: Path, endpoint: Endpoint, lock: FileLock):
        self.root = Path(root)
        self.life = Lifecycle()
        self._wake = trio.Event()
        self._next_tick: float | None = None
        self._draining = trio.Lock()
        self.service = install_service(ops.SERVICE, root, endpoint, lock, lambda: {"root": str(self.root)})
        self.service.add(ops.STATUS, self._status)
        self.service.add(ops.HANDOFF_STATUS, self._handoff_status)
        self.service.add(ops.DRAIN, self._drain_op)

    async def run(self) -> int:
        return await serve_until_stopped(self.service, self.life, self._ticks)

    async def _ticks(self) -> None:
        while True:
            report = await self._drain()
            if report.attempted:
                log.info("handoff tick: %s", ", ".join(report.attempted))
            wait = await trio.to_thread.run_sync(self._until_next_due)
            self._next_tick = time.time() + wait
            with trio.move_on_after(wait):
                await self._wake.wait()
            self._wake = trio.Event()

    async def _drain(self) -> attempts.DrainReport:
        async with self._draining:  # a tick and a drain call never run side by side here
            try:
                return await trio.to_thread.run_sync(attempts.drain, self.root)
            except Exception:
                log.exception("handoff drain failed; the records stay for the next tick")
                return attempts.DrainReport()

    def _until_next_due(self) -> float:
        now = time.time()
        try:
            due = [rules.due_at(rules.rearm(r, now=now)) for r in records.read_records(self.root).values()]
        except Exception:
            return TICK_MAX
        return max(TICK_MIN, min([at - now for at in due if at is not None] + [TICK_MAX]))

    async def _status(self, call: Call) -> dict[str, Any]:
        views = await trio.to_thread.run_sync(records.public_records, self.root)
        return {"records": views, "pid": os.getpid(), "code_sha": self.life.code_sha, "next_tick": self._next_tick}

    async def _handoff_status(self, call: Call) -> dict[str, Any]:
        since = call.args["since"]
        deadline = trio.current_time() + call.args.get("wait", 0.0)
        while True:
            views = await trio.to_thread.run_sync(records.public_records, self.root)
            latest = max((v["updated_at"] for v in views), default=0.0)
            if latest > since or trio.current_time() >= deadline:
                return {"records": views, "updated_at": latest}
            await trio.sleep(LONG_POLL_INTERVAL)

    async def _drain_op(self, call: Call) -> dict[str, Any]:
        report = await self._drain()
        return {"attempted": report.attempted, "records": report.records}
