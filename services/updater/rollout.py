"""The fleet restart as a gated rollout: wave by wave (``waves``), each wave restarted through
its gateways' kinds (``restart.restart_fleet``) and held at its gate until every gateway of it
is healthy; the rollout stops at the first gate that fails, the later waves never touched."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.discovery import discover
from fleet.health import Health
from fleet.health_probe import probe_health
from services.updater.restart import RestartOutcome, restart_fleet
from services.updater.waves import GATE_SLACK, GateFailed, judge_wave, waves
from shared import homes

GATE_POLL = 0.2


@dataclass
class Rollout:
    waves: list[list[str]]
    outcomes: list[RestartOutcome] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # every profile whose gateway a wave restarted
    failed: GateFailed | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "waves": self.waves,
            "moved": self.moved,
            "failed": self.failed.to_dict() if self.failed is not None else None,
        }


def roll_out(
    root: Path,
    expected_sha: str | None,
    profiles: Sequence[str],
    *,
    max_parallel: int,
    min_healthy: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Rollout:
    """Restart ``profiles`` (the live ones, in fleet order) in gated waves, then every other
    profile of the install (a unit whose gateway is down: reported, not started) ungated."""
    rollout = Rollout(waves(profiles, max_parallel))
    for number, wave in enumerate(rollout.waves, 1):
        done = restart_fleet(root, expected_sha, only=wave)
        rollout.outcomes += done
        rollout.moved += [p for p in dict.fromkeys([*wave, *(o.profile for o in done)]) if p not in rollout.moved]
        restarted = {o.profile: o.to_dict() for o in done}
        deadline = clock() + min_healthy + GATE_SLACK
        while True:
            health = _health(root, wave, expected_sha, min_healthy)
            verdict = judge_wave(number, wave, restarted, health, timed_out=clock() >= deadline)
            if verdict.passed:
                break
            if verdict.failed is not None:
                rollout.failed = verdict.failed
                return rollout
            sleep(GATE_POLL)
    others = [p for p in homes.list_profiles(root) if p not in rollout.moved]
    if others:
        rollout.outcomes += restart_fleet(root, expected_sha, only=others)
    return rollout


def _health(root: Path, wave: Sequence[str], expected_sha: str | None, min_healthy: float) -> dict[str, Health]:
    """Each profile of ``wave`` -> its gateway's health now (its best-informed record's)."""
    records = [r for r in discover(root, scan=False) if r.profile in wave]
    judged = probe_health(records, expected_sha=expected_sha, min_healthy=min_healthy)
    health: dict[str, Health] = {}
    for record in records:  # discovery lists a profile's best-informed record first
        health.setdefault(record.profile, judged[(record.profile, record.pid)])
    return health
