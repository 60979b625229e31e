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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fleet.discovery import GatewayRecord
from fleet.own_answer import own_status
from fleet.supervisors import Unit, launchd
from fleet.supervisors.commands import command_failed
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
    restart_live,
    turns,
)
from services.updater.restart.freshness import FRESH, OLD, SILENT, STARTING, OldProcess, judge
from shared import homes
from shared.errors import HermesError, failure_reason
from shared.gateways import ops
from shared.protocol import RemoteError

# A gateway in one of these states is drained; any other is restarted by launchctl alone.
DRAINABLE = frozenset({ops.STARTING, ops.RUNNING, ops.DRAINING})


def find_jobs(root: Path, *, euid: int | None = None, agent_dirs: Mapping[str, Path] | None = None) -> Found:
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
    skipped: list[tuple[str, str]] = []
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
    return Found(list(ours.values()), foreign, skipped)


def is_ours(root: Path, unit: Unit) -> bool:
    """Whether ``unit`` is a launchd job of the install at ``root``: its label names a profile
    and its home is that profile's home under ``root``."""
    if unit.kind != launchd.KIND or launchd.profile_of(unit.name) != unit.profile:
        return False
    expected = homes.profile_home(unit.profile, Path(root).absolute())
    return os.path.realpath(unit.home) == os.path.realpath(expected)


class LaunchdKind:
    """The launchd kind. ``euid`` (default: this process's) decides whether LaunchDaemons may be
    restarted, ``agent_dirs`` where the plists are (by scope), ``runner`` runs ``launchctl`` and
    ``uid`` names the user's GUI domain."""

    name = launchd.KIND

    def __init__(
        self,
        waits: Waits = WAITS,
        *,
        euid: int | None = None,
        agent_dirs: Mapping[str, Path] | None = None,
        runner: launchd.Runner | None = None,
        uid: int | None = None,
    ) -> None:
        self.waits = waits
        self.euid, self.agent_dirs, self.runner, self.uid = euid, agent_dirs, runner, uid

    def find(self, root: Path) -> Found:
        return find_jobs(root, euid=self.euid, agent_dirs=self.agent_dirs)

    def profile_of(self, name: str) -> str | None:
        return launchd.profile_of(name)

    def restart(self, root: Path, batch: Sequence[Target], expected_sha: str | None) -> list[RestartOutcome]:
        """A target with a job is drained and, if need be, restarted through it; one without
        (a gateway launchd runs under a job not found) is drained over its socket alone."""
        strangers = [t.unit.name for t in batch if t.unit is not None and not is_ours(root, t.unit)]
        if strangers:
            raise ValueError(f"not launchd jobs of the install at {root}: {', '.join(strangers)}")
        idle = [t.profile for t in batch if t.unit is None and t.gateway is None]
        if idle:
            raise ValueError(f"no job and no running gateway to restart: {', '.join(idle)}")
        run = self.runner or launchd.run_launchctl
        return each(batch, lambda target: self._restart(target, expected_sha, run))

    def _restart(self, target: Target, expected_sha: str | None, run: launchd.Runner) -> RestartOutcome:
        if target.unit is None:
            assert target.gateway is not None  # checked for the whole batch
            return restart_live(target.gateway, expected_sha, self.waits)
        return _Restart(self.waits, target.unit, target.gateway, expected_sha, run, self.uid).run()


class _Restart:
    """One job's restart onto ``expected_sha``."""

    def __init__(
        self,
        waits: Waits,
        unit: Unit,
        gateway: GatewayRecord | None,
        expected_sha: str | None,
        run: launchd.Runner,
        uid: int | None,
    ) -> None:
        self.waits, self.unit, self.gateway, self.expected_sha = waits, unit, gateway, expected_sha
        self.launchctl, self.uid = run, uid

    def run(self) -> RestartOutcome:
        """Never raises: whatever goes wrong with one job is that job's outcome."""
        drains = self.gateway is not None and self.gateway.state in DRAINABLE
        try:
            return self._restart(drains)
        except Exception as exc:  # isolation: one job's fault must not stop the others
            reason = f"{launchd.service_target(self.unit, uid=self.uid)}: {failure_reason(exc)}"
            return self._outcome("drain" if drains else "kickstart", None, False, reason)

    def _restart(self, drains: bool) -> RestartOutcome:
        unit, gateway = self.unit, self.gateway
        target = launchd.service_target(unit, uid=self.uid)
        address = control_endpoint(unit.home)
        old = OldProcess(gateway.pid, gateway.start_time) if gateway is not None else None
        answer: dict[str, Any] = {}
        notes: list[str] = []
        if drains:
            try:
                answer = drain(address, self.waits)
            except RemoteError as exc:
                notes.append(f"the drain failed ({exc.code}: {exc.message})")
            new_pid, problem = self._wait_for_fresh(address, old)
            if problem is None:
                return self._outcome("drain", new_pid, True, _because(target, notes), answer)
            notes.append(f"after the drain {problem}")
        method = "kickstart"
        try:
            loaded = launchd.is_loaded(unit, runner=self.launchctl, uid=self.uid)
            method = "kickstart" if loaded else "bootstrap"
            for argv in launchd.commands("restart", unit, loaded=loaded, uid=self.uid):
                result = self.launchctl(argv)
                if result.returncode != 0:
                    raise command_failed(argv, result)
        except HermesError as exc:
            return self._outcome(method, None, False, _because(target, [*notes, exc.message]), answer)
        new_pid, problem = self._wait_for_fresh(address, old)
        if problem is not None:
            notes.append(f"after the {method} {problem}")
        return self._outcome(method, new_pid, problem is None, _because(target, notes), answer)

    def _outcome(
        self,
        method: str,
        new_pid: int | None,
        ok: bool,
        reason: str | None,
        answer: Mapping[str, Any] | None = None,
    ) -> RestartOutcome:
        return RestartOutcome(
            profile=self.unit.profile,
            supervisor=launchd.KIND,
            old_pid=self.gateway.pid if self.gateway is not None else 0,  # 0: no process was running
            new_pid=new_pid,
            method=method,
            ok=ok,
            reason=reason,
            **turns(answer or {}),
        )

    def _wait_for_fresh(self, address: homes.Endpoint, old: OldProcess | None) -> tuple[int | None, str | None]:
        """Poll until a process other than ``old`` answers as running on the expected code:
        ``(its pid, None)``; otherwise, once the wait is up, the last pid that answered and why
        it is not the fresh one."""
        waits = self.waits
        deadline = time.monotonic() + waits.come_back
        while True:
            remaining = deadline - time.monotonic()
            seen = judge(own_status(address, max(0.1, min(waits.status, remaining))), old, self.expected_sha)
            if seen.verdict == FRESH:
                return seen.pid, None
            if remaining <= 0:
                break
            time.sleep(min(waits.poll, max(remaining, 0.0)))
        window = f"{waits.come_back:g}s"
        if seen.verdict == SILENT:
            return None, f"no gateway answered within {window}"
        if seen.verdict == OLD:
            return None, f"the old process (pid {seen.pid}) was still {seen.state} after {window}"
        if seen.verdict == STARTING:
            return seen.pid, f"pid {seen.pid} was {seen.state} after {window}"
        return seen.pid, f"pid {seen.pid} came back on {str(seen.code_sha)[:12]}, not the new code"


def _because(target: str, notes: list[str]) -> str | None:
    """The reason an outcome carries: what happened to the job on the way, if anything did."""
    return f"{target}: {'; '.join(notes)}" if notes else None
