"""When a supervisor kills a gateway that its health checks find hung: the rule, with no I/O.

A supervisor that cannot see into a gateway (supervisord's gateway host, a container engine)
asks it for a probe turn every ``interval`` seconds (``fleet.health``'s rule, with no window: the
question is whether it serves now, not whether it has stayed up). A gateway whose loop is
blocked answers nothing, so its probe turns time out. After ``failures`` unhealthy checks in a
row it is killed, and the supervisor's own restart brings it back; one answered check (healthy,
or ``unknown``: draining, busy, predating probes) ends the run. A gateway still starting is not
judged: until it has passed one check, or for ``start_grace`` seconds after its start, an
unhealthy check does not count, as compose's ``start_period`` counts none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from fleet.health import HEALTHY, UNHEALTHY
from fleet.supervisors.errors import SupervisorError

# Three checks 5 s apart, each bounded at 3 s (fleet.health_probe.PROBE_TIMEOUT): a loop blocked
# for about 15 s is killed; a machine slow enough to miss one probe turn is not.
INTERVAL = 5.0
FAILURES = 3
# A gateway binds its sockets within a second or two of its start; 30 s covers a loaded machine.
START_GRACE = 30.0
MAX_SECONDS = 3600.0
MAX_FAILURES = 100


class HangCheckInvalid(SupervisorError):
    """A hang check's setting (the gateway host's, in ``config.yaml``) out of its range."""

    code = "hang_check_invalid"


class Policy(NamedTuple):
    interval: float = INTERVAL  # 0: no checks
    failures: int = FAILURES
    start_grace: float = START_GRACE

    @property
    def enabled(self) -> bool:
        return self.interval > 0


class Watch(NamedTuple):
    """What the checks of one gateway process have found so far."""

    failures: int = 0  # unhealthy checks in a row
    passed: bool = False  # it passed a check since it started: it is no longer starting

    def to_dict(self) -> dict[str, Any]:
        return {"failures": self.failures, "passed": self.passed}

    @classmethod
    def from_dict(cls, d: object) -> Watch:
        """What ``to_dict`` wrote; anything else is a fresh watch (a lost count only delays a kill)."""
        if not isinstance(d, Mapping):
            return cls()
        failures, passed = d.get("failures"), d.get("passed")
        if type(failures) is not int or failures < 0 or type(passed) is not bool:
            return cls()
        return cls(failures, passed)


def after_check(watch: Watch, state: str, age: float, policy: Policy) -> tuple[Watch, bool]:
    """The watch after a check whose verdict was ``state``, ``age`` seconds after the gateway
    started, and whether to kill it now."""
    if state != UNHEALTHY:
        return Watch(0, watch.passed or state == HEALTHY), False
    if not watch.passed and age < policy.start_grace:
        return watch, False  # still starting: not judged
    failures = watch.failures + 1
    if failures >= policy.failures:
        return Watch(), True  # the next process of it starts afresh
    return Watch(failures, watch.passed), False


def policy_from(settings: Mapping[str, Any], where: str) -> Policy:
    """The policy ``settings`` (``health_interval``, ``health_failures``, ``health_start_grace``)
    ask for, the defaults for what they leave out; ``HangCheckInvalid`` naming the key."""
    interval = _number(settings, "health_interval", INTERVAL, where)
    failures = _number(settings, "health_failures", FAILURES, where)
    start_grace = _number(settings, "health_start_grace", START_GRACE, where)
    if failures != int(failures) or not 1 <= failures <= MAX_FAILURES:
        raise HangCheckInvalid(
            f"{where}.health_failures: a whole number from 1 to {MAX_FAILURES}, not {failures!r}",
            detail={"field": "health_failures"},
        )
    return Policy(float(interval), int(failures), float(start_grace))


def _number(settings: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = settings.get(key, default)
    if (
        isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_SECONDS
    ):  # NaN fails it too
        raise HangCheckInvalid(
            f"{where}.{key}: a number of seconds from 0 to {MAX_SECONDS:g}, not {str(value)[:40]!r}",
            detail={"field": key},
        )
    return float(value)
