"""Restart-per-kind for launchd: every ``ai.hermes.gateway*`` job of the updating install.

Restarting only the invoking profile's job would leave its siblings on the code they
imported before the update, so the fleet is every job, user agent or system daemon, whose
plist runs the gateway with ``HERMES_HOME`` set to the root home (label
``ai.hermes.gateway``) or to ``<root>/profiles/<profile>`` (label ``ai.hermes.gateway-<profile>``).
Ownership is judged by that home, never by the label alone: a job of another install on
the same account is named and left alone.

Each job is drained first over its gateway's control socket; the gateway exits 75 and
launchd's KeepAlive starts it again, on the new code. Only when no fresh process answers in
time does ``launchctl kickstart -k`` restart the job, and a job whose gateway is not running
is kickstarted (or bootstrapped, when launchd has not loaded it) straight away. A restart is
done only when a fresh process answers with the expected code. Every job is handled on its
own thread, and whatever goes wrong with one is that job's outcome alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from services.updater.restart import base as restart  # the module, not its names: it imports this one in turn
from shared import homes
from shared.call_rules import NO_RETRY
from shared.errors import HermesError
from shared.gateways import ops
from shared.gateways.discovery import GatewayRecord
from shared.protocol import RemoteError
from shared.supervisors import Unit, launchd
from shared.supervisors.commands import command_failed
from shared.supervisors.scopes import SCOPES
from shared.sync_client import SyncClient

DRAIN_SECONDS = 30.0
# How long a fresh process has to come up and answer, after the drain and again after a kickstart.
COME_BACK_SECONDS = 60.0
POLL_INTERVAL = 0.2
STATUS_TIMEOUT = 2.0
MAX_PARALLEL = 8
# A gateway in one of these states is drained; any other is restarted by launchctl alone.
DRAINABLE = frozenset({ops.STARTING, ops.RUNNING, ops.DRAINING})

Skipped = tuple[str, str]


def fleet_units(
    root: Path, *, euid: int | None = None, agent_dirs: Mapping[str, Path] | None = None
) -> tuple[list[Unit], list[Unit], list[Skipped]]:
    """``(ours, foreign, skipped)``: the gateway jobs in the LaunchAgents and LaunchDaemons
    directories (``agent_dirs``, by scope) that are this install's, those that run another
    home, and ``(label, reason)`` for each job that cannot be judged or acted on (a directory
    that cannot be listed is named by its path). One job per profile: a second one for the
    same home is skipped, and so is a system job when this process is not root (``euid``)."""
    root = Path(root).absolute()
    euid = os.geteuid() if euid is None else euid
    directories = agent_dirs or {scope: launchd.unit_dir(scope) for scope in SCOPES}
    ours: dict[str, Unit] = {}
    foreign: list[Unit] = []
    skipped: list[Skipped] = []
    for scope in SCOPES:
        directory = directories[scope]
        try:
            jobs = launchd.gateway_jobs(directory)
        except OSError as exc:
            skipped.append((str(directory), f"{directory} cannot be listed: {exc.strerror or exc}"))
            continue
        for label, path in jobs:
            try:
                unit = launchd.job_unit(path, scope=scope)
            except launchd.PlistInvalid as exc:
                skipped.append((label, exc.message))
                continue
            if not is_ours(root, unit):
                foreign.append(unit)
            elif scope == "system" and euid != 0:
                skipped.append((label, f"{path} is a LaunchDaemon: restarting it needs root, this runs as uid {euid}"))
            elif unit.profile in ours:
                first = ours[unit.profile].path
                skipped.append((label, f"{path} runs the same home as {first}; only that job is restarted"))
            else:
                ours[unit.profile] = unit
    return list(ours.values()), foreign, skipped


def is_ours(root: Path, unit: Unit) -> bool:
    """Whether ``unit`` is a launchd job of the install at ``root``: its label names a profile
    and its home is that profile's home under ``root``."""
    if unit.kind != launchd.KIND or launchd.profile_of(unit.name) != unit.profile:
        return False
    expected = homes.profile_home(unit.profile, Path(root).absolute())
    return os.path.realpath(unit.home) == os.path.realpath(expected)


def restart_units(
    root: Path,
    units: list[Unit],
    live: Mapping[str, GatewayRecord],
    expected_sha: str | None,
    *,
    runner: launchd.Runner | None = None,
    uid: int | None = None,
) -> list[restart.RestartOutcome]:
    """Restart every job in ``units`` (``fleet_units``'s ours), each onto ``expected_sha``;
    ``live`` is the install's running gateways by profile. One outcome per unit, in order."""
    strangers = [unit.name for unit in units if not is_ours(root, unit)]
    if strangers:
        raise ValueError(f"not launchd jobs of the install at {root}: {', '.join(strangers)}")
    if not units:
        return []
    run = runner or launchd.run_launchctl
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(units))) as pool:
        return list(pool.map(lambda unit: _restart_one(unit, live.get(unit.profile), expected_sha, run, uid), units))


def _restart_one(
    unit: Unit, gateway: GatewayRecord | None, expected_sha: str | None, run: launchd.Runner, uid: int | None
) -> restart.RestartOutcome:
    """Never raises: whatever goes wrong with one job is that job's outcome."""
    drain = gateway is not None and gateway.state in DRAINABLE
    try:
        return _restart(unit, gateway, drain, expected_sha, run, uid)
    except Exception as exc:  # isolation: one job's fault must not stop the others
        reason = f"{launchd.service_target(unit, uid=uid)}: {type(exc).__name__}: {exc}"
        return _outcome(unit, gateway, "drain" if drain else "kickstart", None, False, reason)


def _restart(
    unit: Unit,
    gateway: GatewayRecord | None,
    drain: bool,
    expected_sha: str | None,
    run: launchd.Runner,
    uid: int | None,
) -> restart.RestartOutcome:
    target = launchd.service_target(unit, uid=uid)
    address = homes.endpoint(unit.home, ops.SERVICE, create=False).control
    old = (gateway.pid, gateway.start_time) if gateway is not None else None
    answer: dict[str, Any] = {}
    notes: list[str] = []
    if drain:
        try:
            with SyncClient(address, retry=NO_RETRY) as client:
                answer = client.call(ops.DRAIN, {"deadline": DRAIN_SECONDS}, timeout=DRAIN_SECONDS + 10)
        except RemoteError as exc:
            notes.append(f"the drain failed ({exc.code}: {exc.message})")
        new_pid, problem = _wait_for_fresh(address, old, expected_sha)
        if problem is None:
            return _outcome(unit, gateway, "drain", new_pid, True, _because(target, notes), answer)
        notes.append(f"after the drain {problem}")
    method = "kickstart"
    try:
        loaded = launchd.is_loaded(unit, runner=run, uid=uid)
        method = "kickstart" if loaded else "bootstrap"
        for argv in launchd.commands("restart", unit, loaded=loaded, uid=uid):
            result = run(argv)
            if result.returncode != 0:
                raise command_failed(argv, result)
    except HermesError as exc:
        return _outcome(unit, gateway, method, None, False, _because(target, [*notes, exc.message]), answer)
    new_pid, problem = _wait_for_fresh(address, old, expected_sha)
    if problem is not None:
        notes.append(f"after the {method} {problem}")
    return _outcome(unit, gateway, method, new_pid, problem is None, _because(target, notes), answer)


def _because(target: str, notes: list[str]) -> str | None:
    """The reason an outcome carries: what happened to the job on the way, if anything did."""
    return f"{target}: {'; '.join(notes)}" if notes else None


def _outcome(
    unit: Unit,
    gateway: GatewayRecord | None,
    method: str,
    new_pid: int | None,
    ok: bool,
    reason: str | None,
    answer: Mapping[str, Any] | None = None,
) -> restart.RestartOutcome:
    answer = answer or {}
    return restart.RestartOutcome(
        profile=unit.profile,
        supervisor=launchd.KIND,
        old_pid=gateway.pid if gateway is not None else 0,  # 0: no process was running
        new_pid=new_pid,
        method=method,
        ok=ok,
        reason=reason,
        finished=len(answer.get("finished", [])),
        cut=len(answer.get("cut", [])),
    )


def _wait_for_fresh(
    address: str, old: tuple[int, int | None] | None, expected_sha: str | None
) -> tuple[int | None, str | None]:
    """Poll until a process other than ``old`` answers as running on ``expected_sha``:
    ``(its pid, None)``; otherwise, once ``COME_BACK_SECONDS`` are up, the last pid that
    answered and why it is not the fresh one."""
    deadline = time.monotonic() + COME_BACK_SECONDS
    last: dict[str, Any] | None = None
    while True:
        remaining = deadline - time.monotonic()
        try:
            with SyncClient(address, retry=NO_RETRY) as client:
                last = client.call(ops.STATUS, timeout=max(0.1, min(STATUS_TIMEOUT, remaining)))
        except RemoteError:
            last = None
        fresh = bool(last) and (last.get("pid"), last.get("start_time")) != old
        if fresh and last.get("state") == ops.RUNNING and expected_sha in (None, last.get("code_sha")):
            return last.get("pid"), None
        if remaining <= 0:
            break
        time.sleep(min(POLL_INTERVAL, max(remaining, 0.0)))
    window = f"{COME_BACK_SECONDS:g}s"
    if not last:
        return None, f"no gateway answered within {window}"
    if not fresh:
        return None, f"the old process (pid {last.get('pid')}) was still {last.get('state')} after {window}"
    if last.get("state") != ops.RUNNING:
        return last.get("pid"), f"pid {last.get('pid')} was {last.get('state')} after {window}"
    return last.get("pid"), f"pid {last.get('pid')} came back on {str(last.get('code_sha'))[:12]}, not the new code"
