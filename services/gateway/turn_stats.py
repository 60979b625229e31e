"""The turn accounting of one served profile: how many turns finished and how long they took,
as the cumulative histogram ``status`` answers (``ops.TURN_LATENCY_BUCKETS``). No I/O, no clock:
the caller times each turn."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from shared.gateways.ops import TURN_LATENCY_BUCKETS

INF = "+Inf"


class TurnStats:
    def __init__(self, bounds: tuple[float, ...] = TURN_LATENCY_BUCKETS) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is above every bound
        self._sum = 0.0
        self.finished = 0
        self.last_seconds: float | None = None

    def observe(self, seconds: float) -> None:
        """Count one finished turn that took ``seconds`` (a negative time, a clock's fault, as 0)."""
        seconds = max(seconds, 0.0)
        self._counts[bisect_left(self._bounds, seconds)] += 1  # a bound is inclusive: le
        self._sum += seconds
        self.finished += 1
        self.last_seconds = seconds

    def to_dict(self) -> dict[str, Any]:
        cumulative, running = [], 0
        for count in self._counts:
            running += count
            cumulative.append(running)
        return {
            "finished": self.finished,
            "last_seconds": None if self.last_seconds is None else round(self.last_seconds, 6),
            "latency": {"le": [*self._bounds, INF], "counts": cumulative, "sum": round(self._sum, 6)},
        }
