"""Restart-per-kind for a gateway nothing supervises: it drains and re-executes itself into the
tree on disk, keeping its pid, since no one else would start it again."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.updater.restart.base import (
    WAITS,
    Found,
    RestartOutcome,
    Target,
    Waits,
    each,
    live_gateways,
    nothing_found,
    restart_live,
)


class UnmanagedKind:
    name = "unmanaged"

    def __init__(self, waits: Waits = WAITS) -> None:
        self.waits = waits

    def find(self, root: Path) -> Found:
        return nothing_found()  # no supervisor to ask: its gateways are all there is

    def profile_of(self, name: str) -> str | None:
        return None

    def restart(self, root: Path, batch: Sequence[Target], expected_sha: str | None) -> list[RestartOutcome]:
        return each(live_gateways(batch), lambda gateway: restart_live(gateway, expected_sha, self.waits, reexec=True))
