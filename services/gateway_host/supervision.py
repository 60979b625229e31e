"""What the host does when one of its gateways exits: the rule a supervisord program follows.
Pure: the exit code and the gateway's crash history in, a decision out.

- 75 (a planned restart: a drain, an update's) -> start it again at once;
- 0 (a clean stop) and 78 (a broken config, which a restart would not fix) -> it stays down;
- anything else, a signal included, is a crash -> start it again, after the respawn-storm
  delay (``shared.restart_storm``) its recent crashes owe.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared import exit_codes, restart_storm

START = "start"
STAY_DOWN = "stay_down"


@dataclass(frozen=True)
class Decision:
    action: str  # START or STAY_DOWN
    delay: float  # seconds before the start
    crashes: tuple[float, ...]  # the crash history to keep, this exit's included
    reason: str


def after_exit(code: int, crashes: tuple[float, ...], now: float) -> Decision:
    """What to do once a gateway exited with ``code`` at ``now`` (a negative code: killed by
    that signal), given the times of its earlier crashes."""
    kept = tuple(restart_storm.recent(list(crashes), now))
    if code == exit_codes.PLANNED_RESTART:
        return Decision(START, 0.0, kept, "a planned restart")
    if code == exit_codes.OK:
        return Decision(STAY_DOWN, 0.0, kept, "stopped cleanly")
    if code == exit_codes.CONFIG:
        return Decision(STAY_DOWN, 0.0, kept, "its configuration is broken (exit 78)")
    kept += (now,)
    how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
    return Decision(START, restart_storm.delay_for(list(kept), now), kept, f"crashed ({how})")
