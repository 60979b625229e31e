"""The refresh's rules: when a token is refreshed, and which failures need a sign-in. Pure:
an account and a clock in, an outcome out."""

from __future__ import annotations

import pytest

from nous.access_token import InvalidAccessToken
from nous.portal_errors import (
    PortalBusy,
    PortalInvalidAnswer,
    PortalRefused,
    PortalTLSError,
    PortalUnreachable,
)
from nous.refresh_rules import (
    FINAL_ERRORS,
    MAX_SKEW,
    RefreshOutcome,
    after_failure,
    reason_words,
    refresh_at,
    without_refresh,
)

HOUR = {"saved_at": 1000.0, "refreshed_at": 1000.0, "expires_at": 4600.0}  # due at 4300


def test_refresh_comes_before_expiry_with_a_skew():
    assert refresh_at(HOUR) == 4600.0 - MAX_SKEW
    short = {"refreshed_at": 1000.0, "expires_at": 1010.0}  # a 10 s token refreshes at 8 s
    assert refresh_at(short) == pytest.approx(1008.0)


def test_nothing_is_sent_for_a_lapsed_or_a_fresh_account():
    lapsed = {**HOUR, "needs_sign_in": True, "needs_sign_in_reason": "invalid_grant"}
    assert without_refresh(lapsed, force=True, now=5000.0) == RefreshOutcome("needs_sign_in", reason="invalid_grant")
    assert without_refresh(HOUR, force=False, now=4299.0) == RefreshOutcome("fresh", expires_at=4600.0)


def test_a_due_token_or_a_forced_refresh_is_sent():
    assert without_refresh(HOUR, force=False, now=4300.0) is None
    assert without_refresh(HOUR, force=False, now=9999.0) is None
    assert without_refresh(HOUR, force=True, now=1001.0) is None


@pytest.mark.parametrize("code", sorted(FINAL_ERRORS))
def test_a_refusal_no_later_refresh_can_change_needs_a_sign_in(code):
    assert after_failure(PortalRefused(code, 400)) == RefreshOutcome("needs_sign_in", reason=code)


@pytest.mark.parametrize("code", [*sorted(FINAL_ERRORS), "a_code_from_the_future", None, ""])
def test_why_a_sign_in_is_needed_reads_in_words_never_as_the_code(code):
    words = reason_words(code)
    assert words and "_" not in words and (not code or code not in words)


def test_each_final_refusal_has_words_of_its_own_kind():
    assert reason_words("refresh_token_reused") != reason_words("invalid_grant") != reason_words(None)
    assert reason_words("a_code_from_the_future") == reason_words(None) == "the sign-in lapsed"


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (PortalRefused("temporarily_unavailable", 400), RefreshOutcome("failed", reason="temporarily_unavailable")),
        (PortalRefused("a_code_from_the_future", 401), RefreshOutcome("failed", reason="a_code_from_the_future")),
        (PortalBusy("HTTP 503", status=503, retry_after=7.0), RefreshOutcome("failed", "portal_busy", 7.0)),
        (PortalBusy("HTTP 429", status=429, retry_after=0.0), RefreshOutcome("failed", "portal_busy")),
        (PortalUnreachable("no answer"), RefreshOutcome("failed", reason="portal_unreachable")),
        (PortalTLSError("bad certificate"), RefreshOutcome("failed", reason="tls_failed")),
        (PortalInvalidAnswer("not JSON"), RefreshOutcome("failed", reason="portal_invalid_answer")),
        (InvalidAccessToken("no claims"), RefreshOutcome("failed", reason="invalid_token")),
    ],
)
def test_every_other_failure_is_retried(error, outcome):
    assert after_failure(error) == outcome
