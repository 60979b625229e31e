"""launchd jobs for gateways: label ``ai.hermes.gateway`` for the default profile and
``ai.hermes.gateway-<profile>`` for the others; a LaunchAgent (user scope) or a
LaunchDaemon (system scope).

As with systemd, a job belongs to an install only if its ``EnvironmentVariables`` set
``HERMES_HOME`` to that install's home. ``launchctl`` is driven through a runner (argv in,
completed process out) so the command sequences are testable where launchd does not exist.
"""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.parsers.expat import ExpatError

from fleet.supervisors import (
    InstalledUnit,
    Unit,
    gateway_command,
    gateway_environment,
    profile_for,
    unit_name_for,
    working_directory,
)
from fleet.supervisors.commands import command_failed, run_client
from fleet.supervisors.errors import SupervisorError, SupervisorUnavailable, UnitValueInvalid
from fleet.supervisors.scopes import SCOPES, check_scope, require_scope_permission
from shared import homes
from shared.files import PUBLIC_MODE, write_bytes_atomic

KIND = "launchd"
LABEL = "ai.hermes.gateway"
SYSTEM_DAEMON_DIR = Path("/Library/LaunchDaemons")
# launchd's wait between SIGTERM and SIGKILL (default 20s): the gateway's drain budget, as in systemd.
EXIT_TIMEOUT = 90
COMMAND_TIMEOUT = EXIT_TIMEOUT + 15.0

Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]

_NOT_LOADED_NOTE = "launchd reads the plist when the job is bootstrapped: run `hermes gateway start`"


class PlistInvalid(SupervisorError):
    """A job's plist that cannot be read, or is not a job launchd would load."""

    code = "unit_file_invalid"


# --- names ------------------------------------------------------------------------------------


def unit_name(profile: str) -> str:
    return unit_name_for(profile, LABEL)


def profile_of(label: str) -> str | None:
    """The profile whose label is exactly ``label``, or None: the inverse of ``unit_name``."""
    return profile_for(label, LABEL)


def unit_dir(scope: str) -> Path:
    """Where jobs of ``scope`` live: the user's LaunchAgents, or the system's LaunchDaemons."""
    return SYSTEM_DAEMON_DIR if check_scope(scope) == "system" else Path.home() / "Library" / "LaunchAgents"


def unit_path(profile: str, *, scope: str) -> Path:
    return unit_dir(scope) / f"{unit_name(profile)}.plist"


# --- writing plists ---------------------------------------------------------------------------


def log_paths(home: Path) -> tuple[Path, Path]:
    logs = Path(home) / "logs"
    return logs / "gateway.launchd.out.log", logs / "gateway.launchd.err.log"


def render(profile: str, home: Path, *, scope: str) -> bytes:
    """The job's plist for ``profile``'s gateway running with ``HERMES_HOME=home``.

    ``KeepAlive: {SuccessfulExit: false}`` restarts any non-zero exit, so the planned-restart
    exit 75 comes back; launchd has no way to exempt the config-error exit 78, it throttles it.
    """
    check_scope(scope)
    home = Path(home)
    if not home.is_absolute():
        raise UnitValueInvalid(
            f"HERMES_HOME must be absolute in a launchd job, not {home}", detail={"value": str(home)}
        )
    stdout, stderr = log_paths(home)
    job: dict[str, Any] = {
        "Label": unit_name(profile),
        "ProgramArguments": gateway_command(),
        "WorkingDirectory": str(working_directory()),
        "EnvironmentVariables": gateway_environment(home, KIND),
        "KeepAlive": {"SuccessfulExit": False},
        "RunAtLoad": True,
        "ExitTimeOut": EXIT_TIMEOUT,
        "StandardOutPath": str(stdout),
        "StandardErrorPath": str(stderr),
    }
    return plistlib.dumps(job, fmt=plistlib.FMT_XML, sort_keys=False)


def install(profile: str, home: Path, *, scope: str = "user", euid: int | None = None) -> InstalledUnit:
    """Write the plist atomically (0644) and create the log directory launchd writes into."""
    require_scope_permission(scope, euid=euid)
    home = Path(home)
    data = render(profile, home, scope=scope)
    path = unit_path(profile, scope=scope)
    # launchd opens the log files but does not create their directory.
    homes.make_private_dirs(home / "logs")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, data, mode=PUBLIC_MODE)
    return InstalledUnit(
        kind=KIND,
        name=unit_name(profile),
        profile=profile,
        home=home,
        path=path,
        scope=scope,
        reloaded=False,
        note=_NOT_LOADED_NOTE,
    )


def rename(profile: str, new: str, home: Path, *, scope: str, runner: Runner | None = None) -> InstalledUnit:
    """``profile``'s job rewritten as ``new``'s, running the gateway in ``home``: the old job
    booted out if it is loaded, its plist removed. Taken again, it changes nothing more."""
    path = unit_path(profile, scope=scope)
    old = Unit(kind=KIND, name=unit_name(profile), profile=profile, home=home, path=path, scope=scope)
    if path.exists() and is_loaded(old, runner=runner):
        stop(old, runner=runner)
    path.unlink(missing_ok=True)
    return install(new, home, scope=scope)


# --- launchctl --------------------------------------------------------------------------------


def domain(scope: str, *, uid: int | None = None) -> str:
    if check_scope(scope) == "system":
        return "system"
    return f"gui/{os.getuid() if uid is None else uid}"


def service_target(unit: Unit, *, uid: int | None = None) -> str:
    return f"{domain(unit.scope, uid=uid)}/{unit.name}"


def commands(action: str, unit: Unit, *, loaded: bool, uid: int | None = None) -> list[list[str]]:
    """The launchctl commands that carry out ``action`` on a job that is (not) ``loaded``.

    A job is loaded once bootstrapped; ``RunAtLoad`` starts it then. ``bootout`` is the only
    stop that sticks, since ``KeepAlive`` would bring back a killed process.
    """
    target = service_target(unit, uid=uid)
    plist = unit.path or unit_path(unit.profile, scope=unit.scope)
    bootstrap = ["launchctl", "bootstrap", domain(unit.scope, uid=uid), str(plist)]
    if action == "start":
        return [["launchctl", "kickstart", target]] if loaded else [bootstrap]
    if action == "stop":
        return [["launchctl", "bootout", target]] if loaded else []
    if action == "restart":
        return [["launchctl", "kickstart", "-k", target]] if loaded else [bootstrap]
    raise ValueError(f"unknown action {action!r}")


def run_launchctl(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The default runner: launchctl itself, bounded."""
    if shutil.which("launchctl") is None:
        raise SupervisorUnavailable("launchctl is not on PATH: launchd exists only on macOS", detail={"command": argv})
    return run_client(argv, timeout=COMMAND_TIMEOUT)


def is_loaded(unit: Unit, *, runner: Runner | None = None, uid: int | None = None) -> bool:
    run = runner or run_launchctl
    return run(["launchctl", "print", service_target(unit, uid=uid)]).returncode == 0


def _act(action: str, unit: Unit, runner: Runner | None, uid: int | None) -> None:
    if unit.kind != KIND:
        raise ValueError(f"{unit.name} is a {unit.kind} job, not a launchd one")
    run = runner or run_launchctl
    for argv in commands(action, unit, loaded=is_loaded(unit, runner=run, uid=uid), uid=uid):
        result = run(argv)
        if result.returncode != 0:
            raise command_failed(argv, result)


def start(unit: Unit, *, runner: Runner | None = None, uid: int | None = None) -> None:
    _act("start", unit, runner, uid)


def stop(unit: Unit, *, runner: Runner | None = None, uid: int | None = None) -> None:
    _act("stop", unit, runner, uid)


def restart(unit: Unit, *, runner: Runner | None = None, uid: int | None = None) -> None:
    _act("restart", unit, runner, uid)


# --- reading plists ---------------------------------------------------------------------------


def find(profile: str, home: Path) -> Unit | None:
    """``profile``'s job in either scope, only if it runs the gateway with ``HERMES_HOME=home``."""
    home = Path(home)
    for scope in SCOPES:
        path = unit_path(profile, scope=scope)
        value = plist_home(path)
        if value is not None and Path(value) == home:
            return Unit(kind=KIND, name=unit_name(profile), profile=profile, home=home, path=path, scope=scope)
    return None


def gateway_jobs(directory: Path) -> list[tuple[str, Path]]:
    """``(label, plist)`` for every file in ``directory`` named after a gateway label exactly,
    by label. Only names are read; a missing directory has none, any other failure to list
    it is the caller's OSError."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    labels = (name[: -len(".plist")] for name in names if name.endswith(".plist"))
    return sorted((label, Path(directory) / f"{label}.plist") for label in labels if profile_of(label) is not None)


# What plistlib's XML and binary parsers raise on malformed input (ValueError covers
# InvalidFileException; a bad <date> is an AttributeError, a truncated binary offset a LookupError).
_MALFORMED = (ExpatError, ValueError, LookupError, AttributeError, TypeError, OverflowError)


def load_job(path: Path) -> dict[str, Any]:
    """The job at ``path``; PlistInvalid says why it cannot be one (unreadable, malformed, not a dict)."""
    try:
        with open(path, "rb") as handle:
            job = plistlib.load(handle)
    except OSError as exc:
        raise PlistInvalid(f"{path} cannot be read: {exc.strerror or exc}", detail={"path": str(path)}) from None
    except _MALFORMED as exc:
        raise PlistInvalid(f"{path} is not a valid plist: {exc}", detail={"path": str(path)}) from None
    if not isinstance(job, dict):
        raise PlistInvalid(f"{path} holds a {type(job).__name__}, not a job", detail={"path": str(path)})
    return job


def job_home(job: dict[str, Any]) -> str | None:
    """The job's ``EnvironmentVariables.HERMES_HOME``; None when it sets none."""
    environment = job.get("EnvironmentVariables")
    value = environment.get("HERMES_HOME") if isinstance(environment, dict) else None
    return value if isinstance(value, str) and value else None


def job_unit(path: Path, *, scope: str) -> Unit:
    """The gateway job in the plist at ``path``, named after its file, with the home its
    plist sets (whichever install that is). PlistInvalid when it is no gateway job we can
    act on: unreadable, malformed, labelled otherwise than its file, or without a home."""
    path = Path(path)
    label = path.name.removesuffix(".plist")
    profile = profile_of(label)
    if profile is None:
        raise PlistInvalid(f"{path} is not named after a gateway label", detail={"path": str(path)})
    job = load_job(path)
    if job.get("Label") != label:
        raise PlistInvalid(
            f"{path} labels its job {job.get('Label')!r}, not {label!r}", detail={"path": str(path), "label": label}
        )
    home = job_home(job)
    if home is None:
        raise PlistInvalid(f"{path} sets no HERMES_HOME in its EnvironmentVariables", detail={"path": str(path)})
    return Unit(kind=KIND, name=label, profile=profile, home=Path(home), path=path, scope=check_scope(scope))


def plist_home(path: Path) -> str | None:
    """``EnvironmentVariables.HERMES_HOME`` of the plist at ``path``; None if absent or unreadable."""
    try:
        return job_home(load_job(path))
    except PlistInvalid:
        return None
