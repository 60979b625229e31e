"""Bounded waits: poll a check until it holds or its time is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

POLL = 0.1


def wait_for(check: Callable[[], Any], timeout: float) -> Any:
    """Poll ``check`` until it returns something truthy (returned) or ``timeout`` passes (None)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL)
