"""The gateway process: turns, drains, its state file and its signals.

A turn is either completed or refused, never dropped: the draining check and the turn's
registration happen with no checkpoint between them, so a drain that starts while a turn
is being accepted either sees that turn (and waits for it) or the turn sees the drain.
"""

from __future__ import annotations

import itertools
import logging
import signal
from typing import Any

import trio

from services.gateway.state import GatewayState, utc_now
from shared import curve, exit_codes, hooks, sd_notify
from shared.errors import HermesError
from shared.gateways import ops
from shared.homes import Endpoint
from shared.locks import FileLock
from shared.pubsub import Publisher, open_publisher
from shared.service import Call, Service

log = logging.getLogger(__name__)

# SIGUSR1 asks for a planned restart: turns get this long to finish.
SIGNAL_DRAIN_SECONDS = 60.0
# SIGTERM/SIGINT mean "stop now": a short grace for turns in flight.
STOP_DRAIN_SECONDS = 5.0
# How often a burst of turn starts and ends is written out (transitions are written at once).
STATE_WRITE_INTERVAL = 0.1

REEXEC = "reexec"


class Draining(HermesError):
    code = ops.DRAINING


class TurnCut(HermesError):
    code = "turn_cut"


class Gateway:
    def __init__(self, state: GatewayState, endpoint: Endpoint, lock: FileLock, *, start_delay: float = 0.0):
        self.state = state
        self.endpoint = endpoint
        self.exit_code = exit_codes.OK
        self.reexec_requested = False
        self._start_delay = start_delay
        self._turns: dict[str, trio.CancelScope] = {}
        self._turns_changed = trio.Event()
        self._finished_while_draining: list[str] = []
        self._turn_ids = (f"t{n}" for n in itertools.count(1))
        self._draining = False
        self._drain_done: trio.Event | None = None
        self._drain_result: dict[str, Any] | None = None
        self._exit = trio.Event()
        self._write_lock = trio.Lock()
        self._dirty = trio.Event()
        self._publisher: Publisher | None = None
        self.service = Service(
            ops.SERVICE,
            endpoint.bind_control,
            lock=lock,
            options=curve.server_options(endpoint),
            info=lambda: {
                "profile": state.profile,
                "state": state.state,
                "install_id": state.install_id,
                "instance_id": state.instance_id,
            },
        )
        self.service.add(ops.PING, self._ping)
        self.service.add(ops.STATUS, self._status)
        self.service.add(ops.TURN, self._turn)
        self.service.add(ops.DRAIN, self._drain_op)
        self.service.add(ops.REEXEC, self._reexec_op)

    # --- lifecycle ------------------------------------------------------------------------

    async def run(self) -> int:
        if self._start_delay:
            self.state.status_message = f"restarting too often; waiting {self._start_delay:g}s before serving"
            log.warning("%s", self.state.status_message)
        await self._transition(ops.STARTING)
        await trio.sleep(self._start_delay)
        try:
            # The publisher outlives the nursery: a task still writing the state file when the
            # nursery is cancelled publishes that write once its thread returns.
            async with (
                open_publisher(self.endpoint.bind_events, options=curve.server_options(self.endpoint)) as publisher,
                trio.open_nursery() as nursery,
            ):
                self._publisher = publisher
                await nursery.start(self.service.serve)
                nursery.start_soon(self._watch_signals)
                nursery.start_soon(self._write_when_dirty)
                self.state.status_message = ""
                # The first report opens the hook socket (a brief one-off wait): here, not in a turn.
                await trio.to_thread.run_sync(hooks.report_activity, "idle")
                await self._transition(ops.RUNNING)
                sd_notify.notify(READY=1, STATUS=f"serving profile {self.state.profile}")
                await self._exit.wait()
                sd_notify.notify(STOPPING=1, STATUS=self.state.exit_reason or "stopping")
                await self._transition(ops.STOPPING)
                self.service.stop(grace=2.0)  # the last answers (a drain's, cut turns') go out first
                with trio.move_on_after(5):
                    await self.service.wait_stopped()
                nursery.cancel_scope.cancel()
        except BaseException:
            if self.state.state == ops.STARTING:
                self.state.exit_reason = self.state.exit_reason or "startup failed"
                await self._transition(ops.STARTUP_FAILED)
            raise
        self._publisher = None
        await self._transition(ops.STOPPED)
        return self.exit_code

    def request_exit(self, code: int, reason: str, *, reexec: bool = False) -> None:
        if self._exit.is_set():
            return
        self.exit_code = code
        self.reexec_requested = reexec
        self.state.exit_reason = reason
        self.state.restart_requested = code == exit_codes.PLANNED_RESTART or reexec
        self._exit.set()

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                if signum == signal.SIGUSR1:
                    log.info("SIGUSR1: draining for a planned restart")
                    await self.drain(SIGNAL_DRAIN_SECONDS)
                    self.request_exit(exit_codes.PLANNED_RESTART, "planned restart (SIGUSR1)")
                else:
                    name = signal.Signals(signum).name
                    log.info("%s: stopping", name)
                    await self.drain(STOP_DRAIN_SECONDS)
                    self.request_exit(exit_codes.OK, f"stopped ({name})")
                return

    # --- state ----------------------------------------------------------------------------

    async def _transition(self, new_state: str) -> None:
        self.state.state = new_state
        await self._write_state()

    async def _write_state(self) -> None:
        async with self._write_lock:  # one writer at a time, each writing the latest state
            await trio.to_thread.run_sync(self.state.write)
        if self._publisher is not None:
            self._publisher.publish("state", {"state": self.state.state, "active_turns": self.state.active_turns})

    async def _write_when_dirty(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            await self._write_state()
            await trio.sleep(STATE_WRITE_INTERVAL)

    def _turns_moved(self) -> None:
        self.state.active_turns = len(self._turns)
        self._dirty.set()
        self._turns_changed.set()
        self._turns_changed = trio.Event()

    # --- ops ------------------------------------------------------------------------------

    async def _ping(self, call: Call) -> dict[str, Any]:
        return {"pong": True, "pid": self.state.identity.pid}

    async def _status(self, call: Call) -> dict[str, Any]:
        data = self.state.to_dict()
        window = self.service.window
        return {
            "pid": data["pid"],
            "start_time": data["start_time"],
            "profile": data["profile"],
            "install_id": data["install_id"],
            "instance_id": data["instance_id"],
            "served_profiles": data["served_profiles"],
            "home": data["hermes_home"],
            "state": data["gateway_state"],
            "code_sha": data["code_sha"],
            "code_version": data["code_version"],
            "active_turns": data["active_turns"],
            "started_at": data["started_at"],
            "supervisor": data["supervisor"],
            "argv": data["argv"],
            "protocol": {"min": window[0], "max": window[1]},
        }

    async def _turn(self, call: Call) -> dict[str, Any]:
        if self._draining or self.state.state != ops.RUNNING:
            raise Draining(
                f"gateway {self.state.profile} is {self.state.state}; the turn was not started",
                detail={"profile": self.state.profile, "state": self.state.state},
            )
        turn_id = next(self._turn_ids)
        scope = trio.CancelScope()
        self._turns[turn_id] = scope
        self._turns_moved()
        if len(self._turns) == 1:
            hooks.report_activity("working")  # never blocks, never raises; nothing outside a managed session
        started_at = utc_now()
        try:
            with scope:
                await trio.sleep(call.args.get("seconds", 0.0))
            if scope.cancelled_caught:
                raise TurnCut(
                    f"gateway {self.state.profile} stopped before turn {turn_id} finished",
                    detail={"turn_id": turn_id},
                )
            if self._draining:
                self._finished_while_draining.append(turn_id)
            return {"turn_id": turn_id, "text": call.args["text"], "started_at": started_at, "finished_at": utc_now()}
        finally:
            del self._turns[turn_id]
            self._turns_moved()
            if not self._turns:
                hooks.report_activity("idle")

    async def _drain_op(self, call: Call) -> dict[str, Any]:
        result = await self.drain(call.args["deadline"])
        stay = call.args.get("stay", False)
        if not stay:
            self.request_exit(exit_codes.PLANNED_RESTART, "drained for a planned restart")
        return {**result, "exit_code": None if stay else exit_codes.PLANNED_RESTART}

    async def _reexec_op(self, call: Call) -> dict[str, Any]:
        result = await self.drain(call.args["deadline"])
        self.request_exit(exit_codes.OK, "re-executing into the code on disk", reexec=True)
        return {**result, "exit_code": None}

    # --- draining -------------------------------------------------------------------------

    async def drain(self, deadline: float) -> dict[str, Any]:
        """Stop accepting turns, give the ones in flight ``deadline`` seconds, cut the rest.

        A second drain while one runs waits for it and gets the same answer. The gateway
        stays draining afterwards: only a restart brings it back to serving.
        """
        if self._drain_done is not None:
            await self._drain_done.wait()
            return dict(self._drain_result or {})
        self._drain_done = trio.Event()
        self._draining = True
        await self._transition(ops.DRAINING)
        with trio.move_on_after(deadline):
            while self._turns:
                await self._turns_changed.wait()
        cut = sorted(self._turns)
        for scope in self._turns.values():
            scope.cancel()
        with trio.move_on_after(2.0):  # cut turns answer their callers before we go on
            while self._turns:
                await self._turns_changed.wait()
        self._drain_result = {"finished": list(self._finished_while_draining), "cut": cut}
        self._drain_done.set()
        return dict(self._drain_result)
