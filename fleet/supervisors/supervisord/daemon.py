"""The mesh's supervisord process: its recorded identity, its start, whether it lives, and
the gateways a dead one left behind.

``<root>/mesh/supervisord.json`` records the daemon's identity (pid + start time), so a pid
left by a dead supervisord is recognised and never trusted. Its lock serialises every
check-and-start, so two ``hermes mesh up`` cannot start two daemons.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import xmlrpc.client
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet.supervisors.errors import SupervisorFailed, SupervisorUnavailable
from fleet.supervisors.host import SERVICE as HOST_SERVICE
from fleet.supervisors.supervisord.config import STOP_WAIT_SECS
from fleet.supervisors.supervisord.logs import LOG_TAIL_BYTES, log_tail
from fleet.supervisors.supervisord.names import HOST_PROGRAM, MULTIPLEX_PROGRAM, unit_name
from fleet.supervisors.supervisord.paths import MeshPaths
from fleet.supervisors.supervisord.rpc import call
from fleet.supervisors.supervisord.waits import wait_for
from shared import homes
from shared.files import StateFileCorrupt, read_json, write_json_atomic
from shared.identity import ProcessIdentity, is_alive, process_identity
from shared.locks import probe
from shared.process_signals import signal_identified

DAEMON_START_TIMEOUT = 15.0
DOWN_TIMEOUT = STOP_WAIT_SECS + 15.0
# A check-and-start may wait behind a `down`, which waits for every gateway to drain.
LOCK_TIMEOUT = DOWN_TIMEOUT + 15.0
PROBE_TIMEOUT = 2.0


def require_supervisor() -> None:
    # A declared dependency, but checked: a broken environment gets a typed error, not a traceback.
    try:
        import supervisor  # noqa: F401 (imported only to see that it can be)
    except ImportError:
        raise SupervisorUnavailable(
            "the supervisord kind needs the `supervisor` package: pip install supervisor",
            detail={"missing": "supervisor"},
        ) from None


# --- the daemon's identity --------------------------------------------------------------------


def recorded(paths: MeshPaths) -> dict[str, Any] | None:
    try:
        record = read_json(paths.state, default=None)
        if record is None:
            return None
        ProcessIdentity.from_dict(record)
        return record
    except (StateFileCorrupt, ValueError):
        return None  # a torn or foreign record names nobody; it is replaced on the next start


def _record(paths: MeshPaths, ident: ProcessIdentity) -> None:
    write_json_atomic(
        paths.state,
        {
            **ident.to_dict(),
            "config": str(paths.config),
            "socket": str(paths.socket),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )


def _socket_pid(paths: MeshPaths) -> ProcessIdentity | None:
    """The live supervisord answering on the mesh socket, if one does."""
    if not paths.socket.exists():
        return None
    try:
        pid = call(paths, "supervisor.getPID", timeout=PROBE_TIMEOUT)
    except (SupervisorUnavailable, xmlrpc.client.Fault):
        return None
    ident = process_identity(pid) if isinstance(pid, int) else None
    return ident if ident is not None and is_alive(ident) else None


def live_daemon(paths: MeshPaths, *, adopt: bool) -> ProcessIdentity | None:
    """The running mesh supervisord: the recorded identity if that very process lives, else
    whoever answers on the socket (its record was lost); ``adopt`` records the latter."""
    record = recorded(paths)
    if record is not None:
        ident = ProcessIdentity.from_dict(record)
        if is_alive(ident):
            return ident
    found = _socket_pid(paths)
    if found is not None and adopt:
        _record(paths, found)
    return found


# --- starting it ------------------------------------------------------------------------------


def _supervisord_argv(config: Path) -> list[str]:
    script = Path(sys.executable).with_name("supervisord")
    if os.access(script, os.X_OK):
        return [str(script), "-c", str(config)]
    return [sys.executable, "-m", "supervisor.supervisord", "-c", str(config)]


def start_daemon(paths: MeshPaths) -> ProcessIdentity:
    """Start supervisord (it daemonizes: the process we run exits once the socket is bound)."""
    # A file, not a pipe: the daemon inherits our stdout until it detaches, and a pipe would
    # keep this call waiting on it.
    with tempfile.TemporaryFile() as out:
        try:
            done = subprocess.run(
                _supervisord_argv(paths.config),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=paths.directory,
                timeout=DAEMON_START_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise SupervisorFailed(
                f"supervisord did not daemonize within {DAEMON_START_TIMEOUT:g}s", detail=_log_detail(paths)
            ) from None
        out.seek(0)
        said = out.read()[-LOG_TAIL_BYTES:].decode("utf-8", "replace").strip()
    if done.returncode != 0:
        raise SupervisorFailed(
            f"supervisord did not start (exit {done.returncode}): {said or 'no output'}",
            detail={"exit_code": done.returncode, "output": said, **_log_detail(paths)},
        )
    ident = wait_for(lambda: _socket_pid(paths), DAEMON_START_TIMEOUT)
    if ident is None:
        raise SupervisorFailed(f"supervisord started but does not answer on {paths.socket}", detail=_log_detail(paths))
    _record(paths, ident)
    return ident


def _log_detail(paths: MeshPaths) -> dict[str, str]:
    log = paths.logs / "supervisord.log"
    return {"log": str(log), "log_tail": log_tail(log)}


# --- gateways a dead supervisord left, and signals --------------------------------------------


def leftover_gateways(paths: MeshPaths) -> list[ProcessIdentity]:
    """Live gateways that a supervisord on this mesh's socket started, found by their endpoint
    locks in every profile home (never by a process scan): supervisord tells each child its
    server url and program name, so a gateway of any other supervisor is never picked. The
    multiplex gateway holds the lock of every profile it serves: it is listed once. The gateway
    host (its lock is the root home's) comes first: stopped, it stops the gateways it forked,
    which would otherwise be started again by it."""
    found: list[ProcessIdentity] = []
    locks = [(HOST_PROGRAM, paths.root, HOST_SERVICE)]
    for profile in homes.list_profiles(paths.root):
        locks.append((unit_name(profile), homes.profile_home(profile, paths.root), "gateway"))
    for name, home, service in locks:
        try:
            lock = probe(homes.endpoint(home, service, create=False).lock_path)
        except (homes.EndpointPathTooLong, homes.UnsafeRunDir, OSError):
            continue  # a run dir missing, broken or not private holds no gateway of ours (none binds there)
        holder = lock.holder if lock.held else None
        if holder is None or not is_alive(holder):
            continue
        if holder in found:
            continue
        env = _environ(holder.pid)
        program = env.get("SUPERVISOR_PROCESS_NAME")
        if env.get("SUPERVISOR_SERVER_URL") == paths.server_url and program in (name, MULTIPLEX_PROGRAM, HOST_PROGRAM):
            found.append(holder)
    return found


def _environ(pid: int) -> dict[str, str]:
    import psutil

    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return {}


def stop_orphans(paths: MeshPaths, orphans: Sequence[ProcessIdentity]) -> list[int]:
    """SIGTERM (the gateway drains), wait as supervisord would, then SIGKILL; returns the killed."""
    for ident in orphans:
        send_signal(ident, signal.SIGTERM, group=True)
    wait_for(lambda: not any(is_alive(i) for i in orphans), STOP_WAIT_SECS)
    killed: list[int] = []
    for ident in orphans:
        if is_alive(ident):
            killed += kill(ident, group=True)
    return killed


def kill(ident: ProcessIdentity, *, group: bool) -> list[int]:
    send_signal(ident, signal.SIGKILL, group=group)
    wait_for(lambda: not is_alive(ident), 5.0)
    return [ident.pid]


def send_signal(ident: ProcessIdentity, signum: int, *, group: bool) -> None:
    # Through the kernel's handle for that very process: a recycled pid is never signalled.
    signal_identified(ident, signum, group=group)  # supervisord made each program its group's leader
