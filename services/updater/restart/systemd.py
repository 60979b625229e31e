"""Restarting the install's systemd units: drain first, then a budgeted blunt restart.

The units are found in both managers (user and system) and judged by the home they run on:
``hermes-gateway.service`` and ``hermes-gateway-<profile>.service`` are ours only when their
``HERMES_HOME`` is this install's home of the profile the name says. Any other is a sibling
install's (or a scratch home's): named, never drained, never restarted.

Only a unit that runs is restarted (``systemd_state``): one an operator stopped stays down and
is said to, one that failed is reported with systemd's ``Result``, the exit status and the
gateway's own last line, and neither is started. Units are found by their unit files as well
as by what the manager has loaded, since systemd unloads a stopped unit nothing references.

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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from fleet.discovery import GatewayRecord
from fleet.own_answer import own_status
from fleet.supervisors import Unit, systemd
from fleet.supervisors.errors import SupervisorFailed, SupervisorTimeout
from fleet.supervisors.scopes import SCOPES
from services.updater.restart.base import (
    WAITS,
    Found,
    RestartOutcome,
    Target,
    Waits,
    control_endpoint,
    drain,
    each,
    join,
    live_gateways,
    restart_live,
    turns,
)
from services.updater.restart.freshness import FRESH, STALE, OldProcess, judge
from services.updater.restart.systemd_budget import restart_budget
from services.updater.restart.systemd_state import DOWN, FAILED, describe, failure, judge_unit
from services.updater.restart.systemd_state import PROPERTIES as STATE_PROPERTIES
from shared import homes
from shared.errors import HermesError, failure_reason
from shared.protocol import RemoteError

KIND = systemd.KIND
PROPERTIES = (
    *STATE_PROPERTIES,
    "MainPID",
    "ExecMainPID",
    "TimeoutStopUSec",
    "TimeoutStartUSec",
    "Environment",
)
# Unit states out of which systemd starts nothing by itself.
STAYS_DOWN = ("failed", "inactive")
CLIENT_GAVE_UP = "systemctl gave up waiting; the restart job may still be running"
# How long a failed gateway's last line has to reach the journal.
LAST_WORDS_WAIT = 2.0


def find_units(root: Path) -> Found:
    """Every gateway unit of both managers as (ours, foreign, skipped): skipped names a unit
    that could not be judged, or a manager that could not be asked (no systemd here, no user
    bus), with the reason. Never raises."""
    root = Path(root).absolute()
    ours: list[Unit] = []
    foreign: list[Unit] = []
    skipped: list[tuple[str, str]] = []
    for scope in SCOPES:
        try:
            names = sorted(set(systemd.list_units(scope)) | set(systemd.list_unit_files(scope)))
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
    return Found(ours, foreign, skipped)


def _shown_unit(scope: str, name: str, profile: str) -> Unit | None:
    shown = systemd.show(scope, name, PROPERTIES)
    home = systemd.parse_environment(shown.get("Environment", "")).get("HERMES_HOME")
    return Unit(kind=KIND, name=name, profile=profile, home=Path(home), scope=scope) if home else None


def belongs(unit: Unit, root: Path) -> bool:
    """Whether ``unit`` runs on the home that the install at ``root`` has for the profile the
    unit's name says (the root itself for the default profile)."""
    expected = homes.profile_home(unit.profile, Path(root).absolute())
    return unit.home.is_absolute() and os.path.realpath(unit.home) == os.path.realpath(expected)


class SystemdKind:
    """The systemd kind: ``euid`` (default: this process's) decides whether system units may be
    restarted."""

    name = KIND

    def __init__(self, waits: Waits = WAITS, *, euid: int | None = None) -> None:
        self.waits = waits
        self.euid = euid

    def find(self, root: Path) -> Found:
        return find_units(root)

    def profile_of(self, name: str) -> str | None:
        return systemd.profile_of(name)

    def restart(self, root: Path, batch: Sequence[Target], expected_sha: str | None) -> list[RestartOutcome]:
        """A target with a unit is drained and restarted through it; one without (a gateway
        systemd runs under a unit not found) is drained over its socket alone."""
        live_gateways([target for target in batch if target.unit is None])  # each has one, or none is restarted
        euid = os.geteuid() if self.euid is None else self.euid
        return each(batch, lambda target: self._restart(root, target, expected_sha, euid))

    def _restart(self, root: Path, target: Target, expected_sha: str | None, euid: int) -> RestartOutcome:
        if target.unit is None:
            assert target.gateway is not None  # checked for the whole batch
            return restart_live(target.gateway, expected_sha, self.waits)
        return _Restart(self.waits, target.unit, expected_sha).run(root, target.gateway, euid)


class _Restart:
    """One unit's restart onto ``expected_sha``."""

    def __init__(self, waits: Waits, unit: Unit, expected_sha: str | None) -> None:
        self.waits, self.unit, self.expected_sha = waits, unit, expected_sha

    @property
    def address(self) -> homes.Endpoint:
        return control_endpoint(self.unit.home)

    def run(self, root: Path, gateway: GatewayRecord | None, euid: int) -> RestartOutcome:
        """Never raises: whatever goes wrong with one unit is that unit's outcome."""
        unit = self.unit
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
            return self._explained(self._drain_first(outcome))
        except Exception as exc:  # isolation: one unit's fault must not stop the others
            return replace(outcome, reason=failure_reason(exc))

    def _drain_first(self, outcome: RestartOutcome) -> RestartOutcome:
        shown = self._show()
        state = judge_unit(shown)
        if state.verdict == DOWN:
            return replace(outcome, method="skip", ok=True, note=state.why)
        if state.verdict == FAILED:
            account = self._failure(shown)
            return replace(outcome, method="skip", reason=f"{state.why}: {describe(account)}", failure=account)
        main_pid = _main_pid(shown)
        old_pid = main_pid or outcome.old_pid
        outcome = replace(outcome, old_pid=old_pid)
        if not old_pid:
            return self._blunt(replace(outcome, method="start"))
        method, answer, note = self._drain(main_pid)
        outcome = replace(outcome, method=method, note=note, **turns(answer))
        # systemd gets as long to start a drained gateway again by itself as a fresh one has to answer.
        new_pid, reason = self._wait_fresh(old_pid)
        if new_pid is not None:
            return replace(outcome, new_pid=new_pid, ok=reason is None, reason=reason)
        return self._blunt(replace(outcome, note=join(note, f"{reason}; restarted through systemd")))

    def _drain(self, main_pid: int) -> tuple[str, dict[str, Any], str | None]:
        """Ask the gateway to drain and exit 75: over its socket, else SIGUSR1 through systemd.
        (method, the drain's answer, a note on what did not work)."""
        try:
            return "drain", drain(self.address, self.waits), None
        except RemoteError as exc:
            unanswered = f"the control socket did not take the drain ({exc.code})"
        if not main_pid:
            return "drain", {}, unanswered  # a gateway the unit does not run: nothing to signal
        try:
            systemd.kill_main(self.unit, "USR1")
        except SupervisorFailed as exc:
            return "signal", {}, join(unanswered, exc.message)
        return "signal", {}, unanswered

    def _explained(self, outcome: RestartOutcome) -> RestartOutcome:
        """A unit left failed: its outcome says why, in systemd's words and the gateway's own."""
        if outcome.ok or outcome.failure is not None:
            return outcome
        shown = self._show()
        if shown.get("ActiveState") != "failed":
            return outcome
        account = self._failure(shown)
        return replace(outcome, reason=join(outcome.reason, describe(account)), failure=account)

    def _failure(self, shown: Mapping[str, str]) -> dict[str, Any]:
        pid = int(shown.get("ExecMainPID") or 0)
        return failure(shown, self._last_words(pid) if pid else None)

    def _last_words(self, pid: int) -> str | None:
        deadline = time.monotonic() + LAST_WORDS_WAIT
        while True:
            said = systemd.last_words(self.unit.scope, self.unit.name, pid)
            if said or time.monotonic() >= deadline:
                return said[-1] if said else None
            time.sleep(self.waits.poll)

    def _blunt(self, outcome: RestartOutcome) -> RestartOutcome:
        """``reset-failed`` then ``restart``, the client waiting as long as this unit's limits say."""
        shown = self._show()  # the limits of this unit in the manager that restarts it
        main_pid = _main_pid(shown)
        budget = restart_budget(shown.get("TimeoutStopUSec"), shown.get("TimeoutStartUSec"), start_only=not main_pid)
        outcome = replace(outcome, fallback="blunt", budget=budget)
        try:
            systemd.reset_failed(self.unit)
        except SupervisorFailed:
            pass  # not failed, or not loaded: the restart loads it, and says so if it cannot
        try:
            systemd.restart(self.unit, timeout=budget)
        except SupervisorTimeout:
            # The job may still be queued, and a unit with a queued start job still shows inactive.
            outcome = replace(outcome, note=join(outcome.note, CLIENT_GAVE_UP))
            job_done = False
        except SupervisorFailed as exc:
            return replace(outcome, reason=exc.message)
        else:
            job_done = True
        new_pid, reason = self._wait_fresh(main_pid, ends_when_down=job_done)
        return replace(outcome, new_pid=new_pid, ok=reason is None, reason=reason)

    def _wait_fresh(self, old_pid: int, *, ends_when_down: bool = True) -> tuple[int | None, str | None]:
        """Poll until the unit's main process, other than ``old_pid``, answers as a running
        gateway: (its pid, None), or (its pid, why not) when it runs other code; (None, why) if
        none did. With ``ends_when_down`` a unit that is down with nothing pending ends the
        wait early."""
        old = OldProcess(old_pid, by_pid=True)
        seconds = self.waits.come_back
        deadline = time.monotonic() + seconds
        last: dict[str, Any] | None = None
        while True:
            answer = own_status(self.address, self.waits.status)
            shown = self._show()
            if answer is not None:
                last = answer
                seen = judge(answer, old, self.expected_sha, main_pid=_main_pid(shown))
                if seen.verdict == STALE:
                    return seen.pid, f"came back on {str(seen.code_sha)[:12]}, not the new code"
                if seen.verdict == FRESH:
                    return seen.pid, None
            if ends_when_down and shown.get("ActiveState") in STAYS_DOWN:
                # A pending automatic restart shows as "activating"; these states mean none will come.
                return None, f"the unit is {shown['ActiveState']} and systemd will not start it again by itself"
            if time.monotonic() >= deadline:
                break
            time.sleep(self.waits.poll)
        if last is None:
            return None, f"no gateway answered within {seconds:g}s"
        return None, (
            f"no fresh main process answered within {seconds:g}s "
            f"(the last answer came from pid {last.get('pid')}, {last.get('state')})"
        )

    def _show(self) -> dict[str, str]:
        return systemd.show(self.unit.scope, self.unit.name, PROPERTIES)


def _main_pid(shown: Mapping[str, str]) -> int:
    return int(shown.get("MainPID") or 0)


def _message(exc: BaseException) -> str:
    return exc.message if isinstance(exc, HermesError) else str(exc)
