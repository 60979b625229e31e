"""The daemon's state and the life of each session's runtime.

Holds the registry, the live runtimes (a real child on a real PTY each, with its retained
output and its rendered screen), the change events waits park on, and the state file. The op
handlers (``app``) only call into this.

A runtime's launch and its stop run shielded from the caller's deadline: a caller that gives
up does not leave a half-launched child or a half-stopped one behind.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from shared import files
from shared.hooks import ENDPOINT_ENV as HOOK_ENDPOINT_ENV
from shared.operator.protocol import DAEMON_ID_ENV, ENDPOINT_ENV, SESSION_ENV, Code
from shared.protocol import RemoteError
from simulators.operator_sim import agents, detect
from simulators.operator_sim.registry import Registry
from simulators.operator_sim.retained import Retained
from simulators.operator_sim.runtime import Runtime, SpawnFailed
from simulators.operator_sim.screen import Screen
from simulators.operator_sim.sessions import Clock, Session

log = logging.getLogger(__name__)

LAUNCH_BUDGET = 30.0
STOP_GRACE = 3.0
STATE_FILE = "sessions.json"


@dataclass
class Output:
    """One runtime's output: kept after the runtime ends, until the next one starts."""

    coordinates: tuple[str | None, int]
    retained: Retained


@dataclass
class Live:
    process: Runtime
    screen: Screen
    output: Output
    rules: tuple[Any, ...]
    stopping: bool = False
    exited: trio.Event = field(default_factory=trio.Event)


@dataclass
class Settings:
    hosts: list[str]
    daemon_id: str
    address: str
    hermes_bin: str
    work_dir: Path
    retain_bytes: int
    max_sessions: int = 256  # per host
    state_dir: Path | None = None
    # The integration state whose selected Hermes package a fresh launch runs; None: the source tree's.
    packages: Path | None = None
    hook_endpoint: str | None = None
    projects: dict[str, Path] = field(default_factory=dict)  # label -> repository


class Daemon:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.registry = Registry(settings.hosts)
        self.clock = Clock()
        self.retain_bytes = settings.retain_bytes
        self.agents: dict[str, agents.Agent] = {"shell": agents.shell()}
        self.agent_problems: dict[str, str] = {}
        try:
            hermes, manifest = agents.hermes(settings.hermes_bin)
            rules = detect.load_rules((agents.DESCRIPTOR.parent / manifest).read_text("utf-8"))
            self.agents["hermes"] = hermes
            self.rules: dict[str, tuple[Any, ...]] = {"hermes": rules}
        except (agents.RuntimeIncompatible, detect.DetectRulesInvalid, OSError) as exc:
            self.agent_problems["hermes"] = getattr(exc, "message", str(exc))
            self.rules = {}
        self.lives: dict[str, Live] = {}
        self.outputs: dict[str, Output] = {}
        self._changed: dict[str, trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        self._closing = False

    # --- lifetime -------------------------------------------------------------------------

    async def run(
        self, serve: Callable[..., Any], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the runtimes' tasks while ``serve`` answers calls; returns once both are done."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(serve)
            task_status.started()

    async def stop_all(self) -> None:
        """Stop every runtime; their records say the daemon lost them, so a restart resumes them."""
        self._closing = True
        async with trio.open_nursery() as nursery:
            for live in list(self.lives.values()):
                nursery.start_soon(self._stop_live, live)

    def start_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn`` in the daemon's own nursery: it outlives the call that started it."""
        assert self._nursery is not None  # only while serving
        self._nursery.start_soon(fn, *args)

    # --- changes --------------------------------------------------------------------------

    def changed(self, session: Session) -> None:
        """Wake everyone parked on this session (a fresh event for the next change)."""
        event = self._changed.pop(session.id, None)
        if event is not None:
            event.set()

    def change_event(self, session: Session) -> trio.Event:
        return self._changed.setdefault(session.id, trio.Event())

    def touch(self, session: Session, *, persist: bool = True) -> None:
        session.touch(self.clock.stamp())
        if persist:
            self.persist()
        self.changed(session)

    # --- agents ---------------------------------------------------------------------------

    def agent(self, name: str) -> agents.Agent:
        found = self.agents.get(name)
        if found is None:
            problem = self.agent_problems.get(name)
            if problem is not None:
                raise RemoteError(agents.RuntimeIncompatible.code, problem, detail={"agent": name})
            raise RemoteError(
                Code.AGENT_UNKNOWN,
                f"this host runs no agent {name!r}",
                detail={"agent": name, "known": sorted(self.agents)},
            )
        return found

    async def fresh_agent(self, name: str) -> agents.Agent:
        """The agent a new session launches. With ``packages`` set, hermes comes from the
        selected, enabled package, its root verified again first; a running session keeps the
        agent it was launched with."""
        if name == "hermes" and self.settings.packages is not None:
            agent, rules = await trio.to_thread.run_sync(self._packaged_hermes, self.settings.packages)
            self.agents["hermes"], self.rules["hermes"] = agent, rules
            self.agent_problems.pop("hermes", None)
        return self.agent(name)

    def _packaged_hermes(self, state: Path) -> tuple[agents.Agent, tuple[Any, ...]]:
        from runtime_package import manifests, paths
        from runtime_package import registry as store

        registry = store.Registry(paths.plugins_dir(state))
        try:
            package = registry.read().selected_package(manifests.PACKAGE_ID)
        except (store.RegistryUnreadable, store.StoreUnsafe):
            package = None
        if package is None or not package.enabled:
            raise RemoteError(
                Code.RUNTIME_NOT_INSTALLED,
                "no enabled Hermes runtime package is selected on this host",
                detail={"agent": "hermes"},
            )
        try:
            files = registry.verify_root(package.digest).files
            agent, manifest = agents.hermes_from(self.settings.hermes_bin, files[manifests.RUNTIME_MANIFEST].decode())
            return agent, detect.load_rules(files[manifest].decode("utf-8"))
        except (store.RootInvalid, agents.RuntimeIncompatible, detect.DetectRulesInvalid, KeyError, UnicodeDecodeError):
            log.warning("the selected Hermes package cannot be launched")  # no content: a fixed line
            raise RemoteError(
                Code.RUNTIME_INCOMPATIBLE,
                "the selected Hermes runtime package fails verification",
                detail={"agent": "hermes", "package_digest": package.digest},
            ) from None

    def inventory(self) -> list[dict[str, Any]]:
        rows = []
        for name in ("hermes", "shell"):
            agent = self.agents.get(name)
            available = agent is not None and os.access(agent.program, os.X_OK)
            rows.append(
                {
                    "agent": name,
                    "agent_base": agent.base if agent else name,
                    "available": available,
                    "supported": agent is not None,
                    "fork_supported": bool(agent and agent.fork_supported),
                }
            )
        return rows

    # --- runtimes -------------------------------------------------------------------------

    async def launch(self, session: Session, agent: agents.Agent, reference: str | None = None) -> None:
        """Start the session's next runtime; the record says ``failed`` if the child cannot start."""
        env = {
            **os.environ,
            SESSION_ENV: session.id,
            DAEMON_ID_ENV: self.settings.daemon_id,
            ENDPOINT_ENV: self.settings.address,
            "TERM": "xterm-256color",
            **agent.launch_identity(),
        }
        if self.settings.hook_endpoint:
            env[HOOK_ENDPOINT_ENV] = self.settings.hook_endpoint
        with trio.CancelScope(shield=True), trio.move_on_after(LAUNCH_BUDGET):
            try:
                process = await Runtime.spawn(agent.argv(reference), env, session.cwd, session.cols, session.rows)
            except SpawnFailed:
                session.launch_failed(self.clock.stamp())
                self.persist()
                self.changed(session)
                raise
            session.launched(process.pid, self.clock.stamp())
            output = Output(session.runtime.coordinates(), Retained(self.retain_bytes))
            live = Live(process, Screen(session.cols, session.rows), output, self.rules.get(agent.name, ()))
            self.lives[session.id] = live
            self.outputs[session.id] = output
            self.persist()
            self.changed(session)
            self.start_soon(self._pump, session, live)

    async def _pump(self, session: Session, live: Live) -> None:
        try:
            status = await live.process.pump(lambda chunk: self._on_output(session, live, chunk))
        except Exception:  # a reader bug must not take the daemon down: the runtime is reported failed
            log.exception("the runtime of session %s failed", session.id)
            status = -1
            with trio.CancelScope(shield=True):
                await live.process.stop(grace=0.5)
        finally:
            live.process.close()
        if self.lives.get(session.id) is live:
            del self.lives[session.id]
        if self._closing:
            session.lost("daemon_stopped", self.clock.stamp())
        else:
            session.exited(status, stopped=live.stopping, at=self.clock.stamp())
        self.persist()
        self.changed(session)
        live.exited.set()

    def _on_output(self, session: Session, live: Live, chunk: bytes) -> None:
        live.output.retained.append(chunk)
        if live.screen.feed(chunk):
            seen = detect.activity(live.rules, live.screen.visible_lines()) if live.rules else None
            if seen != session.screen_activity:
                session.screen_activity = seen
                session.touch(self.clock.stamp())
        self.changed(session)

    async def stop(self, session: Session) -> None:
        live = self.lives.get(session.id)
        if live is not None:
            with trio.CancelScope(shield=True):
                await self._stop_live(live)
        elif session.state == "starting":  # a delayed launch that has not happened yet never will
            session.exited(0, stopped=True, at=self.clock.stamp())
            self.persist()
            self.changed(session)

    async def _stop_live(self, live: Live) -> None:
        live.stopping = True
        with trio.move_on_after(STOP_GRACE + 5):
            await live.process.stop(grace=STOP_GRACE)
            await live.exited.wait()

    # --- state file -----------------------------------------------------------------------

    def persist(self) -> None:
        if self.settings.state_dir is None:
            return
        files.write_json_atomic(
            self.settings.state_dir / STATE_FILE,
            {"daemon_id": self.settings.daemon_id, "sessions": [s.to_state() for s in self.registry.all()]},
            secret=True,  # session names and metadata are the owner's: 0600
        )

    def restore(self) -> int:
        """Load the sessions a previous run kept: their records, with the runtime they had lost."""
        if self.settings.state_dir is None:
            return 0
        path = self.settings.state_dir / STATE_FILE
        if not path.exists():
            return 0
        data = files.read_json(path)
        restored = 0
        try:
            for record in data["sessions"]:
                session = Session.from_state(record)
                if session.host not in self.registry.hosts:
                    log.warning(
                        "session %s is on host %r, which is not configured: not restored", session.id, session.host
                    )
                    continue
                session.lost("daemon_restarted", self.clock.stamp())
                self.registry.add(session)
                restored += 1
        except (KeyError, TypeError) as exc:
            raise files.StateFileCorrupt(
                path, f"it does not hold sessions this daemon wrote ({type(exc).__name__})"
            ) from None
        self.persist()
        return restored
