"""Restart-per-kind: every gateway of the install onto the new code, drain first.

A supervised gateway (supervisord, systemd, launchd) is drained over its control socket and
exits 75; its supervisor starts a fresh process of the new code. An unmanaged gateway has
no one to start it again, so it drains and re-executes itself into the tree on disk. Either
way the restart is done only when a process answers with the expected code; each gateway
is handled on its own thread, so one gateway's failure never holds up or fails another.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from services.gateway import ops
from services.gateway.fleet import GatewayRecord, discover
from shared import homes
from shared.call_rules import NO_RETRY
from shared.protocol import RemoteError
from shared.sync_client import SyncClient

DRAIN_SECONDS = 30.0
# How long a fresh process has to come up and answer after the old one left.
COME_BACK_SECONDS = 60.0
POLL_INTERVAL = 0.2
MAX_PARALLEL = 8
MANAGED = frozenset({"supervisord", "systemd", "launchd"})


@dataclass(frozen=True)
class RestartOutcome:
    profile: str
    supervisor: str
    old_pid: int
    new_pid: int | None
    method: str  # "drain" (a supervisor restarts it) or "reexec"
    ok: bool
    reason: str | None = None
    finished: int = 0  # turns that finished during the drain
    cut: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def restart_fleet(root: Path, expected_sha: str | None) -> list[RestartOutcome]:
    """Restart every live gateway of the install at ``root``; one outcome per gateway."""
    gateways = [g for g in discover(root, scan=False) if g.state in (ops.RUNNING, ops.DRAINING, ops.STARTING)]
    if not gateways:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(gateways))) as pool:
        return list(pool.map(lambda g: restart_one(root, g, expected_sha), gateways))


def restart_one(root: Path, gateway: GatewayRecord, expected_sha: str | None) -> RestartOutcome:
    """Never raises: whatever goes wrong with one gateway is that gateway's outcome."""
    try:
        return _restart(gateway, expected_sha)
    except Exception as exc:  # isolation: one gateway's fault must not stop the others
        method = "drain" if gateway.supervisor in MANAGED else "reexec"
        return _failed(gateway, method, f"{type(exc).__name__}: {exc}")


def _restart(gateway: GatewayRecord, expected_sha: str | None) -> RestartOutcome:
    managed = gateway.supervisor in MANAGED
    method = "drain" if managed else "reexec"
    address = homes.endpoint(gateway.home, ops.SERVICE, create=False).control
    try:
        with SyncClient(address, retry=NO_RETRY) as client:
            if managed:
                answer = client.call(ops.DRAIN, {"deadline": DRAIN_SECONDS}, timeout=DRAIN_SECONDS + 10)
            else:
                answer = client.call(ops.REEXEC, {"deadline": DRAIN_SECONDS}, timeout=DRAIN_SECONDS + 10)
    except RemoteError as exc:
        return _failed(gateway, method, f"{method} was refused: {exc.code}: {exc.message}")
    new_pid, reason = _wait_for_fresh(gateway, address, expected_sha, reexec=not managed)
    return RestartOutcome(
        profile=gateway.profile,
        supervisor=gateway.supervisor,
        old_pid=gateway.pid,
        new_pid=new_pid,
        method=method,
        ok=reason is None,
        reason=reason,
        finished=len(answer.get("finished", [])),
        cut=len(answer.get("cut", [])),
    )


def _failed(gateway: GatewayRecord, method: str, reason: str) -> RestartOutcome:
    return RestartOutcome(gateway.profile, gateway.supervisor, gateway.pid, None, method, False, reason)


def _wait_for_fresh(
    gateway: GatewayRecord, address: str, expected_sha: str | None, *, reexec: bool
) -> tuple[int | None, str | None]:
    """Poll until a gateway that is not the old process (or, after a re-exec, the same pid
    with the new code) answers as running; the reason it did not, otherwise."""
    deadline = time.monotonic() + COME_BACK_SECONDS
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        try:
            with SyncClient(address, retry=NO_RETRY) as client:
                last = client.call(ops.STATUS, timeout=2.0)
        except RemoteError:
            last = None
        if last and last.get("state") == ops.RUNNING:
            fresh = (last.get("start_time"), last.get("pid")) != (gateway.start_time, gateway.pid)
            if reexec:
                fresh = last.get("code_sha") == expected_sha or fresh
            if fresh:
                if expected_sha and last.get("code_sha") != expected_sha:
                    return last.get("pid"), f"came back on {str(last.get('code_sha'))[:12]}, not the new code"
                return last.get("pid"), None
        time.sleep(POLL_INTERVAL)
    if last is None:
        return None, f"no gateway answered within {COME_BACK_SECONDS:g}s of the restart"
    return last.get("pid"), f"still {last.get('state')} on the old process after {COME_BACK_SECONDS:g}s"
