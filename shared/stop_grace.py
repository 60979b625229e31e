"""How long a long-running service lets the work in flight finish once it is told to stop
(SIGTERM): a gateway's turns, a worker's calls.

It is the supervisor's to say, since the supervisor kills the process when its own stop timeout
runs out: ``HERMES_STOP_GRACE`` (seconds). Compose and Kubernetes give 30 s, so the image sets
25 (the margin covers the exit after the drain); on a host, where systemd, supervisord and the
gateway host were set for it, the default stays 5.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from shared.errors import HomeError

ENV = "HERMES_STOP_GRACE"
DEFAULT = 5.0
# A stop that waits longer than this is a hang, not a drain.
LIMIT = 3600.0


class StopGraceInvalid(HomeError):
    code = "stop_grace_invalid"


def stop_grace(env: Mapping[str, str]) -> float:
    """The grace ``env`` names; ``DEFAULT`` where it names none."""
    text = env.get(ENV, "").strip()
    if not text:
        return DEFAULT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= LIMIT:  # also refuses nan
        raise StopGraceInvalid(
            f"{ENV} must be a number of seconds from 0 to {LIMIT:g}, not {text!r}",
            detail={"field": ENV, "value": text},
        )
    return seconds
