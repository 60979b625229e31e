"""Restart-per-kind: every gateway of the install onto the new code, drain first."""

from __future__ import annotations

from services.updater.restart.base import restart_fleet, unit_kinds

__all__ = ["restart_fleet", "unit_kinds"]
