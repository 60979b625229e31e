"""The supervisors that can own a gateway: one module per kind, one shape for all.

Each kind module (``systemd``, ``launchd``, ``supervisord``) names units after profiles
exactly (``unit_name`` and its inverse ``profile_of``), renders the unit file for a
profile's gateway, and drives the supervisor. Everything a unit needs to know about the
gateway it runs comes from here, so the kinds cannot disagree about it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from shared.version import INSTALL_ROOT

KINDS = ("supervisord", "systemd", "launchd")

# Set in every unit we write, so a gateway knows who supervises it without guessing.
SUPERVISOR_ENV = "HERMES_SUPERVISOR"


@dataclass(frozen=True)
class Unit:
    """One supervised gateway: which supervisor, under what name, for which profile."""

    kind: str  # one of KINDS
    name: str  # systemd unit, launchd label, or supervisord program name
    profile: str
    home: Path  # the HERMES_HOME the gateway runs with: its profile's home
    path: Path | None = None  # the unit file, where there is one
    scope: str = "user"  # "user" or "system" (systemd and launchd)


def gateway_command(python: str | None = None) -> list[str]:
    """The argv that runs a gateway from this install; the profile comes from HERMES_HOME."""
    return [python or sys.executable, "-m", "services.gateway"]


def gateway_environment(home: Path, kind: str) -> dict[str, str]:
    return {"HERMES_HOME": str(home), SUPERVISOR_ENV: kind, "PYTHONUNBUFFERED": "1"}


def working_directory() -> Path:
    return INSTALL_ROOT
