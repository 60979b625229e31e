"""The token refresh: a new access token before the old one expires, never losing a rotation.

Refresh tokens are single-use: the portal rotates them and treats a second use as theft,
revoking the whole family. So a refresh reads the account, spends its refresh token and
stores the successor inside one hold of the store's lock; a second refresher (another
process, another task) waits, reads the fresh account and finds nothing to do.

A refresh the portal refuses for good (revoked, reused, unknown) marks the account as
needing a sign-in; nothing raises into the caller, and the account's identity stays so
status can say whose sign-in lapsed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nous import portal as portal_api
from nous import store
from nous.access_token import InvalidAccessToken, read_claims
from shared.errors import HermesError

# Refresh this long before expiry, at most (a short-lived token refreshes at 4/5 of its life).
MAX_SKEW = 300.0
SKEW_SHARE = 0.2
# Answers after which the refresh token is of no further use.
FINAL_ERRORS = frozenset({"invalid_grant", "refresh_token_reused", "invalid_client", "unauthorized_client"})


@dataclass(frozen=True)
class RefreshOutcome:
    result: str  # "refreshed" | "fresh" | "signed_out" | "needs_sign_in" | "failed"
    reason: str | None = None  # a code, never a server's text
    retry_after: float = 0.0
    expires_at: float | None = None


def refresh_at(account: dict[str, Any]) -> float:
    """When ``account``'s access token should be refreshed (unix time)."""
    expires_at = float(account.get("expires_at") or 0)
    issued = float(account.get("refreshed_at") or account.get("saved_at") or expires_at)
    skew = min(MAX_SKEW, max(expires_at - issued, 0.0) * SKEW_SHARE)
    return expires_at - skew


def refresh_account(root: Path, *, force: bool = False, now: float | None = None) -> RefreshOutcome:
    """Refresh the install's account if it is due (or ``force``). Blocks, holding the store's
    lock across the request; call it from a worker thread. Never raises."""
    outcome: list[RefreshOutcome] = []

    def change(state: dict[str, Any]) -> dict[str, Any]:
        outcome.append(_refresh_locked(state, force, time.time() if now is None else now))
        return state

    try:
        store.write_shared_nous_state(root, change)
    except (HermesError, OSError) as exc:
        return RefreshOutcome("failed", reason=getattr(exc, "code", type(exc).__name__))
    return outcome[0]


def _refresh_locked(state: dict[str, Any], force: bool, now: float) -> RefreshOutcome:
    """Runs under the store's lock, with ``state`` the store as read there: updates it in place."""
    account = state.get("account")
    if account is None:
        return RefreshOutcome("signed_out")
    if account.get("needs_sign_in"):
        return RefreshOutcome("needs_sign_in", reason=account.get("needs_sign_in_reason"))
    if not force and now < refresh_at(account):
        return RefreshOutcome("fresh", expires_at=account.get("expires_at"))
    try:
        tls = portal_api.tls_context(account.get("ca_bundle"))
        tokens = portal_api.refresh_blocking(account["portal"], tls, account["refresh_token"])
        claims = read_claims(tokens.access_token)
    except portal_api.PortalRefused as exc:
        if exc.error not in FINAL_ERRORS:
            return RefreshOutcome("failed", reason=exc.error)
        account.update(needs_sign_in=True, needs_sign_in_reason=exc.error)
        return RefreshOutcome("needs_sign_in", reason=exc.error)
    except portal_api.PortalBusy as exc:
        return RefreshOutcome("failed", reason=exc.code, retry_after=exc.retry_after)
    except (portal_api.PortalError, InvalidAccessToken) as exc:
        return RefreshOutcome("failed", reason=exc.code)
    if claims.sub != account.get("sub"):
        # A token for someone else is not this account's; keep the old one and say so.
        return RefreshOutcome("failed", reason="account_mismatch")
    account.update(
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        expires_at=now + tokens.expires_in,
        refreshed_at=now,
        email=claims.email,
        tier=claims.tier,
        host=claims.host,
    )
    return RefreshOutcome("refreshed", expires_at=account["expires_at"])
