"""The gateway host: one process that runs every listed profile's gateway as a child of a fork
server, supervises them as supervisord would a program, and moves them onto new code.

It never imports the gateway's code. Its fork server (``forkserver``) is a fresh interpreter of
the code on disk; before each fork the host compares the fork server's code with the code on
disk and, when the tree has moved, starts a new fork server first (the old one forks again only
when the new one cannot import: a gateway on old code beats none). So a gateway of new code
always comes from an interpreter that never imported the old code, whether a ``roll`` moved it
or its own exit 75 (a drain over its socket) did.

A ``roll`` starts the new fork server and waits (bounded) until it has imported; only then is
every old gateway drained at once (the gateway's ``drain`` op), and each one's profile forked
anew from the new fork server as the old process exits. A fork server that fails to start or
import fails the roll (``roll_failed``) with nothing drained. An old fork server is let go
(its pipe closed: it exits) once its last gateway is gone.

One profile's gateway is stopped, started and restarted alone (``stop``, ``start``,
``restart``), one op at a time per profile. A stopped gateway is down until started: its exit,
whatever the code, and a roll's refork of it (a stop during a roll) start nothing.

Hang detection: supervisord has no health checks, so the host asks each running gateway for a
probe turn every ``policy.interval`` seconds, all at once and bounded, never during a roll; one
``fleet.hang`` says is hung (a blocked loop answers nothing) gets SIGKILL, and its exit is a
crash like any other: supervision starts it again.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from fleet import hang
from fleet.health_probe import serving_now
from fleet.supervisors.errors import SupervisorFailed, SupervisorUnavailable
from fleet.supervisors.host import (
    FORKED_SECONDS,
    PREPARE,
    READY_SECONDS,
    RESTART,
    ROLL,
    SERVICE,
    START,
    STATUS,
    STOP,
    ProfileNotHosted,
    RollFailed,
)
from services.gateway_host import frames, supervision
from shared import homes
from shared.errors import HermesError
from shared.gateways import ops
from shared.homes import Endpoint
from shared.identity import ProcessIdentity
from shared.locks import FileLock
from shared.process_signals import HeldProcess
from shared.protocol import RemoteError
from shared.stop_grace import DEFAULT, StopGraceInvalid, stop_grace
from shared.transport import NO_RETRY, Call, connect
from shared.version import INSTALL_ROOT, code_sha
from shared.worker_main import install_service

log = logging.getLogger(__name__)

FORKSERVER = "services.gateway_host.forkserver"
# How long a fork server has to answer one ask.
ASK_SECONDS = 10.0
# A gateway's drain when the roll names no deadline.
DRAIN_SECONDS = 30.0
# On SIGTERM, or a stop, a gateway (itself sent SIGTERM) drains for its grace; this much more
# is its exit's, before it is killed.
STOP_MARGIN = 15.0
# How long a fork server that was let go, or a gateway that was killed, has to exit.
EXIT_SECONDS = 5.0
# The longest a fork runs: a new fork server's import, then its answer.
FORK_SECONDS = READY_SECONDS + ASK_SECONDS
POLL = 0.05


def _stop_seconds() -> float:
    """How long a gateway sent SIGTERM has to exit: the grace its drain takes (the same
    ``HERMES_STOP_GRACE`` this host and its gateways run with) and the margin."""
    try:
        return stop_grace(os.environ) + STOP_MARGIN
    except StopGraceInvalid:
        return DEFAULT + STOP_MARGIN  # a gateway refuses to start on it: none drains that long


class ForkServer:
    """The host's side of one fork server: its process, its pipe, the gateways it forked."""

    def __init__(self, process: subprocess.Popen[bytes], asks: trio.lowlevel.FdStream, events: int) -> None:
        self.process = process
        self.pid = process.pid
        self.asks = asks
        self.events = trio.lowlevel.FdStream(events)
        self.code_sha: str | None = None
        self.children: dict[int, str] = {}  # pid -> profile
        self.settled = trio.Event()  # it said it is ready, or it is gone
        self.gone = trio.Event()
        self.asking = trio.Lock()
        self.replies_in, self.replies = trio.open_memory_channel[dict[str, Any]](1)

    @property
    def ready(self) -> bool:
        return self.settled.is_set() and not self.gone.is_set()

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "code_sha": self.code_sha, "children": sorted(self.children)}


@dataclass
class Child:
    """One profile's gateway as the host sees it."""

    profile: str
    pid: int | None = None
    process: HeldProcess | None = None  # its gateway, held from the fork: signals reach it alone
    server: ForkServer | None = None
    state: str = "starting"  # "starting", "running", "stopping", "down"
    reason: str = ""
    crashes: tuple[float, ...] = ()
    starts: int = 0
    stopped: bool = False  # stopped by a ``stop``: nothing starts it until a ``start``
    forking: bool = False  # a fork of it is under way
    pending: trio.CancelScope | None = None  # a start that waits out its crash delay
    control: trio.Lock = field(default_factory=trio.Lock)  # one op on this profile at a time
    drained: set[int] = field(default_factory=set)  # pids a roll drains: their exit 75 is the roll's
    forked_at: float = 0.0  # trio.current_time() of its last fork
    watch: hang.Watch = hang.Watch()  # its health checks since that fork

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "fork_server": self.server.pid if self.server else None,
            "state": self.state,
            "reason": self.reason,
            "starts": self.starts,
            "crashes": len(self.crashes),
        }


class GatewayHost:
    def __init__(
        self,
        root: Path,
        endpoint: Endpoint,
        lock: FileLock,
        profiles: tuple[str, ...],
        policy: hang.Policy,
    ) -> None:
        self.root = root
        self.policy = policy
        self.children = {profile: Child(profile) for profile in profiles}
        self.current: ForkServer | None = None
        self.servers: list[ForkServer] = []
        self.stopping = False
        self._stop = trio.Event()
        self._spawning = trio.Lock()
        self._rolling = trio.Lock()
        self._preparing = False  # a prepare in flight: more asks while it runs start nothing more
        self._nursery: trio.Nursery | None = None
        self.service = install_service(SERVICE, root, endpoint, lock, lambda: {"profiles": list(self.children)})
        self.service.add(STATUS, self._status)
        self.service.add(PREPARE, self._prepare)
        self.service.add(ROLL, self._roll)
        self.service.add(STOP, self._stop_one)
        self.service.add(START, self._start_one)
        self.service.add(RESTART, self._restart_one)

    # --- lifecycle ------------------------------------------------------------------------

    async def run(self) -> int:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self._signals)
            await nursery.start(self.service.serve)
            for profile in self.children:
                nursery.start_soon(self._start, profile, 0.0)
            if self.policy.enabled:
                nursery.start_soon(self._check_health)
            await self._stop.wait()
            await self._stop_all()
            self.service.stop(grace=2.0)
            with trio.move_on_after(5):
                await self.service.wait_stopped()
            nursery.cancel_scope.cancel()
        return 0

    async def _signals(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                log.info("%s: stopping every gateway", signal.Signals(signum).name)
                self.stopping = True
                self._stop.set()
                return

    async def _stop_all(self) -> None:
        """Each gateway is sent SIGTERM (its own short drain), then the fork servers go."""
        for child in self.children.values():
            if child.process is not None:
                child.process.signal(signal.SIGTERM)
        with trio.move_on_after(_stop_seconds()):
            while any(child.pid is not None for child in self.children.values()):
                await trio.sleep(POLL)
        for child in self.children.values():
            if child.pid is not None:
                log.warning("the gateway of %r (pid %d) did not stop in time: killed", child.profile, child.pid)
                if child.process is not None:
                    child.process.signal(signal.SIGKILL)
        for server in list(self.servers):
            await self._let_go(server)

    # --- fork servers ---------------------------------------------------------------------

    async def _spawn_server(self) -> ForkServer:
        """A new fork server, once it has imported the gateway's code; RollFailed if it cannot."""
        assert self._nursery is not None
        asks_r, asks_w = os.pipe()
        events_r, events_w = os.pipe()
        try:
            # From this (the main) thread: the fork server dies with the thread that made it.
            process = subprocess.Popen(
                [sys.executable, "-m", FORKSERVER], stdin=asks_r, stdout=events_w, cwd=INSTALL_ROOT
            )
        except OSError as exc:
            os.close(asks_w)
            os.close(events_r)
            raise RollFailed(f"could not start a fork server: {exc.strerror or exc}", detail={}) from None
        finally:
            os.close(asks_r)
            os.close(events_w)
        server = ForkServer(process, trio.lowlevel.FdStream(asks_w), events_r)
        self.servers.append(server)
        self._nursery.start_soon(self._read_events, server)
        with trio.move_on_after(READY_SECONDS):
            await server.settled.wait()
        if server.ready:
            log.info("fork server %d imported the gateway's code (%s)", server.pid, (server.code_sha or "?")[:12])
            return server
        why = "exited before it had imported the gateway's code" if server.gone.is_set() else "did not import in time"
        await self._let_go(server)
        raise RollFailed(
            f"the new fork server (pid {server.pid}) {why}; the gateways serve on",
            detail={"fork_server": server.pid, "code": server.process.returncode},
        )

    async def _server_for_fork(self) -> ForkServer:
        """The fork server to fork from: the current one while it runs the code on disk, else a
        new one (the current one when a new one cannot start: its gateway beats none)."""
        async with self._spawning:
            on_disk = await trio.to_thread.run_sync(code_sha)
            current = self.current
            if current is not None and current.ready and (on_disk is None or on_disk == current.code_sha):
                return current
            try:
                server = await self._spawn_server()
            except RollFailed as exc:
                if current is None or not current.ready:
                    raise
                log.error("%s; forking from the old one", exc.message)
                return current
            self._make_current(server)
            return server

    def _make_current(self, server: ForkServer) -> None:
        previous, self.current = self.current, server
        if previous is not None and not previous.children:
            assert self._nursery is not None
            self._nursery.start_soon(self._let_go, previous)

    async def _let_go(self, server: ForkServer) -> None:
        """Close its pipe (it exits) and reap it; killed if it does not go in time."""
        if server in self.servers:
            self.servers.remove(server)
        await server.asks.aclose()
        with trio.move_on_after(EXIT_SECONDS):
            while server.process.poll() is None:
                await trio.sleep(POLL)
        if server.process.poll() is None:
            server.process.kill()
            await trio.to_thread.run_sync(server.process.wait)

    async def _read_events(self, server: ForkServer) -> None:
        lines = frames.Lines()
        try:
            while True:
                try:
                    data = await server.events.receive_some(frames.MAX_FRAME)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    break
                for line in lines.feed(data):
                    try:
                        if isinstance(line, frames.FrameInvalid):
                            raise line
                        await self._on_event(server, frames.parse_event(line))
                    except frames.FrameInvalid as exc:
                        log.error("fork server %d: %s", server.pid, exc.message)
        finally:
            server.gone.set()
            server.settled.set()
            await server.events.aclose()
            assert self._nursery is not None
            self._nursery.start_soon(self._after_server, server)

    async def _on_event(self, server: ForkServer, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == frames.READY:
            server.code_sha = event["code_sha"]
            server.settled.set()
        elif kind == frames.FORKED:
            child = self.children.get(event["profile"])
            if child is not None:
                server.children[event["pid"]] = child.profile
                child.pid, child.server, child.state, child.reason = event["pid"], server, "running", ""
                # The fork server has not reaped it yet, so the start time it read is this process's.
                child.process = HeldProcess.hold(ProcessIdentity(event["pid"], event["start_time"]))
                child.starts += 1
                child.forked_at, child.watch = trio.current_time(), hang.Watch()
            await server.replies_in.send(event)
        elif kind == frames.REFUSED:
            await server.replies_in.send(event)
        else:
            self._on_exit(server, event["profile"], event["pid"], event["code"])

    async def _after_server(self, server: ForkServer) -> None:
        """A fork server ended. Its gateways die with it: each, once gone, counts as a crash."""
        if server is self.current:
            self.current = None
        orphans = dict(server.children)
        if orphans and not self.stopping:
            log.error("fork server %d ended with %d gateway(s) of its own", server.pid, len(orphans))
        with trio.move_on_after(_stop_seconds()):
            while any(self._alive(pid, profile) for pid, profile in orphans.items()):
                await trio.sleep(POLL)
        for pid, profile in orphans.items():
            self._on_exit(server, profile, pid, -signal.SIGTERM)
        if server.process.poll() is None:
            await trio.to_thread.run_sync(server.process.wait)

    def _alive(self, pid: int, profile: str) -> bool:
        """Whether the gateway ``pid`` of ``profile`` still runs, as its held process tells."""
        child = self.children.get(profile)
        return child is not None and child.pid == pid and child.process is not None and child.process.alive()

    # --- supervision ----------------------------------------------------------------------

    async def _start(self, profile: str, delay: float) -> None:
        """Supervision's start, after ``delay``: none once stopped, started or forked meanwhile."""
        child = self.children[profile]
        with trio.CancelScope() as waiting:
            child.pending = waiting
            await trio.sleep(delay)
        if child.pending is waiting:
            child.pending = None
        if waiting.cancelled_caught or self.stopping or child.stopped or child.pid is not None or child.forking:
            return
        try:
            await self._fork_child(child)
        except HermesError as exc:
            log.error("could not start the gateway of %r: %s", profile, exc.message)
            self._decide(child, 1)

    async def _fork_child(self, child: Child) -> None:
        """Fork ``child``'s gateway from a fork server of the code on disk; down with the reason
        when it cannot."""
        child.forking, child.state = True, "starting"
        try:
            await self._fork(await self._server_for_fork(), child.profile)
        except HermesError as exc:
            child.state, child.reason = "down", exc.message
            raise
        finally:
            child.forking = False

    async def _fork(self, server: ForkServer, profile: str) -> None:
        async with server.asking:
            await server.asks.send_all(frames.encode({"op": frames.FORK, "profile": profile}))
            with trio.move_on_after(ASK_SECONDS):
                reply = await server.replies.receive()
                if reply["event"] == frames.REFUSED:
                    raise SupervisorFailed(f"fork server {server.pid} refused: {reply['message']}", detail=reply)
                return
        raise SupervisorFailed(f"fork server {server.pid} did not answer within {ASK_SECONDS:g}s", detail={})

    def _on_exit(self, server: ForkServer, profile: str, pid: int, code: int) -> None:
        if server.children.pop(pid, None) is None:
            return  # reported already
        if server is not self.current and not server.children and server in self.servers:
            assert self._nursery is not None
            self._nursery.start_soon(self._let_go, server)
        child = self.children.get(profile)
        if child is None or child.pid != pid:
            return
        child.pid, child.server = None, None
        if child.process is not None:
            child.process.close()
            child.process = None
        if self.stopping:
            child.state, child.reason = "down", "stopped with the host"
            return
        self._decide(child, code)

    def _decide(self, child: Child, code: int) -> None:
        if child.stopped:
            child.state, child.reason = "down", "stopped"
            return
        decision = supervision.after_exit(code, child.crashes, time.time())
        child.crashes, child.reason = decision.crashes, decision.reason
        log.info("the gateway of %r: %s", child.profile, decision.reason)
        if decision.action == supervision.STAY_DOWN:
            child.state = "down"
            return
        assert self._nursery is not None
        child.state = "starting"
        self._nursery.start_soon(self._start, child.profile, decision.delay)

    # --- hang detection -------------------------------------------------------------------

    async def _check_health(self) -> None:
        while True:
            await trio.sleep(self.policy.interval)
            if self._rolling.locked():
                continue  # a roll drains and reforks them: its own waits judge them
            asked = {p: c.pid for p, c in self.children.items() if c.state == "running" and c.pid is not None}
            if not asked:
                continue
            profile_homes = {p: homes.profile_home(p, self.root) for p in asked}
            health = await trio.to_thread.run_sync(serving_now, profile_homes)
            for profile, pid in asked.items():
                child = self.children[profile]
                if self._rolling.locked() or child.state != "running" or child.pid != pid:
                    continue  # it moved on while it was asked: the answer is not its own
                age = trio.current_time() - child.forked_at
                child.watch, kill = hang.after_check(child.watch, health[profile].state, age, self.policy)
                if kill and child.process is not None:
                    log.error(
                        "the gateway of %r (pid %d) failed %d health checks in a row (%s): killed",
                        profile,
                        pid,
                        self.policy.failures,
                        health[profile].why,
                    )
                    child.process.signal(signal.SIGKILL)

    # --- control --------------------------------------------------------------------------

    def _status(self, call: Call) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "profiles": {profile: child.to_dict() for profile, child in self.children.items()},
            "fork_server": self.current.to_dict() if self.current else None,
            "fork_servers": [server.to_dict() for server in self.servers],
        }

    def _prepare(self, call: Call) -> dict[str, Any]:
        assert self._nursery is not None
        if not self._preparing:
            self._preparing = True
            self._nursery.start_soon(self._prepared)
        return {"fork_server": self.current.to_dict() if self.current else None}

    async def _prepared(self) -> None:
        """A fork server of the code on disk, imported and made the one forked from; nothing
        when the current one runs that code already. A failure is the roll's to report."""
        try:
            await self._server_for_fork()
        except RollFailed as exc:
            log.warning("preparing a fork server of the new code: %s", exc.message)
        finally:
            self._preparing = False

    async def _roll(self, call: Call) -> dict[str, Any]:
        wanted = call.args.get("profiles") or list(self.children)
        unknown = [p for p in wanted if not isinstance(p, str) or p not in self.children]
        if unknown:
            raise RollFailed(f"this host runs no gateway of {str(unknown[0])[:80]!r}", detail={"field": "profiles"})
        deadline = float(call.args.get("deadline", DRAIN_SECONDS))
        async with self._rolling:
            return await self._rolled(wanted, deadline)

    async def _rolled(self, wanted: list[str], deadline: float) -> dict[str, Any]:
        """The roll of ``wanted``'s gateways; the caller holds ``_rolling``."""
        old = {p: (c.pid, c.server) for p in wanted if (c := self.children[p]).pid is not None}
        async with self._spawning:
            on_disk = await trio.to_thread.run_sync(code_sha)
            current = self.current
            if (
                current is None
                or not current.ready
                or (on_disk is not None and on_disk != current.code_sha)
                or any(server is current for _, server in old.values())
            ):
                self._make_current(await self._spawn_server())  # RollFailed: nothing drained
        new = self.current
        assert new is not None
        results: dict[str, dict[str, Any]] = {p: {"old_pid": pid} for p, (pid, _) in old.items()}
        async with trio.open_nursery() as nursery:
            for profile, (pid, _) in old.items():
                assert pid is not None
                nursery.start_soon(self._drain, profile, pid, deadline, results[profile])
        with trio.move_on_after(FORKED_SECONDS):
            while any(self._waiting_for(p, new, r) for p, r in results.items()):
                await trio.sleep(POLL)
        for profile, result in results.items():
            child = self.children[profile]
            result["new_pid"] = child.pid if child.server is new else None
        return {"fork_server": new.to_dict(), "profiles": results}

    def _waiting_for(self, profile: str, new: ForkServer, result: dict[str, Any]) -> bool:
        child = self.children[profile]
        return "error" not in result and child.server is not new and child.state != "down"

    async def _drain(self, profile: str, pid: int, deadline: float, result: dict[str, Any]) -> None:
        home = homes.profile_home(profile, self.root)
        try:
            answer = await trio.to_thread.run_sync(_drain_call, home, deadline)
        except (RemoteError, HermesError) as exc:
            result["error"] = f"{exc.code}: {exc.message}"
            return
        result["finished"] = len(answer.get("finished", []))
        result["cut"] = len(answer.get("cut", []))
        if type(accepted := answer.get("accepted")) is int:
            result["accepted"] = accepted

    # --- one profile ----------------------------------------------------------------------

    def _hosted(self, call: Call) -> Child:
        profile = call.args["profile"]
        child = self.children.get(profile)
        if child is None:
            raise ProfileNotHosted(
                f"this host runs no gateway of {profile!r}", detail={"field": "profile", "profile": profile}
            )
        return child

    async def _stop_one(self, call: Call) -> dict[str, Any]:
        child = self._hosted(call)
        async with child.control:
            await self._stop_child(child)
            return _answer(child)

    async def _stop_child(self, child: Child) -> None:
        """SIGTERM (its own drain), then SIGKILL if it outlasts ``_stop_seconds()``; down
        from then on, whatever its exit code. A fork under way is waited for, then stopped."""
        child.stopped = True
        if child.pending is not None:
            child.pending.cancel()
        if child.pid is not None or child.forking:
            child.state = "stopping"
            await _until(lambda: not child.forking, FORK_SECONDS)
            for signum, seconds in ((signal.SIGTERM, _stop_seconds()), (signal.SIGKILL, EXIT_SECONDS)):
                if child.pid is None:
                    break
                if signum == signal.SIGKILL:
                    log.warning("the gateway of %r (pid %d) did not stop in time: killed", child.profile, child.pid)
                if child.process is not None:
                    child.process.signal(signum)
                await _until(lambda: child.pid is None, seconds)
            if child.pid is not None:
                raise SupervisorFailed(
                    f"the gateway of {child.profile!r} (pid {child.pid}) did not exit, even killed",
                    detail={"profile": child.profile, "pid": child.pid},
                )
        child.state, child.reason = "down", "stopped"

    async def _start_one(self, call: Call) -> dict[str, Any]:
        child = self._hosted(call)
        async with child.control:
            await self._start_child(child)
            return _answer(child)

    async def _start_child(self, child: Child) -> None:
        """Forked now unless it runs (or is being forked); its crash history forgotten, as
        ``supervisorctl start`` forgets a program's."""
        if self.stopping:
            raise SupervisorUnavailable("the gateway host is stopping", detail={"profile": child.profile})
        child.stopped, child.crashes = False, ()
        if child.pending is not None:
            child.pending.cancel()  # its crash delay is not waited out: it starts now
        await _until(lambda: not child.forking, FORK_SECONDS)
        if child.pid is None:
            await self._fork_child(child)

    async def _restart_one(self, call: Call) -> dict[str, Any]:
        child = self._hosted(call)
        async with child.control, self._rolling:
            if child.pid is None:
                await self._start_child(child)
                return _answer(child)
            child.stopped, child.crashes = False, ()
            rolled = (await self._rolled([child.profile], DRAIN_SECONDS))["profiles"].get(child.profile, {})
            if "error" in rolled:
                raise SupervisorFailed(
                    f"the gateway of {child.profile!r} could not be drained: {rolled['error']}",
                    detail={"profile": child.profile, "pid": rolled.get("old_pid")},
                )
            return _answer(child)


def _answer(child: Child) -> dict[str, Any]:
    return {"profile": child.profile, "pid": child.pid, "state": child.state, "reason": child.reason}


async def _until(done: Callable[[], bool], seconds: float) -> bool:
    """Whether ``done()`` came true within ``seconds`` (looked at every ``POLL``)."""
    with trio.move_on_after(seconds):
        while not done():
            await trio.sleep(POLL)
    return done()


def _drain_call(home: Path, deadline: float) -> dict[str, Any]:
    endpoint = homes.endpoint(home, ops.SERVICE, create=False)
    with connect(endpoint, retry=NO_RETRY) as client:
        answer = client.call(ops.DRAIN, {"deadline": deadline}, timeout=deadline + 10)
    return answer if isinstance(answer, dict) else {}
