"""The keepalive's schedule: when the auth worker looks at the account again, and how it
backs off after a failed refresh. Pure: outcomes and a clock in, seconds out."""

from __future__ import annotations

from nous.refresh_rules import RefreshOutcome
from services.auth_worker.keepalive import FIRST_RETRY, IDLE, LAST_RETRY, after_refresh, wait_before_refresh

ACCOUNT = {"saved_at": 1000.0, "refreshed_at": 1000.0, "expires_at": 4600.0}  # due at 4300
FAILED = RefreshOutcome("failed", reason="portal_unreachable")


def test_nothing_to_keep_alive_is_looked_at_again_after_the_idle_wait():
    assert wait_before_refresh(None, now=5000.0) == IDLE
    assert wait_before_refresh({**ACCOUNT, "needs_sign_in": True}, now=5000.0) == IDLE


def test_a_token_is_refreshed_when_due_and_looked_at_at_least_every_idle_wait():
    assert wait_before_refresh(ACCOUNT, now=4290.0) == 10.0
    assert wait_before_refresh(ACCOUNT, now=1000.0) == IDLE
    assert wait_before_refresh(ACCOUNT, now=4300.0) <= 0
    assert wait_before_refresh(ACCOUNT, now=9000.0) <= 0


def test_failed_refreshes_back_off_doubling_to_the_cap():
    retry, waits = FIRST_RETRY, []
    for _ in range(9):
        wait, retry = after_refresh(FAILED, retry)
        waits.append(wait)
    assert waits == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, LAST_RETRY, LAST_RETRY, LAST_RETRY] and LAST_RETRY == 300.0


def test_a_failed_refresh_honours_the_portals_retry_after_when_longer():
    assert after_refresh(RefreshOutcome("failed", "portal_busy", retry_after=120.0), 5.0) == (120.0, 10.0)
    assert after_refresh(RefreshOutcome("failed", "portal_busy", retry_after=1.0), 40.0) == (40.0, 80.0)


def test_any_other_outcome_looks_again_at_once_and_starts_the_retries_over():
    for result in ("refreshed", "needs_sign_in", "signed_out", "fresh"):
        assert after_refresh(RefreshOutcome(result), 160.0) == (0.0, FIRST_RETRY)
