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

# Three checks 5 s apart, each bounded at 3 s (fleet.health_probe.PROBE_TIMEOUT): a loop blocked
# for about 15 s is killed; a machine slow enough to miss one probe turn is not.
INTERVAL = 5.0
FAILURES = 3
# A gateway binds its sockets within a second or two of its start; 30 s covers a loaded machine.
START_GRACE = 30.0
MAX_SECONDS = 3600.0  # the longest interval or grace a setting may ask for
MAX_FAILURES = 100


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
