"""The systemd kind: gateways as ``hermes-gateway[-<profile>].service`` units, user or system scope.

A unit belongs to an install only if its ``Environment=`` sets ``HERMES_HOME`` to that
install's home; the name alone proves nothing. Two modules, one idea each: ``units`` (unit
file and ``systemctl show`` text, rendered and parsed; no I/O) and ``manager`` (the unit
files on disk and ``systemctl``). This module is their public face.
"""

from __future__ import annotations

from fleet.supervisors.systemd.manager import (
    CLIENT_SLACK,
    find,
    install,
    kill_main,
    last_words,
    list_unit_files,
    list_units,
    reset_failed,
    restart,
    show,
    start,
    stop,
    systemctl,
    systemctl_argv,
    unit_file_environment,
    unit_path,
)
from fleet.supervisors.systemd.units import (
    KIND,
    WATCHDOG_DEFAULT,
    ShowOutputInvalid,
    parse_environment,
    parse_show,
    profile_of,
    render,
    unit_name,
    watchdog_seconds,
)

__all__ = [
    "CLIENT_SLACK",
    "KIND",
    "WATCHDOG_DEFAULT",
    "ShowOutputInvalid",
    "find",
    "install",
    "kill_main",
    "last_words",
    "list_unit_files",
    "list_units",
    "parse_environment",
    "parse_show",
    "profile_of",
    "render",
    "reset_failed",
    "restart",
    "show",
    "start",
    "stop",
    "systemctl",
    "systemctl_argv",
    "unit_file_environment",
    "unit_name",
    "unit_path",
    "watchdog_seconds",
]
