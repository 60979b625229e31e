"""The scopes a system supervisor (systemd, launchd) installs a gateway in, and who may use
each: a user's own manager, or the system-wide one."""

from __future__ import annotations

import os

from fleet.supervisors.errors import ScopePermissionDenied

SCOPES = ("user", "system")


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; known: {', '.join(SCOPES)}")
    return scope


def require_scope_permission(scope: str, *, euid: int | None = None) -> None:
    """System scope writes system-wide unit directories and drives the system manager: root only."""
    check_scope(scope)
    euid = os.geteuid() if euid is None else euid
    if scope == "system" and euid != 0:
        raise ScopePermissionDenied(
            "installing a system-scope gateway needs root; run it with sudo or use --scope user",
            detail={"scope": scope, "euid": euid},
        )
