"""The hook reporter: takes reports off the intake, checks them, forwards them to the daemon.

Every frame is parsed at the boundary (``shared.hook_reports``), its process's start identity checked
against the process table and, for a native id claim, the launch identity (``checks``). A
refused claim is logged as ``worker.launch_identity.rejected``; the process's other reports
still flow. Checked reports wait in a bounded queue (full: dropped and counted) for the one
forwarder, which tries each a bounded number of times. Counters say what happened to all.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from typing import Any

import trio
import zmq

from services.hook_reporter import ops
from services.hook_reporter.checks import identity_refusal, launch_refusal
from shared import protocol
from shared.homes import Endpoint
from shared.hook_reports import Report, ReportRefused, parse_report
from shared.hooks import intake_address
from shared.lifecycle import Lifecycle, serve_until_stopped
from shared.locks import FileLock
from shared.operator import protocol as daemon_protocol
from shared.operator.client import DaemonClient
from shared.protocol import ProtocolError, RemoteError
from shared.transport import HELLO, Call, open_socket
from shared.worker_main import install_service

log = logging.getLogger(__name__)

QUEUE = 1024
ATTEMPTS = 3
BACKOFF = (0.1, 0.5)  # seconds before the 2nd and 3rd attempt
SEND_TIMEOUT = 2.0


class HookReporter:
    def __init__(self, root, endpoint: Endpoint, lock: FileLock, *, daemon: str | None = None):
        self.intake = intake_address(root)
        self.daemon = daemon if daemon is not None else os.environ.get(daemon_protocol.ENDPOINT_ENV) or None
        self.life = Lifecycle()
        self.received = 0
        self.forwarded = 0
        self.dropped: Counter[str] = Counter()
        self._send, self._queue = trio.open_memory_channel[Report](QUEUE)
        self.service = install_service(ops.SERVICE, root, endpoint, lock, lambda: {"intake": self.intake})
        self.service.add(ops.STATUS, self._status)
        self.service.add(ops.CHECK, self._check)

    async def run(self) -> int:
        return await serve_until_stopped(self.service, self.life, self._take_reports, self._forward)

    # --- intake ---------------------------------------------------------------------------

    async def _take_reports(self) -> None:
        async with open_socket(zmq.PULL, bind=[self.intake], max_frame=4096, inbound=QUEUE) as intake:
            async for parts in intake:
                self.received += 1
                report = await self._checked(parts)
                if report is None:
                    continue
                try:
                    self._send.send_nowait(report)
                except trio.WouldBlock:
                    self.dropped["queue_full"] += 1

    async def _checked(self, parts: list[bytes]) -> Report | None:
        try:
            report = parse_report(protocol.one_frame(parts, kind="report"))
        except ProtocolError:  # not one frame: nobody to answer, so dropped and counted
            self.dropped["malformed"] += 1
            return None
        except ReportRefused as exc:
            self.dropped[exc.reason] += 1
            return None
        refusal = await trio.to_thread.run_sync(identity_refusal, report)  # reads /proc: off the loop
        if refusal is not None:
            self.dropped[refusal] += 1
            return None
        if report.launch is not None:
            refusal = await trio.to_thread.run_sync(launch_refusal, report)
            if refusal is not None:
                log.warning(
                    "worker.launch_identity.rejected: session %s pid %d: %s", report.session, report.pid, refusal
                )
                self.dropped[f"launch_{refusal}"] += 1
                return None
        return report

    # --- forwarding -----------------------------------------------------------------------

    async def _forward(self) -> None:
        if self.daemon is None:
            async for _ in self._queue:
                self.dropped["no_daemon"] += 1
            return
        # The daemon's one blocking client, in a worker thread: one report at a time, each
        # attempt bounded by SEND_TIMEOUT, so the loop never waits on the daemon.
        with DaemonClient(self.daemon) as daemon:
            async for report in self._queue:
                if await self._deliver(daemon, report):
                    self.forwarded += 1
                else:
                    self.dropped["daemon_unreachable"] += 1

    async def _deliver(self, daemon: DaemonClient, report: Report) -> bool:
        for attempt in range(ATTEMPTS):
            if attempt:
                await trio.sleep(BACKOFF[attempt - 1])
            try:
                await trio.to_thread.run_sync(self._send_report, daemon, report)
                return True
            except RemoteError as exc:
                log.debug("forwarding a %s report failed: %s", report.kind, exc.code)
        return False

    @staticmethod
    def _send_report(daemon: DaemonClient, report: Report) -> None:
        daemon.call(daemon_protocol.REPORT, {"report": report.to_wire()}, timeout=SEND_TIMEOUT)

    # --- control --------------------------------------------------------------------------

    async def _status(self, call: Call) -> dict[str, Any]:
        return {
            "received": self.received,
            "forwarded": self.forwarded,
            "dropped": dict(self.dropped),
            "queued": self._queue.statistics().current_buffer_used,
            "daemon": self.daemon,
            "intake": self.intake,
            "pid": os.getpid(),
        }

    async def _check(self, call: Call) -> dict[str, Any]:
        if self.daemon is None:
            return {"daemon": {"configured": False, "reachable": False}}
        try:
            await trio.to_thread.run_sync(self._hello, self.daemon)
        except RemoteError as exc:
            return {"daemon": {"configured": True, "reachable": False, "error": exc.code}}
        return {"daemon": {"configured": True, "reachable": True}}

    @staticmethod
    def _hello(address: str) -> None:
        with DaemonClient(address) as daemon:
            daemon.call(HELLO, timeout=3.0)
