"""One served profile of a gateway process: its turns, its drain, its state file and its sockets.

Its state file never claims what its socket cannot answer: it says ``running`` only once its
process has every served profile's sockets bound and serving (``serving``), and ``stopping``
before its sockets close (``withdraw``, then ``close``).

A turn is either completed or refused, never dropped: the draining check and the turn's
registration happen with no checkpoint between them, so a drain that starts while a turn
is being accepted either sees that turn (and waits for it) or the turn sees the drain.

Every call on this profile's socket runs as an activity of this profile
(``services.gateway.profile_scope``): a turn reads its home, config and secrets from the scope bound
for it, never from the process's environment, which a multiplex process shares. What belongs
to the process (its exit, its signals, draining, turn ids) is ``services.gateway.process``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from services.gateway import profile_scope, transitions
from services.gateway.profile_scope import ProfileScope
from services.gateway.state import IMPORTED_CODE_SHA, GatewayState, utc_now
from services.gateway.turn_stats import TurnStats
from shared import exit_codes
from shared.config import get as config_get
from shared.faults import pause_at
from shared.gateways import ops
from shared.gateways.ops import GatewayError
from shared.homes import Endpoint
from shared.locks import FileLock
from shared.transport import Call, Publisher, Service, curve, open_publisher

log = logging.getLogger(__name__)

# How often a burst of turn starts and ends is written out (transitions are written at once).
STATE_WRITE_INTERVAL = 0.1
# The credential a turn presents to its model provider, from its profile's secrets.
PROVIDER_KEY = "OPENROUTER_API_KEY"


class Draining(GatewayError):
    code = ops.DRAINING


class TurnCut(GatewayError):
    code = "turn_cut"


class ServingProcess(Protocol):
    """What a served profile asks of the process that serves it
    (``services.gateway.process.GatewayProcess``, which imports this module, not the reverse)."""

    def next_turn_id(self) -> str: ...
    def next_probe_id(self) -> str: ...
    def up_for(self) -> float: ...
    def turn_started(self) -> None: ...
    def turn_finished(self) -> None: ...
    async def drain(self, deadline: float) -> dict[str, Any]: ...
    def request_exit(self, code: int, reason: str, *, reexec: bool = False) -> None: ...
    async def release(self, gateway: Gateway, deadline: float) -> dict[str, Any]: ...


class Gateway:
    def __init__(self, state: GatewayState, endpoint: Endpoint, lock: FileLock, scope: ProfileScope):
        self.state = state
        self.endpoint = endpoint
        self.scope = scope
        self.lock = lock
        self.process: ServingProcess | None = None
        self._turns: dict[str, trio.CancelScope] = {}
        self.turn_stats = TurnStats()  # the turns that finished, and how long each took
        self._turns_changed = trio.Event()
        self._finished_while_draining: list[str] = []
        self._draining = False
        self._drain_done: trio.Event | None = None
        self._drain_result: dict[str, Any] | None = None
        self._close = trio.Event()
        self.stopped = trio.Event()
        self._write_lock = trio.Lock()
        self._dirty = trio.Event()
        self._publisher: Publisher | None = None
        self.home_gone = False  # its home was deleted: nothing more is written there
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
        # What only reads the state answers inline: no task, no call slot, so a gateway running as
        # many turns as it takes at once still says so at once.
        self.service.add(ops.PING, self._ping)
        self.service.add(ops.STATUS, self._status)
        for spec, handler in (
            (ops.TURN, self._turn),
            (ops.DRAIN, self._drain_op),
            (ops.REEXEC, self._reexec_op),
            (ops.RELEASE, self._release_op),
        ):
            self.service.add(spec, self._in_scope(handler))

    @property
    def profile(self) -> str:
        return self.state.profile

    def _in_scope(self, handler: Callable[[Call], Awaitable[dict[str, Any]]]) -> Callable[[Call], Awaitable[Any]]:
        async def scoped(call: Call) -> dict[str, Any]:
            with profile_scope.bound(self.scope):
                return await handler(call)

        return scoped

    def _process(self) -> ServingProcess:
        if self.process is None:
            raise RuntimeError("a served profile runs only inside its gateway process")
        return self.process

    # --- lifecycle ------------------------------------------------------------------------

    async def run(
        self, process: ServingProcess, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve this profile: started once its sockets answer (its state file still says
        starting), returned once they are closed (when its process exits, or it is let go alone)."""
        self.process = process
        try:
            # A fault test may hold this profile here, unbound, while the others serve on.
            await trio.to_thread.run_sync(pause_at, f"gateway:binding:{self.profile}")
            # The publisher outlives the nursery: a task still writing the state file when the
            # nursery is cancelled publishes that write once its thread returns.
            async with (
                open_publisher(self.endpoint.bind_events, options=curve.server_options(self.endpoint)) as publisher,
                trio.open_nursery() as nursery,
            ):
                self._publisher = publisher
                await nursery.start(self.service.serve)
                nursery.start_soon(self._write_when_dirty)
                task_status.started()
                await self._close.wait()
                self.service.stop(grace=2.0)  # the last answers (a drain's, cut turns') go out first
                with trio.move_on_after(5):
                    await self.service.wait_stopped()
                # ... or here, its control socket closed, while the others serve on.
                await trio.to_thread.run_sync(pause_at, f"gateway:closed:{self.profile}")
                nursery.cancel_scope.cancel()
        except BaseException:
            if self.state.state == ops.STARTING:
                self.state.exit_reason = self.state.exit_reason or "startup failed"
                await self._transition(ops.STARTUP_FAILED)
            raise
        self._publisher = None
        await self._transition(ops.STOPPED)
        self.stopped.set()

    async def serving(self, served: tuple[str, ...]) -> None:
        """Say running (draining, if drained meanwhile), its process serving ``served`` (empty:
        this profile alone): called once each of those profiles' sockets answers."""
        self.state.served_profiles = served
        self.state.status_message = ""
        if self.state.state == ops.STARTING:
            await self._transition(ops.DRAINING if self._draining else ops.RUNNING)
        else:
            await self._write_state()

    async def withdraw(self, reason: str, *, restart: bool = False) -> None:
        """Say stopping, for ``reason``: from now on the state file claims no socket that
        ``close`` may close. The first reason given is the one kept."""
        if self.state.state in (ops.STOPPING, ops.STOPPED):
            return
        self.state.exit_reason = reason
        self.state.restart_requested = restart
        await self._transition(ops.STOPPING)

    def close(self) -> None:
        """Close its sockets, the last answers (a drain's, cut turns') going out first;
        ``stopped`` is set once they are closed."""
        self._close.set()

    # --- state ----------------------------------------------------------------------------

    async def starting(self, message: str = "") -> None:
        """Write its first state file: starting, where every state begins."""
        self.state.status_message = message
        await self._write_state()

    async def _transition(self, new_state: str) -> None:
        """Move to ``new_state`` and write it out. A move the table lacks is a bug: it is logged
        and raised, the state and its file left as they were."""
        try:
            transitions.check(self.state.state, new_state)
        except transitions.IllegalTransition as exc:
            log.error("gateway %s: %s", self.profile, exc.message)
            raise
        self.state.state = new_state
        await self._write_state()

    async def _write_state(self) -> None:
        async with self._write_lock:  # one writer at a time, each writing the latest state
            if not self.home_gone:
                try:
                    await trio.to_thread.run_sync(self.state.write)
                except OSError as exc:  # a home deleted under a running gateway must not end it
                    log.warning("could not write %s: %s", self.state.path, exc.strerror or exc)
        if self._publisher is not None:
            self._publisher.publish(
                ops.STATE_TOPIC,
                {
                    "state": self.state.state,
                    "active_turns": self.state.active_turns,
                    "turns_finished": self.turn_stats.finished,
                    "last_turn_seconds": self.turn_stats.last_seconds,
                },
            )

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

    def _ping(self, call: Call) -> dict[str, Any]:
        return {"pong": True, "pid": self.state.identity.pid}

    def _status(self, call: Call) -> dict[str, Any]:
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
            "turns": self.turn_stats.to_dict(),
            "restarts": self.state.restarts.summary(time.time()),
        }

    async def _turn(self, call: Call) -> dict[str, Any]:
        # Starting: its sockets answer while its process binds the others'.
        if self._draining or self.state.state not in (ops.STARTING, ops.RUNNING):
            raise Draining(
                f"gateway {self.state.profile} is {self.state.state}; the turn was not started",
                detail={"profile": self.state.profile, "state": self.state.state},
            )
        if call.args.get("probe"):
            return await self._probe(call)
        pause_at(f"gateway:turn:{self.profile}")  # on the loop itself: a blocked loop, for hang tests
        process = self._process()
        turn_id = process.next_turn_id()
        scope = trio.CancelScope()
        self._turns[turn_id] = scope
        self._turns_moved()
        process.turn_started()
        started_at, began = utc_now(), trio.current_time()
        ran_with: dict[str, Any] = {}
        try:
            with scope:
                ran_with = await _agent_turn(call.args.get("seconds", 0.0))
            if scope.cancelled_caught:
                raise TurnCut(
                    f"gateway {self.state.profile} stopped before turn {turn_id} finished",
                    detail={"turn_id": turn_id},
                )
            if self._draining:
                self._finished_while_draining.append(turn_id)
            # Counted before the turn leaves ``_turns``: a write that says one turn fewer says one more finished.
            self.turn_stats.observe(trio.current_time() - began)
            return {
                "turn_id": turn_id,
                "text": call.args["text"],
                "started_at": started_at,
                "finished_at": utc_now(),
                **ran_with,
            }
        finally:
            del self._turns[turn_id]
            self._turns_moved()
            process.turn_finished()

    async def _probe(self, call: Call) -> dict[str, Any]:
        """A synthetic turn, for health: the agent's work as a turn does it, with no provider and
        no side effect. It stays out of the turn accounting: no turn id (a drain's ``accepted``
        counts callers' turns alone), no activity reported to the operator, not in
        ``active_turns``; a drain does not wait for it, and it takes no time to wait for."""
        process = self._process()
        probe_id = process.next_probe_id()
        # DEBUG: a status every few seconds asks one; no caller's turn is logged at INFO either.
        log.debug("gateway %s: probe turn %s (synthetic: no provider, no side effect)", self.profile, probe_id)
        started_at = utc_now()
        ran_with = await _agent_turn(0.0)
        return {
            "turn_id": probe_id,
            "probe": True,
            "text": call.args["text"],
            "started_at": started_at,
            "finished_at": utc_now(),
            "code_sha": IMPORTED_CODE_SHA,
            "up_for": round(process.up_for(), 3),
            **ran_with,
        }

    async def _drain_op(self, call: Call) -> dict[str, Any]:
        process = self._process()
        result = await process.drain(call.args["deadline"])
        stay = call.args.get("stay", False)
        if not stay:
            process.request_exit(exit_codes.PLANNED_RESTART, "drained for a planned restart")
        return {**result, "exit_code": None if stay else exit_codes.PLANNED_RESTART}

    async def _reexec_op(self, call: Call) -> dict[str, Any]:
        process = self._process()
        result = await process.drain(call.args["deadline"])
        process.request_exit(exit_codes.OK, "re-executing into the code on disk", reexec=True)
        return {**result, "exit_code": None}

    async def _release_op(self, call: Call) -> dict[str, Any]:
        return await self._process().release(self, call.args["deadline"])

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
        if self.state.state != ops.STARTING:  # else ``serving`` says draining, once its socket answers
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


async def _agent_turn(seconds: float) -> dict[str, Any]:
    """The agent's work in a turn, a probe's as a caller's: here an echo that takes ``seconds``
    and calls no provider; then what the turn ran with."""
    await trio.sleep(seconds)
    return _what_the_turn_ran_with(profile_scope.current())


def _what_the_turn_ran_with(scope: ProfileScope) -> dict[str, Any]:
    """The profile, home, model and credential a turn ran with: all of its own profile's
    (the credential as a fingerprint, never its value)."""
    model = config_get(scope.config, "model.default", None) or scope.config.get("model")
    return {
        "profile": scope.profile,
        "home": str(scope.home),
        "model": model if isinstance(model, str) else None,
        "provider_key": scope.fingerprint(PROVIDER_KEY),
    }
