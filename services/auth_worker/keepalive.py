"""The keepalive's schedule: when the auth worker next looks at the account, and how long it
waits after a refresh that failed. Outcomes and a clock in, seconds out; no I/O here (the
loop is the worker's, the refresh itself ``nous.refresh``).
"""

from __future__ import annotations

from typing import Any

from nous.refresh_rules import RefreshOutcome, refresh_at

# How often the keepalive looks at the store when nothing wakes it (another process may sign in).
IDLE = 60.0
# The wait after a failed refresh: doubling from the first to the last.
FIRST_RETRY = 5.0
LAST_RETRY = 300.0


def wait_before_refresh(account: dict[str, Any] | None, *, now: float) -> float:
    """Seconds until ``account``'s token is due, at most ``IDLE``; zero or less: refresh now.
    ``IDLE`` when there is nothing to keep alive (no account, or one that needs a sign-in)."""
    if account is None or account.get("needs_sign_in"):
        return IDLE
    return min(refresh_at(account) - now, IDLE)


def after_refresh(outcome: RefreshOutcome, retry: float) -> tuple[float, float]:
    """``(wait, next retry)`` after a refresh that ran with ``retry`` as the current retry wait:
    a failure waits the retry (or the portal's ``Retry-After``, when longer) and doubles it; any
    other outcome looks again at once, and the retries start over."""
    if outcome.result == "failed":
        return max(retry, outcome.retry_after), min(retry * 2, LAST_RETRY)
    return 0.0, FIRST_RETRY
