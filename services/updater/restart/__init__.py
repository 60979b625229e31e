"""Restart-per-kind: every gateway of the install onto the new code, drain first.

One interface (``base.RestartKind``: find the kind's units in the install, restart a batch),
one module per kind (``systemd``, ``launchd``, ``supervisord``, ``gateway_host``, ``unmanaged``), and the fleet
restart (``fleet``) choosing each gateway's kind from a table. Whether a status answer shows a
restart done is ``freshness``'s to judge, without I/O.
"""

from __future__ import annotations

from services.updater.restart.base import RestartOutcome
from services.updater.restart.fleet import KINDS, foreign_units, restart_fleet
from services.updater.restart.gateway_host import prepare_host

__all__ = ["KINDS", "RestartOutcome", "foreign_units", "prepare_host", "restart_fleet"]
