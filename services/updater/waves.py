"""The fleet restart in waves, each gated on health: the rules, with no I/O.

The live profiles are cut into waves of ``max_parallel`` (0: one wave of all), in fleet order.
After a wave is restarted, its gate holds until every profile of the wave is healthy
(``fleet.health``: a probe turn on the new commit, after ``min_healthy`` seconds without a
restart), and fails at once on the first that is not: a restart that failed, or a gateway
that is unhealthy. What is neither yet (not up long enough, not answering) is waited for, up
to the gate's deadline. A failed gate stops the rollout: the updater rolls the install back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from fleet.health import HEALTHY, UNHEALTHY, Health
from services.updater.errors import UpdateError

GATE_SLACK = 30.0  # beyond min_healthy: a restarted gateway's start on a busy machine


class GateFailed(UpdateError):
    """A wave of the fleet restart failed its health gate: the rollout stopped there."""

    code = "gate_failed"


class Verdict(NamedTuple):
    passed: bool
    failed: GateFailed | None = None  # set when the gate failed; neither: wait
    waiting_on: str | None = None  # what the gate still waits for, in words


def waves(profiles: Sequence[str], max_parallel: int) -> list[list[str]]:
    """``profiles`` in order, cut into waves of ``max_parallel`` (0: one wave of them all)."""
    if not profiles:
        return []
    size = max_parallel or len(profiles)
    return [list(profiles[i : i + size]) for i in range(0, len(profiles), size)]


def judge_wave(
    wave: int,
    profiles: Sequence[str],
    restarted: Mapping[str, Mapping[str, Any]],
    health: Mapping[str, Health],
    *,
    timed_out: bool,
) -> Verdict:
    """The gate of wave ``wave`` (1-based): ``restarted`` is each profile's restart outcome,
    ``health`` each live gateway's health now; ``timed_out``: its deadline has passed."""
    waiting: list[tuple[str, str]] = []
    for profile in profiles:
        outcome = restarted.get(profile)
        if outcome is not None and not outcome.get("ok"):
            return Verdict(False, _failed(wave, profile, "restart", str(outcome.get("reason") or "its restart failed")))
        seen = health.get(profile)
        if seen is not None and seen.state == UNHEALTHY:
            return Verdict(False, _failed(wave, profile, "turn", str(seen.why)))
        if seen is None or seen.state != HEALTHY:
            waiting.append((profile, str(seen.why) if seen is not None else "no gateway of it answers"))
    if not waiting:
        return Verdict(True)
    if timed_out:
        return Verdict(False, _failed(wave, waiting[0][0], "deadline", waiting[0][1]))
    return Verdict(False, None, "; ".join(f"{profile}: {why}" for profile, why in waiting))


def _failed(wave: int, profile: str, check: str, why: str) -> GateFailed:
    return GateFailed(
        f"wave {wave} failed its gate: {profile}'s {check} check: {why}",
        detail={"wave": wave, "profile": profile, "check": check, "why": why},
    )
