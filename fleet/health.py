"""Whether a gateway is healthy: the rule, with no I/O.

A gateway is ``healthy`` when it finished a probe turn (``turn {probe: true}``: the agent's
work as a turn does it, with no provider and no side effect) on the code expected of it, and
its process has run ``min_healthy`` seconds, so no supervisor has restarted it in that time. A
ping proves less: a release whose gateway starts and answers ``status`` can still fail every
turn. ``unhealthy`` names the check it failed; ``unknown`` says why nothing can be told yet (it
did not answer, it is draining, it has not run long enough, it predates probes).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from shared.errors import HermesError
from shared.gateways import ops
from shared.protocol import Code

HEALTHY, UNHEALTHY, UNKNOWN = "healthy", "unhealthy", "unknown"
HEALTH_STATES = (HEALTHY, UNHEALTHY, UNKNOWN)
MIN_HEALTHY_SECONDS = 10.0
MAX_MIN_HEALTHY = 3600.0  # the longest window a command line or config.yaml may ask for
MAX_PARALLEL = 1000  # the largest health-gated wave of an update a command line or config.yaml may ask for
PROBE = {"text": "health probe", "probe": True}

# Answers that say the gateway cannot take a turn now, which is no fault of its code.
_NOT_NOW = frozenset({ops.DRAINING, Code.SHUTTING_DOWN, Code.UNAVAILABLE, Code.BUSY})
# Answers of a gateway whose code has no probe turn.
_PREDATES = frozenset({Code.UNKNOWN_FIELD, Code.UNKNOWN_OP})
# Answers that refuse the asker, not the gateway's fault: a remote key not granted the turn.
_NOT_OURS = frozenset({Code.OP_NOT_GRANTED})


class Health(NamedTuple):
    state: str
    why: str | None = None  # the check that failed, or why nothing can be told yet; None when healthy

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "why": self.why}


def judge(answer: object, *, expected_sha: str | None, min_healthy: float) -> Health:
    """The health a probe turn's ``answer`` shows: its result, or the typed error the call ended
    with. ``expected_sha`` None takes any code."""
    if isinstance(answer, HermesError):  # the service's typed error, or the wire's
        if answer.code == Code.TIMEOUT:
            return Health(UNHEALTHY, "its probe turn did not finish in time")
        if answer.code in _PREDATES:
            return Health(UNKNOWN, "it runs code from before probe turns")
        if answer.code in _NOT_OURS:
            return Health(UNKNOWN, f"this client may not ask it for a turn ({answer.code})")
        if answer.code in _NOT_NOW:
            return Health(UNKNOWN, f"it takes no turn now ({answer.code})")
        return Health(UNHEALTHY, f"its probe turn failed ({answer.code})")
    if not isinstance(answer, dict) or answer.get("probe") is not True:
        return Health(UNHEALTHY, "its answer to a probe turn is not a probe turn's")
    running, up_for = answer.get("code_sha"), answer.get("up_for")
    if not isinstance(running, str) or not running:
        return Health(UNHEALTHY, "its probe turn names no code")
    if expected_sha and running != expected_sha:
        return Health(UNHEALTHY, f"it runs {running[:12]}, not the expected {expected_sha[:12]}")
    if not isinstance(up_for, (int, float)) or isinstance(up_for, bool) or not 0 <= up_for < float("inf"):
        return Health(UNHEALTHY, "its probe turn gives no time it has run")
    if up_for < min_healthy:
        return Health(UNKNOWN, f"up {up_for:.0f} s; healthy after {min_healthy:g} s without a restart")
    return Health(HEALTHY)
