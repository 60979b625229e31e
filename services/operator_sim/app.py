"""The daemon's ops: each validates its arguments, resolves its target, applies the origin
guard and idempotency, and calls into ``daemon``. Summaries go out through the v3 bridge.

Every daemon op passes the faults in force first (``sim.configure``); the simulator's own
ops (``sim.*``) never do.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from services.operator_sim import ops as sim_ops
from services.operator_sim import worktrees
from services.operator_sim.agents import Agent, probe
from services.operator_sim.daemon import Daemon, Settings
from services.operator_sim.idempotency import Idempotency, args_digest
from services.operator_sim.registry import guard
from services.operator_sim.sessions import Session, new_session_id
from services.operator_sim.waits import Snapshot, Waiters, wait_params, wait_reason
from shared.operator import bridge, u64
from shared.operator import protocol as p
from shared.operator.protocol import Code
from shared.protocol import Code as WireCode
from shared.protocol import OpSpec, RemoteError
from shared.service import Call, Service

MAX_RECORDS = 10_000
MAX_COUNTED_NAMES = 10_000  # names past this are counted together, under ""
DEFAULT_COLS, DEFAULT_ROWS = 120, 40
DEFAULT_OUTPUT_BYTES = 65_536
METADATA_KEY_MAX, METADATA_VALUE_MAX = 64, 1024

Args = dict[str, Any]
Handler = Callable[[Call, Args], Awaitable[Any]]


class SessionDaemonApp:
    def __init__(self, settings: Settings, *, window: tuple[int, int], lock: Path | None):
        self.daemon = Daemon(settings)
        self.settings = settings
        self.idempotency = Idempotency()
        self.waiters = Waiters()
        self.records: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDS)
        self.received: Counter[str] = Counter()
        self.started_names: Counter[str] = Counter()
        self.faults: dict[str, int] = dict.fromkeys(
            ("slow_ms", "fail_next", "start_reply_delay_ms", "start_drop", "start_runtime_delay_ms"), 0
        )
        self.service = Service("operator_sim", settings.address, lock_path=lock, window=window)
        daemon_ops: list[tuple[OpSpec, Handler]] = [
            (p.HOST_LIST, self._host_list),
            (p.HOST_INSPECT, self._host_inspect),
            (p.PROJECT_LIST, self._project_list),
            (p.SESSION_LIST, self._list),
            (p.SESSION_GET, self._get),
            (p.SESSION_NEW, self._new),
            (p.SESSION_INPUT, self._input),
            (p.SESSION_OUTPUT, self._output),
            (p.SESSION_SCREEN, self._screen),
            (p.SESSION_WAIT, self._wait),
            (p.SESSION_DIFF, self._diff),
            (p.SESSION_STOP, self._stop),
            (p.SESSION_RESUME, self._resume),
            (p.SESSION_REMOVE, self._remove),
            (p.SESSION_REMOVE_ACCEPTING_UNCONFIRMED, self._remove),
            (p.SESSION_FORK, self._fork),
            (p.SESSION_RESIZE, self._resize),
            (p.SESSION_RENAME, self._rename),
            (p.SESSION_SET_METADATA, self._set_metadata),
            (p.SESSION_REPORT_AGENT, self._lifecycle),
            (p.SESSION_RELEASE_AGENT, self._lifecycle),
            (p.SESSION_REPORT_NATIVE_ID, self._lifecycle),
            (p.REPORT, self._report),
        ]
        for spec, handler in daemon_ops:
            self.service.add(spec, self._daemon_op(spec, handler))
        self.service.add(sim_ops.SIM_RECORDS, lambda call: {"records": list(self.records)})
        self.service.add(sim_ops.SIM_COUNTERS, self._counters)
        self.service.add(sim_ops.SIM_CONFIGURE, self._configure)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.daemon.run(self.service.serve, task_status=task_status)

    # --- the envelope of every daemon op --------------------------------------------------

    def _daemon_op(self, spec: OpSpec, handler: Handler) -> Callable[[Call], Awaitable[Any]]:
        mutation = spec.name in p.MUTATIONS or spec is p.SESSION_NEW

        async def run(call: Call) -> Any:
            self.received[spec.name] += 1
            if spec is p.SESSION_NEW and "name" in call.args:
                name = call.args["name"]
                counted = name in self.started_names or len(self.started_names) < MAX_COUNTED_NAMES
                self.started_names[name if counted else ""] += 1
            if self.faults["slow_ms"]:
                await trio.sleep(self.faults["slow_ms"] / 1000)
            if self.faults["fail_next"]:
                self.faults["fail_next"] -= 1
                raise RemoteError(Code.DAEMON_FAILING, "the daemon is failing on purpose")
            args = bridge.arguments(call.version, call.args)
            key = args.get("idempotency_key") if mutation else None
            result = await (handler(call, args) if key is None else self._once(spec, key, call, args, handler))
            if spec is p.SESSION_NEW and self.faults["start_reply_delay_ms"]:
                # Held back after the session (and its key) are recorded: a caller that gives up
                # meanwhile finds the session, and a replay of its key gets it, never a second one.
                await trio.sleep(self.faults["start_reply_delay_ms"] / 1000)
            return result

        return run

    async def _once(self, spec: OpSpec, key: str, call: Call, args: Args, handler: Handler) -> Any:
        stored = self.idempotency.begin(spec.name, key, args_digest(args), time.monotonic())
        if stored is not None:
            return {**stored, "replayed": True}
        try:
            result = await handler(call, args)
        except BaseException:
            self.idempotency.abandon(spec.name, key)
            raise
        self.idempotency.finish(spec.name, key, result, time.monotonic())
        return result

    # --- helpers --------------------------------------------------------------------------

    def _summary(self, call: Call, session: Session) -> dict[str, Any]:
        return bridge.summary(call.version, session.summary())

    def _target(self, args: Args, spec: OpSpec | None = None) -> Session:
        session = self.daemon.registry.find(args["host"], args["session"])
        if spec is not None:
            guard(p.method(spec), session, args, self.settings.daemon_id)
        return session

    def _check_runtime(self, session: Session, args: Args, coordinates: tuple[str | None, int]) -> None:
        """Runtime coordinates, when given, must be a pair naming the runtime in question; an
        output cursor is only valid with the runtime it came from, so it needs them."""
        worker, generation = args.get("worker_instance_id"), args.get("runtime_generation")
        if worker is None and generation is None:
            if "after_offset" in args:
                raise RemoteError(
                    WireCode.INVALID_FIELD,
                    "after_offset needs the runtime it was returned with",
                    detail={"field": "worker_instance_id"},
                )
            return
        if worker is None or generation is None:
            raise RemoteError(
                WireCode.INVALID_FIELD,
                "worker_instance_id and runtime_generation come together",
                detail={"field": "runtime_generation" if generation is None else "worker_instance_id"},
            )
        if (worker, u64.parse(generation, "runtime_generation")) != coordinates:
            current_worker, current_generation = session.runtime.coordinates()
            raise RemoteError(
                Code.SESSION_RUNTIME_CHANGED,
                "the session runs another runtime now: discard the old cursors",
                detail={
                    "session_id": session.id,
                    "worker_instance_id": current_worker,
                    "runtime_generation": u64.to_wire(current_generation),
                },
            )

    def _runtime_fields(self, session: Session) -> dict[str, Any]:
        worker, generation = session.runtime.coordinates()
        return {"session_id": session.id, "worker_instance_id": worker, "runtime_generation": u64.to_wire(generation)}

    def _snapshot(self, session: Session) -> Snapshot:
        live = self.daemon.lives.get(session.id)
        output = self.daemon.outputs.get(session.id)
        return Snapshot(
            runtime=session.runtime.coordinates(),
            state=session.state,
            activity=session.activity[0],
            output_end=output.retained.end if output else 0,
            watermark=live.screen.watermark if live else 0,
            updated_at=session.updated_at,
        )

    # --- hosts and projects ---------------------------------------------------------------

    async def _host_list(self, call: Call, args: Args) -> Any:
        registry = self.daemon.registry
        return {
            "hosts": [{"host": h, "state": "down" if h in registry.down else "up"} for h in registry.hosts],
            "daemon_id": self.settings.daemon_id,
        }

    async def _host_inspect(self, call: Call, args: Args) -> Any:
        self.daemon.registry.host(args["host"])
        runtimes = self.daemon.inventory()
        return {
            "host": args["host"],
            "supported_agents": [r["agent"] for r in runtimes if r["supported"]],
            "runtimes": runtimes,
        }

    def _projects(self) -> list[dict[str, str]]:
        return [
            {"id": worktrees.project_id(path), "label": label, "path": str(path)}
            for label, path in sorted(self.settings.projects.items())
        ]

    async def _project_list(self, call: Call, args: Args) -> Any:
        self.daemon.registry.host(args["host"])
        return {"projects": self._projects()}

    def _project(self, ref: str) -> dict[str, str]:
        projects = self._projects()
        by_id = [pr for pr in projects if pr["id"] == ref]
        found = by_id or [pr for pr in projects if pr["label"] == ref]
        if len(found) == 1:
            return found[0]
        if found:
            raise RemoteError(
                Code.PROJECT_AMBIGUOUS, f"{len(found)} projects are called {ref!r}", detail={"project": ref}
            )
        raise RemoteError(Code.PROJECT_NOT_FOUND, f"no project {ref!r}", detail={"project": ref})

    # --- sessions: reads ------------------------------------------------------------------

    async def _list(self, call: Call, args: Args) -> Any:
        sessions = self.daemon.registry.sessions(args["host"], args.get("name"))
        return {"sessions": [self._summary(call, s) for s in sessions]}

    async def _get(self, call: Call, args: Args) -> Any:
        return self._summary(call, self._target(args))

    async def _output(self, call: Call, args: Args) -> Any:
        session = self._target(args)
        output = self.daemon.outputs.get(session.id)
        if output is None:
            raise RemoteError(
                Code.SESSION_TERMINAL_UNAVAILABLE,
                "the session has had no runtime yet",
                detail={"session_id": session.id},
            )
        self._check_runtime(session, args, output.coordinates)
        after = u64.parse(args["after_offset"], "after_offset") if "after_offset" in args else None
        wait_ms = args.get("wait_ms", 0)
        if wait_ms and after is None:
            raise RemoteError(WireCode.INVALID_FIELD, "wait_ms needs after_offset", detail={"field": "wait_ms"})
        timed_out = False
        if wait_ms and after is not None and after >= output.retained.end:
            with trio.move_on_after(wait_ms / 1000) as waited:
                while output.retained.end <= after and self.daemon.outputs.get(session.id) is output:
                    await self.daemon.change_event(session).wait()
            timed_out = waited.cancelled_caught
        page = output.retained.read(after, args.get("max_bytes", DEFAULT_OUTPUT_BYTES))
        worker, generation = output.coordinates
        result: dict[str, Any] = {
            "session_id": session.id,
            "history_start_offset": u64.to_wire(output.retained.history_start),
            "start_offset": u64.to_wire(page.start),
            "next_offset": u64.to_wire(page.next),
            "runtime_end_offset": u64.to_wire(output.retained.end),
            "data": page.data,
            "has_more": page.has_more,
            "timed_out": timed_out,
            "worker_instance_id": worker,
            "runtime_generation": u64.to_wire(generation),
        }
        if page.gap is not None:
            result["gap"] = {"start_offset": u64.to_wire(page.gap[0]), "end_offset": u64.to_wire(page.gap[1])}
        return result

    async def _screen(self, call: Call, args: Args) -> Any:
        session = self._target(args)
        live = self.daemon.lives.get(session.id)
        if live is None:
            raise RemoteError(
                Code.SESSION_TERMINAL_UNAVAILABLE, "the session has no live terminal", detail={"session_id": session.id}
            )
        self._check_runtime(session, args, live.output.coordinates)
        return {
            **self._runtime_fields(session),
            "worker_id": self.settings.daemon_id,
            "watermark": u64.to_wire(live.screen.watermark),
            **live.screen.snapshot(),
        }

    async def _wait(self, call: Call, args: Args) -> Any:
        session = self._target(args)
        params = wait_params(args, self._snapshot(session))
        self.waiters.enter(session.id)
        try:
            with trio.move_on_after(params.timeout_ms / 1000):
                while True:
                    if self.daemon.registry.by_id(session.id) is None:
                        raise RemoteError(
                            Code.SESSION_NOT_FOUND, "the session was removed", detail={"session": session.id}
                        )
                    now = self._snapshot(session)
                    reason = wait_reason(params, now)
                    if reason is not None:
                        return self._waited(call, session, reason, now)
                    await self.daemon.change_event(session).wait()
            return self._waited(call, session, "timeout", self._snapshot(session))
        finally:
            self.waiters.leave(session.id)

    def _waited(self, call: Call, session: Session, reason: str, now: Snapshot) -> dict[str, Any]:
        return {
            "reason": reason,
            "session": self._summary(call, session),
            "terminal_watermark": u64.to_wire(now.watermark),
            "output_offset": u64.to_wire(now.output_end),
        }

    async def _diff(self, call: Call, args: Args) -> Any:
        session = self._target(args)
        where = session.worktree_path or (session.cwd if session.project_id else None)
        if where is None:
            raise RemoteError(
                Code.SESSION_NO_REPOSITORY, "the session is not in a git repository", detail={"session_id": session.id}
            )
        found = await worktrees.diff(Path(where), session.base_branch, args.get("max_bytes", DEFAULT_OUTPUT_BYTES))
        return {"session_id": session.id, **found}

    # --- sessions: mutations --------------------------------------------------------------

    def _room_on(self, host: str) -> None:
        limit = self.settings.max_sessions
        if len(self.daemon.registry.sessions(host)) >= limit:
            raise RemoteError(
                Code.SESSION_LIMIT,
                f"host {host!r} holds {limit} sessions: remove one first",
                detail={"host": host, "limit": limit},
            )

    async def _new(self, call: Call, args: Args) -> Any:
        host = args["host"]
        self._room_on(host)
        agent = await self.daemon.fresh_agent(args["agent"])
        if self.faults["start_drop"]:
            self.faults["start_drop"] -= 1
            await trio.sleep_forever()  # accepted, and nothing is ever created
        await probe(agent)
        session = Session(
            id=new_session_id(),
            host=host,
            agent=agent.name,
            agent_base=agent.base,
            cwd=str(self.settings.work_dir),
            created_at=(at := self.daemon.clock.stamp()),
            updated_at=at,
            cols=args.get("cols", DEFAULT_COLS),
            rows=args.get("rows", DEFAULT_ROWS),
            fork_supported=agent.fork_supported,
            name=args.get("name"),
            metadata=_metadata(args.get("metadata", {})),
        )
        if "project" in args:
            await self._place(session, args)
        elif "branch" in args or "base_branch" in args:
            raise RemoteError(WireCode.INVALID_FIELD, "a branch needs a project", detail={"field": "branch"})
        self.daemon.registry.add(session)
        self.daemon.persist()
        delay = self.faults["start_runtime_delay_ms"]
        if delay:
            self.daemon.start_soon(self._launch_later, session, agent, delay / 1000, args.get("input"))
        else:
            await self.daemon.launch(session, agent)
            if "input" in args:
                await self._write(session, args["input"], True)
        return {**self._summary(call, session), **({"applied_input": True} if "input" in args and not delay else {})}

    async def _launch_later(self, session: Session, agent: Agent, delay: float, text: str | None) -> None:
        await trio.sleep(delay)
        if session.state != "starting" or self.daemon.registry.by_id(session.id) is None:
            return  # stopped or removed before it went live
        try:
            await self.daemon.launch(session, agent)
            if text is not None:
                await self._write(session, text, True)
        except RemoteError:
            pass  # the record says failed

    async def _place(self, session: Session, args: Args) -> None:
        project = self._project(args["project"])
        repo = Path(project["path"])
        session.project_id, session.repo = project["id"], str(repo)
        branch = args.get("branch")
        if branch is None:
            session.cwd = str(repo)
            return
        into = self._worktree_dir() / session.id
        base = args.get("base_branch")
        path = await worktrees.add_worktree(repo, branch, base, into)
        session.cwd = session.worktree_path = str(path)
        session.branch, session.base_branch = branch, base

    def _worktree_dir(self) -> Path:
        root = self.settings.state_dir or self.settings.work_dir
        path = root / "worktrees"
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path

    async def _write(self, session: Session, text: str, submit: bool) -> int:
        live = self.daemon.lives.get(session.id)
        if live is None:
            raise RemoteError(
                Code.SESSION_NOT_LIVE, "the session has no live runtime", detail={"session_id": session.id}
            )
        agent = self.daemon.agent(session.agent)
        data, then = agent.framed(text, submit)
        await live.process.write(data, then=then, pause=agent.submit_delay)
        return len(data) + len(then)

    async def _input(self, call: Call, args: Args) -> Any:
        session = self._target(args, p.SESSION_INPUT)
        live = self.daemon.lives.get(session.id)
        if live is None:
            raise RemoteError(
                Code.SESSION_NOT_LIVE, "the session has no live runtime", detail={"session_id": session.id}
            )
        self._check_runtime(session, args, live.output.coordinates)
        written = await self._write(session, args["text"], args.get("submit", True))
        return {**self._runtime_fields(session), "bytes_written": written}

    async def _stop(self, call: Call, args: Args) -> Any:
        session = self._target(args, p.SESSION_STOP)
        await self.daemon.stop(session)
        return self._summary(call, session)

    async def _resume(self, call: Call, args: Args) -> Any:
        session = self._target(args, p.SESSION_RESUME)
        if session.live:
            raise RemoteError(
                Code.SESSION_LIVE, "the session is running: nothing to resume", detail={"session_id": session.id}
            )
        if not session.resumable:
            raise RemoteError(
                Code.AGENT_NOT_RESUMABLE,
                "the session has no native reference its PTY root reported, or it has finished",
                detail={"session_id": session.id, "state": session.state},
            )
        agent = self.daemon.agent(session.agent)
        await probe(agent)
        session.cols, session.rows = args.get("cols", session.cols), args.get("rows", session.rows)
        await self.daemon.launch(session, agent, reference=session.native_session_id)
        return self._summary(call, session)

    async def _remove(self, call: Call, args: Args) -> Any:
        spec = p.SESSION_REMOVE if call.op is p.SESSION_REMOVE else p.SESSION_REMOVE_ACCEPTING_UNCONFIRMED
        session = self._target(args, spec)
        if session.live or session.state == "starting":
            raise RemoteError(
                Code.SESSION_LIVE, "stop the session before removing it", detail={"session_id": session.id}
            )
        if session.worktree_path is not None and session.repo is not None:
            reasons = await worktrees.unconfirmed(Path(session.worktree_path))
            if reasons and spec is p.SESSION_REMOVE:
                raise RemoteError(
                    Code.SESSION_REMOVE_UNCONFIRMED,
                    "removing the session would lose work in its worktree",
                    detail={"session_id": session.id, "reasons": reasons},
                )
            await worktrees.remove_worktree(Path(session.repo), Path(session.worktree_path))
        self.daemon.registry.remove(session)
        self.daemon.outputs.pop(session.id, None)
        self.daemon.persist()
        self.daemon.changed(session)
        return {"session_id": session.id, "removed": True}

    async def _fork(self, call: Call, args: Args) -> Any:
        session = self._target(args, p.SESSION_FORK)
        agent = self.daemon.agent(session.agent)
        if not agent.fork_supported:
            return {
                "session_id": session.id,
                "fork_supported": False,
                "error": {"code": Code.AGENT_FORK_UNSUPPORTED, "message": f"{agent.name} sessions cannot be forked"},
            }
        self._room_on(session.host)
        child = Session(
            id=new_session_id(),
            host=session.host,
            agent=session.agent,
            agent_base=session.agent_base,
            cwd=session.cwd,
            created_at=(at := self.daemon.clock.stamp()),
            updated_at=at,
            cols=session.cols,
            rows=session.rows,
            fork_supported=True,
            name=args.get("name"),
            project_id=session.project_id,
            repo=session.repo,
        )
        self.daemon.registry.add(child)
        await self.daemon.launch(child, agent)
        return {"session_id": session.id, "fork_supported": True, "session": self._summary(call, child)}

    async def _resize(self, call: Call, args: Args) -> Any:
        session = self._target(args, p.SESSION_RESIZE)
        session.cols, session.rows = args["cols"], args["rows"]
        live = self.daemon.lives.get(session.id)
        if live is not None:
            live.process.resize(session.cols, session.rows)
            live.screen.resize(session.cols, session.rows)
        self.daemon.touch(session)
        return self._summary(call, session)

    async def _rename(self, call: Call, args: Args) -> Any:
        session = self._target(args, p.SESSION_RENAME)
        session.name = args["name"]
        self.daemon.touch(session)
        return self._summary(call, session)

    async def _set_metadata(self, call: Call, args: Args) -> Any:
        session = self._target(args, p.SESSION_SET_METADATA)
        session.metadata = _metadata(args["metadata"])
        self.daemon.touch(session)
        return self._summary(call, session)

    # --- lifecycle reports ----------------------------------------------------------------

    async def _report(self, call: Call, args: Args) -> Any:
        report = args["report"]
        self.records.append(report)
        kind, session_id, pid = report.get("kind"), report.get("session"), report.get("pid")
        if not isinstance(session_id, str) or not isinstance(pid, int):
            raise RemoteError(WireCode.INVALID_FIELD, "a report names its session and pid", detail={"field": "report"})
        return {"ok": True, "applied": self._apply(kind, session_id, pid, report)}

    async def _lifecycle(self, call: Call, args: Args) -> Any:
        kind = {
            p.SESSION_REPORT_AGENT.name: "activity",
            p.SESSION_RELEASE_AGENT.name: "release",
            p.SESSION_REPORT_NATIVE_ID.name: "native_id",
        }[call.op.name]
        fields = {"state": args.get("activity"), "native_id": args.get("native_id")}
        if self.daemon.registry.by_id(args["session"]) is None:
            raise RemoteError(
                Code.SESSION_NOT_FOUND, f"no session {args['session']!r}", detail={"session": args["session"]}
            )
        return {"ok": True, "applied": self._apply(kind, args["session"], args["pid"], fields)}

    def _apply(self, kind: Any, session_id: str, pid: int, fields: dict[str, Any]) -> bool:
        """File one report against its session; False when it names no session of ours, or is
        a native id claim that is not from the current runtime's PTY root."""
        session = self.daemon.registry.by_id(session_id)
        if session is None:
            return False
        if kind == "native_id":
            if not session.live or pid != session.pid:
                return False
            session.native_session_id = fields["native_id"]
        elif kind == "activity":
            session.reported_activity = fields["state"]
        elif kind == "attention":
            session.reported_activity = "blocked"
        elif kind == "release":
            session.reported_activity = None
        elif kind == "continuation":
            session.continuation_ids = list(fields["continuation_ids"])
        else:
            return False
        self.daemon.touch(session, persist=kind in ("native_id", "continuation"))
        return True

    # --- the simulator's own ops ----------------------------------------------------------

    def _counters(self, call: Call) -> dict[str, Any]:
        return {"ops": dict(self.received), "session_new_by_name": dict(self.started_names)}

    def _configure(self, call: Call) -> dict[str, Any]:
        for key in self.faults:
            if key in call.args:
                self.faults[key] = call.args[key]
        registry = self.daemon.registry
        if "hosts_down" in call.args:
            down = call.args["hosts_down"]
            unknown = [h for h in down if h not in registry.hosts]
            if unknown:
                raise RemoteError(WireCode.INVALID_FIELD, f"unknown hosts {unknown}", detail={"field": "hosts_down"})
            registry.down = set(down)
        if "retain_bytes" in call.args:
            self.daemon.retain_bytes = call.args["retain_bytes"]
            for output in self.daemon.outputs.values():
                output.retained.set_limit(self.daemon.retain_bytes)
        return {**self.faults, "hosts_down": sorted(registry.down), "retain_bytes": self.daemon.retain_bytes}


def _metadata(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and 0 < len(k) <= METADATA_KEY_MAX and len(v) <= METADATA_VALUE_MAX
        for k, v in value.items()
    ):
        raise RemoteError(
            WireCode.INVALID_FIELD,
            f"metadata maps names of 1-{METADATA_KEY_MAX} characters to strings of at most {METADATA_VALUE_MAX}",
            detail={"field": "metadata"},
        )
    return dict(value)


def daemon_id() -> str:
    return f"d-{secrets.token_hex(6)}"
