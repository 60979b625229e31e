"""``hermes mesh status|up|down``: the mesh supervisor of an install and every gateway it runs,
and the reports these return."""

from __future__ import annotations

import signal
import xmlrpc.client
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.supervisors.errors import SupervisorUnavailable
from fleet.supervisors.host import require_host
from fleet.supervisors.supervisord.config import (
    ConfiguredProgram,
    configured_programs,
    mesh_programs,
    write_config,
)
from fleet.supervisors.supervisord.daemon import (
    DOWN_TIMEOUT,
    LOCK_TIMEOUT,
    kill,
    leftover_gateways,
    live_daemon,
    recorded,
    require_supervisor,
    send_signal,
    start_daemon,
    stop_orphans,
)
from fleet.supervisors.supervisord.names import CONFIRM_TIMER, profile_of
from fleet.supervisors.supervisord.paths import MeshPaths, mesh_paths, prepare
from fleet.supervisors.supervisord.programs import START_TIMEOUT, Progress, start_stopped, stop_program, wait_running
from fleet.supervisors.supervisord.rpc import call, failure, process_infos
from fleet.supervisors.supervisord.waits import wait_for
from shared import homes
from shared.errors import HermesError
from shared.files import locked
from shared.identity import ProcessIdentity, is_alive, process_identity

# --- status -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgramStatus:
    name: str
    profile: str | None  # None: the multiplex program, or a program not of the mesh
    state: str  # supervisord's state name; NOT_LOADED when configured but unknown to it
    pid: int | None
    uptime: float | None  # seconds in RUNNING
    description: str
    exit_status: int | None
    log: Path
    served: tuple[str, ...] = ()  # the multiplex program's served profiles, as configured

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "profile": self.profile,
            "served_profiles": list(self.served),
            "state": self.state,
            "pid": self.pid,
            "uptime": self.uptime,
            "description": self.description,
            "exit_status": self.exit_status,
            "log": str(self.log),
        }


@dataclass(frozen=True)
class MeshStatus:
    paths: MeshPaths
    supervisor: ProcessIdentity | None  # None: supervisord is not running
    started_at: str | None
    problem: str | None  # running but not answering, for instance
    programs: tuple[ProgramStatus, ...]

    @property
    def running(self) -> bool:
        return self.supervisor is not None

    def program(self, name: str) -> ProgramStatus | None:
        return next((p for p in self.programs if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": str(self.paths.root),
            "config": str(self.paths.config),
            "socket": str(self.paths.socket),
            "supervisord": {
                "running": self.running,
                "pid": self.supervisor.pid if self.supervisor else None,
                "start_time": self.supervisor.start_time if self.supervisor else None,
                "started_at": self.started_at,
                "problem": self.problem,
            },
            "programs": [p.to_dict() for p in self.programs],
        }


def status(root: Path) -> MeshStatus:
    """What the mesh supervisor of ``root`` runs; changes nothing."""
    require_supervisor()
    paths = mesh_paths(root)
    return _status(paths, live_daemon(paths, adopt=False))


def _status(paths: MeshPaths, daemon: ProcessIdentity | None) -> MeshStatus:
    configured = configured_programs(paths)
    record = recorded(paths)
    started_at = record.get("started_at") if record and daemon and record.get("pid") == daemon.pid else None
    if daemon is None:
        programs = [_absent(paths, p, "STOPPED", "supervisord is not running") for p in configured.values()]
        return MeshStatus(paths, None, None, None, tuple(programs))
    try:
        infos = process_infos(paths)
    except (SupervisorUnavailable, xmlrpc.client.Fault) as exc:
        problem = exc.message if isinstance(exc, HermesError) else exc.faultString
        programs = [_absent(paths, p, "UNKNOWN", "supervisord does not answer") for p in configured.values()]
        return MeshStatus(paths, daemon, started_at, problem, tuple(programs))
    # The confirm's timer is no gateway: its place is the update's (``hermes update --plan``).
    programs = [
        _from_info(paths, info, configured.get(info["name"]))
        for info in infos.values()
        if info["name"] != CONFIRM_TIMER
    ]
    programs += [
        _absent(paths, p, "NOT_LOADED", "in the config but not loaded; run `hermes mesh up`")
        for name, p in configured.items()
        if name not in infos
    ]
    return MeshStatus(paths, daemon, started_at, None, tuple(sorted(programs, key=lambda p: p.name)))


def _absent(paths: MeshPaths, program: ConfiguredProgram, state: str, why: str) -> ProgramStatus:
    log = paths.program_log(program.name)
    return ProgramStatus(program.name, program.profile, state, None, None, why, None, log, program.served)


def _from_info(paths: MeshPaths, info: dict[str, Any], program: ConfiguredProgram | None) -> ProgramStatus:
    name = info["name"]
    running = info["statename"] == "RUNNING"
    return ProgramStatus(
        name=name,
        profile=program.profile if program else profile_of(name),
        state=info["statename"],
        pid=info["pid"] or None,
        uptime=float(info["now"] - info["start"]) if running and info["start"] else None,
        description=info.get("description", ""),
        exit_status=info.get("exitstatus") if info["statename"] in ("EXITED", "FATAL", "BACKOFF") else None,
        log=Path(info.get("stdout_logfile") or paths.program_log(name)),
        served=program.served if program else (),
    )


# --- up ---------------------------------------------------------------------------------------


def up(
    root: Path,
    profiles: Sequence[str] | None = None,
    *,
    served: Sequence[str] = (),
    host: bool = False,
    progress: Progress | None = None,
    timeout: float = START_TIMEOUT,
) -> MeshStatus:
    """Run a gateway for each of ``profiles`` (default: every profile not in ``served``) under
    the mesh supervisor, and one multiplex gateway serving ``served`` (none when empty); a
    profile in both raises MeshUsage. ``host``: all of them forked from the one gateway host
    program (HostUnsupported where it cannot run), else a program each.

    Starts supervisord if it is not running, otherwise applies the new config to it (added
    programs start, removed ones stop). Waits, up to ``timeout``, until every program is RUNNING
    and its gateway answers ``ping``; raises GatewayStartFailed naming those that do not, with
    their log tails.
    """
    require_supervisor()
    paths = mesh_paths(root)
    if profiles is None:
        profiles = [p for p in homes.list_profiles(paths.root) if p not in served]
    if host:
        require_host()
    programs = mesh_programs(profiles, served, host=host)
    for profile in (*programs.profiles, *programs.served, *programs.hosted):
        homes.profile_home(profile, paths.root, must_exist=True)
    prepare(paths)
    with locked(paths.state, timeout=LOCK_TIMEOUT):
        write_config(paths, programs)
        daemon = live_daemon(paths, adopt=True)
        if daemon is None:
            # Gateways a killed supervisord left behind hold their endpoints: stop them first.
            stop_orphans(paths, leftover_gateways(paths))
            daemon = start_daemon(paths)
        else:
            _apply_config(paths)
            start_stopped(paths, programs.names)
    wait_running(paths, programs.names, timeout, progress)
    return _status(paths, daemon)


def _apply_config(paths: MeshPaths) -> None:
    """What ``supervisorctl update`` does, over XML-RPC: reload, then add/replace/remove groups."""
    try:
        added, changed, removed = call(paths, "supervisor.reloadConfig")[0]
        for name in [*changed, *removed]:
            stop_program(paths, name)
            call(paths, "supervisor.removeProcessGroup", name)
        for name in [*changed, *added]:
            call(paths, "supervisor.addProcessGroup", name)  # autostart starts it
    except xmlrpc.client.Fault as fault:
        raise failure("supervisord could not apply the mesh config", fault, config=str(paths.config)) from None


# --- down -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DownReport:
    supervisor: ProcessIdentity | None  # the supervisord that was stopped, if one ran
    programs: tuple[str, ...]  # gateway programs that were running under it
    orphans: tuple[int, ...]  # gateways of a dead supervisord, stopped by signal
    killed: tuple[int, ...]  # pids that did not stop in time and got SIGKILL

    def to_dict(self) -> dict[str, Any]:
        return {
            "supervisord": self.supervisor.to_dict() if self.supervisor else None,
            "programs": list(self.programs),
            "orphans": list(self.orphans),
            "killed": list(self.killed),
        }


def down(root: Path) -> DownReport:
    """Stop supervisord and every gateway it ran; return only once none of them is alive."""
    require_supervisor()
    paths = mesh_paths(root)
    if not paths.directory.is_dir():
        return DownReport(None, (), (), ())
    with locked(paths.state, timeout=LOCK_TIMEOUT):
        daemon = live_daemon(paths, adopt=False)
        children: dict[str, ProcessIdentity] = {}
        killed: list[int] = []
        if daemon is not None:
            children = _running_children(paths)
            try:
                call(paths, "supervisor.shutdown")
            except (SupervisorUnavailable, xmlrpc.client.Fault):
                send_signal(daemon, signal.SIGTERM, group=False)  # supervisord shuts down on SIGTERM too
            if not wait_for(lambda: not is_alive(daemon), DOWN_TIMEOUT):
                killed += kill(daemon, group=False)
        # supervisord kills its groups after stopwaitsecs; anything still here escaped that.
        for ident in children.values():
            if is_alive(ident):
                killed += kill(ident, group=True)
        orphans = leftover_gateways(paths)
        killed += stop_orphans(paths, orphans)
        paths.state.unlink(missing_ok=True)
        if paths.socket.parent != paths.directory:
            try:
                paths.socket.parent.rmdir()  # the /tmp fallback dir, once supervisord removed its socket
            except OSError:
                pass
    gateways = tuple(sorted(name for name in children if name != CONFIRM_TIMER))  # the timer stopped with them
    return DownReport(daemon, gateways, tuple(o.pid for o in orphans), tuple(killed))


def _running_children(paths: MeshPaths) -> dict[str, ProcessIdentity]:
    try:
        infos = process_infos(paths)
    except (SupervisorUnavailable, xmlrpc.client.Fault):
        return {}
    out: dict[str, ProcessIdentity] = {}
    for name, info in infos.items():
        ident = process_identity(info["pid"]) if info.get("pid") else None
        if ident is not None:
            out[name] = ident
    return out
