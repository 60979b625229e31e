"""The supervisors that can own a gateway: one module per kind, one shape for all.

Each kind module (``systemd``, ``launchd``, ``supervisord``; ``kind_module`` picks one by
name) names units after profiles exactly (``unit_name`` and its inverse ``profile_of``),
renders the unit file for a profile's gateway (``install``), finds a profile's unit by the
home it runs (``find``), and drives the supervisor (``start``, ``stop``, ``restart``). Everything a unit needs to know about the
gateway it runs comes from here, so the kinds cannot disagree about it. What the kinds
share besides that has a module of its own: ``errors``, ``commands`` (running a supervisor's
client with a bounded timeout) and ``scopes`` (user or system, and who may use which).
``host`` is the contract of the gateway host, which supervises the gateways it forks itself
(``HOST_KIND``) and is a program of the embedded mesh.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from shared import homes
from shared.version import INSTALL_ROOT

KINDS = ("supervisord", "systemd", "launchd")
# The gateway host (``host``) supervises its own gateways: a kind a gateway can run under,
# though it has no units of its own (the host is itself a program of the embedded mesh). Its
# module (``gateway_host``) finds and drives them as the others do their units.
HOST_KIND = "gateway_host"
SUPERVISING_KINDS = (*KINDS, HOST_KIND)
_KIND_MODULES = {kind: f"fleet.supervisors.{kind}" for kind in SUPERVISING_KINDS}

# Set in every unit we write, so a gateway knows who supervises it without guessing.
SUPERVISOR_ENV = "HERMES_SUPERVISOR"
# Files a container engine puts in its containers (docker; podman): a process that sees one
# runs in a container. ``container=`` in the environment says the same (podman, nspawn).
CONTAINER_MARKERS: tuple[str, ...] = ("/.dockerenv", "/run/.containerenv")


@dataclass(frozen=True)
class Unit:
    """One supervised gateway: which supervisor, under what name, for which profile."""

    kind: str  # one of KINDS
    name: str  # systemd unit, launchd label, or supervisord program name
    profile: str
    home: Path  # the HERMES_HOME the gateway runs with: its profile's home
    path: Path | None = None  # the unit file, where there is one
    scope: str = "user"  # "user" or "system" (systemd and launchd)


@dataclass(frozen=True)
class InstalledUnit(Unit):
    """A unit just written, and whether its supervisor has read it (``note`` says why not)."""

    reloaded: bool = False
    note: str | None = None


def kind_module(kind: str) -> ModuleType:
    """The module of supervisor ``kind``, imported only when that kind is used."""
    if kind not in _KIND_MODULES:
        raise ValueError(f"unknown supervisor {kind!r}; known: {', '.join(SUPERVISING_KINDS)}")
    return importlib.import_module(_KIND_MODULES[kind])


def unit_name_for(profile: str, prefix: str, suffix: str = "") -> str:
    """``<prefix><suffix>`` for the default profile, ``<prefix>-<profile><suffix>`` otherwise:
    how every kind names a profile's unit."""
    homes.validate_profile_name(profile)
    return f"{prefix}{suffix}" if profile == homes.DEFAULT_PROFILE else f"{prefix}-{profile}{suffix}"


def profile_for(name: str, prefix: str, suffix: str = "") -> str | None:
    """The profile whose unit is exactly ``name``, or None: the exact inverse of ``unit_name_for``."""
    if name == f"{prefix}{suffix}":
        return homes.DEFAULT_PROFILE
    head = f"{prefix}-"
    if not (name.startswith(head) and name.endswith(suffix)):
        return None
    profile = name[len(head) : len(name) - len(suffix)]
    # "default" is spelled without a suffix, so <prefix>-default<suffix> is nobody's.
    if profile == homes.DEFAULT_PROFILE or not homes.PROFILE_NAME_RE.fullmatch(profile):
        return None
    return profile


def gateway_command(python: str | None = None) -> list[str]:
    """The argv that runs a gateway from this install; the profile comes from HERMES_HOME."""
    return [python or sys.executable, "-m", "services.gateway"]


def gateway_environment(home: Path, kind: str) -> dict[str, str]:
    return {"HERMES_HOME": str(home), SUPERVISOR_ENV: kind, "PYTHONUNBUFFERED": "1"}


def working_directory() -> Path:
    return INSTALL_ROOT


def detect_supervisor(env: Mapping[str, str] | None = None) -> str:
    """Who restarts this process: named by the unit we wrote, else read from what each
    supervisor puts in its children's environment; else "container" when it runs in one
    (whose engine's restart policy is its supervisor); else "unmanaged".

    The container's marker files are looked at only for this very process (``env`` None):
    another process's filesystem is not the one seen from here."""
    own = env is None
    env = os.environ if env is None else env
    named = env.get(SUPERVISOR_ENV, "")
    if named in SUPERVISING_KINDS:
        return named
    if env.get("SUPERVISOR_ENABLED"):
        return "supervisord"
    if env.get("INVOCATION_ID") or env.get("NOTIFY_SOCKET"):
        return "systemd"
    if env.get("XPC_SERVICE_NAME", "0") not in ("0", ""):
        return "launchd"
    if env.get("container") or (own and any(os.path.exists(marker) for marker in CONTAINER_MARKERS)):
        return "container"
    return "unmanaged"
