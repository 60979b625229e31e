"""Restart-per-kind: every gateway of the install onto the new code, drain first.

A supervised gateway (supervisord, systemd, launchd) is drained over its control socket and
exits 75; its supervisor starts a fresh process of the new code. An unmanaged gateway has
no one to start it again, so it drains and re-executes itself into the tree on disk. Either
way the restart is done only when a process answers with the expected code; each gateway
is handled on its own thread, so one gateway's failure never holds up or fails another.

A gateway under the mesh supervisor whose control socket does not answer is restarted
bluntly through supervisord instead (a hung process cannot drain on request).

A supervisor kind whose units can be listed (systemd) has a module of its own that finds
every unit of the install, its gateway running or down, and restarts them through that
supervisor; a gateway no such unit claims is restarted here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from shared import homes
from shared.call_rules import NO_RETRY
from shared.gateways import ops
from shared.gateways.discovery import GatewayRecord, discover
from shared.protocol import Code, RemoteError
from shared.sync_client import SyncClient

DRAIN_SECONDS = 30.0
# How long a fresh process has to come up and answer after the old one left.
COME_BACK_SECONDS = 60.0
POLL_INTERVAL = 0.2
MAX_PARALLEL = 8
MANAGED = frozenset({"supervisord", "systemd", "launchd"})
# A gateway that does not answer a status call this soon is not asked to drain: it is hung.
PROBE_SECONDS = 5.0
UNANSWERED = frozenset({Code.TIMEOUT, Code.UNAVAILABLE, Code.CONNECTION_RESET})


@dataclass(frozen=True)
class RestartOutcome:
    profile: str
    supervisor: str
    old_pid: int  # 0: nothing was running
    new_pid: int | None
    # "drain" (over the control socket; a supervisor starts it again), "signal" (SIGUSR1
    # through the supervisor, when the socket did not answer), "reexec", "start" (nothing
    # was running) or "skip" (left alone: ``reason`` says why)
    method: str
    ok: bool
    reason: str | None = None
    finished: int = 0  # turns that finished during the drain
    cut: int = 0
    unit: str | None = None  # the supervisor's unit, when a unit module restarted it
    scope: str | None = None  # that unit's manager: "user" or "system"
    fallback: str | None = None  # "blunt": reset and restarted through the supervisor
    budget: float | None = None  # seconds the supervisor's client was given for that restart
    note: str | None = None  # what happened on the way, even when it ended well

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unit_kinds() -> tuple[tuple[str, ModuleType], ...]:
    """The supervisor kinds with a unit module: ``fleet_units(root)`` → (ours, foreign, skipped)
    and ``restart_units(root, units, live, expected_sha)`` → outcomes.

    Imported here rather than at the top because those modules build on this one."""
    from services.updater.restart import launchd, systemd

    return (("systemd", systemd), ("launchd", launchd))


def restart_fleet(root: Path, expected_sha: str | None, *, only: Collection[str] | None = None) -> list[RestartOutcome]:
    """Restart every gateway of the install at ``root`` (of the profiles ``only`` names, when
    given) and start its units whose gateway is down; one outcome per gateway or unit,
    default profile first.

    A gateway this process descends from (an update started by one of its tools) is restarted
    last, once every other one is done: draining it first would wait on the very turn that
    runs the update."""
    wanted: Callable[[str], bool] = (lambda profile: True) if only is None else set(only).__contains__
    gateways = [
        g
        for g in discover(root, scan=False)
        if g.state in (ops.RUNNING, ops.DRAINING, ops.STARTING) and wanted(g.profile)
    ]
    by_profile = {g.profile: g for g in gateways}
    parents = _ancestor_profiles(gateways)
    first: list[Callable[[], list[RestartOutcome]]] = []
    last: list[Callable[[], list[RestartOutcome]]] = []
    outcomes: list[RestartOutcome] = []
    claimed: set[str] = set()
    for kind, module in unit_kinds():
        ours, _foreign, skipped = module.fleet_units(root)
        # A unit takes over its profile's gateway only if that gateway runs under it (or none
        # runs at all): a profile served by another supervisor is restarted through that one.
        units = [
            u
            for u in ours
            if wanted(u.profile) and u.profile not in claimed and _runs_under(kind, by_profile.get(u.profile))
        ]
        claimed.update(unit.profile for unit in units)
        for batch, jobs in ((units_without(units, parents), first), ([u for u in units if u.profile in parents], last)):
            if batch:
                live = {unit.profile: by_profile[unit.profile] for unit in batch if unit.profile in by_profile}
                jobs.append(partial(module.restart_units, root, batch, live, expected_sha))
        # A unit of ours the kind could not act on (no privilege for its scope, say) keeps its
        # gateway: draining a gateway whose supervisor we cannot drive could leave it down.
        for name, reason in skipped:
            profile = _profile_of(kind, name)
            gateway = by_profile.get(profile) if profile else None
            if gateway is not None and gateway.profile not in claimed and gateway.supervisor == kind:
                claimed.add(gateway.profile)
                outcomes.append(
                    RestartOutcome(
                        gateway.profile, kind, gateway.pid, gateway.pid, "skip", False, f"{name}: {reason}", unit=name
                    )
                )
    for gateway in gateways:
        if gateway.profile not in claimed:
            (last if gateway.profile in parents else first).append(
                partial(_restart_as_list, root, gateway, expected_sha)
            )
    outcomes += _run_all(first) + _run_all(last)
    return sorted(outcomes, key=lambda o: (o.profile != homes.DEFAULT_PROFILE, o.profile))


def units_without(units: list[Any], profiles: set[str]) -> list[Any]:
    return [u for u in units if u.profile not in profiles]


def _run_all(jobs: list[Callable[[], list[RestartOutcome]]]) -> list[RestartOutcome]:
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(jobs))) as pool:
        return [outcome for done in pool.map(lambda job: job(), jobs) for outcome in done]


def _ancestor_profiles(gateways: list[GatewayRecord]) -> set[str]:
    """Profiles whose live gateway is an ancestor of this process."""
    import psutil

    try:
        ancestors = {p.pid for p in psutil.Process().parents()}
    except psutil.Error:
        return set()
    return {g.profile for g in gateways if g.pid in ancestors}


def _profile_of(kind: str, name: str) -> str | None:
    from shared.supervisors import launchd, systemd

    return {"systemd": systemd.profile_of, "launchd": launchd.profile_of}[kind](name)


def _runs_under(kind: str, gateway: GatewayRecord | None) -> bool:
    return gateway is None or gateway.supervisor == kind


def _restart_as_list(root: Path, gateway: GatewayRecord, expected_sha: str | None) -> list[RestartOutcome]:
    return [restart_one(root, gateway, expected_sha)]


def restart_one(root: Path, gateway: GatewayRecord, expected_sha: str | None) -> RestartOutcome:
    """Never raises: whatever goes wrong with one gateway is that gateway's outcome."""
    try:
        return _restart(root, gateway, expected_sha)
    except Exception as exc:  # isolation: one gateway's fault must not stop the others
        method = "drain" if gateway.supervisor in MANAGED else "reexec"
        return _failed(gateway, method, f"{type(exc).__name__}: {exc}")


def _restart(root: Path, gateway: GatewayRecord, expected_sha: str | None) -> RestartOutcome:
    managed = gateway.supervisor in MANAGED
    method = "drain" if managed else "reexec"
    address = homes.endpoint(gateway.home, ops.SERVICE, create=False).control
    try:
        with SyncClient(address, retry=NO_RETRY) as client:
            client.call(ops.STATUS, timeout=PROBE_SECONDS)
    except RemoteError as exc:
        if gateway.supervisor == "supervisord" and exc.code in UNANSWERED:
            return _through_supervisord(
                root, gateway, address, expected_sha, f"its control socket did not answer ({exc.code})"
            )
        return _failed(gateway, method, f"its control socket did not answer: {exc.code}: {exc.message}")
    try:
        with SyncClient(address, retry=NO_RETRY) as client:
            if managed:
                answer = client.call(ops.DRAIN, {"deadline": DRAIN_SECONDS}, timeout=DRAIN_SECONDS + 10)
            else:
                answer = client.call(ops.REEXEC, {"deadline": DRAIN_SECONDS}, timeout=DRAIN_SECONDS + 10)
    except RemoteError as exc:
        return _failed(gateway, method, f"{method} was refused: {exc.code}: {exc.message}")
    gave_up = partial(_supervisord_gave_up, root, gateway.profile) if gateway.supervisor == "supervisord" else None
    new_pid, reason = _wait_for_fresh(gateway, address, expected_sha, reexec=not managed, gave_up=gave_up)
    return RestartOutcome(
        profile=gateway.profile,
        supervisor=gateway.supervisor,
        old_pid=gateway.pid,
        new_pid=new_pid,
        method=method,
        ok=reason is None,
        reason=reason,
        finished=len(answer.get("finished", [])),
        cut=len(answer.get("cut", [])),
    )


def _through_supervisord(
    root: Path, gateway: GatewayRecord, address: str, expected_sha: str | None, why: str
) -> RestartOutcome:
    """A gateway the mesh supervisor runs that cannot be asked to drain: supervisord stops it
    (SIGTERM, the gateway's own drain, then SIGKILL after its stop wait) and starts the new code."""
    from shared.errors import HermesError
    from shared.supervisors.supervisord import kind

    try:
        unit = kind.find(gateway.profile, gateway.home)
        if unit is None:
            return _failed(gateway, "drain", f"{why}, and no program of the mesh supervisor runs it")
        kind.restart(unit)
    except HermesError as exc:
        return _failed(gateway, "drain", f"{why}; supervisord could not restart it: {exc.message}")
    gave_up = partial(_supervisord_gave_up, root, gateway.profile)
    new_pid, reason = _wait_for_fresh(gateway, address, expected_sha, reexec=False, gave_up=gave_up)
    return RestartOutcome(
        gateway.profile,
        gateway.supervisor,
        gateway.pid,
        new_pid,
        "drain",
        reason is None,
        reason,
        unit=unit.name,
        fallback="blunt",
        note=f"{why}; restarted through supervisord",
    )


def _failed(gateway: GatewayRecord, method: str, reason: str) -> RestartOutcome:
    return RestartOutcome(gateway.profile, gateway.supervisor, gateway.pid, None, method, False, reason)


def _supervisord_gave_up(root: Path, profile: str) -> str | None:
    """Why the mesh supervisor will not start ``profile``'s gateway again (its retries are used
    up, or it exited with a code that means "do not restart"); None while a start may come."""
    from shared.supervisors.supervisord.config import EXPECTED_EXIT_CODES
    from shared.supervisors.supervisord.names import unit_name
    from shared.supervisors.supervisord.paths import mesh_paths
    from shared.supervisors.supervisord.rpc import process_infos

    try:
        info = process_infos(mesh_paths(root)).get(unit_name(profile)) or {}
    except Exception:  # the supervisor cannot be asked now: the gateway's own answer decides
        return None
    state = info.get("statename")
    if state == "FATAL" or (state == "EXITED" and info.get("exitstatus") in EXPECTED_EXIT_CODES):
        return f"supervisord gave up on it ({state}: {info.get('spawnerr') or info.get('description') or 'no detail'})"
    return None


def _wait_for_fresh(
    gateway: GatewayRecord,
    address: str,
    expected_sha: str | None,
    *,
    reexec: bool,
    gave_up: Callable[[], str | None] | None = None,
) -> tuple[int | None, str | None]:
    """Poll until a gateway that is not the old process (or, after a re-exec, the same pid
    with the new code) answers as running; the reason it did not, otherwise. ``gave_up``
    ends the wait early once its supervisor will not start it again."""
    deadline = time.monotonic() + COME_BACK_SECONDS
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        why = gave_up() if gave_up is not None and last is None else None
        if why is not None:
            return None, why
        try:
            with SyncClient(address, retry=NO_RETRY) as client:
                last = client.call(ops.STATUS, timeout=2.0)
        except RemoteError:
            last = None
        if last and last.get("state") == ops.RUNNING:
            fresh = (last.get("start_time"), last.get("pid")) != (gateway.start_time, gateway.pid)
            if reexec:
                fresh = last.get("code_sha") == expected_sha or fresh
            if fresh:
                if expected_sha and last.get("code_sha") != expected_sha:
                    return last.get("pid"), f"came back on {str(last.get('code_sha'))[:12]}, not the new code"
                return last.get("pid"), None
        time.sleep(POLL_INTERVAL)
    if last is None:
        return None, f"no gateway answered within {COME_BACK_SECONDS:g}s of the restart"
    return last.get("pid"), f"still {last.get('state')} on the old process after {COME_BACK_SECONDS:g}s"
