"""Reading an HTTP ``Retry-After`` header: what every client of a remote service honours."""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime


def retry_after_seconds(value: str | None, *, cap: float) -> float:
    """``Retry-After`` as seconds (a number or an HTTP date), at most ``cap``; 0 when absent
    or junk (the caller's own backoff applies then)."""
    if not value:
        return 0.0
    value = value.strip()
    if value.isdigit():
        return min(float(value), cap)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max((when - datetime.now(UTC)).total_seconds(), 0.0), cap)
