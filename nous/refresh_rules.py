"""The refresh's rules: when an access token is refreshed, and what each failure means.

An account and a clock in, an outcome out; no I/O here. A refusal no later refresh can
change (revoked, reused, unknown client) means the account needs a sign-in; every other
failure (another refusal, a busy or unreachable portal, a token that cannot be read) leaves
the account as it was, to be tried again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nous.access_token import InvalidAccessToken
from nous.portal_errors import PortalBusy, PortalError, PortalRefused

# Refresh this long before expiry, at most (a short-lived token refreshes at 4/5 of its life).
MAX_SKEW = 300.0
SKEW_SHARE = 0.2
# Answers after which the refresh token is of no further use, and what each means to a person
# (the code itself is for scripts: ``needs_sign_in_reason``).
_FINAL_WORDS = {
    "invalid_grant": "the sign-in was revoked or has expired",
    "refresh_token_reused": "the saved sign-in was used twice, so Nous ended it to be safe",
    "invalid_client": "Nous no longer accepts sign-ins from this version",
    "unauthorized_client": "Nous no longer accepts sign-ins from this version",
}
FINAL_ERRORS = frozenset(_FINAL_WORDS)


@dataclass(frozen=True)
class RefreshOutcome:
    result: str  # "refreshed" | "fresh" | "signed_out" | "needs_sign_in" | "failed"
    reason: str | None = None  # a code, never a server's text
    retry_after: float = 0.0
    expires_at: float | None = None


def reason_words(reason: str | None) -> str:
    """Why an account needs a sign-in, in words: never the code, which may be any server's."""
    return _FINAL_WORDS.get(reason or "", "the sign-in lapsed")


def refresh_at(account: dict[str, Any]) -> float:
    """When ``account``'s access token should be refreshed (unix time)."""
    expires_at = float(account.get("expires_at") or 0)
    issued = float(account.get("refreshed_at") or account.get("saved_at") or expires_at)
    skew = min(MAX_SKEW, max(expires_at - issued, 0.0) * SKEW_SHARE)
    return expires_at - skew


def without_refresh(account: dict[str, Any], *, force: bool, now: float) -> RefreshOutcome | None:
    """The outcome when nothing is to be sent for ``account`` (it needs a sign-in, or its token
    is still fresh); None when its token is to be refreshed now."""
    if account.get("needs_sign_in"):
        return RefreshOutcome("needs_sign_in", reason=account.get("needs_sign_in_reason"))
    if not force and now < refresh_at(account):
        return RefreshOutcome("fresh", expires_at=account.get("expires_at"))
    return None


def after_failure(error: PortalError | InvalidAccessToken) -> RefreshOutcome:
    """What a refresh that got no usable token means: "needs_sign_in" only for a refusal no
    later refresh can change, "failed" (to be retried) for everything else."""
    if isinstance(error, PortalRefused):
        return RefreshOutcome("needs_sign_in" if error.error in FINAL_ERRORS else "failed", reason=error.error)
    if isinstance(error, PortalBusy):
        return RefreshOutcome("failed", reason=error.code, retry_after=error.retry_after)
    return RefreshOutcome("failed", reason=error.code)
