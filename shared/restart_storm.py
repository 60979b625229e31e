"""The rule of a respawn storm: a process that keeps dying and being started again backs off.

More than ``MAX_STARTS`` starts within ``WINDOW`` seconds means something is wrong that a
restart will not fix; each further start waits longer (doubling, capped at ``MAX_DELAY``).
Pure: start times in, a delay out. A gateway applies it to its own starts
(``services.gateway.storm``), the gateway host to the crashes of the gateways it runs.
"""

from __future__ import annotations

WINDOW = 120.0
MAX_STARTS = 5
MAX_DELAY = 60.0


def recent(starts: list[float], now: float) -> list[float]:
    """The start times of ``starts`` within the window that ends ``now``."""
    return [t for t in starts if now - WINDOW < t <= now]


def delay_for(starts: list[float], now: float) -> float:
    """Seconds to wait before serving, given the start times in the window (this one included)."""
    excess = len(recent(starts, now)) - MAX_STARTS
    return 0.0 if excess <= 0 else min(MAX_DELAY, float(2 ** (excess - 1)))
