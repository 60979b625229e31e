"""How finished sign-ins ended, kept a while after the end.

A client that missed a sign-in's answer (a Ctrl-C that lost to the save, a terminal stopped
while the sign-in finished) asks for it by the sign-in's id, so what it reports is the
worker's own word, never a guess. Kept at most ``MAX_KEPT`` entries and ``KEEP_SECONDS``
each, oldest forgotten first. No clock and no I/O here: the caller passes the time.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

MAX_KEPT = 64
KEEP_SECONDS = 15 * 60.0


class Outcomes:
    def __init__(self, *, cap: int = MAX_KEPT, keep: float = KEEP_SECONDS) -> None:
        self._cap = cap
        self._keep = keep
        self._kept: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()

    def record(self, sign_in_id: str, state: dict[str, Any], now: float) -> None:
        """Keep ``state`` (a terminal state's wire form) as how ``sign_in_id`` ended."""
        self._kept.pop(sign_in_id, None)
        self._kept[sign_in_id] = (now, state)
        self._forget(now)

    def get(self, sign_in_id: str, now: float) -> dict[str, Any] | None:
        """How ``sign_in_id`` ended, or None: still running, never seen, or forgotten."""
        self._forget(now)
        kept = self._kept.get(sign_in_id)
        return None if kept is None else kept[1]

    def __len__(self) -> int:
        return len(self._kept)

    def _forget(self, now: float) -> None:
        while self._kept:
            at, _ = next(iter(self._kept.values()))
            if len(self._kept) <= self._cap and now - at <= self._keep:
                return
            self._kept.popitem(last=False)
