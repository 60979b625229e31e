"""Driving the gateway programs of a running supervisord: start, stop, and wait (bounded)
until they are ready, reporting those that are not with their log tails; and start a
drained gateway's program the moment its process has ended (``respawn`` says why).

Ready means RUNNING and answering ``ping`` on the control socket (a multiplex program: on the
socket of every profile it serves that has a home): supervisord calls a program RUNNING once
it has lived ``startsecs``, which says nothing of its socket."""

from __future__ import annotations

import time
import xmlrpc.client
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fleet.supervisors.errors import SupervisorFailed, SupervisorTimeout
from fleet.supervisors.supervisord import respawn
from fleet.supervisors.supervisord.config import STOP_WAIT_SECS, ConfiguredProgram, configured_programs
from fleet.supervisors.supervisord.logs import log_tail
from fleet.supervisors.supervisord.names import profile_of
from fleet.supervisors.supervisord.paths import MeshPaths, mesh_paths
from fleet.supervisors.supervisord.rpc import call, failure, fault_code, process_infos
from fleet.supervisors.supervisord.waits import POLL, wait_for
from shared import homes
from shared.errors import HermesError
from shared.gateways import ops
from shared.identity import ProcessIdentity, is_alive
from shared.transport import NO_RETRY, connect

# How long a program may take to be ready: startsecs plus every retry's backoff, with room.
START_TIMEOUT = 30.0
# One ping per program per poll, short: a gateway not yet bound must not hold up the others.
PING_TIMEOUT = 1.0
STOP_TIMEOUT = STOP_WAIT_SECS + 10.0
# Between two looks at a drained process that has yet to end: /proc reads, no call to supervisord.
EXIT_POLL = 0.01

Progress = Callable[[Mapping[str, str], float], None]


class GatewayStartFailed(SupervisorFailed):
    """Programs that did not become ready; ``detail["programs"]`` has each one's log tail."""


def start_stopped(paths: MeshPaths, names: Sequence[str]) -> None:
    infos = process_infos(paths)
    for name in names:
        if infos.get(name, {}).get("statename") in ("STOPPED", "EXITED", "FATAL"):
            start_program(paths, name)


def start_program(paths: MeshPaths, name: str) -> bool:
    """Ask supervisord to start ``name``: True when it did, False when it was started already."""
    try:
        call(paths, "supervisor.startProcess", name, False)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode == fault_code("ALREADY_STARTED"):
            return False
        raise failure(f"supervisord could not start {name}", fault, program=name) from None
    return True


def stop_program(paths: MeshPaths, name: str) -> None:
    """Stop ``name`` and wait (bounded) until supervisord has it stopped; not loaded is stopped."""
    try:
        call(paths, "supervisor.stopProcess", name, False)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode == fault_code("BAD_NAME"):
            return
        if fault.faultCode != fault_code("NOT_RUNNING"):
            raise failure(f"supervisord could not stop {name}", fault, program=name) from None
    done = wait_for(
        lambda: process_infos(paths).get(name, {}).get("statename") in (None, "STOPPED", "EXITED", "FATAL"),
        STOP_TIMEOUT,
    )
    if not done:
        raise SupervisorFailed(f"{name} did not stop within {STOP_TIMEOUT:g}s", detail={"program": name})


def gave_up_on(root: Path, name: str) -> str | None:
    """Why the mesh supervisor of the install at ``root`` will not start program ``name`` (a
    gateway's) again (its retries are used up, or it exited with a code
    that means "do not restart"); None while a start may still come, or while the supervisor
    cannot be asked."""
    try:
        info = process_infos(mesh_paths(root)).get(name) or {}
    except Exception:  # the supervisor cannot be asked now: the gateway's own answer decides
        return None
    return respawn.gave_up(info)


def start_drained(root: Path, name: str, old: ProcessIdentity, timeout: float) -> bool:
    """Once ``old``, the drained process of program ``name``, has ended, have the mesh
    supervisor of the install at ``root`` start the program at once rather than at its next
    wake-up. True: supervisord started it when asked; False: it had started it already (its
    ``autorestart``, woken by the ask). Raises SupervisorFailed when it will not be started,
    SupervisorTimeout when ``old`` has not ended or no start came within ``timeout``, and
    SupervisorUnavailable when supervisord does not answer."""
    paths = mesh_paths(root)
    deadline = time.monotonic() + timeout
    while is_alive(old):  # no call meanwhile: each one would wake supervisord for nothing
        if time.monotonic() >= deadline:
            raise SupervisorTimeout(
                f"the drained process of {name} did not end within {timeout:g}s", detail={"program": name}
            )
        time.sleep(EXIT_POLL)
    step = respawn.Step(respawn.START)
    while True:
        if step.action == respawn.START and start_program(paths, name):
            return True
        step = respawn.after_exit(_info(paths, name), old.pid)
        if step.action == respawn.STARTED:
            return False
        if step.action == respawn.FAILED:
            raise SupervisorFailed(str(step.reason), detail={"program": name})
        if time.monotonic() >= deadline:
            raise SupervisorTimeout(f"{name} was not started within {timeout:g}s", detail={"program": name})
        time.sleep(POLL)


def _info(paths: MeshPaths, name: str) -> dict[str, Any] | None:
    try:
        return call(paths, "supervisor.getProcessInfo", name)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode == fault_code("BAD_NAME"):
            return None
        raise failure(f"supervisord could not report {name}", fault, program=name) from None


def _answers(paths: MeshPaths, program: ConfiguredProgram | None) -> bool:
    """Whether the gateway of ``program`` answers ``ping`` on its control socket now (a
    multiplex one on every served profile's that has a home: one without is skipped by it)."""
    served = [p for p in program.profiles if homes.profile_home(p, paths.root).is_dir()] if program else []
    return bool(served) and all(answers_ping(homes.profile_home(p, paths.root)) for p in served)


def answers_ping(home: Path) -> bool:
    try:
        endpoint = homes.endpoint(home, ops.SERVICE, create=False)
        with connect(endpoint, retry=NO_RETRY) as client:
            client.call(ops.PING, timeout=PING_TIMEOUT)
    except HermesError:  # not bound yet, timed out, or its run dir refused: not ready
        return False
    return True


def wait_running(paths: MeshPaths, names: Sequence[str], timeout: float, progress: Progress | None) -> None:
    """Wait (bounded) until every program is RUNNING and its gateway answers ``ping``."""
    started = time.monotonic()
    deadline = started + timeout
    answered: set[str] = set()
    configured = configured_programs(paths)  # written before the wait: read once
    while True:
        infos = process_infos(paths)
        states = {name: infos.get(name, {}).get("statename", "NOT_LOADED") for name in names}
        for name, state in states.items():
            if state != "RUNNING":
                answered.discard(name)  # restarted: the new process must answer too
            elif name not in answered and _answers(paths, configured.get(name)):
                answered.add(name)
        if progress is not None:
            progress(
                {name: _shown(state, name in answered) for name, state in states.items()}, time.monotonic() - started
            )
        if answered == set(names):
            return
        # A program supervisord gave up on is final; anything else may still become ready.
        settled = all(name in answered or respawn.gave_up(infos.get(name, {})) for name in states)
        if settled or time.monotonic() >= deadline:
            failed = [n for n in names if n not in answered]
            raise _start_failure(paths, failed, states, infos, timeout)
        time.sleep(POLL)


def _shown(state: str, answered: bool) -> str:
    if state != "RUNNING":
        return state
    return "RUNNING, answering" if answered else "RUNNING, not answering yet"


def _start_failure(
    paths: MeshPaths, failed: list[str], states: Mapping[str, str], infos: Mapping[str, Any], timeout: float
) -> GatewayStartFailed:
    details = []
    lines = []
    for name in failed:
        log = paths.program_log(name)
        tail = log_tail(log)
        description = infos.get(name, {}).get("description", "")
        details.append(
            {
                "name": name,
                "profile": profile_of(name),
                "state": states[name],
                "description": description,
                "log": str(log),
                "log_tail": tail,
            }
        )
        last = "\n".join("    " + line for line in tail.splitlines()[-10:]) or "    (log is empty)"
        state = _shown(states[name], False)
        lines.append(f"  {name}: {state} {description}\n  last lines of {log}:\n{last}")
    return GatewayStartFailed(
        f"{len(failed)} gateway(s) did not start and answer ping within {timeout:g}s"
        f" ({', '.join(failed)}):\n" + "\n".join(lines),
        detail={"programs": details},
    )
