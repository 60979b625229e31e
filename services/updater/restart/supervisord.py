"""Restart-per-kind for the mesh supervisor (supervisord): drain first, bluntly when hung.

A gateway of the mesh is drained over its control socket; it exits 75 and supervisord starts
the new code. The wait for the fresh process ends early once supervisord gives the gateway up
(its retries used up, or an exit that means "do not restart"). A gateway whose control socket
does not answer at all is hung and cannot drain on request: supervisord stops it (SIGTERM,
the gateway's own drain, then SIGKILL after its stop wait) and starts the new code.

The mesh's programs are found through their gateways: only a running one is restarted.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

from services.updater.restart.base import (
    WAITS,
    Found,
    RestartOutcome,
    Target,
    Waits,
    control_endpoint,
    each,
    failed,
    live_gateways,
    nothing_found,
    restart_live,
    wait_for_fresh,
)
from shared.errors import HermesError
from shared.gateways.discovery import GatewayRecord
from shared.supervisors import supervisord


class SupervisordKind:
    name = "supervisord"

    def __init__(self, waits: Waits = WAITS) -> None:
        self.waits = waits

    def find(self, root: Path) -> Found:
        return nothing_found()

    def profile_of(self, name: str) -> str | None:
        return supervisord.profile_of(name)

    def restart(self, root: Path, batch: Sequence[Target], expected_sha: str | None) -> list[RestartOutcome]:
        return each(live_gateways(batch), lambda gateway: self._restart(root, gateway, expected_sha))

    def _restart(self, root: Path, gateway: GatewayRecord, expected_sha: str | None) -> RestartOutcome:
        gave_up = partial(supervisord.gave_up_on, root, gateway.profile)
        blunt = partial(self._through_supervisord, root, gateway, expected_sha)
        return restart_live(gateway, expected_sha, self.waits, gave_up=gave_up, if_hung=blunt)

    def _through_supervisord(
        self, root: Path, gateway: GatewayRecord, expected_sha: str | None, why: str
    ) -> RestartOutcome:
        try:
            unit = supervisord.find(gateway.profile, gateway.home)
            if unit is None:
                return failed(gateway, "drain", f"{why}, and no program of the mesh supervisor runs it")
            supervisord.restart(unit)
        except HermesError as exc:
            return failed(gateway, "drain", f"{why}; supervisord could not restart it: {exc.message}")
        gave_up = partial(supervisord.gave_up_on, root, gateway.profile)
        address = control_endpoint(gateway.home)
        new_pid, reason = wait_for_fresh(gateway, address, expected_sha, self.waits, reexec=False, gave_up=gave_up)
        return RestartOutcome(
            gateway.profile,
            gateway.supervisor,
            gateway.pid,
            new_pid,
            "drain",
            reason is None,
            reason,
            unit=unit.name,
            fallback="blunt",
            note=f"{why}; restarted through supervisord",
        )
