"""When an install-wide worker stops: a signal, or new code on disk.

Such a worker lives as long as the install, so an update must not leave it running old code:
it watches the commit on disk and, once it moved and the worker is not busy, stops and asks
to be replaced by a fresh interpreter of the new code (``shared.reexec``, keeping the pid).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable

import trio

from shared import stop_grace
from shared.transport import Service
from shared.version import code_sha

log = logging.getLogger(__name__)

# How often the commit on disk is compared with the one this process runs.
CODE_CHECK = 2.0


class Lifecycle:
    def __init__(self, busy: Callable[[], bool] = lambda: False):
        self._busy = busy
        self.stop = trio.Event()
        self.code_sha: str | None = None
        self.reexec_requested = False

    async def watch(self, nursery: trio.Nursery) -> None:
        """Start watching signals and the code; ``stop`` is set when either says so. Signals
        are caught once this returns: a stop that comes while the worker's tasks start (one
        starting another worker) is handled by the worker, not by the default that kills it."""
        self.code_sha = await trio.to_thread.run_sync(code_sha)
        await nursery.start(self._signals)
        nursery.start_soon(self._code)

    async def _signals(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                log.info("%s: stopping", signal.Signals(signum).name)
                self.reexec_requested = False  # a stop asked for wins over new code
                self.stop.set()
                return

    async def _code(self) -> None:
        while True:
            await trio.sleep(CODE_CHECK)
            on_disk = await trio.to_thread.run_sync(code_sha)
            if self.stop.is_set():
                return
            if on_disk and on_disk != self.code_sha and not self._busy():
                log.info("the code on disk moved to %s; restarting onto it", on_disk[:12])
                self.reexec_requested = True
                self.stop.set()
                return


async def serve_until_stopped(
    service: Service,
    life: Lifecycle,
    *tasks: Callable[[], Awaitable[None]],
    before_stop: Callable[[], None] = lambda: None,
) -> int:
    """Serve ``service`` and run ``tasks`` until ``life`` says stop; then ``before_stop``, the
    calls in flight given the stop grace (``shared.stop_grace``), the service's last answers
    (bounded), and the tasks cancelled."""
    async with trio.open_nursery() as nursery:
        # Watched before it serves: its first answer already says the commit it runs, and a
        # stop sent as soon as it answers is caught, not the default that kills it.
        await life.watch(nursery)
        await nursery.start(service.serve)
        for task in tasks:
            nursery.start_soon(task)
        await life.stop.wait()
        before_stop()
        grace = stop_grace.stop_grace(os.environ)  # checked when the worker started
        service.stop(grace=grace)
        with trio.move_on_after(grace + 3):  # then the last answers leave (bounded by 1 s in stop)
            await service.wait_stopped()
        nursery.cancel_scope.cancel()
    return 0
