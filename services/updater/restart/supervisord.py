"""Restart-per-kind for the mesh supervisor (supervisord): drain first, bluntly when hung.

A gateway of the mesh is drained over its control socket and exits 75; the moment its process
has ended, supervisord is asked to start the program (its own ``autorestart`` would come only
at its loop's next wake-up, 1-2 s later; ``fleet.supervisors.supervisord.respawn`` says why),
and an answer that its autorestart got there first is as good. The wait for the fresh process
ends early once supervisord gives the gateway up (its retries used up, or an exit that means
"do not restart"). A gateway whose control socket
does not answer at all is hung and cannot drain on request: supervisord stops it (SIGTERM,
the gateway's own drain, then SIGKILL after its stop wait) and starts the new code.

The mesh's programs are found through their gateways: only a running one is restarted. The
program is the one the mesh config runs the gateway's profile in: a multiplex gateway is
the ``hermes-multiplex`` program, drained over any one of its served sockets (which drains
them all) and started again as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

from fleet.discovery import GatewayRecord
from fleet.supervisors import supervisord
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
from shared.identity import ProcessIdentity


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
        program = _program(gateway)
        gave_up = partial(supervisord.gave_up_on, root, program)
        blunt = partial(self._through_supervisord, root, gateway, expected_sha)
        # The program's process is the gateway itself (supervisord runs it without a wrapper).
        start = None if gateway.start_time is None else partial(self._start, root, program, gateway.start_time, gateway)
        return restart_live(gateway, expected_sha, self.waits, gave_up=gave_up, if_hung=blunt, start=start)

    def _start(self, root: Path, program: str, start_time: int, gateway: GatewayRecord) -> str:
        old = ProcessIdentity(gateway.pid, start_time)
        started = supervisord.start_drained(root, program, old, self.waits.come_back)
        answer = "it started it" if started else "its autorestart had started it already"
        return f"asked supervisord to start {program} once drained: {answer}"

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
        gave_up = partial(supervisord.gave_up_on, root, unit.name)
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


def _program(gateway: GatewayRecord) -> str:
    """The mesh program that runs ``gateway``'s profile, as the mesh config says (a multiplex
    program's set names it, even one left serving that profile alone); its own program's
    name when the config cannot be read."""
    try:
        unit = supervisord.find(gateway.profile, gateway.home)
    except HermesError:
        unit = None
    return unit.name if unit is not None else supervisord.unit_name(gateway.profile)
