"""Restart-per-kind for the gateways of a gateway host (``fleet.supervisors.host``): one roll
for all of them.

The host's gateways say who runs them (their supervisor is ``gateway_host``). The host is asked
once to ``roll`` every one of them: it starts one new fork server, a fresh interpreter of the
new code, and only once that has imported drains them all and forks each profile's gateway
anew from it. Each is then verified on its own socket, as any restart is (``freshness``). A
roll the host refuses (its new fork server did not import: the old gateways serve on) is every
target's outcome. A host that does not answer at all cannot roll: each gateway is drained over
its own socket instead, and the host, seeing the tree on disk moved, forks its fresh gateway
from a new fork server, never from the one that imported the old code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from fleet.discovery import GatewayRecord
from fleet.supervisors import HOST_KIND
from fleet.supervisors.host import FORKED_SECONDS, PREPARE, READY_SECONDS, ROLL, SERVICE, STATUS
from services.updater.restart.base import (
    WAITS,
    Found,
    RestartOutcome,
    Target,
    Waits,
    accepted_turns,
    control_endpoint,
    each,
    failed,
    join,
    live_gateways,
    nothing_found,
    restart_live,
    wait_for_fresh,
)
from shared import homes
from shared.errors import HermesError
from shared.protocol import UNANSWERED, RemoteError
from shared.transport import NO_RETRY, connect, ipc_unreachable

ROLL_METHOD = "roll"
PREPARE_SECONDS = 1.0  # on the update's path: a host that is slow to say yes is not waited for


def prepare_host(root: Path) -> None:
    """Ask the install's gateway host, if one runs, to start a fork server of the new code now,
    at the commit point: its import then overlaps the completion's start, and the roll finds it
    done. Never raises, and waits little: the roll starts one itself when this did not."""
    endpoint = homes.endpoint(root, SERVICE, create=False)
    if ipc_unreachable(endpoint.control):
        return
    try:
        with connect(endpoint, retry=NO_RETRY) as client:
            client.call(PREPARE, timeout=PREPARE_SECONDS)
    except (HermesError, OSError):  # a RemoteError too: the roll does without
        pass


class GatewayHostKind:
    name = HOST_KIND

    def __init__(self, waits: Waits = WAITS) -> None:
        self.waits = waits

    def find(self, root: Path) -> Found:
        return nothing_found()  # the host is a program of the mesh: its gateways are all there is

    def profile_of(self, name: str) -> str | None:
        return None

    def restart(self, root: Path, batch: Sequence[Target], expected_sha: str | None) -> list[RestartOutcome]:
        gateways = live_gateways(batch)
        endpoint = homes.endpoint(root, SERVICE, create=False)
        try:
            with connect(endpoint, retry=NO_RETRY) as client:
                client.call(STATUS, timeout=self.waits.probe)
        except RemoteError as exc:
            if exc.code not in UNANSWERED:
                why = f"the gateway host refused its status: {exc.code}: {exc.message}"
                return [failed(gateway, ROLL_METHOD, why) for gateway in gateways]
            note = f"the gateway host did not answer ({exc.code}): drained over its own socket"
            outcomes = each(gateways, lambda gateway: restart_live(gateway, expected_sha, self.waits))
            return [replace(outcome, note=join(note, outcome.note)) for outcome in outcomes]
        try:
            with connect(endpoint, retry=NO_RETRY) as client:
                answer = client.call(
                    ROLL,
                    {"profiles": [g.profile for g in gateways], "deadline": self.waits.drain},
                    timeout=READY_SECONDS + self.waits.drain + FORKED_SECONDS + 10,
                )
        except RemoteError as exc:
            why = f"the gateway host's roll failed: {exc.code}: {exc.message}"
            return [failed(gateway, ROLL_METHOD, why) for gateway in gateways]
        rolled = answer.get("profiles", {})
        server = answer.get("fork_server") or {}
        return each(gateways, lambda g: self._verify(g, rolled.get(g.profile, {}), server, expected_sha))

    def _verify(
        self, gateway: GatewayRecord, rolled: Mapping[str, Any], server: Mapping[str, Any], expected_sha: str | None
    ) -> RestartOutcome:
        if "error" in rolled:
            return failed(gateway, ROLL_METHOD, f"the gateway host could not drain it: {rolled['error']}")
        new_pid, reason = wait_for_fresh(
            gateway, control_endpoint(gateway.home), expected_sha, self.waits, reexec=False
        )
        return RestartOutcome(
            profile=gateway.profile,
            supervisor=gateway.supervisor,
            old_pid=gateway.pid,
            new_pid=new_pid,
            method=ROLL_METHOD,
            ok=reason is None,
            reason=reason,
            finished=int(rolled.get("finished", 0)),
            cut=int(rolled.get("cut", 0)),
            accepted=accepted_turns(rolled),
            note=f"rolled by the gateway host onto its new fork server (pid {server.get('pid')})",
        )
