"""Where a supervised gateway's log records are, by the supervisor that runs it. No I/O.

- the embedded supervisord: the program's log file (``<root>/logs/mesh/<program>.log``,
  stdout and stderr together); a multiplex program's file holds every profile it serves;
- the gateway host (``hermes mesh up --host``): the host's program log, where the host, its
  fork servers and every gateway they forked write (each inherits the host's stderr);
- systemd: the journal of the unit (``journalctl -u``, or ``--user-unit`` for a user unit,
  whose records root's system journal keeps);
- launchd: the job's ``StandardErrorPath``.

A log that several profiles share is read only for the records that name the profile: JSON
records (``HERMES_LOG_FORMAT=json``). Its text lines say no profile and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleet.supervisors import HOST_KIND, Unit
from fleet.supervisors.errors import SupervisorError
from fleet.supervisors.launchd import log_paths
from fleet.supervisors.supervisord import HOST_PROGRAM, mesh_paths, profile_of, root_of

# The journal's reads are bounded: what --lines asks, at most this.
MAX_LINES = 100_000


class NoLogSource(SupervisorError):
    """The supervisor that runs the gateway keeps no log this command can read."""

    code = "no_log_source"


@dataclass(frozen=True)
class FileLog:
    path: Path
    shared: bool  # several profiles write it: only records naming the profile are its


@dataclass(frozen=True)
class JournalLog:
    unit: str
    user: bool


LogSource = FileLog | JournalLog


def log_source(unit: Unit) -> LogSource:
    """Where the gateway ``unit`` names writes its records."""
    if unit.kind == "systemd":
        return JournalLog(unit.name, unit.scope == "user")
    if unit.kind == "launchd":
        return FileLog(log_paths(unit.home)[1], shared=False)
    if unit.kind in ("supervisord", HOST_KIND):
        root = root_of(unit.profile, unit.home)
        if root is None:
            raise NoLogSource(
                f"the mesh program of profile {unit.profile} runs on no home of this install",
                detail={"field": "home", "home": str(unit.home)},
            )
        if unit.kind == HOST_KIND:
            return FileLog(mesh_paths(root).program_log(HOST_PROGRAM), shared=True)
        # A profile's own program, or the multiplex one serving it among others.
        return FileLog(mesh_paths(root).program_log(unit.name), shared=profile_of(unit.name) != unit.profile)
    raise NoLogSource(
        f"supervisor {unit.kind} keeps no log of the gateway this command can read",
        detail={"field": "supervisor", "supervisor": unit.kind},
    )


def journal_argv(source: JournalLog, lines: int, *, follow: bool) -> list[str]:
    """``journalctl`` reading the unit's last ``lines`` entries as JSON (then following)."""
    which = ["--user-unit", source.unit] if source.user else ["--unit", source.unit]
    argv = ["journalctl", "--no-pager", "--quiet", "-o", "json", "-n", str(min(lines, MAX_LINES)), *which]
    return [*argv, "--follow"] if follow else argv
