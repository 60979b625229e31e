"""A gateway process: the profiles it serves (one, or the set of a multiplex gateway), its
exit, its signals and its drain.

Draining belongs to the process, not to one profile: what restarts is the process, so a
drain asked on any served profile's socket (or a signal) drains every profile it serves and
the whole process exits (75) or re-executes itself. Turn ids are the process's too, so one
drain's answer never names two turns alike.

A served profile is let go alone, while the others go on serving in the same process: one
whose home is deleted (its turns are cut), or one released on request (``release``, before
``hermes profile delete`` deletes it; its turns get their deadline). Its sockets are closed,
its lock released, and the others' state files no longer list it.

A state file never claims what a socket cannot answer. Every served profile's sockets are
bound and serving before any state file says running, and only then do the files name every
profile served (until then each names its own profile alone, starting). Every claim on a
socket is withdrawn before it closes: on exit each file says stopping before any socket closes,
and a profile let go alone is dropped from the others' files before its sockets close.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import time
from collections.abc import Iterable
from functools import partial
from typing import Any

import trio

from services.gateway import sd_notify, watchdog
from services.gateway.app import Gateway
from shared import exit_codes, hooks, stop_grace
from shared.gateways import ops
from shared.gateways.ops import GatewayError

log = logging.getLogger(__name__)

# SIGUSR1 asks for a planned restart: turns get this long to finish.
SIGNAL_DRAIN_SECONDS = 60.0
# How often a multiplex process looks for a served profile's home that has been deleted.
HOME_CHECK_SECONDS = 2.0


class NotMultiplex(GatewayError):
    code = ops.NOT_MULTIPLEX


class GatewayProcess:
    def __init__(
        self,
        gateways: Iterable[Gateway],
        *,
        multiplex: bool = False,
        start_delay: float = 0.0,
        stop_seconds: float = stop_grace.DEFAULT,
    ):
        self.gateways = list(gateways)
        self.multiplex = multiplex  # started with --serve
        self.exit_code = exit_codes.OK
        self.exit_reason = ""
        self.reexec_requested = False
        self.restart_requested = False
        self._start_delay = start_delay
        self._stop_seconds = stop_seconds  # SIGTERM/SIGINT: the turns in flight get this long
        self._announced = False  # every served profile's sockets answer, and its state file says so
        self._exit = trio.Event()
        self._watching = trio.CancelScope()
        self._nursery: trio.Nursery | None = None
        self._turn_ids = (f"t{n}" for n in itertools.count(1))
        self._probe_ids = (f"p{n}" for n in itertools.count(1))
        self._born = time.monotonic()  # in this interpreter: a re-executed gateway starts again
        self._turns_accepted = 0  # ids given out: a drain's answer says how many, so none goes unseen
        self._active_turns = 0
        self._drain_done: trio.Event | None = None
        self._drain_result: dict[str, Any] | None = None

    @property
    def profiles(self) -> list[str]:
        return [g.profile for g in self.gateways]

    # --- lifecycle ------------------------------------------------------------------------

    async def run(self) -> int:
        async with trio.open_nursery() as watched:
            period = watchdog.feed_interval(os.environ, os.getpid())
            if period is not None:
                watched.start_soon(self._feed_watchdog, period)
            code = await self._run()
            watched.cancel_scope.cancel()
        return code

    async def _feed_watchdog(self, period: float) -> None:
        """Feed systemd's watchdog from this loop, never from a thread: a loop blocked past the
        bound stops feeding it, and systemd kills and restarts the hung gateway."""
        while True:
            sd_notify.notify(WATCHDOG=1)
            await trio.sleep(period)

    async def _run(self) -> int:
        message = ""
        if self._start_delay:
            message = f"restarting too often; waiting {self._start_delay:g}s before serving"
            log.warning("%s", message)
            sd_notify.starting(message, self._start_delay + sd_notify.START_STEP_SECONDS)
        for gateway in self.gateways:
            await gateway.starting(message)
        await trio.sleep(self._start_delay)
        # The hook socket's one-off connection wait, before any turn can come: a report sent
        # meanwhile from the loop would wait for it, and could overtake the start's own report.
        sd_notify.starting("connecting its hook client")
        await trio.to_thread.run_sync(hooks.prepare)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for gateway in list(self.gateways):  # one let go meanwhile leaves the list
                sd_notify.starting(f"binding the sockets of profile {gateway.profile}")
                await nursery.start(partial(gateway.run, self))  # typed: this process is a ServingProcess
            await nursery.start(self._watch)  # a signal sent once it says running is handled
            if not self._exit.is_set():  # a drain asked meanwhile leaves nothing to announce
                self._announced = True
                await self._say_served()
            if not self._active_turns:  # a turn that came first has reported working
                hooks.report_activity("idle")
            sd_notify.notify(READY=1, STATUS=f"serving {_profiles_text(self.profiles)}")
            await self._exit.wait()
            self._watching.cancel()
            sd_notify.notify(STOPPING=1, STATUS=self.exit_reason or "stopping")
            await self._withdraw_all()
        return self.exit_code

    def request_exit(self, code: int, reason: str, *, reexec: bool = False) -> None:
        if self._exit.is_set():
            return
        self.exit_code = code
        self.exit_reason = reason
        self.reexec_requested = reexec
        self.restart_requested = code == exit_codes.PLANNED_RESTART or reexec
        self._exit.set()

    async def _say_served(self) -> None:
        """Every served profile's state file says running and names every profile served: call
        it only while each of their sockets answers."""
        served = tuple(self.profiles) if self.multiplex else ()
        async with trio.open_nursery() as nursery:
            for gateway in self.gateways:
                nursery.start_soon(gateway.serving, served)

    async def _withdraw_all(self) -> None:
        """Every state file says stopping, then every socket closes."""
        gateways = list(self.gateways)
        async with trio.open_nursery() as nursery:
            for gateway in gateways:
                nursery.start_soon(partial(gateway.withdraw, self.exit_reason, restart=self.restart_requested))
        for gateway in gateways:
            gateway.close()

    async def _watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self._watching:
            async with trio.open_nursery() as nursery:
                await nursery.start(self._watch_signals)
                if self.multiplex:
                    nursery.start_soon(self._watch_homes)
                task_status.started()

    async def _watch_signals(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGUSR1:
                    log.info("SIGUSR1: draining for a planned restart")
                    await self.drain(SIGNAL_DRAIN_SECONDS)
                    self.request_exit(exit_codes.PLANNED_RESTART, "planned restart (SIGUSR1)")
                else:
                    name = signal.Signals(signum).name
                    log.info("%s: stopping", name)
                    await self.drain(self._stop_seconds)
                    self.request_exit(exit_codes.OK, f"stopped ({name})")
                return

    async def _watch_homes(self) -> None:
        while True:
            await trio.sleep(HOME_CHECK_SECONDS)
            for gateway in list(self.gateways):
                if not await trio.to_thread.run_sync(os.path.isdir, gateway.state.home):
                    await self._retire(gateway, "its home was deleted")

    async def _retire(self, gateway: Gateway, reason: str) -> None:
        log.warning("no longer serving profile %r: %s", gateway.profile, reason)
        gateway.home_gone = True
        self.gateways.remove(gateway)
        await gateway.drain(0.0)
        await self._let_go(gateway, reason)

    async def release(self, gateway: Gateway, deadline: float) -> dict[str, Any]:
        """Drain ``gateway``'s profile alone and let it go; the others serve on."""
        if gateway not in self.gateways or len(self.gateways) < 2:
            raise NotMultiplex(
                f"profile {gateway.profile!r} is the only one its gateway serves: stop or drain it instead",
                detail={"profile": gateway.profile},
            )
        self.gateways.remove(gateway)
        result = await gateway.drain(deadline)
        log.info("releasing profile %r on request", gateway.profile)
        assert self._nursery is not None
        # After this answer: the socket it goes out on closes with the profile.
        self._nursery.start_soon(self._let_go, gateway, "released by its multiplex gateway")
        return {**result, "released": gateway.profile, "served_profiles": self.profiles}

    async def _let_go(self, gateway: Gateway, reason: str) -> None:
        """Stop serving ``gateway``'s profile (already out of ``gateways``): the others' state
        files stop naming it and its own says stopping before its sockets close; its lock is
        released once they have."""
        if self._announced:  # else the others' files name no one else yet
            await self._say_served()
        await gateway.withdraw(reason)
        gateway.close()
        await gateway.stopped.wait()
        gateway.lock.release()
        if not self.gateways:
            self.request_exit(exit_codes.OK, "every profile it served was deleted")

    # --- turns ----------------------------------------------------------------------------

    def next_turn_id(self) -> str:
        self._turns_accepted += 1
        return next(self._turn_ids)

    def next_probe_id(self) -> str:
        return next(self._probe_ids)

    def up_for(self) -> float:
        """Seconds this process has run: how long no supervisor has restarted it."""
        return time.monotonic() - self._born

    def turn_started(self) -> None:
        self._active_turns += 1
        if self._active_turns == 1:
            hooks.report_activity("working")  # never blocks, never raises; nothing outside a managed session

    def turn_finished(self) -> None:
        self._active_turns -= 1
        if not self._active_turns:
            hooks.report_activity("idle")

    # --- draining -------------------------------------------------------------------------

    async def drain(self, deadline: float) -> dict[str, Any]:
        """Drain every served profile at once; the turns that finished and were cut, of all of
        them. A second drain while one runs waits for it and gets the same answer."""
        if self._drain_done is not None:
            await self._drain_done.wait()
            return dict(self._drain_result or {})
        self._drain_done = trio.Event()
        answers: list[dict[str, Any]] = []

        async def drain_one(gateway: Gateway) -> None:
            answers.append(await gateway.drain(deadline))

        async with trio.open_nursery() as nursery:
            for gateway in self.gateways:
                nursery.start_soon(drain_one, gateway)
        result: dict[str, Any] = {
            "finished": [t for a in answers for t in a["finished"]],
            "cut": [t for a in answers for t in a["cut"]],
            # Draining refuses every later turn: the process will never accept more than this.
            "accepted": self._turns_accepted,
        }
        if self.multiplex:
            result["profiles"] = self.profiles
        self._drain_result = result
        self._drain_done.set()
        return dict(result)


def _profiles_text(profiles: list[str]) -> str:
    return f"profile{'s' if len(profiles) > 1 else ''} {', '.join(profiles)}"
