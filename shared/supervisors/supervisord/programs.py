"""Driving the gateway programs of a running supervisord: start, stop, and wait (bounded)
until they are RUNNING, reporting those that are not with their log tails."""

from __future__ import annotations

import time
import xmlrpc.client
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from shared.supervisors.errors import SupervisorFailed
from shared.supervisors.supervisord.config import EXPECTED_EXIT_CODES, STOP_WAIT_SECS
from shared.supervisors.supervisord.logs import log_tail
from shared.supervisors.supervisord.names import profile_of, unit_name
from shared.supervisors.supervisord.paths import MeshPaths, mesh_paths
from shared.supervisors.supervisord.rpc import call, failure, fault_code, process_infos
from shared.supervisors.supervisord.waits import POLL, wait_for

# How long a program may take to reach RUNNING: startsecs plus every retry's backoff, with room.
START_TIMEOUT = 30.0
STOP_TIMEOUT = STOP_WAIT_SECS + 10.0

Progress = Callable[[Mapping[str, str], float], None]


class GatewayStartFailed(SupervisorFailed):
    """Programs that did not reach RUNNING; ``detail["programs"]`` has each one's log tail."""


def start_stopped(paths: MeshPaths, names: Sequence[str]) -> None:
    infos = process_infos(paths)
    for name in names:
        if infos.get(name, {}).get("statename") in ("STOPPED", "EXITED", "FATAL"):
            start_program(paths, name)


def start_program(paths: MeshPaths, name: str) -> None:
    try:
        call(paths, "supervisor.startProcess", name, False)
    except xmlrpc.client.Fault as fault:
        if fault.faultCode != fault_code("ALREADY_STARTED"):
            raise failure(f"supervisord could not start {name}", fault, program=name) from None


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


def gave_up_on(root: Path, profile: str) -> str | None:
    """Why the mesh supervisor of the install at ``root`` will not start ``profile``'s gateway
    again (its retries are used up, or it exited with a code that means "do not restart");
    None while a start may still come, or while the supervisor cannot be asked."""
    try:
        info = process_infos(mesh_paths(root)).get(unit_name(profile)) or {}
    except Exception:  # the supervisor cannot be asked now: the gateway's own answer decides
        return None
    state = info.get("statename")
    if state == "FATAL" or (state == "EXITED" and info.get("exitstatus") in EXPECTED_EXIT_CODES):
        return f"supervisord gave up on it ({state}: {info.get('spawnerr') or info.get('description') or 'no detail'})"
    return None


def wait_running(paths: MeshPaths, names: Sequence[str], timeout: float, progress: Progress | None) -> None:
    started = time.monotonic()
    deadline = started + timeout
    while True:
        infos = process_infos(paths)
        states = {name: infos.get(name, {}).get("statename", "NOT_LOADED") for name in names}
        if progress is not None:
            progress(states, time.monotonic() - started)
        # FATAL is final (retries used up); anything else may still become RUNNING.
        settled = all(s in ("RUNNING", "FATAL") for s in states.values())
        if all(s == "RUNNING" for s in states.values()):
            return
        if settled or time.monotonic() >= deadline:
            failed = [n for n, s in states.items() if s != "RUNNING"]
            raise _start_failure(paths, failed, states, infos, timeout)
        time.sleep(POLL)


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
        lines.append(f"  {name}: {states[name]} {description}\n  last lines of {log}:\n{last}")
    return GatewayStartFailed(
        f"{len(failed)} gateway(s) did not reach RUNNING within {timeout:g}s:\n" + "\n".join(lines),
        detail={"programs": details},
    )
