"""``systemctl`` and the unit files on disk, for gateways' systemd units in user or system scope.

A unit belongs to an install only if its ``Environment=`` sets ``HERMES_HOME`` to that
install's home: the name alone proves nothing (a sibling install on the same account uses
the same names). This module writes and finds unit files and drives ``systemctl`` with a
bounded timeout (listing and showing units, signalling, resetting and restarting them), and
reads what a unit's process last wrote to the journal; the text of units and of
``systemctl show`` is ``units``'s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from fleet.supervisors import InstalledUnit, Unit
from fleet.supervisors.commands import command_failed, run_client
from fleet.supervisors.errors import SupervisorFailed, SupervisorTimeout, SupervisorUnavailable
from fleet.supervisors.scopes import SCOPES, check_scope, require_scope_permission
from fleet.supervisors.systemd.units import (
    KIND,
    STOP_TIMEOUT,
    UNIT_PREFIX,
    WATCHDOG_DEFAULT,
    parse_show,
    render,
    service_environment,
    unit_name,
    watchdog_of,
)
from shared.files import PUBLIC_MODE, write_bytes_atomic

SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
# sd_booted(): systemd creates this directory when it runs as PID 1.
BOOTED_MARKER = Path("/run/systemd/system")

# Start uses systemd's default.
START_TIMEOUT = 90.0
# The systemctl client waits for the job; the slack covers its own start-up and the bus.
CLIENT_SLACK = 15.0
RELOAD_TIMEOUT = 30.0
# list-units, show, kill, reset-failed: the manager answers them without waiting for a job.
QUERY_TIMEOUT = 15.0

_BUS_UNREACHABLE = re.compile(r"^Failed to connect to .*bus", re.MULTILINE)


# --- unit files -------------------------------------------------------------------------------


def unit_dir(*, scope: str) -> Path:
    if check_scope(scope) == "system":
        return SYSTEM_UNIT_DIR
    config = os.environ.get("XDG_CONFIG_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(config) if os.path.isabs(config) else Path.home() / ".config"
    return base / "systemd" / "user"


def unit_path(profile: str, *, scope: str) -> Path:
    return unit_dir(scope=scope) / unit_name(profile)


def install(
    profile: str, home: Path, *, scope: str = "user", euid: int | None = None, watchdog: int = WATCHDOG_DEFAULT
) -> InstalledUnit:
    """Write the unit atomically (0644), then ``daemon-reload`` if a manager is reachable."""
    require_scope_permission(scope, euid=euid)
    home = Path(home)
    text = render(profile, home, scope=scope, watchdog=watchdog)
    path = unit_path(profile, scope=scope)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, text.encode("utf-8"), mode=PUBLIC_MODE)
    reloaded, note = _daemon_reload(scope)
    return InstalledUnit(
        kind=KIND,
        name=unit_name(profile),
        profile=profile,
        home=home,
        path=path,
        scope=scope,
        reloaded=reloaded,
        note=note,
    )


def rename(profile: str, new: str, home: Path, *, scope: str) -> InstalledUnit:
    """``profile``'s unit rewritten as ``new``'s, running the gateway in ``home``; the old unit
    file removed before the manager reloads, its watchdog kept. Taken again, it changes nothing more."""
    old = unit_path(profile, scope=scope)
    try:
        watchdog = watchdog_of(old.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):  # gone already (a second run), or unreadable
        watchdog = watchdog_of(_read_or_empty(unit_path(new, scope=scope)))
    old.unlink(missing_ok=True)
    return install(new, home, scope=scope, watchdog=watchdog)


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _daemon_reload(scope: str) -> tuple[bool, str | None]:
    # The file is written whatever happens here, so a failed reload is reported, not raised.
    try:
        systemctl(scope, "daemon-reload", timeout=RELOAD_TIMEOUT)
    except (SupervisorUnavailable, SupervisorFailed, SupervisorTimeout) as exc:
        return False, exc.message
    return True, None


def find(profile: str, home: Path) -> Unit | None:
    """``profile``'s unit in either scope, only if it runs the gateway with ``HERMES_HOME=home``."""
    home = Path(home)
    for scope in SCOPES:
        path = unit_path(profile, scope=scope)
        environment = unit_file_environment(path)
        if environment is None or "HERMES_HOME" not in environment:
            continue
        if Path(environment["HERMES_HOME"]) == home:
            return Unit(kind=KIND, name=unit_name(profile), profile=profile, home=home, path=path, scope=scope)
    return None


def unit_file_environment(path: Path) -> dict[str, str] | None:
    """The ``[Service]`` environment of the unit at ``path`` with its drop-ins beside it
    (``<path>.d/*.conf``, an unreadable one skipped), or None when the unit itself cannot be read."""
    texts: list[str] = []
    for index, source in enumerate([path, *sorted(Path(f"{path}.d").glob("*.conf"))]):
        try:
            texts.append(source.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            if index == 0:
                return None
    return service_environment(texts)


# --- driving systemctl ------------------------------------------------------------------------


def systemctl_argv(scope: str, *args: str) -> list[str]:
    # --no-ask-password: a polkit prompt would hang an unattended run until the timeout.
    return ["systemctl", *(["--user"] if check_scope(scope) == "user" else []), "--no-ask-password", *args]


def systemctl(scope: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``systemctl [--user] ARGS``; typed errors when there is no manager or it fails."""
    argv = systemctl_argv(scope, *args)
    if shutil.which("systemctl") is None:
        raise SupervisorUnavailable("systemctl is not installed here", detail={"command": argv})
    if not BOOTED_MARKER.is_dir():
        raise SupervisorUnavailable(f"systemd is not running here (no {BOOTED_MARKER})", detail={"command": argv})
    result = run_client(argv, timeout=timeout)
    if result.returncode != 0:
        if _BUS_UNREACHABLE.search(result.stderr):
            raise SupervisorUnavailable(
                f"the systemd {scope} manager is not reachable: {result.stderr.strip()}",
                detail={"command": argv, "stderr": result.stderr.strip()},
            )
        raise command_failed(argv, result)
    return result


def _act(action: str, unit: Unit, timeout: float, *options: str) -> None:
    if unit.kind != KIND:
        raise ValueError(f"{unit.name} is a {unit.kind} unit, not a systemd one")
    systemctl(unit.scope, action, *options, unit.name, timeout=timeout)


def start(unit: Unit, *, timeout: float = START_TIMEOUT + CLIENT_SLACK) -> None:
    _act("start", unit, timeout)


def stop(unit: Unit, *, timeout: float = STOP_TIMEOUT + CLIENT_SLACK) -> None:
    _act("stop", unit, timeout)


def restart(unit: Unit, *, timeout: float = STOP_TIMEOUT + START_TIMEOUT + CLIENT_SLACK) -> None:
    _act("restart", unit, timeout)


def kill_main(unit: Unit, signal: str, *, timeout: float = QUERY_TIMEOUT) -> None:
    """Send ``signal`` (``USR1``) to the unit's main process only, not to the rest of its cgroup."""
    _act("kill", unit, timeout, "-s", signal, "--kill-whom=main")


def reset_failed(unit: Unit, *, timeout: float = QUERY_TIMEOUT) -> None:
    """Clear the unit's failed state and its start-rate counter, so that a start is not refused."""
    _act("reset-failed", unit, timeout)


def list_units(scope: str, *, timeout: float = QUERY_TIMEOUT) -> list[str]:
    """The names of the units matching ``hermes-gateway*`` that the ``scope`` manager has loaded,
    in any state. The pattern also matches units that are not gateways (``hermes-gatewayd``):
    ``profile_of`` tells them apart."""
    result = systemctl(scope, "list-units", "--all", "--plain", "--no-legend", f"{UNIT_PREFIX}*", timeout=timeout)
    # One unit a line: NAME LOAD ACTIVE SUB DESCRIPTION (--plain prints no status bullet).
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def list_unit_files(scope: str, *, timeout: float = QUERY_TIMEOUT) -> list[str]:
    """The names of the unit files matching ``hermes-gateway*`` that the ``scope`` manager can
    load, loaded or not: systemd unloads a stopped unit nothing references, so ``list_units``
    alone misses it."""
    result = systemctl(scope, "list-unit-files", "--no-legend", f"{UNIT_PREFIX}*", timeout=timeout)
    # One unit file a line: NAME STATE [PRESET].
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def last_words(scope: str, name: str, pid: int, *, lines: int = 1, timeout: float = QUERY_TIMEOUT) -> list[str]:
    """The last ``lines`` lines the process ``pid`` of the unit ``name`` wrote to the journal
    (a gateway that refuses to start says why on stderr); empty when there is no journal to
    read, or nothing in it."""
    field = "_SYSTEMD_USER_UNIT" if check_scope(scope) == "user" else "_SYSTEMD_UNIT"
    argv = ["journalctl", "--no-pager", "--quiet", "-o", "cat", "-n", str(lines), f"{field}={name}", f"_PID={pid}"]
    try:
        result = run_client(argv, timeout=timeout)
    except (SupervisorUnavailable, SupervisorTimeout):
        return []
    return result.stdout.splitlines()[-lines:] if result.returncode == 0 else []


def show(scope: str, name: str, properties: Iterable[str], *, timeout: float = QUERY_TIMEOUT) -> dict[str, str]:
    """``properties`` of the unit ``name`` as the ``scope`` manager reports them (``parse_show``).
    A unit the manager does not know is not an error: its ``LoadState`` says ``not-found``."""
    arguments = [word for prop in properties for word in ("-p", prop)]
    return parse_show(systemctl(scope, "show", *arguments, name, timeout=timeout).stdout)
