"""Restarting the install's systemd units: drain first, then a budgeted blunt restart.

The units are found in both managers (user and system) and judged by the home they run on:
``hermes-gateway.service`` and ``hermes-gateway-<profile>.service`` are ours only when their
``HERMES_HOME`` is this install's home of the profile the name says. Any other is a sibling
install's (or a scratch home's): named, never drained, never restarted.

A unit's gateway is drained first, over its control socket or, when the socket does not
answer, with SIGUSR1 through systemd; it exits 75 and the unit's ``RestartForceExitStatus``
makes systemd start the new code. Only when no fresh main process answers with the new code
in time is the unit reset and restarted bluntly, and the ``systemctl`` client waits for the
unit's own stop and start limits (``systemd_budget``). A client that gives up waiting does not
cancel systemd's job, so the unit is then checked, not judged failed or done.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from services.updater.restart.base import COME_BACK_SECONDS, DRAIN_SECONDS, MAX_PARALLEL, POLL_INTERVAL, RestartOutcome
from services.updater.restart.systemd_budget import restart_budget
from shared import homes
from shared.call_rules import NO_RETRY
from shared.errors import HermesError
from shared.gateways import ops
from shared.gateways.discovery import GatewayRecord
from shared.protocol import RemoteError
from shared.supervisors import Unit, systemd
from shared.supervisors.errors import SupervisorFailed, SupervisorTimeout
from shared.supervisors.scopes import SCOPES
from shared.sync_client import SyncClient

KIND = systemd.KIND
PROPERTIES = ("LoadState", "ActiveState", "MainPID", "TimeoutStopUSec", "TimeoutStartUSec", "Environment")
# How long systemd gets to start a drained gateway again by itself before the blunt restart.
AUTO_RESTART_SECONDS = COME_BACK_SECONDS
# Unit states out of which systemd starts nothing by itself.
SETTLED_DOWN = ("failed", "inactive")
CLIENT_GAVE_UP = "systemctl gave up waiting; the restart job may still be running"


def fleet_units(root: Path) -> tuple[list[Unit], list[Unit], list[tuple[str, str]]]:
    """Every gateway unit of both managers as (ours, foreign, skipped): skipped names a unit
    that could not be judged, or a manager that could not be asked (no systemd here, no user
    bus), with the reason. Never raises."""
    root = Path(root).absolute()
    ours: list[Unit] = []
    foreign: list[Unit] = []
    skipped: list[tuple[str, str]] = []
    for scope in SCOPES:
        try:
            names = systemd.list_units(scope)
        except (HermesError, OSError) as exc:
            skipped.append((f"systemd {scope} manager", _message(exc)))
            continue
        for name, profile in ((name, systemd.profile_of(name)) for name in names):
            if profile is None:
                continue  # matched the pattern without being a gateway unit (hermes-gatewayd)
            try:
                unit = _shown_unit(scope, name, profile)
            except (HermesError, OSError) as exc:
                skipped.append((name, _message(exc)))
                continue
            if unit is None:
                skipped.append((name, "its environment sets no HERMES_HOME, so whose it is cannot be told"))
            else:
                (ours if belongs(unit, root) else foreign).append(unit)
    return ours, foreign, skipped


def _shown_unit(scope: str, name: str, profile: str) -> Unit | None:
    shown = systemd.show(scope, name, PROPERTIES)
    home = systemd.parse_environment(shown.get("Environment", "")).get("HERMES_HOME")
    return Unit(kind=KIND, name=name, profile=profile, home=Path(home), scope=scope) if home else None


def belongs(unit: Unit, root: Path) -> bool:
    """Whether ``unit`` runs on the home that the install at ``root`` has for the profile the
    unit's name says (the root itself for the default profile)."""
    expected = homes.profile_home(unit.profile, Path(root).absolute())
    return unit.home.is_absolute() and os.path.realpath(unit.home) == os.path.realpath(expected)


def restart_units(
    root: Path,
    units: list[Unit],
    live: Mapping[str, GatewayRecord],
    expected_sha: str | None,
    *,
    euid: int | None = None,
) -> list[RestartOutcome]:
    """Restart ``units`` (ours, from ``fleet_units``) concurrently; ``live`` maps a profile to its
    running gateway. One outcome per unit; one unit's failure is its own."""
    if not units:
        return []
    euid = os.geteuid() if euid is None else euid
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(units))) as pool:
        return list(pool.map(lambda u: restart_unit(root, u, live.get(u.profile), expected_sha, euid=euid), units))


def restart_unit(
    root: Path, unit: Unit, gateway: GatewayRecord | None, expected_sha: str | None, *, euid: int
) -> RestartOutcome:
    """Never raises: whatever goes wrong with one unit is that unit's outcome."""
    outcome = RestartOutcome(
        unit.profile, KIND, gateway.pid if gateway else 0, None, "drain", False, unit=unit.name, scope=unit.scope
    )
    try:
        if not belongs(unit, root):
            home = f"it runs on {unit.home}, which is not this install's home for {unit.profile}"
            return replace(outcome, method="skip", reason=home)
        if unit.scope == "system" and euid != 0:
            # Draining a gateway whose unit cannot then be restarted would leave it down.
            reason = "a system-scope unit needs root to restart; left running, not drained"
            return replace(outcome, method="skip", reason=reason)
        return _restart(unit, outcome, expected_sha)
    except Exception as exc:  # isolation: one unit's fault must not stop the others
        return replace(outcome, reason=f"{type(exc).__name__}: {_message(exc)}")


def _restart(unit: Unit, outcome: RestartOutcome, expected_sha: str | None) -> RestartOutcome:
    main_pid = _main_pid(_show(unit))
    old_pid = main_pid or outcome.old_pid
    outcome = replace(outcome, old_pid=old_pid)
    if not old_pid:
        return _blunt(unit, replace(outcome, method="start"), expected_sha)
    method, answer, note = _drain(unit, main_pid)
    outcome = replace(
        outcome,
        method=method,
        finished=len(answer.get("finished", [])),
        cut=len(answer.get("cut", [])),
        note=note,
    )
    new_pid, reason = _wait_fresh(unit, old_pid, expected_sha, AUTO_RESTART_SECONDS)
    if new_pid is not None:
        return replace(outcome, new_pid=new_pid, ok=reason is None, reason=reason)
    return _blunt(unit, replace(outcome, note=_join(note, f"{reason}; restarted through systemd")), expected_sha)


def _drain(unit: Unit, main_pid: int) -> tuple[str, dict[str, Any], str | None]:
    """Ask the gateway to drain and exit 75: over its socket, else SIGUSR1 through systemd.
    (method, the drain's answer, a note on what did not work)."""
    try:
        with SyncClient(_control(unit), retry=NO_RETRY) as client:
            return "drain", client.call(ops.DRAIN, {"deadline": DRAIN_SECONDS}, timeout=DRAIN_SECONDS + 10), None
    except RemoteError as exc:
        unanswered = f"the control socket did not take the drain ({exc.code})"
    if not main_pid:
        return "drain", {}, unanswered  # a gateway the unit does not run: nothing to signal
    try:
        systemd.kill_main(unit, "USR1")
    except SupervisorFailed as exc:
        return "signal", {}, _join(unanswered, exc.message)
    return "signal", {}, unanswered


def _blunt(unit: Unit, outcome: RestartOutcome, expected_sha: str | None) -> RestartOutcome:
    """``reset-failed`` then ``restart``, the client waiting as long as this unit's limits say."""
    shown = _show(unit)  # the limits of this unit in the manager that restarts it
    main_pid = _main_pid(shown)
    budget = restart_budget(shown.get("TimeoutStopUSec"), shown.get("TimeoutStartUSec"), start_only=not main_pid)
    outcome = replace(outcome, fallback="blunt", budget=budget)
    try:
        systemd.reset_failed(unit)
    except SupervisorFailed:
        pass  # not failed, or not loaded: the restart loads it, and says so if it cannot
    try:
        systemd.restart(unit, timeout=budget)
    except SupervisorTimeout:
        # The job may still be queued, and a unit with a queued start job still shows inactive.
        outcome = replace(outcome, note=_join(outcome.note, CLIENT_GAVE_UP))
        job_done = False
    except SupervisorFailed as exc:
        return replace(outcome, reason=exc.message)
    else:
        job_done = True
    new_pid, reason = _wait_fresh(unit, main_pid, expected_sha, COME_BACK_SECONDS, settled_ends_wait=job_done)
    return replace(outcome, new_pid=new_pid, ok=reason is None, reason=reason)


def _wait_fresh(
    unit: Unit, old_pid: int, expected_sha: str | None, seconds: float, *, settled_ends_wait: bool = True
) -> tuple[int | None, str | None]:
    """Poll until the unit's main process, other than ``old_pid``, answers as a running gateway:
    (its pid, None), or (its pid, why not) when it runs other code; (None, why) if none did.
    With ``settled_ends_wait`` a unit that is down with nothing pending ends the wait early."""
    address = _control(unit)
    deadline = time.monotonic() + seconds
    last: dict[str, Any] | None = None
    while True:
        status = _status(address)
        shown = _show(unit)
        if status is not None:
            last = status
            pid = status.get("pid")
            if status.get("state") == ops.RUNNING and pid != old_pid and pid == _main_pid(shown):
                if expected_sha and status.get("code_sha") != expected_sha:
                    return pid, f"came back on {str(status.get('code_sha'))[:12]}, not the new code"
                return pid, None
        if settled_ends_wait and shown.get("ActiveState") in SETTLED_DOWN:
            # A pending automatic restart shows as "activating"; these states mean none will come.
            return None, f"the unit is {shown['ActiveState']} and systemd will not start it again by itself"
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_INTERVAL)
    if last is None:
        return None, f"no gateway answered within {seconds:g}s"
    return None, (
        f"no fresh main process answered within {seconds:g}s "
        f"(the last answer came from pid {last.get('pid')}, {last.get('state')})"
    )


def _status(address: str) -> dict[str, Any] | None:
    try:
        with SyncClient(address, retry=NO_RETRY) as client:
            answer = client.call(ops.STATUS, timeout=2.0)
    except RemoteError:
        return None
    return answer if isinstance(answer, dict) else None


def _show(unit: Unit) -> dict[str, str]:
    return systemd.show(unit.scope, unit.name, PROPERTIES)


def _main_pid(shown: Mapping[str, str]) -> int:
    return int(shown.get("MainPID") or 0)


def _control(unit: Unit) -> str:
    return homes.endpoint(unit.home, ops.SERVICE, create=False).control


def _message(exc: BaseException) -> str:
    return exc.message if isinstance(exc, HermesError) else str(exc)


def _join(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None
