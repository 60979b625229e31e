"""The health of an install's gateways: a probe turn for each that answered on its socket,
judged by ``fleet.health``. All of them are asked at once, each within one bound."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from fleet.discovery import GatewayRecord, ask_gateways
from fleet.health import MIN_HEALTHY_SECONDS, PROBE, UNHEALTHY, UNKNOWN, Health, judge
from shared.gateways import ops
from shared.homes import Endpoint
from shared.mesh_hosts import qualified

# A probe turn takes no time of its own: this bound is for a machine busy enough to delay it.
PROBE_TIMEOUT = 3.0


def probe_health(
    records: Iterable[GatewayRecord],
    *,
    expected_sha: str | None = None,
    min_healthy: float = MIN_HEALTHY_SECONDS,
    timeout: float = PROBE_TIMEOUT,
    remote: Mapping[str, Endpoint] | None = None,
) -> dict[tuple[str, int], Health]:
    """(profile, pid) -> the health of each record's gateway; another host's is keyed by its
    qualified profile (``east:coder``), and asked on its endpoint in ``remote`` (by that name).
    One that answered ``status`` on its socket is asked for a probe turn there; one known by its
    state file or the scan alone is ``unknown``: nothing can ask it for a turn."""
    records = list(records)
    asked = {r.profile: r.home for r in records if r.source == "socket" and not r.host}
    on_hosts = {
        name: endpoint
        for r in records
        if r.host and (endpoint := (remote or {}).get(name := qualified(r.host, r.profile))) is not None
    }
    answers, _ = (
        ask_gateways(asked, ops.TURN, PROBE, timeout=timeout, remote=on_hosts) if asked or on_hosts else ({}, set())
    )
    health: dict[tuple[str, int], Health] = {}
    for record in records:
        name = qualified(record.host, record.profile)
        key = (name, record.pid)
        if record.source != "socket":
            health[key] = Health(UNKNOWN, "it did not answer on its socket")
        elif name not in answers:
            health[key] = Health(UNKNOWN, "its socket was gone before its probe turn")
        elif _for_another_profile(answers[name], record.profile):
            health[key] = Health(UNHEALTHY, "its probe turn ran for another profile")
        else:
            health[key] = judge(answers[name], expected_sha=expected_sha, min_healthy=min_healthy)
    return health


def serving_now(profile_homes: Mapping[str, Path], *, timeout: float = PROBE_TIMEOUT) -> dict[str, Health]:
    """profile -> whether its gateway serves a probe turn now, all asked at once: a supervisor's
    liveness check (``fleet.hang``), so no window and any code. One with no socket to ask, or
    whose endpoint lock is free, is unhealthy: nothing there serves turns."""
    answers, _ = ask_gateways(profile_homes, ops.TURN, PROBE, timeout=timeout)
    health: dict[str, Health] = {}
    for profile in profile_homes:
        if profile not in answers:
            health[profile] = Health(UNHEALTHY, "no gateway listens on its socket")
        elif _for_another_profile(answers[profile], profile):
            health[profile] = Health(UNHEALTHY, "its probe turn ran for another profile")
        else:
            health[profile] = judge(answers[profile], expected_sha=None, min_healthy=0.0)
    return health


def _for_another_profile(answer: object, profile: str) -> bool:
    return isinstance(answer, dict) and answer.get("profile") != profile
